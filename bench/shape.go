package bench

import "fmt"

// Shape is one point of a sweep: Batch sequences of InputLen prompt tokens
// that generate OutputLen tokens each (the prefill's first included). It is
// the one key every package files a shape's results, telemetry and reports
// under.
//
// A ragged batch (run --context-lens) has Lens, each sequence's length
// joined by commas, and InputLen their mean, rounded; KVFill is
// KVFillSynthetic when every position but each sequence's last is a
// deterministic fill rather than computed by the prefill (run --kv-fill).
type Shape struct {
	Batch     int    `json:"batch_size"`
	InputLen  int    `json:"input_len"`
	OutputLen int    `json:"output_len"`
	Lens      string `json:"context_lens,omitempty"`
	KVFill    string `json:"kv_fill,omitempty"`
}

// String is the shape as stepbench prints it: "batch_size=1 input_len=64
// output_len=16", a ragged batch's lengths after it.
func (s Shape) String() string {
	return fmt.Sprintf("batch_size=%d input_len=%d output_len=%d", s.Batch, s.InputLen, s.OutputLen) + s.raggedSuffix(" context_lens=", " kv_fill=")
}

// Label is the shape in a table's notes: "b1 i64 o16".
func (s Shape) Label() string {
	return fmt.Sprintf("b%d i%d o%d", s.Batch, s.InputLen, s.OutputLen) + s.raggedSuffix(" lens ", " ")
}

// raggedSuffix names a ragged shape's lengths (the first and last four of
// a long list, with the total) and its fill.
func (s Shape) raggedSuffix(lensKey, fillKey string) string {
	out := ""
	if s.Lens != "" {
		lens := s.ContextLens()
		if len(lens) > 8 {
			out = lensKey + joinInts(lens[:4]) + ",…," + joinInts(lens[len(lens)-4:]) + fmt.Sprintf(" (%d tokens)", s.KVTokens())
		} else {
			out = lensKey + s.Lens
		}
	}
	if s.KVFill != "" {
		out += fillKey + s.KVFill
	}
	return out
}
