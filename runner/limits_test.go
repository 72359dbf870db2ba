package runner

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// configLimitCase sets one field of llama-tiny at its limit (other fields
// lowered where a product would pass the matrix limit) and past it.
type configLimitCase struct {
	field      string
	limit      int
	set        func(c *Config, v int)
	atLimitFix func(c *Config) // what else must shrink for the limit itself to be valid
}

var configLimitCases = []configLimitCase{
	{"hidden_size", MaxHiddenSize, func(c *Config, v int) { c.HiddenSize = v }, func(c *Config) {
		c.VocabSize, c.IntermediateSize = 2000, 2000
	}},
	{"intermediate_size", MaxIntermediateSize, func(c *Config, v int) { c.IntermediateSize = v }, func(c *Config) {
		c.HiddenSize = 256
	}},
	{"num_hidden_layers", MaxLayers, func(c *Config, v int) { c.NumHiddenLayers = v }, nil},
	{"num_attention_heads", MaxHeads, func(c *Config, v int) { c.NumAttentionHeads = v }, nil},
	{"num_key_value_heads", MaxHeads, func(c *Config, v int) { c.NumKeyValueHeads = v }, func(c *Config) {
		c.NumAttentionHeads = MaxHeads
	}},
	{"head_dim", MaxHeadDim, func(c *Config, v int) { c.HeadDim = v }, nil},
	{"vocab_size", MaxVocabSize, func(c *Config, v int) { c.VocabSize = v }, func(c *Config) { c.HiddenSize = 64 }},
	{"max_position_embeddings", MaxPositions, func(c *Config, v int) { c.MaxPositionEmbeddings = v }, nil},
	{"rope_scaling.original_max_position_embeddings", MaxPositions, func(c *Config, v int) {
		c.RopeScaling.OriginalMaxPositionEmbeddings = v
	}, nil},
}

// TestConfigFieldLimits walks every count of a config to its limit (valid:
// the memory estimate, parameter count and tensor list of the largest run
// are computed without a panic and without wrapping around) and past it
// (refused, naming the field and the limit), and to the values an attack
// used (10^15 layers; 2^62 wrapping a product to a small number).
func TestConfigFieldLimits(t *testing.T) {
	for _, tc := range configLimitCases {
		for _, v := range []int{tc.limit, tc.limit + 1, 1_000_000_000_000_000, 1 << 62, math.MaxInt, 0, -1, math.MinInt} {
			t.Run(fmt.Sprintf("%s=%d", tc.field, v), func(t *testing.T) {
				c, _ := Preset("llama-tiny")
				if v == tc.limit && tc.atLimitFix != nil {
					tc.atLimitFix(&c)
				}
				tc.set(&c, v)
				err := c.Validate()
				if v == tc.limit {
					if err != nil {
						t.Fatalf("at the limit: %v", err)
					}
					checkEstimateSaturates(t, c)
					return
				}
				if err == nil {
					t.Fatalf("Validate accepted %s = %d", tc.field, v)
				}
				if !strings.Contains(err.Error(), tc.field) {
					t.Errorf("error %q does not name %s", err, tc.field)
				}
				if v > tc.limit && !strings.Contains(err.Error(), fmt.Sprint(tc.limit)) {
					t.Errorf("error %q does not name the limit %d", err, tc.limit)
				}
			})
		}
	}
}

// checkEstimateSaturates computes what a run of c at the largest shapes
// would compute: every part is non-negative, and the total either fits or
// is math.MaxInt64, which CheckFits refuses.
func checkEstimateSaturates(t *testing.T, c Config) {
	t.Helper()
	if n := c.ParamCount(); n <= 0 {
		t.Errorf("ParamCount = %d", n)
	}
	if n := len(ExpectedTensors(c)); n != 2+9*c.NumHiddenLayers+1 {
		t.Errorf("%d expected tensors", n)
	}
	for _, shape := range [][3]int{{1, 1, 2}, {MaxBatch, MaxTokens, c.MaxPositionEmbeddings}, {math.MaxInt, math.MaxInt, math.MaxInt}, {-1, -1, -1}} {
		est := EstimateMemory(c, shape[0], shape[1], shape[2])
		if est.WeightBytes < 0 || est.KVCacheBytes < 0 || est.ActivationBytes < 0 || est.Total() < 0 {
			t.Errorf("estimate of %v: negative part %+v", shape, est)
		}
		err := CheckFits(est, math.MaxUint64, math.MaxUint64, 1<<30, "a test device")
		if est.Overflows() != (err != nil) {
			t.Errorf("estimate of %v (%+v): overflows %v, CheckFits %v", shape, est, est.Overflows(), err)
		}
	}
}

func TestSaturatingArithmetic(t *testing.T) {
	for _, c := range []struct {
		factors []int64
		want    int64
	}{
		{[]int64{2, 3, 4}, 24},
		{[]int64{math.MaxInt64, 2}, math.MaxInt64},
		{[]int64{1 << 40, 1 << 40, 0}, 0},
		{[]int64{3, -1}, math.MaxInt64},
		{nil, 1},
	} {
		if got := satMul(c.factors...); got != c.want {
			t.Errorf("satMul(%v) = %d, want %d", c.factors, got, c.want)
		}
	}
	if got := satAdd(math.MaxInt64-1, 2); got != math.MaxInt64 {
		t.Errorf("satAdd overflow = %d", got)
	}
	if got := satAdd(1, 2, 3); got != 6 {
		t.Errorf("satAdd = %d", got)
	}
}

// The attack's config: 10^15 layers made the estimate negative, and a
// negative need "fitted" any memory.
func TestCheckFitsRefusesAnOverflowedEstimate(t *testing.T) {
	est := MemoryEstimate{WeightBytes: math.MaxInt64, KVCacheBytes: 1}
	if err := CheckFits(est, math.MaxUint64, math.MaxUint64, 1<<30, "gpu"); err == nil || !strings.Contains(err.Error(), "overflows") {
		t.Errorf("CheckFits of an overflowed estimate: %v", err)
	}
	old := MemoryEstimate{WeightBytes: -5} // what the unchecked arithmetic produced
	if err := CheckFits(old, 1<<40, 1<<40, 1<<30, "gpu"); err == nil {
		t.Error("CheckFits let a negative estimate through")
	}
}

// FuzzParseConfig feeds config.json bytes through the parser and every
// check a run makes before it allocates: whatever parses is a config within
// every limit, whose tensor list, memory estimate (non-negative, saturating
// rather than wrapping), RoPE table and per-step costs are computed without
// a panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(llama31ConfigJSON))
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}`))
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1000000000000000, "num_attention_heads": 4, "vocab_size": 100}`))
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 1048576, "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 2, "vocab_size": 2047}`))
	f.Add([]byte(`{"architectures": ["LlamaForCausalLM"], "rope_parameters": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192, "rope_theta": 1e300}}`))
	f.Add([]byte(`[]`))
	tiny := `"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100`
	f.Add([]byte(`{` + tiny + `, "quantization_config": {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}}`))
	f.Add([]byte(`{` + tiny + `, "quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"targets": ["Linear"],
		"weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
		"input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true, "dynamic": true}}}, "ignore": ["lm_head", "re:.*down_proj"]}}`))
	f.Add([]byte(`{` + tiny + `, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["model.layers.*.mlp*"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseHFConfig("fuzz/config.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz/config.json") {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a parsed config does not validate: %v", err)
		}
		if n := len(ExpectedTensors(c)); n < 3 {
			t.Fatalf("%d tensors", n)
		}
		for _, shape := range [][3]int{{1, 1, 2}, {MaxBatch, MaxTokens, c.MaxPositionEmbeddings}} {
			est := EstimateMemory(c, shape[0], shape[1], shape[2])
			if est.WeightBytes < 0 || est.KVCacheBytes < 0 || est.ActivationBytes < 0 {
				t.Fatalf("estimate %+v", est)
			}
		}
		if inv := c.RopeInvFreq(); len(inv) != c.HeadDim/2 {
			t.Fatalf("%d inverse frequencies for head_dim %d", len(inv), c.HeadDim)
		}
		if c.NumHiddenLayers*c.HiddenSize <= 1<<16 { // the cost model runs the forward pass: keep fuzzing fast
			if _, err := DecodeCost(c, 1, 1); err != nil {
				t.Fatalf("decode cost: %v", err)
			}
		}
	})
}
