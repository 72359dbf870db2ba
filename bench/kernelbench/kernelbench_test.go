package kernelbench

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"stepbench/bench/benchtest"
	"stepbench/runner"
)

// noisyKernel is a Target test double: a virtual device whose launch
// takes base × (1 + jitter(i)) with a deterministic jitter pattern.
type noisyKernel struct {
	device   *benchtest.Device
	base     time.Duration
	jitter   float64
	launches int
	flushes  int
}

func (k *noisyKernel) FlushL2() error { k.flushes++; return nil }
func (k *noisyKernel) Launch() error {
	k.launches++
	k.device.Now += time.Duration(float64(k.base) * (1 + k.jitter*math.Sin(float64(k.launches))))
	return nil
}
func (k *noisyKernel) Sync() error                     { return nil }
func (k *noisyKernel) NewEvent() (runner.Event, error) { return k.device.NewEvent() }
func (k *noisyKernel) Elapsed(start, end runner.Event) (time.Duration, error) {
	return k.device.Elapsed(start, end)
}

func TestMeasureKernelStops(t *testing.T) {
	frozen := time.Unix(0, 0)
	for _, tc := range []struct {
		name       string
		jitter     float64
		opt        Options
		wantReason string
	}{
		{"quiet kernel stops on noise", 0.001, Options{MinSamples: 10, MaxSamples: 10000, MaxNoise: 0.005, Timeout: time.Hour}, "noise"},
		{"noisy kernel hits max samples", 0.5, Options{MinSamples: 10, MaxSamples: 50, MaxNoise: 1e-6, Timeout: time.Hour}, "max-samples"},
		{"timeout", 0.5, Options{MinSamples: 10, MaxSamples: 1000, MaxNoise: 1e-6, Timeout: time.Nanosecond}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &noisyKernel{device: &benchtest.Device{}, base: 10 * time.Microsecond, jitter: tc.jitter}
			if tc.wantReason != "timeout" {
				tc.opt.Now = func() time.Time { return frozen }
			}
			tc.opt.WarmupLaunches = 3
			res, err := Measure(k, tc.opt)
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
	if _, err := Measure(&noisyKernel{device: &benchtest.Device{}}, Options{MinSamples: 1}); err == nil {
		t.Error("bad options accepted")
	}
}

func TestOpKernelsRunOnCPU(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	be := runner.NewCPU()
	for _, op := range Ops() {
		for _, shape := range []Shape{{Batch: 2, SeqLen: 1, StartPos: 8}, {Batch: 1, SeqLen: 8}} {
			k, cost, err := NewOp(be, cfg, op, shape, 4096)
			if err != nil {
				t.Fatalf("%s %s: %v", op, shape.Label(), err)
			}
			res, err := Measure(k, Options{MinSamples: 3, MaxSamples: 5, MaxNoise: 1, Timeout: time.Minute})
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
	if _, _, err := NewOp(be, cfg, "no_such_op", Shape{Batch: 1, SeqLen: 1}, 0); err == nil {
		t.Error("unknown op accepted")
	}
}

func TestParseKernelShape(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Shape
		wantErr bool
	}{
		{"batch=4,seq=1,pos=1024", Shape{Batch: 4, SeqLen: 1, StartPos: 1024}, false},
		{"seq=512", Shape{Batch: 1, SeqLen: 512}, false},
		{"batch=0", Shape{}, true},
		{"batch=1,batch=2", Shape{}, true},
		{"tokens=3", Shape{}, true},
		{"batch", Shape{}, true},
		{"", Shape{}, true},
		{"pos=-1", Shape{}, true},
	} {
		got, err := ParseShape(tc.in)
		if (err != nil) != tc.wantErr || !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseShape(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseShape(f *testing.F) {
	for _, seed := range []string{"batch=4,seq=1,pos=1024", "seq=512", "", "a=b=c", "batch=99999999999", "lens=1;2;3", "seq=3;4,pos=5;6"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseShape(in)
		if err == nil && (s.Batch < 1 || s.SeqLen < 1 || s.StartPos < 0 || s.Seqs != nil && len(s.Seqs) != s.Batch || s.Label() == "") {
			t.Fatalf("accepted %q as %+v", in, s)
		}
	})
}

// Every op's cost per launch is the cost model's cost of one of the calls
// of that op in the model's own step at the same shape, for prefill and
// decode shapes of a tiny and a real model (rope_scaling included).
func TestOpCostIsTheCostModels(t *testing.T) {
	for _, name := range []string{"llama-tiny", "llama-3.1-8b"} {
		cfg, err := runner.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		prefill, err := runner.PrefillCost(cfg, 2, 16)
		if err != nil {
			t.Fatal(err)
		}
		decode, err := runner.DecodeCost(cfg, 2, 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			shape Shape
			cost  runner.StepCost
		}{{Shape{Batch: 2, SeqLen: 16}, prefill}, {Shape{Batch: 2, SeqLen: 1, StartPos: 16}, decode}} {
			for _, op := range Ops() {
				got, err := OpCost(cfg, op, step.shape)
				if err != nil {
					t.Fatal(err)
				}
				calls := step.cost.CallCosts(op)
				if got.Calls != 1 || got.Bytes <= 0 || !slices.Contains(calls, got) {
					t.Errorf("%s %s at %s: cost %+v is none of the step's %d calls (%+v)", name, op, step.shape.Label(), got, len(calls), calls[:min(len(calls), 1)])
				}
			}
		}
	}
}
