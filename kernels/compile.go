// Package kernels holds the CUDA C sources of every GPU operation of the
// forward pass (embedded *.cu files, header-free so that NVRTC 11.8 and later
// compile them), the step that compiles them with NVRTC into cached cubins,
// and typed Go wrappers that check arguments and launch them. Each kernel has
// a plain-Go twin in kernels/ref with the same semantics.
package kernels

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"stepbench/cuda"
)

//go:embed *.cu
var embeddedSources embed.FS

// CommonSource is the helper file prepended to every other source; it is not
// compiled on its own.
const CommonSource = "common.cu"

// Sources returns the embedded sources, or the *.cu files of dir when dir != ""
// (--kernels-dir), keyed by file name.
func Sources(dir string) (map[string]string, error) {
	var fsys fs.FS = embeddedSources
	where := "embedded kernels"
	if dir != "" {
		fsys = os.DirFS(dir)
		where = dir
	}
	names, err := fs.Glob(fsys, "*.cu")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", where, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("list %s: no *.cu files", where)
	}
	srcs := make(map[string]string, len(names))
	for _, name := range names {
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read kernel source %s: %w", filepath.Join(where, name), err)
		}
		srcs[name] = string(text)
	}
	if _, ok := srcs[CommonSource]; !ok {
		return nil, fmt.Errorf("kernel sources in %s: %s is missing", where, CommonSource)
	}
	return srcs, nil
}

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

// compileOptions are the NVRTC options for arch (e.g. 90 → sm_90). Fast math
// stays off: the kernels must match kernels/ref within bf16 rounding.
func compileOptions(arch int) []string {
	return []string{
		fmt.Sprintf("--gpu-architecture=sm_%d", arch),
		"-std=c++17",
		"-default-device",
		"-lineinfo",
		"--ptxas-options=-v",
	}
}

// translationUnit prepends common.cu to src; #line directives keep NVRTC's
// diagnostics pointing at the right file and line.
func translationUnit(common, name, src string) string {
	return fmt.Sprintf("#line 1 %q\n%s\n#line 1 %q\n%s", CommonSource, common, name, src)
}

// compilerID names the compiler a cubin came from: NVRTC's version and, for
// stepbench's emulated NVRTC (whose "cubin" is a host shared object), its
// description, so that real and emulated cubins never share a cache entry.
type compilerID struct {
	major, minor int
	emulated     string // cuda.NVRTC.Emulated(); "" for a real NVRTC
}

func nvrtcID(n *cuda.NVRTC) compilerID {
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
// NVRTC version (and emulator description) and arch. A failed compile returns NVRTC's log (file:line).
func Compile(n *cuda.NVRTC, srcs map[string]string, arch int, cacheDir string) ([]Compiled, error) {
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
	opts := compileOptions(arch)
	var names []string
	for name := range srcs {
		if name != CommonSource {
			names = append(names, name)
		}
	}
	slices.Sort(names)

	out := make([]Compiled, 0, len(names))
	for _, name := range names {
		unit := translationUnit(common, name, srcs[name])
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

var (
	ptxasEntryRe = regexp.MustCompile(`Compiling entry function '([^']+)'`)
	ptxasPropsRe = regexp.MustCompile(`Function properties for (\S+)`)
	// The stack-frame line is indented under "Function properties": NVRTC
	// prefixes it with "ptxas         .", nvcc with spaces only.
	ptxasSpillRe = regexp.MustCompile(`^(?:ptxas\s*\.)?\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	ptxasUsedRe  = regexp.MustCompile(`Used (\d+) registers((?:, [^,]+)*)`)
	// The parts after "Used N registers": "used 1 barriers" (CUDA 12+),
	// "128 bytes smem", "380 bytes cmem[0]", "64 bytes cumulative stack size".
	ptxasBarriersRe = regexp.MustCompile(`^used (\d+) barriers?$`)
	ptxasSmemRe     = regexp.MustCompile(`^(\d+) bytes smem$`)
)

// ParsePtxasReport reads ptxas -v lines from an NVRTC log, in the wording of
// CUDA 11.x:
//
//	ptxas info    : Compiling entry function 'add_rmsnorm' for 'sm_90'
//	ptxas info    : Function properties for add_rmsnorm
//	ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//	ptxas info    : Used 30 registers, 128 bytes smem, 380 bytes cmem[0]
//
// and of CUDA 12 and later, which adds the barrier count before smem:
//
//	ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]
//
// Entry functions and non-inlined device functions each get one entry (the
// latter without registers, which ptxas reports per entry only), in order of
// first appearance.
func ParsePtxasReport(log string) ([]KernelResources, error) {
	var report []KernelResources
	index := map[string]int{}
	at := func(name string) *KernelResources {
		i, ok := index[name]
		if !ok {
			i = len(report)
			index[name] = i
			report = append(report, KernelResources{Kernel: name})
		}
		return &report[i]
	}
	var entry, props string // the entry being compiled; the function whose properties follow
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := ptxasSpillRe.FindStringSubmatch(line); m != nil {
			name := props
			if name == "" {
				name = entry // older ptxas prints the line right after the entry
			}
			if name == "" {
				return nil, fmt.Errorf("ptxas report: spill line before any function: %q", line)
			}
			r := at(name)
			r.SpillStoreBytes = atoiOrZero(m[2])
			r.SpillLoadBytes = atoiOrZero(m[3])
			continue
		}
		if !strings.HasPrefix(line, "ptxas") {
			continue
		}
		if m := ptxasEntryRe.FindStringSubmatch(line); m != nil {
			entry, props = m[1], ""
			at(entry)
			continue
		}
		if m := ptxasPropsRe.FindStringSubmatch(line); m != nil {
			props = m[1]
			continue
		}
		if m := ptxasUsedRe.FindStringSubmatch(line); m != nil {
			if entry == "" {
				return nil, fmt.Errorf("ptxas report: register line before any entry function: %q", line)
			}
			r := at(entry)
			r.Registers = atoiOrZero(m[1])
			r.Barriers, r.SharedBytes = 0, 0
			for _, part := range strings.Split(strings.TrimPrefix(m[2], ", "), ", ") {
				part = strings.TrimSpace(part)
				if b := ptxasBarriersRe.FindStringSubmatch(part); b != nil {
					r.Barriers = atoiOrZero(b[1])
				} else if s := ptxasSmemRe.FindStringSubmatch(part); s != nil {
					r.SharedBytes = atoiOrZero(s[1])
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ptxas report: %w", err)
	}
	return report, nil
}

// atoiOrZero parses digits the regular expressions already matched ("" → 0).
func atoiOrZero(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return v
}
