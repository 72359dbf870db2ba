package runner

import (
	"reflect"
	"strings"
	"testing"
)

// qwen3x8BConfigJSON is Qwen/Qwen3-8B's config.json as published on the HF
// hub (transformers 4.51.0).
const qwen3x8BConfigJSON = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`

// qwen3x06BConfigJSON is Qwen/Qwen3-0.6B's: 16 heads of 128 over a hidden
// size of 1024, the embedding tied.
const qwen3x06BConfigJSON = `{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
}`

// qwen25x7BConfigJSON is Qwen/Qwen2.5-7B's (the base model's: 131072
// positions, a sliding window named but not used; no head_dim, no
// attention_bias: Qwen2 hard-wires its q/k/v bias).
const qwen25x7BConfigJSON = `{
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
  "use_sliding_window": false, "use_mrope": false, "vocab_size": 152064
}`

func TestLoadQwenConfigsMatchPresets(t *testing.T) {
	for _, tt := range []struct{ preset, content string }{
		{"qwen3-8b", qwen3x8BConfigJSON},
		{"qwen3-0.6b", qwen3x06BConfigJSON},
		{"qwen2.5-7b", qwen25x7BConfigJSON},
	} {
		t.Run(tt.preset, func(t *testing.T) {
			got, err := LoadConfigFile(writeHFConfigFile(t, tt.preset, tt.content))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := Preset(tt.preset)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config.json gives\n%+v\nthe preset is\n%+v", got, want)
			}
		})
	}
}

func TestQwenPresetsShape(t *testing.T) {
	q3, _ := Preset("qwen3-tiny")
	if q3.NumAttentionHeads*q3.HeadDim == q3.HiddenSize || !q3.QKNorm || q3.QKVBias {
		t.Errorf("qwen3-tiny %+v: want attention wider than hidden, q/k norm, no bias", q3)
	}
	q2, _ := Preset("qwen2-tiny")
	if !q2.QKVBias || q2.QKNorm {
		t.Errorf("qwen2-tiny %+v: want q/k/v bias and no q/k norm", q2)
	}
	for _, name := range []string{"qwen3-8b", "qwen3-0.6b", "qwen3-tiny", "qwen2.5-7b", "qwen2-tiny"} {
		c, _ := Preset(name)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestLoadQwenConfigRefuses(t *testing.T) {
	edit := func(content, from, to string) string { return strings.Replace(content, from, to, 1) }
	tests := []struct {
		name, content string
		want          []string
	}{
		{"qwen3 attention_bias", edit(qwen3x8BConfigJSON, `"attention_bias": false`, `"attention_bias": true`),
			[]string{"attention_bias", "Qwen3ForCausalLM"}},
		{"llama mlp_bias", edit(llama31ConfigJSON, `"mlp_bias": false`, `"mlp_bias": true`), []string{"mlp_bias"}},
		{"sliding window", edit(qwen25x7BConfigJSON, `"use_sliding_window": false`, `"use_sliding_window": true`),
			[]string{"use_sliding_window"}},
		{"gelu", edit(qwen3x8BConfigJSON, `"hidden_act": "silu"`, `"hidden_act": "gelu"`), []string{"hidden_act", "gelu"}},
		{"sliding layer", edit(qwen3x06BConfigJSON, `"use_cache": true`, `"layer_types": ["full_attention", "sliding_attention"]`),
			[]string{"layer_types[1]", "sliding_attention"}},
		{"moe", edit(qwen3x8BConfigJSON, `"Qwen3ForCausalLM"`, `"Qwen3MoeForCausalLM"`), []string{"architectures", "Qwen3MoeForCausalLM"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeHFConfigFile(t, "m", tt.content)
			_, err := LoadConfigFile(path)
			if err == nil {
				t.Fatal("LoadConfigFile accepted a config it cannot run")
			}
			for _, want := range append(tt.want, path) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestQwenParamCounts holds ParamCount (the biases and q/k norm weights
// included) to the published totals of the safetensors checkpoints.
func TestQwenParamCounts(t *testing.T) {
	for name, want := range map[string]int64{"qwen2.5-7b": 7615616512, "qwen3-8b": 8190735360} {
		c, _ := Preset(name)
		if got := c.ParamCount(); got != want {
			t.Errorf("%s: ParamCount %d, want %d", name, got, want)
		}
	}
}

// The Qwen op's floor: Qwen3-8B's decode step costs Llama's arithmetic of
// the same shapes plus qk_norm (its q and k heads read and written, its two
// [head_dim] weights), Qwen2.5-7B's plus qkv_bias (the whole q/k/v row and
// the bias); nothing else changes.
func TestQwenCostAddsOnlyItsOp(t *testing.T) {
	for _, tt := range []struct {
		preset, op           string
		bytes, flops, weight float64 // per layer, batch 1
	}{
		// 40 heads × 128 read and written (2 B), the weights 2 × 128 × 2 B; 4 FLOPs per element.
		{"qwen3-8b", "qk_norm", 2 * 2 * 40 * 128, 4 * 40 * 128, 2 * 2 * 128},
		// (28 + 8) heads × 128 read and written, the bias (36 × 128 × 2 B); 1 FLOP per element.
		{"qwen2.5-7b", "qkv_bias", 2 * 2 * 36 * 128, 36 * 128, 2 * 36 * 128},
	} {
		cfg, _ := Preset(tt.preset)
		plain := cfg
		plain.QKNorm, plain.QKVBias = false, false
		got, err := DecodeCost(cfg, 1, 1024)
		if err != nil {
			t.Fatal(err)
		}
		base, err := DecodeCost(plain, 1, 1024)
		if err != nil {
			t.Fatal(err)
		}
		L := float64(cfg.NumHiddenLayers)
		var op OpCost
		for _, o := range got.Ops {
			if o.Op == tt.op {
				op = o
			}
		}
		if op.Calls != cfg.NumHiddenLayers || op.Bytes != L*(tt.bytes+tt.weight) || op.FLOPs != L*tt.flops {
			t.Errorf("%s: %s %+v, want %d calls, %g bytes, %g FLOPs", tt.preset, tt.op, op, cfg.NumHiddenLayers, L*(tt.bytes+tt.weight), L*tt.flops)
		}
		if d := got.Bytes - base.Bytes; d != op.Bytes {
			t.Errorf("%s: bytes %g more than without the op, want its %g", tt.preset, d, op.Bytes)
		}
		if d := got.FLOPs - base.FLOPs; d != op.FLOPs {
			t.Errorf("%s: FLOPs %g more than without the op, want its %g", tt.preset, d, op.FLOPs)
		}
		if d := got.WeightBytes - base.WeightBytes; d != L*tt.weight {
			t.Errorf("%s: weight bytes %g more, want %g", tt.preset, d, L*tt.weight)
		}
	}
}
