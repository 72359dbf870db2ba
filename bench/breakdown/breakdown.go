package breakdown

import (
	"errors"
	"fmt"
	"sort"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

// A per-op breakdown runs one untimed-in-results, eager pass of a shape
// (prefill, then every decode step) with an event recorded at every op
// boundary (Engine.OnOp fires before each backend op), the stream
// synchronised only at the end of each step. Op i's time is the device time
// from its boundary to the next one (or to the step's end), so it includes
// any launch gap in front of the next op; what lies outside every op (the
// input copy, host work before the first launch) is the step's "outside ops"
// time. On the cpu backend events are host clocks, so the same code runs
// there. The cuda backend must run the pass eagerly: events cannot be
// recorded one by one inside a replayed CUDA graph.

// Row is one op's share of a step, per step (decode rows are means
// over the pass's decode steps).
type Row struct {
	Op           string  `json:"op"`
	CallsPerStep float64 `json:"calls_per_step"`
	// LaunchesPerStep counts the kernel launches and library calls (a cuBLAS
	// GEMM counts one) the op enqueued, on backends that count them
	// (runner.LaunchCounter; 0 elsewhere): a captured step has as many
	// graph nodes.
	LaunchesPerStep      float64 `json:"launches_per_step,omitempty"`
	DeviceSecondsPerStep float64 `json:"device_seconds_per_step"`
	ShareOfStep          float64 `json:"share_of_step"`  // 0..1 of the step's device time
	FLOPsPerStep         float64 `json:"flops_per_step"` // the cost model's minimal work
	BytesPerStep         float64 `json:"bytes_per_step"`
	BytesPerSecond       float64 `json:"bytes_per_second"`
	FLOPsPerSecond       float64 `json:"flops_per_second"`
	// Attainment is the op's roofline floor over its measured time (0..1,
	// derived); 0 without a GPU spec.
	Attainment float64 `json:"attainment,omitempty"`
}

// Phase is the breakdown of one phase of a shape.
type Phase struct {
	Phase                string  `json:"phase"`
	Steps                int     `json:"steps"` // steps measured (1 for prefill)
	StepDeviceSeconds    float64 `json:"step_device_seconds"`
	OutsideOpsSeconds    float64 `json:"outside_ops_seconds"` // step time in no op interval, per step
	OutsideOpsShare      float64 `json:"outside_ops_share"`
	LaunchesPerStep      float64 `json:"launches_per_step,omitempty"` // every op's, per step
	Rows                 []Row   `json:"rows"`                        // slowest first
	StepFLOPs, StepBytes float64 `json:"-"`
}

// Result holds both phases of a shape; Decode.Steps is 0 when
// output_len is 1.
type Result struct {
	bench.Shape
	Prefill Phase `json:"prefill"`
	Decode  Phase `json:"decode"`
}

// Measure runs the breakdown pass of one shape on e. roof (may be
// nil) gives the attainment column. e.OnOp is restored afterwards.
func Measure(e *runner.Engine, sh bench.Shape, seed uint64, roof *roofline.Roof) (Result, error) {
	sb := Result{Shape: sh}
	outputLen := sh.OutputLen
	if e == nil {
		return sb, errors.New("breakdown: nil engine")
	}
	if sc, ok := e.Backend().(runner.StepCapturer); ok && sc.CaptureEnabled() && outputLen > 1 {
		// A replayed graph calls no OnOp and takes no event per op.
		return sb, errors.New("breakdown: decode steps replay a CUDA graph; the per-op pass needs eager launches (--disable-cuda-graph)")
	}
	cfg := e.Config()
	prefillCost, err := runner.PrefillCostSeqs(cfg, 0, sh.Seqs(), e.KVOptions())
	if err != nil {
		return sb, fmt.Errorf("breakdown: %w", err)
	}
	decodeCost, err := meanDecodeCost(cfg, sh, e.KVOptions())
	if err != nil {
		return sb, fmt.Errorf("breakdown: %w", err)
	}
	calls := 0
	for _, op := range prefillCost.Ops {
		calls += op.Calls
	}
	rec, err := newOpRecorder(e, calls+2)
	if err != nil {
		return sb, fmt.Errorf("breakdown: %w", err)
	}
	previousHook := e.OnOp
	defer func() { e.OnOp = previousHook }()

	prompts, err := bench.PromptIDs(seed, cfg.VocabSize, bench.PromptKey{Shape: sh, Warmup: true})
	if err != nil {
		return sb, fmt.Errorf("breakdown: %w", err)
	}
	if err := e.BeginSeqs(sh.Seqs(), outputLen, prompts); err != nil {
		return sb, fmt.Errorf("breakdown: begin: %w", err)
	}
	prefill := newOpTotals()
	if err := rec.measureStep(e.Prefill, prefill); err != nil {
		return sb, fmt.Errorf("breakdown: prefill: %w", err)
	}
	sb.Prefill = prefill.phase(bench.PhasePrefill, prefillCost.Ops, roof)
	decode := newOpTotals()
	for step := 0; step < outputLen-1; step++ {
		if err := rec.measureStep(e.Decode, decode); err != nil {
			return sb, fmt.Errorf("breakdown: decode step %d: %w", step, err)
		}
	}
	sb.Decode = decode.phase(bench.PhaseDecode, decodeCost, roof)
	return sb, nil
}

// meanDecodeCost is the per-op cost averaged over the shape's decode steps:
// exact as the mean of the first and last step, costs being affine in the
// position.
func meanDecodeCost(cfg runner.Config, sh bench.Shape, kv runner.KVOptions) ([]runner.OpCost, error) {
	if sh.OutputLen < 2 {
		return nil, nil
	}
	first, err := runner.DecodeCostAfter(cfg, 0, sh.Seqs(), 0, kv)
	if err != nil {
		return nil, err
	}
	last, err := runner.DecodeCostAfter(cfg, 0, sh.Seqs(), sh.OutputLen-2, kv)
	if err != nil {
		return nil, err
	}
	byOp := map[string]runner.OpCost{}
	for _, c := range last.Ops {
		byOp[c.Op] = c
	}
	mean := make([]runner.OpCost, 0, len(first.Ops))
	for _, c := range first.Ops {
		l := byOp[c.Op]
		mean = append(mean, runner.OpCost{Op: c.Op, Calls: c.Calls, FLOPs: (c.FLOPs + l.FLOPs) / 2, Bytes: (c.Bytes + l.Bytes) / 2})
	}
	return mean, nil
}

// opRecorder owns the events of a breakdown pass, created before it so that
// no event is created inside a step.
type opRecorder struct {
	engine             *runner.Engine
	stepStart, stepEnd runner.Event
	boundaries         []runner.Event
	labels             []string
	recordErr          error
	// launches is the backend's launch count at each boundary, and at the
	// step's end last (nil when the backend does not count).
	counter  runner.LaunchCounter
	launches []int64
}

func newOpRecorder(e *runner.Engine, capacity int) (*opRecorder, error) {
	r := &opRecorder{engine: e}
	r.counter, _ = e.Backend().(runner.LaunchCounter)
	var err error
	if r.stepStart, err = e.NewEvent(); err != nil {
		return nil, fmt.Errorf("create event: %w", err)
	}
	if r.stepEnd, err = e.NewEvent(); err != nil {
		return nil, fmt.Errorf("create event: %w", err)
	}
	for i := 0; i < capacity; i++ {
		ev, err := e.NewEvent()
		if err != nil {
			return nil, fmt.Errorf("create event %d: %w", i, err)
		}
		r.boundaries = append(r.boundaries, ev)
	}
	return r, nil
}

// hook records the boundary in front of op.
func (r *opRecorder) hook(op string) {
	if r.recordErr != nil {
		return
	}
	i := len(r.labels)
	if i == len(r.boundaries) {
		// More ops than the cost model counted: grow, at the price of one
		// event creation inside the step.
		ev, err := r.engine.NewEvent()
		if err != nil {
			r.recordErr = fmt.Errorf("create event: %w", err)
			return
		}
		r.boundaries = append(r.boundaries, ev)
	}
	if err := r.boundaries[i].Record(); err != nil {
		r.recordErr = fmt.Errorf("record event before %s: %w", op, err)
		return
	}
	r.labels = append(r.labels, op)
	if r.counter != nil {
		r.launches = append(r.launches, r.counter.Launches())
	}
}

// measureStep runs one step with a boundary event in front of every op and
// adds its op intervals to totals.
func (r *opRecorder) measureStep(step func() error, totals *opTotals) error {
	r.labels, r.recordErr, r.launches = r.labels[:0], nil, r.launches[:0]
	if err := r.engine.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := r.stepStart.Record(); err != nil {
		return fmt.Errorf("record step start: %w", err)
	}
	r.engine.OnOp = r.hook
	err := step()
	r.engine.OnOp = nil
	if err != nil {
		return err
	}
	if r.recordErr != nil {
		return r.recordErr
	}
	if r.counter != nil {
		r.launches = append(r.launches, r.counter.Launches())
	}
	if err := r.stepEnd.Record(); err != nil {
		return fmt.Errorf("record step end: %w", err)
	}
	if err := r.engine.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	stepTime, err := r.engine.Elapsed(r.stepStart, r.stepEnd)
	if err != nil {
		return fmt.Errorf("step elapsed: %w", err)
	}
	totals.steps++
	totals.stepSeconds += stepTime.Seconds()
	for i, op := range r.labels {
		next := r.stepEnd
		if i+1 < len(r.labels) {
			next = r.boundaries[i+1]
		}
		d, err := r.engine.Elapsed(r.boundaries[i], next)
		if err != nil {
			return fmt.Errorf("%s elapsed: %w", op, err)
		}
		launches := int64(0)
		if r.counter != nil {
			launches = r.launches[i+1] - r.launches[i]
		}
		totals.add(op, d.Seconds(), launches)
	}
	return nil
}

// opTotals accumulates op intervals over the steps of one phase.
type opTotals struct {
	order       []string
	calls       map[string]int
	launches    map[string]int64
	seconds     map[string]float64
	steps       int
	stepSeconds float64
}

func newOpTotals() *opTotals {
	return &opTotals{calls: map[string]int{}, launches: map[string]int64{}, seconds: map[string]float64{}}
}

func (t *opTotals) add(op string, seconds float64, launches int64) {
	if _, seen := t.calls[op]; !seen {
		t.order = append(t.order, op)
	}
	t.calls[op]++
	t.launches[op] += launches
	t.seconds[op] += seconds
}

// phase turns the totals into per-step rows, slowest first.
func (t *opTotals) phase(name string, costs []runner.OpCost, roof *roofline.Roof) Phase {
	p := Phase{Phase: name, Steps: t.steps}
	if t.steps == 0 {
		return p
	}
	steps := float64(t.steps)
	p.StepDeviceSeconds = t.stepSeconds / steps
	costByOp := map[string]runner.OpCost{}
	for _, c := range costs {
		costByOp[c.Op] = c
		p.StepFLOPs += c.FLOPs
		p.StepBytes += c.Bytes
	}
	covered := 0.0
	for _, op := range t.order {
		seconds := t.seconds[op] / steps
		covered += seconds
		c := costByOp[op]
		row := Row{Op: op, CallsPerStep: float64(t.calls[op]) / steps, DeviceSecondsPerStep: seconds,
			FLOPsPerStep: c.FLOPs, BytesPerStep: c.Bytes, LaunchesPerStep: float64(t.launches[op]) / steps}
		p.LaunchesPerStep += row.LaunchesPerStep
		if p.StepDeviceSeconds > 0 {
			row.ShareOfStep = seconds / p.StepDeviceSeconds
		}
		if seconds > 0 {
			row.BytesPerSecond, row.FLOPsPerSecond = c.Bytes/seconds, c.FLOPs/seconds
			if roof != nil {
				row.Attainment = roof.FloorWork(c.FLOPs, c.FP8FLOPs, c.Bytes, 0).Seconds / seconds
			}
		}
		p.Rows = append(p.Rows, row)
	}
	// Timer rounding can make the sum of intervals exceed the step by a hair.
	p.OutsideOpsSeconds = max(0, p.StepDeviceSeconds-covered)
	if p.StepDeviceSeconds > 0 {
		p.OutsideOpsShare = p.OutsideOpsSeconds / p.StepDeviceSeconds
	}
	sort.SliceStable(p.Rows, func(i, j int) bool { return p.Rows[i].DeviceSecondsPerStep > p.Rows[j].DeviceSecondsPerStep })
	return p
}
