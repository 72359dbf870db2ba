package bench

import (
	"errors"
	"fmt"
	"math"

	"stepbench/runner"
)

// ABTarget is a candidate (A) and a baseline (B) built on the same weights,
// measured in one process. RunAB alternates them iteration by iteration so
// that slow drift (clocks, temperature, other tenants) hits both arms alike
// instead of whichever ran second.
type ABTarget struct {
	A, B Target
}

// RunAB measures every shape of opt's sweep on both arms: per shape, the
// warmup iterations of A and B alternate, then the timed iterations run
// A B A B …, each pair on the same prompts. It returns the baseline's and
// the candidate's results (in that order, as CompareShapes takes them). On an
// error it returns what both arms finished so far, trimmed to the same
// iterations, with the error.
func RunAB(pair ABTarget, opt Options) (baseline, candidate []ShapeResult, err error) {
	if pair.A == nil || pair.B == nil {
		return nil, nil, errors.New("bench: A/B run needs two targets")
	}
	if err := opt.validate(); err != nil {
		return nil, nil, err
	}
	// Only the A arm prints one_batch's lines; B's would interleave with them.
	armA, err := newHarness(pair.A, opt, opt.Stdout, opt.Progress)
	if err != nil {
		return nil, nil, err
	}
	armB, err := newHarness(pair.B, opt, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	shapes := opt.shapes()
	for i, sh := range shapes {
		fmt.Fprintf(armA.progress, "A/B shape %d/%d: %s\n", i+1, len(shapes), sh)
		a, b, err := runABShape(&armA, &armB, sh.batch, sh.inputLen, sh.outputLen)
		if len(a.Iterations) > 0 {
			candidate = append(candidate, a)
			baseline = append(baseline, b)
		}
		if err != nil {
			return baseline, candidate, fmt.Errorf("A/B shape %s: %w", sh, err)
		}
	}
	return baseline, candidate, nil
}

func runABShape(armA, armB *harness, batch, inputLen, outputLen int) (a, b ShapeResult, err error) {
	a = ShapeResult{Batch: batch, InputLen: inputLen, OutputLen: outputLen}
	b = a
	finish := func(complete bool) {
		a.Summary, b.Summary = summarizeShape(a.Iterations), summarizeShape(b.Iterations)
		a.Complete, b.Complete = complete, complete
	}
	for w := 0; w < armA.opt.WarmupIters; w++ {
		key := PromptKey{Batch: batch, InputLen: inputLen, OutputLen: outputLen, Iter: w, Warmup: true}
		if _, err := armA.runIteration(key); err != nil {
			return a, b, fmt.Errorf("A warmup %d: %w", w, err)
		}
		if _, err := armB.runIteration(key); err != nil {
			return a, b, fmt.Errorf("B warmup %d: %w", w, err)
		}
	}
	for i := 0; i < armA.opt.NumIters; i++ {
		fmt.Fprintf(armA.progress, "  iteration %d/%d (A then B)\n", i+1, armA.opt.NumIters)
		key := PromptKey{Batch: batch, InputLen: inputLen, OutputLen: outputLen, Iter: i}
		itA, err := armA.runIteration(key)
		if err != nil {
			finish(false)
			return a, b, fmt.Errorf("A iteration %d: %w", i, err)
		}
		itB, err := armB.runIteration(key)
		if err != nil {
			finish(false)
			return a, b, fmt.Errorf("B iteration %d: %w", i, err)
		}
		// Kept in pairs, so that a failure leaves both arms equally long.
		a.Iterations = append(a.Iterations, itA)
		b.Iterations = append(b.Iterations, itB)
	}
	finish(true)
	return a, b, nil
}

// ArmsAgree checks, before an A/B run is timed, that both arms compute the
// same model: a prefill of batch seeded prompts of inputLen tokens on each,
// and the relative error ||a−b||/||b|| of their logits must not exceed
// maxRelativeError (DESIGN.md's bf16 bound is 1e-2). It is the engine's
// answer that is compared, so any kernel difference that matters shows.
func ArmsAgree(a, b *runner.Engine, batch, inputLen int, seed uint64, maxRelativeError float64) error {
	if a == nil || b == nil {
		return errors.New("arms agree: nil engine")
	}
	cfg := a.Config()
	prompts, err := PromptIDs(seed, cfg.VocabSize, PromptKey{Batch: batch, InputLen: inputLen, OutputLen: 1})
	if err != nil {
		return fmt.Errorf("arms agree: %w", err)
	}
	logits := make([][][]float32, 2)
	for i, e := range []*runner.Engine{a, b} {
		if err := e.Begin(batch, inputLen, 1, prompts); err != nil {
			return fmt.Errorf("arms agree: arm %c: %w", "AB"[i], err)
		}
		if err := e.Prefill(); err != nil {
			return fmt.Errorf("arms agree: arm %c: %w", "AB"[i], err)
		}
		if logits[i], err = e.Logits(); err != nil {
			return fmt.Errorf("arms agree: arm %c: %w", "AB"[i], err)
		}
	}
	var diff, norm float64
	for row := range logits[1] {
		if len(logits[0]) != len(logits[1]) || len(logits[0][row]) != len(logits[1][row]) {
			return errors.New("arms agree: logits of different shapes")
		}
		for j, want := range logits[1][row] {
			got := logits[0][row][j]
			if math.IsNaN(float64(got)) || math.IsInf(float64(got), 0) {
				return fmt.Errorf("arms agree: arm A logit [%d][%d] is %v", row, j, got)
			}
			d := float64(got) - float64(want)
			diff += d * d
			norm += float64(want) * float64(want)
		}
	}
	rel := math.Sqrt(diff / math.Max(norm, math.SmallestNonzeroFloat64))
	if rel > maxRelativeError || math.IsNaN(rel) {
		return fmt.Errorf("arms agree: the arms' logits differ by %.3g (relative), more than %.3g: A computes a different model",
			rel, maxRelativeError)
	}
	return nil
}
