package estimate

import (
	"encoding/json"
	"fmt"

	"stepbench/bench/internal/files"

	"stepbench/bench/roofline"
	"stepbench/runner"
)

// Shapes are the steps of the lists: for each batch size and length, the
// prefill of the prompts and the decode step over them.
func Shapes(batches, lens []int) []Shape {
	var out []Shape
	for _, b := range batches {
		for _, n := range lens {
			out = append(out, Shape{runner.PhasePrefill, b, n}, Shape{runner.PhaseDecode, b, n})
		}
	}
	return out
}

// Build estimates every shape; label names the selection as the user gave
// it (Report.Kernels).
func Build(cfg runner.Config, g GPU, shapes []Shape, opt Options, label string) (Report, error) {
	versions, err := opt.Kernels.ResolveKV(cfg.KernelShape(), opt.KV.Paged(), opt.KV.DType)
	if err != nil {
		return Report{}, fmt.Errorf("estimate: --kernel: %w", err)
	}
	r := Report{Label: Label, Model: cfg.Name, GPU: g, Constants: g.Constants(), Kernels: label, Versions: versions, KV: opt.KV.String()}
	peaks, err := roofline.LookupPreset(g.Name)
	if err != nil {
		return Report{}, fmt.Errorf("estimate: %w", err)
	}
	for _, sh := range shapes {
		st, err := Estimate(cfg, g, sh, opt)
		if err != nil {
			return Report{}, err
		}
		floor, err := Floor(cfg, peaks, sh, opt.KV)
		if err != nil {
			return Report{}, err
		}
		r.Steps = append(r.Steps, st)
		r.Floors = append(r.Floors, floor)
	}
	return r, nil
}

// Floor is the step's floor at the preset's datasheet peaks: the cost
// model's bytes and FLOPs, max(bytes / bandwidth, FLOPs / bf16 rate), as
// the roofline's floors (derived).
func Floor(cfg runner.Config, p roofline.Preset, sh Shape, kv runner.KVOptions) (float64, error) {
	var c runner.StepCost
	var err error
	if sh.Phase == runner.PhasePrefill {
		seqs := make([]runner.SeqSpec, sh.Batch)
		for b := range seqs {
			seqs[b].Prompt = sh.Len
		}
		c, err = runner.PrefillCostSeqs(cfg, 0, seqs, kv)
	} else {
		lens := make([]int, sh.Batch)
		for b := range lens {
			lens[b] = sh.Len
		}
		c, err = runner.DecodeCostSeqs(cfg, 0, lens, kv)
	}
	if err != nil {
		return 0, fmt.Errorf("estimate %s: floor: %w", sh, err)
	}
	return max(c.Bytes/p.PeakBytesPerSec, c.FLOPs/p.PeakFLOPsPerSec), nil
}

// WriteJSONFile writes the report as indented JSON to path, atomically.
func WriteJSONFile(path string, r Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	if err := files.WriteAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write the estimate %s: %w", path, err)
	}
	return nil
}
