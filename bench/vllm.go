package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// VLLMLatency is vLLM's `bench latency --output-json` document. Latencies
// are seconds; one latency is one iteration (prefill + every decode step).
type VLLMLatency struct {
	AvgLatency  float64         `json:"avg_latency"`
	StdLatency  float64         `json:"std_latency"` // population, ddof=0 (np.std)
	Latencies   []float64       `json:"latencies"`
	Percentiles VLLMPercentiles `json:"percentiles"`
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

// NewVLLMLatency computes vLLM's latency document from iteration latencies
// (host seconds).
func NewVLLMLatency(iterationLatencies []float64) (VLLMLatency, error) {
	if len(iterationLatencies) == 0 {
		return VLLMLatency{}, errors.New("vLLM latency: no iterations")
	}
	for i, x := range iterationLatencies {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return VLLMLatency{}, fmt.Errorf("vLLM latency: iteration %d latency is %v", i, x)
		}
	}
	s := Summarize(iterationLatencies)
	return VLLMLatency{
		AvgLatency: s.Mean,
		StdLatency: s.Std,
		Latencies:  append([]float64(nil), iterationLatencies...),
		Percentiles: VLLMPercentiles{
			P10: s.P10, P25: s.P25, P50: s.P50, P75: s.P75, P90: s.P90, P99: s.P99,
		},
	}, nil
}

// WriteVLLMJSON writes vLLM's latency JSON for the iterations' latencies
// (host seconds, each prefill + all decode steps) to path, atomically.
func WriteVLLMJSON(path string, iterationLatencies []float64) error {
	doc, err := NewVLLMLatency(iterationLatencies)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	data, err := json.MarshalIndent(doc, "", "    ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// IterationLatencies lists every timed iteration's total host latency of
// the shapes, in order: the input of WriteVLLMJSON.
func IterationLatencies(shapes []ShapeResult) []float64 {
	var latencies []float64
	for _, s := range shapes {
		for _, it := range s.Iterations {
			latencies = append(latencies, it.TotalHostSeconds)
		}
	}
	return latencies
}
