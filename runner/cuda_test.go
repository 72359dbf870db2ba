package runner

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
)

type fakeStep struct {
	launches, destroys *int
}

func (s fakeStep) Launch() error  { *s.launches++; return nil }
func (s fakeStep) Destroy() error { *s.destroys++; return nil }

// capturingCPU is the cpu backend pretending to capture: ops still run
// eagerly during the capture (so the engine's checks hold) and a replay
// does nothing; only the engine's bookkeeping is under test.
type capturingCPU struct {
	*CPU
	enabled                          bool
	begins, ends, launches, destroys int
	capturing                        bool
}

func (c *capturingCPU) CaptureEnabled() bool { return c.enabled }
func (c *capturingCPU) BeginCapture() error {
	if c.capturing {
		return errors.New("already capturing")
	}
	c.begins++
	c.capturing = true
	return nil
}
func (c *capturingCPU) EndCapture() (CapturedStep, error) {
	c.ends++
	c.capturing = false
	return fakeStep{&c.launches, &c.destroys}, nil
}

func TestEngineCapturesDecodeOncePerBuffers(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []bool{true, false} {
		be := &capturingCPU{CPU: NewCPU(), enabled: enabled}
		e, err := NewEngine(cfg, be, WeightSource{Seed: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		run := func(batch, input, output int) {
			t.Helper()
			prompts := make([]int32, batch*input)
			if err := e.Begin(batch, input, output, prompts); err != nil {
				t.Fatal(err)
			}
			if err := e.Prefill(); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < output; i++ {
				if err := e.Decode(); err != nil {
					t.Fatal(err)
				}
				if got, want := e.Position(), input+i; got != want {
					t.Fatalf("after decode %d: position %d, want %d", i, got, want)
				}
			}
		}
		run(2, 4, 5) // one eager step (loads every kernel), capture once, replay: 3 launches
		run(2, 4, 5) // same buffers: replay only, 4 launches
		wantBegins, wantLaunches := 1, 7
		if !enabled {
			wantBegins, wantLaunches = 0, 0
		}
		if be.begins != wantBegins || be.ends != wantBegins || be.launches != wantLaunches || be.destroys != 0 {
			t.Errorf("graphs enabled=%v: begins %d ends %d launches %d destroys %d, want %d %d %d 0",
				enabled, be.begins, be.ends, be.launches, be.destroys, wantBegins, wantBegins, wantLaunches)
		}
		run(3, 4, 5) // new batch: buffers reallocated, the old graph destroyed
		if enabled && (be.destroys != 1 || be.begins != 2) {
			t.Errorf("after a new batch: destroys %d begins %d, want 1 and 2", be.destroys, be.begins)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if enabled && be.destroys != 2 {
			t.Errorf("after Close: destroys %d, want 2", be.destroys)
		}
	}
}

func TestDecodeGraphsInvalidate(t *testing.T) {
	var launches, destroys int
	var g decodeGraphs
	if g.get(graphKey{1, 8}) != nil {
		t.Fatal("empty cache returned a graph")
	}
	g.put(graphKey{1, 8}, fakeStep{&launches, &destroys})
	g.put(graphKey{4, 8}, fakeStep{&launches, &destroys})
	if g.get(graphKey{1, 8}) == nil || g.get(graphKey{1, 9}) != nil {
		t.Fatal("lookup by (batch, maxSeq) is wrong")
	}
	if err := g.invalidate(); err != nil {
		t.Fatal(err)
	}
	if destroys != 2 || g.len() != 0 {
		t.Errorf("invalidate: %d destroyed, %d left; want 2, 0", destroys, g.len())
	}
}

func TestCheckFits(t *testing.T) {
	est := MemoryEstimate{WeightBytes: 16e9, KVCacheBytes: 4e9, ActivationBytes: 1e9}
	tests := []struct {
		name      string
		freeBytes uint64
		wantErr   string
	}{
		{"fits", 30e9, ""},
		{"exactly with headroom", 22e9, ""},
		{"short by the headroom", 21.5e9, "needs 22.00 GB"},
		{"far too small", 8e9, "only 8.00 GB of 80.00 GB are free"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkFits(est, tt.freeBytes, 80e9, 1e9, "H100")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "weights 16.00 GB") {
				t.Fatalf("error %v, want it to mention %q and the parts", err, tt.wantErr)
			}
		})
	}
}

func TestCUDAOperandChecks(t *testing.T) {
	good := &cudaBuffer{ptr: 1 << 20, dt: BF16, n: 64}
	tests := []struct {
		name string
		b    Buffer
		dt   DType
		need int
		want string
	}{
		{"ok", good, BF16, 64, ""},
		{"too short", good, BF16, 65, "holds 64 elements, needs 65"},
		{"wrong dtype", good, I32, 1, "is bf16, want i32"},
		{"freed", &cudaBuffer{dt: BF16}, BF16, 0, "was freed"},
		{"cpu buffer", &cpuBuffer{dt: BF16}, BF16, 0, "not a cuda buffer"},
		{"nil", nil, BF16, 0, "is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dev(tt.b, tt.dt, tt.need, "op", "x", false)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestCUDAMatchesCPU runs llama-tiny end to end on the GPU (decode from a
// captured graph, then eager) against the cpu backend; without a GPU, on the
// emulated device.
func TestCUDAMatchesCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{{1, 2, 3, 4, 5}, {7}, {100, 3, 200, 17, 9, 9, 9, 42}}
	for _, disable := range []bool{false, true} {
		be, err := NewCUDA(CUDAOptions{CacheDir: t.TempDir(), DisableGraphs: disable})
		if err != nil {
			t.Fatal(err)
		}
		results, err := CompareWithCPU(be, cfg, 7, prompts, 12)
		if closeErr := be.Close(); closeErr != nil {
			t.Error(closeErr)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.MaxLogitsRelErr > 2e-2 || !r.TokensMatch() {
				t.Errorf("graphs disabled=%v prompt %d: logits rel err %.3g, tokens %v, cpu %v", disable, i, r.MaxLogitsRelErr, r.Tokens, r.RefTokens)
			}
		}
	}
}

func TestSameKindRefusesAMixOfEmulatedAndRealLibraries(t *testing.T) {
	for _, tt := range []struct {
		driver, nvrtc, cublas string
		ok                    bool
	}{
		{"", "", "", true},
		{"emu", "emu", "emu", true},
		{"emu", "", "emu", false},
		{"", "emu", "", false},
		{"", "", "emu", false},
	} {
		err := sameKind(tt.driver, tt.nvrtc, tt.cublas)
		if (err == nil) != tt.ok {
			t.Errorf("sameKind(%q, %q, %q) = %v, want ok=%v", tt.driver, tt.nvrtc, tt.cublas, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "STEPBENCH_CUDA_LIBS") {
			t.Errorf("error does not say how to fix it: %v", err)
		}
	}
}
