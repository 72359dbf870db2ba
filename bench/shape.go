package bench

import "fmt"

// Shape is one point of a sweep: Batch sequences of InputLen prompt tokens
// that generate OutputLen tokens each (the prefill's first included). It is
// the one key every package files a shape's results, telemetry and reports
// under.
type Shape struct {
	Batch     int `json:"batch_size"`
	InputLen  int `json:"input_len"`
	OutputLen int `json:"output_len"`
}

// String is the shape as stepbench prints it: "batch_size=1 input_len=64 output_len=16".
func (s Shape) String() string {
	return fmt.Sprintf("batch_size=%d input_len=%d output_len=%d", s.Batch, s.InputLen, s.OutputLen)
}

// Label is the shape in a table's notes: "b1 i64 o16".
func (s Shape) Label() string { return fmt.Sprintf("b%d i%d o%d", s.Batch, s.InputLen, s.OutputLen) }
