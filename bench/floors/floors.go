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
	Floors roofline.StepFloors `json:"floors"`
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
				shapes = append(shapes, ShapeFloors{bench.Shape{Batch: b, InputLen: in, OutputLen: out}, f})
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
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "batch\tinput\toutput\tstep\tkv_len\tGFLOP\tGB\tweight_GB\tFLOP/byte\tfloor_ms\tbound\t"
	if comm {
		header += "comm_MB\tcomm_ms\tcollectives\t"
	}
	fmt.Fprintln(tw, header)
	row := func(b, in, out int, step string, kv int, c runner.StepCost, f roofline.Floor) {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t", b, in, out, step, kv,
			c.FLOPs/1e9, c.Bytes/1e9, c.WeightBytes/1e9, c.Intensity(), f.Seconds*1e3, f.Bound)
		if comm {
			fmt.Fprintf(tw, "%.2f\t%.3f\t%d\t", c.CommBytes/1e6, f.CommSeconds*1e3, c.CommCalls)
		}
		fmt.Fprintln(tw)
	}
	for _, s := range shapes {
		p := s.Floors.Prefill
		row(s.Batch, s.InputLen, s.OutputLen, "prefill", p.SeqLen, p, s.Floors.PrefillFloor)
		if n := len(s.Floors.Decode); n > 0 {
			d := s.Floors.Decode[0]
			row(s.Batch, s.InputLen, s.OutputLen, "decode first", d.StartPos+1, d, s.Floors.DecodeFloors[0])
			if n > 1 {
				d = s.Floors.Decode[n-1]
				row(s.Batch, s.InputLen, s.OutputLen, "decode last", d.StartPos+1, d, s.Floors.DecodeFloors[n-1])
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\titeration\t\t\t\t\t\t%.2f\t\t", s.Batch, s.InputLen, s.OutputLen, s.Floors.IterationSeconds*1e3)
		if comm {
			fmt.Fprint(tw, "\t\t\t")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteOpFloorsTable writes every op of a shape's prefill and first decode
// step with its FLOPs, bytes, intensity and floor (stepbench roofline --ops).
func WriteOpFloorsTable(stdout io.Writer, g roofline.Preset, s ShapeFloors) error {
	steps := []runner.StepCost{s.Floors.Prefill}
	if len(s.Floors.Decode) > 0 {
		steps = append(steps, s.Floors.Decode[0])
	}
	fmt.Fprintf(stdout, "\nper op, batch %d, input %d (decode: the first step):\n", s.Batch, s.InputLen)
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
