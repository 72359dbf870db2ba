package roofline

import (
	"fmt"
	"math"

	"stepbench/bench/stats"
	"stepbench/runner"
)

// StepFloors are the analytic floors of one shape: its prefill, its first
// and last decode steps, and the sum over the whole iteration.
type StepFloors struct {
	Prefill          runner.StepCost   `json:"prefill"`
	PrefillFloor     Floor             `json:"prefill_floor"`
	Decode           []runner.StepCost `json:"decode"` // one per decode step, in order; null without decode steps
	DecodeFloors     []Floor           `json:"decode_floors"`
	IterationSeconds float64           `json:"iteration_floor_seconds"` // prefill floor + every decode step's floor
}

// MedianDecodeFloorSeconds is the median over the decode steps' floors
// (comparable with the median decode latency); 0 without decode steps.
func (s StepFloors) MedianDecodeFloorSeconds() float64 {
	if len(s.DecodeFloors) == 0 {
		return 0
	}
	xs := make([]float64, len(s.DecodeFloors))
	for i, f := range s.DecodeFloors {
		xs[i] = f.Seconds
	}
	return stats.Median(xs)
}

// ComputeFloors costs every step of one shape under roof. Decode steps are costed at
// each of their positions, so long generations see the KV cache grow.
func ComputeFloors(cfg runner.Config, roof Roof, batch, inputLen, outputLen int) (StepFloors, error) {
	return ComputeFloorsTP(cfg, 0, roof, batch, inputLen, outputLen)
}

// Costs is the cost model of one GPU of a run: the whole model (TPSize 0)
// or one rank of TPSize tensor-parallel ranks, its KV cache laid out as KV
// (the zero value: contiguous). The layout changes a step's cost by the
// few bytes a tabled step's views take (runner.DecodeCostAfter); the page
// size and order change nothing (the cost model counts no page-table
// reads).
type Costs struct {
	TPSize int
	KV     runner.KVOptions
}

// Shape is the work of one shape as the engine runs it: the prefill of Seqs
// (each sequence's prompt over its context), then OutputLen−1 decode steps,
// each adding one token to every sequence. InputLen labels it: the prompt
// length of a uniform batch, a ragged one's mean length.
type Shape struct {
	Seqs                []runner.SeqSpec
	InputLen, OutputLen int
}

// UniformShape is batch prompts of inputLen tokens generating outputLen.
func UniformShape(batch, inputLen, outputLen int) Shape {
	seqs := make([]runner.SeqSpec, batch)
	for b := range seqs {
		seqs[b].Prompt = inputLen
	}
	return Shape{Seqs: seqs, InputLen: inputLen, OutputLen: outputLen}
}

// Batch is the shape's sequence count.
func (s Shape) Batch() int { return len(s.Seqs) }

// Ragged reports whether the shape's sequences differ or have a context:
// its steps' costs then carry Tokens and KVTokens.
func (s Shape) Ragged() bool { return len(s.Seqs) > 0 && !runner.Uniform(s.Seqs) }

// Prefill is the prefill's cost on one GPU.
func (c Costs) Prefill(cfg runner.Config, batch, inputLen int) (runner.StepCost, error) {
	if c.TPSize > 0 {
		return runner.PrefillCostTP(cfg, c.TPSize, batch, inputLen)
	}
	return runner.PrefillCost(cfg, batch, inputLen)
}

// Decode is a decode step's cost on one GPU.
func (c Costs) Decode(cfg runner.Config, batch, startPos int) (runner.StepCost, error) {
	if c.TPSize > 0 {
		return runner.DecodeCostTP(cfg, c.TPSize, batch, startPos)
	}
	return runner.DecodeCost(cfg, batch, startPos)
}

// PrefillOf is the cost of s's prefill on one GPU under c's layout.
func (c Costs) PrefillOf(cfg runner.Config, s Shape) (runner.StepCost, error) {
	return runner.PrefillCostSeqs(cfg, c.TPSize, s.Seqs, c.KV)
}

// DecodeOf is the cost of s's decode step `step` (0: the first) on one GPU
// under c's layout: sequence b then holds its context, its prompt and
// step generated tokens.
func (c Costs) DecodeOf(cfg runner.Config, s Shape, step int) (runner.StepCost, error) {
	return runner.DecodeCostAfter(cfg, c.TPSize, s.Seqs, step, c.KV)
}

// ComputeFloorsTP is ComputeFloors for one GPU of tpSize tensor-parallel
// ranks (0: the whole model on one GPU): its share of the work, and its
// all-reduce traffic at roof's link bandwidth (Roof.FloorComm).
func ComputeFloorsTP(cfg runner.Config, tpSize int, roof Roof, batch, inputLen, outputLen int) (StepFloors, error) {
	if batch < 1 || inputLen < 1 {
		return StepFloors{}, fmt.Errorf("%s cost: batch %d and input length %d must be positive", runner.PhasePrefill, batch, inputLen)
	}
	return Costs{TPSize: tpSize}.Floors(cfg, roof, UniformShape(batch, inputLen, outputLen))
}

// Floors costs every step of s under roof: the prefill, and each decode
// step at its own lengths (every sequence's grows by one per step, so the
// KV bytes of the step are the sum of the lengths, not batch × the
// longest).
func (c Costs) Floors(cfg runner.Config, roof Roof, s Shape) (StepFloors, error) {
	var sf StepFloors
	var err error
	if sf.Prefill, err = c.PrefillOf(cfg, s); err != nil {
		return sf, err
	}
	sf.PrefillFloor = roof.FloorWork(sf.Prefill.FLOPs, sf.Prefill.FP8FLOPs, sf.Prefill.Bytes, sf.Prefill.CommBytes)
	sf.IterationSeconds = sf.PrefillFloor.Seconds
	if sf.Decode, err = c.decodeSteps(cfg, s); err != nil {
		return sf, err
	}
	for _, d := range sf.Decode {
		f := roof.FloorWork(d.FLOPs, d.FP8FLOPs, d.Bytes, d.CommBytes)
		sf.DecodeFloors = append(sf.DecodeFloors, f)
		sf.IterationSeconds += f.Seconds
	}
	if math.IsNaN(sf.IterationSeconds) {
		return sf, fmt.Errorf("floors: not a number for batch %d input %d output %d", s.Batch(), s.InputLen, s.OutputLen)
	}
	return sf, nil
}

// decodeSteps costs every decode step of s. A step's costs are affine in
// the step (each sequence's attention reads one more position per step,
// nothing else changes), so the first and last are costed and the rest
// interpolated exactly rather than the model run per step.
func (c Costs) decodeSteps(cfg runner.Config, s Shape) ([]runner.StepCost, error) {
	steps := s.OutputLen - 1
	if steps < 1 {
		return nil, nil
	}
	first, err := c.DecodeOf(cfg, s, 0)
	if err != nil {
		return nil, err
	}
	last := first
	if steps > 1 {
		if last, err = c.DecodeOf(cfg, s, steps-1); err != nil {
			return nil, err
		}
	}
	out := make([]runner.StepCost, steps)
	out[0], out[steps-1] = first, last
	for i := 1; i < steps-1; i++ {
		t := float64(i) / float64(steps-1)
		d := first
		if first.KVTokens > 0 {
			d.KVTokens = first.KVTokens + i*first.Batch
		} else {
			d.StartPos = first.StartPos + i
		}
		d.FLOPs = first.FLOPs + t*(last.FLOPs-first.FLOPs)
		d.FP8FLOPs = first.FP8FLOPs + t*(last.FP8FLOPs-first.FP8FLOPs)
		d.Bytes = first.Bytes + t*(last.Bytes-first.Bytes)
		d.CommBytes = first.CommBytes + t*(last.CommBytes-first.CommBytes)
		d.Ops = nil
		out[i] = d
	}
	return out, nil
}
