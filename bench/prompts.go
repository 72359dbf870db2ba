package bench

import (
	"fmt"
	"math/rand/v2"

	"stepbench/runner"
)

// PromptKey names the prompts of one iteration of one shape.
type PromptKey struct {
	Shape
	Iter int
	// Warmup iterations draw from their own streams, so the timed
	// iterations' prompts do not depend on the warmup count.
	Warmup bool
}

// stream is the PCG's second seed word: the key's fields mixed with
// splitmix64's finaliser so that neighbouring shapes get unrelated streams.
func (k PromptKey) stream() uint64 {
	warmup := uint64(0)
	if k.Warmup {
		warmup = 1
	}
	state := uint64(0x73746570_62656e63) // "stepbenc"
	for _, field := range []uint64{uint64(k.Batch), uint64(k.InputLen), uint64(k.OutputLen), uint64(k.Iter), warmup} {
		state = mix64(state ^ field)
	}
	// A ragged shape's lengths and fill enter too (a uniform shape's
	// streams stay what they were).
	if k.Lens != "" || k.KVFill != "" {
		for _, b := range []byte(k.Lens + "\x00" + k.KVFill) {
			state = mix64(state ^ uint64(b))
		}
	}
	return state
}

func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// PromptIDs returns the key.Batch×key.InputLen prompt ids (row-major) of one
// iteration (a ragged shape's prompts one after another: PromptTokens):
// uniform in [0, vocabSize) from math/rand/v2's PCG seeded by (seed, key's
// stream). The same arguments always give the same ids.
func PromptIDs(seed uint64, vocabSize int, key PromptKey) ([]int32, error) {
	if vocabSize < 1 || int64(vocabSize) > 1<<31 {
		return nil, fmt.Errorf("prompt ids: vocab size %d out of range [1, 2^31]", vocabSize)
	}
	if key.Batch < 1 || key.InputLen < 1 {
		return nil, fmt.Errorf("prompt ids: batch %d and input length %d must be >= 1", key.Batch, key.InputLen)
	}
	if key.Batch > runner.MaxTokens/key.InputLen {
		return nil, fmt.Errorf("prompt ids: batch %d × input length %d exceeds %d tokens", key.Batch, key.InputLen, runner.MaxTokens)
	}
	rng := rand.New(rand.NewPCG(seed, key.stream()))
	n := key.Batch * key.InputLen
	if key.Ragged() {
		n = key.PromptTokens()
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocabSize))
	}
	return ids, nil
}

// PromptSource makes the token ids of one iteration's prompts:
// key.Batch×key.InputLen ids, row-major. The same key always gives the same
// ids. Options.Prompts is one; nil is the random prompts of PromptIDs.
type PromptSource interface {
	PromptIDs(key PromptKey) ([]int32, error)
}

// TextPrompts are prompts cut from real text (stepbench run --prompt-file),
// as SGLang's random dataset (bench_serving's sample_random_requests) makes
// a request of a ShareGPT prompt: one prompt's tokens, cut to the input
// length when longer, repeated whole and cut when shorter. Each row takes
// the next prompt in file order (the first one shifted by the seed), so a
// batch mixes prompts; each pass through the file starts every prompt one
// token later (its tokens rotated), so no two rows of a shape start at the
// same place until its rows, warmups included, outnumber prompts × the
// shortest prompt's tokens (Distinct). Warmup iterations and energy windows take their rows
// from the other end (passes counted backwards), so the timed iterations'
// prompts do not depend on how many warmups ran. Unlike SGLang's, the
// prompts have no BOS (every row would share it as a prefix) and are not
// shuffled.
type TextPrompts struct {
	prompts [][]int32
	shift   int64
}

// NewTextPrompts takes the file's prompts, each already tokenized (without
// BOS), and the run's seed.
func NewTextPrompts(prompts [][]int32, seed uint64) (*TextPrompts, error) {
	if len(prompts) == 0 {
		return nil, fmt.Errorf("text prompts: none")
	}
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("text prompts: prompt %d has no tokens", i+1)
		}
	}
	return &TextPrompts{prompts: prompts, shift: int64(seed % uint64(len(prompts)))}, nil
}

// Distinct is how many rows of a shape start at distinct places: the
// prompts × the shortest prompt's tokens.
func (p *TextPrompts) Distinct() int {
	shortest := len(p.prompts[0])
	for _, q := range p.prompts {
		shortest = min(shortest, len(q))
	}
	return len(p.prompts) * shortest
}

// PromptIDs returns the rows of key's iteration. Row r of timed iteration i
// is row number g = i×batch + r; a warmup's (or an energy window's) rows are
// numbered -1, -2, ... in the same way. Row g is prompt (g + shift) mod P,
// rotated by floor((g + shift) / P) tokens.
func (p *TextPrompts) PromptIDs(key PromptKey) ([]int32, error) {
	if key.Batch < 1 || key.InputLen < 1 {
		return nil, fmt.Errorf("prompt ids: batch %d and input length %d must be >= 1", key.Batch, key.InputLen)
	}
	rowLen := func(int) int { return key.InputLen }
	if key.Ragged() {
		seqs := key.Seqs()
		rowLen = func(r int) int { return seqs[r].Prompt }
	}
	ids := make([]int32, 0, key.Batch*key.InputLen)
	for r := 0; r < key.Batch; r++ {
		g := int64(key.Iter)*int64(key.Batch) + int64(r)
		if key.Warmup || key.Iter < 0 {
			w := int64(key.Iter)
			if w < 0 {
				w = 1<<20 - 1 - w // energy windows count -1, -2, ...: after every warmup
			}
			g = -1 - (w*int64(key.Batch) + int64(r))
		}
		h := g + p.shift
		n := int64(len(p.prompts))
		prompt := p.prompts[floorMod(h, n)]
		start := floorMod(floorDiv(h, n), int64(len(prompt)))
		for k := int64(0); k < int64(rowLen(r)); k++ {
			ids = append(ids, prompt[(start+k)%int64(len(prompt))])
		}
	}
	return ids, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
