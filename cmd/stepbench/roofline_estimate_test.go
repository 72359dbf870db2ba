package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRooflineEstimate: --estimate prints the per-launch ESTIMATE (every
// header labelled, the selection named, --kernel fast as such), writes it
// with --json-out, and refuses its flags without it and GPUs it does not know.
func TestRooflineEstimate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "estimate.json")
	common := []string{"roofline", "--estimate", "--gpu", "h200", "--model", "llama-3-8b", "--batch-size", "1", "--input-len", "1024"}
	code, stdout, stderr := run(t, append(common, "--kernel", "fast", "--json-out", out)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"ESTIMATE (a model of the launches, not a measurement): llama-3-8b on H200 SXM 141GB, kernels fast: launch=2 linear=4",
		"ESTIMATE decode B=1, KV 1024: every launch",
		"gemv_silu_norm_t8",
		"ESTIMATE decode B=1, KV 1024: 3.859 ms, 198 launches (197 programmatic edges)",
		"ESTIMATE prefill 1 × 1024: 21.081 ms",
		"hbm_rate          4.3e+12",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the estimate lacks %q:\n%s", want, stdout)
		}
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasSuffix(line, "every launch") || strings.HasSuffix(line, "by op") {
			if !strings.HasPrefix(line, "ESTIMATE ") {
				t.Errorf("a table's header is not labelled ESTIMATE: %q", line)
			}
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Label   string `json:"label"`
		Kernels string `json:"kernels"`
		Steps   []struct {
			Launches []json.RawMessage `json:"launches"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Label != "ESTIMATE" || !strings.HasPrefix(rep.Kernels, "fast:") || len(rep.Steps) != 2 || len(rep.Steps[1].Launches) != 198 {
		t.Errorf("--json-out: label %q, kernels %q, %d steps", rep.Label, rep.Kernels, len(rep.Steps))
	}
	for _, bad := range [][]string{
		{"roofline", "--model", "llama-3-8b", "--launches=false"},
		{"roofline", "--model", "llama-3-8b", "--kernel", "fast"},
		{"roofline", "--estimate", "--gpu", "a100-sxm-80gb", "--model", "llama-3-8b"},
		{"roofline", "--estimate", "--gpu", "h200", "--model", "llama-3-8b", "--kernel", "attn_decode=9"},
		{"roofline", "--estimate", "--gpu", "h200", "--model", "llama-3-8b", "--tp-size", "2"},
		{"roofline", "--estimate", "--gpu", "h200", "--model", "llama-3-8b", "--context-lens", "100,200"},
	} {
		if code, _, stderr := run(t, bad...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", bad, code, stderr, exitUsage)
		}
	}
}
