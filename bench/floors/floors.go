package floors

import (
	"fmt"
	"io"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

// ShapeFloors is one shape's floors under a preset's datasheet roof (what
// stepbench roofline prints); its JSON keys are snake_case.
type ShapeFloors struct {
	bench.Shape
	// KVTokens is the tokens in the batch's caches after the prefill, the
	// sum of its context lengths: set for the shapes of FloorsOf (roofline
	// --context-lens, --kv-fill, --kv-layout), whose tables then show each
	// step's KV tokens and bytes.
	KVTokens int `json:"kv_tokens,omitempty"`
	// KVCacheDType is an FP8 cache's element type (vLLM's name), whose
	// cached elements are one byte; absent: bf16, two.
	KVCacheDType string              `json:"kv_cache_dtype,omitempty"`
	Floors       roofline.StepFloors `json:"floors"`
}

// FloorsOf costs shapes (ragged or not, bench.Shape.Seqs) under g's
// datasheet roof with costs (one GPU's share and the layout).
func FloorsOf(cfg runner.Config, g roofline.Preset, costs roofline.Costs, shapes []bench.Shape) ([]ShapeFloors, error) {
	if cfg.Quantization != nil {
		if err := g.CheckFP8(); err != nil {
			return nil, err
		}
	}
	var out []ShapeFloors
	for _, sh := range shapes {
		f, err := costs.Floors(cfg, g.Roof(), roofline.Shape{Seqs: sh.Seqs(), InputLen: sh.InputLen, OutputLen: sh.OutputLen})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sh, err)
		}
		sf := ShapeFloors{Shape: sh, KVTokens: sh.KVTokens(), Floors: f}
		if costs.KV.DType.FP8() {
			sf.KVCacheDType = costs.KV.DType.String()
		}
		out = append(out, sf)
	}
	return out, nil
}

// Floors costs every shape of the cross product batches × inputLens ×
// outputLens (batch outermost) under g's datasheet roof: on one GPU for
// tpSize 0, else on one GPU of tpSize tensor-parallel ranks (its share of
// the work, its all-reduces at g's link bandwidth).
func Floors(cfg runner.Config, g roofline.Preset, tpSize int, batches, inputLens, outputLens []int) ([]ShapeFloors, error) {
	if cfg.Quantization != nil {
		if err := g.CheckFP8(); err != nil {
			return nil, err
		}
	}
	var shapes []ShapeFloors
	for _, b := range batches {
		for _, in := range inputLens {
			for _, out := range outputLens {
				f, err := roofline.ComputeFloorsTP(cfg, tpSize, g.Roof(), b, in, out)
				if err != nil {
					return nil, err
				}
				shapes = append(shapes, ShapeFloors{Shape: bench.Shape{Batch: b, InputLen: in, OutputLen: out}, Floors: f})
			}
		}
	}
	return shapes, nil
}

// WriteFloorsTable writes stepbench roofline's table: per shape, the
// prefill, first and last decode steps and the whole iteration with their
// FLOPs, bytes, the weights' share, intensity and floor (all derived); for
// a tensor-parallel run (tpSize > 0) one GPU's, with its all-reduce bytes
// and their time at the link bandwidth.
func WriteFloorsTable(stdout io.Writer, cfg runner.Config, g roofline.Preset, tpSize int, shapes []ShapeFloors) error {
	fmt.Fprintf(stdout, "roofline: %s (%.2f B parameters) on %s — datasheet %.1f TFLOP/s bf16 dense, %.2f TB/s; ridge %.1f FLOP/byte\n",
		cfg.Name, float64(cfg.ParamCount())/1e9, g.Description, g.PeakFLOPsPerSec/1e12, g.PeakBytesPerSec/1e12, g.Roof().RidgeFLOPsPerByte)
	if q := cfg.Quantization; q != nil {
		fmt.Fprintf(stdout, "weights %s; FP8 GEMMs at %.1f TFLOP/s FP8 dense, 1 byte per FP8 parameter\n", q, g.PeakFP8FLOPsPerSec/1e12)
	}
	comm := tpSize > 0
	if comm {
		fmt.Fprintf(stdout, "per GPU of %d tensor-parallel GPUs; all-reduce bytes = 2(N-1)/N × activation bytes, 2 per layer, sent at %.0f GB/s per direction (the link)\n",
			tpSize, g.LinkBytesPerSec/1e9)
		fmt.Fprintln(stdout, "floor = max(FLOPs / peak FLOP/s, bytes / peak bytes/s) + all-reduce bytes / link bytes/s; bytes = every input read once, every output written once (derived, not measured)")
		fmt.Fprintln(stdout, "collectives = all-reduces per step; each also pays the link's latency (microseconds), which no floor includes")
	} else {
		fmt.Fprintln(stdout, "floor = max(FLOPs / peak FLOP/s, bytes / peak bytes/s); bytes = every input read once, every output written once (derived, not measured)")
	}
	if cfg.Quantization != nil {
		fmt.Fprintln(stdout, "FLOPs / peak FLOP/s = FP8 GEMM FLOPs / FP8 peak + the other FLOPs / bf16 peak")
	}
	kv := hasKV(shapes)
	if kv {
		fmt.Fprintln(stdout, KVNote)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	t := floorsTable{tw: tw, comm: comm, kv: kv, kvBytesPerToken: kvBytesPerToken(cfg, tpSize)}
	if len(shapes) > 0 && shapes[0].KVCacheDType != "" {
		t.kvBytesPerToken /= 2 // one byte per cached element
	}
	t.header()
	for _, s := range shapes {
		t.shape(s)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if kv {
		for _, s := range shapes {
			if s.Lens != "" {
				fmt.Fprintf(stdout, "batch %d, output %d: context lengths %s\n", s.Batch, s.OutputLen, s.Lens)
			}
		}
	}
	return nil
}

// KVNote explains the floors table's KV columns.
const KVNote = "kv_len = the longest sequence's tokens in the cache after the step; kv_tokens = all sequences' (the sum of the lengths, " +
	"what the step's attention reads); kv_GB = their K and V in every layer; input = a ragged batch's mean length"

// hasKV reports whether any shape has its KV tokens (FloorsOf).
func hasKV(shapes []ShapeFloors) bool {
	for _, s := range shapes {
		if s.KVTokens > 0 {
			return true
		}
	}
	return false
}

// kvBytesPerToken is one token's K and V in every layer's cache (bf16; an
// FP8 cache's is half) on
// one GPU of tpSize ranks (0: the whole model).
func kvBytesPerToken(cfg runner.Config, tpSize int) float64 {
	heads := cfg.NumKeyValueHeads
	if tpSize > 0 {
		if l, err := cfg.TPLayout(0, tpSize); err == nil {
			heads = l.KVHeads
		}
	}
	return float64(cfg.NumHiddenLayers) * 2 * float64(heads*cfg.HeadDim) * 2
}

// floorsTable writes WriteFloorsTable's rows: with comm the all-reduce
// columns, with kv the KV cache's (kv_tokens, kv_GB).
type floorsTable struct {
	tw              *tabwriter.Writer
	comm, kv        bool
	kvBytesPerToken float64
}

func (t floorsTable) header() {
	header := "batch\tinput\toutput\tstep\tkv_len\t"
	if t.kv {
		header += "kv_tokens\tkv_GB\t"
	}
	header += "GFLOP\tGB\tweight_GB\tFLOP/byte\tfloor_ms\tbound\t"
	if t.comm {
		header += "comm_MB\tcomm_ms\tcollectives\t"
	}
	fmt.Fprintln(t.tw, header)
}

// row is one step of s: kvLen its longest sequence after it, kvTokens all
// of them.
func (t floorsTable) row(s ShapeFloors, step string, kvLen, kvTokens int, c runner.StepCost, f roofline.Floor) {
	fmt.Fprintf(t.tw, "%d\t%d\t%d\t%s\t%d\t", s.Batch, s.InputLen, s.OutputLen, step, kvLen)
	if t.kv {
		fmt.Fprintf(t.tw, "%d\t%.3f\t", kvTokens, float64(kvTokens)*t.kvBytesPerToken/1e9)
	}
	fmt.Fprintf(t.tw, "%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t", c.FLOPs/1e9, c.Bytes/1e9, c.WeightBytes/1e9, c.Intensity(), f.Seconds*1e3, f.Bound)
	if t.comm {
		fmt.Fprintf(t.tw, "%.2f\t%.3f\t%d\t", c.CommBytes/1e6, f.CommSeconds*1e3, c.CommCalls)
	}
	fmt.Fprintln(t.tw)
}

// shape writes s's prefill, first and last decode steps and iteration.
func (t floorsTable) shape(s ShapeFloors) {
	longest, total := 0, 0
	for _, q := range s.Seqs() {
		longest, total = max(longest, q.Context+q.Prompt), total+q.Context+q.Prompt
	}
	p := s.Floors.Prefill
	prefillLen := p.SeqLen
	if t.kv {
		prefillLen = longest
	}
	t.row(s, "prefill", prefillLen, total, p, s.Floors.PrefillFloor)
	if n := len(s.Floors.Decode); n > 0 {
		// Decode step i: every sequence i+1 tokens on.
		t.row(s, "decode first", longest+1, total+s.Batch, s.Floors.Decode[0], s.Floors.DecodeFloors[0])
		if n > 1 {
			t.row(s, "decode last", longest+n, total+n*s.Batch, s.Floors.Decode[n-1], s.Floors.DecodeFloors[n-1])
		}
	}
	blanks := "\t\t\t\t\t"
	if t.kv {
		blanks += "\t\t"
	}
	fmt.Fprintf(t.tw, "%d\t%d\t%d\titeration\t%s%.2f\t\t", s.Batch, s.InputLen, s.OutputLen, blanks, s.Floors.IterationSeconds*1e3)
	if t.comm {
		fmt.Fprint(t.tw, "\t\t\t")
	}
	fmt.Fprintln(t.tw)
}

// WriteOpFloorsTable writes every op of a shape's prefill and first decode
// step with its FLOPs, bytes, intensity and floor (stepbench roofline --ops).
func WriteOpFloorsTable(stdout io.Writer, g roofline.Preset, s ShapeFloors) error {
	steps := []runner.StepCost{s.Floors.Prefill}
	if len(s.Floors.Decode) > 0 {
		steps = append(steps, s.Floors.Decode[0])
	}
	what := "decode: the first step"
	if s.Lens != "" {
		what = "context lengths " + s.Lens + "; " + what
	}
	fmt.Fprintf(stdout, "\nper op, batch %d, input %d (%s):\n", s.Batch, s.InputLen, what)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\top\tcalls\tGFLOP\tMB\tFLOP/byte\tfloor_us\tbound\t")
	for _, st := range steps {
		for _, o := range st.Ops {
			f := g.Roof().FloorWork(o.FLOPs, o.FP8FLOPs, o.Bytes, o.CommBytes)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.2f\t%.2f\t%.1f\t%s\t\n", st.Phase, o.Op, o.Calls, o.FLOPs/1e9, o.Bytes/1e6, intensity(o), f.Seconds*1e6, f.Bound)
		}
	}
	return tw.Flush()
}

func intensity(o runner.OpCost) float64 {
	if o.Bytes == 0 {
		return 0
	}
	return o.FLOPs / o.Bytes
}
