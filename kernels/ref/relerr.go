package ref

import (
	"fmt"
	"math"
)

// RelErr is the relative error of got against the reference want:
// ‖got−want‖₂ / ‖want‖₂ in float64 (‖got−want‖₂ when want is all zeros).
// It is the one measure every comparison with a reference uses: a kernel
// against its twin (bf16 outputs pass at most 1e-2), a backend's logits
// against the cpu backend's, the two arms of an A/B run. A NaN or an
// infinity in either slice, or slices of different lengths, is an error
// naming the first such element: no tolerance can judge them.
func RelErr(got, want []float32) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	var diff, norm float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return 0, fmt.Errorf("element %d is %v, want %g", i, g, w)
		}
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return 0, fmt.Errorf("reference element %d is %v", i, w)
		}
		diff += (g - w) * (g - w)
		norm += w * w
	}
	if norm == 0 {
		return math.Sqrt(diff), nil
	}
	return math.Sqrt(diff / norm), nil
}

// RelErrBF16 is RelErr of two bf16 tensors (raw bit patterns), widened
// exactly to float32.
func RelErrBF16(got, want []uint16) (float64, error) {
	g, w := make([]float32, len(got)), make([]float32, len(want))
	ToF32(g, got)
	ToF32(w, want)
	return RelErr(g, w)
}

// RelErrRows is RelErr over rows (e.g. [batch][vocab] logits) taken as one
// tensor; the rows must have the same lengths in both.
func RelErrRows(got, want [][]float32) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	var g, w []float32
	for i := range want {
		if len(got[i]) != len(want[i]) {
			return 0, fmt.Errorf("row %d has %d elements, want %d", i, len(got[i]), len(want[i]))
		}
		g, w = append(g, got[i]...), append(w, want[i]...)
	}
	return RelErr(g, w)
}
