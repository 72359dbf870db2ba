package bench

import (
	"errors"
	"slices"
	"testing"
	"time"

	"stepbench/runner"
)

// rankTarget is a fake tensor-parallel target: three ranks, the second the slowest.
type rankTarget struct {
	fakeTarget
	fail bool
}

func (r *rankTarget) RankElapsed(start, end runner.Event) ([]time.Duration, error) {
	if r.fail {
		return nil, errors.New("rank 1: event not recorded")
	}
	return []time.Duration{time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}, nil
}

func TestRankTimerGivesSlowestAndEachRank(t *testing.T) {
	target := &rankTarget{}
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1}, []int{2}, 1, 0
	results, err := Run(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	it := results[0].Iterations[0]
	for _, s := range []Sample{it.Prefill, it.Decode[0]} {
		if s.DeviceSeconds != 0.003 || !slices.Equal(s.RankDeviceSeconds, []float64{0.001, 0.003, 0.002}) {
			t.Errorf("%s: device %v, ranks %v; want the slowest (0.003) and each", s.Phase, s.DeviceSeconds, s.RankDeviceSeconds)
		}
	}
	if _, err := Run(&rankTarget{fail: true}, opt); err == nil {
		t.Error("a rank's failed event time was not an error")
	}
}
