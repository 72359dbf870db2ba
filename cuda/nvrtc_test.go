package cuda

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// elfMagic starts every cubin.
var elfMagic = []byte{0x7f, 'E', 'L', 'F'}

func TestNVRTCVersionAndArchs(t *testing.T) {
	n := openTestNVRTC(t)
	major, minor := n.Version()
	t.Logf("NVRTC %d.%d from %s", major, minor, n.Path())
	// The emulated NVRTC reports its own version, 0.1, so that its cubins
	// never share a cache entry with a real NVRTC's.
	if n.Emulated() == "" && (major < 11 || (major == 11 && minor < 8)) {
		t.Errorf("NVRTC %d.%d is older than the 11.8 the kernels need", major, minor)
	}
	archs, err := n.SupportedArchs()
	if err != nil {
		t.Fatalf("SupportedArchs: %v", err)
	}
	for _, want := range []int{80, 90} {
		if !slices.Contains(archs, want) {
			t.Errorf("SupportedArchs = %v, missing %d", archs, want)
		}
	}
}

func TestNVRTCCompileToCubin(t *testing.T) {
	n := openTestNVRTC(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			cubin, log, err := n.Compile(addOneSrc, "add_one.cu", []string{"--gpu-architecture=" + arch, "-default-device", "-std=c++17"})
			if err != nil {
				t.Fatalf("Compile: %v\n%s", err, log)
			}
			if !bytes.HasPrefix(cubin, elfMagic) {
				t.Errorf("cubin starts with % x, want ELF magic", cubin[:min(4, len(cubin))])
			}
		})
	}
}

func TestNVRTCCompileErrorNamesFileAndLine(t *testing.T) {
	n := openTestNVRTC(t)
	const broken = `extern "C" __global__ void broken(float* data) {
    data[0] = 1.0f;
    data[1] = undefined_name;
}
`
	cubin, log, err := n.Compile(broken, "broken.cu", []string{"--gpu-architecture=sm_90"})
	if err == nil {
		t.Fatal("Compile of a broken kernel succeeded")
	}
	if cubin != nil {
		t.Errorf("got %d bytes of cubin with an error", len(cubin))
	}
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.Name != "NVRTC_ERROR_COMPILATION" {
		t.Errorf("err = %v, want an *Error named NVRTC_ERROR_COMPILATION", err)
	}
	if !strings.Contains(err.Error(), "broken.cu") {
		t.Errorf("err %q does not name the file", err)
	}
	if !strings.Contains(log, "broken.cu(3)") || !strings.Contains(log, "undefined_name") {
		t.Errorf("log does not point at broken.cu line 3:\n%s", log)
	}
}

func TestNVRTCVirtualArchHasNoCubin(t *testing.T) {
	n := openTestNVRTC(t)
	_, _, err := n.Compile(addOneSrc, "add_one.cu", []string{"--gpu-architecture=compute_80"})
	if err == nil || !strings.Contains(err.Error(), "real architecture") {
		t.Errorf("compute_80 compile: err = %v, want a no-cubin error", err)
	}
}

func TestNVRTCBadOptionIsAnError(t *testing.T) {
	n := openTestNVRTC(t)
	_, _, err := n.Compile(addOneSrc, "add_one.cu", []string{"--gpu-architecture=sm_90", "--no-such-option"})
	if err == nil {
		t.Fatal("unknown option accepted")
	}
	var cerr *Error
	if !errors.As(err, &cerr) || !strings.HasPrefix(cerr.Name, "NVRTC_ERROR_") {
		t.Errorf("err = %v, want an NVRTC_ERROR_* *Error", err)
	}
}
