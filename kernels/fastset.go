package kernels

// SetFast is the one word --kernel takes for the best-estimated set of
// versions (FastSet): `--kernel fast`, alone or before explicit choices
// that override it (`--kernel fast,launch=1`).
const SetFast = "fast"

// fastKey marks a selection made with SetFast: Fast reports it, String and
// ResolveKV name it, so every report records that the set was asked for.
// It is no op's name, so no version lookup ever sees it.
const fastKey = "set:" + SetFast

// FastSet is the versions --kernel fast chooses: those the per-launch
// estimate (bench/estimate, `stepbench roofline --estimate`) predicts
// fastest in sum over Llama-3-8B's decode at batch 1 and 32 over 1k keys
// and its 1 × 1024 prefill on an H200, on the default paged layout
// (estimate.Fastest over linear, launch and argmax; TestFastSetIsTheBestEstimated
// holds the two to each other). A PREDICTION: no GPU has measured it, and
// the defaults stay as they are until one does. launch=2 needs compute
// capability 9.0 (Hopper): elsewhere `--kernel fast` is refused as
// launch=2 is.
func FastSet() Selection {
	return Selection{OpLinear: 4, OpLaunch: LaunchProgrammatic, fastKey: 1}
}

// Fast reports whether the selection was made with --kernel fast.
func (s Selection) Fast() bool { return s[fastKey] == 1 }

// addFast adds FastSet's versions of the ops not chosen explicitly.
func (s Selection) addFast() {
	for op, v := range FastSet() {
		if _, chosen := s[op]; !chosen {
			s[op] = v
		}
	}
}
