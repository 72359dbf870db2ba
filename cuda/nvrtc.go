package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"
)

// nvrtcAPI holds NVRTC's entry points. The supported-archs pair is absent
// before 11.2.
type nvrtcAPI struct {
	getErrorString, version                       unsafe.Pointer
	getNumSupportedArchs, getSupportedArchs       unsafe.Pointer
	createProgram, compileProgram, destroyProgram unsafe.Pointer
	getProgramLogSize, getProgramLog              unsafe.Pointer
	getCUBINSize, getCUBIN                        unsafe.Pointer
	getPTXSize, getPTX                            unsafe.Pointer
}

func (a *nvrtcAPI) slots() []symbolSlot {
	return []symbolSlot{
		{name: "nvrtcGetErrorString", dst: &a.getErrorString},
		{name: "nvrtcVersion", dst: &a.version},
		{name: "nvrtcGetNumSupportedArchs", dst: &a.getNumSupportedArchs, optional: true},
		{name: "nvrtcGetSupportedArchs", dst: &a.getSupportedArchs, optional: true},
		{name: "nvrtcCreateProgram", dst: &a.createProgram},
		{name: "nvrtcCompileProgram", dst: &a.compileProgram},
		{name: "nvrtcDestroyProgram", dst: &a.destroyProgram},
		{name: "nvrtcGetProgramLogSize", dst: &a.getProgramLogSize},
		{name: "nvrtcGetProgramLog", dst: &a.getProgramLog},
		{name: "nvrtcGetCUBINSize", dst: &a.getCUBINSize},
		{name: "nvrtcGetCUBIN", dst: &a.getCUBIN},
		{name: "nvrtcGetPTXSize", dst: &a.getPTXSize},
		{name: "nvrtcGetPTX", dst: &a.getPTX},
	}
}

// NVRTC is an opened NVRTC library. It needs no GPU, and its methods may be
// called from any goroutine (NVRTC is thread-safe per program).
type NVRTC struct {
	lib          *library
	api          nvrtcAPI
	major, minor int
	choice       LibraryChoice
	emulated     string
}

// OpenNVRTC finds and opens NVRTC. Candidates: explicitPath, else
// $STEPBENCH_NVRTC (either one, when set, is the only library tried), else
// with $STEPBENCH_CUDA_LIBS=DIR set each of DIR/libnvrtc.so.13, .12 and
// .11.2 that exists (nothing outside DIR), else libnvrtc.so.13, .12 and
// .11.2 through the loader path, $CUDA_HOME/lib64 and
// /usr/local/cuda*/lib64 (newest first), and NVIDIA's Python wheels
// (site-packages/nvidia/cuda_nvrtc/lib, nvidia/cu13/lib under
// /usr/lib/python3*, /usr/local/lib/python3* and ~/.local/lib/python3*).
//
// Every candidate that opens is asked its version, and the choice is aware
// of the driver (cuDriverGetVersion, asked without cuInit): the newest NVRTC
// whose major version the driver supports wins, so a toolkit's own NVRTC
// beats an older one on the loader path and a CUDA 13 NVRTC is not used
// with a CUDA 12 driver while a 12.x is there; of equal versions one opened
// by absolute path wins, else the search order. Choice says which and why.
// libnvrtc has no RUNPATH and dlopens libnvrtc-builtins.so.M.m by name at
// the first compile, so before any compile that library (M.m from
// nvrtcVersion) is opened from the chosen NVRTC's folder.
//
// The error lists every library tried and every directory searched.
func OpenNVRTC(explicitPath string) (*NVRTC, error) {
	env := hostSearchEnv()
	return openNVRTC(explicitPath, env, probeDriver(env))
}

func openNVRTC(explicitPath string, env searchEnv, driver driverInfo) (*NVRTC, error) {
	lib, choice, err := nvrtcSpec.open(explicitPath, env, driver, func(l *library) (libVersion, error) {
		var api nvrtcAPI
		if err := l.resolve(api.slots()); err != nil {
			return libVersion{}, err
		}
		var major, minor C.int
		if code := C.sb_nvrtcVersion(api.version, &major, &minor); code != 0 {
			return libVersion{}, fmt.Errorf("nvrtcVersion: NVRTC error %d", int(code))
		}
		return libVersion{major: int(major), minor: int(minor)}, nil
	})
	if err != nil {
		return nil, err
	}
	n := &NVRTC{lib: lib, choice: choice}
	if err := lib.resolve(n.api.slots()); err != nil { // resolved once already, by the same library
		lib.close()
		return nil, err
	}
	var major, minor C.int
	if err := n.check(C.sb_nvrtcVersion(n.api.version, &major, &minor), "nvrtcVersion"); err != nil {
		lib.close()
		return nil, fmt.Errorf("%s: %w", lib.path, err)
	}
	n.major, n.minor = int(major), int(minor)
	// By absolute path the builtins must come from the same folder; through
	// the loader path they are found the same way as libnvrtc was, but
	// opening them from its folder costs nothing and removes the doubt.
	if file := lib.file(); file != "" {
		if builtins := openNVRTCBuiltins(filepath.Dir(file), n.major, n.minor, env); builtins != "" {
			n.choice.Companions = append(n.choice.Companions, builtins)
		}
	}
	n.emulated = lib.describeEmulator()
	return n, nil
}

// nvrtcBuiltinsCandidates lists, in the order to try, the files of dir that
// can satisfy NVRTC M.m's dlopen("libnvrtc-builtins.so.M.m"): that name, then
// fully versioned files (libnvrtc-builtins.so.M.m.P, newest first), whose
// soname is the same. Only files that exist are listed.
func nvrtcBuiltinsCandidates(dir string, major, minor int, env searchEnv) []string {
	name := fmt.Sprintf("libnvrtc-builtins.so.%d.%d", major, minor)
	var out []string
	if exact := filepath.Join(dir, name); env.exists(exact) {
		out = append(out, exact)
	}
	full := slices.Clone(env.glob(filepath.Join(dir, name+".*")))
	slices.SortStableFunc(full, func(a, b string) int {
		va, _ := parseVersion(strings.TrimPrefix(filepath.Base(a), name+"."))
		vb, _ := parseVersion(strings.TrimPrefix(filepath.Base(b), name+"."))
		return -slices.Compare(va, vb)
	})
	return append(out, full...)
}

// openNVRTCBuiltins opens NVRTC's builtins library from dir (best effort: a
// folder without it leaves the loader path to find one) and returns the
// path that opened, "" if none. It stays loaded for the life of the
// process, as NVRTC needs it at every compile.
func openNVRTCBuiltins(dir string, major, minor int, env searchEnv) string {
	for _, path := range nvrtcBuiltinsCandidates(dir, major, minor, env) {
		if _, err := openLibrary(path); err == nil {
			return path
		}
	}
	return ""
}

// check turns an nvrtcResult into an *Error.
func (n *NVRTC) check(code C.nvrtcResult, call string, args ...any) error {
	if code == 0 {
		return nil
	}
	if len(args) > 0 {
		call = fmt.Sprintf(call, args...)
	}
	name := fmt.Sprintf("NVRTC_ERROR_UNKNOWN(%d)", int(code))
	if s := C.sb_nvrtcGetErrorString(n.api.getErrorString, code); s != nil {
		name = C.GoString(s)
	}
	return &Error{Call: call, Code: int(code), Name: name}
}

// Path is the file or soname NVRTC was opened from.
func (n *NVRTC) Path() string { return n.lib.path }

// Choice says which NVRTC was chosen, from which candidates, and why.
func (n *NVRTC) Choice() LibraryChoice { return n.choice }

// Emulated is the description of stepbench's emulated NVRTC (which compiles
// with g++ for the emulated device) when that is what was opened, "" for a
// real NVRTC.
func (n *NVRTC) Emulated() string { return n.emulated }

// Version is NVRTC's CUDA version, e.g. (11, 8).
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// SupportedArchs lists the real architectures NVRTC can compile for, as
// numbers (80 for sm_80).
func (n *NVRTC) SupportedArchs() ([]int, error) {
	if n.api.getNumSupportedArchs == nil || n.api.getSupportedArchs == nil {
		return nil, fmt.Errorf("nvrtcGetSupportedArchs: not in NVRTC %d.%d (%s); needs 11.2 or newer", n.major, n.minor, n.lib.path)
	}
	var count C.int
	if err := n.check(C.sb_nvrtcGetNumSupportedArchs(n.api.getNumSupportedArchs, &count), "nvrtcGetNumSupportedArchs"); err != nil {
		return nil, err
	}
	if count <= 0 {
		return nil, nil
	}
	archs := make([]C.int, int(count))
	if err := n.check(C.sb_nvrtcGetSupportedArchs(n.api.getSupportedArchs, &archs[0]), "nvrtcGetSupportedArchs"); err != nil {
		return nil, err
	}
	out := make([]int, len(archs))
	for i, a := range archs {
		out[i] = int(a)
	}
	return out, nil
}

// Compile compiles one header-free translation unit to a cubin. fileName is
// the name diagnostics use ("rmsnorm.cu(12): error: ..."); opts are NVRTC
// options, e.g. "--gpu-architecture=sm_90", "-default-device", "-std=c++17".
// The architecture must be a real one (sm_XX): a compute_XX target yields
// PTX only and is an error here. On failure err wraps the NVRTC error name
// and log holds the program log; log is also returned on success (warnings).
func (n *NVRTC) Compile(src, fileName string, opts []string) (cubin []byte, log string, err error) {
	image, log, err := n.compile(src, fileName, opts, n.api.getCUBINSize, n.api.getCUBIN, "nvrtcGetCUBIN")
	if err != nil {
		return nil, log, err
	}
	if len(image) == 0 {
		return nil, log, fmt.Errorf("nvrtcGetCUBIN(%s): no cubin; compile for a real architecture (--gpu-architecture=sm_XX), not a virtual compute_XX", fileName)
	}
	return image, log, nil
}

// CompilePTX compiles for a virtual architecture (--gpu-architecture=
// compute_XX) and returns the PTX: what a test reads to see which
// instructions a kernel uses (mma.sync, ldmatrix, cp.async). The emulated
// NVRTC has no PTX to give and returns "".
func (n *NVRTC) CompilePTX(src, fileName string, opts []string) (ptx, log string, err error) {
	text, log, err := n.compile(src, fileName, opts, n.api.getPTXSize, n.api.getPTX, "nvrtcGetPTX")
	return string(trimNUL(text)), log, err
}

// compile runs one NVRTC program and reads one output (cubin or PTX)
// through its size/get pair.
func (n *NVRTC) compile(src, fileName string, opts []string, sizeFn, getFn unsafe.Pointer, getName string) (out []byte, log string, err error) {
	cSrc := C.CString(src)
	defer C.free(unsafe.Pointer(cSrc))
	cName := C.CString(fileName)
	defer C.free(unsafe.Pointer(cName))

	var prog C.nvrtcProgram
	if err := n.check(C.sb_nvrtcCreateProgram(n.api.createProgram, &prog, cSrc, cName), "nvrtcCreateProgram(%s)", fileName); err != nil {
		return nil, "", err
	}
	defer func() {
		if destroyErr := n.check(C.sb_nvrtcDestroyProgram(n.api.destroyProgram, &prog), "nvrtcDestroyProgram(%s)", fileName); destroyErr != nil {
			err = errors.Join(err, destroyErr)
		}
	}()

	// The options array and its strings live in C memory for the call.
	var cOpts **C.char
	if len(opts) > 0 {
		cOpts = (**C.char)(C.calloc(C.size_t(len(opts)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		optSlice := unsafe.Slice(cOpts, len(opts))
		for i, o := range opts {
			optSlice[i] = C.CString(o)
		}
		defer func() {
			for _, p := range optSlice {
				C.free(unsafe.Pointer(p))
			}
			C.free(unsafe.Pointer(cOpts))
		}()
	}
	leave := watch(Compile, callText("NVRTC compiling "+fileName))
	compileErr := n.check(C.sb_nvrtcCompileProgram(n.api.compileProgram, prog, C.int(len(opts)), cOpts), "nvrtcCompileProgram(%s)", fileName)

	leave()
	logBytes, logErr := n.programBytes(prog, n.api.getProgramLogSize, n.api.getProgramLog, "nvrtcGetProgramLog", fileName)
	log = string(trimNUL(logBytes))
	if compileErr != nil {
		return nil, log, errors.Join(compileErr, logErr)
	}
	if logErr != nil {
		return nil, "", logErr
	}
	out, err = n.programBytes(prog, sizeFn, getFn, getName, fileName)
	if err != nil {
		return nil, log, err
	}
	return out, log, nil
}

// programBytes reads one of the program's outputs (log or cubin) via its
// size/get function pair.
func (n *NVRTC) programBytes(prog C.nvrtcProgram, sizeFn, getFn unsafe.Pointer, call, fileName string) ([]byte, error) {
	var size C.size_t
	if err := n.check(C.sb_nvrtcGetSize(sizeFn, prog, &size), "%sSize(%s)", call, fileName); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	buf := C.malloc(size)
	if buf == nil {
		return nil, fmt.Errorf("%s(%s): out of memory for %d bytes", call, fileName, uint64(size))
	}
	defer C.free(buf)
	if err := n.check(C.sb_nvrtcGetBytes(getFn, prog, (*C.char)(buf)), "%s(%s)", call, fileName); err != nil {
		return nil, err
	}
	return C.GoBytes(buf, C.int(size)), nil
}

// trimNUL drops the terminating NUL NVRTC includes in the log size.
func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
