package runner_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/internal/input"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// scaleTensor is an F32 tensor of values (a scalar when shape is nil).
func scaleTensor(name string, shape []int, values ...float32) runner.HostTensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	if shape == nil {
		shape = []int{}
	}
	return runner.HostTensor{Name: name, DType: "F32", Shape: shape, Data: data}
}

// withKVScales adds layer l's K and V scales under names (a format
// string of the layer and "k"/"v"), per tensor (k(l), v(l)) or, perHead,
// one per KV head (k(l)·(1+g/4)).
func withKVScales(cfg runner.Config, names [2]string, perHead bool, k, v func(l int) float32) quanttest.Edit {
	return func(tensors []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		for l := range cfg.NumHiddenLayers {
			for i, f := range []func(int) float32{k, v} {
				name := fmt.Sprintf(names[i], l)
				if !perHead {
					tensors = append(tensors, scaleTensor(name, nil, f(l)))
					continue
				}
				vals := make([]float32, cfg.NumKeyValueHeads)
				for g := range vals {
					vals[g] = f(l) * (1 + float32(g)/4)
				}
				tensors = append(tensors, scaleTensor(name, []int{cfg.NumKeyValueHeads}, vals...))
			}
		}
		return tensors
	}
}

func openEdited(t *testing.T, f quanttest.Format, edit quanttest.Edit) (runner.Config, *runner.SafetensorsModel, *quanttest.Model64) {
	t.Helper()
	dir := t.TempDir()
	m, err := quanttest.WriteEdited(dir, tinyConfig(t), 7, f, edit)
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
	return cfg, st, m
}

// Every name vLLM reads a layer's scales under, per tensor and per KV
// head, is read; a checkpoint without them gives 1.0.
func TestReadKVScales(t *testing.T) {
	cfg := tinyConfig(t)
	k := func(l int) float32 { return float32(l+1) / 64 }
	v := func(l int) float32 { return float32(l+3) / 128 }
	for _, tc := range []struct {
		names   [2]string
		perHead bool
		kind    string
	}{
		{[2]string{"model.layers.%d.self_attn.k_scale", "model.layers.%d.self_attn.v_scale"}, false, "checkpoint"},
		{[2]string{"model.layers.%d.self_attn.k_proj.k_scale", "model.layers.%d.self_attn.v_proj.v_scale"}, true, "checkpoint"},
		{[2]string{"model.layers.%d.self_attn.qkv_proj.k_scale", "model.layers.%d.self_attn.qkv_proj.v_scale"}, false, "checkpoint"},
		{[2]string{"model.layers.%d.self_attn.kv_scale", ""}, false, "checkpoint"},
		{[2]string{}, false, "unit"},
	} {
		edit := withKVScales(cfg, tc.names, tc.perHead, k, v)
		wantV := v
		switch {
		case tc.names[0] == "":
			edit = nil
		case tc.names[1] == "": // the deprecated kv_scale: one tensor for both
			edit = func(tensors []runner.HostTensor, _ map[string]any) []runner.HostTensor {
				for l := range cfg.NumHiddenLayers {
					tensors = append(tensors, scaleTensor(fmt.Sprintf(tc.names[0], l), []int{1}, k(l)))
				}
				return tensors
			}
			wantV = k
		}
		_, st, _ := openEdited(t, quanttest.AutoFP8Dynamic, edit)
		s, src, err := runner.ReadKVScales(st, cfg)
		if err != nil {
			t.Fatalf("%v: %v", tc.names, err)
		}
		if src.Kind != tc.kind || src.PerHead != tc.perHead {
			t.Errorf("%v: source %+v, want kind %s, per head %v", tc.names, src, tc.kind, tc.perHead)
		}
		for l := range cfg.NumHiddenLayers {
			for g := range cfg.NumKeyValueHeads {
				wk, wv := float32(1), float32(1)
				if tc.kind == "checkpoint" {
					wk, wv = k(l), wantV(l)
					if tc.perHead {
						wk, wv = wk*(1+float32(g)/4), wv*(1+float32(g)/4)
					}
				}
				if s.K[l][g] != wk || s.V[l][g] != wv {
					t.Errorf("%v: layer %d head %d: scales %v, %v; want %v, %v", tc.names, l, g, s.K[l][g], s.V[l][g], wk, wv)
				}
			}
		}
	}
}

// Scales that cannot be used are bad input naming the tensor.
func TestReadKVScalesRefuses(t *testing.T) {
	cfg := tinyConfig(t)
	names := [2]string{"model.layers.%d.self_attn.k_scale", "model.layers.%d.self_attn.v_scale"}
	for _, tc := range []struct {
		name string
		edit quanttest.Edit
		want string
	}{
		{"a zero scale", withKVScales(cfg, names, false, func(int) float32 { return 0 }, func(int) float32 { return 1 }),
			`"model.layers.0.self_attn.k_scale": KV head 0's scale is 0`},
		{"three values", func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
			for l := range cfg.NumHiddenLayers {
				ts = append(ts, scaleTensor(fmt.Sprintf(names[0], l), []int{3}, 1, 2, 3), scaleTensor(fmt.Sprintf(names[1], l), nil, 1))
			}
			return ts
		}, "holds 3 values: want 1 (per tensor) or"},
		{"one layer only", func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
			return append(ts, scaleTensor(fmt.Sprintf(names[0], 1), nil, 1), scaleTensor(fmt.Sprintf(names[1], 1), nil, 1))
		}, "1 of 4 layers have them"},
		{"k without v", func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
			return append(ts, scaleTensor(fmt.Sprintf(names[0], 0), nil, 1))
		}, `"model.layers.0.self_attn.k_scale" without "model.layers.0.self_attn.v_scale"`},
	} {
		_, st, _ := openEdited(t, quanttest.AutoFP8Dynamic, tc.edit)
		_, _, err := runner.ReadKVScales(st, cfg)
		if err == nil || !input.IsBad(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want bad input containing %q", tc.name, err, tc.want)
		}
	}
}

// An FP8 checkpoint's K and V scales drive the FP8 cache: the run agrees
// with the evaluation of the file's scales, and an edited k_scale moves
// the logits to the evaluation of the edited file, away from the
// original's.
func TestFP8KVCacheScalesFromTheCheckpoint(t *testing.T) {
	cfg := tinyConfig(t)
	names := [2]string{"model.layers.%d.self_attn.k_proj.k_scale", "model.layers.%d.self_attn.v_proj.v_scale"}
	v := func(l int) float32 { return float32(l+3) / 512 }
	run := func(k func(int) float32) (worst float64, m *quanttest.Model64, e *runner.Engine) {
		cfg, st, m := openEdited(t, quanttest.ModelOptFP8, withKVScales(cfg, names, true, k, v))
		e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Reader: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := runner.ReadKVScales(st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(e.SetKVOptions(runner.KVOptions{Layout: runner.KVPaged, DType: kernels.CacheE4M3}), e.SetKVScales(s)); err != nil {
			t.Fatal(err)
		}
		m.BF16Activations, m.KVCache = true, kernels.CacheE4M3
		m.KScale, m.VScale = model64Scales(s)
		worst, _, err = quanttest.Compare(e, m, fp8Prompt, 4)
		if err != nil {
			t.Fatal(err)
		}
		return worst, m, e
	}
	orig, origModel, _ := run(func(l int) float32 { return float32(l+1) / 256 })
	edited, _, e := run(func(l int) float32 { return float32(l+1) * 40 / 256 }) // 40×: most of K in E4M3's subnormals
	defer e.Close()
	if orig > quanttest.MaxRelErrFP8KVCache || edited > quanttest.MaxRelErrFP8KVCache {
		t.Errorf("logits from the evaluation of their file's scales: %.3g (original), %.3g (edited), bound %g", orig, edited, quanttest.MaxRelErrFP8KVCache)
	}
	off, _, err := quanttest.Compare(e, origModel, fp8Prompt, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("original %.3g, edited %.3g; the edited run against the original's evaluation %.3g", orig, edited, off)
	if off < 2*quanttest.MaxRelErrFP8KVCache {
		t.Errorf("an edited k_scale moved the logits by only %.3g from the original's evaluation", off)
	}
}
