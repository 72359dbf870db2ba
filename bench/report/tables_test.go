package report

import (
	"bytes"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/breakdown"
	"stepbench/bench/roofline"
	"stepbench/runner"
)

func TestWriteBreakdownTable(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	h100, _ := roofline.LookupPreset("h100-sxm")
	roof := h100.Roof()
	sb, err := breakdown.Measure(e, bench.Shape{Batch: 2, InputLen: 16, OutputLen: 4}, 7, &roof)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteBreakdownTable(&out, sb, &roof); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"prefill breakdown: batch_size=2 input_len=16 output_len=4", "decode breakdown", "qkv_proj", "(outside ops)", "attain(derived)", "attainment under the datasheet roof (H100 SXM5 80GB)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
