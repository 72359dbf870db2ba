package bench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// fakeProfiler logs into its target's call log, so the log shows where the
// window and the ranges fall among the regions' calls.
type fakeProfiler struct {
	target    *fakeTarget
	failStart bool
}

func (p *fakeProfiler) Start() error {
	if p.failStart {
		return errors.New("no profiler")
	}
	p.target.log = append(p.target.log, "profiler:start")
	return nil
}
func (p *fakeProfiler) Stop() error      { p.target.log = append(p.target.log, "profiler:stop"); return nil }
func (p *fakeProfiler) Push(name string) { p.target.log = append(p.target.log, "push:"+name) }
func (p *fakeProfiler) Pop()             { p.target.log = append(p.target.log, "pop") }

// window is what one profile window of a call log holds: the ranges pushed
// inside it, and which Begin (1-based) it followed.
type window struct {
	afterBegin int
	ranges     []string
}

// windows cuts a call log into its profile windows; it fails the test when
// a window is opened or closed inside a range (hence inside a timed region)
// or never closed.
func windows(t *testing.T, log []string) []window {
	t.Helper()
	var out []window
	begins, depth := 0, 0
	var cur *window
	for _, e := range log {
		switch {
		case e == "begin":
			begins++
		case strings.HasPrefix(e, "push:"):
			depth++
			if cur != nil {
				cur.ranges = append(cur.ranges, strings.TrimPrefix(e, "push:"))
			}
		case e == "pop":
			depth--
		case e == "profiler:start" || e == "profiler:stop":
			if depth != 0 {
				t.Errorf("%s inside a range (a timed region): %v", e, log)
			}
			if e == "profiler:start" {
				cur = &window{afterBegin: begins}
			} else if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
		}
	}
	if cur != nil {
		t.Errorf("a profile window was never closed: %v", log)
	}
	return out
}

func TestProfileWindowCoversExactlyTheRequestedSteps(t *testing.T) {
	decodeSteps := func(from, to int) []string {
		var names []string
		for s := from; s <= to; s++ {
			names = append(names, decodeRangeName(s))
		}
		return names
	}
	for _, tc := range []struct {
		name string
		w    ProfileWindow
		want []string // the ranges inside each shape's window
	}{
		{"prefill", ProfileWindow{Phase: ProfilePrefill}, []string{"prefill b=B s=4"}},
		{"decode 1..2", ProfileWindow{Phase: ProfileDecode, StartStep: 1, Steps: 2}, decodeSteps(1, 2)},
		{"decode last", ProfileWindow{Phase: ProfileDecode, StartStep: 3, Steps: 1}, decodeSteps(3, 3)},
		{"both 0..1", ProfileWindow{Phase: ProfileBoth, Steps: 2}, append([]string{"prefill b=B s=4"}, decodeSteps(0, 1)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeTarget{}
			opt := testOptions()
			opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1, 2}, []int{5}, 2, 1
			opt.Profiler, opt.Profile = &fakeProfiler{target: fake}, &tc.w
			if _, err := Run(fake, opt); err != nil {
				t.Fatal(err)
			}
			got := windows(t, fake.log)
			if len(got) != 2 {
				t.Fatalf("%d windows, want one per shape (2): %v", len(got), fake.log)
			}
			for i, w := range got {
				// Shape i's first timed iteration is its Begin number i*3+2
				// (one warmup, two timed iterations per shape).
				if w.afterBegin != i*3+2 {
					t.Errorf("shape %d: window in the iteration of Begin %d, want %d (the first timed one)", i, w.afterBegin, i*3+2)
				}
				want := slices.Clone(tc.want)
				for j := range want {
					want[j] = strings.Replace(want[j], "b=B", "b="+string(rune('1'+i)), 1)
				}
				if !slices.Equal(w.ranges, want) {
					t.Errorf("shape %d: window holds %v, want %v", i, w.ranges, want)
				}
			}
		})
	}
}

// Every timed region, warmups included, gets its range, window or not, and
// each range holds exactly one region: sync, start event, step, end event, sync.
func TestProfilerRangesBracketEveryRegion(t *testing.T) {
	fake := &fakeTarget{}
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1}, []int{3}, 1, 1
	opt.Profiler = &fakeProfiler{target: fake}
	if _, err := Run(fake, opt); err != nil {
		t.Fatal(err)
	}
	region := func(name, step string) []string {
		return []string{"push:" + name, "sync", "record:start", step, "record:end", "sync", "elapsed", "pop"}
	}
	var iteration []string
	iteration = append(iteration, "begin")
	iteration = append(iteration, region("prefill b=1 s=4", "prefill")...)
	iteration = append(iteration, region("decode step 0", "decode")...)
	iteration = append(iteration, region("decode step 1", "decode")...)
	want := append(slices.Clone(iteration), iteration...) // warmup, then the timed iteration
	if !slices.Equal(fake.log, want) {
		t.Errorf("call log\n got %v\nwant %v", fake.log, want)
	}
}

func TestProfileWindowClosedWhenARegionFails(t *testing.T) {
	fake := &fakeTarget{failDecodeAt: 2}
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1}, []int{5}, 1, 0
	opt.Profiler, opt.Profile = &fakeProfiler{target: fake}, &ProfileWindow{Phase: ProfileDecode, StartStep: 0, Steps: 3}
	if _, err := Run(fake, opt); !errors.Is(err, errFakeFault) {
		t.Fatalf("err = %v, want the fault", err)
	}
	if n := len(windows(t, fake.log)); n != 1 {
		t.Errorf("%d closed windows after a failing step, want 1: %v", n, fake.log)
	}
}

func TestProfileWindowRefused(t *testing.T) {
	for _, tc := range []struct {
		w    ProfileWindow
		want string
	}{
		{ProfileWindow{Phase: "warmup"}, "not prefill, decode or both"},
		{ProfileWindow{Phase: ProfilePrefill, Steps: 2}, "no decode steps"},
		{ProfileWindow{Phase: ProfileDecode, StartStep: -1, Steps: 1}, "at least one step"},
		{ProfileWindow{Phase: ProfileDecode, Steps: 0}, "at least one step"},
		{ProfileWindow{Phase: ProfileBoth, StartStep: 1, Steps: 1}, "starts at the prefill"},
		// Output lengths 3 and 1 have decode steps 0..1 and none.
		{ProfileWindow{Phase: ProfileDecode, StartStep: 1, Steps: 2}, "ends at decode step 2, but output length 3 has decode steps 0..1"},
		{ProfileWindow{Phase: ProfileDecode, StartStep: 0, Steps: 1}, "output length 1 has no decode step"},
		// start + steps - 1 overflowed to a negative last step, which passed.
		{ProfileWindow{Phase: ProfileDecode, StartStep: math.MaxInt, Steps: math.MaxInt}, "ends at decode step 9223372036854775807"},
	} {
		opt := testOptions()
		opt.Profiler, opt.Profile = &fakeProfiler{target: &fakeTarget{}}, &tc.w
		_, err := Run(&fakeTarget{}, opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.w, err, tc.want)
		}
	}
	opt := testOptions()
	opt.Profile = &ProfileWindow{Phase: ProfilePrefill}
	if _, err := Run(&fakeTarget{}, opt); err == nil || !strings.Contains(err.Error(), "needs a profiler") {
		t.Errorf("a window without a profiler: err = %v", err)
	}
}

func TestProfilerStartFailureStopsTheRun(t *testing.T) {
	fake := &fakeTarget{}
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1}, []int{3}, 1, 0
	opt.Profiler, opt.Profile = &fakeProfiler{target: fake, failStart: true}, &ProfileWindow{Phase: ProfilePrefill}
	if _, err := Run(fake, opt); err == nil || !strings.Contains(err.Error(), "profiler start: no profiler") {
		t.Errorf("err = %v", err)
	}
}
