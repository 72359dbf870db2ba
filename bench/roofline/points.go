package roofline

import (
	"fmt"
	"sort"

	"stepbench/runner"
)

// Point is one measured step or op placed on a roofline.
type Point struct {
	Label     string `json:"label"`          // e.g. "decode b=8"
	Phase     string `json:"phase"`          // "prefill" or "decode"
	Op        string `json:"op,omitempty"`   // set for per-op points
	Batch     int    `json:"batch_size"`     //
	InputLen  int    `json:"input_len"`      //
	OutputLen int    `json:"output_len"`     //
	Position  int    `json:"position"`       // KV length the cost was computed at
	Roof      string `json:"roof,omitempty"` // the roof's Source
	// The cost model's work and the measured (median device) time.
	FLOPs   float64 `json:"flops"`
	Bytes   float64 `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// Derived: FLOPs/Bytes, FLOPs/Seconds, Bytes/Seconds.
	IntensityFLOPsPerByte float64 `json:"intensity_flops_per_byte"`
	AchievedFLOPsPerSec   float64 `json:"achieved_flops_per_second"`
	AchievedBytesPerSec   float64 `json:"achieved_bytes_per_second"`
	AttainableFLOPsPerSec float64 `json:"attainable_flops_per_second,omitempty"` // min(peak, I × bandwidth)
	FloorSeconds          float64 `json:"floor_seconds,omitempty"`               // max(FLOPs/peak, Bytes/bandwidth)
	AttainmentFraction    float64 `json:"attainment_fraction,omitempty"`         // floor / measured
	Bound                 string  `json:"bound,omitempty"`                       // "compute" or "memory": the roof that binds
}

// NewPoint places work (flops, bytes) done in seconds under roof
// (nil: no roof, only the achieved rates). The attainment is
// achieved / attainable FLOP/s, computed as floor / measured time so that
// ops without FLOPs (copies) get one too; the two are equal otherwise.
func NewPoint(roof *Roof, flops, bytes, seconds float64) Point {
	p := Point{FLOPs: flops, Bytes: bytes, Seconds: seconds}
	if bytes > 0 {
		p.IntensityFLOPsPerByte = flops / bytes
	}
	if seconds > 0 {
		p.AchievedFLOPsPerSec = flops / seconds
		p.AchievedBytesPerSec = bytes / seconds
	}
	if roof == nil || !(roof.PeakFLOPsPerSec > 0) || !(roof.PeakBytesPerSec > 0) {
		return p
	}
	p.Roof = roof.Source
	p.AttainableFLOPsPerSec = roof.AttainableFLOPsPerSec(p.IntensityFLOPsPerByte)
	f := roof.Floor(flops, bytes)
	p.FloorSeconds, p.Bound = f.Seconds, f.Bound
	if seconds > 0 {
		p.AttainmentFraction = f.Seconds / seconds
	}
	return p
}

// StepPoints places one shape's prefill (prefillSeconds per step) and its
// decode steps (decodeSeconds per step, costed at the median step's
// position, input_len + (output_len−2)/2) under roof; a phase with no time
// (0) or no steps is left out.
func StepPoints(cfg runner.Config, roof *Roof, batch, inputLen, outputLen int, prefillSeconds, decodeSeconds float64) ([]Point, error) {
	var points []Point
	if prefillSeconds > 0 {
		c, err := runner.PrefillCost(cfg, batch, inputLen)
		if err != nil {
			return nil, fmt.Errorf("roofline point: %w", err)
		}
		p := NewPoint(roof, c.FLOPs, c.Bytes, prefillSeconds)
		p.Label, p.Phase, p.Batch, p.InputLen, p.OutputLen = fmt.Sprintf("prefill b=%d", batch), runner.PhasePrefill, batch, inputLen, outputLen
		points = append(points, p)
	}
	if decodeSeconds > 0 && outputLen > 1 {
		position := inputLen + (outputLen-2)/2
		c, err := runner.DecodeCost(cfg, batch, position)
		if err != nil {
			return nil, fmt.Errorf("roofline point: %w", err)
		}
		p := NewPoint(roof, c.FLOPs, c.Bytes, decodeSeconds)
		p.Label, p.Phase, p.Batch, p.InputLen, p.OutputLen, p.Position = fmt.Sprintf("decode b=%d", batch), runner.PhaseDecode, batch, inputLen, outputLen, position
		points = append(points, p)
	}
	return points, nil
}

// OpPoints places every op of a step that has a measured time
// (seconds per step, summed over the op's calls) under roof, sorted by op.
func OpPoints(roof *Roof, step runner.StepCost, opSeconds map[string]float64) []Point {
	var points []Point
	for _, op := range step.Ops {
		seconds, ok := opSeconds[op.Op]
		if !ok || !(seconds > 0) {
			continue
		}
		p := NewPoint(roof, op.FLOPs, op.Bytes, seconds)
		p.Label = fmt.Sprintf("%s %s b=%d", step.Phase, op.Op, step.Batch)
		p.Phase, p.Op, p.Batch, p.Position = step.Phase, op.Op, step.Batch, step.StartPos
		points = append(points, p)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].Op < points[j].Op })
	return points
}
