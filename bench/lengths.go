package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"stepbench/runner"
)

// LengthSpec is how long each sequence of a ragged batch is (run
// --context-lens): an explicit list (the batch is its length), or lengths
// drawn from a distribution for every batch size, seeded by the run's seed
// and clipped to [1, the longest a sequence may be].
type LengthSpec struct {
	List []int  // explicit lengths, one per sequence
	Dist string // DistUniform or DistNormal when List is nil
	// Lo and Hi bound DistUniform's lengths (inclusive); Mean and SD are
	// DistNormal's.
	Lo, Hi   int
	Mean, SD float64
}

// The distributions of LengthSpec.
const (
	DistUniform = "uniform"
	DistNormal  = "normal"
)

// Fills of the context (Shape.KVFill): the prefill computes each
// sequence's whole length (KVFillPrefill, the default), or every position
// but the last holds deterministic values written before the iteration,
// untimed, and the prefill runs the last token over them (KVFillSynthetic:
// long-context decode without timing its prefill).
const (
	KVFillPrefill   = "prefill"
	KVFillSynthetic = "synthetic"
)

// ParseLengthSpec reads --context-lens: "128,4096,512", "uniform:LO-HI" or
// "normal:MEAN,SD".
func ParseLengthSpec(s string) (LengthSpec, error) {
	kind, rest, hasKind := strings.Cut(s, ":")
	if !hasKind {
		var l LengthSpec
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return LengthSpec{}, fmt.Errorf("%q: want lengths of at least 1 separated by commas (128,4096,512), uniform:LO-HI or normal:MEAN,SD", s)
			}
			l.List = append(l.List, n)
		}
		return l, nil
	}
	switch kind {
	case DistUniform:
		lo, hi, ok := strings.Cut(rest, "-")
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if !ok || errA != nil || errB != nil || a < 1 || b < a {
			return LengthSpec{}, fmt.Errorf("%q: want uniform:LO-HI with 1 <= LO <= HI (uniform:200-8000)", s)
		}
		return LengthSpec{Dist: DistUniform, Lo: a, Hi: b}, nil
	case DistNormal:
		m, sd, ok := strings.Cut(rest, ",")
		mean, errM := strconv.ParseFloat(m, 64)
		dev, errS := strconv.ParseFloat(sd, 64)
		if !ok || errM != nil || errS != nil || !(mean >= 1) || !(dev >= 0) || math.IsInf(mean, 0) || math.IsInf(dev, 0) {
			return LengthSpec{}, fmt.Errorf("%q: want normal:MEAN,SD with MEAN >= 1 and SD >= 0 (normal:2048,512)", s)
		}
		return LengthSpec{Dist: DistNormal, Mean: mean, SD: dev}, nil
	}
	return LengthSpec{}, fmt.Errorf("%q: unknown distribution %q (want uniform:LO-HI or normal:MEAN,SD, or a list 128,4096,512)", s, kind)
}

// IsZero reports whether no spec was given (the uniform --input-len case).
func (l LengthSpec) IsZero() bool { return l.List == nil && l.Dist == "" }

// String is the spec as ParseLengthSpec reads it.
func (l LengthSpec) String() string {
	switch {
	case l.List != nil:
		return joinInts(l.List)
	case l.Dist == DistUniform:
		return fmt.Sprintf("uniform:%d-%d", l.Lo, l.Hi)
	case l.Dist == DistNormal:
		return "normal:" + strconv.FormatFloat(l.Mean, 'g', -1, 64) + "," + strconv.FormatFloat(l.SD, 'g', -1, 64)
	}
	return ""
}

// Lengths are batch sequences' lengths: the list (whose length must be
// batch), or draws from the distribution by a PCG seeded by (seed, batch),
// each clipped to [1, longest]. The same arguments give the same lengths.
func (l LengthSpec) Lengths(batch int, seed uint64, longest int) ([]int, error) {
	if batch < 1 || longest < 1 {
		return nil, fmt.Errorf("lengths: batch %d, longest %d: each must be at least 1", batch, longest)
	}
	if l.List != nil {
		if len(l.List) != batch {
			return nil, fmt.Errorf("context lengths %s: %d lengths for batch size %d", l, len(l.List), batch)
		}
		for i, n := range l.List {
			if n > longest {
				return nil, fmt.Errorf("context length %d (sequence %d) exceeds the %d a sequence may hold here", n, i, longest)
			}
		}
		return append([]int(nil), l.List...), nil
	}
	r := rand.New(rand.NewPCG(seed, 0x6c656e73^uint64(batch)))
	out := make([]int, batch)
	for i := range out {
		var v float64
		switch l.Dist {
		case DistUniform:
			v = float64(l.Lo + r.IntN(l.Hi-l.Lo+1))
		case DistNormal:
			v = math.Round(l.Mean + l.SD*r.NormFloat64())
		default:
			return nil, errors.New("lengths: no spec")
		}
		out[i] = int(min(max(v, 1), float64(longest)))
	}
	return out, nil
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

// ContextLens are the shape's sequences' lengths: Lens parsed, or Batch
// times InputLen for a uniform shape.
func (s Shape) ContextLens() []int {
	if s.Lens == "" {
		out := make([]int, s.Batch)
		for i := range out {
			out[i] = s.InputLen
		}
		return out
	}
	l, err := ParseLengthSpec(s.Lens)
	if err != nil || len(l.List) == 0 {
		return nil // Lens is only ever a list made by RaggedShape
	}
	return l.List
}

// Ragged reports whether the shape's sequences have their own lengths or
// a synthetic context: the steps then run through the block table.
func (s Shape) Ragged() bool { return s.Lens != "" || s.KVFill == KVFillSynthetic }

// Seqs are the engine's sequences of the shape: each context length as
// its prompt, or, with a synthetic fill, all of it but the last token as a
// filled context and the last as the prompt.
func (s Shape) Seqs() []runner.SeqSpec {
	lens := s.ContextLens()
	out := make([]runner.SeqSpec, len(lens))
	for i, n := range lens {
		out[i] = runner.SeqSpec{Prompt: n}
		if s.KVFill == KVFillSynthetic {
			out[i] = runner.SeqSpec{Context: n - 1, Prompt: 1}
		}
	}
	return out
}

// PromptTokens is the prefill's token count: the prompts of Seqs.
func (s Shape) PromptTokens() int {
	n := 0
	for _, q := range s.Seqs() {
		n += q.Prompt
	}
	return n
}

// KVTokens is the tokens in the batch's caches after the prefill: the sum
// of the context lengths.
func (s Shape) KVTokens() int {
	n := 0
	for _, l := range s.ContextLens() {
		n += l
	}
	return n
}

// RaggedShape is the shape of batch sequences of the given lengths that
// generate outputLen tokens, with the context fill kvFill ("" is the
// prefill): InputLen is their mean length, rounded.
func RaggedShape(lens []int, outputLen int, kvFill string) Shape {
	total := 0
	for _, n := range lens {
		total += n
	}
	sh := Shape{Batch: len(lens), InputLen: int(math.Round(float64(total) / float64(max(len(lens), 1)))), OutputLen: outputLen}
	uniform := true
	for _, n := range lens {
		uniform = uniform && n == lens[0]
	}
	if !uniform {
		sh.Lens = joinInts(lens)
	}
	if kvFill == KVFillSynthetic {
		sh.KVFill = kvFill
	}
	return sh
}
