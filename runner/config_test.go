package runner

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestPresetsValidate(t *testing.T) {
	names := PresetNames()
	if !slices.IsSorted(names) {
		t.Errorf("PresetNames() = %v, not sorted", names)
	}
	if !slices.Contains(names, DefaultPreset) {
		t.Errorf("PresetNames() = %v lacks the default %q", names, DefaultPreset)
	}
	for _, name := range names {
		c, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if c.Name != name {
			t.Errorf("Preset(%q).Name = %q", name, c.Name)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Preset(%q).Validate(): %v", name, err)
		}
	}
}

func TestPresetValues(t *testing.T) {
	tests := []struct {
		name                                    string
		hidden, inter, layers, heads, kv, headD int
		vocab, maxPos                           int
		tied                                    bool
		scaling                                 *RopeScaling
	}{
		{"llama-3-8b", 4096, 14336, 32, 32, 8, 128, 128256, 8192, false, nil},
		{"llama-3.1-8b", 4096, 14336, 32, 32, 8, 128, 128256, 131072, false, &RopeScaling{"llama3", 8, 1, 4, 8192}},
		{"llama-3.2-1b", 2048, 8192, 16, 32, 8, 64, 128256, 131072, true, &RopeScaling{"llama3", 32, 1, 4, 8192}},
		{"llama-3.2-3b", 3072, 8192, 28, 24, 8, 128, 128256, 131072, true, &RopeScaling{"llama3", 32, 1, 4, 8192}},
		{"llama-tiny", 128, 384, 4, 4, 2, 32, 4096, 2048, false, &RopeScaling{"llama3", 8, 1, 4, 256}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Preset(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			want := Config{
				Name: tt.name, HiddenSize: tt.hidden, IntermediateSize: tt.inter, NumHiddenLayers: tt.layers,
				NumAttentionHeads: tt.heads, NumKeyValueHeads: tt.kv, HeadDim: tt.headD, VocabSize: tt.vocab,
				RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: tt.scaling, TieWordEmbeddings: tt.tied,
				MaxPositionEmbeddings: tt.maxPos,
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("Preset(%q) =\n%+v\nwant\n%+v", tt.name, c, want)
			}
		})
	}
}

func TestPresetIsFreshCopy(t *testing.T) {
	a, _ := Preset("llama-3.1-8b")
	a.RopeScaling.Factor = 99
	b, _ := Preset("llama-3.1-8b")
	if b.RopeScaling.Factor != 8 {
		t.Errorf("mutating one preset changed another: factor %g", b.RopeScaling.Factor)
	}
}

func TestPresetUnknown(t *testing.T) {
	_, err := Preset("llama-9-huge")
	if err == nil {
		t.Fatal("Preset of an unknown name succeeded")
	}
	for _, want := range append(PresetNames(), "llama-9-huge") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"zero hidden", func(c *Config) { c.HiddenSize = 0 }, "hidden_size"},
		{"negative layers", func(c *Config) { c.NumHiddenLayers = -1 }, "num_hidden_layers"},
		{"zero kv heads", func(c *Config) { c.NumKeyValueHeads = 0 }, "num_key_value_heads"},
		{"heads not multiple of kv", func(c *Config) { c.NumKeyValueHeads = 3 }, "multiple"},
		{"odd head_dim", func(c *Config) { c.HeadDim = 33 }, "head_dim"},
		{"zero vocab", func(c *Config) { c.VocabSize = 0 }, "vocab_size"},
		{"zero max positions", func(c *Config) { c.MaxPositionEmbeddings = 0 }, "max_position_embeddings"},
		{"zero eps", func(c *Config) { c.RMSNormEps = 0 }, "rms_norm_eps"},
		{"negative theta", func(c *Config) { c.RopeTheta = -1 }, "rope_theta"},
		{"huge embedding", func(c *Config) { c.VocabSize = 1 << 24 }, "the embedding (vocab_size × hidden_size) has 16777216 × 128 elements, beyond the limit 2^31-1"},
		{"scaling type", func(c *Config) { c.RopeScaling.Type = "yarn" }, "yarn"},
		{"scaling factor", func(c *Config) { c.RopeScaling.Factor = 0 }, "factor"},
		{"high below low", func(c *Config) { c.RopeScaling.HighFreqFactor = 0.5 }, "high_freq_factor"},
		{"original max", func(c *Config) { c.RopeScaling.OriginalMaxPositionEmbeddings = 0 }, "original_max_position_embeddings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := Preset("llama-tiny")
			tt.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted a bad config")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// llama31ConfigJSON is Llama-3.1-8B's config.json as published on the HF hub.
const llama31ConfigJSON = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`

func writeHFConfigFile(t *testing.T, dirName, content string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), dirName)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigFile(t *testing.T) {
	llama31, _ := Preset("llama-3.1-8b")
	llama31.Name = "Meta-Llama-3.1-8B"

	tests := []struct {
		name    string
		dirName string
		content string
		want    Config
	}{
		{
			name: "llama-3.1-8b", dirName: "Meta-Llama-3.1-8B", content: llama31ConfigJSON, want: llama31,
		},
		{
			// No head_dim, no num_key_value_heads, no rope_theta/eps/max/tie:
			// transformers' defaults apply; rope_scaling null means none.
			name: "defaults", dirName: "old-llama",
			content: `{"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
				"num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000, "rope_scaling": null}`,
			want: Config{Name: "old-llama", HiddenSize: 256, IntermediateSize: 688, NumHiddenLayers: 2,
				NumAttentionHeads: 8, NumKeyValueHeads: 8, HeadDim: 32, VocabSize: 1000,
				RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 2048},
		},
		{
			name: "legacy type key", dirName: "legacy",
			content: `{"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 384,
				"num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
				"rope_theta": 500000, "tie_word_embeddings": true,
				"rope_scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
				"original_max_position_embeddings": 8192}}`,
			want: Config{Name: "legacy", HiddenSize: 128, IntermediateSize: 384, NumHiddenLayers: 1,
				NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, VocabSize: 64, RMSNormEps: 1e-6,
				RopeTheta: 500000, RopeScaling: &RopeScaling{"llama3", 8, 1, 4, 8192},
				TieWordEmbeddings: true, MaxPositionEmbeddings: 2048},
		},
		{
			name: "default rope type", dirName: "plain",
			content: `{"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 384,
				"num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64,
				"rope_scaling": {"rope_type": "default"}}`,
			want: Config{Name: "plain", HiddenSize: 128, IntermediateSize: 384, NumHiddenLayers: 1,
				NumAttentionHeads: 4, NumKeyValueHeads: 4, HeadDim: 32, VocabSize: 64, RMSNormEps: 1e-6,
				RopeTheta: 10000, MaxPositionEmbeddings: 2048},
		},
		{
			name: "rope_parameters", dirName: "v5",
			content: `{"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
				"num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
				"vocab_size": 128256, "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
				"tie_word_embeddings": true,
				"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0,
				"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}`,
			want: func() Config { c, _ := Preset("llama-3.2-1b"); c.Name = "v5"; return c }(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadConfigFile(writeHFConfigFile(t, tt.dirName, tt.content))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%+v (scaling %+v)\nwant\n%+v (scaling %+v)", got, got.RopeScaling, tt.want, tt.want.RopeScaling)
			}
		})
	}
}

func TestLoadConfigFileRefuses(t *testing.T) {
	base := `"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64`
	tests := []struct {
		name    string
		content string
		want    []string // each must appear in the error besides the file name
	}{
		{"mistral", `{"architectures": ["MistralForCausalLM"], "model_type": "mistral", ` + base + `}`,
			[]string{"architectures", "MistralForCausalLM"}},
		{"model_type qwen3_moe", `{"model_type": "qwen3_moe", ` + base + `}`, []string{"model_type", "qwen3_moe"}},
		{"no architecture", `{` + base + `}`, []string{"architectures", "model_type"}},
		{"yarn", `{"architectures": ["LlamaForCausalLM"], ` + base + `, "rope_scaling": {"rope_type": "yarn", "factor": 4}}`,
			[]string{"rope_scaling.rope_type", "yarn"}},
		{"legacy linear", `{"architectures": ["LlamaForCausalLM"], ` + base + `, "rope_scaling": {"type": "linear", "factor": 2}}`,
			[]string{"rope_scaling.type", "linear"}},
		{"rope_parameters yarn", `{"architectures": ["LlamaForCausalLM"], ` + base + `, "rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn"}}`,
			[]string{"rope_parameters.rope_type", "yarn"}},
		{"llama3 missing factor", `{"architectures": ["LlamaForCausalLM"], ` + base +
			`, "rope_scaling": {"rope_type": "llama3", "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}}`,
			[]string{"rope_scaling.factor", "missing"}},
		{"scaling without type", `{"architectures": ["LlamaForCausalLM"], ` + base + `, "rope_scaling": {"factor": 2}}`,
			[]string{"rope_scaling.rope_type"}},
		{"missing hidden", `{"architectures": ["LlamaForCausalLM"], "intermediate_size": 384, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64}`,
			[]string{"hidden_size", "missing"}},
		{"string hidden", `{"architectures": ["LlamaForCausalLM"], "hidden_size": "128", "intermediate_size": 384, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64}`,
			[]string{"hidden_size"}},
		{"fractional layers", `{"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 1.5, "num_attention_heads": 4, "vocab_size": 64}`,
			[]string{"num_hidden_layers", "integer"}},
		{"bad gqa", `{"architectures": ["LlamaForCausalLM"], ` + base + `, "num_key_value_heads": 3}`,
			[]string{"num_key_value_heads"}},
		{"architectures not a list", `{"architectures": "LlamaForCausalLM", ` + base + `}`, []string{"architectures"}},
		{"not json", `{"architectures": [`, []string{"JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeHFConfigFile(t, "m", tt.content)
			_, err := LoadConfigFile(path)
			if err == nil {
				t.Fatal("LoadConfigFile accepted a bad config")
			}
			for _, want := range append(tt.want, path) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestLoadConfigFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope", "config.json")
	if _, err := LoadConfigFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("LoadConfigFile(missing) = %v, want an error naming %s", err, path)
	}
}
