package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stepbench plot draws two real runs' reports, a bf16 and an FP8 KV
// cache, in one sweep and one roofline, each run its own named series;
// bad arguments are usage errors naming the flag or file.
func TestPlotPutsRunsSideBySide(t *testing.T) {
	dir := t.TempDir()
	common := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--gpu", "h200", "--batch-size", "1,2",
		"--input-len", "16", "--output-len", "3", "--num-iters", "2"}
	reports := map[string]string{"auto": filepath.Join(dir, "bf16.json"), "fp8": filepath.Join(dir, "fp8.json")}
	for dtype, path := range reports {
		if code, stdout, stderr := run(t, append(common, "--kv-cache-dtype", dtype, "--json-out", path)...); code != 0 {
			t.Fatalf("run --kv-cache-dtype %s: exit %d\n%s%s", dtype, code, stdout, stderr)
		}
	}
	out := filepath.Join(dir, "kv.svg")
	code, stdout, stderr := run(t, "plot", "--out", out, reports["auto"], reports["fp8"])
	if code != 0 {
		t.Fatalf("plot: exit %d\n%s%s", code, stdout, stderr)
	}
	for file, want := range map[string][]string{
		"kv.sweep.svg": {"bf16 cache, input 16 tokens", "fp8_e4m3 cache, input 16 tokens", "(emulated: CPU times)"},
		"kv.svg":       {"bf16 cache, decode (input 16)", "fp8_e4m3 cache, prefill (input 16)"},
	} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatalf("plot wrote no %s: %v (stdout %q)", file, err, stdout)
		}
		for _, w := range want {
			if w == "(emulated: CPU times)" {
				if strings.Contains(string(data), w) {
					t.Errorf("%s: the cpu backend's figure says %q", file, w)
				}
				continue
			}
			if !strings.Contains(string(data), w) {
				t.Errorf("%s lacks the series %q", file, w)
			}
		}
	}
	notReport := filepath.Join(dir, "notes.json")
	if err := os.WriteFile(notReport, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{reports["auto"]}, exitUsage, "--out: required"},
		{[]string{"--out", out}, exitUsage, "want REPORT.json [REPORT.json...], got none"},
		{[]string{"--out", filepath.Join(dir, "x.pdf"), reports["auto"]}, exitUsage, "must end in .svg or .png"},
		{[]string{"--out", out, "--label", "a", reports["auto"], reports["fp8"]}, exitUsage, "--label: 1 given for 2 reports"},
		{[]string{"--out", out, notReport}, exitUsage, "notes.json"},
		{[]string{"--out", out, filepath.Join(dir, "missing.json")}, exitUsage, "missing.json"},
	} {
		code, stdout, stderr := run(t, append([]string{"plot"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("plot %v: exit %d (want %d), stderr %q (want %q), stdout %q", tc.args, code, tc.code, stderr, tc.want, stdout)
		}
	}
}
