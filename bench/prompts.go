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
	return state
}

func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// PromptIDs returns the key.Batch×key.InputLen prompt ids (row-major) of one
// iteration: uniform in [0, vocabSize) from math/rand/v2's PCG seeded by
// (seed, key's stream). The same arguments always give the same ids.
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
	ids := make([]int32, key.Batch*key.InputLen)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocabSize))
	}
	return ids, nil
}
