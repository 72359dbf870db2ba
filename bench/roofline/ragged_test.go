package roofline

import (
	"math"
	"testing"

	"stepbench/runner"
)

// kvBytesPerToken is what one token's K and V take in every layer's cache
// (bf16) on one GPU of tp ranks (0: all of them).
func kvBytesPerToken(cfg runner.Config, tp int) float64 {
	kv := cfg.NumKeyValueHeads
	if tp > 0 {
		kv /= tp
	}
	return float64(cfg.NumHiddenLayers * 2 * kv * cfg.HeadDim * 2)
}

func raggedShape(lens []int, outputLen int) Shape {
	s := Shape{OutputLen: outputLen}
	total := 0
	for _, n := range lens {
		s.Seqs = append(s.Seqs, runner.SeqSpec{Prompt: n})
		total += n
	}
	s.InputLen = total / len(lens)
	return s
}

func attentionBytes(t *testing.T, c runner.StepCost) float64 {
	t.Helper()
	for _, op := range c.Ops {
		if op.Op == "attention" {
			return op.Bytes
		}
	}
	t.Fatalf("no attention op in %+v", c.Ops)
	return 0
}

// A decode step's KV bytes are the sum of the sequences' lengths: lengths
// 1024 and 3072 read exactly 2048 tokens' K and V more than 1024 and 1024
// (B × the longest would count 4096 more). On the paged layout both steps
// go through the block table and the whole step differs by that; on the
// contiguous one the uniform batch advances one position (add_i32), the
// ragged one its views (advance_kv), so the attention's bytes do.
func TestRaggedDecodeReadsTheSumOfTheLengths(t *testing.T) {
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	roof := NewRoof(SourceDatasheet, "test", 1e15, 3e12)
	for _, tc := range []struct {
		name string
		c    Costs
	}{
		{"contiguous", Costs{}},
		{"paged", Costs{KV: runner.KVOptions{Layout: runner.KVPaged, PageSize: 16}}},
		{"paged tp 2", Costs{TPSize: 2, KV: runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesShuffled}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			even, err := tc.c.Floors(cfg, roof, raggedShape([]int{1024, 1024}, 4))
			if err != nil {
				t.Fatal(err)
			}
			ragged, err := tc.c.Floors(cfg, roof, raggedShape([]int{1024, 3072}, 4))
			if err != nil {
				t.Fatal(err)
			}
			want := 2048 * kvBytesPerToken(cfg, tc.c.TPSize)
			for i := range ragged.Decode {
				// The interpolated steps between the first and last have no ops.
				if ragged.Decode[i].Ops != nil {
					if got := attentionBytes(t, ragged.Decode[i]) - attentionBytes(t, even.Decode[i]); got != want {
						t.Errorf("decode step %d: attention reads %.0f bytes more, want %.0f (2048 tokens)", i, got, want)
					}
				}
				if tc.c.KV.Paged() {
					if got := ragged.Decode[i].Bytes - even.Decode[i].Bytes; got != want {
						t.Errorf("decode step %d: %.0f bytes more, want %.0f (2048 tokens)", i, got, want)
					}
				}
				if got := ragged.Decode[i].KVTokens; got != 4096+2*(i+1) {
					t.Errorf("decode step %d: kv_tokens %d, want %d", i, got, 4096+2*(i+1))
				}
			}
		})
	}
}

// The decode steps between the first and the last are interpolated: exact,
// since a ragged step's cost is affine in the step too.
func TestRaggedDecodeInterpolationIsExact(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := NewRoof(SourceDatasheet, "test", 1e12, 1e11)
	s := raggedShape([]int{3, 200, 57}, 9)
	s.Seqs[1] = runner.SeqSpec{Context: 150, Prompt: 50} // a synthetic context among them
	c := Costs{KV: runner.KVOptions{Layout: runner.KVPaged, PageSize: 16}}
	sf, err := c.Floors(cfg, roof, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(sf.Decode) != 8 {
		t.Fatalf("%d decode steps, want 8", len(sf.Decode))
	}
	for i, d := range sf.Decode {
		exact, err := c.DecodeOf(cfg, s, i)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(d.Bytes-exact.Bytes) > 1e-9*exact.Bytes || math.Abs(d.FLOPs-exact.FLOPs) > 1e-9*exact.FLOPs || d.KVTokens != exact.KVTokens {
			t.Errorf("step %d: interpolated %.0f bytes %.0f FLOPs %d kv tokens, exact %.0f %.0f %d", i, d.Bytes, d.FLOPs, d.KVTokens,
				exact.Bytes, exact.FLOPs, exact.KVTokens)
		}
	}
}

// A synthetic fill's prefill runs one token per sequence over its context:
// its work is that of a decode step at the context's length, and the decode
// steps after it go through the block table (advance_kv), as the engine's.
func TestSyntheticFillCostsOneTokenPerSequence(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	seqs := []runner.SeqSpec{{Context: 63, Prompt: 1}, {Context: 63, Prompt: 1}}
	s := Shape{Seqs: seqs, InputLen: 64, OutputLen: 3}
	pre, err := Costs{}.PrefillOf(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if pre.Tokens != 2 || pre.KVTokens != 128 {
		t.Errorf("synthetic prefill: %d tokens, %d kv tokens; want 2 and 128", pre.Tokens, pre.KVTokens)
	}
	full, err := Costs{}.PrefillOf(cfg, UniformShape(2, 64, 3))
	if err != nil {
		t.Fatal(err)
	}
	if !(pre.FLOPs < full.FLOPs/10) {
		t.Errorf("synthetic prefill %.3g FLOPs, the full prefill's %.3g: want far fewer", pre.FLOPs, full.FLOPs)
	}
	d, err := Costs{}.DecodeOf(cfg, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, op := range d.Ops {
		ops[op.Op] = true
	}
	if d.KVTokens != 2*66 || !ops["advance_position"] {
		t.Errorf("decode step 1 after a synthetic fill: kv tokens %d (want 132), ops %v", d.KVTokens, ops)
	}
}

// Points carry a ragged batch's KV tokens; a uniform batch's stay as they
// were (no kv_tokens, the position its cost was computed at).
func TestRaggedPoints(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := NewRoof(SourceDatasheet, "test", 1e12, 1e11)
	points, err := Costs{}.Points(cfg, &roof, raggedShape([]int{10, 30}, 6), 1e-3, 1e-4)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].KVTokens != 40 || points[1].KVTokens != 40+2*3 || points[1].Position != 20+2 {
		t.Errorf("ragged points %+v", points)
	}
	uniform, err := StepPoints(cfg, &roof, 2, 20, 6, 1e-3, 1e-4)
	if err != nil {
		t.Fatal(err)
	}
	if uniform[0].KVTokens != 0 || uniform[1].KVTokens != 0 || uniform[1].Position != 22 {
		t.Errorf("uniform points %+v", uniform)
	}
}
