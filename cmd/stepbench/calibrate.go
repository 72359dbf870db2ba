package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/spf13/pflag"

	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/bench/telemetry/nvml"
	"stepbench/cuda"
	"stepbench/runner/gpu"
)

// registerCalibrateFlags adds calibrate's flags (the sizes default to a GPU's).
func registerCalibrateFlags(fs *pflag.FlagSet, opt *gpu.CalibrateOptions, emu gpu.CalibrateOptions, force *bool, copyMiB *int, cacheDir, cublasPath *string) {
	fs.IntVar(&opt.Ordinal, "device-ordinal", 0, "CUDA device to measure")
	fs.BoolVar(force, "force", false, "measure again even when a calibration of this GPU is cached")
	fs.IntVar(copyMiB, "copy-mib", opt.CopyBytes>>20, fmt.Sprintf("MiB per device-to-device copy (%d on the emulated device)", emu.CopyBytes>>20))
	fs.IntVar(&opt.GEMMSize, "gemm-size", opt.GEMMSize, fmt.Sprintf("n of the n×n×n cuBLAS bf16 GEMM (%d on the emulated device)", emu.GEMMSize))
	fs.IntVar(&opt.Repeats, "repeats", opt.Repeats, fmt.Sprintf("timed runs of each measurement, the median is kept (%d on the emulated device)", emu.Repeats))
	fs.StringVar(cacheDir, "cache-dir", "", "where calibrations are cached (default: <user cache dir>/stepbench/calibration)")
	fs.StringVar(cublasPath, "cublas", "", "path of libcublas.so to use")
	registerOneRank(fs, "calibrate")
}

// calibrateCmd measures the roofline ceilings of a GPU and caches them per
// UUID. Its sizes fit the device: the emulated device gets small ones
// (gpu.EmulatedCalibrateOptions) unless the flags say otherwise. It shows
// each run as stderr's status and stops at the next run on SIGINT or
// SIGTERM (exit 130, nothing cached).
func calibrateCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("calibrate", stderr)
	opt := gpu.DefaultCalibrateOptions()
	force, copyMiB := false, 0
	var cacheDir, cublasPath string
	emu := gpu.EmulatedCalibrateOptions()
	registerCalibrateFlags(fs, &opt, emu, &force, &copyMiB, &cacheDir, &cublasPath)
	var stepTimeout stepTimeoutFlag
	stepTimeout.register(fs, "calibrate")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if copyMiB < 1 || opt.GEMMSize < 16 || opt.Repeats < 1 {
		return usagef("--copy-mib, --gemm-size (>= 16) and --repeats must be positive")
	}
	if err := stepTimeout.check(); err != nil {
		return err
	}
	opt.CopyBytes = copyMiB << 20
	drv, err := cuda.OpenDriver()
	if err != nil {
		return fmt.Errorf("needs a GPU: %w", withEmulatorHint(err))
	}
	if n, err := drv.DeviceCount(); err != nil || opt.Ordinal >= n || opt.Ordinal < 0 {
		return fmt.Errorf("needs a GPU: device %d of %d (%v)", opt.Ordinal, n, err)
	}
	if drv.Emulated() != "" {
		fitEmulated(fs, &opt, emu)
	}
	props, err := drv.Props(opt.Ordinal)
	if err != nil {
		return err
	}
	emulated := drv.Emulated() != ""
	if !force {
		if c, err := roofline.LoadCalibration(cacheDir, props.UUID); err == nil {
			printCalibration(stdout, c, "cached; --force to measure again", emulated)
			return nil
		}
	}
	blas, err := cuda.OpenCublas(cublasPath)
	if err != nil {
		return fmt.Errorf("needs cuBLAS: %w", err)
	}
	in := newInterruption() // before the line below, which tells a test it may interrupt
	defer in.stop()
	defer watchSteps("calibrate", stepTimeout.resolveFLOPs(2*math.Pow(float64(opt.GEMMSize), 3), emulated), stderr, nil)()
	fmt.Fprintf(stderr, "stepbench: calibrating %s (%s): %d MiB copy and %d³ bf16 GEMM, %d runs each\n",
		props.Name, props.UUID, opt.CopyBytes>>20, opt.GEMMSize, opt.Repeats)
	stderr = newProgressLine(stderr, false)
	defer statusOf(stderr).Status("")
	opt.Context, opt.Progress = in.ctx, func(msg string) { statusOf(stderr).Status("stepbench: calibrating: " + msg) }
	res, err := gpu.Calibrate(drv, blas, opt)
	if sig := in.signal(); sig != nil && errors.Is(err, context.Canceled) {
		return exitError{exitInterrupted, fmt.Errorf("%v: %w; nothing was cached", sig, err)}
	}
	if err != nil {
		return err
	}
	c, err := roofline.NewCalibration(res.UUID, res.DeviceName, int64(res.CopyBytes), res.CopySeconds, res.GEMMSize, res.GEMMSeconds)
	if err != nil {
		return err
	}
	if res.FP8GEMMSeconds != nil {
		if err := c.AddFP8GEMM(res.FP8GEMMSeconds); err != nil {
			return err
		}
	}
	if m, err := nvml.Open(props.UUID); err == nil {
		c.SMClockMHz = m.Read().SMClockMHz
		m.Close()
	}
	path, err := roofline.SaveCalibration(cacheDir, c)
	if err != nil {
		return err
	}
	printCalibration(stdout, c, "saved to "+path, emulated)
	return nil
}

// fitEmulated takes emu's sizes for the flags not given.
func fitEmulated(fs *pflag.FlagSet, opt *gpu.CalibrateOptions, emu gpu.CalibrateOptions) {
	if !fs.Changed("copy-mib") {
		opt.CopyBytes = emu.CopyBytes
	}
	if !fs.Changed("gemm-size") {
		opt.GEMMSize = emu.GEMMSize
	}
	if !fs.Changed("repeats") {
		opt.Repeats = emu.Repeats
	}
	opt.Warmup = emu.Warmup
}

// printCalibration prints a calibration's figures at the precision their
// size needs (report.SI), under the emulated note when the emulated device
// measured them.
func printCalibration(w io.Writer, c roofline.Calibration, note string, emulated bool) {
	if emulated {
		fmt.Fprintln(w, report.EmulatedNote)
	}
	fmt.Fprintf(w, "%s %s (%s, %s)\n", c.GPUName, c.GPUUUID, c.MeasuredAt, note)
	fmt.Fprintf(w, "  device-to-device copy: %s (read+write, median of %d, %d MiB)\n",
		report.SI(c.CopyBytesPerSec, "B/s"), len(c.CopySeconds), c.CopyBytes>>20)
	fmt.Fprintf(w, "  cuBLAS bf16 GEMM %d³:   %s (median of %d)\n", c.GEMMSize, report.SI(c.GEMMFLOPsPerSec, "FLOP/s"), len(c.GEMMSeconds))
	fmt.Fprintf(w, "  ridge: %.3g FLOP/byte\n", c.GEMMFLOPsPerSec/c.CopyBytesPerSec)
	if c.FP8GEMMFLOPsPerSec > 0 {
		fmt.Fprintf(w, "  cuBLASLt FP8 GEMM %d³: %s (E4M3 in, bf16 out, median of %d; the ceiling of FP8 models' GEMMs)\n",
			c.GEMMSize, report.SI(c.FP8GEMMFLOPsPerSec, "FLOP/s"), len(c.FP8GEMMSeconds))
	}
}
