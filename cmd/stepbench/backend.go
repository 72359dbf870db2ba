package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"stepbench/bench/report"
	"stepbench/cuda"
	"stepbench/internal/input"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// backendFlags configure the cuda backend.
type backendFlags struct {
	kernelsDir       string
	disableCUDAGraph bool
	nvrtcPath        string
	cublasPath       string
	kernelVersions   []string
	includeDirs      []string // --include
	ops              []string // --op OP=PATH
	// kv is the layout of the runs' KV cache, for the op libraries' caps
	// (gpu.Options.KV): set by the command from its layout flags; nil for
	// none in particular (verify).
	kv *runner.KVOptions
	// tabled says the runs take the block table's kernels (a paged cache
	// or a ragged batch): the versions reported are resolved for it.
	tabled bool
}

// cacheDType is the runs' cache element type (bf16 without a layout).
func (b backendFlags) cacheDType() kernels.CacheDType {
	if b.kv == nil {
		return kernels.CacheBF16
	}
	return b.kv.DType
}

func (b *backendFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.kernelsDir, "kernels-dir", "", "compile the CUDA kernels from the *.cu files of this directory instead of the embedded ones")
	fs.BoolVar(&b.disableCUDAGraph, "disable-cuda-graph", false, "run decode steps eagerly instead of replaying a captured CUDA graph")
	registerKernelFlag(fs, &b.kernelVersions, "kernel", "")
	registerIncludeFlag(fs, &b.includeDirs)
	registerOpFlag(fs, &b.ops, "op", "")
	registerLibraryFlags(fs, &b.nvrtcPath, &b.cublasPath)
}

// registerOpFlag adds an --op OP=PATH list (repeat or comma-separate).
func registerOpFlag(fs *pflag.FlagSet, dst *[]string, name, what string) {
	fs.StringSliceVar(dst, name, nil, what+"replace an op of the forward pass with a shared library built to include/stepbench_op.h, OP=PATH.so (repeat or comma-separate; ops: "+
		strings.Join(gpu.ReplaceableOps(), ", ")+"); it is checked against the Go twins at the run's shapes before anything is timed, like any non-default kernel")
}

// parseOps reads --op's (or --baseline-op's) items: each op once, each
// library a file that exists.
func parseOps(flag string, items []string) (map[string]string, error) {
	ops, err := gpu.ParseOps(items)
	if err != nil {
		return nil, usagef("%s: %v", flag, err)
	}
	for op, path := range ops {
		abs, err := libraryPath(path)
		if err != nil {
			return nil, usagef("%s %s=%s: %v", flag, op, path, err)
		}
		ops[op] = abs
	}
	return ops, nil
}

// libraryPath is an op library's path as the user means it: a path (a
// bare libmine.so is the file in the current directory, never a name for
// dlopen to search the loader's path for), made absolute, of a regular
// file (links followed: a FIFO, a directory or /dev/zero is refused by
// what it is).
func libraryPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no such file (%s)", abs)
	case err != nil:
		return "", err
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%s, not a library file", input.Kind(st.Mode()))
	}
	return abs, nil
}

// registerIncludeFlag adds --include DIR (repeatable): header directories for NVRTC.
func registerIncludeFlag(fs *pflag.FlagSet, dst *[]string) {
	fs.StringArrayVar(dst, "include", nil, "a directory of headers the kernels may #include (NVRTC's -I; repeat for several, searched in order after --kernels-dir and before a CUDA toolkit's include directory, which is offered when found); the cubin cache key covers every header a source can reach")
}

// checkIncludeDirs refuses an --include that is not a directory.
func checkIncludeDirs(dirs []string) error {
	for _, d := range dirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return usagef("--include: %s is not a directory (%v)", d, err)
		}
	}
	return nil
}

// registerKernelFlag adds a --kernel OP=VERSION list (repeat or comma-separate).
func registerKernelFlag(fs *pflag.FlagSet, dst *[]string, name, what string) {
	fs.StringSliceVar(dst, name, nil, what+"kernel version per op, OP=VERSION (repeat or comma-separate; default the newest the shapes allow, but gemm 1, attn_decode 4, launch 1 and linear 3), or fast: the set the per-launch estimate predicts fastest on Hopper ("+kernels.FastSet().String()+"; a prediction, not measured; OP=VERSION items beside it override it): "+kernelVersionHelp())
}

// kernelVersionHelp lists the ops and their versions for --help.
func kernelVersionHelp() string {
	var parts []string
	for _, op := range kernels.VersionedOps() {
		parts = append(parts, fmt.Sprintf("%s=%v", op, kernels.Versions(op)))
	}
	return strings.Join(parts, ", ")
}

// selection parses the --kernel choices.
func (b *backendFlags) selection() (kernels.Selection, error) {
	sel, err := kernels.ParseSelection(b.kernelVersions)
	if err != nil {
		return nil, usagef("--kernel: %v", err)
	}
	return sel, nil
}

// options are the cuda backend's options from the flags, with the kernel
// versions sel.
func (b *backendFlags) options(sel kernels.Selection) gpu.Options {
	return gpu.Options{KernelsDir: b.kernelsDir, IncludeDirs: b.includeDirs, NVRTCPath: b.nvrtcPath, CublasPath: b.cublasPath,
		DisableGraphs: b.disableCUDAGraph, Kernels: sel, KV: b.kv}
}

// registerLibraryFlags adds --nvrtc and --cublas (explicit library paths).
func registerLibraryFlags(fs *pflag.FlagSet, nvrtcPath, cublasPath *string) {
	fs.StringVar(nvrtcPath, "nvrtc", "", "path of libnvrtc.so to use (default: $STEPBENCH_NVRTC, then the folder $STEPBENCH_CUDA_LIBS, else the newest the driver supports of the loader path, CUDA_HOME, /usr/local/cuda*, Python wheels)")
	fs.StringVar(cublasPath, "cublas", "", "path of libcublas.so to use (default: $STEPBENCH_CUBLAS, then the same search as --nvrtc)")
}

// probeGPU says why no GPU is usable, or nil: a driver, a device, NVRTC and
// cuBLAS are all needed. Without a driver it points to the emulated device.
func probeGPU() error {
	drv, err := cuda.OpenDriver()
	if err != nil {
		return withEmulatorHint(err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return fmt.Errorf("CUDA driver: %w", err)
	}
	if n == 0 {
		return errors.New("the CUDA driver sees no device")
	}
	if _, err := cuda.OpenNVRTC(""); err != nil {
		return fmt.Errorf("no NVRTC: %w", err)
	}
	if _, err := cuda.OpenCublas(""); err != nil {
		return fmt.Errorf("no cuBLAS: %w", err)
	}
	return nil
}

// emulatorHint is what a GPU command says when there is no CUDA driver.
const emulatorHint = "no GPU here? the emulated device runs the GPU path on the CPU: make emu; export STEPBENCH_CUDA_LIBS=$PWD/build/emu"

// noDriverError is a missing CUDA driver; its text points to the emulated
// device when STEPBENCH_CUDA_LIBS is not set already.
type noDriverError struct{ err error }

func (e noDriverError) Error() string {
	if os.Getenv("STEPBENCH_CUDA_LIBS") != "" {
		return e.err.Error()
	}
	return e.err.Error() + "; " + emulatorHint
}

func (e noDriverError) Unwrap() error { return e.err }

// withEmulatorHint is err as a noDriverError.
func withEmulatorHint(err error) error {
	if err == nil {
		return nil
	}
	return noDriverError{err}
}

// emulatedDriver says whether the CUDA driver that opens is the emulated
// device's (cuda/emu).
func emulatedDriver() bool {
	drv, err := cuda.OpenDriver()
	return err == nil && drv.Emulated() != ""
}

// openBackend opens the named backend for a run needing est. The cuda
// backend belongs to the calling goroutine (main's, locked to its thread).
// The kernel versions are resolved for shape before the GPU is touched, so
// that a version the model cannot run is refused at once.
func openBackend(device string, flags backendFlags, shape kernels.ModelShape, est runner.MemoryEstimate, stderr io.Writer) (runner.Backend, report.Environment, error) {
	switch device {
	case "cpu":
		return runner.NewCPU(), hostEnvironment("cpu"), nil
	case "cuda":
		sel, err := flags.selection()
		if err != nil {
			return nil, report.Environment{}, err
		}
		versions, err := sel.ResolveKV(shape, flags.tabled, flags.cacheDType())
		if err != nil {
			return nil, report.Environment{}, usagef("--kernel: %v", err)
		}
		ops, err := parseOps("--op", flags.ops)
		if err != nil {
			return nil, report.Environment{}, err
		}
		if err := probeOpLibraries("--op", ops, flags); err != nil {
			return nil, report.Environment{}, err
		}
		opts := flags.options(sel)
		opts.Ops, opts.Progress = ops, stderr
		be, err := gpu.New(opts)
		if err != nil {
			return nil, report.Environment{}, openFailure("--device cuda", err)
		}
		if err := be.CheckMemory(est); err != nil {
			return nil, report.Environment{}, errors.Join(fmt.Errorf("--device cuda: %w", err), be.Close())
		}
		info := be.Info()
		describeBackend(info, versions, stderr)
		env := cudaEnvironment(info)
		env.KernelVersions = versions
		return be, env, nil
	}
	return nil, report.Environment{}, usagef("--device: %q is not auto, cuda or cpu", device)
}

// describeBackend says on stderr which GPU runs the decode steps how, with
// which kernel versions.
func describeBackend(info gpu.Info, versions string, stderr io.Writer) {
	mode := "replayed CUDA graphs"
	if !info.GraphsEnabled {
		mode = "eager launches (--disable-cuda-graph)"
	}
	fmt.Fprintf(stderr, "stepbench: %s (sm_%d%d), decode steps as %s, kernel versions %s\n", info.Device.Name, info.Device.Major, info.Device.Minor, mode, versions)
	if info.Emulated != "" {
		fmt.Fprintln(stderr, "stepbench: "+report.EmulatedNote)
	}
}

// cudaEnvironment is what a report says about the GPU and its libraries.
// The NVIDIA driver's own version string comes from NVML, not from here.
func cudaEnvironment(info gpu.Info) report.Environment {
	env := hostEnvironment("cuda")
	d := info.Device
	env.GPUName, env.GPUUUID = d.Name, d.UUID
	env.Emulated = info.Emulated
	env.ComputeCapability = fmt.Sprintf("%d.%d", d.Major, d.Minor)
	env.CUDAVersion = cudaVersionString(info.DriverVersion)
	env.NVRTCVersion = fmt.Sprintf("%d.%d", info.NVRTCMajor, info.NVRTCMinor)
	env.CUBLASVersion = cublasVersionString(info.CublasVersion)
	env.GPUMemoryBytes = d.TotalMemBytes
	env.SMCount, env.MemoryBusWidthBits = d.SMCount, d.MemBusWidthBits
	env.MaxSMClockMHz = float64(d.ClockKHz) / 1000
	env.MemoryClockMHz = float64(d.MemClockKHz) / 1000
	return env
}

// cudaVersionString prints cuDriverGetVersion's 13000 as "13.0".
func cudaVersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// cublasVersionString prints 120903 as "12.9.3".
func cublasVersionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// openFailure is the error of a cuda backend that did not open: a kernel
// source that does not compile is that compile error alone (file, line,
// NVRTC's message; exit 1), whatever wrapped it; anything else is wrapped
// as what.
func openFailure(what string, err error) error {
	var ce *kernels.CompileError
	if errors.As(err, &ce) {
		return ce
	}
	if input.IsBad(err) { // a refused input (an op library's ABI or caps), not a GPU's failure
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
