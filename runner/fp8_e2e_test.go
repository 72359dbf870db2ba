package runner_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"stepbench/internal/input"
	"stepbench/kernels/ref"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

const (
	maxRelErrFP8BF16    = quanttest.MaxRelErrBF16Activations
	maxRelErrFP8Float64 = quanttest.MaxRelErrFloat64
)

// fp8Prompt is the prompt of the end-to-end checks (16 tokens, 8 generated).
var fp8Prompt = []int32{5, 9, 100, 2000, 33, 7, 8, 9, 10, 11, 400, 4000, 1, 2, 3, 4}

func tinyConfig(t *testing.T) runner.Config {
	t.Helper()
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loadFixture writes format f and opens it as a user's run does: its
// config.json parsed, its safetensors checked.
func loadFixture(t *testing.T, f quanttest.Format) (runner.Config, *runner.SafetensorsModel, *quanttest.Model64) {
	t.Helper()
	dir := t.TempDir()
	m, err := quanttest.Write(dir, tinyConfig(t), 7, f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runner.LoadConfigFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := runner.OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Check(cfg); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	return cfg, st, m
}

// Each published format's fixture loads with the scheme its files declare.
func TestFP8CheckpointsLoad(t *testing.T) {
	for _, f := range quanttest.Formats {
		cfg, _, _ := loadFixture(t, f)
		if want := quanttest.Scheme(f); !reflect.DeepEqual(cfg.Quantization, want) {
			t.Errorf("%s: quantization %+v, want %+v", f, cfg.Quantization, want)
		}
	}
}

// checkLogits compares an engine's generation with both float64
// evaluations of m.
func checkLogits(t *testing.T, name string, e *runner.Engine, m *quanttest.Model64) {
	t.Helper()
	m.BF16Activations = true
	worst, steps, err := quanttest.Compare(e, m, fp8Prompt, 8)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Logf("%s: logits against the float64 evaluation with bf16 activations: worst %.3g (steps %.3g)", name, worst, steps)
	if worst > maxRelErrFP8BF16 {
		t.Errorf("%s: logits %.3g from the float64 evaluation with bf16 activations, bound %g", name, worst, maxRelErrFP8BF16)
	}
	m.BF16Activations = false
	if worst, _, err = quanttest.Compare(e, m, fp8Prompt, 8); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Logf("%s: logits against the float64 evaluation: worst %.3g", name, worst)
	if worst > maxRelErrFP8Float64 {
		t.Errorf("%s: logits %.3g from the float64 evaluation, bound %g", name, worst, maxRelErrFP8Float64)
	}
}

// FP8 checkpoints in every format, and --quantization fp8 on dummy
// weights, give on the cpu backend the logits of the float64 evaluation
// of the same quantized model.
func TestFP8LogitsMatchFloat64(t *testing.T) {
	for _, f := range quanttest.Formats {
		cfg, st, m := loadFixture(t, f)
		e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Reader: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkLogits(t, string(f), e, m)
		e.Close()
	}
	cfg := tinyConfig(t)
	cfg.Quantization = runner.QuantizeAtLoad()
	e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m, err := quanttest.DummyModel64(tinyConfig(t), 7, true)
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, "--quantization fp8 (dummy)", e, m)
}

// The bound is far below what a bug costs: the evaluation with one part of
// one fused matrix off by its scale (k_proj of layer 0 at 4×, as a loader
// that skipped requantizing it to the largest part's scale would compute),
// or with two rows' per-channel scales swapped (layer 0's down_proj, as a
// loader that sliced the scales wrong), is far beyond the bound from the
// engine.
func TestFP8BoundCatchesAScaleBug(t *testing.T) {
	for _, bug := range []struct {
		name   string
		format quanttest.Format
		edit   func(cfg runner.Config, m *quanttest.Model64)
	}{
		{"a k_proj scale off by 4x in layer 0", quanttest.AutoFP8Static, func(cfg runner.Config, m *quanttest.Model64) {
			qkv := &m.Layers[0].QKV
			qRows, kRows := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
			for i := qRows * qkv.Cols; i < (qRows+kRows)*qkv.Cols; i++ {
				qkv.W[i] *= 4
			}
		}},
		{"two per-channel scales swapped in layer 0's down_proj", quanttest.CompressedTensorsChannel, func(cfg runner.Config, m *quanttest.Model64) {
			d := &m.Layers[0].Down
			for c := 0; c < d.Cols; c++ { // rows 0 and 2 hold weights scaled 1/2 and 2
				d.W[c] *= 4
				d.W[2*d.Cols+c] /= 4
			}
		}},
	} {
		cfg, st, m := loadFixture(t, bug.format)
		e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Reader: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		bug.edit(cfg, m)
		m.BF16Activations = true
		worst, _, err := quanttest.Compare(e, m, fp8Prompt, 4)
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.3g", bug.name, worst)
		if worst < 10*maxRelErrFP8BF16 {
			t.Errorf("%s moves the logits by only %.3g: the bound %g would not catch it", bug.name, worst, maxRelErrFP8BF16)
		}
	}
}

// --quantization fp8 with bf16 weights from a checkpoint quantizes them at
// load exactly as it does the dummy weights: the same logits.
func TestQuantizeAtLoadFromCheckpoint(t *testing.T) {
	cfg := tinyConfig(t)
	dir := t.TempDir()
	var tensors []runner.HostTensor
	for _, spec := range runner.ExpectedTensors(cfg) {
		n, cols := 1, spec.Shape[len(spec.Shape)-1]
		for _, d := range spec.Shape {
			n *= d
		}
		kind := ref.DummyUniform
		if len(spec.Shape) == 1 {
			kind = ref.DummyOnes
		}
		w := make([]uint16, n)
		ref.FillDummyRows(w, cols, 7, spec.Name, 0, uint64(cols), kind)
		data := make([]byte, 2*n)
		for i, v := range w {
			binary.LittleEndian.PutUint16(data[2*i:], v)
		}
		tensors = append(tensors, runner.HostTensor{Name: spec.Name, DType: "BF16", Shape: spec.Shape, Data: data})
	}
	if err := runner.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	st, err := runner.OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg.Quantization = runner.QuantizeAtLoad()
	if err := st.Check(cfg); err != nil {
		t.Fatal(err)
	}
	logits := func(src runner.WeightSource) []float32 {
		e, err := runner.NewEngine(cfg, runner.NewCPU(), src, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.Begin(1, len(fp8Prompt), 1, fp8Prompt); err != nil {
			t.Fatal(err)
		}
		if err := e.Prefill(); err != nil {
			t.Fatal(err)
		}
		l, err := e.Logits()
		if err != nil {
			t.Fatal(err)
		}
		return l[0]
	}
	if !reflect.DeepEqual(logits(runner.WeightSource{Reader: st}), logits(runner.WeightSource{Seed: 7})) {
		t.Error("bf16 safetensors quantized at load and dummy weights quantized at load give different logits")
	}
}

// findTensor is the index of the tensor called name.
func findTensor(ts []runner.HostTensor, name string) int {
	for i, tn := range ts {
		if tn.Name == name {
			return i
		}
	}
	return -1
}

// float32s is little-endian float32 data.
func float32s(v ...float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

const q0 = "model.layers.0.self_attn.q_proj"

// badFP8Inputs are FP8 checkpoints that must be refused: each an edit of a
// fixture and a piece of the one-line error that names what is wrong.
var badFP8Inputs = []struct {
	name   string
	format quanttest.Format
	edit   quanttest.Edit
	want   string
}{
	{"weight bf16 where FP8 is declared", quanttest.AutoFP8Static, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		i := findTensor(ts, q0+".weight")
		ts[i].DType, ts[i].Data = "BF16", append(ts[i].Data, ts[i].Data...)
		return ts
	}, `tensor "` + q0 + `.weight" in`},
	{"E5M2 weight", quanttest.AutoFP8Static, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		ts[findTensor(ts, q0+".weight")].DType = "F8_E5M2"
		return ts
	}, "dtype F8_E5M2: FP8 E5M2 weights are not supported"},
	{"missing weight scale", quanttest.AutoFP8Static, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		i := findTensor(ts, q0+".weight_scale")
		return append(ts[:i], ts[i+1:]...)
	}, `tensor "` + q0 + `.weight_scale": missing`},
	{"missing input scale", quanttest.ModelOptFP8, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		i := findTensor(ts, q0+".input_scale")
		return append(ts[:i], ts[i+1:]...)
	}, `tensor "` + q0 + `.input_scale": missing`},
	{"scale shape", quanttest.AutoFP8Static, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		i := findTensor(ts, q0+".weight_scale")
		ts[i].Shape, ts[i].Data = []int{2}, float32s(1, 1)
		return ts
	}, "shape [2], want [] or [1] (per-tensor weight scales)"},
	{"per-channel scale shape", quanttest.CompressedTensorsChannel, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		i := findTensor(ts, q0+".weight_scale")
		ts[i].Shape, ts[i].DType, ts[i].Data = []int{}, "F32", float32s(1)
		return ts
	}, "shape [], want [128 1] or [128] (per-channel weight scales)"},
	{"NaN scale", quanttest.AutoFP8Static, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		ts[findTensor(ts, q0+".weight_scale")].Data = float32s(float32(math.NaN()))
		return ts
	}, "element 0 is NaN: a scale must be positive and finite"},
	{"zero input scale", quanttest.AutoFP8Static, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		ts[findTensor(ts, q0+".input_scale")].Data = float32s(0)
		return ts
	}, "element 0 is 0: a scale must be positive and finite"},
	{"FP8 lm_head", quanttest.AutoFP8Dynamic, func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		i := findTensor(ts, "lm_head.weight")
		ts[i].DType, ts[i].Data = "F8_E4M3", ts[i].Data[:len(ts[i].Data)/2]
		return ts
	}, "only the decoder layers' projections may be FP8"},
	{"FP8 tensor in a bf16 model", quanttest.AutoFP8Dynamic, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		delete(hf, "quantization_config")
		return ts
	}, "config.json declares no FP8 quantization_config"},
	{"block scales", quanttest.AutoFP8Dynamic, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		hf["quantization_config"].(map[string]any)["weight_block_size"] = []int{128, 128}
		return ts
	}, "quantization_config.weight_block_size: block scales are not supported"},
	{"unknown quant_method", quanttest.AutoFP8Dynamic, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		hf["quantization_config"] = map[string]any{"quant_method": "awq", "bits": 4}
		return ts
	}, `quantization_config.quant_method: "awq" is not supported`},
	{"missing activation_scheme", quanttest.AutoFP8Dynamic, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		hf["quantization_config"] = map[string]any{"quant_method": "fp8"}
		return ts
	}, "quantization_config.activation_scheme: missing"},
	{"INT4 compressed-tensors", quanttest.CompressedTensorsChannel, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		hf["quantization_config"].(map[string]any)["format"] = "pack-quantized"
		return ts
	}, `quantization_config.format: "pack-quantized" is not supported`},
	{"4-bit weights declared", quanttest.CompressedTensorsChannel, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		groups := hf["quantization_config"].(map[string]any)["config_groups"].(map[string]any)
		groups["group_0"].(map[string]any)["weights"].(map[string]any)["num_bits"] = 4
		return ts
	}, "config_groups.group_0.weights.num_bits: 4: only 8-bit FP8 is supported"},
	{"block strategy", quanttest.CompressedTensorsChannel, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		groups := hf["quantization_config"].(map[string]any)["config_groups"].(map[string]any)
		groups["group_0"].(map[string]any)["weights"].(map[string]any)["strategy"] = "block"
		return ts
	}, `weights.strategy: "block" is not supported`},
	{"bad ignore regexp", quanttest.CompressedTensorsChannel, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		hf["quantization_config"].(map[string]any)["ignore"] = []string{"re:model.layers.(0"}
		return ts
	}, `quantization_config.ignore: "re:model.layers.(0"`},
	{"partly ignored fused matrix", quanttest.AutoFP8Dynamic, func(ts []runner.HostTensor, hf map[string]any) []runner.HostTensor {
		hf["quantization_config"].(map[string]any)["ignored_layers"] = []string{"lm_head", "model.layers.0.self_attn.k_proj"}
		return ts
	}, `tensor "model.layers.0.self_attn.k_proj.weight" in`},
}

// Every bad FP8 input is refused as bad input in one line naming the
// tensor or the field, before anything is loaded (the config's fields when
// it is read, the tensors by Check) or, for a fused matrix only partly
// ignored, when its weights load.
func TestBadFP8InputsGiveOneLine(t *testing.T) {
	for _, tc := range badFP8Inputs {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := quanttest.WriteEdited(dir, tinyConfig(t), 7, tc.format, tc.edit); err != nil {
				t.Fatal(err)
			}
			err := loadAll(dir)
			switch {
			case err == nil:
				t.Fatalf("accepted")
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q does not say %q", err, tc.want)
			case strings.Contains(err.Error(), "\n"):
				t.Errorf("error is more than one line: %q", err)
			case !input.IsBad(err):
				t.Errorf("error is not marked bad input: %v", err)
			}
		})
	}
}

// loadAll reads, checks and loads a model directory on the cpu backend.
func loadAll(dir string) error {
	cfg, err := runner.LoadConfigFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	st, err := runner.OpenSafetensors(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Check(cfg); err != nil {
		return err
	}
	e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Reader: st}, nil)
	if err != nil {
		return err
	}
	return e.Close()
}
