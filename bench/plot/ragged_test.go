package plot

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/report"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

// raggedSweepReports are llama-3-8b on an H100 under its datasheet roof:
// ragged batches of 2 to 32 sequences of 200 to 8000 tokens (uniform,
// seeded) generating 4 tokens, 8 iterations each at 1.4× (prefill) and 1.6×
// (decode) their floors with a few percent of jitter.
func raggedSweepReports(t *testing.T) ([]report.ShapeReport, roofline.Roof) {
	t.Helper()
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := roofline.LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	roof := h100.Roof()
	spec := bench.LengthSpec{Dist: bench.DistUniform, Lo: 200, Hi: 8000}
	var shapes []bench.ShapeResult
	for _, b := range []int{2, 4, 8, 16, 32} {
		lens, err := spec.Lengths(b, 42, 8000)
		if err != nil {
			t.Fatal(err)
		}
		sh := bench.RaggedShape(lens, 4, "")
		f, err := roofline.Costs{}.Floors(cfg, roof, report.CostShape(sh))
		if err != nil {
			t.Fatal(err)
		}
		var prefill []float64
		var decode [][]float64
		for i := range 8 {
			jitter := 1 + 0.04*math.Sin(float64(7*i+b))
			prefill = append(prefill, 2*1.4*f.PrefillFloor.Seconds*jitter)
			decode = append(decode, []float64{2 * 1.6 * f.DecodeFloors[0].Seconds * jitter, 2 * 1.6 * f.DecodeFloors[1].Seconds * jitter,
				2 * 1.6 * f.DecodeFloors[2].Seconds / jitter})
		}
		s := benchtest.ScriptedShape(b, sh.InputLen, 4, prefill, decode)
		s.Shape = sh
		shapes = append(shapes, s)
	}
	return report.Builder{Model: cfg, Roof: &roof}.Shapes(shapes), roof
}

// A ragged sweep's figure plots step time and attainment against the KV
// tokens of each step, each point labelled with its batch size; its
// roofline puts the ragged batches in one series per phase. Every text
// lies inside the canvas. A uniform sweep keeps its figure (against batch
// size: TestFiguresOfASweep).
func TestRaggedSweepAgainstKVTokens(t *testing.T) {
	reports, roof := raggedSweepReports(t)
	dir := t.TempDir()
	written, err := Run(filepath.Join(dir, "r.svg"), &roof, reports, "llama-3-8b on H100")
	if err != nil {
		t.Fatal(err)
	}
	sweepSVG, _ := os.ReadFile(written[1])
	for _, want := range []string{"step time and attainment against KV tokens", "KV tokens after the step", "prefill: attainment",
		"decode (median step): attainment", "floor / time (%)", "output 4 tokens", "label: batch size", "b=32", "b=2"} {
		if !bytes.Contains(sweepSVG, []byte(want)) {
			t.Errorf("ragged sweep lacks %q", want)
		}
	}
	if bytes.Contains(sweepSVG, []byte("batch size</text>")) && bytes.Contains(sweepSVG, []byte(">input ")) {
		t.Error("ragged sweep has a batch-size axis or input-length series")
	}
	rooflineSVG, _ := os.ReadFile(written[0])
	if c := bytes.Count(rooflineSVG, []byte("(ragged batches)")); c != 2 || bytes.Contains(rooflineSVG, []byte("input 1")) {
		t.Errorf("roofline: %d ragged series (want prefill and decode), or a series per mean input length", c)
	}
	for _, path := range written {
		w, h, texts, _ := readSVG(t, path)
		for _, s := range texts {
			if b := s.box(); b.Min.X < 0 || b.Min.Y < 0 || float64(b.Max.X) > w || float64(b.Max.Y) > h {
				t.Errorf("%s: %q at %v lies outside the %gx%g canvas", filepath.Base(path), s.text, b, w, h)
			}
		}
	}
	// The decode points sit at the median step's KV tokens: each sequence
	// (4−2)/2 = 1 token on past its length, plus the step's own.
	for _, r := range reports {
		if p := stepPointOf(r, bench.PhaseDecode); p.KVTokens != r.Shape.KVTokens()+2*r.Batch || pointKVTokens(p) != p.KVTokens {
			t.Errorf("%s: decode point at %d KV tokens, want %d", r.Shape, p.KVTokens, r.Shape.KVTokens()+2*r.Batch)
		}
	}
	if out := os.Getenv("STEPBENCH_PLOT_DIR"); out != "" {
		if _, err := Run(filepath.Join(out, "ragged.png"), &roof, reports, "llama-3-8b on H100"); err != nil {
			t.Fatal(err)
		}
	}
	// Without a roof: the times alone, no attainment.
	path := filepath.Join(dir, "noroof.svg")
	if err := WriteSweepPlot(path, []SweepPoint{{Batch: 2, InputLen: 10, OutputLen: 3, Ragged: true, PrefillKVTokens: 20, DecodeKVTokens: 24,
		PrefillSeconds: 1e-3, DecodeSeconds: 1e-4}}, "no roof"); err != nil {
		t.Fatal(err)
	}
	if svg, _ := os.ReadFile(path); !bytes.Contains(svg, []byte("KV tokens after the step")) || strings.Contains(string(svg), "attainment") {
		t.Error("a ragged sweep without floors: want KV tokens and no attainment")
	}
}

func stepPointOf(r report.ShapeReport, phase string) roofline.Point {
	for _, p := range r.RooflinePoints {
		if p.Phase == phase && p.Op == "" {
			return p
		}
	}
	return roofline.Point{}
}
