package runner

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/kernels/ref"
)

func tinyEngine(t *testing.T) *Engine {
	t.Helper()
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(cfg, NewCPU(), WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func randomPrompt(r *rand.Rand, n, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(r.IntN(vocab))
	}
	return p
}

// lastLogits runs a prefill of prompts (batch rows) and returns logits and next ids.
func prefillLogits(t *testing.T, e *Engine, batch int, prompts []int32, outputLen int) ([][]float32, []int32) {
	t.Helper()
	if err := e.Begin(batch, len(prompts)/batch, outputLen, prompts); err != nil {
		t.Fatal(err)
	}
	if err := e.Prefill(); err != nil {
		t.Fatal(err)
	}
	logits, err := e.Logits()
	if err != nil {
		t.Fatal(err)
	}
	next, err := e.NextTokens()
	if err != nil {
		t.Fatal(err)
	}
	return logits, next
}

func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// A decode step over the KV cache must give what a full prefill of the same
// tokens gives: prefill n then decode 1 == prefill n+1.
func TestDecodeMatchesRecompute(t *testing.T) {
	e := tinyEngine(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ batch, n, steps int }{{1, 5, 3}, {3, 17, 2}, {2, 1, 4}} {
		prompts := randomPrompt(r, tc.batch*tc.n, e.Config().VocabSize)
		_, next := prefillLogits(t, e, tc.batch, prompts, tc.steps+1)
		seqs := make([][]int32, tc.batch)
		for b := range seqs {
			seqs[b] = append(append([]int32{}, prompts[b*tc.n:(b+1)*tc.n]...), next[b])
		}
		var cached [][][]float32
		for s := 0; s < tc.steps; s++ {
			if err := e.Decode(); err != nil {
				t.Fatal(err)
			}
			logits, err := e.Logits()
			if err != nil {
				t.Fatal(err)
			}
			ids, err := e.NextTokens()
			if err != nil {
				t.Fatal(err)
			}
			cached = append(cached, logits)
			if s < tc.steps-1 {
				for b := range seqs {
					seqs[b] = append(seqs[b], ids[b])
				}
			}
		}
		// Recompute: prefill the whole sequence up to each decode step.
		for s := 0; s < tc.steps; s++ {
			l := tc.n + 1 + s
			var flat []int32
			for b := range seqs {
				flat = append(flat, seqs[b][:l]...)
			}
			full, _ := prefillLogits(t, e, tc.batch, flat, 1)
			for b := range full {
				if d := relDiff(cached[s][b], full[b]); d > 1e-2 {
					t.Errorf("batch %d n %d step %d seq %d: cached decode vs recompute rel diff %.3g", tc.batch, tc.n, s, b, d)
				}
				if argmax(cached[s][b]) != argmax(full[b]) {
					t.Errorf("batch %d n %d step %d seq %d: greedy token differs", tc.batch, tc.n, s, b)
				}
			}
		}
	}
}

func argmax(xs []float32) int {
	best := 0
	for i, v := range xs {
		if v > xs[best] {
			best = i
		}
	}
	return best
}

// Sequences of a batch are independent: a batched run equals single runs.
func TestBatchRowsIndependent(t *testing.T) {
	e := tinyEngine(t)
	r := rand.New(rand.NewPCG(3, 4))
	n := 9
	prompts := randomPrompt(r, 3*n, e.Config().VocabSize)
	batched, _ := prefillLogits(t, e, 3, prompts, 2)
	for b := 0; b < 3; b++ {
		single, _ := prefillLogits(t, e, 1, prompts[b*n:(b+1)*n], 2)
		if d := relDiff(batched[b], single[0]); d > 1e-2 {
			t.Errorf("sequence %d: batched vs single rel diff %.3g", b, d)
		}
	}
}

// Begin resets the cache: the same prompt gives the same logits after a
// different run, so no prefix leaks between runs.
func TestBeginResetsCache(t *testing.T) {
	e := tinyEngine(t)
	r := rand.New(rand.NewPCG(5, 6))
	p := randomPrompt(r, 8, e.Config().VocabSize)
	first, _ := prefillLogits(t, e, 1, p, 3)
	if err := e.Decode(); err != nil {
		t.Fatal(err)
	}
	_, _ = prefillLogits(t, e, 1, randomPrompt(r, 8, e.Config().VocabSize), 3)
	again, _ := prefillLogits(t, e, 1, p, 3)
	if d := relDiff(again[0], first[0]); d != 0 {
		t.Errorf("same prompt after another run: rel diff %g, want 0", d)
	}
}

func TestEngineRefusesBadRuns(t *testing.T) {
	e := tinyEngine(t)
	max := e.Config().MaxPositionEmbeddings
	for _, tc := range []struct {
		name           string
		batch, in, out int
		prompts        []int32
		want           string
	}{
		{"zero batch", 0, 4, 2, nil, "at least 1"},
		{"wrong prompt count", 2, 4, 2, make([]int32, 7), "prompt ids"},
		{"beyond positions", 1, max, 2, make([]int32, max), "exceeds"},
		{"id outside vocab", 1, 2, 2, []int32{0, int32(e.Config().VocabSize)}, "vocabulary"},
	} {
		err := e.Begin(tc.batch, tc.in, tc.out, tc.prompts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	if err := e.Decode(); err == nil {
		t.Error("decode before prefill: no error")
	}
	if err := e.Begin(1, 2, 2, []int32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.Prefill(); err != nil {
		t.Fatal(err)
	}
	if err := e.Decode(); err != nil {
		t.Fatal(err)
	}
	if err := e.Decode(); err == nil {
		t.Error("decode past the cache's positions: no error")
	}
}

// A run writes input + output − 1 positions: a model of 16 positions
// prefills 15 tokens and decodes once at position 15, or prefills 16 and
// decodes nothing; one more is refused.
func TestEnginePositionsRule(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxPositionEmbeddings = 16
	e, err := NewEngine(cfg, NewCPU(), WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tc := range []struct{ in, out, decodes int }{{15, 2, 1}, {16, 1, 0}, {1, 16, 15}} {
		if err := e.Begin(1, tc.in, tc.out, make([]int32, tc.in)); err != nil {
			t.Fatalf("input %d output %d: %v", tc.in, tc.out, err)
		}
		if err := e.Prefill(); err != nil {
			t.Fatal(err)
		}
		for range tc.decodes {
			if err := e.Decode(); err != nil {
				t.Fatalf("input %d output %d: %v", tc.in, tc.out, err)
			}
		}
		if _, err := e.NextTokens(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Begin(1, 16, 2, make([]int32, 16)); err == nil || !strings.Contains(err.Error(), "16 + output 2 − 1 = 17 positions exceeds the model's 16") {
		t.Errorf("17 positions: %v", err)
	}
}

// Dummy weights are the generator's values, so the cpu and cuda backends share them.
func TestDummyWeightsFollowGenerator(t *testing.T) {
	e := tinyEngine(t)
	got := make([]uint16, 16)
	if err := e.be.DownloadBF16(e.w.layers[1].qkv.w, got); err != nil {
		t.Fatal(err)
	}
	want := make([]uint16, 16)
	fillWant(want, 7, "model.layers.1.self_attn.q_proj.weight")
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("q_proj[%d] = %#04x, want %#04x", i, got[i], want[i])
		}
	}
}

// A model written as safetensors with the dummy generator's values must run
// exactly like the dummy model: the real-weight path (read, convert, fuse,
// upload) is checked against the generator.
func TestSafetensorsWeightsMatchDummy(t *testing.T) {
	cfg, _ := Preset("llama-tiny")
	const seed = 11
	for _, dtype := range []string{"BF16", "F32"} {
		dir := t.TempDir()
		var tensors []HostTensor
		for _, spec := range ExpectedTensors(cfg) {
			n := 1
			for _, d := range spec.Shape {
				n *= d
			}
			vals := make([]uint16, n)
			kind := ref.DummyUniform
			if strings.HasSuffix(spec.Name, "norm.weight") {
				kind = ref.DummyOnes
			}
			ref.FillDummy(vals, seed, spec.Name, 0, kind)
			var data []byte
			for _, v := range vals {
				if dtype == "BF16" {
					data = append(data, byte(v), byte(v>>8))
				} else {
					b := math.Float32bits(ref.BF16ToF32(v))
					data = append(data, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
				}
			}
			tensors = append(tensors, HostTensor{Name: spec.Name, DType: dtype, Shape: spec.Shape, Data: data})
		}
		if err := WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
			t.Fatal(err)
		}
		st, err := OpenSafetensors(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Check(cfg); err != nil {
			t.Fatal(err)
		}
		fromFile, err := NewEngine(cfg, NewCPU(), WeightSource{Reader: st}, nil)
		if err != nil {
			t.Fatal(err)
		}
		dummy, err := NewEngine(cfg, NewCPU(), WeightSource{Seed: seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		prompt := []int32{5, 17, 400, 3, 99}
		a, _ := prefillLogits(t, fromFile, 1, prompt, 2)
		b, _ := prefillLogits(t, dummy, 1, prompt, 2)
		if d := relDiff(a[0], b[0]); d != 0 {
			t.Errorf("%s safetensors vs dummy weights: rel diff %g, want 0", dtype, d)
		}
		_ = fromFile.Close()
		_ = dummy.Close()
		_ = st.Close()
	}
}
