package report

import (
	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/bench/stats"
	"stepbench/runner"
)

// StepSeconds is the median device time when there is one, else the median
// host time (the cpu backend's events may measure nothing).
func StepSeconds(device, host stats.Summary) float64 {
	if device.N > 0 && device.Median > 0 {
		return device.Median
	}
	if host.N > 0 {
		return host.Median
	}
	return 0
}

// ShapeRooflinePoints places a shape's prefill (median time) and its decode
// steps (median time, costed at the median step's position) under roof.
func ShapeRooflinePoints(cfg runner.Config, roof *roofline.Roof, s bench.ShapeResult) ([]roofline.Point, error) {
	sum := s.Summary
	return roofline.StepPoints(cfg, roof, s.Batch, s.InputLen, s.OutputLen,
		StepSeconds(sum.PrefillDeviceSeconds, sum.PrefillHostSeconds), StepSeconds(sum.DecodeDeviceSeconds, sum.DecodeHostSeconds))
}
