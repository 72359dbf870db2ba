// Package breakdown measures where a step's time goes, op by op: one
// untimed-in-results, eager pass of a shape with an event at every op
// boundary (Engine.OnOp fires before each backend op).
//
// Its numbers mean: an op's time is the device time from its boundary event
// to the next (or to the step's end), so a launch gap counts in the op
// before it; what lies outside every op (input copy, host work before the
// first launch) is the step's outside-ops time. Per step means over the
// pass's decode steps. GB/s and TFLOP/s are the cost model's minimal work
// over that time, attainment its roofline floor over that time (derived).
package breakdown
