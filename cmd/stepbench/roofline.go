package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/floors"
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
	tpSize := fs.Int("tp-size", 0, "floors of one GPU of this many tensor-parallel GPUs: its share of the work and its all-reduces at the preset's link bandwidth (0: the whole model on one GPU)")
	var quantization string
	registerQuantization(fs, &quantization)
	kv := registerRooflineKV(fs)
	seed := fs.Uint64("seed", 42, "with --context-lens uniform:LO-HI or normal:MEAN,SD: the seed of the lengths (run's --seed draws the same)")
	est := registerEstimateFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := est.check(fs); err != nil {
		return err
	}
	if err := kv.check(fs); err != nil {
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
	checked := sh
	if kv.contextLens != "" {
		checked.input = []int{1} // the lengths are checked as they are drawn (sweep)
	}
	if err := checked.validate(cfg); err != nil {
		return err
	}
	if est.on {
		return est.run(stdout, cfg, *gpu, *format, kv.options(*seed), sh)
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
	shapes, err := rooflineShapes(fs, cfg, g, *tpSize, kv, sh, *seed)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeRooflineJSON(stdout, cfg, g, *tpSize, shapes)
	}
	if kv.dtype.FP8() {
		fmt.Fprintf(stdout, "KV cache %s: one byte per cached element (rope_kv_write's write, attention's read), and each layer's K and V scales\n", kv.dtype)
	}
	if err := floors.WriteFloorsTable(stdout, cfg, g, *tpSize, shapes); err != nil {
		return err
	}
	if *ops && len(shapes) > 0 {
		return floors.WriteOpFloorsTable(stdout, g, shapes[0])
	}
	return nil
}

// writeRooflineJSON prints the floors as --format json.
func writeRooflineJSON(stdout io.Writer, cfg runner.Config, g roofline.Preset, tpSize int, shapes []floors.ShapeFloors) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	out := map[string]any{"model": cfg, "gpu": g, "shapes": shapes}
	if tpSize > 0 {
		out["tp_size"] = tpSize
	}
	return enc.Encode(out)
}

// registerRooflineKV registers roofline's KV cache flags: --context-lens,
// --kv-fill and --kv-layout as run's. --page-size and --page-order change
// no figure (the cost model counts no page-table reads), so roofline has
// none.
func registerRooflineKV(fs *pflag.FlagSet) *kvFlags {
	k := &kvFlags{pageSize: runner.DefaultPageSize, order: runner.PagesSequential}
	fs.StringVar(&k.contextLens, "context-lens", "", "a ragged batch: each sequence's length instead of --input-len: a list 1024,3072 (the batch size is its length), uniform:LO-HI or normal:MEAN,SD (drawn per batch size, seeded by --seed, as run draws them): every step's KV bytes are the sum of the lengths")
	fs.StringVar(&k.fill, "kv-fill", bench.KVFillPrefill, "prefill (the prefill computes each whole context) or synthetic (the prefill runs each sequence's last token over a filled context), as run's")
	fs.StringVar(&k.cacheDType, "kv-cache-dtype", "auto", "the KV cache's element type, as run's: auto (bf16, 2 bytes per cached element) or fp8, fp8_e4m3, fp8_e5m2 (1 byte, and each layer's K and V scales)")
	fs.StringVar(&k.layout, "kv-layout", defaultKVLayout, "the KV cache's layout, as run's: paged or contiguous (a step through the block table, paged or ragged, moves 28 bytes per sequence more to advance its views; the page size and order change no figure: the cost model counts no page-table reads)")
	return k
}

// rooflineShapes costs the shapes: the cross product of the lists as
// always, or, with --context-lens, --kv-fill or --kv-layout, the run's
// shapes (bench.Options.Shapes) under the layout, with their KV tokens.
func rooflineShapes(fs *pflag.FlagSet, cfg runner.Config, g roofline.Preset, tpSize int, kv *kvFlags, sh shapeFlags, seed uint64) ([]floors.ShapeFloors, error) {
	if !fs.Changed("context-lens") && !fs.Changed("kv-fill") && !fs.Changed("kv-layout") && !fs.Changed("kv-cache-dtype") {
		return floors.Floors(cfg, g, tpSize, sh.batch, sh.input, sh.output)
	}
	shapes, err := sweep(kv, sh, seed, cfg)
	if err != nil {
		return nil, err
	}
	return floors.FloorsOf(cfg, g, roofline.Costs{TPSize: tpSize, KV: kv.options(seed)}, shapes)
}
