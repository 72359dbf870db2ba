package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// stSmallConfig is a model small enough to write every tensor of in a test.
var stSmallConfig = Config{
	Name: "test", HiddenSize: 16, IntermediateSize: 32, NumHiddenLayers: 2,
	NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, VocabSize: 64,
	RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 128,
}

func stBytes16(values []uint16) []byte {
	out := make([]byte, 2*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint16(out[2*i:], v)
	}
	return out
}

func stBytes32(values []float32) []byte {
	out := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

// stBF16Tensor is a BF16 tensor of the given shape whose element i is i+seed
// as a bf16 bit pattern (distinct per tensor, so mix-ups show).
func stBF16Tensor(name string, shape []int, seed uint16) HostTensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	values := make([]uint16, n)
	for i := range values {
		values[i] = uint16(i) + seed
	}
	return HostTensor{Name: name, DType: "BF16", Shape: shape, Data: stBytes16(values)}
}

// stModelTensors returns every tensor cfg needs, as BF16.
func stModelTensors(cfg Config) []HostTensor {
	var tensors []HostTensor
	for i, spec := range ExpectedTensors(cfg) {
		tensors = append(tensors, stBF16Tensor(spec.Name, spec.Shape, uint16(i*7)))
	}
	return tensors
}

func stWrite(t *testing.T, path string, tensors []HostTensor, metadata map[string]string) {
	t.Helper()
	if err := WriteSafetensors(path, tensors, metadata); err != nil {
		t.Fatal(err)
	}
}

func TestExpectedTensors(t *testing.T) {
	tied := stSmallConfig
	tied.TieWordEmbeddings = true
	tests := []struct {
		cfg       Config
		wantCount int
		wantLast  string
	}{
		{stSmallConfig, 1 + 9*2 + 2, "lm_head.weight"},
		{tied, 1 + 9*2 + 1, "model.norm.weight"},
	}
	for _, tt := range tests {
		specs := ExpectedTensors(tt.cfg)
		if len(specs) != tt.wantCount || specs[len(specs)-1].Name != tt.wantLast {
			t.Errorf("tied=%v: %d tensors ending %q, want %d ending %q",
				tt.cfg.TieWordEmbeddings, len(specs), specs[len(specs)-1].Name, tt.wantCount, tt.wantLast)
		}
	}
	shapes := map[string][]int{}
	for _, s := range ExpectedTensors(stSmallConfig) {
		shapes[s.Name] = s.Shape
	}
	wantShapes := map[string][]int{
		"model.embed_tokens.weight":                      {64, 16},
		"model.layers.1.self_attn.q_proj.weight":         {32, 16},
		"model.layers.1.self_attn.k_proj.weight":         {16, 16},
		"model.layers.1.self_attn.v_proj.weight":         {16, 16},
		"model.layers.1.self_attn.o_proj.weight":         {16, 32},
		"model.layers.0.mlp.gate_proj.weight":            {32, 16},
		"model.layers.0.mlp.up_proj.weight":              {32, 16},
		"model.layers.0.mlp.down_proj.weight":            {16, 32},
		"model.layers.0.input_layernorm.weight":          {16},
		"model.layers.0.post_attention_layernorm.weight": {16},
		"model.norm.weight":                              {16},
		"lm_head.weight":                                 {64, 16},
	}
	for name, want := range wantShapes {
		if got := shapes[name]; !slices.Equal(got, want) {
			t.Errorf("%s: shape %v, want %v", name, got, want)
		}
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	f32Values := []float32{
		1,
		1 + 1.0/256,             // exactly halfway between two bf16: ties to even (down)
		1 + 3.0/256,             // halfway: ties to even (up)
		1 + 1.0/128 + 1.0/65536, // above halfway: up
		-2.5, 0, float32(math.Inf(-1)), 65504,
	}
	f32Want := []uint16{0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x0000, 0xff80, 0x4780}
	f16Values := []uint16{
		0x3c00, // 1.0
		0x0001, // 2^-24, the smallest subnormal
		0x8200, // -2^-15, subnormal
		0x7c00, // +inf
		0xfc00, // -inf
		0x3555, // 0.333251953125 = 0x3eaaa000: rounds up
		0x7bff, // 65504 = 0x477fe000: rounds up to 65536
		0x8000, // -0
	}
	f16Want := []uint16{0x3f80, 0x3380, 0xb800, 0x7f80, 0xff80, 0x3eab, 0x4780, 0x8000}
	bf16Values := []uint16{0x3f80, 0x7fc0, 0x0001, 0xffff}

	tensors := []HostTensor{
		{Name: "f32", DType: "F32", Shape: []int{2, 4}, Data: stBytes32(f32Values)},
		{Name: "f16", DType: "F16", Shape: []int{8}, Data: stBytes16(f16Values)},
		{Name: "bf16", DType: "BF16", Shape: []int{2, 2}, Data: stBytes16(bf16Values)},
		{Name: "empty", DType: "BF16", Shape: []int{0, 3}, Data: nil},
		{Name: "scalar", DType: "F32", Shape: nil, Data: stBytes32([]float32{3})},
		{Name: "f16nan", DType: "F16", Shape: []int{1}, Data: stBytes16([]uint16{0x7e00})},
	}
	dir := t.TempDir()
	metadata := map[string]string{"format": "pt", "seed": "7"}
	stWrite(t, filepath.Join(dir, "model.safetensors"), tensors, metadata)
	m, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	if got, want := m.Names(), []string{"bf16", "empty", "f16", "f16nan", "f32", "scalar"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got := m.Metadata(); !reflect.DeepEqual(got, metadata) {
		t.Errorf("Metadata() = %v, want %v", got, metadata)
	}
	tests := []struct {
		name string
		want []uint16
	}{
		{"f32", f32Want},
		{"f16", f16Want},
		{"bf16", bf16Values},
		{"empty", []uint16{}},
		{"scalar", []uint16{0x4040}},
	}
	for _, tt := range tests {
		got, err := m.BF16(tt.name)
		if err != nil {
			t.Errorf("BF16(%q): %v", tt.name, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("BF16(%q) = %#04x, want %#04x", tt.name, got, tt.want)
		}
	}
	nan, err := m.BF16("f16nan")
	if err != nil || len(nan) != 1 || !math.IsNaN(float64(math.Float32frombits(uint32(nan[0])<<16))) {
		t.Errorf("BF16(f16nan) = %#04x, %v; want one NaN", nan, err)
	}
	if _, err := m.BF16("absent"); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("BF16(absent) = %v, want an error naming the tensor", err)
	}
}

func TestWriteSafetensorsIsAligned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.safetensors")
	stWrite(t, path, []HostTensor{stBF16Tensor("x", []int{3}, 0)}, map[string]string{"k": "v"})
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(raw); n%8 != 0 || int(n)+8+6 != len(raw) {
		t.Errorf("header length %d (file %d bytes): want a multiple of 8 followed by 6 data bytes", n, len(raw))
	}
}

func TestWriteSafetensorsRefuses(t *testing.T) {
	tests := []struct {
		name    string
		tensors []HostTensor
		want    string
	}{
		{"short data", []HostTensor{{Name: "a", DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}}, "Data holds 4"},
		{"unknown dtype", []HostTensor{{Name: "a", DType: "Q4", Shape: []int{1}, Data: make([]byte, 1)}}, "Q4"},
		{"duplicate", []HostTensor{stBF16Tensor("a", []int{1}, 0), stBF16Tensor("a", []int{1}, 0)}, "twice"},
		{"reserved name", []HostTensor{stBF16Tensor("__metadata__", []int{1}, 0)}, "reserved"},
		{"negative dim", []HostTensor{{Name: "a", DType: "BF16", Shape: []int{-1}}}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.safetensors")
			err := WriteSafetensors(path, tt.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("WriteSafetensors = %v, want an error naming %s and %q", err, path, tt.want)
			}
			if _, statErr := os.Stat(path); statErr == nil {
				t.Errorf("a refused write left %s behind", path)
			}
		})
	}
}

func TestSafetensorsFullModel(t *testing.T) {
	tensors := stModelTensors(stSmallConfig)
	// HF checkpoints carry extras the model does not need; they must be ignored.
	tensors = append(tensors, HostTensor{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", DType: "F32",
		Shape: []int{4}, Data: stBytes32([]float32{1, 0.1, 0.01, 0.001})})
	dir := t.TempDir()
	stWrite(t, filepath.Join(dir, "model.safetensors"), tensors, nil)
	m, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Check(stSmallConfig); err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, tensor := range tensors[:len(tensors)-1] {
		got, err := m.BF16(tensor.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(stBytes16(got), tensor.Data) {
			t.Errorf("BF16(%q) differs from what was written", tensor.Name)
		}
	}
}

func stWriteIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// stWriteShardedModel writes stSmallConfig's tensors over two shards and an index.
func stWriteShardedModel(t *testing.T) (dir string, tensors []HostTensor) {
	dir = t.TempDir()
	tensors = stModelTensors(stSmallConfig)
	half := len(tensors) / 2
	shards := [][]HostTensor{tensors[:half], tensors[half:]}
	weightMap := map[string]string{}
	for i, shard := range shards {
		file := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		stWrite(t, filepath.Join(dir, file), shard, map[string]string{"format": "pt"})
		for _, tensor := range shard {
			weightMap[tensor.Name] = file
		}
	}
	stWriteIndex(t, dir, weightMap)
	return dir, tensors
}

func TestSafetensorsShardedRoundTrip(t *testing.T) {
	dir, tensors := stWriteShardedModel(t)
	m, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Check(stSmallConfig); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(m.Names()) != len(tensors) {
		t.Errorf("%d tensors, want %d", len(m.Names()), len(tensors))
	}
	for _, tensor := range tensors {
		got, err := m.BF16(tensor.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(stBytes16(got), tensor.Data) {
			t.Errorf("BF16(%q) differs from what was written", tensor.Name)
		}
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestSafetensorsCheckRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	stWrite(t, path, stModelTensors(stSmallConfig)[1:], nil) // no embed_tokens
	m, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	wider := stSmallConfig
	wider.IntermediateSize = 48
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"missing tensor", stSmallConfig, []string{"model.embed_tokens.weight", "missing", path, "[64 16]"}},
		{"shape mismatch", wider, []string{"model.layers.0.mlp.gate_proj.weight", path, "shape [32 16], want [48 16]"}},
		{"invalid config", Config{Name: "broken"}, []string{"broken", "hidden_size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.Check(tt.cfg)
			if err == nil {
				t.Fatal("Check accepted mismatched weights")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
	// A wildly wrong config reports a few tensors and a count, not hundreds of lines.
	wrongHidden := stSmallConfig
	wrongHidden.HiddenSize = 32
	if err := m.Check(wrongHidden); strings.Count(err.Error(), "\n") > 10 || !strings.Contains(err.Error(), "more") {
		t.Errorf("error for many mismatches is not capped: %q", err)
	}
}

// stRaw builds a file from a literal header and dataLen zero bytes.
func stRaw(header string, dataLen int) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, make([]byte, dataLen)...)
}

// stValid writes a valid one-tensor file at path and returns its bytes.
func stValid(t *testing.T, path string) []byte {
	stWrite(t, path, []HostTensor{stBF16Tensor("w", []int{4, 4}, 1)}, nil)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// malformedSafetensors are broken files and what the error must say.
var malformedSafetensors = []struct {
	name   string
	build  func(t *testing.T, path string) []byte
	tensor string // the tensor the error must name, if any
	want   string
}{
	{"empty file", func(*testing.T, string) []byte { return nil }, "", "shorter than"},
	{"five bytes", func(*testing.T, string) []byte { return []byte{1, 2, 3, 4, 5} }, "", "shorter than"},
	{"truncated data", func(t *testing.T, p string) []byte { r := stValid(t, p); return r[:len(r)-3] }, "w", "out of bounds"},
	{"header length beyond file", func(*testing.T, string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, 1000), `{}`...)
	}, "", "header length 1000"},
	{"header length huge", func(*testing.T, string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, math.MaxUint64), `{}`...)
	}, "", "header length"},
	{"bad JSON", func(*testing.T, string) []byte { return stRaw(`{"w": {"dtype": "BF16",`, 0) }, "", "JSON"},
	{"header not an object", func(*testing.T, string) []byte { return stRaw(`[1,2]`, 0) }, "", "JSON"},
	{"unknown dtype", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}}`, 2)
	}, "w", "unknown dtype"},
	{"F64 unsupported", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}`, 16)
	}, "w", "unsupported dtype F64"},
	{"I8 unsupported", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]}}`, 2)
	}, "w", "unsupported dtype I8"},
	{"U16 unsupported", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]}}`, 4)
	}, "w", "unsupported dtype U16"},
	{"missing dtype", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"shape": [2], "data_offsets": [0, 4]}}`, 4)
	}, "w", "dtype is missing"},
	{"offsets beyond data", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "BF16", "shape": [4], "data_offsets": [4, 12]}}`, 8)
	}, "w", "out of bounds"},
	{"offsets reversed", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 4]}}`, 8)
	}, "w", "out of bounds"},
	{"negative offset", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [-4, 0]}}`, 8)
	}, "w", "header entry"},
	{"three offsets", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4, 8]}}`, 8)
	}, "w", "data_offsets"},
	{"overlapping", func(*testing.T, string) []byte {
		return stRaw(`{"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
			"b": {"dtype": "BF16", "shape": [4], "data_offsets": [6, 14]}}`, 16)
	}, "b", "overlap"},
	{"shape times size not bytes", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}`, 8)
	}, "w", "shape [3] × 4 bytes"},
	{"shape overflow", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 0]}}`, 8)
	}, "w", "exceeds"},
	{"negative dim", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "F32", "shape": [-1, -2], "data_offsets": [0, 8]}}`, 8)
	}, "w", "negative"},
	{"missing shape", func(*testing.T, string) []byte {
		return stRaw(`{"w": {"dtype": "F32", "data_offsets": [0, 8]}}`, 8)
	}, "w", "shape is missing"},
	{"metadata not strings", func(*testing.T, string) []byte {
		return stRaw(`{"__metadata__": {"n": 3}}`, 0)
	}, "", "__metadata__"},
}

func TestOpenSafetensorsRefusesMalformed(t *testing.T) {

	for _, tt := range malformedSafetensors {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "model.safetensors")
			contents := tt.build(t, path)
			if err := os.WriteFile(path, contents, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := OpenSafetensors(dir)
			if err == nil {
				m.Close()
				t.Fatal("OpenSafetensors accepted a malformed file")
			}
			for _, want := range []string{path, tt.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if tt.tensor != "" && !strings.Contains(err.Error(), `"`+tt.tensor+`"`) {
				t.Errorf("error %q does not name tensor %q", err, tt.tensor)
			}
		})
	}
}

func TestOpenSafetensorsRefusesHugeHeader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	const headerLen = maxSafetensorsHeaderBytes + 1
	if err := os.WriteFile(path, binary.LittleEndian.AppendUint64(nil, headerLen), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 8+headerLen); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	_, err := OpenSafetensors(dir)
	if err == nil || !strings.Contains(err.Error(), "limit") || !strings.Contains(err.Error(), path) {
		t.Errorf("OpenSafetensors = %v, want the header limit error naming %s", err, path)
	}
}

func TestOpenSafetensorsRefusesBadIndex(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"no weights at all", func(*testing.T, string) {}, []string{"model.safetensors.index.json", "neither"}},
		{"index names a missing shard", func(t *testing.T, dir string) {
			stWriteIndex(t, dir, map[string]string{"w": "model-00009-of-00009.safetensors"})
		}, []string{"model-00009-of-00009.safetensors", "model.safetensors.index.json"}},
		{"index names a tensor the shard lacks", func(t *testing.T, dir string) {
			stWrite(t, filepath.Join(dir, "s1.safetensors"), []HostTensor{stBF16Tensor("a", []int{2}, 0)}, nil)
			stWriteIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s1.safetensors"})
		}, []string{`"b"`, "s1.safetensors"}},
		{"tensor in two shards", func(t *testing.T, dir string) {
			stWrite(t, filepath.Join(dir, "s1.safetensors"), []HostTensor{stBF16Tensor("a", []int{2}, 0)}, nil)
			stWrite(t, filepath.Join(dir, "s2.safetensors"), []HostTensor{stBF16Tensor("a", []int{2}, 0)}, nil)
			stWriteIndex(t, dir, map[string]string{"a": "s1.safetensors", "x": "s2.safetensors"})
		}, []string{`"a"`, "s1.safetensors", "s2.safetensors"}},
		{"shard escapes the directory", func(t *testing.T, dir string) {
			stWriteIndex(t, dir, map[string]string{"a": "../elsewhere.safetensors"})
		}, []string{`"a"`, "../elsewhere.safetensors"}},
		{"malformed shard", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "s1.safetensors"), []byte("garbage!!"), 0o644); err != nil {
				t.Fatal(err)
			}
			stWriteIndex(t, dir, map[string]string{"a": "s1.safetensors"})
		}, []string{"s1.safetensors", "header length"}},
		{"empty weight_map", func(t *testing.T, dir string) { stWriteIndex(t, dir, map[string]string{}) },
			[]string{"weight_map"}},
		{"index not JSON", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte("{"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"model.safetensors.index.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			m, err := OpenSafetensors(dir)
			if err == nil {
				m.Close()
				t.Fatal("OpenSafetensors accepted a bad model directory")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestF16ToF32AllFinite(t *testing.T) {
	// Every finite binary16 value must widen exactly: check against the
	// definition (-1)^s × 2^(e-15) × (1 + m/1024), or 2^-14 × m/1024 when e = 0.
	for h := 0; h < 1<<16; h++ {
		exp := (h >> 10) & 0x1f
		if exp == 0x1f {
			continue
		}
		mant := float64(h & 0x3ff)
		var want float64
		if exp == 0 {
			want = math.Ldexp(mant/1024, -14)
		} else {
			want = math.Ldexp(1+mant/1024, exp-15)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if got := f16ToF32(uint16(h)); float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("f16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

func FuzzSafetensorsHeader(f *testing.F) {
	dir := f.TempDir()
	seedPath := filepath.Join(dir, "seed.safetensors")
	if err := WriteSafetensors(seedPath, []HostTensor{
		stBF16Tensor("a", []int{2, 3}, 0),
		{Name: "b", DType: "F32", Shape: []int{2}, Data: stBytes32([]float32{1, 2})},
		{Name: "c", DType: "F16", Shape: []int{1}, Data: stBytes16([]uint16{0x3c00})},
	}, map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(seedPath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Add(stRaw(`{"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [2, 6]}}`, 8))
	f.Add(stRaw(`{"a": {"dtype": "F32", "shape": [0, 9223372036854775807], "data_offsets": [0, 0]}}`, 0))
	f.Add(stRaw(`{"__metadata__": null, "a": null}`, 0))

	modelDir := f.TempDir()
	f.Fuzz(func(t *testing.T, contents []byte) {
		// In memory: the parser alone, with every accepted tensor converted.
		if parsed, err := parseSafetensors("fuzz", bytes.NewReader(contents), int64(len(contents))); err == nil {
			m := &SafetensorsModel{source: "fuzz", files: []*safetensorsFile{parsed}, byName: map[string]*safetensorsFile{}}
			for name := range parsed.tensors {
				m.byName[name] = parsed
			}
			for name := range parsed.tensors {
				if _, err := m.BF16(name); err != nil {
					t.Errorf("BF16(%q) of an accepted file: %v", name, err)
				}
			}
			_ = m.Check(stSmallConfig)
		}
		// Through the file system, as users reach it. Fuzz calls
		// within one process are sequential, so one directory serves them all.
		if err := os.WriteFile(filepath.Join(modelDir, "model.safetensors"), contents, 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := OpenSafetensors(modelDir); err == nil {
			for _, name := range m.Names() {
				_, _ = m.BF16(name)
			}
			if err := m.Close(); err != nil {
				t.Error(err)
			}
		}
	})
}

func TestSafetensorsBF16Unaligned(t *testing.T) {
	// A gap of one byte puts the tensor at an odd offset.
	header := `{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [1, 5]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	contents := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	contents = append(contents, header...)
	contents = append(contents, 0xee, 0x80, 0x3f, 0x00, 0x40)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), contents, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.BF16("w")
	if want := []uint16{0x3f80, 0x4000}; err != nil || !slices.Equal(got, want) {
		t.Errorf("BF16(w) = %#04x, %v; want %#04x", got, err, want)
	}
}
