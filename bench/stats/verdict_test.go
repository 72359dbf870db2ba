package stats

import (
	"math"
	"testing"
)

// The rule never gives a verdict its interval contradicts: SAME only
// inside the band on a quiet host, FASTER or SLOWER only beyond the
// threshold widened by the load.
func TestDecide(t *testing.T) {
	floor := Rule{Alpha: 0.05, Threshold: 0.3}
	busy := Rule{Alpha: 0.05, Threshold: 0.3, Load: 1.5, Busy: true}
	lightLoad := Rule{Alpha: 0.05, Threshold: 0.3, Load: 0.08}
	for _, tc := range []struct {
		name      string
		p, lo, hi float64
		rule      Rule
		want      string
	}{
		// The cases of issue 30, made on a busy 2-core host.
		{"1.34x slower, busy host", 0.023, 1.0478, 1.6810, busy, VerdictInconclusive},
		{"1.10x slower, busy host", 0.017, 1.0180, 1.1886, busy, VerdictInconclusive},
		{"1.75x apart, busy host", 1e-7, 1.70, 1.80, busy, VerdictInconclusive},
		{"3.5x slower, busy host: beyond what the load explains", 1e-7, 3.4, 3.6, busy, VerdictSlower},
		{"3x slower, busy host: within what the load explains", 1e-7, 2.9, 3.1, busy, VerdictInconclusive},
		{"3.5x faster, busy host: beyond what the load explains", 1e-7, 0.26, 0.27, busy, VerdictFaster},
		{"2.5x faster, busy host: within what the load explains", 1e-7, 0.38, 0.42, busy, VerdictInconclusive},
		{"within the floor, busy host", 0.6, 0.95, 1.05, busy, VerdictInconclusive},
		// A quiet host.
		{"within the floor", 0.6, 0.95, 1.05, floor, VerdictSame},
		{"significant, within the floor", 0.017, 1.0180, 1.1886, floor, VerdictSame},
		{"straddles the floor", 0.023, 1.0478, 1.6810, floor, VerdictInconclusive},
		{"beyond the floor", 1e-4, 1.35, 1.5, floor, VerdictSlower},
		{"beyond the floor, not beyond it and the light load", 1e-4, 1.35, 1.5, lightLoad, VerdictInconclusive},
		{"beyond the floor and the light load", 1e-4, 1.42, 1.5, lightLoad, VerdictSlower},
		{"below the floor", 1e-4, 0.5, 0.65, floor, VerdictFaster},
		{"beyond the floor, p too high", 0.2, 1.35, 1.5, floor, VerdictInconclusive},
		// No threshold (ab): any significant change, SAME within ±1%.
		{"ab: 0.5% slower, significant", 0.001, 1.002, 1.008, Rule{Alpha: 0.05}, VerdictSlower},
		{"ab: within 1%", 0.4, 0.995, 1.005, Rule{Alpha: 0.05}, VerdictSame},
		{"ab: no interval", 0.4, math.NaN(), math.NaN(), Rule{Alpha: 0.05}, VerdictInconclusive},
	} {
		if got := Decide(tc.p, tc.lo, tc.hi, tc.rule); got != tc.want {
			t.Errorf("%s: p %g [%g, %g] %+v: %s, want %s", tc.name, tc.p, tc.lo, tc.hi, tc.rule, got, tc.want)
		}
	}
}

func TestSamplesNeededOnABusyHostIsNone(t *testing.T) {
	if n := SamplesNeeded(10, 4, 1.3, 1.05, 1.68, 0.2, Rule{Alpha: 0.05, Threshold: 0.3, Load: 1.5, Busy: true}); n != 0 {
		t.Errorf("busy host: %d iterations said to give a verdict", n)
	}
	if n := SamplesNeeded(10, 4, 1.6, 1.05, 1.95, 0.2, Rule{Alpha: 0.05, Threshold: 0.3}); n <= 10 {
		t.Errorf("quiet host: %d iterations", n)
	}
}

func TestPercentText(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want string
	}{
		{0.3, "30%"}, {0.03, "3%"}, {0.025, "2.5%"}, {1.9482558139534885, "190%"}, {2.2999999999999994, "230%"},
		{0.01, "1%"}, {0.005, "0.5%"}, {0.0012345, "0.12%"}, {0, "0%"}, {0.999, "100%"}, {0.304, "30%"}, {0.356, "36%"},
	} {
		if got := PercentText(tc.x); got != tc.want {
			t.Errorf("PercentText(%g) = %q, want %q", tc.x, got, tc.want)
		}
	}
}
