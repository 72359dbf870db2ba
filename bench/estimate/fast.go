package estimate

import (
	"errors"
	"fmt"

	"stepbench/kernels"
	"stepbench/runner"
)

// FastShapes are the steps kernels.FastSet is chosen for: issue 33's
// Llama-3-8B metrics on one GPU, decode at batch 1 and 32 over 1k keys
// and the prefill of 1 × 1024.
func FastShapes() []Shape {
	return []Shape{{runner.PhaseDecode, 1, 1024}, {runner.PhaseDecode, 32, 1024}, {runner.PhasePrefill, 1, 1024}}
}

// SearchedOps are the ops whose versions Fastest tries. The others are
// fixed: attention's and rope_kv_write's by the KV layout (the paged
// default runs the block table's versions only), and gemm's because the
// model prices cuBLAS and cuBLASLt alike (a library product at the
// matrix rate): only a GPU can tell them apart.
var SearchedOps = []string{kernels.OpLinear, kernels.OpLaunch, kernels.OpArgmax}

// Fastest is the selection of SearchedOps' versions whose summed time
// over shapes is the least by the estimate, under kv; a tie keeps the
// default (the version an empty selection runs). Selections the shapes
// refuse are skipped.
func Fastest(cfg runner.Config, g GPU, shapes []Shape, kv runner.KVOptions) (kernels.Selection, float64, error) {
	var best kernels.Selection
	bestSec := 0.0
	for _, sel := range candidates(SearchedOps) {
		if _, err := sel.ResolveKV(cfg.KernelShape(), kv.Paged(), kv.DType); err != nil {
			continue
		}
		sec := 0.0
		for _, sh := range shapes {
			st, err := Estimate(cfg, g, sh, Options{Kernels: sel, KV: kv})
			if err != nil {
				return nil, 0, fmt.Errorf("fastest: %s: %w", sel, err)
			}
			sec += st.Total.TimeSec
		}
		if best == nil || sec < bestSec*(1-1e-9) {
			best, bestSec = sel, sec
		}
	}
	if best == nil {
		return nil, 0, errors.New("fastest: no selection runs these shapes")
	}
	return best, bestSec, nil
}

// candidates are every combination of ops' versions, the empty selection
// (the defaults) first; a version equal to the default is left unchosen,
// so that combinations that run the same kernels are one.
func candidates(ops []string) []kernels.Selection {
	out := []kernels.Selection{{}}
	for _, op := range ops {
		var next []kernels.Selection
		for _, base := range out {
			next = append(next, base)
			for _, v := range kernels.Versions(op) {
				if v == defaultVersion(op) {
					continue
				}
				sel := kernels.Selection{}
				for k, x := range base {
					sel[k] = x
				}
				sel[op] = v
				next = append(next, sel)
			}
		}
		out = next
	}
	return out
}

// defaultVersion is the version of op an empty selection runs at
// Llama-3-8B's widths (the linear and launch defaults are not the newest).
func defaultVersion(op string) int {
	switch op {
	case kernels.OpLinear:
		v, _ := kernels.Selection{}.LinearVersion(8)
		return v
	case kernels.OpLaunch:
		return kernels.Selection{}.LaunchVersion()
	case kernels.OpArgmax:
		v, _ := kernels.Selection{}.ArgmaxVersion(8)
		return v
	}
	return 0
}
