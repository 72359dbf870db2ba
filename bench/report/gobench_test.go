package report

import (
	"bytes"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/kernelbench"

	"golang.org/x/perf/benchfmt"
)

func TestWriteGoBenchParsesWithBenchfmt(t *testing.T) {
	shape := benchtest.ScriptedShape(2, 64, 3, []float64{0.01, 0.011}, [][]float64{{0.001, 0.002}, {0.0011, 0.0021}})
	var buf bytes.Buffer
	config := GoBenchConfig{"gpu": "NVIDIA H200", "backend": "cuda", "empty": ""}
	if err := WriteGoBench(&buf, "llama tiny", config, []bench.ShapeResult{shape}); err != nil {
		t.Fatal(err)
	}
	kernels := []kernelbench.Result{{Op: "qkv_proj", ShapeLabel: "batch=1/seq=1/pos=64", DeviceSeconds: []float64{1e-5, 1.1e-5}, Bytes: 1e6, FLOPs: 1e9}}
	if err := WriteKernelGoBench(&buf, nil, kernels); err != nil {
		t.Fatal(err)
	}
	reader := benchfmt.NewReader(strings.NewReader(buf.String()), "out.txt")
	counts := map[string]int{}
	var config0 string
	for reader.Scan() {
		switch rec := reader.Result().(type) {
		case *benchfmt.Result:
			full := string(rec.Name.Full())
			base := string(rec.Name.Base())
			counts[base]++
			if base == "Decode" && !strings.Contains(full, "/model=llama_tiny/batch=2/input=64/output=3") {
				t.Errorf("decode name %q", full)
			}
			if v, ok := rec.Value("sec/op"); !ok || v <= 0 {
				t.Errorf("%s: no positive sec/op (values %+v)", full, rec.Values)
			}
			if config0 == "" {
				config0 = rec.GetConfig("gpu")
			}
			wantUnit := "tokens/s"
			if base == "Kernel" {
				wantUnit = "GB/s"
			}
			if _, ok := rec.Value(wantUnit); !ok {
				t.Errorf("%s: no %s", full, wantUnit)
			}
		case *benchfmt.SyntaxError:
			t.Errorf("syntax error: %v", rec)
		}
	}
	if err := reader.Err(); err != nil {
		t.Fatal(err)
	}
	if counts["Prefill"] != 2 || counts["Decode"] != 4 || counts["Kernel"] != 2 {
		t.Errorf("result counts %v, want Prefill 2, Decode 4, Kernel 2\n%s", counts, buf.String())
	}
	if config0 != "NVIDIA H200" {
		t.Errorf("gpu config %q", config0)
	}
	if err := WriteGoBench(&buf, "m", GoBenchConfig{"Bad Key": "x"}, nil); err == nil {
		t.Error("bad configuration key accepted")
	}
}
