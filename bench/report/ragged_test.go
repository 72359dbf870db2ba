package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/breakdown"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

// raggedShapes are a ragged batch (512 and 1536 tokens), a uniform batch
// over synthetic contexts, and twelve ragged sequences (their lengths
// abbreviated), each with scripted times.
func raggedShapes() []bench.ShapeResult {
	shape := func(sh bench.Shape) bench.ShapeResult {
		decode := make([][]float64, 7)
		for i := range decode {
			decode[i] = make([]float64, sh.OutputLen-1)
			for j := range decode[i] {
				decode[i][j] = 0.002 + 0.0001*float64(i%3)
			}
		}
		s := benchtest.ScriptedShape(sh.Batch, sh.InputLen, sh.OutputLen, []float64{0.010, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016}, decode)
		s.Shape = sh
		return s
	}
	twelve := []int{100, 2000, 300, 1900, 500, 600, 700, 800, 900, 1000, 1100, 1200}
	return []bench.ShapeResult{
		shape(bench.RaggedShape([]int{512, 1536}, 4, "")),
		shape(bench.RaggedShape([]int{64, 64}, 3, bench.KVFillSynthetic)),
		shape(bench.RaggedShape(twelve, 2, "")),
	}
}

// A ragged run's summary tables give each shape's mean input ("~2048"),
// its KV tokens, the lengths under the table (a long list abbreviated) and
// what the columns mean, within SummaryColumns; its floors and points are
// the ragged costs (the sum of the lengths, not batch × the longest).
func TestRaggedSummaryGolden(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	roof := roofline.NewRoof(roofline.SourceDatasheet, "test", 1e12, 1e10)
	kv := runner.KVOptions{Layout: runner.KVPaged, PageSize: 16}
	reports := Builder{Model: cfg, Roof: &roof, KV: kv}.Shapes(raggedShapes())
	var plain, wide bytes.Buffer
	if err := WriteSummaryTable(&plain, reports, &roof); err != nil {
		t.Fatal(err)
	}
	if err := WriteWideSummaryTable(&wide, reports, &roof); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "summary_ragged.txt", append(plain.Bytes(), wide.Bytes()...))
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > SummaryColumns {
			t.Errorf("%d columns, over %d: %q", n, SummaryColumns, l)
		}
	}
	for _, want := range []string{"kv_tokens", "~1024", "2048", "b2 o4: context lengths 512,1536", "b2 o3: every context 64 tokens, filled synthetically",
		"100,2000,300,1900,…,900,1000,1100,1200 (12 sequences, 100..2000)", RaggedLegend[:20]} {
		if !strings.Contains(plain.String(), want) || !strings.Contains(wide.String(), want) {
			t.Errorf("the tables lack %q:\n%s\n%s", want, plain.String(), wide.String())
		}
	}
	// The floors are the ragged costs under the layout.
	c := roofline.Costs{KV: kv}
	sf, err := c.Floors(cfg, roof, CostShape(reports[0].Shape))
	if err != nil {
		t.Fatal(err)
	}
	if reports[0].DecodeBytes != sf.Decode[0].Bytes || reports[0].PrefillBytes != sf.Prefill.Bytes || sf.Decode[0].KVTokens != 2048+2 {
		t.Errorf("report's decode bytes %.0f prefill %.0f, the ragged floors' %.0f %.0f (kv tokens %d)", reports[0].DecodeBytes, reports[0].PrefillBytes,
			sf.Decode[0].Bytes, sf.Prefill.Bytes, sf.Decode[0].KVTokens)
	}
	if p := stepPoint(reports[0].RooflinePoints, bench.PhaseDecode); p.KVTokens != 2048+2*2 {
		t.Errorf("decode point at %d kv tokens, want 2052 (the median of 3 steps: each sequence 2 tokens on)", p.KVTokens)
	}
}

// Every ragged shape of a native report records its lengths, its fill and
// its KV tokens; a uniform shape none of them.
func TestRaggedShapeReportJSON(t *testing.T) {
	shapes := append(raggedShapes(), benchtest.ScriptedShape(2, 16, 2, []float64{0.01}, [][]float64{{0.001}}))
	reports := Builder{}.Shapes(shapes)
	data, err := json.Marshal(reports)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		lens, fill string
		kvTokens   float64
	}{{"512,1536", "", 2048}, {"", "synthetic", 128}, {"100,2000,300,1900,500,600,700,800,900,1000,1100,1200", "", 11100}, {"", "", 0}} {
		lens, _ := got[i]["context_lens"].(string)
		fill, _ := got[i]["kv_fill"].(string)
		kv, _ := got[i]["kv_tokens"].(float64)
		if lens != want.lens || fill != want.fill || kv != want.kvTokens {
			t.Errorf("shape %d: context_lens %q kv_fill %q kv_tokens %v, want %q %q %v", i, lens, fill, kv, want.lens, want.fill, want.kvTokens)
		}
	}
}

// A ragged batch's gobench lines name its KV tokens and lengths (and a
// synthetic fill), its prefill's tokens/s counts its prompts, and the
// configuration lines carry the layout and the lengths' spec and seed; a
// uniform contiguous run's lines and configuration are as they were.
func TestWriteGoBenchRagged(t *testing.T) {
	var buf bytes.Buffer
	cfg := KVGoBenchConfig(&KVCache{Layout: "paged", PageSize: 16, PageOrder: "shuffled", ContextLens: "uniform:8-64", KVFill: "prefill"}, 7)
	if err := WriteGoBench(&buf, "m", cfg, raggedShapes()[:2]); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"context_lens: uniform:8-64\n", "kv_layout: paged 16 shuffled\n", "seed: 7\n",
		"BenchmarkPrefill/model=m/batch=2/input=1024/output=4/kv=2048/lens=512,1536-1\t1\t10000000 ns/op\t5000000 device-ns/op\t204800.00 tokens/s\n",
		"BenchmarkPrefill/model=m/batch=2/input=64/output=3/kv=128/fill=synthetic-1\t1\t10000000 ns/op\t5000000 device-ns/op\t200.00 tokens/s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if c := KVGoBenchConfig(&KVCache{Layout: "contiguous", KVFill: "prefill"}, 42); len(c) != 0 {
		t.Errorf("a uniform contiguous run's configuration adds %v", c)
	}
}

// A ragged batch's breakdown tables name its lengths.
func TestWriteBreakdownTableRagged(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sb, err := breakdown.Measure(e, bench.RaggedShape([]int{5, 19}, 3, ""), 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteBreakdownTable(&out, sb, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"prefill breakdown: batch_size=2 input_len=12 output_len=3 context_lens=5,19 (", "decode breakdown: batch_size=2 input_len=12"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
