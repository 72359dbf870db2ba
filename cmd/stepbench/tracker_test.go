package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// run --format pytorch-benchmark, github-action-benchmark and bencher put a
// dashboard's file on stdout (the text goes to stderr) that parses as the
// format's JSON, one series per shape and metric, named by the device.
func TestRunWritesTrackerFormats(t *testing.T) {
	base := []string{"run", "--device", "cpu", "--batch-size", "1,2", "--input-len", "8", "--output-len", "3", "--num-iters", "6"}
	for format, check := range map[string]func(string) (int, bool){
		"pytorch-benchmark": func(out string) (int, bool) {
			var recs []struct {
				Benchmark struct{ Name string } `json:"benchmark"`
				Metric    struct {
					Name   string    `json:"name"`
					Values []float64 `json:"benchmark_values"`
				} `json:"metric"`
				Runners []struct{ Name string } `json:"runners"`
			}
			err := json.Unmarshal([]byte(out), &recs)
			return len(recs), err == nil && recs[0].Benchmark.Name == "stepbench" && len(recs[0].Metric.Values) == 6 && recs[0].Runners[0].Name == "cpu"
		},
		"github-action-benchmark": func(out string) (int, bool) {
			var results []struct{ Name, Unit string }
			err := json.Unmarshal([]byte(out), &results)
			return len(results), err == nil && results[0].Unit == "ms" && strings.Contains(results[0].Name, "/cpu/")
		},
		"bencher": func(out string) (int, bool) {
			var doc map[string]map[string]struct {
				Value float64 `json:"value"`
			}
			err := json.Unmarshal([]byte(out), &doc)
			return len(doc), err == nil && doc["stepbench/llama-tiny/cpu/b2_i8_o3_paged16/decode_step_device"]["latency"].Value > 0
		},
	} {
		code, stdout, stderr := runBinary(t, nil, append(base, "--format", format)...)
		if n, ok := check(stdout); code != 0 || !ok || n != 6 || !strings.Contains(stderr, "summary") {
			t.Errorf("--format %s: exit %d, %d series (want 6), ok %v\nstdout:\n%s\nstderr:\n%s", format, code, n, ok, stdout, stderr)
		}
	}
	if code, _, stderr := run(t, append(base, "--format", "bmf")...); code != exitUsage || !strings.Contains(stderr, "pytorch-benchmark, github-action-benchmark or bencher") {
		t.Errorf("--format bmf: exit %d, %q", code, stderr)
	}
}
