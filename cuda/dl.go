package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"stepbench/cuda/libdir"
)

// library is one dlopen'd shared object.
type library struct {
	handle unsafe.Pointer
	path   string // what was passed to dlopen
}

// dlerrorBytes bounds the dlerror message copied back from C.
const dlerrorBytes = 1024

// openLibrary dlopens path with RTLD_NOW|RTLD_LOCAL.
func openLibrary(path string) (*library, error) {
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	errBuf := (*C.char)(C.malloc(dlerrorBytes))
	defer C.free(unsafe.Pointer(errBuf))
	handle := C.sb_dlopen(cPath, 0, errBuf, dlerrorBytes)
	if handle == nil {
		return nil, errors.New(C.GoString(errBuf))
	}
	return &library{handle: handle, path: path}, nil
}

// file is the file the loader opened: path itself when absolute, else where
// the loader path led (e.g. /usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2 for
// libnvrtc.so.11.2); "" if the loader does not say.
func (l *library) file() string {
	if filepath.IsAbs(l.path) {
		return l.path
	}
	if p := C.sb_dlpath(l.handle); p != nil {
		if name := C.GoString(p); filepath.IsAbs(name) {
			return name
		}
	}
	return ""
}

// symbol returns the address of name, or nil when the library lacks it.
func (l *library) symbol(name string) unsafe.Pointer {
	cName := C.CString(name)
	defer C.free(unsafe.Pointer(cName))
	return C.sb_dlsym(l.handle, cName)
}

func (l *library) close() {
	if l != nil && l.handle != nil {
		C.sb_dlclose(l.handle)
		l.handle = nil
	}
}

// symbolSlot names one function to look up and where to store its address.
type symbolSlot struct {
	name     string
	dst      *unsafe.Pointer
	optional bool // absent in older libraries; callers check for nil
	// fallback is an older name tried when name is absent (cuEventElapsedTime
	// for cuEventElapsedTime_v2); the slot is missing only when both are.
	fallback string
	// resolved, when set, receives the name that was found ("" if none).
	resolved *string
}

// resolve looks up every slot once. A missing required symbol is an error
// naming all the missing ones, so an old library is diagnosed in one go.
func (l *library) resolve(slots []symbolSlot) error {
	var missing []string
	for _, s := range slots {
		name := s.name
		*s.dst = l.symbol(name)
		if *s.dst == nil && s.fallback != "" {
			name = s.fallback
			*s.dst = l.symbol(name)
		}
		if *s.dst == nil {
			name = ""
		}
		if s.resolved != nil {
			*s.resolved = name
		}
		if *s.dst == nil && !s.optional {
			if s.fallback != "" {
				missing = append(missing, s.name+" (or "+s.fallback+")")
			} else {
				missing = append(missing, s.name)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing symbols %s (library too old?)", l.path, strings.Join(missing, ", "))
	}
	return nil
}

// emulatorSymbol is exported only by stepbench's emulated CUDA libraries
// (cuda/emu): const char *sbemu_describe(void), a one-line description.
const emulatorSymbol = "sbemu_describe"

// describeEmulator returns the emulator's description when the library is
// one of stepbench's stand-ins, "" for a real library.
func (l *library) describeEmulator() string {
	fn := l.symbol(emulatorSymbol)
	if fn == nil {
		return ""
	}
	var text string
	if desc := C.sb_describe(fn); desc != nil {
		text = strings.TrimSpace(C.GoString(desc))
	}
	if text == "" {
		text = "stepbench emulated CUDA library (no description)"
	}
	return text
}

// librarySpec describes how to find one of the CUDA user-space libraries.
type librarySpec struct {
	kind    string   // "NVRTC", "cuBLAS": for messages
	envVar  string   // explicit override, e.g. STEPBENCH_NVRTC
	sonames []string // newest first, resolved through the loader path
	// wheelDirs are directories below site-packages/ of NVIDIA's Python
	// wheels that hold the library.
	wheelDirs []string
	// companionFrom/To: when opening a file by absolute path, first open the
	// sibling whose name replaces companionFrom by companionTo (libcublasLt
	// for libcublas), so that its DT_NEEDED resolves without LD_LIBRARY_PATH.
	companionFrom, companionTo string
	// compareLoaded: open every candidate and choose by the version each
	// reports. Safe for NVRTC, which has no versioned DT_NEEDED; cuBLAS is
	// chosen by the major version in its file name and only one is opened,
	// since two libcublas of one major from different folders would share
	// whichever libcublasLt was loaded first.
	compareLoaded bool
}

var nvrtcSpec = librarySpec{
	kind:          "NVRTC",
	envVar:        "STEPBENCH_NVRTC",
	sonames:       []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"},
	wheelDirs:     []string{"nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib"},
	compareLoaded: true,
}

var cublasSpec = librarySpec{
	kind:          "cuBLAS",
	envVar:        "STEPBENCH_CUBLAS",
	sonames:       []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"},
	wheelDirs:     []string{"nvidia/cublas/lib", "nvidia/cu13/lib"},
	companionFrom: "libcublas.",
	companionTo:   "libcublasLt.",
}

// searchEnv is what the library search reads from the machine; tests replace it.
type searchEnv struct {
	getenv func(string) string
	glob   func(pattern string) []string // sorted matches, nil on none
	exists func(path string) bool
	isDir  func(path string) bool
	home   string
}

func hostSearchEnv() searchEnv {
	home, _ := os.UserHomeDir() // empty home only drops ~/.local from the search
	host := libdir.Host()
	return searchEnv{
		getenv: os.Getenv,
		glob: func(pattern string) []string {
			matches, _ := filepath.Glob(pattern) // only ErrBadPattern, impossible for our fixed patterns
			return matches
		},
		exists: host.Exists,
		isDir:  host.IsDir,
		home:   home,
	}
}

// libdirLookup resolves names against $STEPBENCH_CUDA_LIBS in this environment.
func (env searchEnv) libdirLookup() libdir.Lookup {
	return libdir.Lookup{Getenv: env.getenv, IsDir: env.isDir, Exists: env.exists}
}

// Where a plan's candidates came from, as LibraryChoice.Source says it.
const (
	sourceExplicit = "explicit path"
	sourceLibsDir  = "$" + libdir.EnvVar
	sourceSearch   = "search"
)

// candidatePlan is the ordered search: explicit entries (flag, env, the
// STEPBENCH_CUDA_LIBS folder) are exclusive, since silently using another
// library than the one asked for would mislead a benchmark; otherwise
// candidates are tried in order.
type candidatePlan struct {
	source     string   // sourceExplicit, "$" + envVar, sourceLibsDir or sourceSearch
	explicit   []string // non-empty: try only these
	candidates []string // sonames, then absolute paths that exist
	searched   []string // directories looked in, for the error message
}

// tries is what the plan allows to be opened, in its order.
func (p candidatePlan) tries() []string {
	if len(p.explicit) > 0 {
		return p.explicit
	}
	return p.candidates
}

// plan builds the search order of the contract: explicit path > $envVar >
// $STEPBENCH_CUDA_LIBS (each soname present in that folder, and nothing
// else) > sonames via the loader path > $CUDA_HOME/lib64 and
// /usr/local/cuda*/lib64 (newest first) > Python wheels' site-packages.
// A set STEPBENCH_CUDA_LIBS without the library is an error.
func (s librarySpec) plan(explicitPath string, env searchEnv) (candidatePlan, error) {
	var p candidatePlan
	if explicitPath != "" {
		p.source, p.explicit = sourceExplicit, []string{explicitPath}
		return p, nil
	}
	if v := env.getenv(s.envVar); v != "" {
		p.source, p.explicit = "$"+s.envVar, []string{v}
		return p, nil
	}
	if env.getenv(libdir.EnvVar) != "" {
		paths, err := env.libdirLookup().ResolveAny(s.sonames...)
		if err != nil {
			return p, fmt.Errorf("no %s library: %w", s.kind, err)
		}
		p.source, p.explicit = sourceLibsDir, paths
		return p, nil
	}
	p.source = sourceSearch
	p.candidates = append(p.candidates, s.sonames...)

	var dirs []string
	if home := env.getenv("CUDA_HOME"); home != "" {
		dirs = append(dirs, filepath.Join(home, "lib64"))
	}
	dirs = append(dirs, newestCUDADirsFirst(env.glob("/usr/local/cuda*/lib64"))...)
	var roots []string
	for _, base := range []string{"/usr/lib", "/usr/local/lib", filepath.Join(env.home, ".local/lib")} {
		if base == ".local/lib" { // no home directory
			continue
		}
		for _, kind := range []string{"dist-packages", "site-packages"} {
			roots = append(roots, env.glob(filepath.Join(base, "python3*", kind))...)
		}
	}
	for _, root := range roots {
		for _, w := range s.wheelDirs {
			dirs = append(dirs, filepath.Join(root, w))
		}
	}
	seen := map[string]bool{}
	for _, dir := range dirs {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		p.searched = append(p.searched, dir)
		for _, name := range s.sonames {
			if path := filepath.Join(dir, name); env.exists(path) {
				p.candidates = append(p.candidates, path)
			}
		}
	}
	return p, nil
}

// newestCUDADirsFirst orders /usr/local/cuda-X.Y/lib64 by version, newest
// first; unversioned names (the /usr/local/cuda symlink) come last.
func newestCUDADirsFirst(dirs []string) []string {
	out := slices.Clone(dirs)
	slices.SortStableFunc(out, func(a, b string) int {
		va, okA := cudaDirVersion(a)
		vb, okB := cudaDirVersion(b)
		switch {
		case okA && okB:
			return -slices.Compare(va, vb)
		case okA:
			return -1
		case okB:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

// cudaDirVersion parses the version of ".../cuda-12.4/lib64" as [12 4].
func cudaDirVersion(dir string) ([]int, bool) {
	name := filepath.Base(filepath.Dir(dir))
	rest, ok := strings.CutPrefix(name, "cuda-")
	if !ok || rest == "" {
		return nil, false
	}
	return parseVersion(rest)
}

// parseVersion parses "12.4.127" as [12 4 127]; every part must be a
// non-negative number.
func parseVersion(text string) ([]int, bool) {
	var version []int
	for _, part := range strings.Split(text, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, false
		}
		version = append(version, n)
	}
	return version, true
}

// sonameMajor is the major version a library's file name promises:
// libnvrtc.so.12 → 12, libnvrtc.so.11.2 → 11 (NVRTC 11.2-11.8 all use that
// soname); 0 when the name carries none.
func sonameMajor(path string) int {
	_, suffix, ok := strings.Cut(filepath.Base(path), ".so.")
	if !ok {
		return 0
	}
	v, ok := parseVersion(suffix)
	if !ok || len(v) == 0 {
		return 0
	}
	return v[0]
}

// libVersion is a library's own version, as it reports it.
type libVersion struct{ major, minor, patch int }

func (v libVersion) compare(o libVersion) int {
	return slices.Compare([]int{v.major, v.minor, v.patch}, []int{o.major, o.minor, o.patch})
}

func (v libVersion) String() string {
	if v.patch != 0 {
		return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
	}
	return fmt.Sprintf("%d.%d", v.major, v.minor)
}

// driverInfo is what the library choice knows of the driver: the CUDA
// version cuDriverGetVersion reports (13000 for 13.0), 0 when unknown, and
// why it is unknown.
type driverInfo struct {
	version int
	err     error
}

func (d driverInfo) major() int { return d.version / 1000 }

// supports says whether the driver can load what a library of this major
// version produces (cubins, cuBLAS kernels): any major up to its own, by
// CUDA's minor-version compatibility. Unknown drivers support everything,
// so that the choice falls back to "newest".
func (d driverInfo) supports(major int) bool { return d.version == 0 || major <= d.major() }

func (d driverInfo) String() string {
	if d.version == 0 {
		if d.err != nil {
			return fmt.Sprintf("driver version unknown (%v)", d.err)
		}
		return "driver version unknown"
	}
	return fmt.Sprintf("driver CUDA %d.%d", d.version/1000, d.version%1000/10)
}

// LibraryChoice records which library was opened and why, for `stepbench
// devices` and reports.
type LibraryChoice struct {
	// Path is what was dlopen'ed: an absolute path, or a soname found
	// through the loader path.
	Path string
	// File is the file the loader opened for Path (Path itself when
	// absolute); "" if the loader did not say.
	File string
	// Source says how the candidates were named: "explicit path",
	// "$STEPBENCH_NVRTC" (or _CUBLAS), "$STEPBENCH_CUDA_LIBS" or "search".
	Source string
	// Reason says, in one line, why this candidate won.
	Reason string
	// Companions are siblings opened first from the same folder, so that
	// the library finds them without LD_LIBRARY_PATH (libcublasLt,
	// libnvrtc-builtins).
	Companions []string
	// DriverVersion is the cuDriverGetVersion answer the choice considered
	// (13000 for 13.0); 0 when no driver could be asked.
	DriverVersion int
}

// opened is one candidate that opened and reported its version.
type opened struct {
	lib     *library
	path    string
	version libVersion
}

// rankCandidates orders paths for trying: those whose soname major the
// driver supports first, then the newer major, then the plan's order.
func rankCandidates(paths []string, driver driverInfo) []string {
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		ma, mb := sonameMajor(a), sonameMajor(b)
		sa, sb := driver.supports(ma), driver.supports(mb)
		if sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return mb - ma
	})
	return out
}

// chooseOpened picks among libraries that opened (in ranked order): the
// newest version the driver supports, else the newest; of equal versions
// one opened by absolute path, else the earlier one. It returns the index and the reason in words.
func chooseOpened(kind string, libs []opened, driver driverInfo) (int, string) {
	best := -1
	for i, l := range libs {
		if best < 0 {
			best = i
			continue
		}
		b := libs[best]
		ls, bs := driver.supports(l.version.major), driver.supports(b.version.major)
		switch cmp := l.version.compare(b.version); {
		case ls != bs:
			if ls {
				best = i
			}
		case cmp > 0:
			best = i
		case cmp == 0 && filepath.IsAbs(l.path) && !filepath.IsAbs(b.path):
			// The same version by absolute path: its folder is known, so its
			// companions can be opened from there.
			best = i
		}
	}
	var why string
	switch {
	case len(libs) == 1 && driver.supports(libs[0].version.major):
		why = fmt.Sprintf("the only %s that opened; %s", kind, driverNote(driver))
	case len(libs) == 1:
		why = fmt.Sprintf("the only %s that opened, but %s supports CUDA %d and older: its code may fail to load", kind, driver, driver.major())
	case !driver.supports(libs[best].version.major):
		why = fmt.Sprintf("newest of %d %s found; none has a major version %s supports (CUDA %d and older): its code may fail to load",
			len(libs), kind, driver, driver.major())
	case driver.version == 0:
		why = fmt.Sprintf("newest of %d %s found; %s", len(libs), kind, driver)
	default:
		why = fmt.Sprintf("newest of %d %s found whose major version %s supports (CUDA %d and older)", len(libs), kind, driver, driver.major())
	}
	var others []string
	for i, l := range libs {
		if i == best {
			continue
		}
		note := l.version.String()
		if !driver.supports(l.version.major) {
			note += fmt.Sprintf(", needs a CUDA %d driver", l.version.major)
		}
		others = append(others, fmt.Sprintf("%s (%s)", l.path, note))
	}
	if len(others) > 0 {
		why += "; also found: " + strings.Join(others, ", ")
	}
	return best, why
}

func driverNote(driver driverInfo) string {
	if driver.version == 0 {
		return driver.String()
	}
	return fmt.Sprintf("%s supports CUDA %d and older", driver, driver.major())
}

// open finds, opens and chooses the library. load resolves a freshly
// opened library's symbols and returns its version. With compareLoaded
// every candidate is opened and chooseOpened picks; otherwise candidates
// are tried in ranked order and the first that opens wins. Libraries not
// chosen are closed again.
func (s librarySpec) open(explicitPath string, env searchEnv, driver driverInfo, load func(*library) (libVersion, error)) (*library, LibraryChoice, error) {
	p, err := s.plan(explicitPath, env)
	if err != nil {
		return nil, LibraryChoice{}, err
	}
	tries := p.tries()
	if p.source == sourceSearch || p.source == sourceLibsDir {
		tries = rankCandidates(tries, driver)
	}
	var libs []opened
	var failures []string
	var companions [][]string
	for _, path := range tries {
		lib, comps, err := s.openOne(path)
		var v libVersion
		if err == nil {
			if v, err = load(lib); err != nil {
				lib.close()
			}
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s (%v)", path, err))
			continue
		}
		libs = append(libs, opened{lib: lib, path: path, version: v})
		companions = append(companions, comps)
		if !s.compareLoaded {
			break
		}
	}
	if len(libs) == 0 {
		msg := fmt.Sprintf("no %s library found; tried: %s", s.kind, strings.Join(failures, "; "))
		if p.source == sourceSearch {
			msg += fmt.Sprintf("; searched directories: %s", strings.Join(p.searched, ", "))
			msg += fmt.Sprintf("; set $%s or $%s, or pass an explicit path", s.envVar, libdir.EnvVar)
		}
		return nil, LibraryChoice{}, errors.New(msg)
	}
	best, why := chooseOpened(s.kind, libs, driver)
	if !s.compareLoaded && len(tries) > 1 && driver.supports(libs[best].version.major) {
		why = fmt.Sprintf("first %s that opened, trying those whose major version %s supports first, newest major first",
			s.kind, driver)
		if driver.version == 0 {
			why = fmt.Sprintf("first %s that opened, newest major first; %s", s.kind, driver)
		}
	}
	for i, l := range libs {
		if i != best {
			l.lib.close()
		}
	}
	return libs[best].lib, LibraryChoice{
		Path: libs[best].path, File: libs[best].lib.file(), Source: p.source, Reason: why,
		Companions: companions[best], DriverVersion: driver.version,
	}, nil
}

// openOne opens path, after its companion when path is absolute and the
// spec has one. It returns the companions that opened.
func (s librarySpec) openOne(path string) (*library, []string, error) {
	var companions []string
	if s.companionFrom != "" && filepath.IsAbs(path) {
		base := filepath.Base(path)
		if strings.HasPrefix(base, s.companionFrom) {
			companion := filepath.Join(filepath.Dir(path), s.companionTo+strings.TrimPrefix(base, s.companionFrom))
			// Best effort: if it fails, the main dlopen reports the real problem.
			// The companion stays loaded for the life of the process, as the
			// main library needs it.
			if _, err := openLibrary(companion); err == nil {
				companions = append(companions, companion)
			}
		}
	}
	lib, err := openLibrary(path)
	return lib, companions, err
}
