package runner

import (
	"fmt"
	"math"

	"stepbench/kernels/ref"
)

// RaggedBound is the end-to-end bound on a ragged batch's logits against
// each sequence run alone (ref.RelErr): the bound every comparison of two
// runs of the model uses.
const RaggedBound = 2e-2

// Generator is what a ragged check drives: an Engine, or a
// tensor-parallel Group.
type Generator interface {
	Begin(batch, inputLen, outputLen int, prompts []int32) error
	BeginSeqs(seqs []SeqSpec, outputLen int, prompts []int32) error
	Prefill() error
	Decode() error
	NextTokens() ([]int32, error)
	ForceNextTokens(ids []int32) error
	Logits() ([][]float32, error)
}

// NearTieFraction is how close two logits of a row must be, relative to the
// row's largest magnitude, for a greedy choice between them to be a near
// tie: two runs whose logits agree within RaggedBound may pick either.
const NearTieFraction = 0.01

// NearTie reports whether tokens a and b of a row of logits are a near tie.
func NearTie(row []float32, a, b int32) bool {
	scale := 0.0
	for _, x := range row {
		scale = max(scale, math.Abs(float64(x)))
	}
	return math.Abs(float64(row[a]-row[b])) <= NearTieFraction*scale
}

// SeqCheck is one sequence of a ragged batch against the same sequence run
// alone: the tokens each generated (the batch's step i fed the alone run's
// token i−1, so that one near tie does not part the rest), the worst
// relative error of the batch's logits against the alone run's and its
// step, the first step whose tokens differ where the alone run's logits of
// the two are no near tie (−1: none), and the steps whose tokens differ at
// a near tie (allowed: the two runs' kernels may round differently, e.g.
// the contiguous layout's alone run and the batch's block-table kernels).
type SeqCheck struct {
	PromptLen        int
	Batch, Alone     []int32
	WorstRelErr      float64
	WorstStep        int
	FirstTokenDiffer int
	NearTies         []int
}

// OK reports whether the sequence's logits lie within RaggedBound and its
// tokens agree at every step but near ties.
func (c SeqCheck) OK() bool { return c.WorstRelErr <= RaggedBound && c.FirstTokenDiffer < 0 }

// RaggedAgainstAlone runs every prompt alone (batch 1) for outputLen
// tokens, then all of them as one ragged batch, teacher-forced by the alone
// runs' tokens, and compares each sequence's logits and tokens at every
// step. An error is a failed run, not a disagreement (SeqCheck.OK).
func RaggedAgainstAlone(g Generator, prompts [][]int32, outputLen int) ([]SeqCheck, error) {
	alone := make([][][]float32, len(prompts)) // [prompt][step] logits
	checks := make([]SeqCheck, len(prompts))
	for i, p := range prompts {
		checks[i] = SeqCheck{PromptLen: len(p), FirstTokenDiffer: -1}
		if err := g.Begin(1, len(p), outputLen, p); err != nil {
			return nil, fmt.Errorf("prompt %d alone: %w", i+1, err)
		}
		err := steps(g, outputLen, func(step int, ids []int32, logits [][]float32) error {
			checks[i].Alone = append(checks[i].Alone, ids[0])
			alone[i] = append(alone[i], logits[0])
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("prompt %d alone: %w", i+1, err)
		}
	}
	seqs := make([]SeqSpec, len(prompts))
	var all []int32
	for i, p := range prompts {
		seqs[i], all = SeqSpec{Prompt: len(p)}, append(all, p...)
	}
	if err := g.BeginSeqs(seqs, outputLen, all); err != nil {
		return nil, fmt.Errorf("the batch: %w", err)
	}
	err := steps(g, outputLen, func(step int, ids []int32, logits [][]float32) error {
		forced := make([]int32, len(prompts))
		for i := range prompts {
			c := &checks[i]
			c.Batch = append(c.Batch, ids[i])
			rel, err := ref.RelErr(logits[i], alone[i][step])
			if err != nil {
				return fmt.Errorf("sequence %d logits: %w", i+1, err)
			}
			if step == 0 || rel > c.WorstRelErr {
				c.WorstRelErr, c.WorstStep = rel, step
			}
			if ids[i] != c.Alone[step] {
				if NearTie(alone[i][step], ids[i], c.Alone[step]) {
					c.NearTies = append(c.NearTies, step)
				} else if c.FirstTokenDiffer < 0 {
					c.FirstTokenDiffer = step
				}
			}
			forced[i] = c.Alone[step]
		}
		if step+1 < outputLen {
			return g.ForceNextTokens(forced)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the batch: %w", err)
	}
	return checks, nil
}

// steps runs the prefill and outputLen−1 decode steps, handing each
// step's tokens and logits to f.
func steps(g Generator, outputLen int, f func(step int, ids []int32, logits [][]float32) error) error {
	for step := range outputLen {
		run := g.Decode
		if step == 0 {
			run = g.Prefill
		}
		if err := run(); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		ids, err := g.NextTokens()
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		logits, err := g.Logits()
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if err := f(step, ids, logits); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	return nil
}
