package estimate

import (
	"fmt"
	"strings"

	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// Shape is one step: the prefill of Batch prompts of Len tokens, or the
// decode step of Batch sequences that hold Len tokens each.
type Shape struct {
	Phase string `json:"phase"` // runner.PhasePrefill or runner.PhaseDecode
	Batch int    `json:"batch"`
	Len   int    `json:"len"`
}

// String is the shape as the tables name it.
func (s Shape) String() string {
	if s.Phase == runner.PhasePrefill {
		return fmt.Sprintf("prefill %d × %d", s.Batch, s.Len)
	}
	return fmt.Sprintf("decode B=%d, KV %d", s.Batch, s.Len)
}

// Launch is one launch of the step and its estimate.
type Launch struct {
	Index int    `json:"index"`
	Op    string `json:"op"`   // the engine's op (qkv_proj, attention, ...)
	Call  string `json:"call"` // the backend op that launched it
	Entry string `json:"entry"`
	// Version is the op version that runs it ("linear=4", "gemm=1"), ""
	// for a kernel of one version.
	Version      string  `json:"version,omitempty"`
	Grid         [3]int  `json:"grid"`
	Block        int     `json:"block"`
	SharedBytes  int     `json:"shared_bytes"`
	HBMBytes     float64 `json:"hbm_bytes"`
	L2Bytes      float64 `json:"l2_reread_bytes"`
	FLOPs        float64 `json:"flops"`
	SmemCycles   float64 `json:"smem_cycles"` // SM-cycles of ldmatrix traffic, summed over SMs
	Bound        string  `json:"bound"`       // hbm, l2, mma, smem or latency
	KernelSec    float64 `json:"kernel_seconds"`
	GapSec       float64 `json:"gap_seconds"`
	Programmatic bool    `json:"programmatic,omitempty"` // a programmatic edge from its predecessor: the gap less PDLSaving
	TimeSec      float64 `json:"seconds"`
}

// Step is one step's launches and their sums.
type Step struct {
	Shape    Shape    `json:"shape"`
	Launches []Launch `json:"launches"`
	Total    Totals   `json:"total"`
	// Captured: a decode step, replayed as a CUDA graph (node gaps).
	Captured bool `json:"captured"`
}

// Totals are the sums over a step's launches.
type Totals struct {
	Launches     int     `json:"launches"`
	Programmatic int     `json:"programmatic_edges"`
	HBMBytes     float64 `json:"hbm_bytes"`
	L2Bytes      float64 `json:"l2_reread_bytes"`
	FLOPs        float64 `json:"flops"`
	SmemCycles   float64 `json:"smem_cycles"`
	KernelSec    float64 `json:"kernel_seconds"`
	GapSec       float64 `json:"gap_seconds"`
	TimeSec      float64 `json:"seconds"`
}

// Sum adds up the launches.
func Sum(ls []Launch) Totals {
	t := Totals{Launches: len(ls)}
	for _, l := range ls {
		if l.Programmatic {
			t.Programmatic++
		}
		t.HBMBytes += l.HBMBytes
		t.L2Bytes += l.L2Bytes
		t.FLOPs += l.FLOPs
		t.SmemCycles += l.SmemCycles
		t.KernelSec += l.KernelSec
		t.GapSec += l.GapSec
		t.TimeSec += l.TimeSec
	}
	return t
}

// Options are what else the step runs under.
type Options struct {
	Kernels kernels.Selection
	KV      runner.KVOptions
}

// Estimate runs shape's step of cfg on the cuda backend's planner for g
// under opt and prices every launch it makes.
func Estimate(cfg runner.Config, g GPU, shape Shape, opt Options) (Step, error) {
	if shape.Batch < 1 || shape.Len < 1 {
		return Step{}, fmt.Errorf("estimate %s: batch and length must be positive", shape)
	}
	if cfg.Quantization != nil {
		return Step{}, fmt.Errorf("estimate %s: FP8 weights are not modelled yet (the planner does not plan cuBLASLt's FP8 products)", shape)
	}
	if _, err := opt.Kernels.ResolveKV(cfg.KernelShape(), opt.KV.Paged(), opt.KV.DType); err != nil {
		return Step{}, fmt.Errorf("estimate %s: --kernel: %w", shape, err)
	}
	t := &tracer{}
	be, err := gpu.NewPlanner(opt.Kernels, g.SMs, t.planned)
	if err != nil {
		return Step{}, err
	}
	t.Backend = be
	seqs := make([]runner.SeqSpec, shape.Batch)
	var lens []int
	for b := range seqs {
		seqs[b].Prompt = shape.Len
	}
	if shape.Phase == runner.PhaseDecode {
		lens = make([]int, shape.Batch)
		for b := range lens {
			lens[b] = shape.Len
		}
	} else if shape.Phase != runner.PhasePrefill {
		return Step{}, fmt.Errorf("estimate: phase %q is not prefill or decode", shape.Phase)
	}
	err = runner.TraceStep(cfg, t, seqs, lens, opt.KV, func(op string) { t.op, t.on = op, true })
	if err != nil {
		return Step{}, fmt.Errorf("estimate %s: %w", shape, err)
	}
	st := Step{Shape: shape, Captured: shape.Phase == runner.PhaseDecode}
	for i, r := range t.records {
		l := price(g, r, opt.Kernels)
		l.Index = i
		edge := i > 0 && r.planned.Programmatic && t.records[i-1].planned.Triggers
		gap := g.LaunchGap
		if st.Captured {
			gap = g.NodeGap
		}
		if edge {
			gap -= min(g.PDLSaving, gap)
			l.Programmatic = true
		}
		l.GapSec = gap
		l.TimeSec = l.KernelSec + l.GapSec
		st.Launches = append(st.Launches, l)
	}
	st.Total = Sum(st.Launches)
	return st, nil
}

// price costs one planned launch.
func price(g GPU, r record, sel kernels.Selection) Launch {
	p := r.planned
	l := Launch{Op: r.op, Call: p.Op, Entry: p.Entry, Version: versionOf(p, sel),
		Grid: [3]int{int(p.Grid.X), int(p.Grid.Y), int(p.Grid.Z)}, Block: int(p.Block.X), SharedBytes: p.SharedBytes}
	if !r.first {
		l.HBMBytes = r.cost.tailBytes
	} else {
		l.HBMBytes, l.FLOPs = r.cost.bytes, r.cost.flops
		if strings.HasPrefix(p.Entry, "gemv") && l.Grid[0] > 1 {
			l.L2Bytes = float64(l.Grid[0]-1) * r.cost.xBytes
		}
		if r.cost.attn != nil && r.cost.attn.SeqLen > 1 {
			l.L2Bytes, l.SmemCycles = prefillTraffic(p.Entry, *r.cost.attn, g)
		}
	}
	// A grid of fewer blocks than SMs gets that share of the chip.
	share := 1.0
	if blocks := l.Grid[0] * l.Grid[1] * l.Grid[2]; !p.Library && blocks < g.SMs {
		share = float64(blocks) / float64(g.SMs)
	}
	times := []struct {
		bound string
		sec   float64
	}{
		{"hbm", l.HBMBytes / (g.HBMRate * share)},
		{"l2", (l.HBMBytes + l.L2Bytes) / (g.L2Rate * share)},
		{"mma", l.FLOPs / (g.MatrixRate * share)},
		{"smem", l.SmemCycles / (float64(g.SMs) * share * g.Clock)},
	}
	best := times[0]
	for _, t := range times[1:] {
		if t.sec > best.sec {
			best = t
		}
	}
	l.Bound, l.KernelSec = best.bound, best.sec+g.Ramp
	if l.KernelSec < g.MinKernel {
		l.Bound, l.KernelSec = "latency", g.MinKernel
	}
	return l
}

// versionOf names the op version that runs a launch: the family's
// (kernels.Families), the selection's linear version for the GEMVs that
// several versions share, the gemm version for a library product.
func versionOf(p gpu.PlannedLaunch, sel kernels.Selection) string {
	if p.Library {
		return fmt.Sprintf("%s=%d", kernels.OpGemm, sel.GemmVersion())
	}
	f, ok := familyOf(p.Entry)
	if !ok || f.Op == "" {
		return ""
	}
	if f.Op == kernels.OpLinear {
		if v, err := sel.LinearVersion(8); err == nil {
			return fmt.Sprintf("%s=%d", f.Op, v)
		}
	}
	return fmt.Sprintf("%s=%d", f.Op, f.Version)
}

func familyOf(entry string) (kernels.Family, bool) {
	for _, f := range kernels.Families() {
		for _, e := range f.EntryPoints() {
			if e == entry {
				return f, true
			}
		}
	}
	return kernels.Family{}, false
}

// prefillTraffic is a prefill attention launch's L2 re-reads and shared-
// memory cycles: each block of q query rows (w warps of 16 rows) reads its
// kv head's K and V up to its last row's position in 64-key tiles, from L2
// past the first block; every warp reads, per tile, its 16 Q rows and the
// tile's 64 K and 64 V rows from shared memory (ldmatrix, the 72
// LDSM.x4 per warp and tile at D = 128). attn_prefill 1 (CUDA cores) has
// no such count: its cycles are 0.
func prefillTraffic(entry string, a runner.AttnShape, g GPU) (l2, cycles float64) {
	rows, warps := 0, 0
	switch {
	case strings.HasPrefix(entry, "attn_prefill_tc"):
		rows, warps = kernels.PrefillTCQueryTile, kernels.PrefillTCQueryTile/16
	case strings.HasPrefix(entry, "attn_prefill3"), strings.HasPrefix(entry, "attn_prefill4"), strings.HasPrefix(entry, "attn_prefill5"):
		rows, warps = kernels.PrefillV3QueryTile, kernels.PrefillV3QueryTile/16
	default:
		return 0, 0
	}
	const keyTile = 64
	D, elem := float64(a.HeadDim), float64(a.Cache.Bytes())
	var kvKeys, tiles float64 // keys read by all blocks of one head; warp-tiles of one head
	for b := 0; b < a.Batch; b++ {
		q, L := a.SeqLen, a.StartPos+a.SeqLen
		if a.Ragged() {
			q, L = a.QLens[b], a.SeqLens[b]
		}
		for start := 0; start < q; start += rows {
			keys := L - q + min(start+rows, q)
			kvKeys += float64(keys)
			tiles += float64(warps * kernels.CeilDiv(keys, keyTile))
		}
	}
	H, KV := float64(a.Heads), float64(a.KVHeads)
	read := H * kvKeys * 2 * D * elem
	l2 = max(0, read-float64(a.KVTokens())*KV*2*D*elem)
	perWarpTile := (16*D + 2*keyTile*D) * 2 // bf16 in shared memory (FP8 widened)
	return l2, H * tiles * perWarpTile / g.SharedBytesPerClock
}
