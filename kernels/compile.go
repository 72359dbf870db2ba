package kernels

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"stepbench/internal/input"
)

// Compiled is one source compiled for one architecture.
type Compiled struct {
	Name   string // source file name, e.g. "norm.cu"
	Cubin  []byte
	Log    string            // NVRTC's log, ptxas resource lines included
	Report []KernelResources // parsed from Log
	// FromCache says the cubin came from the cache; CacheKey is its entry.
	FromCache bool
	CacheKey  string
	// Rebuilt, when set, says why the cache entry was discarded and the
	// source compiled again (a corrupted entry), for the user to see.
	Rebuilt string
}

// KernelResources is ptxas's resource report for one function. Spills mean
// registers did not suffice: the compile test fails on any.
type KernelResources struct {
	Kernel          string
	Registers       int
	SpillStoreBytes int
	SpillLoadBytes  int
	SharedBytes     int // static shared memory; dynamic shared is set at launch
	StackBytes      int // the stack frame ptxas reports (local memory per thread)
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
	fmt.Fprintf(h, "stepbench-cubin-v2\x00%d.%d\x00sm_%d\x00%s\x00", compiler.major, compiler.minor, arch, strings.Join(opts, "\x00"))
	if compiler.emulated != "" {
		fmt.Fprintf(h, "emulated\x00%s\x00", compiler.emulated)
	}
	h.Write([]byte(unit))
	return hex.EncodeToString(h.Sum(nil))
}

// keyOptions are the options a cache key covers: all but the -I
// directories, which matter only through the headers the unit reaches in
// them, and those (their paths and contents, and the ones not found) are in
// the key (headerDigest). So a --kernels-dir overlay of one file, its
// directory first on the include path, shares every cubin but its own.
func keyOptions(opts []string) []string {
	var out []string
	for _, o := range opts {
		if !strings.HasPrefix(o, "-I") {
			out = append(out, o)
		}
	}
	return out
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
// NVRTC version (and emulator description) and arch, each entry with its
// checksum (see cacheEntry): an entry that fails it is discarded and the
// source compiled again (Compiled.Rebuilt says so). A failed compile
// returns NVRTC's log (file:line).
func Compile(n Compiler, srcs map[string]string, arch int, cacheDir string) ([]Compiled, error) {
	return Build{Arch: arch, CacheDir: cacheDir}.Compile(n, srcs)
}

// Build is how the kernels compile: for which architecture, into which
// cubin cache (DefaultCacheDir when ""), and with which header directories
// (NVRTC's -I, in order). The cache key of each source covers the content
// of every header it can reach through them (see headerDigest).
type Build struct {
	Arch int
	// Specific compiles the architecture-specific target (sm_90a for 90).
	Specific bool
	CacheDir string
	Include  []string
	// OnCompile, when set, is told before each source the cache cannot
	// serve is compiled: its name, and how many sources were looked at
	// (done, including this one) of total. A cached source says nothing.
	OnCompile func(name string, done, total int)
}

// Options are the NVRTC options: CompileOptions (for sm_XYa with
// Specific) and one -I per directory.
func (b Build) Options() []string {
	opts := CompileOptions(b.Arch)
	if b.Specific {
		opts[0] = "--gpu-architecture=" + Arch{b.Arch, true}.String()
	}
	for _, d := range b.Include {
		opts = append(opts, "-I"+d)
	}
	return opts
}

// Compile is the package's Compile with b's headers.
func (b Build) Compile(n Compiler, srcs map[string]string) ([]Compiled, error) {
	if _, ok := srcs[CommonSource]; !ok {
		return nil, fmt.Errorf("compile kernels: %s is missing", CommonSource)
	}
	var err error
	if b.CacheDir, err = cacheDirOrDefault(b.CacheDir); err != nil {
		return nil, err
	}
	var names []string
	for name := range srcs {
		if name != CommonSource {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	out := make([]Compiled, 0, len(names))
	for i, name := range names {
		onCompile := b.OnCompile
		if onCompile != nil {
			b.OnCompile = func(name string, _, _ int) { onCompile(name, i+1, len(names)) }
		}
		c, err := b.compileCached(n, srcs, name, false)
		b.OnCompile = onCompile
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Rebuild discards the cache entry of a cubin that was served from the
// cache but does not load (why says how it failed) and compiles its source
// again, once. The backend calls it; Compile's checksum catches the rest.
func Rebuild(n Compiler, srcs map[string]string, c Compiled, arch int, cacheDir string, why string) (Compiled, error) {
	return Build{Arch: arch, CacheDir: cacheDir}.Rebuild(n, srcs, c, why)
}

// Rebuild is the package's Rebuild with b's headers.
func (b Build) Rebuild(n Compiler, srcs map[string]string, c Compiled, why string) (Compiled, error) {
	var err error
	if b.CacheDir, err = cacheDirOrDefault(b.CacheDir); err != nil {
		return Compiled{}, err
	}
	path := entryPath(b.CacheDir, c.CacheKey)
	os.Remove(path)
	again, err := b.compileCached(n, srcs, c.Name, true)
	if err != nil {
		return Compiled{}, err
	}
	again.Rebuilt = fmt.Sprintf("the cached cubin %s of %s did not load (%s): discarded and compiled again", path, c.Name, why)
	return again, nil
}

func cacheDirOrDefault(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	return DefaultCacheDir()
}

// compileCached compiles one source, from the cache unless fresh.
func (b Build) compileCached(n Compiler, srcs map[string]string, name string, fresh bool) (Compiled, error) {
	arch, cacheDir, opts := b.Arch, b.CacheDir, b.Options()
	unit := TranslationUnit(srcs[CommonSource], name, srcs[name])
	headers, err := headerDigest(unit, b.Include)
	if err != nil {
		return Compiled{}, fmt.Errorf("compile %s: %w", name, err)
	}
	key := cacheKey(unit+headers, keyOptions(opts), nvrtcID(n), arch)
	c := Compiled{Name: name, CacheKey: key}
	var why error
	if !fresh {
		c.Cubin, c.Log, why = readCache(cacheDir, key)
		c.FromCache = why == nil
	}
	if !c.FromCache {
		if why != nil && !errors.Is(why, os.ErrNotExist) {
			os.Remove(entryPath(cacheDir, key))
			c.Rebuilt = fmt.Sprintf("the cache entry %s of %s was discarded (%v) and the source compiled again", entryPath(cacheDir, key), name, why)
		}
		if b.OnCompile != nil {
			b.OnCompile(name, 1, 1)
		}
		c.Cubin, c.Log, err = n.Compile(unit, name, opts)
		if err != nil {
			return Compiled{}, newCompileError(name, arch, c.Log, err)
		}
		// The cache only saves time: a read-only cache directory must not stop a run.
		_ = writeCache(cacheDir, key, c.Cubin, c.Log)
	}
	report, err := ParsePtxasReport(c.Log)
	if err != nil {
		return Compiled{}, fmt.Errorf("compile %s for sm_%d: %w", name, arch, err)
	}
	c.Report = report
	return c, nil
}

// A cache entry is one file, KEY.entry, replaced atomically: a first line
// naming the format, a second line with the lengths of the log and the
// cubin and the sha256 of the key, the log and the cubin, then the log and
// the cubin. The checksum catches a truncated, garbled or swapped entry
// before its bytes reach cuModuleLoadData (a truncated cubin made the
// driver read past its end, a SIGSEGV; random bytes in its code ran).
const (
	entryMagic = "stepbench-cubin-entry/v2"
	// maxEntryBytes bounds an entry read back (our cubins are under 4 MB).
	maxEntryBytes = 256 << 20
)

type entryHeader struct {
	Key        string `json:"key"`
	LogBytes   int    `json:"log_bytes"`
	CubinBytes int    `json:"cubin_bytes"`
	SHA256     string `json:"sha256"`
}

func entryPath(dir, key string) string { return filepath.Join(dir, key+".entry") }

// entrySum is the checksum of an entry.
func entrySum(key, log string, cubin []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", entryMagic, key, len(log))
	h.Write([]byte(log))
	h.Write(cubin)
	return hex.EncodeToString(h.Sum(nil))
}

// encodeEntry is the bytes of the entry of key.
func encodeEntry(key string, cubin []byte, log string) []byte {
	header, _ := json.Marshal(entryHeader{Key: key, LogBytes: len(log), CubinBytes: len(cubin), SHA256: entrySum(key, log, cubin)})
	out := append([]byte(entryMagic+"\n"), header...)
	out = append(out, '\n')
	out = append(out, log...)
	return append(out, cubin...)
}

// decodeEntry checks an entry of key and returns its cubin and log.
func decodeEntry(key string, data []byte) ([]byte, string, error) {
	magic, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || string(magic) != entryMagic {
		return nil, "", errors.New("not a cache entry of this stepbench")
	}
	line, body, ok := bytes.Cut(rest, []byte("\n"))
	var h entryHeader
	if !ok || json.Unmarshal(line, &h) != nil {
		return nil, "", errors.New("its header does not parse")
	}
	switch {
	case h.Key != key:
		return nil, "", fmt.Errorf("it is the entry of another key, %.16s", h.Key)
	case h.LogBytes < 0 || h.CubinBytes <= 0 || int64(h.LogBytes)+int64(h.CubinBytes) != int64(len(body)):
		return nil, "", fmt.Errorf("it holds %d bytes, its header says %d + %d (truncated?)", len(body), h.LogBytes, h.CubinBytes)
	}
	log, cubin := string(body[:h.LogBytes]), body[h.LogBytes:]
	if entrySum(key, log, cubin) != h.SHA256 {
		return nil, "", errors.New("its checksum does not match (corrupted)")
	}
	return cubin, log, nil
}

// readCache returns the cached cubin and log of key: an error wrapping
// os.ErrNotExist when there is none, another when the entry is corrupt.
func readCache(dir, key string) ([]byte, string, error) {
	data, err := input.ReadFile(entryPath(dir, key), maxEntryBytes, "a cubin cache entry")
	if err != nil {
		return nil, "", err
	}
	return decodeEntry(key, data)
}

// writeCache stores one entry atomically (a temporary file and a rename),
// so a reader never sees half of it; concurrent writers of one key (two
// processes compiling at once) each rename a whole file.
func writeCache(dir, key string, cubin []byte, log string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cubin cache %s: %w", dir, err)
	}
	return writeAtomic(entryPath(dir, key), encodeEntry(key, cubin, log))
}

// StoreCache writes c into the cache under c.CacheKey with a valid
// checksum, whatever its cubin: for tests of a cubin that does not load.
func StoreCache(cacheDir string, c Compiled) error {
	return writeCache(cacheDir, c.CacheKey, c.Cubin, c.Log)
}

// WriteAtomic writes data to path whole: a temporary file beside it, then a
// rename, so that a reader never sees part of it (the cubin cache's
// entries, runner/gpu's tuned GEMM choices).
func WriteAtomic(path string, data []byte) error { return writeAtomic(path, data) }

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
