package runner

import (
	"fmt"

	"stepbench/kernels/ref"
)

// EndToEnd is one prompt run greedily on a backend and on the cpu reference.
type EndToEnd struct {
	PromptLen, OutputLen int
	// MaxLogitsRelErr is the largest ‖logits−ref‖/‖ref‖ over the steps.
	MaxLogitsRelErr   float64
	Tokens, RefTokens []int32 // greedy tokens, prefill's first
}

// TokensMatch reports whether both backends chose the same tokens.
func (r EndToEnd) TokensMatch() bool {
	if len(r.Tokens) != len(r.RefTokens) {
		return false
	}
	for i := range r.Tokens {
		if r.Tokens[i] != r.RefTokens[i] {
			return false
		}
	}
	return true
}

// CompareWithCPU runs each prompt (batch 1) for outputLen tokens on be and on
// the cpu backend with the same dummy weights (seed), comparing every step's
// logits and greedy tokens. The engines are made and closed here.
func CompareWithCPU(be Backend, cfg Config, seed uint64, prompts [][]int32, outputLen int) ([]EndToEnd, error) {
	src := WeightSource{Seed: seed}
	eng, err := NewEngine(cfg, be, src, nil)
	if err != nil {
		return nil, fmt.Errorf("compare: %s engine: %w", be.Name(), err)
	}
	defer eng.Close()
	cpu, err := NewEngine(cfg, NewCPU(), src, nil)
	if err != nil {
		return nil, fmt.Errorf("compare: cpu engine: %w", err)
	}
	defer cpu.Close()
	var out []EndToEnd
	for _, p := range prompts {
		r := EndToEnd{PromptLen: len(p), OutputLen: outputLen}
		for _, e := range []*Engine{eng, cpu} {
			if err := e.Begin(1, len(p), outputLen, p); err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			if err := e.Prefill(); err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
		}
		for step := 0; step < outputLen; step++ {
			if step > 0 {
				if err := eng.Decode(); err != nil {
					return out, fmt.Errorf("compare: %w", err)
				}
				if err := cpu.Decode(); err != nil {
					return out, fmt.Errorf("compare: %w", err)
				}
			}
			got, err := eng.Logits()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			want, err := cpu.Logits()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			rel, err := ref.RelErr(got[0], want[0])
			if err != nil {
				return out, fmt.Errorf("compare: prompt %d step %d logits: %w", len(out), step, err)
			}
			r.MaxLogitsRelErr = max(r.MaxLogitsRelErr, rel)
			tok, err := eng.NextTokens()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			refTok, err := cpu.NextTokens()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			r.Tokens, r.RefTokens = append(r.Tokens, tok[0]), append(r.RefTokens, refTok[0])
		}
		out = append(out, r)
	}
	return out, nil
}
