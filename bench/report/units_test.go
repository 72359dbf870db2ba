package report

import "testing"

func TestSI(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		unit string
		want string
	}{
		{9.33e9, "FLOP/s", "9.33 GFLOP/s"},
		{3.35e12, "B/s", "3.35 TB/s"},
		{989.4e12, "FLOP/s", "989 TFLOP/s"},
		{999.7e9, "FLOP/s", "1 TFLOP/s"},
		{12.5, "FLOP/byte", "12.5 FLOP/byte"},
		{0.0042, "FLOP/byte", "0.0042 FLOP/byte"},
		{0, "B/s", "0 B/s"},
	} {
		if got := SI(tc.x, tc.unit); got != tc.want {
			t.Errorf("SI(%g, %q) = %q, want %q", tc.x, tc.unit, got, tc.want)
		}
	}
}
