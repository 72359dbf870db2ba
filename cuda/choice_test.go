package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSonameMajor(t *testing.T) {
	tests := map[string]int{
		"libnvrtc.so.13": 13,
		"/usr/local/cuda-12.4/lib64/libnvrtc.so.12": 12,
		"libnvrtc.so.11.2":                          11, // every NVRTC 11.2-11.8
		"/opt/libnvrtc.so":                          0,
		"/opt/nvrtc":                                0,
		"libcublas.so.12.4.5.8":                     12,
		"libcublas.so.x":                            0,
	}
	for path, want := range tests {
		if got := sonameMajor(path); got != want {
			t.Errorf("sonameMajor(%q) = %d, want %d", path, got, want)
		}
	}
}

func TestRankCandidatesDriverAware(t *testing.T) {
	search := []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
		"/usr/local/cuda-13.0/lib64/libcublas.so.13", "/usr/local/cuda-12.4/lib64/libcublas.so.12"}
	tests := []struct {
		name   string
		driver driverInfo
		want   []string
	}{
		{
			name: "driver 12.4: majors it supports first, newest first; 13 last", driver: driverInfo{version: 12040},
			want: []string{"libcublas.so.12", "/usr/local/cuda-12.4/lib64/libcublas.so.12", "libcublas.so.11",
				"libcublas.so.13", "/usr/local/cuda-13.0/lib64/libcublas.so.13"},
		},
		{
			name: "driver 13.0: newest major first, the search order within one", driver: driverInfo{version: 13000},
			want: []string{"libcublas.so.13", "/usr/local/cuda-13.0/lib64/libcublas.so.13",
				"libcublas.so.12", "/usr/local/cuda-12.4/lib64/libcublas.so.12", "libcublas.so.11"},
		},
		{
			name: "driver 11.8: only 11 is supported", driver: driverInfo{version: 11080},
			want: []string{"libcublas.so.11", "libcublas.so.13", "/usr/local/cuda-13.0/lib64/libcublas.so.13",
				"libcublas.so.12", "/usr/local/cuda-12.4/lib64/libcublas.so.12"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rankCandidates(search, tt.driver); !slices.Equal(got, tt.want) {
				t.Errorf("rankCandidates =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestChooseOpenedDriverAware(t *testing.T) {
	v := func(major, minor int) libVersion { return libVersion{major: major, minor: minor} }
	tests := []struct {
		name       string
		driver     driverInfo
		libs       []opened
		want       int
		wantReason []string
	}{
		{
			name: "a toolkit's own NVRTC over an older one on the loader path", driver: driverInfo{version: 12040},
			libs: []opened{{path: "libnvrtc.so.11.2", version: v(11, 8)}, {path: "/usr/local/cuda-12.4/lib64/libnvrtc.so.12", version: v(12, 4)}},
			want: 1, wantReason: []string{"newest of 2 NVRTC found whose major version driver CUDA 12.4 supports", "also found: libnvrtc.so.11.2 (11.8)"},
		},
		{
			name: "not a major the driver lacks", driver: driverInfo{version: 12040},
			libs: []opened{{path: "libnvrtc.so.13", version: v(13, 0)}, {path: "/usr/local/cuda-12.8/lib64/libnvrtc.so.12", version: v(12, 8)}},
			want: 1, wantReason: []string{"libnvrtc.so.13 (13.0, needs a CUDA 13 driver)"},
		},
		{
			name: "a newer minor than the driver's is fine (minor-version compatibility)", driver: driverInfo{version: 12020},
			libs: []opened{{path: "libnvrtc.so.12", version: v(12, 1)}, {path: "/usr/local/cuda-12.8/lib64/libnvrtc.so.12", version: v(12, 8)}},
			want: 1,
		},
		{
			name: "driver 13: the newest", driver: driverInfo{version: 13000},
			libs: []opened{{path: "/a/libnvrtc.so.13", version: v(13, 0)}, {path: "/b/libnvrtc.so.12", version: v(12, 8)}},
			want: 0,
		},
		{
			name: "equal versions: the one by absolute path (its folder is known)", driver: driverInfo{version: 12040},
			libs: []opened{{path: "libnvrtc.so.12", version: v(12, 4)}, {path: "/usr/local/cuda/lib64/libnvrtc.so.12", version: v(12, 4)}},
			want: 1,
		},
		{
			name: "equal versions, both by path: the search order", driver: driverInfo{version: 12040},
			libs: []opened{{path: "/usr/local/cuda-12.4/lib64/libnvrtc.so.12", version: v(12, 4)}, {path: "/usr/local/cuda/lib64/libnvrtc.so.12", version: v(12, 4)}},
			want: 0,
		},
		{
			name: "driver unknown: the newest, and the reason says why", driver: driverInfo{},
			libs: []opened{{path: "libnvrtc.so.11.2", version: v(11, 8)}, {path: "/x/libnvrtc.so.13", version: v(13, 0)}, {path: "/y/libnvrtc.so.12", version: v(12, 4)}},
			want: 1, wantReason: []string{"newest of 3 NVRTC found; driver version unknown"},
		},
		{
			name: "none the driver supports: the newest, with a warning", driver: driverInfo{version: 12040},
			libs: []opened{{path: "/x/libnvrtc.so.13", version: v(13, 1)}, {path: "/y/libnvrtc.so.13", version: v(13, 0)}},
			want: 0, wantReason: []string{"none has a major version driver CUDA 12.4 supports", "may fail to load"},
		},
		{
			name: "the emulated NVRTC (version 0.1) with the emulated driver (13.0)", driver: driverInfo{version: 13000},
			libs: []opened{{path: "/emu/libnvrtc.so.13", version: v(0, 1)}},
			want: 0, wantReason: []string{"the only NVRTC that opened; driver CUDA 13.0 supports CUDA 13 and older"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := chooseOpened("NVRTC", tt.libs, tt.driver)
			if got != tt.want {
				t.Errorf("chose %s, want %s (reason: %s)", tt.libs[got].path, tt.libs[tt.want].path, reason)
			}
			for _, w := range tt.wantReason {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q lacks %q", reason, w)
				}
			}
		})
	}
}

func TestNVRTCBuiltinsCandidates(t *testing.T) {
	globs := map[string][]string{
		"/tk/lib64/libnvrtc-builtins.so.12.4.*": {"/tk/lib64/libnvrtc-builtins.so.12.4.99", "/tk/lib64/libnvrtc-builtins.so.12.4.127"},
	}
	files := []string{"/tk/lib64/libnvrtc-builtins.so.12.4", "/tk/lib64/libnvrtc-builtins.so.12.3",
		"/tk/lib64/libnvrtc-builtins.so.12.4.99", "/tk/lib64/libnvrtc-builtins.so.12.4.127"}
	env := fakeSearchEnv(nil, globs, files...)
	want := []string{"/tk/lib64/libnvrtc-builtins.so.12.4", "/tk/lib64/libnvrtc-builtins.so.12.4.127", "/tk/lib64/libnvrtc-builtins.so.12.4.99"}
	if got := nvrtcBuiltinsCandidates("/tk/lib64", 12, 4, env); !slices.Equal(got, want) {
		t.Errorf("candidates = %q, want %q", got, want)
	}
	// NVRTC 11.8 (soname libnvrtc.so.11.2) loads libnvrtc-builtins.so.11.8; another minor cannot serve.
	if got := nvrtcBuiltinsCandidates("/tk/lib64", 12, 2, env); len(got) != 0 {
		t.Errorf("candidates for 12.2 = %q, want none", got)
	}
}

// fakeCUDALibs builds a folder of fake libraries for STEPBENCH_CUDA_LIBS:
// name → (testdata source, -D definitions).
func fakeCUDALibs(t *testing.T, libs map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, spec := range libs {
		buildFake(t, spec[0], dir, name, spec[1:]...)
	}
	return dir
}

// STEPBENCH_CUDA_LIBS opens every library from the folder, and the
// stand-ins say they are emulated.
func TestCUDALibsDirOpensEverythingFromThere(t *testing.T) {
	dir := fakeCUDALibs(t, map[string][]string{
		"libcuda.so.1":    {"fakecuda.c", "FAKE_EMU", "FAKE_DRIVER_VERSION=13000"},
		"libnvrtc.so.13":  {"fakenvrtc.c", "FAKE_EMU", "FAKE_NVRTC_MAJOR=0", "FAKE_NVRTC_MINOR=1"},
		"libcublas.so.13": {"fakecublas.c", "FAKE_EMU", "FAKE_CUBLAS_MAJOR=0"},
	})
	t.Setenv("STEPBENCH_CUDA_LIBS", dir)
	t.Setenv("STEPBENCH_NVRTC", "")
	t.Setenv("STEPBENCH_CUBLAS", "")

	d, err := OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	if d.Path() != filepath.Join(dir, "libcuda.so.1") || d.Emulated() != "fake emulated CUDA driver (test)" {
		t.Errorf("driver %s, emulated %q", d.Path(), d.Emulated())
	}
	n, err := OpenNVRTC("")
	if err != nil {
		t.Fatal(err)
	}
	c := n.Choice()
	if n.Path() != filepath.Join(dir, "libnvrtc.so.13") || n.Emulated() != "fake emulated NVRTC (test)" ||
		c.Source != "$STEPBENCH_CUDA_LIBS" || c.DriverVersion != 13000 || !strings.Contains(c.Reason, "driver CUDA 13.0") {
		t.Errorf("NVRTC %s, emulated %q, choice %+v", n.Path(), n.Emulated(), c)
	}
	b, err := OpenCublas("")
	if err != nil {
		t.Fatal(err)
	}
	if b.Path() != filepath.Join(dir, "libcublas.so.13") || b.Emulated() != "fake emulated cuBLAS (test)" || b.Choice().Source != "$STEPBENCH_CUDA_LIBS" {
		t.Errorf("cuBLAS %s, emulated %q, choice %+v", b.Path(), b.Emulated(), b.Choice())
	}

	// An explicit path still wins over the folder.
	other := buildFake(t, "fakenvrtc.c", t.TempDir(), "libnvrtc.so.12")
	if n, err := OpenNVRTC(other); err != nil || n.Path() != other || n.Emulated() != "" || n.Choice().Source != "explicit path" {
		t.Errorf("explicit NVRTC with STEPBENCH_CUDA_LIBS set: %v, %+v", err, n)
	}
	t.Setenv("STEPBENCH_CUBLAS", filepath.Join(dir, "libcublas.so.13"))
	if b, err := OpenCublas(""); err != nil || b.Choice().Source != "$STEPBENCH_CUBLAS" {
		t.Errorf("$STEPBENCH_CUBLAS with STEPBENCH_CUDA_LIBS set: %v, %+v", err, b)
	}
}

func TestCUDALibsDirMissingIsAClearError(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("STEPBENCH_NVRTC", "")
	t.Setenv("STEPBENCH_CUBLAS", "")
	tests := []struct {
		dir  string
		open func() error
		want string
	}{
		{empty, func() error { _, err := OpenDriver(); return err },
			"no CUDA driver: STEPBENCH_CUDA_LIBS=" + empty + ": " + filepath.Join(empty, "libcuda.so.1") + " not found"},
		{empty, func() error { _, err := OpenNVRTC(""); return err },
			"no NVRTC library: STEPBENCH_CUDA_LIBS=" + empty + ": none of [" + filepath.Join(empty, "libnvrtc.so.13")},
		{filepath.Join(empty, "nope"), func() error { _, err := OpenCublas(""); return err },
			"no cuBLAS library: STEPBENCH_CUDA_LIBS=" + filepath.Join(empty, "nope") + ": " + filepath.Join(empty, "nope") + " is not a directory"},
	}
	for _, tt := range tests {
		t.Setenv("STEPBENCH_CUDA_LIBS", tt.dir)
		if err := tt.open(); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("err = %v\nwant prefix %q", err, tt.want)
		}
	}
}

// With real dlopen: of two NVRTCs in the folder, the one whose major the
// driver supports is chosen, its builtins are opened from its folder, and
// the choice is recorded. cuBLAS likewise by the major in its file name.
func TestDriverAwareChoiceOpensTheSupportedMajor(t *testing.T) {
	dir := fakeCUDALibs(t, map[string][]string{
		"libcuda.so.1":              {"fakecuda.c", "FAKE_DRIVER_VERSION=12040"},
		"libnvrtc.so.13":            {"fakenvrtc.c", "FAKE_NVRTC_MAJOR=13", "FAKE_NVRTC_MINOR=0"},
		"libnvrtc.so.12":            {"fakenvrtc.c", "FAKE_NVRTC_MAJOR=12", "FAKE_NVRTC_MINOR=4"},
		"libnvrtc-builtins.so.12.4": {"fakenvrtc.c"}, // any shared object will do
		"libcublas.so.13":           {"fakecublas.c", "FAKE_CUBLAS_MAJOR=13"},
		"libcublas.so.12":           {"fakecublas.c", "FAKE_CUBLAS_MAJOR=12"},
	})
	t.Setenv("STEPBENCH_CUDA_LIBS", dir)
	t.Setenv("STEPBENCH_NVRTC", "")
	t.Setenv("STEPBENCH_CUBLAS", "")
	n, err := OpenNVRTC("")
	if err != nil {
		t.Fatal(err)
	}
	c := n.Choice()
	if major, minor := n.Version(); major != 12 || minor != 4 || n.Path() != filepath.Join(dir, "libnvrtc.so.12") {
		t.Errorf("chose NVRTC %d.%d at %s, want 12.4 at libnvrtc.so.12", major, minor, n.Path())
	}
	if !slices.Equal(c.Companions, []string{filepath.Join(dir, "libnvrtc-builtins.so.12.4")}) {
		t.Errorf("companions = %q, want the builtins from the same folder", c.Companions)
	}
	if c.DriverVersion != 12040 || !strings.Contains(c.Reason, "needs a CUDA 13 driver") {
		t.Errorf("choice = %+v", c)
	}
	b, err := OpenCublas("")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := b.Version(); err != nil || v/10000 != 12 || b.Path() != filepath.Join(dir, "libcublas.so.12") {
		t.Errorf("chose cuBLAS %d at %s, want 12.x at libcublas.so.12 (%+v)", v, b.Path(), b.Choice())
	}
}

// The real NVRTC of this machine, opened by absolute path, brings its
// builtins from the same folder (the CUDA_HOME / wheel / --nvrtc case).
func TestNVRTCByAbsolutePathOpensItsBuiltins(t *testing.T) {
	n := openTestNVRTC(t)
	major, minor := n.Version()
	if n.Emulated() != "" {
		t.Skipf("NVRTC is the emulated one: %s", n.Emulated())
	}
	var abs string
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/lib64"} {
		for _, name := range nvrtcSpec.sonames {
			if p := filepath.Join(dir, name); abs == "" && fileExists(p) {
				abs = p
			}
		}
	}
	if abs == "" {
		t.Skip("no NVRTC at a known absolute path")
	}
	builtins := filepath.Join(filepath.Dir(abs), fmt.Sprintf("libnvrtc-builtins.so.%d.%d", major, minor))
	if !fileExists(builtins) {
		t.Skipf("%s has no %s beside it", abs, builtins)
	}
	byPath, err := OpenNVRTC(abs)
	if err != nil {
		t.Fatal(err)
	}
	if got := byPath.Choice().Companions; !slices.Equal(got, []string{builtins}) {
		t.Errorf("companions = %q, want [%s]", got, builtins)
	}
	if _, log, err := byPath.Compile(addOneSrc, "add_one.cu", []string{"--gpu-architecture=sm_80"}); err != nil {
		t.Errorf("compile with NVRTC opened by path: %v\n%s", err, log)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// A library found through the loader path records the file it came from.
func TestLoaderPathLibraryRecordsItsFile(t *testing.T) {
	n := openTestNVRTC(t)
	c := n.Choice()
	if !filepath.IsAbs(c.File) || !fileExists(c.File) {
		t.Errorf("Choice().File = %q for Path %q, want the absolute file the loader opened", c.File, c.Path)
	}
	if filepath.IsAbs(c.Path) && c.File != c.Path {
		t.Errorf("File %q differs from the absolute Path %q", c.File, c.Path)
	}
}
