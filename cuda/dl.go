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
}

// resolve looks up every slot once. A missing required symbol is an error
// naming all the missing ones, so an old library is diagnosed in one go.
func (l *library) resolve(slots []symbolSlot) error {
	var missing []string
	for _, s := range slots {
		*s.dst = l.symbol(s.name)
		if *s.dst == nil && !s.optional {
			missing = append(missing, s.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing symbols %s (library too old?)", l.path, strings.Join(missing, ", "))
	}
	return nil
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
}

var nvrtcSpec = librarySpec{
	kind:      "NVRTC",
	envVar:    "STEPBENCH_NVRTC",
	sonames:   []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"},
	wheelDirs: []string{"nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib"},
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
	home   string
}

func hostSearchEnv() searchEnv {
	home, _ := os.UserHomeDir() // empty home only drops ~/.local from the search
	return searchEnv{
		getenv: os.Getenv,
		glob: func(pattern string) []string {
			matches, _ := filepath.Glob(pattern) // only ErrBadPattern, impossible for our fixed patterns
			return matches
		},
		exists: func(path string) bool { _, err := os.Stat(path); return err == nil },
		home:   home,
	}
}

// candidatePlan is the ordered search: explicit entries (flag, env) are
// exclusive, since silently using another library than the one asked for
// would mislead a benchmark; otherwise candidates are tried in order.
type candidatePlan struct {
	explicit   []string // non-empty: try only these
	candidates []string // sonames, then absolute paths that exist
	searched   []string // directories looked in, for the error message
}

// plan builds the search order of the contract: explicit path > $envVar >
// sonames via the loader path > $CUDA_HOME/lib64 and /usr/local/cuda*/lib64
// (newest first) > Python wheels' site-packages.
func (s librarySpec) plan(explicitPath string, env searchEnv) candidatePlan {
	var p candidatePlan
	if explicitPath != "" {
		p.explicit = append(p.explicit, explicitPath)
		return p
	}
	if v := env.getenv(s.envVar); v != "" {
		p.explicit = append(p.explicit, v)
		return p
	}
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
	return p
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
	var version []int
	for _, part := range strings.Split(rest, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, false
		}
		version = append(version, n)
	}
	return version, true
}

// open tries the plan in order and returns the first library that opens
// and resolves; the error lists every attempt.
func (s librarySpec) open(explicitPath string, env searchEnv, resolve func(*library) error) (*library, error) {
	p := s.plan(explicitPath, env)
	tries := p.explicit
	if len(tries) == 0 {
		tries = p.candidates
	}
	var failures []string
	for _, path := range tries {
		lib, err := s.openOne(path)
		if err == nil {
			err = resolve(lib)
			if err == nil {
				return lib, nil
			}
			lib.close()
		}
		failures = append(failures, fmt.Sprintf("%s (%v)", path, err))
	}
	msg := fmt.Sprintf("no %s library found; tried: %s", s.kind, strings.Join(failures, "; "))
	if len(p.explicit) == 0 {
		msg += fmt.Sprintf("; searched directories: %s", strings.Join(p.searched, ", "))
		msg += fmt.Sprintf("; set $%s or pass an explicit path", s.envVar)
	}
	return nil, errors.New(msg)
}

func (s librarySpec) openOne(path string) (*library, error) {
	if s.companionFrom != "" && filepath.IsAbs(path) {
		base := filepath.Base(path)
		if strings.HasPrefix(base, s.companionFrom) {
			companion := filepath.Join(filepath.Dir(path), s.companionTo+strings.TrimPrefix(base, s.companionFrom))
			// Best effort: if it fails, the main dlopen reports the real problem.
			// The companion stays loaded for the life of the process, as the
			// main library needs it.
			_, _ = openLibrary(companion)
		}
	}
	return openLibrary(path)
}
