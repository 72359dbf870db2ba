package runner

import (
	"slices"
	"testing"
)

// ropeFusingCPU is the cpu backend with a RopeAttention of its own
// (RopeKVWrite into a private q, then Attention) that it offers at decode
// steps: the engine's fused layer, on numbers the cpu backend defines.
type ropeFusingCPU struct {
	*CPU
	q     Buffer
	fused int // RopeAttention calls
}

func (c *ropeFusingCPU) FusesRopeAttention(s AttnShape) bool { return s.SeqLen == 1 }

func (c *ropeFusingCPU) RopeAttention(out, qkv, kCache, vCache, invFreq Buffer, kv KVView, s AttnShape) error {
	c.fused++
	if c.q == nil {
		q, err := c.Alloc(BF16, s.Tokens()*s.Heads*s.HeadDim)
		if err != nil {
			return err
		}
		c.q = q
	}
	if err := c.RopeKVWrite(c.q, kCache, vCache, qkv, invFreq, kv, s); err != nil {
		return err
	}
	return c.Attention(out, c.q, kCache, vCache, kv, s)
}

// Where the backend fuses rope_kv_write into decode attention
// (RopeAttentionFuser), a decode step's layers have no rope_kv_write op and
// run RopeAttention as their attention op; the prefill keeps both ops; the
// tokens are the unfused engine's.
func TestEngineFusesRopeIntoDecodeAttention(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	prompts := []int32{1, 2, 3, 4, 5, 6}
	run := func(be Backend) (prefillOps, decodeOps []string, tokens [][]int32) {
		e, err := NewEngine(cfg, be, WeightSource{Seed: 7}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.Close() }()
		if err := e.Begin(2, 3, 3, prompts); err != nil {
			t.Fatal(err)
		}
		var ops *[]string
		e.OnOp = func(op string) { *ops = append(*ops, op) }
		for step := range 3 {
			f := e.Decode
			ops = &decodeOps
			if step == 0 {
				f, ops = e.Prefill, &prefillOps
			}
			if err := f(); err != nil {
				t.Fatal(err)
			}
			tk, err := e.NextTokens()
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, tk)
		}
		return prefillOps, decodeOps, tokens
	}
	fusing := &ropeFusingCPU{CPU: NewCPU()}
	prefill, decode, tokens := run(fusing)
	_, plainDecode, wantTokens := run(NewCPU())
	count := func(ops []string, name string) int {
		return len(slices.DeleteFunc(slices.Clone(ops), func(op string) bool { return op != name }))
	}
	layers := cfg.NumHiddenLayers
	if count(prefill, "rope_kv_write") != layers || count(prefill, "attention") != layers {
		t.Errorf("prefill ops %v: want rope_kv_write and attention per layer", prefill)
	}
	if count(decode, "rope_kv_write") != 0 || count(decode, "attention") != 2*layers || fusing.fused != 2*layers {
		t.Errorf("decode ops %v (RopeAttention %d times): want attention, no rope_kv_write, per layer and step", decode, fusing.fused)
	}
	if len(plainDecode)-len(decode) != 2*layers {
		t.Errorf("decode ops: %d fused, %d unfused; want one fewer per layer and step", len(decode), len(plainDecode))
	}
	if !slices.EqualFunc(tokens, wantTokens, slices.Equal) {
		t.Errorf("tokens %v, unfused %v", tokens, wantTokens)
	}
}
