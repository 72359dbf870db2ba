package cuda

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeSearchEnv serves a fixed environment, glob table and file set; a
// folder exists when a file in it does.
func fakeSearchEnv(env map[string]string, globs map[string][]string, files ...string) searchEnv {
	return searchEnv{
		getenv: func(k string) string { return env[k] },
		glob:   func(p string) []string { return globs[p] },
		exists: func(p string) bool { return slices.Contains(files, p) },
		isDir: func(p string) bool {
			return slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, p+"/") })
		},
		home: "/home/u",
	}
}

// planGlobs and planEmuFiles are the fake file system of the search plan tests.
var planGlobs = map[string][]string{
	"/usr/local/cuda*/lib64":                    {"/usr/local/cuda-12.4/lib64", "/usr/local/cuda-12.10/lib64", "/usr/local/cuda/lib64", "/usr/local/cuda-13.0/lib64"},
	"/usr/lib/python3*/dist-packages":           {"/usr/lib/python3.11/dist-packages"},
	"/usr/local/lib/python3*/site-packages":     {"/usr/local/lib/python3.12/site-packages"},
	"/home/u/.local/lib/python3*/site-packages": {"/home/u/.local/lib/python3.12/site-packages"},
}
var planEmuFiles = []string{"/emu/libnvrtc.so.13", "/emu/libcublas.so.13", "/emu/libcuda.so.1", "/usr/local/cuda-12.4/lib64/libnvrtc.so.12"}

// searchPlanTests are where NVRTC is looked for, by what the environment says.
var searchPlanTests = []struct {
	name         string
	explicit     string
	env          map[string]string
	files        []string
	wantSource   string
	wantExplicit []string
	wantCands    []string
	wantErr      string
}{
	{
		name: "explicit path wins and is exclusive", explicit: "/opt/nvrtc.so",
		env:          map[string]string{"STEPBENCH_NVRTC": "/env/nvrtc.so", "STEPBENCH_CUDA_LIBS": "/emu"},
		files:        planEmuFiles,
		wantSource:   "explicit path",
		wantExplicit: []string{"/opt/nvrtc.so"},
	},
	{
		name:         "env var next and exclusive, also over STEPBENCH_CUDA_LIBS",
		env:          map[string]string{"STEPBENCH_NVRTC": "/env/nvrtc.so", "STEPBENCH_CUDA_LIBS": "/emu"},
		files:        planEmuFiles,
		wantSource:   "$STEPBENCH_NVRTC",
		wantExplicit: []string{"/env/nvrtc.so"},
	},
	{
		name:         "STEPBENCH_CUDA_LIBS next: only its folder, no search",
		env:          map[string]string{"STEPBENCH_CUDA_LIBS": "/emu", "CUDA_HOME": "/usr/local/cuda-12.4"},
		files:        planEmuFiles,
		wantSource:   "$STEPBENCH_CUDA_LIBS",
		wantExplicit: []string{"/emu/libnvrtc.so.13"},
	},
	{
		name:         "STEPBENCH_CUDA_LIBS: every soname present, newest first",
		env:          map[string]string{"STEPBENCH_CUDA_LIBS": "/cuda/lib"},
		files:        []string{"/cuda/lib/libnvrtc.so.11.2", "/cuda/lib/libnvrtc.so.12"},
		wantSource:   "$STEPBENCH_CUDA_LIBS",
		wantExplicit: []string{"/cuda/lib/libnvrtc.so.12", "/cuda/lib/libnvrtc.so.11.2"},
	},
	{
		name:    "STEPBENCH_CUDA_LIBS without NVRTC is an error naming the variable and the path",
		env:     map[string]string{"STEPBENCH_CUDA_LIBS": "/emu"},
		files:   []string{"/emu/libcuda.so.1", "/usr/local/cuda-12.4/lib64/libnvrtc.so.12"},
		wantErr: "no NVRTC library: STEPBENCH_CUDA_LIBS=/emu: none of [/emu/libnvrtc.so.13 /emu/libnvrtc.so.12 /emu/libnvrtc.so.11.2] found",
	},
	{
		name:    "STEPBENCH_CUDA_LIBS naming a missing folder is an error",
		env:     map[string]string{"STEPBENCH_CUDA_LIBS": "/missing"},
		files:   planEmuFiles,
		wantErr: "no NVRTC library: STEPBENCH_CUDA_LIBS=/missing: /missing is not a directory",
	},
	{
		name:       "sonames, CUDA_HOME, newest toolkit, wheels",
		wantSource: "search",
		env:        map[string]string{"CUDA_HOME": "/opt/cuda"},
		files: []string{
			"/usr/local/cuda/lib64/libnvrtc.so.12",
			"/usr/local/cuda-12.4/lib64/libnvrtc.so.12",
			"/usr/local/cuda-12.10/lib64/libnvrtc.so.12",
			"/usr/local/cuda-13.0/lib64/libnvrtc.so.13",
			"/opt/cuda/lib64/libnvrtc.so.11.2",
			"/home/u/.local/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
			"/usr/lib/python3.11/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		},
		wantCands: []string{
			"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
			"/opt/cuda/lib64/libnvrtc.so.11.2",
			"/usr/local/cuda-13.0/lib64/libnvrtc.so.13",
			"/usr/local/cuda-12.10/lib64/libnvrtc.so.12",
			"/usr/local/cuda-12.4/lib64/libnvrtc.so.12",
			"/usr/local/cuda/lib64/libnvrtc.so.12",
			"/usr/lib/python3.11/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
			"/home/u/.local/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		},
	},
}

func TestSearchPlanOrder(t *testing.T) {

	for _, tt := range searchPlanTests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := nvrtcSpec.plan(tt.explicit, fakeSearchEnv(tt.env, planGlobs, tt.files...))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("plan error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.source != tt.wantSource {
				t.Errorf("source = %q, want %q", p.source, tt.wantSource)
			}
			if !slices.Equal(p.explicit, tt.wantExplicit) {
				t.Errorf("explicit = %q, want %q", p.explicit, tt.wantExplicit)
			}
			if len(tt.wantExplicit) == 0 && !slices.Equal(p.candidates, tt.wantCands) {
				t.Errorf("candidates =\n  %s\nwant\n  %s", strings.Join(p.candidates, "\n  "), strings.Join(tt.wantCands, "\n  "))
			}
		})
	}
}

func TestCublasPlanUsesItsOwnNames(t *testing.T) {
	p, err := cublasSpec.plan("", fakeSearchEnv(map[string]string{"STEPBENCH_NVRTC": "/ignored"}, nil))
	want := []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}
	if err != nil || len(p.explicit) != 0 || !slices.Equal(p.candidates, want) {
		t.Errorf("plan = %+v, %v; want candidates %q", p, err, want)
	}
	p, err = cublasSpec.plan("", fakeSearchEnv(map[string]string{"STEPBENCH_CUDA_LIBS": "/emu"}, nil, "/emu/libcublas.so.13", "/emu/libnvrtc.so.13"))
	if err != nil || !slices.Equal(p.explicit, []string{"/emu/libcublas.so.13"}) {
		t.Errorf("STEPBENCH_CUDA_LIBS plan = %+v, %v; want only /emu/libcublas.so.13", p, err)
	}
}

// NCCL is found where PyTorch's wheels put it, and only in
// STEPBENCH_CUDA_LIBS when that is set.
func TestNCCLPlanFindsTheWheel(t *testing.T) {
	wheel := "/usr/local/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
	p, err := ncclSpec.plan("", fakeSearchEnv(nil, planGlobs, wheel))
	if err != nil || len(p.explicit) != 0 || !slices.Equal(p.candidates, []string{"libnccl.so.2", wheel}) {
		t.Errorf("plan = %+v, %v; want the soname, then %s", p, err, wheel)
	}
	p, err = ncclSpec.plan("", fakeSearchEnv(map[string]string{"STEPBENCH_CUDA_LIBS": "/emu"}, planGlobs, wheel, "/emu/libnccl.so.2"))
	if err != nil || !slices.Equal(p.explicit, []string{"/emu/libnccl.so.2"}) {
		t.Errorf("STEPBENCH_CUDA_LIBS plan = %+v, %v; want only /emu/libnccl.so.2", p, err)
	}
	p, err = ncclSpec.plan("", fakeSearchEnv(map[string]string{"STEPBENCH_NCCL": "/opt/nccl.so"}, planGlobs))
	if err != nil || !slices.Equal(p.explicit, []string{"/opt/nccl.so"}) {
		t.Errorf("STEPBENCH_NCCL plan = %+v, %v", p, err)
	}
}

func TestNewestCUDADirsFirst(t *testing.T) {
	in := []string{"/usr/local/cuda/lib64", "/usr/local/cuda-11.8/lib64", "/usr/local/cuda-12/lib64",
		"/usr/local/cuda-12.9/lib64", "/usr/local/cuda-x/lib64", "/usr/local/cuda-13.0/lib64"}
	want := []string{"/usr/local/cuda-13.0/lib64", "/usr/local/cuda-12.9/lib64", "/usr/local/cuda-12/lib64",
		"/usr/local/cuda-11.8/lib64", "/usr/local/cuda-x/lib64", "/usr/local/cuda/lib64"}
	if got := newestCUDADirsFirst(in); !slices.Equal(got, want) {
		t.Errorf("newestCUDADirsFirst =\n  %q\nwant\n  %q", got, want)
	}
}

func TestCudaDirVersion(t *testing.T) {
	tests := []struct {
		dir  string
		want []int
		ok   bool
	}{
		{"/usr/local/cuda-12.4/lib64", []int{12, 4}, true},
		{"/usr/local/cuda-13/lib64", []int{13}, true},
		{"/usr/local/cuda/lib64", nil, false},
		{"/usr/local/cuda-/lib64", nil, false},
		{"/usr/local/cuda-12.x/lib64", nil, false},
		{"/usr/local/cuda-12..4/lib64", nil, false},
		{"/usr/local/cuda--1/lib64", nil, false},
	}
	for _, tt := range tests {
		got, ok := cudaDirVersion(tt.dir)
		if ok != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("cudaDirVersion(%q) = %v, %v; want %v, %v", tt.dir, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzCudaDirVersion(f *testing.F) {
	for _, s := range []string{"cuda-12.4", "cuda", "cuda-1.2.3", "cuda-..", "cuda-99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, ok := cudaDirVersion(filepath.Join("/usr/local", name, "lib64"))
		if ok && len(v) == 0 {
			t.Errorf("ok with empty version for %q", name)
		}
		for _, n := range v {
			if n < 0 {
				t.Errorf("negative component in %v for %q", v, name)
			}
		}
	})
}

func TestOpenNVRTCExplicitMissingListsWhatWasTried(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnvrtc.so.99")
	_, err := OpenNVRTC(missing)
	if err == nil {
		t.Fatal("OpenNVRTC of a missing file succeeded")
	}
	if !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "no NVRTC library found") {
		t.Errorf("error %q does not name the path tried", err)
	}
}

func TestOpenNVRTCWrongLibraryReportsMissingSymbols(t *testing.T) {
	// libc is always loadable but is not NVRTC: the error must say which
	// symbols are missing instead of crashing later.
	_, err := OpenNVRTC("libc.so.6")
	if err == nil {
		t.Fatal("OpenNVRTC(libc.so.6) succeeded")
	}
	if !strings.Contains(err.Error(), "missing symbols") || !strings.Contains(err.Error(), "nvrtcCompileProgram") {
		t.Errorf("error %q does not list the missing symbols", err)
	}
}

func TestOpenNVRTCHonoursEnvVar(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "from-env.so")
	t.Setenv("STEPBENCH_NVRTC", missing)
	_, err := OpenNVRTC("")
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("OpenNVRTC with $STEPBENCH_NVRTC=%s: err = %v, want it to name that path", missing, err)
	}
}

func TestOpenCublasErrorListsSearch(t *testing.T) {
	b, err := OpenCublas("")
	if err == nil {
		t.Skipf("cuBLAS present at %s", b.Path())
	}
	for _, want := range []string{"no cuBLAS library found", "libcublas.so.12", "STEPBENCH_CUBLAS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestOpenDriverWithoutGPUSaysNoDriver(t *testing.T) {
	d, err := OpenDriver()
	if err == nil {
		n, _ := d.DeviceCount()
		t.Skipf("CUDA driver present (%d devices)", n)
	}
	msg := err.Error()
	noDriver := strings.HasPrefix(msg, "no CUDA driver: libcuda.so.1: ")
	noDevice := strings.HasPrefix(msg, "cuInit(0): CUDA_ERROR_") // driver installed, no usable GPU
	if !noDriver && !noDevice {
		t.Errorf("OpenDriver error = %q, want it to say no CUDA driver", msg)
	}
}
