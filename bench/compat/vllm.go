package compat

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"stepbench/bench"
	"stepbench/bench/internal/files"
	"stepbench/bench/stats"
)

// VLLMLatency is vLLM's `bench latency --output-json` document for one
// shape. Latencies are seconds; one latency is one iteration (prefill +
// every decode step, host time), in the order measured.
type VLLMLatency struct {
	AvgLatency  float64         `json:"avg_latency"` // np.mean
	StdLatency  float64         `json:"std_latency"` // np.std: population, ddof=0
	Latencies   []float64       `json:"latencies"`
	Percentiles VLLMPercentiles `json:"percentiles"`
	// Ragged is a ragged or synthetically filled batch's lengths, written
	// after percentiles (vLLM's bench latency has only --input-len).
	Ragged *Ragged `json:"-"`
	// Device is "" on a GPU (the file is vLLM's, byte for byte), else
	// DeviceCPU or DeviceEmulated, written last.
	Device string `json:"device,omitempty"`
}

// VLLMPercentiles are np.percentile's values, keyed as vLLM keys them.
type VLLMPercentiles struct {
	P10 float64 `json:"10"`
	P25 float64 `json:"25"`
	P50 float64 `json:"50"`
	P75 float64 `json:"75"`
	P90 float64 `json:"90"`
	P99 float64 `json:"99"`
}

// NewVLLMLatency computes vLLM's latency document from one shape's
// iteration latencies (host seconds, in the order measured).
func NewVLLMLatency(iterationLatencies []float64) (VLLMLatency, error) {
	if len(iterationLatencies) == 0 {
		return VLLMLatency{}, errors.New("vLLM latency: no iterations")
	}
	for i, x := range iterationLatencies {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return VLLMLatency{}, fmt.Errorf("vLLM latency: iteration %d latency is %v", i, x)
		}
	}
	s := stats.Summarize(iterationLatencies)
	return VLLMLatency{
		AvgLatency: s.Mean,
		StdLatency: s.Std,
		Latencies:  append([]float64(nil), iterationLatencies...),
		Percentiles: VLLMPercentiles{
			P10: s.P10, P25: s.P25, P50: s.P50, P75: s.P75, P90: s.P90, P99: s.P99,
		},
	}, nil
}

func (d VLLMLatency) percentiles() []struct {
	label string
	value float64
} {
	p := d.Percentiles
	return []struct {
		label string
		value float64
	}{{"10", p.P10}, {"25", p.P25}, {"50", p.P50}, {"75", p.P75}, {"90", p.P90}, {"99", p.P99}}
}

// JSON is the file vLLM writes: json.dump(results, f, indent=4), byte for
// byte (Python's float repr, no newline at the end).
func (d VLLMLatency) JSON() (string, error) {
	var percentiles pyObject
	for _, p := range d.percentiles() {
		percentiles = append(percentiles, pyField{p.label, p.value})
	}
	doc := pyObject{
		{"avg_latency", d.AvgLatency},
		{"std_latency", d.StdLatency},
		{"latencies", d.Latencies},
		{"percentiles", percentiles},
	}
	doc = append(doc, d.Ragged.fields()...)
	if d.Device != "" {
		doc = append(doc, pyField{"device", d.Device})
	}
	return pyDumps(doc, 4)
}

// SummaryLines are the lines vLLM's bench latency prints after its
// iterations: "Avg latency: X seconds", "Std latency: X seconds" and one
// "P% percentile latency: X seconds" per percentile, X in Python's repr.
func (d VLLMLatency) SummaryLines() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Avg latency: %s seconds\n", pyFloat(d.AvgLatency))
	fmt.Fprintf(&b, "Std latency: %s seconds\n", pyFloat(d.StdLatency))
	for _, p := range d.percentiles() {
		fmt.Fprintf(&b, "%s%% percentile latency: %s seconds\n", p.label, pyFloat(p.value))
	}
	return b.String()
}

// WriteVLLMJSON writes vLLM's latency JSON of one shape's iterations (host
// seconds, each prefill + all decode steps) to path, atomically; device
// (see Device) marks a CPU's times.
func WriteVLLMJSON(path string, iterationLatencies []float64, device string) error {
	doc, err := NewVLLMLatency(iterationLatencies)
	if err != nil {
		return err
	}
	doc.Device = device
	return doc.Write(path)
}

// VLLMLatencyOf is vLLM's latency document of a measured shape: its
// iterations' latencies (IterationLatencies) and, for a ragged batch, its
// lengths.
func VLLMLatencyOf(s bench.ShapeResult) (VLLMLatency, error) {
	doc, err := NewVLLMLatency(IterationLatencies(s))
	doc.Ragged = raggedOf(s.Shape)
	return doc, err
}

// Write writes the document to path (JSON), atomically.
func (d VLLMLatency) Write(path string) error {
	text, err := d.JSON()
	if err != nil {
		return err
	}
	return files.WriteAtomic(path, []byte(text))
}

// VLLMPath is where --output-json F puts one shape's vLLM file: F itself
// when the sweep has one shape (as vLLM, which runs one shape per
// invocation), else F's name with _batch{B}_input{I}_output{O} before its
// extension (lat.json → lat_batch8_input1024_output16.json).
func VLLMPath(path string, severalShapes bool, batch, inputLen, outputLen int) string {
	if !severalShapes {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s_batch%d_input%d_output%d%s", strings.TrimSuffix(path, ext), batch, inputLen, outputLen, ext)
}

// IterationLatencies lists a shape's timed iterations' total host
// latencies, in order: the input of WriteVLLMJSON.
func IterationLatencies(s bench.ShapeResult) []float64 {
	latencies := make([]float64, 0, len(s.Iterations))
	for _, it := range s.Iterations {
		latencies = append(latencies, it.TotalHostSeconds)
	}
	return latencies
}
