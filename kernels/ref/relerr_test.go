package ref

import (
	"math"
	"strings"
	"testing"
)

func TestRelErr(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name      string
		got, want []float32
		rel       float64
		err       string
	}{
		{"equal", []float32{1, 2, 3}, []float32{1, 2, 3}, 0, ""},
		{"3-4-5", []float32{3, 4}, []float32{0, 0}, 5, ""}, // zero reference: the absolute norm
		{"ten percent", []float32{1.1, 0}, []float32{1, 0}, 0.1, ""},
		{"empty", nil, nil, 0, ""},
		{"NaN out", []float32{1, nan}, []float32{1, 2}, 0, "element 1 is NaN"},
		{"Inf out", []float32{inf}, []float32{1}, 0, "element 0 is +Inf"},
		{"NaN reference", []float32{1}, []float32{nan}, 0, "reference element 0"},
		{"lengths", []float32{1}, []float32{1, 2}, 0, "1 elements, want 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := RelErr(tc.got, tc.want)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("RelErr = %v, %v; want an error with %q", rel, err, tc.err)
				}
				return
			}
			if err != nil || math.Abs(rel-tc.rel) > 1e-6 {
				t.Fatalf("RelErr = %v, %v; want %v", rel, err, tc.rel)
			}
		})
	}
}

func TestRelErrBF16AndRows(t *testing.T) {
	got, want := []uint16{F32ToBF16(2), F32ToBF16(0)}, []uint16{F32ToBF16(1), F32ToBF16(0)}
	if rel, err := RelErrBF16(got, want); err != nil || rel != 1 {
		t.Errorf("RelErrBF16 = %v, %v; want 1", rel, err)
	}
	if _, err := RelErrBF16([]uint16{0xFFFF}, []uint16{0}); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("a NaN bf16 output: %v, want an error naming NaN", err)
	}
	rows := [][]float32{{3}, {4}}
	if rel, err := RelErrRows(rows, [][]float32{{0}, {0}}); err != nil || rel != 5 {
		t.Errorf("RelErrRows = %v, %v; want 5", rel, err)
	}
	if _, err := RelErrRows(rows, [][]float32{{0, 1}, {0}}); err == nil {
		t.Error("rows of different lengths: no error")
	}
}
