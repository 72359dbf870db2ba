package estimate

import (
	"bytes"
	"flag"
	"math"
	"strconv"
	"strings"
	"testing"

	"stepbench/bench/benchtest"
	"stepbench/kernels"
	"stepbench/runner"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

var pagedKV = runner.KVOptions{Layout: runner.KVPaged, PageSize: runner.DefaultPageSize}

func llama3(t *testing.T) runner.Config {
	t.Helper()
	cfg, err := runner.Preset("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func h200(t *testing.T) GPU {
	t.Helper()
	g, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestEstimateGolden: every launch of Llama-3-8B's decode at batch 1 and
// 32 over 1k keys and its 1 × 1024 prefill on an H200, under the defaults
// and --kernel fast (the tables docs/kernel.md quotes).
func TestEstimateGolden(t *testing.T) {
	cfg, g := llama3(t), h200(t)
	for _, tc := range []struct {
		name  string
		items []string
	}{
		{"default", nil},
		{"fast", []string{kernels.SetFast}},
	} {
		sel, err := kernels.ParseSelection(tc.items)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Build(cfg, g, FastShapes(), Options{Kernels: sel, KV: pagedKV}, sel.String())
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		WriteHeader(&b, r)
		for i, st := range r.Steps {
			if err := WriteLaunches(&b, st); err != nil {
				t.Fatal(err)
			}
			if err := WriteByOp(&b, st, r.Floors[i]); err != nil {
				t.Fatal(err)
			}
		}
		benchtest.CheckGolden(t, "estimate-llama-3-8b-h200-"+tc.name+".txt", b.Bytes(), *update)
	}
}

// TestEstimateAddsUp: each launch is its kernel time plus one gap, the
// step's total is the sum of its launches, the by-op table's total row is
// the sum of its rows, a gap is short of a whole one exactly on the
// programmatic edges, and only under launch=2.
func TestEstimateAddsUp(t *testing.T) {
	cfg, g := llama3(t), h200(t)
	for _, items := range [][]string{nil, {"launch=2"}, {kernels.SetFast}} {
		sel, err := kernels.ParseSelection(items)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range FastShapes() {
			st, err := Estimate(cfg, g, sh, Options{Kernels: sel, KV: pagedKV})
			if err != nil {
				t.Fatal(err)
			}
			checkSums(t, g, sel, st)
			var b bytes.Buffer
			if err := WriteByOp(&b, st, 1e-3); err != nil {
				t.Fatal(err)
			}
			checkTotalRow(t, b.String())
		}
	}
}

func checkSums(t *testing.T, g GPU, sel kernels.Selection, st Step) {
	t.Helper()
	var sum, gaps float64
	edges := 0
	for i, l := range st.Launches {
		if !near(l.TimeSec, l.KernelSec+l.GapSec) {
			t.Errorf("%s launch %d: time %g != kernel %g + gap %g", st.Shape, i, l.TimeSec, l.KernelSec, l.GapSec)
		}
		full := g.LaunchGap
		if st.Captured {
			full = g.NodeGap
		}
		want := full
		if l.Programmatic {
			want, edges = full-g.PDLSaving, edges+1
		}
		if !near(l.GapSec, want) {
			t.Errorf("%s launch %d (%s): gap %g, want %g (programmatic %v)", st.Shape, i, l.Entry, l.GapSec, want, l.Programmatic)
		}
		sum += l.TimeSec
		gaps += l.GapSec
	}
	if !near(sum, st.Total.TimeSec) || !near(gaps, st.Total.GapSec) || st.Total.Launches != len(st.Launches) || st.Total.Programmatic != edges {
		t.Errorf("%s: total %+v, launches sum to %g s, gaps %g s, %d edges", st.Shape, st.Total, sum, gaps, edges)
	}
	if (edges > 0) != (sel.LaunchVersion() == kernels.LaunchProgrammatic) {
		t.Errorf("%s under %s: %d programmatic edges", st.Shape, sel, edges)
	}
}

// checkTotalRow parses the by-op table: its total row's launches and time
// are its rows' sums (to the printed precision).
func checkTotalRow(t *testing.T, text string) {
	t.Helper()
	var launches, total int
	var ms, totalMS float64
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] == "op" {
			continue
		}
		n, err1 := strconv.Atoi(f[len(f)-8])
		v, err2 := strconv.ParseFloat(f[len(f)-1], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if f[0] == "total" {
			total, totalMS = n, v
			continue
		}
		launches += n
		ms += v
	}
	if total == 0 || launches != total || math.Abs(ms-totalMS) > 1e-3*float64(launches) {
		t.Errorf("by-op rows sum to %d launches, %.3f ms; the total row says %d, %.3f ms:\n%s", launches, ms, total, totalMS, text)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }

// TestFastSetIsTheBestEstimated holds kernels.FastSet (what --kernel fast
// runs) to the estimate's own search: it is the selection the model
// predicts fastest over FastShapes on an H200.
func TestFastSetIsTheBestEstimated(t *testing.T) {
	cfg, g := llama3(t), h200(t)
	best, sec, err := Fastest(cfg, g, FastShapes(), pagedKV)
	if err != nil {
		t.Fatal(err)
	}
	fast := kernels.FastSet()
	for _, op := range SearchedOps {
		v, chosen := fast.Chosen(op)
		bv, bchosen := best.Chosen(op)
		if chosen != bchosen || v != bv {
			t.Errorf("kernels.FastSet() = %s, the estimate's fastest is %s (%.3f ms over the shapes)", fast, best, sec*1e3)
			break
		}
	}
}

// TestEstimateRefuses: FP8 weights, a GPU the model does not know and a
// selection the layout refuses are errors, not estimates.
func TestEstimateRefuses(t *testing.T) {
	cfg, g := llama3(t), h200(t)
	if _, err := LookupGPU("a100-sxm-80gb"); err == nil {
		t.Error("an A100 estimate")
	}
	q := cfg
	q.Quantization = &runner.Quantization{}
	if _, err := Estimate(q, g, FastShapes()[0], Options{KV: pagedKV}); err == nil || !strings.Contains(err.Error(), "FP8") {
		t.Errorf("FP8 weights: %v", err)
	}
	sel, err := kernels.ParseSelection([]string{"attn_decode=5"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Estimate(cfg, g, FastShapes()[0], Options{Kernels: sel, KV: pagedKV}); err == nil {
		t.Error("attn_decode=5 on the paged layout was estimated")
	}
}
