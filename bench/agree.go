package bench

import (
	"errors"
	"fmt"

	"stepbench/kernels/ref"
)

// GenerationArm is what CheckGeneration drives: an engine that runs one
// generation step by step and shows its logits (runner.Engine).
type GenerationArm interface {
	Begin(batch, inputLen, outputLen int, prompts []int32) error
	Prefill() error
	Decode() error
	Logits() ([][]float32, error)
	NextTokens() ([]int32, error)
	ForceNextTokens(ids []int32) error
}

// beginArm starts sh on arm e: a ragged shape needs a RaggedTarget.
func beginArm(e GenerationArm, sh Shape, prompts []int32) error {
	if !sh.Ragged() {
		return e.Begin(sh.Batch, sh.InputLen, sh.OutputLen, prompts)
	}
	rt, ok := e.(RaggedTarget)
	if !ok {
		return fmt.Errorf("%s: this arm runs uniform batches only (%T)", sh, e)
	}
	return rt.BeginSeqs(sh.Seqs(), sh.OutputLen, prompts)
}

// GenerationCheck is two arms compared over one shape's whole generation.
type GenerationCheck struct {
	Shape Shape
	// Steps is how many steps were compared: the prefill and every decode
	// step up to the first that differed.
	Steps int
	// WorstRelErr is the largest relative error of A's logits against B's
	// over those steps, and WorstStep the step where it was ("prefill",
	// "decode step N" as the Decode N lines count).
	WorstRelErr float64
	WorstStep   string
	Err         error // nil when every step agreed within the bound
}

// ErrArmsDiffer marks a check whose arms computed different logits.
var ErrArmsDiffer = errors.New("the arms compute different logits")

// CheckGeneration runs one generation of shape sh on both arms, before an
// A/B run times them: the same seeded prompts through the prefill and
// every decode step, both fed B's greedy tokens (teacher forcing, so that a
// near tie cannot make the arms read different tokens), and A's logits
// must be within maxRelErr of B's (ref.RelErrRows) at every step. It stops
// at the first step that differs.
func CheckGeneration(a, b GenerationArm, sh Shape, seed uint64, vocabSize int, maxRelErr float64) GenerationCheck {
	res := GenerationCheck{Shape: sh}
	prompts, err := PromptIDs(seed, vocabSize, PromptKey{Shape: sh, Iter: -1})
	if err != nil {
		res.Err = fmt.Errorf("check %s: %w", sh, err)
		return res
	}
	arms := []GenerationArm{a, b}
	each := func(what string, f func(GenerationArm) error) error {
		for i, arm := range arms {
			if err := f(arm); err != nil {
				return fmt.Errorf("check %s: %s: arm %c: %w", sh, what, "AB"[i], err)
			}
		}
		return nil
	}
	if res.Err = each("begin", func(e GenerationArm) error { return beginArm(e, sh, prompts) }); res.Err != nil {
		return res
	}
	if res.Err = each("prefill", GenerationArm.Prefill); res.Err != nil {
		return res
	}
	for step := -1; step < sh.OutputLen-1; step++ {
		name := "prefill"
		if step >= 0 {
			name = fmt.Sprintf("decode step %d", step)
			if res.Err = forceBaselineTokens(a, b, sh, name); res.Err != nil {
				return res
			}
			if res.Err = each(name, GenerationArm.Decode); res.Err != nil {
				return res
			}
		}
		if res.Err = res.compareStep(a, b, name, maxRelErr); res.Err != nil {
			return res
		}
	}
	return res
}

// forceBaselineTokens feeds both arms B's latest greedy tokens.
func forceBaselineTokens(a, b GenerationArm, sh Shape, step string) error {
	tokens, err := b.NextTokens()
	if err != nil {
		return fmt.Errorf("check %s: %s: arm B's tokens: %w", sh, step, err)
	}
	if err := a.ForceNextTokens(tokens); err != nil {
		return fmt.Errorf("check %s: %s: arm A: %w", sh, step, err)
	}
	return nil
}

// compareStep compares the arms' logits of one step and keeps the worst.
func (res *GenerationCheck) compareStep(a, b GenerationArm, step string, maxRelErr float64) error {
	la, err := a.Logits()
	if err != nil {
		return fmt.Errorf("check %s: %s: arm A's logits: %w", res.Shape, step, err)
	}
	lb, err := b.Logits()
	if err != nil {
		return fmt.Errorf("check %s: %s: arm B's logits: %w", res.Shape, step, err)
	}
	res.Steps++
	rel, err := ref.RelErrRows(la, lb)
	if err != nil {
		return fmt.Errorf("check %s: %s: %w: arm A's logits against arm B's: %w", res.Shape, step, ErrArmsDiffer, err)
	}
	if rel >= res.WorstRelErr {
		res.WorstRelErr, res.WorstStep = rel, step
	}
	if rel > maxRelErr {
		return fmt.Errorf("check %s: %s: %w: relative error %.3g > %.3g: A does not compute B's model", res.Shape, step, ErrArmsDiffer, rel, maxRelErr)
	}
	return nil
}
