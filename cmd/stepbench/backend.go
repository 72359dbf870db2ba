package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/runner"
)

// backendFlags configure the cuda backend.
type backendFlags struct {
	kernelsDir       string
	disableCUDAGraph bool
}

func (b *backendFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.kernelsDir, "kernels-dir", "", "compile the CUDA kernels from the *.cu files of this directory instead of the embedded ones")
	fs.BoolVar(&b.disableCUDAGraph, "disable-cuda-graph", false, "run decode steps eagerly instead of replaying a captured CUDA graph")
}

// probeGPU says why no GPU is usable, or nil.
func probeGPU() error {
	return errNoCUDABackend
}

var errNoCUDABackend = errors.New("this build has no cuda backend yet")

// openBackend opens the named backend for a run needing est.
func openBackend(device string, flags backendFlags, est runner.MemoryEstimate, stderr io.Writer) (runner.Backend, bench.Environment, error) {
	switch device {
	case "cpu":
		return runner.NewCPU(), hostEnvironment("cpu"), nil
	case "cuda":
		return nil, bench.Environment{}, fmt.Errorf("--device cuda: %w", errNoCUDABackend)
	}
	return nil, bench.Environment{}, usagef("--device: %q is not auto, cuda or cpu", device)
}
