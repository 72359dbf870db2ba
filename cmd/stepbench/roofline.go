package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"stepbench/bench"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

func rooflineCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("roofline", stderr)
	var m modelFlags
	var sh shapeFlags
	m.register(fs)
	sh.register(fs, []int{1024}, []int{16})
	gpu := fs.String("gpu", "h100-sxm", "GPU preset (datasheet peaks): "+joinNames(roofline.PresetNames()))
	ops := fs.Bool("ops", false, "also print every op's FLOPs, bytes and floor for prefill and the first decode step")
	format := fs.String("format", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return usagef("--format: %q is not text or json", *format)
	}
	g, err := roofline.LookupPreset(*gpu)
	if err != nil {
		return usagef("--gpu: %v", err)
	}
	cfg, err := m.resolve()
	if err != nil {
		return err
	}
	if err := sh.validate(cfg); err != nil {
		return err
	}
	shapes, err := rooflineShapes(cfg, g, sh)
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"model": cfg, "gpu": g, "shapes": shapes})
	}
	if err := writeRooflineTable(stdout, cfg, g, shapes); err != nil {
		return err
	}
	if *ops && len(shapes) > 0 {
		return writeRooflineOps(stdout, g, shapes[0])
	}
	return nil
}

// rooflineShape is one shape's floors; its JSON keys are snake_case.
type rooflineShape struct {
	bench.Shape
	Floors roofline.StepFloors `json:"floors"`
}

func rooflineShapes(cfg runner.Config, g roofline.Preset, sh shapeFlags) ([]rooflineShape, error) {
	var shapes []rooflineShape
	for _, b := range sh.batch {
		for _, in := range sh.input {
			for _, out := range sh.output {
				f, err := roofline.ComputeFloors(cfg, g.Roof(), b, in, out)
				if err != nil {
					return nil, err
				}
				shapes = append(shapes, rooflineShape{bench.Shape{Batch: b, InputLen: in, OutputLen: out}, f})
			}
		}
	}
	return shapes, nil
}

func writeRooflineTable(stdout io.Writer, cfg runner.Config, g roofline.Preset, shapes []rooflineShape) error {
	fmt.Fprintf(stdout, "roofline: %s (%.2f B parameters) on %s — datasheet %.1f TFLOP/s bf16 dense, %.2f TB/s; ridge %.1f FLOP/byte\n",
		cfg.Name, float64(cfg.ParamCount())/1e9, g.Description, g.PeakFLOPsPerSec/1e12, g.PeakBytesPerSec/1e12, g.Roof().RidgeFLOPsPerByte)
	fmt.Fprintln(stdout, "floor = max(FLOPs / peak FLOP/s, bytes / peak bytes/s); bytes = every input read once, every output written once (derived, not measured)")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tinput\toutput\tstep\tkv_len\tGFLOP\tGB\tweight_GB\tFLOP/byte\tfloor_ms\tbound\t")
	row := func(b, in, out int, step string, kv int, c runner.StepCost, f roofline.Floor) {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", b, in, out, step, kv,
			c.FLOPs/1e9, c.Bytes/1e9, c.WeightBytes/1e9, c.Intensity(), f.Seconds*1e3, f.Bound)
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
		fmt.Fprintf(tw, "%d\t%d\t%d\titeration\t\t\t\t\t\t%.2f\t\t\n", s.Batch, s.InputLen, s.OutputLen, s.Floors.IterationSeconds*1e3)
	}
	return tw.Flush()
}

// writeRooflineOps is --ops: every op of the first shape's prefill and
// first decode step.
func writeRooflineOps(stdout io.Writer, g roofline.Preset, s rooflineShape) error {
	steps := []runner.StepCost{s.Floors.Prefill}
	if len(s.Floors.Decode) > 0 {
		steps = append(steps, s.Floors.Decode[0])
	}
	fmt.Fprintf(stdout, "\nper op, batch %d, input %d (decode: the first step):\n", s.Batch, s.InputLen)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\top\tcalls\tGFLOP\tMB\tFLOP/byte\tfloor_us\tbound\t")
	for _, st := range steps {
		for _, o := range st.Ops {
			f := g.Roof().Floor(o.FLOPs, o.Bytes)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.2f\t%.2f\t%.1f\t%s\t\n", st.Phase, o.Op, o.Calls, o.FLOPs/1e9, o.Bytes/1e6, o.FLOPs/o.Bytes, f.Seconds*1e6, f.Bound)
		}
	}
	return tw.Flush()
}
