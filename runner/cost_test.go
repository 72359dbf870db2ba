package runner

import (
	"math"
	"runtime"
	"testing"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

func fillWant(dst []uint16, seed uint64, name string) {
	ref.FillDummy(dst, seed, name, 0, ref.DummyUniform)
}

func TestParamCountLlama3_8B(t *testing.T) {
	cfg, _ := Preset("llama-3-8b")
	if got := cfg.ParamCount(); got != 8_030_261_248 {
		t.Errorf("llama-3-8b parameters = %d, want 8030261248", got)
	}
}

// Llama-3-8B decode at batch 1 reads every weight but the embedding table
// (gathered): 15.01 GB.
func TestDecodeCostLlama3_8B(t *testing.T) {
	cfg, _ := Preset("llama-3-8b")
	c, err := DecodeCost(cfg, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	embed := 2 * float64(cfg.VocabSize*cfg.HiddenSize)
	wantWeights := 2*float64(cfg.ParamCount()) - embed
	if c.WeightBytes != wantWeights {
		t.Errorf("weight bytes %.0f, want %.0f", c.WeightBytes, wantWeights)
	}
	if got := math.Round(c.WeightBytes/1e7) / 100; got != 15.01 {
		t.Errorf("weight GB %.2f, want 15.01", got)
	}
	// FLOPs: 2 per weight of every GEMM, plus small elementwise work.
	if c.FLOPs < wantWeights || c.FLOPs > 1.01*wantWeights {
		t.Errorf("decode FLOPs %.4g, want ≈ %.4g", c.FLOPs, wantWeights)
	}
	if c.Bytes < c.WeightBytes || c.Bytes > c.WeightBytes*1.01 {
		t.Errorf("decode bytes %.4g, weights %.4g", c.Bytes, c.WeightBytes)
	}
}

// Attention costs follow their formulas: 4·D·H per (query, visible key),
// and each sequence's K and V read once.
func TestAttentionCost(t *testing.T) {
	cfg, _ := Preset("llama-tiny")
	for _, tc := range []struct{ batch, input int }{{1, 1}, {2, 10}, {3, 64}} {
		p, err := PrefillCost(cfg, tc.batch, tc.input)
		if err != nil {
			t.Fatal(err)
		}
		var att OpCost
		for _, o := range p.Ops {
			if o.Op == "attention" {
				att = o
			}
		}
		B, S, D, H, KV, L := float64(tc.batch), float64(tc.input), float64(cfg.HeadDim), float64(cfg.NumAttentionHeads), float64(cfg.NumKeyValueHeads), float64(cfg.NumHiddenLayers)
		wantFLOPs := L * 4 * D * H * B * S * (S + 1) / 2
		wantBytes := L * (2*2*B*S*H*D + 2*2*B*S*KV*D)
		if att.FLOPs != wantFLOPs || att.Bytes != wantBytes || att.Calls != cfg.NumHiddenLayers {
			t.Errorf("batch %d input %d: attention %+v, want FLOPs %.0f bytes %.0f", tc.batch, tc.input, att, wantFLOPs, wantBytes)
		}
	}
}

func TestLinearCostScalesWithBatch(t *testing.T) {
	cfg, _ := Preset("llama-3-8b")
	one, _ := DecodeCost(cfg, 1, 100)
	many, _ := DecodeCost(cfg, 32, 100)
	if many.WeightBytes != one.WeightBytes {
		t.Errorf("weights read once whatever the batch: %.0f vs %.0f", many.WeightBytes, one.WeightBytes)
	}
	if r := many.FLOPs / one.FLOPs; r < 31.9 || r > 32.1 {
		t.Errorf("FLOPs ratio batch 32 / batch 1 = %.3f, want ≈ 32", r)
	}
}

func TestEstimateMemory(t *testing.T) {
	cfg, _ := Preset("llama-3-8b")
	m := EstimateMemory(cfg, 32, 32*1024, 1056)
	if m.WeightBytes != 2*cfg.ParamCount()+4*64 {
		t.Errorf("weights %d", m.WeightBytes)
	}
	// K and V, 32 layers × 32 seqs × 1056 positions × 8 heads × 128 × 2 bytes.
	if want := int64(2 * 32 * 32 * 1056 * 8 * 128 * 2); m.KVCacheBytes != want {
		t.Errorf("kv cache %d, want %d", m.KVCacheBytes, want)
	}
	if m.Total() != m.WeightBytes+m.KVCacheBytes+m.ActivationBytes {
		t.Error("total is not the sum")
	}
}

// The cost model allocates nothing per token (issue 31): a prefill's cost
// at 2^20 prompt tokens allocates what one at 16 does. stepCost allocated
// batch × input prompt ids (and BeginSeqs a copy) per evaluation: 8.6 GB
// at roofline's 16383 × 131072 on llama-3.2-1b, inside every limit.
func TestCostAllocatesNothingPerToken(t *testing.T) {
	cfg, err := Preset("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	allocated := func(batch, input int) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := PrefillCost(cfg, batch, input); err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCost(cfg, batch, input); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := allocated(16, 1), allocated(16, 65536)
	if large > small+1<<20 {
		t.Errorf("costs at 16 × 65536 tokens allocate %d bytes, at 16 × 1 %d: per token %.1f bytes", large, small,
			float64(large-small)/(16*65535))
	}
}

// An FP8 cache halves what the decode attention reads of the cache and
// what rope_kv_write writes to it, and adds its layer's scales: Llama-3-8B
// at batch 32 × 8000 tokens of context, by the formula of the file's comment.
func TestAttentionCostFP8Cache(t *testing.T) {
	cfg, _ := Preset("llama-3-8b")
	lens := make([]int, 32)
	for b := range lens {
		lens[b] = 8000
	}
	opBytes := func(kv KVOptions, op string) float64 {
		c, err := DecodeCostSeqs(cfg, 0, lens, kv)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range c.Ops {
			if o.Op == op {
				return o.Bytes
			}
		}
		t.Fatalf("no %s in %+v", op, c.Ops)
		return 0
	}
	paged := KVOptions{Layout: KVPaged}
	fp8 := paged
	fp8.DType = kernels.CacheE4M3
	B, D, H, KV, L := 32.0, float64(cfg.HeadDim), float64(cfg.NumAttentionHeads), float64(cfg.NumKeyValueHeads), float64(cfg.NumHiddenLayers)
	kvTokens := B * 8001
	for _, tc := range []struct {
		kv         KVOptions
		elem, sc   float64
		attn, rope float64
	}{
		{paged, 2, 0, 0, 0},
		{fp8, 1, 2 * 4 * KV, 0, 0},
	} {
		attn := L * (2*2*B*H*D + 2*tc.elem*kvTokens*KV*D + tc.sc)
		rope := L * (2*B*(H+2*KV)*D + 2*B*H*D + 2*tc.elem*B*KV*D + 4*D/2 + tc.sc)
		if got := opBytes(tc.kv, "attention"); got != attn {
			t.Errorf("%s: attention reads %.0f bytes, want %.0f", tc.kv, got, attn)
		}
		if got := opBytes(tc.kv, "rope_kv_write"); got != rope {
			t.Errorf("%s: rope_kv_write moves %.0f bytes, want %.0f", tc.kv, got, rope)
		}
	}
	if a, b := opBytes(fp8, "attention"), opBytes(paged, "attention"); a/b > 0.51 {
		t.Errorf("the FP8 cache's decode attention moves %.3g of the bf16 cache's bytes, want about half", a/b)
	}
}
