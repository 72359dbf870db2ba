package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench/estimate"
	"stepbench/kernels"
	"stepbench/runner"
)

// estimateFlags are roofline --estimate's own flags.
type estimateFlags struct {
	on       bool
	launches bool
	jsonOut  string
	kernels  []string
}

func registerEstimateFlags(fs *pflag.FlagSet) *estimateFlags {
	f := &estimateFlags{}
	fs.BoolVar(&f.on, "estimate", false, "instead of the floors, the per-launch ESTIMATE of each step (docs/kernel.md's model as code): the prefill of --batch-size × --input-len and the decode step over it, every launch the cuda backend would make (its planner: the same launch code) with its HBM bytes, L2 re-reads, FLOPs, shared-memory cycles, gap and time; --gpu h100-sxm or h200")
	fs.BoolVar(&f.launches, "launches", true, "with --estimate: print every launch (false: the per-op sums and totals only)")
	fs.StringVar(&f.jsonOut, "json-out", "", "with --estimate: also write the estimate (every launch, the constants and their sources) as JSON to this file")
	registerKernelFlag(fs, &f.kernels, "kernel", "with --estimate: ")
	return f
}

// check refuses the estimate's flags without --estimate, and with it the
// floors' flags it does not model (one GPU, uniform batches).
func (f *estimateFlags) check(fs *pflag.FlagSet) error {
	if f.on {
		for _, name := range []string{"tp-size", "ops", "context-lens", "kv-fill"} {
			if fs.Changed(name) {
				return usagef("--%s: not with --estimate (it models one GPU's uniform batches)", name)
			}
		}
		return nil
	}
	for _, name := range []string{"launches", "json-out", "kernel"} {
		if fs.Changed(name) {
			return usagef("--%s: only with --estimate", name)
		}
	}
	return nil
}

// run prints (and writes) the estimate of the shapes' steps.
func (f *estimateFlags) run(stdout io.Writer, cfg runner.Config, gpuName, format string, kv runner.KVOptions, sh shapeFlags) error {
	g, err := estimate.LookupGPU(gpuName)
	if err != nil {
		return usagef("--gpu: %v", err)
	}
	sel, err := kernels.ParseSelection(f.kernels)
	if err != nil {
		return usagef("--kernel: %v", err)
	}
	label := sel.String()
	rep, err := estimate.Build(cfg, g, estimate.Shapes(sh.batch, sh.input), estimate.Options{Kernels: sel, KV: kv}, label)
	if err != nil {
		return err
	}
	if f.jsonOut != "" {
		if err := estimate.WriteJSONFile(f.jsonOut, rep); err != nil {
			return fmt.Errorf("--json-out: %w", err)
		}
	}
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	estimate.WriteHeader(stdout, rep)
	for i, st := range rep.Steps {
		if f.launches {
			if err := estimate.WriteLaunches(stdout, st); err != nil {
				return err
			}
		}
		if err := estimate.WriteByOp(stdout, st, rep.Floors[i]); err != nil {
			return err
		}
	}
	return nil
}
