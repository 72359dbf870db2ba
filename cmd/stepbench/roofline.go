package main

import (
	"encoding/json"
	"io"

	"stepbench/bench/floors"
	"stepbench/bench/roofline"
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
	tpSize := fs.Int("tp-size", 0, "floors of one GPU of this many tensor-parallel GPUs: its share of the work and its all-reduces at the preset's link bandwidth (0: the whole model on one GPU)")
	var quantization string
	registerQuantization(fs, &quantization)
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
	if cfg, err = applyQuantization(cfg, quantization); err != nil {
		return err
	}
	if err := sh.validate(cfg); err != nil {
		return err
	}
	if fs.Changed("tp-size") {
		if err := cfg.CheckTP(*tpSize); err != nil {
			return usagef("--tp-size: %v", err)
		}
	}
	if cfg.Quantization != nil {
		if err := g.CheckFP8(); err != nil {
			return usagef("--gpu: %v", err)
		}
	}
	shapes, err := floors.Floors(cfg, g, *tpSize, sh.batch, sh.input, sh.output)
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		out := map[string]any{"model": cfg, "gpu": g, "shapes": shapes}
		if *tpSize > 0 {
			out["tp_size"] = *tpSize
		}
		return enc.Encode(out)
	}
	if err := floors.WriteFloorsTable(stdout, cfg, g, *tpSize, shapes); err != nil {
		return err
	}
	if *ops && len(shapes) > 0 {
		return floors.WriteOpFloorsTable(stdout, g, shapes[0])
	}
	return nil
}
