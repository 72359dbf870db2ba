package runner

import (
	"fmt"
	"testing"

	"stepbench/kernels/ref"
)

// The cpu backend's ops at llama-tiny's widths, for a decode step (1 token
// per sequence, 64 cached) and a prefill of 64 tokens, at batch 1 and 4:
//
//	go test ./runner -run '^$' -bench CPU -count 6 | benchstat -
//
// Weight matrices are prepared as the engine prepares them after loading.

// benchBuffer is a bf16 buffer of n dummy values.
func benchBuffer(b *testing.B, be *CPU, name string, n int, kind ref.DummyKind) Buffer {
	b.Helper()
	buf, err := be.Alloc(BF16, n)
	if err != nil {
		b.Fatal(err)
	}
	if err := be.FillDummy(buf, 0, n, 7, name, 0, kind); err != nil {
		b.Fatal(err)
	}
	return buf
}

// benchShapes are the benchmarks' steps: batch × tokens per sequence after cached positions.
var benchShapes = []struct {
	phase                string
	batch, tokens, start int
}{{"decode", 1, 1, 64}, {"decode", 4, 1, 64}, {"prefill", 1, 64, 0}, {"prefill", 4, 64, 0}}

func BenchmarkCPULinear(b *testing.B) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		b.Fatal(err)
	}
	be := NewCPU()
	h := cfg.HiddenSize
	for _, op := range []struct {
		name string
		n, k int
	}{
		{"qkv_proj", cfg.QKVDim(), h}, {"o_proj", h, cfg.NumAttentionHeads * cfg.HeadDim},
		{"gate_up_proj", 2 * cfg.IntermediateSize, h}, {"down_proj", h, cfg.IntermediateSize}, {"lm_head", cfg.VocabSize, h},
	} {
		w := benchBuffer(b, be, op.name, op.n*op.k, ref.DummyUniform)
		if p, ok := any(be).(interface{ PrepareWeights([]Buffer) error }); ok { // the engine prepares them (WeightPreparer)
			if err := p.PrepareWeights([]Buffer{w}); err != nil {
				b.Fatal(err)
			}
		}
		for _, sh := range benchShapes {
			rows := sh.batch * sh.tokens
			if op.name == "lm_head" {
				rows = sh.batch // prefill's logits are the last token's only
			}
			x := benchBuffer(b, be, "x", rows*op.k, ref.DummyUniform)
			out, _ := be.Alloc(BF16, rows*op.n)
			b.Run(fmt.Sprintf("op=%s/phase=%s/batch=%d", op.name, sh.phase, sh.batch), func(b *testing.B) {
				for b.Loop() {
					if err := be.Linear(out, x, w, rows, op.n, op.k); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCPUOps are the other ops of a step, at one layer's shapes.
func BenchmarkCPUOps(b *testing.B) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		b.Fatal(err)
	}
	be := NewCPU()
	h, D, inter := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	for _, sh := range benchShapes {
		T, maxSeq := sh.batch*sh.tokens, sh.start+sh.tokens
		s := AttnShape{Batch: sh.batch, SeqLen: sh.tokens, StartPos: sh.start, Heads: cfg.NumAttentionHeads,
			KVHeads: cfg.NumKeyValueHeads, HeadDim: D, MaxSeq: maxSeq}
		cache := sh.batch * maxSeq * s.KVHeads * D
		q := benchBuffer(b, be, "q", T*s.Heads*D, ref.DummyUniform)
		kc, vc := benchBuffer(b, be, "k", cache, ref.DummyUniform), benchBuffer(b, be, "v", cache, ref.DummyUniform)
		qkv := benchBuffer(b, be, "qkv", T*cfg.QKVDim(), ref.DummyUniform)
		out := benchBuffer(b, be, "out", T*max(s.Heads*D, 2*inter, h), ref.DummyUniform)
		resid, norm := benchBuffer(b, be, "r", T*h, ref.DummyUniform), benchBuffer(b, be, "n", h, ref.DummyOnes)
		gateUp := benchBuffer(b, be, "gu", T*2*inter, ref.DummyUniform)
		logits := benchBuffer(b, be, "logits", sh.batch*cfg.VocabSize, ref.DummyUniform)
		pos, _ := be.Alloc(I32, 1)
		ids, _ := be.Alloc(I32, sh.batch)
		invFreq, _ := be.Alloc(F32, D/2)
		if err := be.UploadF32(invFreq, cfg.RopeInvFreq()); err != nil {
			b.Fatal(err)
		}
		if err := be.UploadI32(pos, []int32{int32(sh.start)}); err != nil {
			b.Fatal(err)
		}
		for name, op := range map[string]func() error{
			"attention":     func() error { return be.Attention(out, q, kc, vc, KVView{Pos: pos}, s) },
			"rope_kv_write": func() error { return be.RopeKVWrite(q, kc, vc, qkv, invFreq, KVView{Pos: pos}, s) },
			"add_rmsnorm":   func() error { return be.AddRMSNorm(out, resid, nil, norm, T, h, 1e-5) },
			"silu_mul":      func() error { return be.SiluMul(out, gateUp, T, inter) },
			"argmax":        func() error { return be.Argmax(ids, logits, sh.batch, cfg.VocabSize) },
		} {
			b.Run(fmt.Sprintf("op=%s/phase=%s/batch=%d", name, sh.phase, sh.batch), func(b *testing.B) {
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCPUStep is a whole llama-tiny step on the cpu backend: the
// prefill of 64 tokens and a decode step after them, at batch 1 and 4.
func BenchmarkCPUStep(b *testing.B) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(cfg, NewCPU(), WeightSource{Seed: 7}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, batch := range []int{1, 4} {
		prompts := make([]int32, batch*64)
		for i := range prompts {
			prompts[i] = int32(i * 7 % cfg.VocabSize)
		}
		b.Run(fmt.Sprintf("phase=prefill/batch=%d", batch), func(b *testing.B) {
			for b.Loop() {
				if err := e.Begin(batch, 64, 2, prompts); err != nil {
					b.Fatal(err)
				}
				if err := e.Prefill(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("phase=decode/batch=%d", batch), func(b *testing.B) {
			// Iterations of 15 decode steps after a 64-token prefill, as
			// make run's shapes (input 64, output 16); only the steps are timed.
			const steps = 15
			for i := range b.N {
				if i%steps == 0 {
					b.StopTimer()
					if err := e.Begin(batch, 64, steps+1, prompts); err != nil {
						b.Fatal(err)
					}
					if err := e.Prefill(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if err := e.Decode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
