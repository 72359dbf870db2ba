package telemetry

import (
	"slices"
	"strings"
	"testing"

	"stepbench/bench"
)

func TestThrottledByNvbenchsRule(t *testing.T) {
	for _, c := range []struct {
		name      string
		r         Reading
		throttled bool
	}{
		{"full clock", Reading{SMClockMHz: 1980}, false},
		{"idle reason only", Reading{SMClockMHz: 1980, ClockEventReasons: ReasonGPUIdle}, false},
		{"75% exactly", Reading{SMClockMHz: 1485}, false},
		{"below 75%", Reading{SMClockMHz: 1484}, true},
		{"power cap", Reading{SMClockMHz: 1980, ClockEventReasons: ReasonSWPowerCap}, true},
		{"hw power brake", Reading{SMClockMHz: 1980, ClockEventReasons: ReasonHWPowerBrakeSlowdown}, true},
		{"locked clocks", Reading{SMClockMHz: 1755, ClockEventReasons: ReasonApplicationsClocksSetting}, false},
	} {
		if got := Throttled(c.r, 1980); got != c.throttled {
			t.Errorf("%s: throttled %v, want %v", c.name, got, c.throttled)
		}
	}
	if names := ReasonNames(ReasonSWPowerCap | ReasonHWThermalSlowdown | 1<<20); !slices.Equal(names, []string{"sw_power_cap", "hw_thermal_slowdown", "0x100000"}) {
		t.Errorf("reason names %v", names)
	}
}

func TestClocks(t *testing.T) {
	varying := []Reading{{SMClockMHz: 1980, HasReasons: true}, {SMClockMHz: 1700, HasReasons: true}, {SMClockMHz: 1800}}
	if locked, known := LockedByReasons(varying); locked || !known {
		t.Errorf("locked %v known %v, want false true", locked, known)
	}
	if w := ClockVariationWarning(varying, false); !strings.Contains(w, "from 1700 to 1980 MHz (median 1800)") {
		t.Errorf("warning %q", w)
	}
	if ClockVariationWarning(varying, true) != "" || ClockVariationWarning([]Reading{{SMClockMHz: 1980}, {SMClockMHz: 1975}}, false) != "" {
		t.Error("a warning for locked or steady clocks")
	}
	if MedianSMClockMHz(varying) != 1800 || MedianSMClockMHz(nil) != 0 {
		t.Error("median SM clock")
	}
	if locked, _ := LockedByReasons([]Reading{{HasReasons: true, ClockEventReasons: ReasonApplicationsClocksSetting}}); !locked {
		t.Error("the applications-clocks reason is not taken as locked")
	}
}

// counter reads 1, 2, 3... MHz.
type counter struct{ n int }

func (c *counter) Read() Reading {
	c.n++
	return Reading{UnixNanos: int64(c.n), SMClockMHz: float64(c.n)}
}

func TestRecorderFilesReadingsUnderRegions(t *testing.T) {
	rec := NewRecorder(&counter{}, nil)
	shape := bench.Shape{Batch: 2, InputLen: 8, OutputLen: 3}
	rec.BeforeShape(shape)
	rec.AfterRegion(bench.Sample{Phase: bench.PhasePrefill, Warmup: true})
	rec.AfterRegion(bench.Sample{Phase: bench.PhasePrefill})
	rec.AfterRegion(bench.Sample{Phase: bench.PhaseDecode, Step: 1})
	if r, ok := rec.Region(shape, bench.PhaseDecode, 0, 1); !ok || r.SMClockMHz != 3 {
		t.Errorf("decode step 1: %+v %v, want the third reading", r, ok)
	}
	if r, ok := rec.Region(shape, bench.PhasePrefill, 0, 0); !ok || r.SMClockMHz != 2 {
		t.Errorf("prefill: %+v %v, want the timed region's reading, not the warmup's", r, ok)
	}
	if between, sampled := rec.Readings(); len(between) != 3 || len(sampled) != 0 {
		t.Errorf("%d between-region readings and %d sampled, want 3 and 0", len(between), len(sampled))
	}
}
