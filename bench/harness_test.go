package bench

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"stepbench/runner"
)

// fakeEvent logs its recordings into its target's call log.
type fakeEvent struct {
	name   string
	target *fakeTarget
}

func (e *fakeEvent) Record() error {
	e.target.log = append(e.target.log, "record:"+e.name)
	return nil
}

// fakeTarget scripts device times (prefill 2 ms + 1 µs per decode step
// index) and logs every call; it can fail the n-th Decode call.
type fakeTarget struct {
	log          []string
	prompts      [][]int32
	shapes       [][3]int
	events       int
	decodeCalls  int
	failDecodeAt int // 1-based Decode call that fails; 0 never
	stepInRun    int
}

var errFakeFault = errors.New("fake kernel fault")

const fakePrefillDevice = 2 * time.Millisecond

func (f *fakeTarget) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	f.log = append(f.log, "begin")
	f.prompts = append(f.prompts, slices.Clone(prompts))
	f.shapes = append(f.shapes, [3]int{batch, inputLen, outputLen})
	f.stepInRun = -1
	return nil
}

func (f *fakeTarget) Prefill() error {
	f.log = append(f.log, "prefill")
	return nil
}

func (f *fakeTarget) Decode() error {
	f.decodeCalls++
	f.stepInRun++
	if f.decodeCalls == f.failDecodeAt {
		return errFakeFault
	}
	f.log = append(f.log, "decode")
	return nil
}

func (f *fakeTarget) Sync() error {
	f.log = append(f.log, "sync")
	return nil
}

func (f *fakeTarget) NewEvent() (runner.Event, error) {
	f.events++
	name := "start"
	if f.events == 2 {
		name = "end"
	}
	return &fakeEvent{name: name, target: f}, nil
}

func (f *fakeTarget) Elapsed(start, end runner.Event) (time.Duration, error) {
	if start.(*fakeEvent).name != "start" || end.(*fakeEvent).name != "end" {
		return 0, errors.New("events swapped")
	}
	f.log = append(f.log, "elapsed")
	if f.stepInRun < 0 {
		return fakePrefillDevice, nil
	}
	return time.Millisecond + time.Duration(f.stepInRun)*time.Microsecond, nil
}

func testOptions() Options {
	return Options{
		BatchSizes: []int{1, 2}, InputLens: []int{4}, OutputLens: []int{3, 1},
		NumIters: 2, WarmupIters: 1, Seed: 42, VocabSize: 50, RunName: "t",
	}
}

func TestRunCallsAndSamples(t *testing.T) {
	fake := &fakeTarget{}
	opt := testOptions()
	var stdout, progress bytes.Buffer
	opt.Stdout, opt.Progress = &stdout, &progress
	var hooked []Sample
	opt.BetweenRegions = func(s Sample) { hooked = append(hooked, s) }

	results, err := Run(fake, opt)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantShapes := [][3]int{{1, 4, 3}, {1, 4, 1}, {2, 4, 3}, {2, 4, 1}}
	if len(results) != len(wantShapes) {
		t.Fatalf("got %d shapes, want %d", len(results), len(wantShapes))
	}
	// Every shape gets its own warmup: Begin is called warmup+iters times per
	// shape, in the sweep's nesting order.
	var wantBegins [][3]int
	wantDecodes, wantRegions := 0, 0
	for _, s := range wantShapes {
		for range opt.WarmupIters + opt.NumIters {
			wantBegins = append(wantBegins, s)
			wantDecodes += s[2] - 1
			wantRegions += s[2]
		}
	}
	if !slices.Equal(fake.shapes, wantBegins) {
		t.Errorf("Begin shapes = %v, want %v", fake.shapes, wantBegins)
	}
	if fake.decodeCalls != wantDecodes {
		t.Errorf("Decode called %d times, want %d", fake.decodeCalls, wantDecodes)
	}
	if fake.events != 2 {
		t.Errorf("NewEvent called %d times, want 2 (once per run)", fake.events)
	}
	if len(hooked) != wantRegions {
		t.Errorf("BetweenRegions called %d times, want %d", len(hooked), wantRegions)
	}

	for i, r := range results {
		if got := [3]int{r.Batch, r.InputLen, r.OutputLen}; got != wantShapes[i] {
			t.Errorf("shape %d = %v, want %v", i, got, wantShapes[i])
		}
		if !r.Complete || len(r.Iterations) != opt.NumIters {
			t.Errorf("shape %d: complete=%v iterations=%d", i, r.Complete, len(r.Iterations))
		}
		for _, it := range r.Iterations {
			if len(it.Decode) != r.OutputLen-1 {
				t.Errorf("shape %d iter %d: %d decode samples, want %d", i, it.Iter, len(it.Decode), r.OutputLen-1)
			}
			if it.Prefill.DeviceSeconds != fakePrefillDevice.Seconds() || it.Prefill.Position != 0 ||
				it.Prefill.Phase != PhasePrefill || it.Prefill.Warmup {
				t.Errorf("prefill sample %+v", it.Prefill)
			}
			total := it.Prefill.HostSeconds
			for step, d := range it.Decode {
				wantDevice := (time.Millisecond + time.Duration(step)*time.Microsecond).Seconds()
				if d.Step != step || d.Position != r.InputLen+step || d.DeviceSeconds != wantDevice ||
					d.Phase != PhaseDecode || d.Iter != it.Iter {
					t.Errorf("decode sample %+v, want step %d position %d device %v", d, step, r.InputLen+step, wantDevice)
				}
				if d.HostSeconds < 0 {
					t.Errorf("negative host time %v", d.HostSeconds)
				}
				total += d.HostSeconds
			}
			if !closeTo(it.TotalHostSeconds, total) {
				t.Errorf("total %v, want prefill+Σdecode %v", it.TotalHostSeconds, total)
			}
		}
		if got := r.Summary.DecodeHostSeconds.N; got != opt.NumIters*(r.OutputLen-1) {
			t.Errorf("decode summary N = %d", got)
		}
	}
	if !strings.Contains(progress.String(), "shape 4/4") {
		t.Errorf("progress lacks the last shape:\n%s", progress.String())
	}
}

// Each region must be: sync, record start, step, record end, sync, elapsed.
func TestRunRegionOrder(t *testing.T) {
	fake := &fakeTarget{}
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1}, []int{3}, 1, 0
	if _, err := Run(fake, opt); err != nil {
		t.Fatal(err)
	}
	region := func(step string) []string {
		return []string{"sync", "record:start", step, "record:end", "sync", "elapsed"}
	}
	want := []string{"begin"}
	want = append(want, region("prefill")...)
	want = append(want, region("decode")...)
	want = append(want, region("decode")...)
	if !slices.Equal(fake.log, want) {
		t.Errorf("call log\n got %v\nwant %v", fake.log, want)
	}
}

func TestRunPromptsFreshInRangeReproducible(t *testing.T) {
	fake := &fakeTarget{}
	opt := testOptions()
	if _, err := Run(fake, opt); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, p := range fake.prompts {
		shape := fake.shapes[i]
		if len(p) != shape[0]*shape[1] {
			t.Fatalf("Begin %d got %d ids, want %d", i, len(p), shape[0]*shape[1])
		}
		for _, id := range p {
			if id < 0 || int(id) >= opt.VocabSize {
				t.Fatalf("id %d outside [0, %d)", id, opt.VocabSize)
			}
		}
		key := fmt.Sprint(p)
		if seen[key] {
			t.Errorf("Begin %d reused prompts %v", i, p)
		}
		seen[key] = true
	}
	// The second run with the same seed gets the same ids; the timed ones
	// are those PromptIDs documents.
	again := &fakeTarget{}
	results, err := Run(again, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fake.prompts {
		if !slices.Equal(fake.prompts[i], again.prompts[i]) {
			t.Fatalf("Begin %d: prompts differ between runs with the same seed", i)
		}
	}
	first := results[0]
	want, err := PromptIDs(opt.Seed, opt.VocabSize, PromptKey{Shape: first.Shape, Iter: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Begin order for the first shape: warmup 0, iteration 0, iteration 1.
	if !slices.Equal(fake.prompts[2], want) {
		t.Errorf("iteration 1 prompts %v, want PromptIDs' %v", fake.prompts[2], want)
	}
	if first.Iterations[1].PromptStream != (PromptKey{Shape: first.Shape, Iter: 1}).stream() {
		t.Errorf("PromptStream not recorded")
	}
	other := &fakeTarget{}
	opt.Seed++
	if _, err := Run(other, opt); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(other.prompts[0], fake.prompts[0]) {
		t.Errorf("a different seed gave the same prompts")
	}
}

func TestRunStdoutMatchesOneBatch(t *testing.T) {
	fake := &fakeTarget{}
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{2}, []int{12}, 1, 0
	opt.LogDecodeStep = 4
	var stdout bytes.Buffer
	opt.Stdout = &stdout
	if _, err := Run(fake, opt); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	number := `\s*[0-9]+\.[0-9]{5}` // %6.5f
	throughput := ` *[0-9]+\.[0-9]{2}`
	patterns := []string{`^Benchmark 1/1: batch_size=2, input_len=4, output_len=12$`,
		`^Prefill\. latency: ` + number + ` s, throughput: ` + throughput + ` token/s$`}
	// 11 decode steps: 0-4 always, then those divisible by 4.
	for _, step := range []int{0, 1, 2, 3, 4, 8} {
		patterns = append(patterns, fmt.Sprintf(`^Decode %d\. Batch size: 2, latency: `, step)+number+
			` s, throughput: `+throughput+` token/s$`)
	}
	patterns = append(patterns,
		`^Decode\.  median latency: `+number+` s, median throughput: `+throughput+` token/s$`,
		`^Total\. latency: \s*[0-9]+\.[0-9]{3} s, throughput: `+throughput+` token/s$`)
	if len(lines) != len(patterns) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(patterns), stdout.String())
	}
	for i, p := range patterns {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %q", i, lines[i], p)
		}
	}
}

func TestOneBatchLinesExact(t *testing.T) {
	tests := []struct{ got, want string }{
		{prefillLine(4*256, 0.5), "Prefill. latency: 0.50000 s, throughput:   2048.00 token/s"},
		{prefillLine(1*60, 0.0607512), "Prefill. latency: 0.06075 s, throughput:    987.63 token/s"},
		{decodeStepLine(3, 8, 0.004), "Decode 3. Batch size: 8, latency: 0.00400 s, throughput:   2000.00 token/s"},
		{decodeMedianLine(4, 0.01837), "Decode.  median latency: 0.01837 s, median throughput:    217.75 token/s"},
		{totalLine((60+10)*1, 0.08), "Total. latency:  0.080 s, throughput:    875.00 token/s"},
		{totalLine((100+28)*2, 12.5), "Total. latency: 12.500 s, throughput:     20.48 token/s"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got  %q\nwant %q", tc.got, tc.want)
		}
	}
}

func TestRunOutputLenOnePrintsNoDecode(t *testing.T) {
	opt := testOptions()
	opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{1}, []int{1}, 1, 0
	var stdout bytes.Buffer
	opt.Stdout = &stdout
	if _, err := Run(&fakeTarget{}, opt); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "Decode") {
		t.Errorf("output_len 1 printed decode lines:\n%s", stdout.String())
	}
}

func TestRunReturnsPartialResultsOnError(t *testing.T) {
	opt := testOptions()
	opt.OutputLens = []int{3}
	// Per shape: warmup (2 decodes) + 2 iterations (2 decodes each) = 6.
	// Call 6+2+2+1 = 11 is the first decode of the second shape's iteration 1.
	fake := &fakeTarget{failDecodeAt: 11}
	results, err := Run(fake, opt)
	if !errors.Is(err, errFakeFault) {
		t.Fatalf("error %v does not wrap the fault", err)
	}
	if !strings.Contains(err.Error(), "batch_size=2") || !strings.Contains(err.Error(), "iteration 1") {
		t.Errorf("error lacks context: %v", err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d shapes, want the complete one and the interrupted one", len(results))
	}
	if !results[0].Complete || len(results[0].Iterations) != 2 {
		t.Errorf("first shape: %+v", results[0])
	}
	if results[1].Complete || len(results[1].Iterations) != 1 || results[1].Summary.PrefillHostSeconds.N != 1 {
		t.Errorf("interrupted shape: complete=%v iterations=%d", results[1].Complete, len(results[1].Iterations))
	}

	// A fault during warmup keeps no sample of that shape.
	results, err = Run(&fakeTarget{failDecodeAt: 7}, opt)
	if !errors.Is(err, errFakeFault) || len(results) != 1 {
		t.Errorf("warmup fault: %d shapes, err %v", len(results), err)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
	}{
		{"no batch sizes", func(o *Options) { o.BatchSizes = nil }},
		{"zero input length", func(o *Options) { o.InputLens = []int{0} }},
		{"zero output length", func(o *Options) { o.OutputLens = []int{3, 0} }},
		{"zero iterations", func(o *Options) { o.NumIters = 0 }},
		{"negative warmup", func(o *Options) { o.WarmupIters = -1 }},
		{"zero vocab", func(o *Options) { o.VocabSize = 0 }},
		{"negative log step", func(o *Options) { o.LogDecodeStep = -1 }},
	}
	for _, tc := range tests {
		opt := testOptions()
		tc.change(&opt)
		fake := &fakeTarget{}
		if _, err := Run(fake, opt); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
		if len(fake.log) != 0 {
			t.Errorf("%s: target used before validation: %v", tc.name, fake.log)
		}
	}
	if _, err := Run(nil, testOptions()); err == nil {
		t.Errorf("nil target: no error")
	}
}

func TestIterationLabels(t *testing.T) {
	st := newStopper(3, Adaptive{}, time.Now)
	if st.iterationLabel(0) != "1/3" || newStopper(0, DefaultAdaptive(), func() time.Time { return time.Time{} }).iterationLabel(4) != "5" {
		t.Error("iteration labels")
	}
}
func TestDropSamples(t *testing.T) {
	s := ShapeResult{Shape: Shape{Batch: 1, InputLen: 4, OutputLen: 3}, Iterations: []IterationResult{
		{Iter: 0, Prefill: Sample{Phase: PhasePrefill, HostSeconds: 1}, Decode: []Sample{{Phase: PhaseDecode, HostSeconds: 1}, {Phase: PhaseDecode, Step: 1, HostSeconds: 1}}, TotalHostSeconds: 3},
		{Iter: 1, Prefill: Sample{Phase: PhasePrefill, Iter: 1, HostSeconds: 9}, Decode: []Sample{{Phase: PhaseDecode, Iter: 1, HostSeconds: 9}, {Phase: PhaseDecode, Iter: 1, Step: 1, HostSeconds: 2}}, TotalHostSeconds: 20},
	}}
	got, dropped := DropSamples(s, func(x Sample) bool { return x.HostSeconds == 9 })
	if dropped != 2 {
		t.Errorf("dropped %d, want 2", dropped)
	}
	if got.Summary.PrefillHostSeconds.N != 1 || got.Summary.DecodeHostSeconds.N != 3 || got.Summary.TotalHostSeconds.N != 1 ||
		got.Summary.TotalHostSeconds.Median != 3 || got.Summary.PrefillHostSeconds.Max != 1 {
		t.Errorf("summary after discard: %+v", got.Summary)
	}
}

// raggedFake is a fakeTarget that runs ragged shapes.
type raggedFake struct{ fakeTarget }

func (f *raggedFake) BeginSeqs(seqs []runner.SeqSpec, outputLen int, prompts []int32) error {
	return f.Begin(len(seqs), 0, outputLen, prompts)
}

// One_batch's prefill and total lines count the tokens a ragged batch's
// prefill ran: the sum of its lengths, or one per sequence over a
// synthetic context (not batch × the mean length).
func TestRunStdoutCountsARaggedBatchsTokens(t *testing.T) {
	for _, tc := range []struct {
		fill                string
		prefillTok, iterTok float64
	}{{KVFillPrefill, 4 + 9, 4 + 9 + 2*3}, {KVFillSynthetic, 2, 2 + 2*3}} {
		opt := testOptions()
		opt.BatchSizes, opt.OutputLens, opt.NumIters, opt.WarmupIters = []int{2}, []int{3}, 1, 0
		opt.ContextLens, opt.KVFill = LengthSpec{List: []int{4, 9}}, tc.fill
		clock := time.Unix(0, 0)
		opt.Now = func() time.Time { clock = clock.Add(250 * time.Millisecond); return clock }
		var stdout bytes.Buffer
		opt.Stdout = &stdout
		if _, err := Run(&raggedFake{}, opt); err != nil {
			t.Fatal(err)
		}
		for _, line := range []struct {
			pattern string
			tokens  float64
		}{{`Prefill\. latency: +([0-9.]+) s, throughput: +([0-9.]+) token/s`, tc.prefillTok}, {`Total\. latency: +([0-9.]+) s, throughput: +([0-9.]+) token/s`, tc.iterTok}} {
			m := regexp.MustCompile(line.pattern).FindStringSubmatch(stdout.String())
			if m == nil {
				t.Fatalf("no line %q in\n%s", line.pattern, stdout.String())
			}
			var latency, throughput float64
			fmt.Sscan(m[1], &latency)
			fmt.Sscan(m[2], &throughput)
			if got := latency * throughput; got < line.tokens-0.01 || got > line.tokens+0.01 {
				t.Errorf("%s fill: %q counts %.3f tokens, want %v", tc.fill, m[0], got, line.tokens)
			}
		}
	}
}
