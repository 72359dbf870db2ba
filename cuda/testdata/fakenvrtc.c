// A fake NVRTC for tests without the CUDA toolkit: it reports a version and
// compiles nothing. Not NVIDIA code.
//
// Variants, chosen with -D when the test builds it:
//   FAKE_NVRTC_MAJOR=M, FAKE_NVRTC_MINOR=m  what nvrtcVersion reports (default 12.4)
//   FAKE_EMU                                exports sbemu_describe, as stepbench's emulated NVRTC does
#include <stddef.h>

#ifndef FAKE_NVRTC_MAJOR
#define FAKE_NVRTC_MAJOR 12
#endif
#ifndef FAKE_NVRTC_MINOR
#define FAKE_NVRTC_MINOR 4
#endif

#define STUB(name) int name(void) { return 0; }

const char *nvrtcGetErrorString(int code) { return code == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR_FAKE"; }
int nvrtcVersion(int *major, int *minor) {
	*major = FAKE_NVRTC_MAJOR;
	*minor = FAKE_NVRTC_MINOR;
	return 0;
}
#ifdef FAKE_EMU
const char *sbemu_describe(void) { return "fake emulated NVRTC (test)"; }
#endif

STUB(nvrtcCreateProgram) STUB(nvrtcCompileProgram) STUB(nvrtcDestroyProgram) STUB(nvrtcGetProgramLogSize)
STUB(nvrtcGetProgramLog) STUB(nvrtcGetCUBINSize) STUB(nvrtcGetCUBIN) STUB(nvrtcGetPTXSize) STUB(nvrtcGetPTX)
