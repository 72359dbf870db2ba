package bench

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"stepbench/runner"
)

// virtualDevice is a device clock shared by both arms of an A/B test
// double. Its speed drifts: every step takes (1 + drift·steps so far) times
// longer, as a GPU that warms up and throttles would, which interleaving must
// cancel.
type virtualDevice struct {
	now   time.Duration
	steps int
	drift float64
	rng   *rand.Rand
	log   []string // arm of every Begin, in order
}

type virtualEvent struct {
	device *virtualDevice
	at     time.Duration
}

func (e *virtualEvent) Record() error { e.at = e.device.now; return nil }

// noisyKernel is a KernelTarget test double: a virtual device whose launch
// takes base × (1 + jitter(i)) with a deterministic jitter pattern.
type noisyKernel struct {
	device   *virtualDevice
	base     time.Duration
	jitter   float64
	launches int
	flushes  int
}

func (k *noisyKernel) FlushL2() error { k.flushes++; return nil }
func (k *noisyKernel) Launch() error {
	k.launches++
	k.device.now += time.Duration(float64(k.base) * (1 + k.jitter*math.Sin(float64(k.launches))))
	return nil
}
func (k *noisyKernel) Sync() error                     { return nil }
func (k *noisyKernel) NewEvent() (runner.Event, error) { return &virtualEvent{device: k.device}, nil }
func (k *noisyKernel) Elapsed(start, end runner.Event) (time.Duration, error) {
	return end.(*virtualEvent).at - start.(*virtualEvent).at, nil
}

func TestMeasureKernelStops(t *testing.T) {
	frozen := time.Unix(0, 0)
	for _, tc := range []struct {
		name       string
		jitter     float64
		opt        KernelOptions
		wantReason string
	}{
		{"quiet kernel stops on noise", 0.001, KernelOptions{MinSamples: 10, MaxSamples: 10000, MaxNoise: 0.005, Timeout: time.Hour}, "noise"},
		{"noisy kernel hits max samples", 0.5, KernelOptions{MinSamples: 10, MaxSamples: 50, MaxNoise: 1e-6, Timeout: time.Hour}, "max-samples"},
		{"timeout", 0.5, KernelOptions{MinSamples: 10, MaxSamples: 1000, MaxNoise: 1e-6, Timeout: time.Nanosecond}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &noisyKernel{device: &virtualDevice{}, base: 10 * time.Microsecond, jitter: tc.jitter}
			if tc.wantReason != "timeout" {
				tc.opt.now = func() time.Time { return frozen }
			}
			tc.opt.WarmupLaunches = 3
			res, err := MeasureKernel(k, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if res.StopReason != tc.wantReason {
				t.Errorf("stopped on %q after %d samples, want %q", res.StopReason, len(res.DeviceSeconds), tc.wantReason)
			}
			if k.flushes != len(res.DeviceSeconds) || k.launches != len(res.DeviceSeconds)+3 {
				t.Errorf("%d flushes and %d launches for %d samples", k.flushes, k.launches, len(res.DeviceSeconds))
			}
			if tc.wantReason == "noise" && (res.Noise > 0.005 || len(res.DeviceSeconds) < 10) {
				t.Errorf("noise %g with %d samples", res.Noise, len(res.DeviceSeconds))
			}
			if math.Abs(res.Summary.Median-10e-6) > 10e-6*tc.jitter+1e-9 {
				t.Errorf("median %g, want about 10 µs", res.Summary.Median)
			}
		})
	}
	if _, err := MeasureKernel(&noisyKernel{device: &virtualDevice{}}, KernelOptions{MinSamples: 1}); err == nil {
		t.Error("bad options accepted")
	}
}

func TestOpKernelsRunOnCPU(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	be := runner.NewCPU()
	for _, op := range KernelOps() {
		for _, shape := range []KernelShape{{Batch: 2, SeqLen: 1, StartPos: 8}, {Batch: 1, SeqLen: 8}} {
			k, cost, err := NewOpKernel(be, cfg, op, shape, 4096)
			if err != nil {
				t.Fatalf("%s %s: %v", op, shape.Label(), err)
			}
			res, err := MeasureKernel(k, KernelOptions{MinSamples: 3, MaxSamples: 5, MaxNoise: 1, Timeout: time.Minute})
			if err != nil {
				t.Fatalf("%s %s: %v", op, shape.Label(), err)
			}
			if len(res.DeviceSeconds) < 3 || cost.Bytes <= 0 {
				t.Errorf("%s %s: %d samples, cost %+v", op, shape.Label(), len(res.DeviceSeconds), cost)
			}
			if err := k.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	if _, _, err := NewOpKernel(be, cfg, "no_such_op", KernelShape{Batch: 1, SeqLen: 1}, 0); err == nil {
		t.Error("unknown op accepted")
	}
}

func TestParseKernelShape(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    KernelShape
		wantErr bool
	}{
		{"batch=4,seq=1,pos=1024", KernelShape{4, 1, 1024}, false},
		{"seq=512", KernelShape{1, 512, 0}, false},
		{"batch=0", KernelShape{}, true},
		{"batch=1,batch=2", KernelShape{}, true},
		{"tokens=3", KernelShape{}, true},
		{"batch", KernelShape{}, true},
		{"", KernelShape{}, true},
		{"pos=-1", KernelShape{}, true},
	} {
		got, err := ParseKernelShape(tc.in)
		if (err != nil) != tc.wantErr || !tc.wantErr && got != tc.want {
			t.Errorf("ParseKernelShape(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseKernelShape(f *testing.F) {
	for _, seed := range []string{"batch=4,seq=1,pos=1024", "seq=512", "", "a=b=c", "batch=99999999999"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseKernelShape(in)
		if err == nil && (s.Batch < 1 || s.SeqLen < 1 || s.StartPos < 0) {
			t.Fatalf("accepted %q as %+v", in, s)
		}
	})
}
