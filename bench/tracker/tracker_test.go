package tracker

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"stepbench/bench"
	"stepbench/bench/benchtest"
	"stepbench/bench/report"
	"stepbench/runner"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

// testReport is a finished report of environment env: batch 1 with eight
// iterations (intervals), batch 2 with three (no interval), and batch 4,
// stopped early, which no format reports.
func testReport(env report.Environment) report.Report {
	cfg, _ := runner.Preset("llama-tiny")
	r := report.Report{Schema: report.Schema, ToolVersion: "v0-test", Environment: env, Config: report.RunConfig{Model: cfg}}
	shape := func(batch, iters int, complete bool) report.ShapeReport {
		prefill, decode := make([]float64, iters), make([][]float64, iters)
		for i := range iters {
			prefill[i] = 0.010 * float64(batch) * (1 + 0.01*float64(i%4))
			decode[i] = []float64{0.002, 0.0021, 0.0022}
		}
		s := report.NewShapeReport(benchtest.ScriptedShape(batch, 64, 4, prefill, decode))
		s.Complete = complete
		return s
	}
	r.Shapes = []report.ShapeReport{shape(1, 8, true), shape(2, 3, true), shape(4, 8, false)}
	return r
}

var (
	emulated = report.Environment{Backend: "cuda", Emulated: "stepbench emulated GPU", Arch: "amd64", Hostname: "box"}
	h200     = report.Environment{Backend: "cuda", GPUName: "NVIDIA H200", ComputeCapability: "9.0", GPUMemoryBytes: 150 << 30, Arch: "amd64", Hostname: "box"}
)

func write(t *testing.T, name string, env report.Environment) []byte {
	t.Helper()
	run, err := NewRun(testReport(env))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Formats[name](&b, run); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func decode(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
}

// checkFields checks that obj holds only the named fields, each of its JSON
// kind ("string", "number", "uint", "array", "object"; "!" marks a required
// one), and returns the problems.
func checkFields(path string, obj map[string]any, fields map[string]string) []string {
	var bad []string
	for name, kind := range fields {
		if _, ok := obj[name]; !ok && strings.HasPrefix(kind, "!") {
			bad = append(bad, path+"."+name+" is missing")
		}
	}
	for name, v := range obj {
		kind, ok := fields[name]
		if !ok {
			bad = append(bad, path+"."+name+" is not in the schema")
			continue
		}
		if !kindOf(v, strings.TrimPrefix(kind, "!")) {
			bad = append(bad, fmt.Sprintf("%s.%s: %v is not a %s", path, name, v, kind))
		}
	}
	return bad
}

func kindOf(v any, kind string) bool {
	switch kind {
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "uint": // ClickHouse's UInt32
		n, ok := v.(json.Number)
		i, err := n.Int64()
		return ok && err == nil && i >= 0 && i <= math.MaxUint32
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

// The PyTorch OSS benchmark database's records, checked against its v3
// table (pytorch/test-infra's clickhouse_db_schema/oss_ci_benchmark_v3:
// the benchmark, model and metric tuples and the runners array, the rest
// added by the uploader) and against the records vLLM's benchmarks write
// (benchmark.name, benchmark.extra_info.args, model.name, metric.name with
// benchmark_values, "latency" in seconds for bench latency).
func TestPyTorchBenchmarkRecords(t *testing.T) {
	for _, env := range []report.Environment{emulated, h200} {
		data := write(t, "pytorch-benchmark", env)
		var records []map[string]any
		decode(t, data, &records)
		if len(records) != 6 { // batch 1 and 2 (not 4, incomplete): prefill, decode step, iteration
			t.Fatalf("%d records, want 6:\n%s", len(records), data)
		}
		var problems []string
		for i, rec := range records {
			p := fmt.Sprintf("record %d", i)
			problems = append(problems, checkFields(p, rec, map[string]string{"benchmark": "!object", "model": "!object", "metric": "!object", "runners": "array"})...)
			b, m, met := rec["benchmark"].(map[string]any), rec["model"].(map[string]any), rec["metric"].(map[string]any)
			problems = append(problems, checkFields(p+".benchmark", b, map[string]string{"name": "!string", "mode": "string", "dtype": "string", "extra_info": "object"})...)
			problems = append(problems, checkFields(p+".model", m, map[string]string{"name": "!string", "type": "string", "backend": "string", "origins": "array", "extra_info": "object"})...)
			problems = append(problems, checkFields(p+".metric", met, map[string]string{"name": "!string", "benchmark_values": "!array", "target_value": "number", "extra_info": "object"})...)
			for _, v := range met["benchmark_values"].([]any) {
				if !kindOf(v, "number") {
					problems = append(problems, p+".metric.benchmark_values holds a non-number")
				}
			}
			for j, r := range rec["runners"].([]any) {
				problems = append(problems, checkFields(fmt.Sprintf("%s.runners[%d]", p, j), r.(map[string]any), map[string]string{
					"name": "string", "type": "string", "cpu_info": "string", "cpu_count": "uint", "mem_info": "string", "avail_mem_in_gb": "uint",
					"gpu_info": "string", "gpu_count": "uint", "gpu_mem_info": "string", "avail_gpu_mem_in_gb": "uint", "extra_info": "object"})...)
			}
			args := b["extra_info"].(map[string]any)["args"].(map[string]any)
			for _, key := range []string{"model", "batch_size", "input_len", "output_len", "tensor_parallel_size"} {
				if _, ok := args[key]; !ok {
					problems = append(problems, p+".benchmark.extra_info.args lacks vLLM's "+key)
				}
			}
			device, runner := b["extra_info"].(map[string]any)["device"], rec["runners"].([]any)[0].(map[string]any)["name"]
			if want := map[string]string{"": "cuda", "stepbench emulated GPU": "emulated"}[env.Emulated]; device != want || runner != want {
				problems = append(problems, fmt.Sprintf("%s: device %v, runner %v, want %s", p, device, runner, want))
			}
		}
		if len(problems) > 0 {
			t.Errorf("%s:\n%s", env.Backend+env.Emulated, strings.Join(problems, "\n"))
		}
		if env.Emulated != "" {
			checkGolden(t, "emulated.pytorch.json", data)
		}
	}
}

// A latency record is vLLM's bench latency record: seconds per iteration.
func TestPyTorchLatencyIsVLLMs(t *testing.T) {
	var records []struct {
		Metric struct {
			Name            string    `json:"name"`
			BenchmarkValues []float64 `json:"benchmark_values"`
		} `json:"metric"`
	}
	decode(t, write(t, "pytorch-benchmark", h200), &records)
	shape := testReport(h200).Shapes[0]
	i := slices.IndexFunc(records, func(r struct {
		Metric struct {
			Name            string    `json:"name"`
			BenchmarkValues []float64 `json:"benchmark_values"`
		} `json:"metric"`
	}) bool {
		return r.Metric.Name == "latency"
	})
	if i < 0 || !slices.Equal(records[i].Metric.BenchmarkValues, shape.IterationTotalHostSeconds) {
		t.Errorf("no latency record of the iteration totals in seconds: %+v", records)
	}
}

// github-action-benchmark's customSmallerIsBetter reads an array of
// BenchmarkResult {name: string, value: number, unit: string, range?:
// string, extra?: string} (its src/extract.ts).
func TestGitHubActionBenchmarkResults(t *testing.T) {
	data := write(t, "github-action-benchmark", emulated)
	var results []map[string]any
	decode(t, data, &results)
	var problems []string
	names := map[string]bool{}
	for i, r := range results {
		problems = append(problems, checkFields(fmt.Sprintf("result %d", i), r, map[string]string{
			"name": "!string", "value": "!number", "unit": "!string", "range": "string", "extra": "string"})...)
		name := r["name"].(string)
		if names[name] || !strings.Contains(name, "/emulated/") || !strings.Contains(r["extra"].(string), "CPU times, not a GPU's") {
			problems = append(problems, "result "+name+": a repeated name, or no emulated mark")
		}
		names[name] = true
	}
	if len(results) != 6 || len(problems) > 0 {
		t.Errorf("%d results:\n%s\n%s", len(results), strings.Join(problems, "\n"), data)
	}
	checkGolden(t, "emulated.github-action-benchmark.json", data)
}

// Bencher Metric Format, as its published JSON Schema
// (https://bencher.dev/bmf.json) says: an object of benchmarks, each an
// object of measures, each {value (required), lower_value, upper_value},
// numbers; benchmark names up to 1024 characters, measure slugs up to 64.
// latency is Bencher's built-in measure, in nanoseconds.
func TestBencherMetricFormat(t *testing.T) {
	data := write(t, "bencher", h200)
	var doc map[string]map[string]map[string]any
	decode(t, data, &doc)
	var problems []string
	for name, measures := range doc {
		if len(name) > 1024 || len(measures) == 0 {
			problems = append(problems, "benchmark "+name+": too long, or no measure")
		}
		for slug, metric := range measures {
			problems = append(problems, checkFields(name+"."+slug, metric, map[string]string{"value": "!number", "lower_value": "number", "upper_value": "number"})...)
			if len(slug) > 64 || slug != "latency" {
				problems = append(problems, name+": measure "+slug)
			}
		}
	}
	prefill := doc["stepbench/llama-tiny/NVIDIA_H200/b1_i64_o4/prefill_device"]["latency"]
	value, _ := prefill["value"].(json.Number).Float64()
	lower, _ := prefill["lower_value"].(json.Number).Float64()
	upper, _ := prefill["upper_value"].(json.Number).Float64()
	// Device times are half the scripted host times: 5 ms and up, in ns.
	if !(lower <= value && value <= upper && value > 5e6 && value < 5.5e6) {
		problems = append(problems, fmt.Sprintf("batch 1's prefill: %v [%v, %v] ns", value, lower, upper))
	}
	if _, ok := doc["stepbench/llama-tiny/NVIDIA_H200/b2_i64_o4/prefill_device"]["latency"]["lower_value"]; ok {
		problems = append(problems, "three iterations have no 95% interval, yet a lower_value")
	}
	if len(doc) != 6 || len(problems) > 0 {
		t.Errorf("%d benchmarks:\n%s\n%s", len(doc), strings.Join(problems, "\n"), data)
	}
	checkGolden(t, "h200.bencher.json", data)
}

// A report with no complete shape has nothing to report.
func TestNoCompleteShape(t *testing.T) {
	r := testReport(h200)
	r.Shapes = r.Shapes[2:]
	if _, err := NewRun(r); err == nil {
		t.Error("no error for a report of one incomplete shape")
	}
	if len(bench.IterationSeries(nil)) != 0 {
		t.Error("series of no iterations")
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	benchtest.CheckGolden(t, name, got, *update)
}
