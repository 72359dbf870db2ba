package compat

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"stepbench/bench/benchtest"
)

// The goldens under testdata/python were written once by CPython's json
// module and numpy (testdata/python/gen_goldens.py); the tests only read them.

func goldenLines(t *testing.T, name string) [][2]string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "python", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][2]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		in, want, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("%s: malformed line %q", name, sc.Text())
		}
		lines = append(lines, [2]string{in, want})
	}
	if err := sc.Err(); err != nil || len(lines) == 0 {
		t.Fatalf("%s: %d lines, %v", name, len(lines), err)
	}
	return lines
}

func TestPyFloatMatchesPythonRepr(t *testing.T) {
	for _, line := range goldenLines(t, "floats.txt") {
		x, err := strconv.ParseFloat(line[0], 64)
		if err != nil {
			t.Fatalf("input %q: %v", line[0], err)
		}
		if got := pyFloat(x); got != line[1] {
			t.Errorf("pyFloat(%s) = %q, Python writes %q", line[0], got, line[1])
		}
	}
}

func TestPyStringMatchesPythonEnsureASCII(t *testing.T) {
	for _, line := range goldenLines(t, "strings.txt") {
		in := []byte{}
		if line[0] != "-" {
			var err error
			if in, err = hex.DecodeString(line[0]); err != nil {
				t.Fatal(err)
			}
		}
		if got := pyString(string(in)); got != line[1] {
			t.Errorf("pyString(%q) = %s, Python writes %s", in, got, line[1])
		}
	}
}

func TestPyDumpsLayout(t *testing.T) {
	obj := pyObject{{"a", 1}, {"b", []float64{}}, {"c", pyObject{}}, {"d", []float64{1, 0.5}}, {"e", (*float64)(nil)}}
	tests := []struct {
		indent int
		want   string
	}{
		{0, `{"a": 1, "b": [], "c": {}, "d": [1.0, 0.5], "e": null}`},
		{2, "{\n  \"a\": 1,\n  \"b\": [],\n  \"c\": {},\n  \"d\": [\n    1.0,\n    0.5\n  ],\n  \"e\": null\n}"},
	}
	for _, tc := range tests {
		got, err := pyDumps(obj, tc.indent)
		if err != nil || got != tc.want {
			t.Errorf("indent %d: got %q (%v), want %q", tc.indent, got, err, tc.want)
		}
	}
	if _, err := pyDumps(pyObject{{"x", struct{}{}}}, 0); err == nil {
		t.Error("an unsupported type encoded without error")
	}
}

// oneBatchCase is one line of testdata/python/onebatch.jsonl.
type oneBatchCase struct {
	RunName   string      `json:"run_name"`
	BatchSize int         `json:"batch_size"`
	InputLen  int         `json:"input_len"`
	OutputLen int         `json:"output_len"`
	Prefill   []float64   `json:"prefill"`
	Decode    [][]float64 `json:"decode"`
	Want      string      `json:"want"`
}

func TestOneBatchJSONLMatchesPython(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "python", "onebatch.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var want strings.Builder
	var recs []OneBatchRecord
	for _, line := range lines {
		var c oneBatchCase
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		s := benchtest.ScriptedShape(c.BatchSize, c.InputLen, c.OutputLen, c.Prefill, c.Decode)
		rec := NewOneBatchRecord(c.RunName, s)
		got, err := rec.JSON()
		if err != nil || got != c.Want {
			t.Errorf("batch %d input %d output %d:\n got %s (%v)\nwant %s", c.BatchSize, c.InputLen, c.OutputLen, got, err, c.Want)
		}
		recs = append(recs, rec)
		want.WriteString(c.Want + "\n")
	}
	path := filepath.Join(t.TempDir(), "result.jsonl")
	if err := AppendOneBatchJSONL(path, recs); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != want.String() {
		t.Errorf("file:\n%s\nwant:\n%s", got, want.String())
	}
}

func TestVLLMMatchesPython(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "python", "vllm.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c struct {
			Latencies []float64 `json:"latencies"`
			Stdout    string    `json:"stdout"`
			JSON      string    `json:"json"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		doc, err := NewVLLMLatency(c.Latencies)
		if err != nil {
			t.Fatal(err)
		}
		if got := doc.SummaryLines(); got != c.Stdout {
			t.Errorf("%d latencies: stdout\n%s\nwant\n%s", len(c.Latencies), got, c.Stdout)
		}
		path := filepath.Join(t.TempDir(), "latency.json")
		if err := WriteVLLMJSON(path, c.Latencies, ""); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != c.JSON {
			t.Errorf("%d latencies: file\n%s\nwant\n%s", len(c.Latencies), got, c.JSON)
		}
	}
}

// Whatever the float, Python's repr of it parses back to the same bits
// (repr round-trips) and has Python's shape: a point or an exponent.
func FuzzPyFloatRoundTrip(f *testing.F) {
	for _, x := range []float64{0, 1, 123, 1e-5, 1e16, 5e-324, 0.1, -2.5e300} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		s := pyFloat(x)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || math.Float64bits(back) != math.Float64bits(x) {
			t.Fatalf("pyFloat(%v) = %q parses to %v (%v)", x, s, back, err)
		}
		if !strings.ContainsAny(s, ".e") {
			t.Fatalf("pyFloat(%v) = %q: neither a point nor an exponent", x, s)
		}
	})
}
