package main

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"stepbench/bench/benchtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

// checkGolden compares got with testdata/golden/name (rewriting it with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	benchtest.CheckGolden(t, name, got, *update)
}

// roofline --format json: snake_case keys everywhere, null for a shape
// without decode steps.
func TestRooflineJSONGolden(t *testing.T) {
	code, stdout, stderr := run(t, "roofline", "--model", "llama-tiny", "--gpu", "h200", "--batch-size", "1", "2",
		"--input-len", "8", "--output-len", "1", "3", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkGolden(t, "roofline.json", []byte(stdout))
	var doc any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, child := range x {
				if k != strings.ToLower(k) || strings.ContainsAny(k, " -") {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, child)
			}
		case []any:
			for _, child := range x {
				walk(path+"[]", child)
			}
		}
	}
	walk("", doc)
	if !strings.Contains(stdout, `"decode": null`) {
		t.Error("a shape without decode steps should have \"decode\": null")
	}
}
