package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"

	"stepbench/runner"
)

// cpuRunShapes are a sweep as the CPU backend reports it: host times, no
// device times, two batch sizes.
func cpuRunShapes() []ShapeResult {
	var shapes []ShapeResult
	for _, b := range []int{1, 4} {
		prefill, decode := 0.02*float64(b), 0.004+0.001*float64(b)
		shapes = append(shapes, ShapeResult{Batch: b, InputLen: 16, OutputLen: 4, Complete: true, Summary: ShapeSummary{
			PrefillHostSeconds: Summarize([]float64{prefill, prefill * 1.1}),
			DecodeHostSeconds:  Summarize([]float64{decode, decode * 1.05, decode}),
			TotalHostSeconds:   Summarize([]float64{prefill + 3*decode}),
		}})
	}
	return shapes
}

func TestPlotsFromACPURun(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := GPUPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	roof := DatasheetRoof(h100)
	for _, c := range []struct {
		name string
		roof *Roof
		ext  string
	}{{"svg with roof", &roof, ".svg"}, {"png with roof", &roof, ".png"}, {"svg without roof", nil, ".svg"}, {"png without roof", nil, ".png"}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sweep"+c.ext)
			written, err := PlotRun(path, cfg, c.roof, cpuRunShapes(), "llama-tiny on cpu")
			if err != nil {
				t.Fatal(err)
			}
			if len(written) != 2 || written[1] != filepath.Join(filepath.Dir(path), "sweep.sweep"+c.ext) {
				t.Fatalf("written %v", written)
			}
			for _, p := range written {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if c.ext == ".svg" {
					checkSVG(t, data, p == written[0])
				} else if _, err := png.Decode(bytes.NewReader(data)); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
		})
	}
	if _, err := PlotRun(filepath.Join(t.TempDir(), "x.pdf"), cfg, nil, cpuRunShapes(), "t"); err == nil {
		t.Error(".pdf accepted")
	}
	// No positive point at all must not panic on the log axes.
	if err := WriteSweepPlot(filepath.Join(t.TempDir(), "empty.svg"), nil, "empty"); err != nil {
		t.Errorf("empty sweep: %v", err)
	}
}

// checkSVG parses the whole document and wants an <svg> root with content.
func checkSVG(t *testing.T, data []byte, roofline bool) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	root, elements := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			elements++
		}
	}
	if root != "svg" || elements < 20 {
		t.Errorf("root %q with %d elements", root, elements)
	}
	if roofline && !bytes.Contains(data, []byte("decode b=4")) {
		t.Error("roofline plot lacks the point label \"decode b=4\"")
	}
}
