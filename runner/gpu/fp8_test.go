package gpu

import (
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// fp8Backend opens the cuda backend (the emulated device without a GPU)
// on the calling goroutine, locked to its thread until the test ends.
func fp8Backend(t *testing.T) *Backend {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	be, err := New(Options{CacheDir: testCache()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := be.CheckFP8(); err != nil {
		t.Skip(err)
	}
	return be
}

var fp8Prompt = []int32{5, 9, 100, 2000, 33, 7, 8, 9, 10, 11, 400, 4000, 1, 2, 3, 4}

// compareFP8 checks an engine's generation (the decode steps replayed
// from a captured graph) against both float64 evaluations of m.
func compareFP8(t *testing.T, name string, e *runner.Engine, m *quanttest.Model64) {
	t.Helper()
	for _, bf16 := range []bool{true, false} {
		m.BF16Activations = bf16
		worst, steps, err := quanttest.Compare(e, m, fp8Prompt, 8)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		bound := quanttest.MaxRelErrFloat64
		if bf16 {
			bound = quanttest.MaxRelErrBF16Activations
		}
		t.Logf("%s, bf16 activations %v: worst %.3g (steps %.3g)", name, bf16, worst, steps)
		if worst > bound {
			t.Errorf("%s: logits %.3g from the float64 evaluation (bf16 activations %v), bound %g", name, worst, bf16, bound)
		}
	}
}

// FP8 checkpoints of every format and --quantization fp8 on dummy weights
// give, on the cuda backend (cuBLASLt's FP8 GEMMs; on the emulated device
// its stand-in), the logits of the float64 evaluation of the same model.
func TestFP8OnTheGPUMatchesFloat64(t *testing.T) {
	be := fp8Backend(t)
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range quanttest.Formats {
		dir := t.TempDir()
		m, err := quanttest.Write(dir, cfg, 7, f)
		if err != nil {
			t.Fatal(err)
		}
		qcfg, err := runner.LoadConfigFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := runner.OpenSafetensors(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Check(qcfg); err != nil {
			t.Fatal(err)
		}
		e, err := runner.NewEngine(qcfg, be, runner.WeightSource{Reader: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		compareFP8(t, string(f), e, m)
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		st.Close()
	}
	qcfg := cfg
	qcfg.Quantization = runner.QuantizeAtLoad()
	e, err := runner.NewEngine(qcfg, be, runner.WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := quanttest.DummyModel64(cfg, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	compareFP8(t, "--quantization fp8 (dummy)", e, m)
}

// --quantization fp8 quantizes dummy weights to the same bytes and scales
// on the cpu and cuda backends (the generator, the absmax and the E4M3
// rounding are exact on both).
func TestQuantizeAtLoadSameBitsOnCPUAndGPU(t *testing.T) {
	be := fp8Backend(t)
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Quantization = runner.QuantizeAtLoad()
	weights := func(b runner.Backend) map[string]runner.FP8Weight {
		e, err := runner.NewEngine(cfg, b, runner.WeightSource{Seed: 11}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		w, err := e.FP8Weights()
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	gpu, cpu := weights(be), weights(runner.NewCPU())
	if len(cpu) != 4*cfg.NumHiddenLayers {
		t.Fatalf("%d FP8 projections on the cpu backend, want %d", len(cpu), 4*cfg.NumHiddenLayers)
	}
	for name, w := range cpu {
		if !reflect.DeepEqual(gpu[name], w) {
			t.Errorf("%s: the cuda backend's FP8 bytes or scales differ from the cpu backend's", name)
		}
	}
}

// fp8Backend5 is fp8Backend with linear version 5 chosen (and extra
// versions beside it).
func fp8Backend5(t *testing.T, extra ...string) *Backend {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	sel, err := kernels.ParseSelection(append([]string{"linear=5"}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	be, err := New(Options{CacheDir: testCache(), Kernels: sel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := be.CheckFP8(); err != nil {
		t.Skip(err)
	}
	return be
}

// Under --kernel linear=5 every FP8 checkpoint format (static, dynamic per
// tensor, per-channel weights with per-token activations, an ignored
// layer) and --quantization fp8 decode on gemv_fp8, one op per projection
// (no NAME_quant, no silu_mul), to the float64 evaluation of the same
// model within the bounds the cuBLASLt path meets.
func TestFP8GemvMatchesFloat64(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	be := fp8Backend5(t)
	for _, f := range quanttest.Formats {
		dir := t.TempDir()
		m, err := quanttest.Write(dir, cfg, 7, f)
		if err != nil {
			t.Fatal(err)
		}
		qcfg, err := runner.LoadConfigFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := runner.OpenSafetensors(dir)
		if err != nil {
			t.Fatal(err)
		}
		e, err := runner.NewEngine(qcfg, be, runner.WeightSource{Reader: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ops := map[string]int{}
		e.OnOp = func(op string) { ops[op]++ }
		compareFP8(t, string(f)+" linear=5", e, m)
		for _, op := range []string{"qkv_proj_quant", "o_proj_quant", "gate_up_proj_quant", "down_proj_quant", "silu_mul"} {
			if ops[op] > 0 {
				t.Errorf("%s: linear=5 ran %s %d times: the projections were not fused", f, op, ops[op])
			}
		}
		if ops["gate_up_proj"] == 0 {
			t.Errorf("%s: no gate_up_proj op seen (%v)", f, ops)
		}
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		st.Close()
	}
	m, err := quanttest.DummyModel64(cfg, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	qcfg := cfg
	qcfg.Quantization = runner.QuantizeAtLoad()
	e, err := runner.NewEngine(qcfg, be, runner.WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	compareFP8(t, "--quantization fp8 (dummy) linear=5", e, m)
}
