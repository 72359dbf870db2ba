package kernelbench

import (
	"testing"
	"time"

	"stepbench/bench/benchtest"
)

// Two arms on one virtual device, the candidate 20% slower: pairs are taken
// alternately (A B, B A, ...), both arms get every pair, and the paired
// noise stopping rule ends it.
func TestMeasurePairedAlternatesAndStops(t *testing.T) {
	device := &benchtest.Device{}
	a := &noisyKernel{device: device, base: 12 * time.Microsecond, jitter: 0.01}
	b := &noisyKernel{device: device, base: 10 * time.Microsecond, jitter: 0.01}
	frozen := time.Unix(0, 0)
	opt := Options{WarmupLaunches: 2, MinSamples: 10, MaxSamples: 1000, MaxNoise: 0.005, Timeout: time.Hour, Now: func() time.Time { return frozen }}
	ra, rb, err := MeasurePaired(a, b, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.DeviceSeconds) != len(rb.DeviceSeconds) || len(ra.DeviceSeconds) < 10 || ra.StopReason != "noise" || rb.StopReason != "noise" {
		t.Fatalf("%d and %d samples, stopped on %q/%q", len(ra.DeviceSeconds), len(rb.DeviceSeconds), ra.StopReason, rb.StopReason)
	}
	if r := ra.Summary.Median / rb.Summary.Median; r < 1.15 || r > 1.25 {
		t.Errorf("median ratio %.3f, want about 1.2", r)
	}
	if a.launches != len(ra.DeviceSeconds)+2 || b.flushes != len(rb.DeviceSeconds) {
		t.Errorf("launches %d, flushes %d for %d pairs", a.launches, b.flushes, len(ra.DeviceSeconds))
	}
	if _, _, err := MeasurePaired(a, b, Options{MinSamples: 1}); err == nil {
		t.Error("bad options accepted")
	}
}
