package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"stepbench/internal/input"
	"stepbench/kernels"
)

// Config is the shape of a Llama-family model, with HF config.json's names.
type Config struct {
	Name string `json:"name"`
	// Architecture is config.json's architectures entry: ArchLlama ("" reads
	// as it), ArchQwen3 or ArchQwen2 (docs/models.md).
	Architecture          string       `json:"architecture,omitempty"`
	HiddenSize            int          `json:"hidden_size"`
	IntermediateSize      int          `json:"intermediate_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      int          `json:"num_key_value_heads"`
	HeadDim               int          `json:"head_dim"`
	VocabSize             int          `json:"vocab_size"`
	RMSNormEps            float64      `json:"rms_norm_eps"`
	RopeTheta             float64      `json:"rope_theta"`
	RopeScaling           *RopeScaling `json:"rope_scaling,omitempty"`
	TieWordEmbeddings     bool         `json:"tie_word_embeddings"`
	MaxPositionEmbeddings int          `json:"max_position_embeddings"`
	// Quantization is how the linear layers are quantized (config.json's
	// quantization_config, NVIDIA ModelOpt's hf_quant_config.json, or
	// --quantization); nil: bf16.
	Quantization *Quantization `json:"quantization,omitempty"`
	// QKNorm: an RMSNorm over each head of q and of k (weights
	// self_attn.q_norm / k_norm, [head_dim]) before RoPE, as Qwen3's.
	QKNorm bool `json:"qk_norm,omitempty"`
	// QKVBias: q_proj, k_proj and v_proj add a bias (self_attn.*_proj.bias),
	// as Qwen2's; o_proj has none.
	QKVBias bool `json:"qkv_bias,omitempty"`
}

// The architectures (config.json's architectures) the forward pass runs.
const (
	ArchLlama = "LlamaForCausalLM"
	ArchQwen3 = "Qwen3ForCausalLM"
	ArchQwen2 = "Qwen2ForCausalLM"
)

// archModelType is architecture arch's config.json model_type ("" for
// one not supported).
func archModelType(arch string) string {
	switch arch {
	case ArchLlama:
		return "llama"
	case ArchQwen3:
		return "qwen3"
	case ArchQwen2:
		return "qwen2"
	}
	return ""
}

// Architectures lists the supported architectures.
func Architectures() []string { return []string{ArchLlama, ArchQwen3, ArchQwen2} }

// Arch is the model's architecture, ArchLlama when unset.
func (c Config) Arch() string {
	if c.Architecture == "" {
		return ArchLlama
	}
	return c.Architecture
}

// RopeScaling is HF's rope_scaling of type "llama3".
type RopeScaling struct {
	Type                          string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// QKVDim is the width of the fused q/k/v projection output.
func (c Config) QKVDim() int { return (c.NumAttentionHeads + 2*c.NumKeyValueHeads) * c.HeadDim }

// RopeTypeLlama3 is the only rope_scaling type the kernels implement.
const RopeTypeLlama3 = "llama3"

// DefaultPreset is the model used when none is named.
const DefaultPreset = "llama-3-8b"

// llama3Config is the shape shared by the Llama 3 / 3.1 8B models.
func llama3Config(name string) Config {
	return Config{
		Name:                  name,
		HiddenSize:            4096,
		IntermediateSize:      14336,
		NumHiddenLayers:       32,
		NumAttentionHeads:     32,
		NumKeyValueHeads:      8,
		HeadDim:               128,
		VocabSize:             128256,
		RMSNormEps:            1e-5,
		RopeTheta:             500000,
		MaxPositionEmbeddings: 8192,
	}
}

// llama3x70BConfig is the shape shared by the Llama 3 / 3.1 70B models
// (their HF config.json): too large for one 80 GB GPU in bf16, run with
// tensor parallelism.
func llama3x70BConfig(name string) Config {
	c := llama3Config(name)
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads = 8192, 28672, 80, 64
	return c
}

// qwen3Config is a Qwen3ForCausalLM preset (Qwen/Qwen3-8B's and
// Qwen/Qwen3-0.6B's config.json; qwen3-tiny for the emulator and CI, its
// attention 4 × 64 = 256 wide over a hidden size of 128, as 0.6B's 16 × 128
// over 1024, and its embedding tied, as 0.6B's).
func qwen3Config(name string) Config {
	c := Config{Name: name, Architecture: ArchQwen3, QKNorm: true, NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128,
		VocabSize: 151936, RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 40960}
	switch name {
	case "qwen3-8b":
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 4096, 12288, 36
	case "qwen3-0.6b":
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads = 1024, 3072, 28, 16
		c.TieWordEmbeddings = true
	default: // qwen3-tiny
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 128, 384, 4, 4, 2, 64
		c.VocabSize, c.MaxPositionEmbeddings, c.TieWordEmbeddings = 4096, 2048, true
	}
	return c
}

// qwen2Config is a Qwen2ForCausalLM preset (Qwen/Qwen2.5-7B's config.json;
// qwen2-tiny for the emulator and CI).
func qwen2Config(name string) Config {
	if name == "qwen2.5-7b" {
		return Config{Name: name, Architecture: ArchQwen2, QKVBias: true, HiddenSize: 3584, IntermediateSize: 18944,
			NumHiddenLayers: 28, NumAttentionHeads: 28, NumKeyValueHeads: 4, HeadDim: 128, VocabSize: 152064,
			RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 131072}
	}
	return Config{Name: name, Architecture: ArchQwen2, QKVBias: true, HiddenSize: 128, IntermediateSize: 384,
		NumHiddenLayers: 4, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, VocabSize: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 2048}
}

// presetConfig builds a preset afresh on each call, so callers may mutate
// the result (including RopeScaling) without affecting anyone else.
func presetConfig(name string) (Config, bool) {
	switch name {
	case "llama-3-8b":
		return llama3Config(name), true
	case "llama-3.1-8b":
		c := llama3Config(name)
		c.RopeScaling = &RopeScaling{Type: RopeTypeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
		c.MaxPositionEmbeddings = 131072
		return c, true
	case "llama-3-70b":
		return llama3x70BConfig(name), true
	case "llama-3.1-70b":
		c := llama3x70BConfig(name)
		c.RopeScaling = &RopeScaling{Type: RopeTypeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
		c.MaxPositionEmbeddings = 131072
		return c, true
	case "llama-3.2-1b":
		return Config{
			Name: name, HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 128256,
			RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling:       &RopeScaling{Type: RopeTypeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			TieWordEmbeddings: true, MaxPositionEmbeddings: 131072,
		}, true
	case "llama-3.2-3b":
		return Config{
			Name: name, HiddenSize: 3072, IntermediateSize: 8192, NumHiddenLayers: 28,
			NumAttentionHeads: 24, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 128256,
			RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling:       &RopeScaling{Type: RopeTypeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			TieWordEmbeddings: true, MaxPositionEmbeddings: 131072,
		}, true
	case "qwen3-8b", "qwen3-0.6b", "qwen3-tiny":
		return qwen3Config(name), true
	case "qwen2.5-7b", "qwen2-tiny":
		return qwen2Config(name), true
	case "llama-tiny":
		// Small enough for the cpu backend and tests, yet with GQA (4 heads over
		// 2 KV heads) and llama3 rope scaling so every code path is exercised.
		return Config{
			Name: name, HiddenSize: 128, IntermediateSize: 384, NumHiddenLayers: 4,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, VocabSize: 4096,
			RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling:           &RopeScaling{Type: RopeTypeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 256},
			MaxPositionEmbeddings: 2048,
		}, true
	}
	return Config{}, false
}

// PresetNames lists the built-in model presets, sorted.
func PresetNames() []string {
	return []string{"llama-3-70b", "llama-3-8b", "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b", "llama-tiny",
		"qwen2-tiny", "qwen2.5-7b", "qwen3-0.6b", "qwen3-8b", "qwen3-tiny"}
}

// Preset returns the built-in config called name.
func Preset(name string) (Config, error) {
	c, ok := presetConfig(name)
	if !ok {
		return Config{}, fmt.Errorf("unknown model preset %q (valid: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return c, nil
}

// Limits of a model's shape, far beyond the largest Llama (3.1 405B: 126
// layers, hidden 16384, 128 heads, head_dim 128, vocabulary 128256, 131072
// positions) and small enough that every count a run derives from them (the
// memory estimate, tensor lists, the cost model) is an int64 without
// overflow; Validate refuses a config beyond any of them, naming the field
// and its limit.
const (
	MaxHiddenSize       = 1 << 20
	MaxIntermediateSize = 1 << 22
	MaxLayers           = 1 << 12
	MaxHeads            = 1 << 12 // num_attention_heads and num_key_value_heads
	MaxHeadDim          = 1 << 12
	MaxVocabSize        = 1 << 24
	MaxPositions        = 1 << 24 // max_position_embeddings and rope_scaling's original one
	// MaxMatrixElements bounds every weight matrix: the GPU indexes one
	// with int32.
	MaxMatrixElements = 1<<31 - 1
)

// Limits of a run's shapes: a batch of at most MaxBatch sequences whose
// prefill brings at most MaxTokens prompt tokens (batch × input length: the
// token ids and their rows are indexed with int32 on the GPU).
const (
	MaxBatch  = 1 << 16
	MaxTokens = 1<<31 - 1
)

// Validate reports the first field that makes c unusable by the forward pass.
func (c Config) Validate() error {
	bounded := []struct {
		field        string
		value, limit int
	}{
		{"hidden_size", c.HiddenSize, MaxHiddenSize},
		{"intermediate_size", c.IntermediateSize, MaxIntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers, MaxLayers},
		{"num_attention_heads", c.NumAttentionHeads, MaxHeads},
		{"num_key_value_heads", c.NumKeyValueHeads, MaxHeads},
		{"head_dim", c.HeadDim, MaxHeadDim},
		{"vocab_size", c.VocabSize, MaxVocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings, MaxPositions},
	}
	for _, b := range bounded {
		if b.value <= 0 {
			return fmt.Errorf("model %s: %s must be positive, got %d", c.Name, b.field, b.value)
		}
		if b.value > b.limit {
			return fmt.Errorf("model %s: %s %d exceeds the limit %d", c.Name, b.field, b.value, b.limit)
		}
	}
	if archModelType(c.Arch()) == "" {
		return fmt.Errorf("model %s: architecture %q is not supported (want one of %s)", c.Name, c.Architecture, strings.Join(Architectures(), ", "))
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("model %s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
			c.Name, c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 { // rotate-half RoPE pairs element i with i+head_dim/2
		return fmt.Errorf("model %s: head_dim must be even for RoPE, got %d", c.Name, c.HeadDim)
	}
	// Every factor is bounded above, so these products do not overflow.
	qkvRows := (c.NumAttentionHeads + 2*c.NumKeyValueHeads) * c.HeadDim
	for _, m := range []struct {
		name       string
		rows, cols int
	}{
		{"the embedding (vocab_size × hidden_size)", c.VocabSize, c.HiddenSize},
		{"gate_proj (intermediate_size × hidden_size)", c.IntermediateSize, c.HiddenSize},
		{"the fused q/k/v ((num_attention_heads + 2 num_key_value_heads) head_dim × hidden_size)", qkvRows, c.HiddenSize},
	} {
		if m.rows*m.cols > MaxMatrixElements {
			return fmt.Errorf("model %s: %s has %d × %d elements, beyond the limit 2^31-1", c.Name, m.name, m.rows, m.cols)
		}
	}
	return c.validateFloats()
}

// validateFloats checks the norm's epsilon and RoPE's parameters.
func (c Config) validateFloats() error {
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return fmt.Errorf("model %s: rms_norm_eps must be positive, got %g", c.Name, c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("model %s: rope_theta must be positive, got %g", c.Name, c.RopeTheta)
	}
	if s := c.RopeScaling; s != nil {
		if s.Type != RopeTypeLlama3 {
			return fmt.Errorf("model %s: rope_scaling type %q unsupported (only %q)", c.Name, s.Type, RopeTypeLlama3)
		}
		if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
			return fmt.Errorf("model %s: rope_scaling.factor must be positive, got %g", c.Name, s.Factor)
		}
		if !(s.LowFreqFactor > 0) {
			return fmt.Errorf("model %s: rope_scaling.low_freq_factor must be positive, got %g", c.Name, s.LowFreqFactor)
		}
		// llama3 smoothing divides by (high - low).
		if !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0) {
			return fmt.Errorf("model %s: rope_scaling.high_freq_factor %g must exceed low_freq_factor %g",
				c.Name, s.HighFreqFactor, s.LowFreqFactor)
		}
		if s.OriginalMaxPositionEmbeddings <= 0 || s.OriginalMaxPositionEmbeddings > MaxPositions {
			return fmt.Errorf("model %s: rope_scaling.original_max_position_embeddings must be 1..%d, got %d",
				c.Name, MaxPositions, s.OriginalMaxPositionEmbeddings)
		}
	}
	return nil
}

// hfFields is a config.json object whose members are decoded one at a time,
// so that every error can name the file and the field.
type hfFields struct {
	path   string
	prefix string // "rope_scaling." for nested objects
	raw    map[string]json.RawMessage
}

// has reports whether key is present and not null.
func (f hfFields) has(key string) bool {
	v, ok := f.raw[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// get decodes key into dst when present and not null; it reports presence.
func (f hfFields) get(key string, dst any) (bool, error) {
	if !f.has(key) {
		return false, nil
	}
	if err := json.Unmarshal(f.raw[key], dst); err != nil {
		return true, fmt.Errorf("config %s: field %s%s: %w", f.path, f.prefix, key, err)
	}
	return true, nil
}

// getInt decodes an integer field; HF writes some integers as 8192.0, so an
// integral float is accepted too.
func (f hfFields) getInt(key string, dst *int) (bool, error) {
	var v float64
	ok, err := f.get(key, &v)
	if !ok || err != nil {
		return ok, err
	}
	if v != float64(int64(v)) || v > 1<<53 || v < -(1<<53) {
		return true, fmt.Errorf("config %s: field %s%s: %v is not an integer", f.path, f.prefix, key, v)
	}
	*dst = int(v)
	return true, nil
}

func (f hfFields) requireInt(key string, dst *int) error {
	ok, err := f.getInt(key, dst)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("config %s: field %s%s is missing", f.path, f.prefix, key)
	}
	return nil
}

func (f hfFields) requireFloat(key string, dst *float64) error {
	ok, err := f.get(key, dst)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("config %s: field %s%s is missing", f.path, f.prefix, key)
	}
	return nil
}

func (f hfFields) nested(key string) (hfFields, error) {
	var raw map[string]json.RawMessage
	if _, err := f.get(key, &raw); err != nil {
		return hfFields{}, err
	}
	return hfFields{path: f.path, prefix: f.prefix + key + ".", raw: raw}, nil
}

// MaxConfigBytes bounds a config.json (an HF config is a few KB).
const MaxConfigBytes = 4 << 20

// LoadConfigFile reads an HF config.json of a LlamaForCausalLM,
// Qwen3ForCausalLM or Qwen2ForCausalLM model. The
// config's Name is the base name of the directory holding the file. A file
// that is not a regular file, is larger than MaxConfigBytes or does not
// describe a usable model is bad input (input.IsBad).
func LoadConfigFile(path string) (Config, error) {
	data, err := input.ReadFile(path, MaxConfigBytes, "a model's config.json")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Config{}, fmt.Errorf("load config: %w", err)
		}
		return Config{}, input.Bad(fmt.Errorf("load config: %w", err))
	}
	c, err := parseHFConfig(path, data)
	if err == nil && c.Quantization == nil {
		c.Quantization, err = loadModelOptConfig(filepath.Join(filepath.Dir(path), ModelOptConfigFile))
	}
	return c, input.Bad(err)
}

// MaxQuantConfigBytes bounds hf_quant_config.json (a ModelOpt one is under 1 KB).
const MaxQuantConfigBytes = 1 << 20

// loadModelOptConfig reads a ModelOpt scheme when the model directory holds
// one (nil, nil when it does not).
func loadModelOptConfig(path string) (*Quantization, error) {
	data, err := input.ReadFile(path, MaxQuantConfigBytes, "ModelOpt's "+ModelOptConfigFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return parseModelOptFile("config "+path, data)
}

func parseHFConfig(path string, data []byte) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("config %s: not a JSON object: %w", path, err)
	}
	f := hfFields{path: path, raw: raw}
	arch, err := checkArchitecture(f)
	if err != nil {
		return Config{}, err
	}
	name := filepath.Base(filepath.Dir(path))
	if abs, err := filepath.Abs(path); err == nil {
		name = filepath.Base(filepath.Dir(abs))
	}
	c := Config{Name: name}
	if arch != ArchLlama {
		c.Architecture = arch
	}
	if err := parseArchFields(f, &c); err != nil {
		return Config{}, err
	}
	for _, r := range []struct {
		key string
		dst *int
	}{
		{"hidden_size", &c.HiddenSize},
		{"intermediate_size", &c.IntermediateSize},
		{"num_hidden_layers", &c.NumHiddenLayers},
		{"num_attention_heads", &c.NumAttentionHeads},
		{"vocab_size", &c.VocabSize},
	} {
		if err := f.requireInt(r.key, r.dst); err != nil {
			return Config{}, err
		}
	}
	if err := parseOptionalFields(f, &c); err != nil {
		return Config{}, err
	}
	if err := parseRope(f, &c); err != nil {
		return Config{}, err
	}
	if f.has("quantization_config") {
		q, err := parseQuantizationConfig("config "+path, raw["quantization_config"])
		if err != nil {
			return Config{}, err
		}
		c.Quantization = q
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// parseOptionalFields reads the optional fields, with transformers'
// defaults (LlamaConfig's, Qwen2Config's or Qwen3Config's).
func parseOptionalFields(f hfFields, c *Config) error {
	c.NumKeyValueHeads = c.NumAttentionHeads
	if _, err := f.getInt("num_key_value_heads", &c.NumKeyValueHeads); err != nil {
		return err
	}
	if ok, err := f.getInt("head_dim", &c.HeadDim); err != nil {
		return err
	} else if !ok && c.Architecture == ArchQwen3 {
		c.HeadDim = 128 // transformers' Qwen3Config default
	} else if !ok {
		if c.NumAttentionHeads <= 0 || c.HiddenSize%c.NumAttentionHeads != 0 {
			return fmt.Errorf("config %s: field head_dim is missing and hidden_size %d is not a multiple of num_attention_heads %d",
				f.path, c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.RMSNormEps = 1e-6
	if _, err := f.get("rms_norm_eps", &c.RMSNormEps); err != nil {
		return err
	}
	c.MaxPositionEmbeddings = 2048
	if c.Architecture != "" {
		c.MaxPositionEmbeddings = 32768 // transformers' Qwen2Config and Qwen3Config default
	}
	if _, err := f.getInt("max_position_embeddings", &c.MaxPositionEmbeddings); err != nil {
		return err
	}
	_, err := f.get("tie_word_embeddings", &c.TieWordEmbeddings)
	return err
}

// parseRope reads rope_theta and rope_scaling, or their newer home,
// rope_parameters.
func parseRope(f hfFields, c *Config) error {
	ropeParams, err := f.nested("rope_parameters")
	if err != nil {
		return err
	}
	c.RopeTheta = 10000
	if ok, err := f.get("rope_theta", &c.RopeTheta); err != nil {
		return err
	} else if !ok {
		if _, err := ropeParams.get("rope_theta", &c.RopeTheta); err != nil {
			return err
		}
	}
	scalingFields := ropeParams
	if f.has("rope_scaling") {
		if scalingFields, err = f.nested("rope_scaling"); err != nil {
			return err
		}
	}
	c.RopeScaling, err = parseRopeScaling(scalingFields)
	return err
}

// checkArchitecture is the architecture config.json names (architectures,
// else model_type), refused unless the forward pass runs it.
func checkArchitecture(f hfFields) (string, error) {
	var archs []string
	if ok, err := f.get("architectures", &archs); err != nil {
		return "", err
	} else if ok {
		for _, a := range archs {
			if archModelType(a) != "" {
				return a, nil
			}
		}
		return "", fmt.Errorf("config %s: field architectures: %q is not supported (want one of %s)",
			f.path, strings.Join(archs, ","), strings.Join(Architectures(), ", "))
	}
	var modelType string
	if ok, err := f.get("model_type", &modelType); err != nil {
		return "", err
	} else if !ok {
		return "", fmt.Errorf("config %s: fields architectures and model_type are both missing; cannot tell which architecture it is", f.path)
	}
	for _, a := range Architectures() {
		if archModelType(a) == modelType {
			return a, nil
		}
	}
	return "", fmt.Errorf("config %s: field model_type: %q is not supported (want \"llama\", \"qwen3\" or \"qwen2\")", f.path, modelType)
}

// parseArchFields sets what the architecture implies (Qwen3's q/k norm,
// Qwen2's q/k/v bias) and refuses the fields that would change the math
// beyond what the forward pass runs, naming each.
func parseArchFields(f hfFields, c *Config) error {
	c.QKNorm = c.Architecture == ArchQwen3
	c.QKVBias = c.Architecture == ArchQwen2
	var act string
	if ok, err := f.get("hidden_act", &act); err != nil {
		return err
	} else if ok && act != "silu" {
		return fmt.Errorf("config %s: field hidden_act: %q is not supported (only \"silu\")", f.path, act)
	}
	// Qwen2 hard-wires its q/k/v bias and reads neither; in Llama and Qwen3
	// attention_bias adds a bias to o_proj too, mlp_bias to the MLP's.
	for _, key := range []string{"attention_bias", "mlp_bias"} {
		var on bool
		if ok, err := f.get(key, &on); err != nil {
			return err
		} else if ok && on && c.Architecture != ArchQwen2 {
			return fmt.Errorf("config %s: field %s: true is not supported for %s (its o_proj bias is not implemented)", f.path, key, c.Architecture)
		}
	}
	var sliding bool
	if _, err := f.get("use_sliding_window", &sliding); err != nil {
		return err
	} else if sliding {
		return fmt.Errorf("config %s: field use_sliding_window: true is not supported (every layer attends to the whole context)", f.path)
	}
	var layerTypes []string
	if _, err := f.get("layer_types", &layerTypes); err != nil {
		return err
	}
	for i, t := range layerTypes {
		if t != "full_attention" {
			return fmt.Errorf("config %s: field layer_types[%d]: %q is not supported (only \"full_attention\")", f.path, i, t)
		}
	}
	return nil
}

// parseRopeScaling reads a rope_scaling (or rope_parameters) object; an
// absent object or type "default" means plain RoPE (nil).
func parseRopeScaling(f hfFields) (*RopeScaling, error) {
	if f.raw == nil {
		return nil, nil
	}
	var ropeType string
	typeKey := "rope_type"
	ok, err := f.get(typeKey, &ropeType)
	if err != nil {
		return nil, err
	}
	if !ok {
		typeKey = "type" // legacy key of transformers < 4.43
		if ok, err = f.get(typeKey, &ropeType); err != nil {
			return nil, err
		}
	}
	switch {
	case !ok:
		if f.prefix == "rope_parameters." { // may hold only rope_theta
			return nil, nil
		}
		return nil, fmt.Errorf("config %s: field %srope_type is missing", f.path, f.prefix)
	case ropeType == "default":
		return nil, nil
	case ropeType != RopeTypeLlama3:
		return nil, fmt.Errorf("config %s: field %s%s: rope type %q is not supported (only %q or \"default\")",
			f.path, f.prefix, typeKey, ropeType, RopeTypeLlama3)
	}
	s := &RopeScaling{Type: RopeTypeLlama3}
	err = errors.Join(
		f.requireFloat("factor", &s.Factor),
		f.requireFloat("low_freq_factor", &s.LowFreqFactor),
		f.requireFloat("high_freq_factor", &s.HighFreqFactor),
		f.requireInt("original_max_position_embeddings", &s.OriginalMaxPositionEmbeddings),
	)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// KernelShape is the model's widths as the kernels see them.
func (cfg Config) KernelShape() kernels.ModelShape {
	return kernels.ModelShape{Name: cfg.Name, Hidden: cfg.HiddenSize, Inter: cfg.IntermediateSize, Vocab: cfg.VocabSize,
		Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, RopeTheta: cfg.RopeTheta,
		QKNorm: cfg.QKNorm, QKVBias: cfg.QKVBias}
}
