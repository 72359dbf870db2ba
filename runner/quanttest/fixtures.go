package quanttest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"stepbench/kernels/ref"
	"stepbench/runner"
)

// Format is a published FP8 checkpoint format, as the tests write it.
type Format string

const (
	// AutoFP8Static: quant_method "fp8", activation_scheme static: F32
	// scalar weight_scale and input_scale per projection, lm_head bf16
	// (ignored_layers), as AutoFP8 and neuralmagic's Llama-3 FP8 models.
	AutoFP8Static Format = "autofp8-static"
	// AutoFP8Dynamic: the same without input scales.
	AutoFP8Dynamic Format = "autofp8-dynamic"
	// CompressedTensorsChannel: compressed-tensors float-quantized, weights
	// per channel ([out, 1] scales, BF16 in the file), inputs dynamic per
	// token, ignore ["lm_head", one layer's down_proj by "re:"], as
	// llm-compressor's FP8_DYNAMIC scheme writes.
	CompressedTensorsChannel Format = "compressed-tensors-channel"
	// ModelOptFP8: NVIDIA ModelOpt's hf_quant_config.json (quant_algo FP8,
	// exclude_modules ["lm_head"]), F32 scalar weight and input scales.
	ModelOptFP8 Format = "modelopt-fp8"
)

// Formats lists every Format.
var Formats = []Format{AutoFP8Static, AutoFP8Dynamic, CompressedTensorsChannel, ModelOptFP8}

// partFactor scales each projection's dummy weights, so that the parts of a
// fused matrix have different scales (powers of two: exact in bf16).
var partFactor = map[string]float32{"q_proj": 1, "k_proj": 0.25, "v_proj": 2, "o_proj": 1,
	"gate_proj": 1, "up_proj": 0.5, "down_proj": 2}

// inputScaleFactor spreads the static input scales of parts that read the
// same input, so that the loader's choice (the largest) matters.
var inputScaleFactor = map[string]float64{"q_proj": 1, "k_proj": 1.25, "v_proj": 1.5, "o_proj": 1, "gate_proj": 1, "up_proj": 1.2, "down_proj": 1}

// CalibrationPrompt is the prompt static input scales are measured on.
var CalibrationPrompt = []int32{1, 17, 42, 99, 250, 3, 7, 1000, 11, 64, 5, 300}

// Write writes a checkpoint of cfg's shape in format f to dir (config.json,
// model.safetensors and, for ModelOpt, hf_quant_config.json) from the dummy
// generator's bf16 weights (seed), each projection quantized to E4M3 as the
// format's tools do, and returns the float64 evaluation of the model the
// files hold, fused as a loader must (docs/fp8.md: per-tensor scales of
// q/k/v and gate/up requantized to the largest, static input scales the
// largest, per-channel scales row by row).
func Write(dir string, cfg runner.Config, seed uint64, f Format) (*Model64, error) {
	return WriteEdited(dir, cfg, seed, f, nil)
}

// Edit changes a fixture before it is written: its tensors and its
// config.json (HF keys); the Model64 returned is still the unedited model's.
type Edit func(tensors []runner.HostTensor, hfConfig map[string]any) []runner.HostTensor

// WriteEdited is Write with edit applied to the files (nil: none), for
// tests of what the loader refuses.
func WriteEdited(dir string, cfg runner.Config, seed uint64, f Format, edit Edit) (*Model64, error) {
	bf16 := dummyTensors(cfg, seed)
	m := baseModel64(cfg, bf16)
	static := f == AutoFP8Static || f == ModelOptFP8
	var inputs map[[2]int]float64
	if static {
		dense, err := fusedModel64(cfg, bf16, nil)
		if err != nil {
			return nil, err
		}
		inputs = dense.Calibrate(CalibrationPrompt)
	}
	q := scheme(f)
	var tensors []runner.HostTensor
	files := map[string]quantized{}
	for _, spec := range runner.ExpectedTensors(cfg) {
		mod := strings.TrimSuffix(spec.Name, ".weight")
		if !isProjection(spec.Name) || q.Ignored(mod) {
			tensors = append(tensors, runner.HostTensor{Name: spec.Name, DType: "BF16", Shape: spec.Shape, Data: bytes16(bf16[spec.Name])})
			continue
		}
		qt := quantize1(bf16[spec.Name], spec.Shape[0], spec.Shape[1], q.WeightScales == runner.ScalesChannel)
		if static {
			qt.input = inputs[projectionKey(spec.Name)] / ref.FP8Max * inputScaleFactor[shortName(mod)]
		}
		tensors = append(tensors, qt.tensors(mod, f)...)
		files[mod] = qt
	}
	if err := writeFiles(dir, cfg, f, tensors, edit); err != nil {
		return nil, err
	}
	return m, fuseQuantized(m, cfg, q, files, bf16)
}

// scheme is the runner.Quantization a Format's files declare (what the
// parsers must make of them).
func scheme(f Format) *runner.Quantization {
	switch f {
	case AutoFP8Static, AutoFP8Dynamic:
		q := &runner.Quantization{Method: runner.MethodFP8, Format: runner.FormatFP8, WeightScales: runner.ScalesTensor,
			Activations: runner.ActStatic, Ignore: []string{"lm_head"}, IgnoreSyntax: runner.IgnoreExact}
		if f == AutoFP8Dynamic {
			q.Activations = runner.ActDynamicTensor
		}
		return q
	case CompressedTensorsChannel:
		return &runner.Quantization{Method: runner.MethodFP8, Format: runner.FormatCompressedTensors, WeightScales: runner.ScalesChannel,
			Activations: runner.ActDynamicToken, Ignore: []string{"lm_head", `re:model\.layers\.1\.mlp\.down_proj$`}, IgnoreSyntax: runner.IgnoreRegexp}
	}
	return &runner.Quantization{Method: runner.MethodFP8, Format: runner.FormatModelOpt, WeightScales: runner.ScalesTensor,
		Activations: runner.ActStatic, Ignore: []string{"lm_head"}, IgnoreSyntax: runner.IgnoreWildcard}
}

// Scheme is the runner.Quantization a Format's files declare.
func Scheme(f Format) *runner.Quantization { return scheme(f) }

// quantized is one projection in E4M3 with its scales.
type quantized struct {
	bytes      []uint8
	scales     []float32 // 1, or one per row
	rows, cols int
	input      float64 // static input scale, 0 without
}

// quantize1 quantizes a [rows, cols] bf16 weight per tensor or per channel.
func quantize1(w []uint16, rows, cols int, perChannel bool) quantized {
	q := quantized{bytes: make([]uint8, len(w)), rows: rows, cols: cols}
	if perChannel {
		q.scales = make([]float32, rows)
		ref.QuantizeFP8Token(q.bytes, q.scales, w, rows, cols)
	} else {
		q.scales = []float32{ref.QuantizeFP8Tensor(q.bytes, w)}
	}
	return q
}

// tensors are the projection's tensors in format f's dtypes and shapes.
func (q *quantized) tensors(mod string, f Format) []runner.HostTensor {
	out := []runner.HostTensor{{Name: mod + ".weight", DType: "F8_E4M3", Shape: []int{q.rows, q.cols}, Data: q.bytes}}
	if f == CompressedTensorsChannel {
		// bf16 scales [out, 1]: what the file says is what the model computes with.
		b := make([]uint16, len(q.scales))
		for i, s := range q.scales {
			b[i] = ref.F32ToBF16(s)
			q.scales[i] = ref.BF16ToF32(b[i])
		}
		out = append(out, runner.HostTensor{Name: mod + ".weight_scale", DType: "BF16", Shape: []int{q.rows, 1}, Data: bytes16(b)})
	} else {
		out = append(out, runner.HostTensor{Name: mod + ".weight_scale", DType: "F32", Shape: []int{}, Data: bytes32(q.scales)})
	}
	if q.input > 0 {
		in := float32(q.input)
		q.input = float64(in)
		out = append(out, runner.HostTensor{Name: mod + ".input_scale", DType: "F32", Shape: []int{}, Data: bytes32([]float32{in})})
	}
	return out
}

// fuseQuantized sets m's projections from the quantized parts (and bf16
// ones for ignored modules) as the loader must fuse them.
func fuseQuantized(m *Model64, cfg runner.Config, q *runner.Quantization, files map[string]quantized, bf16 map[string][]uint16) error {
	for l := range m.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		for _, f := range projectionParts(cfg, &m.Layers[l]) {
			if q.Ignored(pre + f.parts[0]) {
				*f.dst = bf16Linear(bf16, pre, f.parts, f.cols)
				continue
			}
			*f.dst = fuse(files, pre, f.parts, q)
		}
	}
	return nil
}

// fuse is the fused projection of quantized parts: per-tensor scales
// unified to the largest (the others requantized to it), per-channel
// scales row by row, the largest static input scale.
func fuse(files map[string]quantized, pre string, parts []string, q *runner.Quantization) Linear64 {
	top := float32(0)
	for _, p := range parts {
		top = max(top, files[pre+p].scales[0])
	}
	lin := Linear64{Act: q.Activations}
	for _, p := range parts {
		qt := files[pre+p]
		lin.Rows, lin.Cols = lin.Rows+qt.rows, qt.cols
		lin.StaticScale = math.Max(lin.StaticScale, qt.input)
		bytes := qt.bytes
		if q.WeightScales == runner.ScalesTensor && qt.scales[0] != top {
			bytes = make([]uint8, len(qt.bytes))
			ref.RequantizeE4M3(bytes, qt.bytes, qt.scales[0], top)
		}
		for r := 0; r < qt.rows; r++ {
			s := top
			if q.WeightScales == runner.ScalesChannel {
				s = qt.scales[r]
			}
			for c := 0; c < qt.cols; c++ {
				lin.W = append(lin.W, float64(ref.E4M3ToF32(bytes[r*qt.cols+c]))*float64(s))
			}
		}
	}
	return lin
}

// bf16Linear is a projection of bf16 parts of cols columns, fused.
func bf16Linear(bf16 map[string][]uint16, pre string, parts []string, cols int) Linear64 {
	lin := Linear64{Cols: cols}
	for _, p := range parts {
		for _, v := range bf16[pre+p+".weight"] {
			lin.W = append(lin.W, float64(ref.BF16ToF32(v)))
		}
	}
	lin.Rows = len(lin.W) / cols
	return lin
}

// projectionParts are a layer's fused projections, their HF parts and
// their input widths.
func projectionParts(cfg runner.Config, L *Layer64) []struct {
	dst   *Linear64
	parts []string
	cols  int
} {
	return []struct {
		dst   *Linear64
		parts []string
		cols  int
	}{
		{&L.QKV, []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, cfg.HiddenSize},
		{&L.O, []string{"self_attn.o_proj"}, cfg.NumAttentionHeads * cfg.HeadDim},
		{&L.GateUp, []string{"mlp.gate_proj", "mlp.up_proj"}, cfg.HiddenSize},
		{&L.Down, []string{"mlp.down_proj"}, cfg.IntermediateSize},
	}
}

// DummyModel64 is the float64 evaluation of the model --load-format dummy
// makes (seed), quantized at load when quantize: each fused matrix
// quantized with one dynamic per-tensor scale, activations per tensor.
func DummyModel64(cfg runner.Config, seed uint64, quantize bool) (*Model64, error) {
	bf16 := plainDummyTensors(cfg, seed)
	if !quantize {
		return fusedModel64(cfg, bf16, nil)
	}
	return fusedModel64(cfg, bf16, runner.QuantizeAtLoad())
}

// fusedModel64 is the model of bf16 tensors, each fused matrix quantized
// per tensor (dynamic activations) when q is set, bf16 otherwise.
func fusedModel64(cfg runner.Config, bf16 map[string][]uint16, q *runner.Quantization) (*Model64, error) {
	m := baseModel64(cfg, bf16)
	for l := range m.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		for _, f := range projectionParts(cfg, &m.Layers[l]) {
			*f.dst = bf16Linear(bf16, pre, f.parts, f.cols)
			if q == nil {
				continue
			}
			var fused []uint16
			for _, p := range f.parts {
				fused = append(fused, bf16[pre+p+".weight"]...)
			}
			qt := quantize1(fused, f.dst.Rows, f.dst.Cols, false)
			for i, b := range qt.bytes {
				f.dst.W[i] = float64(ref.E4M3ToF32(b)) * float64(qt.scales[0])
			}
			f.dst.Act = q.Activations
		}
	}
	return m, nil
}

// baseModel64 holds the embedding, lm_head and norms of bf16 tensors.
func baseModel64(cfg runner.Config, bf16 map[string][]uint16) *Model64 {
	widen := func(name string) []float64 {
		w := bf16[name]
		out := make([]float64, len(w))
		for i, v := range w {
			out[i] = float64(ref.BF16ToF32(v))
		}
		return out
	}
	m := &Model64{Cfg: cfg, Embed: widen("model.embed_tokens.weight"), FinalNorm: widen("model.norm.weight")}
	m.LMHead = m.Embed
	if !cfg.TieWordEmbeddings {
		m.LMHead = widen("lm_head.weight")
	}
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		L := Layer64{InputNorm: widen(pre + "input_layernorm.weight"), PostNorm: widen(pre + "post_attention_layernorm.weight")}
		if cfg.QKVBias {
			for _, p := range []string{"q_proj", "k_proj", "v_proj"} {
				L.QKVBias = append(L.QKVBias, widen(pre+"self_attn."+p+".bias")...)
			}
		}
		if cfg.QKNorm {
			L.QNorm, L.KNorm = widen(pre+"self_attn.q_norm.weight"), widen(pre+"self_attn.k_norm.weight")
		}
		m.Layers = append(m.Layers, L)
	}
	return m
}

// plainDummyTensors are the dummy generator's tensors, exactly as
// --load-format dummy makes them.
func plainDummyTensors(cfg runner.Config, seed uint64) map[string][]uint16 {
	out := map[string][]uint16{}
	for _, spec := range runner.ExpectedTensors(cfg) {
		n, cols := 1, spec.Shape[len(spec.Shape)-1]
		for _, d := range spec.Shape {
			n *= d
		}
		kind := ref.DummyUniform
		if len(spec.Shape) == 1 && !strings.HasSuffix(spec.Name, ".bias") {
			kind = ref.DummyOnes // norm weights (the loader's dummy kinds)
		}
		w := make([]uint16, n)
		ref.FillDummyRows(w, cols, seed, spec.Name, 0, uint64(cols), kind)
		out[spec.Name] = w
	}
	return out
}

// dummyTensors are plainDummyTensors with each projection scaled by
// partFactor and its rows by 1/2, 1 or 2 in turn, so that per-channel
// scales differ from row to row as a trained model's do.
func dummyTensors(cfg runner.Config, seed uint64) map[string][]uint16 {
	out := plainDummyTensors(cfg, seed)
	for _, spec := range runner.ExpectedTensors(cfg) {
		if !isProjection(spec.Name) {
			continue
		}
		w, cols := out[spec.Name], spec.Shape[1]
		f := partFactor[shortName(strings.TrimSuffix(spec.Name, ".weight"))]
		for i, v := range w {
			rowFactor := float32(math.Ldexp(1, (i/cols)%3-1))
			w[i] = ref.F32ToBF16(ref.BF16ToF32(v) * f * rowFactor)
		}
	}
	return out
}

func isProjection(tensor string) bool {
	return strings.HasPrefix(tensor, "model.layers.") && partFactor[shortName(strings.TrimSuffix(tensor, ".weight"))] != 0
}

// shortName is a module's last component ("q_proj").
func shortName(mod string) string { return mod[strings.LastIndex(mod, ".")+1:] }

// projectionKey is Calibrate's key of a projection weight's input.
func projectionKey(tensor string) [2]int {
	var l int
	fmt.Sscanf(strings.TrimPrefix(tensor, "model.layers."), "%d", &l)
	switch shortName(strings.TrimSuffix(tensor, ".weight")) {
	case "q_proj", "k_proj", "v_proj":
		return [2]int{l, 0}
	case "o_proj":
		return [2]int{l, 1}
	case "gate_proj", "up_proj":
		return [2]int{l, 2}
	}
	return [2]int{l, 3}
}

// writeFiles writes config.json (with the format's quantization_config),
// model.safetensors and ModelOpt's hf_quant_config.json.
func writeFiles(dir string, cfg runner.Config, f Format, tensors []runner.HostTensor, edit Edit) error {
	hf := HFConfig(cfg)
	switch f {
	case AutoFP8Static, AutoFP8Dynamic:
		scheme := "static"
		if f == AutoFP8Dynamic {
			scheme = "dynamic"
		}
		hf["quantization_config"] = map[string]any{"quant_method": "fp8", "activation_scheme": scheme, "ignored_layers": []string{"lm_head"}}
	case CompressedTensorsChannel:
		hf["quantization_config"] = compressedTensorsConfig()
	case ModelOptFP8:
		mo := map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.19.0"},
			"quantization": map[string]any{"quant_algo": "FP8", "kv_cache_quant_algo": nil, "exclude_modules": []string{"lm_head"}}}
		if err := writeJSON(filepath.Join(dir, runner.ModelOptConfigFile), mo); err != nil {
			return err
		}
	}
	if edit != nil {
		tensors = edit(tensors, hf)
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), hf); err != nil {
		return err
	}
	return runner.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"})
}

func compressedTensorsConfig() map[string]any {
	return map[string]any{
		"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets": []string{"Linear"},
			"weights": map[string]any{"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true,
				"dynamic": false, "group_size": nil, "observer": "minmax"},
			"input_activations": map[string]any{"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true,
				"dynamic": true, "observer": nil},
		}},
		"ignore":          []string{"lm_head", `re:model\.layers\.1\.mlp\.down_proj$`},
		"kv_cache_scheme": nil,
	}
}

// HFConfig is cfg as HF's config.json spells it (LlamaForCausalLM,
// Qwen3ForCausalLM or Qwen2ForCausalLM, as the published ones).
func HFConfig(cfg runner.Config) map[string]any {
	modelType := map[string]string{runner.ArchLlama: "llama", runner.ArchQwen3: "qwen3", runner.ArchQwen2: "qwen2"}[cfg.Arch()]
	hf := map[string]any{
		"architectures": []string{cfg.Arch()}, "model_type": modelType, "torch_dtype": "bfloat16",
		"hidden_size": cfg.HiddenSize, "intermediate_size": cfg.IntermediateSize, "num_hidden_layers": cfg.NumHiddenLayers,
		"num_attention_heads": cfg.NumAttentionHeads, "num_key_value_heads": cfg.NumKeyValueHeads, "head_dim": cfg.HeadDim,
		"vocab_size": cfg.VocabSize, "rms_norm_eps": cfg.RMSNormEps, "rope_theta": cfg.RopeTheta,
		"tie_word_embeddings": cfg.TieWordEmbeddings, "max_position_embeddings": cfg.MaxPositionEmbeddings,
	}
	switch cfg.Arch() {
	case runner.ArchQwen3:
		hf["attention_bias"], hf["use_sliding_window"], hf["sliding_window"] = false, false, nil
	case runner.ArchQwen2: // no head_dim: Qwen2Config derives it, and the bias is hard-wired
		delete(hf, "head_dim")
		hf["use_sliding_window"], hf["sliding_window"] = false, cfg.MaxPositionEmbeddings
	}
	if s := cfg.RopeScaling; s != nil {
		hf["rope_scaling"] = map[string]any{"rope_type": s.Type, "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
			"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalMaxPositionEmbeddings}
	}
	return hf
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func bytes16(v []uint16) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], x)
	}
	return out
}

func bytes32(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}
