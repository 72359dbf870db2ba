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
// or one rank of TPSize tensor-parallel ranks.
type Costs struct{ TPSize int }

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

// ComputeFloorsTP is ComputeFloors for one GPU of tpSize tensor-parallel
// ranks (0: the whole model on one GPU): its share of the work, and its
// all-reduce traffic at roof's link bandwidth (Roof.FloorComm).
func ComputeFloorsTP(cfg runner.Config, tpSize int, roof Roof, batch, inputLen, outputLen int) (StepFloors, error) {
	var sf StepFloors
	var err error
	costs := Costs{TPSize: tpSize}
	if sf.Prefill, err = costs.Prefill(cfg, batch, inputLen); err != nil {
		return sf, err
	}
	sf.PrefillFloor = roof.FloorWork(sf.Prefill.FLOPs, sf.Prefill.FP8FLOPs, sf.Prefill.Bytes, sf.Prefill.CommBytes)
	sf.IterationSeconds = sf.PrefillFloor.Seconds
	// Decode costs are affine in the position; cost two points and
	// interpolate the rest exactly rather than run the model per step.
	steps := outputLen - 1
	if steps > 0 {
		first, err := costs.Decode(cfg, batch, inputLen)
		if err != nil {
			return sf, err
		}
		last := first
		if steps > 1 {
			if last, err = costs.Decode(cfg, batch, inputLen+steps-1); err != nil {
				return sf, err
			}
		}
		for i := 0; i < steps; i++ {
			c := first
			if i > 0 {
				t := float64(i) / float64(steps-1)
				c.StartPos = inputLen + i
				c.FLOPs = first.FLOPs + t*(last.FLOPs-first.FLOPs)
				c.FP8FLOPs = first.FP8FLOPs + t*(last.FP8FLOPs-first.FP8FLOPs)
				c.Bytes = first.Bytes + t*(last.Bytes-first.Bytes)
				c.CommBytes = first.CommBytes + t*(last.CommBytes-first.CommBytes)
				c.Ops = nil
				if i == steps-1 {
					c = last
				}
			}
			f := roof.FloorWork(c.FLOPs, c.FP8FLOPs, c.Bytes, c.CommBytes)
			sf.Decode = append(sf.Decode, c)
			sf.DecodeFloors = append(sf.DecodeFloors, f)
			sf.IterationSeconds += f.Seconds
		}
	}
	if math.IsNaN(sf.IterationSeconds) {
		return sf, fmt.Errorf("floors: not a number for batch %d input %d output %d", batch, inputLen, outputLen)
	}
	return sf, nil
}
