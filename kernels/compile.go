package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Compiled is one source compiled for one architecture.
type Compiled struct {
	Name   string // source file name, e.g. "norm.cu"
	Cubin  []byte
	Log    string            // NVRTC's log, ptxas resource lines included
	Report []KernelResources // parsed from Log
}

// KernelResources is ptxas's resource report for one function. Spills mean
// registers did not suffice: the compile test fails on any.
type KernelResources struct {
	Kernel          string
	Registers       int
	SpillStoreBytes int
	SpillLoadBytes  int
	SharedBytes     int // static shared memory; dynamic shared is set at launch
	Barriers        int // named barriers used (reported by CUDA 12+ ptxas only)
}

// MinArch is the oldest architecture the kernels compile for (sm_80,
// Ampere): bf16 mma.sync and cp.async need it.
const MinArch = 80

// CompileOptions are the NVRTC options for arch (e.g. 90 → sm_90). Fast math
// stays off: the kernels must match kernels/ref within bf16 rounding.
func CompileOptions(arch int) []string {
	return []string{
		fmt.Sprintf("--gpu-architecture=sm_%d", arch),
		"-std=c++17",
		"-default-device",
		"-lineinfo",
		"--ptxas-options=-v",
	}
}

// TranslationUnit prepends common.cu to src; #line directives keep NVRTC's
// diagnostics pointing at the right file and line.
func TranslationUnit(common, name, src string) string {
	return fmt.Sprintf("#line 1 %q\n%s\n#line 1 %q\n%s", CommonSource, common, name, src)
}

// compilerID names the compiler a cubin came from: NVRTC's version and, for
// stepbench's emulated NVRTC (whose "cubin" is a host shared object), its
// description, so that real and emulated cubins never share a cache entry.
type compilerID struct {
	major, minor int
	emulated     string // cuda.NVRTC.Emulated(); "" for a real NVRTC
}

// Compiler is NVRTC as Compile needs it; *cuda.NVRTC is one. Behind this
// interface the compile step needs no cgo, and tests can count compiles.
type Compiler interface {
	// Compile compiles one translation unit named name with opts into a
	// cubin and returns it with the compiler's log.
	Compile(unit, name string, opts []string) (cubin []byte, log string, err error)
	Version() (major, minor int)
	// Emulated describes stepbench's emulated NVRTC ("" for a real one).
	Emulated() string
}

func nvrtcID(n Compiler) compilerID {
	major, minor := n.Version()
	return compilerID{major: major, minor: minor, emulated: n.Emulated()}
}

// cacheKey identifies a cubin: same text, options, compiler and arch, same bits.
func cacheKey(unit string, opts []string, compiler compilerID, arch int) string {
	h := sha256.New()
	fmt.Fprintf(h, "stepbench-cubin-v1\x00%d.%d\x00sm_%d\x00%s\x00", compiler.major, compiler.minor, arch, strings.Join(opts, "\x00"))
	if compiler.emulated != "" {
		fmt.Fprintf(h, "emulated\x00%s\x00", compiler.emulated)
	}
	h.Write([]byte(unit))
	return hex.EncodeToString(h.Sum(nil))
}

// DefaultCacheDir is os.UserCacheDir()/stepbench/cubin.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cubin cache directory: %w", err)
	}
	return filepath.Join(base, "stepbench", "cubin"), nil
}

// Compile compiles every source but common.cu for arch (e.g. 80, 90) with
// NVRTC into one cubin per source, in file-name order. Cubins are cached in
// cacheDir (DefaultCacheDir when ""), keyed by sha256 of the source, options,
// NVRTC version (and emulator description) and arch. A failed compile
// returns NVRTC's log (file:line).
func Compile(n Compiler, srcs map[string]string, arch int, cacheDir string) ([]Compiled, error) {
	common, ok := srcs[CommonSource]
	if !ok {
		return nil, fmt.Errorf("compile kernels: %s is missing", CommonSource)
	}
	if cacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cacheDir = dir
	}
	compiler := nvrtcID(n)
	opts := CompileOptions(arch)
	var names []string
	for name := range srcs {
		if name != CommonSource {
			names = append(names, name)
		}
	}
	slices.Sort(names)

	out := make([]Compiled, 0, len(names))
	for _, name := range names {
		unit := TranslationUnit(common, name, srcs[name])
		key := cacheKey(unit, opts, compiler, arch)
		cubin, log, hit := readCache(cacheDir, key)
		if !hit {
			var err error
			cubin, log, err = n.Compile(unit, name, opts)
			if err != nil {
				return nil, fmt.Errorf("compile %s for sm_%d: %w\n%s", name, arch, err, strings.TrimSpace(log))
			}
			// The cache only saves time: a read-only cache directory must not stop a run.
			_ = writeCache(cacheDir, key, cubin, log)
		}
		report, err := ParsePtxasReport(log)
		if err != nil {
			return nil, fmt.Errorf("compile %s for sm_%d: %w", name, arch, err)
		}
		out = append(out, Compiled{Name: name, Cubin: cubin, Log: log, Report: report})
	}
	return out, nil
}

func readCache(dir, key string) (cubin []byte, log string, ok bool) {
	cubin, err := os.ReadFile(filepath.Join(dir, key+".cubin"))
	if err != nil || len(cubin) == 0 {
		return nil, "", false
	}
	logBytes, err := os.ReadFile(filepath.Join(dir, key+".log"))
	if err != nil {
		return nil, "", false
	}
	return cubin, string(logBytes), true
}

// writeCache stores the log first and the cubin last, each by rename, so a
// reader never sees a cubin without its log or a half-written file.
func writeCache(dir, key string, cubin []byte, log string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cubin cache %s: %w", dir, err)
	}
	if err := writeAtomic(filepath.Join(dir, key+".log"), []byte(log)); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, key+".cubin"), cubin)
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, writeErr := tmp.Write(data)
	closeErr := tmp.Close()
	if err := errors.Join(writeErr, closeErr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
