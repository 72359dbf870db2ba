package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"stepbench/bench/report"
	"stepbench/cuda"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// registerQuantization adds --quantization.
func registerQuantization(fs *pflag.FlagSet, dst *string) {
	fs.StringVar(dst, "quantization", "", "fp8: quantize the projections to FP8 E4M3 while loading dummy or bf16 weights "+
		"(a scale per fused matrix, activations quantized dynamically per tensor); an FP8 checkpoint's own scheme (its quantization_config) needs no flag")
}

// applyQuantization sets cfg's scheme from --quantization: fp8 quantizes a
// bf16 model at load; an FP8 checkpoint keeps the scheme its files declare.
func applyQuantization(cfg runner.Config, flag string) (runner.Config, error) {
	switch flag {
	case "":
		return cfg, nil
	case runner.MethodFP8:
		if cfg.Quantization == nil {
			cfg.Quantization = runner.QuantizeAtLoad()
		}
		return cfg, nil
	}
	return cfg, usagef("--quantization: %q is not supported (fp8)", flag)
}

// checkFP8Device refuses, before any weight loads, an FP8 model on a GPU
// without FP8 GEMMs or with widths cuBLASLt's FP8 GEMM cannot take.
func checkFP8Device(be runner.Backend, cfg runner.Config) error {
	g, ok := be.(*gpu.Backend)
	if !ok || cfg.Quantization == nil {
		return nil
	}
	if err := g.CheckFP8(); err != nil {
		return fmt.Errorf("--device cuda: %w", err)
	}
	if err := gpu.FP8Widths(cfg.KernelShape()); err != nil {
		return usageError{err}
	}
	return nil
}

// checkFP8Arch refuses an FP8 model on --device cuda when the first GPU
// is below compute capability 8.9, before the backend opens: its kernels
// compile first (a minute and more where the cubin cache is cold). Where no
// driver or device opens, openBackend says why.
func checkFP8Arch(device string, cfg runner.Config) error {
	if device != "cuda" || cfg.Quantization == nil {
		return nil
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		return nil
	}
	props, err := drv.Props(0)
	if err != nil {
		return nil
	}
	if err := gpu.CheckFP8Device(props); err != nil {
		return fmt.Errorf("--device cuda: %w", err)
	}
	return nil
}

// weightsLabel says what the loaded weights are, for the load line.
func weightsLabel(cfg runner.Config, est runner.MemoryEstimate) string {
	if cfg.Quantization != nil {
		return report.Bytes(est.WeightBytes) + ", FP8 E4M3 projections"
	}
	return report.Bytes(est.WeightBytes) + " bf16"
}
