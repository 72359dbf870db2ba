package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// The MoE checks (kernels/moe.cu against kernels/ref/moe.go) at the MoE
// models' shapes (kernels.MoEShapes): the router's top-k, the alignment,
// and the fused decode layer.

// SetMoEShapes replaces the MoE layers the moe checks run at (default
// kernels.MoEShapes: the real models'; the tests take kernels.TinyMoEShapes).
func (v *Verifier) SetMoEShapes(shapes []kernels.MoEShape) { v.moeShapes = shapes }

func (v *Verifier) verifyMoEAll() {
	if !v.wants("moe") {
		return
	}
	shapes := v.moeShapes
	if shapes == nil {
		shapes = kernels.MoEShapes()
	}
	var checks []func()
	for _, m := range shapes {
		for _, tokens := range m.TopKTokens {
			checks = append(checks, func() { v.moeTopKAt(m, tokens) })
		}
		for _, tokens := range m.AlignTokens {
			for _, block := range m.AlignBlockSizes {
				checks = append(checks, func() { v.moeAlignAt(m, tokens, block) })
			}
		}
		if m.DecodeLongOnly && !v.long {
			continue
		}
		for _, tokens := range slices.Compact([]int{1, m.MaxDecodeTokens}) {
			checks = append(checks, func() { v.moeDecodeAt(m, tokens) })
		}
	}
	for _, check := range checks {
		if v.dead == nil { // a fault, or StopAtFirstFailure
			check()
		}
	}
}

// moeTopKAt checks moe_topk over tokens routers' logits: the same experts
// in the same order, each weight within 1e-5 of the twin's (expf and a
// butterfly sum against float64 exp and a serial one).
func (v *Verifier) moeTopKAt(m kernels.MoEShape, tokens int) {
	logits := RandomBF16(v.rng, tokens*m.Experts, 0, 2)
	wantIDs, wantW := make([]int32, tokens*m.TopK), make([]float32, tokens*m.TopK)
	ref.RouterTopK(wantIDs, wantW, logits, tokens, m.Experts, m.TopK, m.Renormalize)
	ids, weights := v.alloc(4*tokens*m.TopK), v.alloc(4*tokens*m.TopK)
	dLogits := v.bf16(logits)
	v.launch(func() error {
		return v.set.MoETopK(v.stream, ids, weights, dLogits, tokens, m.Experts, m.TopK, m.Renormalize)
	})
	shape := fmt.Sprintf("%s tokens=%d experts=%d k=%d renormalize=%v", m.Name, tokens, m.Experts, m.TopK, m.Renormalize)
	gotIDs, gotW := v.getI32(ids, tokens*m.TopK), v.getF32(weights, tokens*m.TopK)
	err := equalBits(gotIDs, wantIDs)
	worst := 0.0
	for i := range gotW {
		d := math.Abs(float64(gotW[i]-wantW[i])) / max(math.Abs(float64(wantW[i])), 1e-30)
		if math.IsNaN(d) || d > worst {
			worst = d
		}
	}
	if err == nil && (worst > 1e-5 || math.IsNaN(worst)) {
		err = fmt.Errorf("a routing weight is %.3g from the twin's (bound 1e-5)", worst)
	}
	v.record("moe_topk", shape, worst, false, err)
}

// moeAlignAt checks moe_align over the slots of tokens tokens routed by a
// real top-k: the padded length and each block's expert exactly, each
// expert's slots as a set (the kernel's atomics order a group as they
// land; the pads follow them).
func (v *Verifier) moeAlignAt(m kernels.MoEShape, tokens, block int) {
	logits := RandomBF16(v.rng, tokens*m.Experts, 0, 2)
	ids, weights := make([]int32, tokens*m.TopK), make([]float32, tokens*m.TopK)
	ref.RouterTopK(ids, weights, logits, tokens, m.Experts, m.TopK, m.Renormalize)
	slots := len(ids)
	wantSorted, wantExperts, wantN := ref.MoEAlign(ids, m.Experts, block)
	capacity := MoEAlignSortedLen(slots, m.Experts, block)
	sorted, expertOf, numPadded := v.alloc(4*capacity), v.alloc(4*kernels.CeilDiv(capacity, block)), v.alloc(4)
	dIDs := v.i32(ids)
	v.launch(func() error {
		return v.set.MoEAlign(v.stream, sorted, expertOf, numPadded, dIDs, slots, m.Experts, block)
	})
	shape := fmt.Sprintf("%s tokens=%d k=%d block=%d", m.Name, tokens, m.TopK, block)
	n := int(v.getI32(numPadded, 1)[0])
	var err error
	switch {
	case n != wantN:
		err = fmt.Errorf("padded to %d slots, want %d", n, wantN)
	default:
		err = errors.Join(equalBits(v.getI32(expertOf, n/block), wantExperts), sameGroups(v.getI32(sorted, n), wantSorted, wantExperts, block))
	}
	v.record("moe_align", shape, 0, true, err)
}

// sameGroups compares two aligned slot lists expert group by expert group
// (the run of blocks of one expert, expertOf) as sets.
func sameGroups(got, want, expertOf []int32, block int) error {
	for b := 0; b < len(expertOf); {
		end := b
		for end < len(expertOf) && expertOf[end] == expertOf[b] {
			end++
		}
		g, w := slices.Clone(got[b*block:end*block]), slices.Clone(want[b*block:end*block])
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			return fmt.Errorf("expert %d's blocks %d..%d hold slots %v, want %v", expertOf[b], b, end-1, g, w)
		}
		b = end
	}
	return nil
}

// moeDecodeAt checks the fused decode layer over tokens tokens routed by
// the twin's top-k among the first ExpertsAllocated experts (weights of
// every expert at Mixtral's or Qwen3-30B-A3B's sizes would not fit the
// emulated device's time; the router's check sees them all).
func (v *Verifier) moeDecodeAt(m kernels.MoEShape, tokens int) {
	experts := min(m.Experts, m.ExpertsAllocated)
	k := min(m.TopK, experts)
	logits := RandomBF16(v.rng, tokens*experts, 0, 2)
	ids, weights := make([]int32, tokens*k), make([]float32, tokens*k)
	ref.RouterTopK(ids, weights, logits, tokens, experts, k, m.Renormalize)
	x := RandomBF16(v.rng, tokens*m.Hidden, 0, 1)
	w13 := RandomBF16(v.rng, experts*2*m.Inter*m.Hidden, 0, 1/math.Sqrt(float64(m.Hidden)))
	w2 := RandomBF16(v.rng, experts*m.Hidden*m.Inter, 0, 1/math.Sqrt(float64(m.Inter)))
	want := make([]uint16, tokens*m.Hidden)
	ref.FusedMoE(want, x, w13, w2, ids, weights, tokens, m.Hidden, m.Inter, experts, k)
	out, act, y := v.poisoned(tokens*m.Hidden), v.poisoned(tokens*k*m.Inter), v.poisoned(tokens*k*m.Hidden)
	dX, dW13, dW2, dIDs, dWeights := v.bf16(x), v.bf16(w13), v.bf16(w2), v.i32(ids), v.f32(weights)
	v.launch(func() error {
		return v.set.MoEDecode(v.stream, out, dX, dW13, dW2, dIDs, dWeights, act, y, tokens, k, m.Hidden, m.Inter)
	})
	rel, err := closeBF16(v.getBF16(out, tokens*m.Hidden), want)
	v.record("moe_decode", fmt.Sprintf("%s tokens=%d k=%d hidden=%d inter=%d (%d experts held)", m.Name, tokens, k, m.Hidden, m.Inter, experts), rel, false, err)
}
