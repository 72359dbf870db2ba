package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// OneBatchRecord is one line of SGLang one_batch's --result-filename JSONL:
// one shape. The field order is the key order written. Latencies are host
// seconds, throughputs tokens/s.
type OneBatchRecord struct {
	RunName   string `json:"run_name"`
	BatchSize int    `json:"batch_size"`
	InputLen  int    `json:"input_len"`
	OutputLen int    `json:"output_len"`
	// PrefillLatency is the median over iterations of the prefill latency.
	PrefillLatency    float64 `json:"prefill_latency"`
	PrefillThroughput float64 `json:"prefill_throughput"` // batch*input_len / PrefillLatency
	// MedianDecodeLatency is the median over every decode step of every
	// iteration; nil (left out) when output_len == 1, as one_batch.
	MedianDecodeLatency    *float64 `json:"median_decode_latency,omitempty"`
	MedianDecodeThroughput *float64 `json:"median_decode_throughput,omitempty"` // batch / MedianDecodeLatency
	// TotalLatency is the median over iterations of prefill + Σ decode.
	TotalLatency      float64 `json:"total_latency"`
	OverallThroughput float64 `json:"overall_throughput"` // (input_len+output_len)*batch / TotalLatency
}

// NewOneBatchRecord condenses a shape's timed iterations into one_batch's
// record. With one iteration it equals what one_batch writes.
func NewOneBatchRecord(runName string, s ShapeResult) OneBatchRecord {
	var prefill, totals, decode []float64
	for _, it := range s.Iterations {
		prefill = append(prefill, it.Prefill.HostSeconds)
		totals = append(totals, it.TotalHostSeconds)
		for _, d := range it.Decode {
			decode = append(decode, d.HostSeconds)
		}
	}
	rec := OneBatchRecord{
		RunName:   runName,
		BatchSize: s.Batch,
		InputLen:  s.InputLen,
		OutputLen: s.OutputLen,
	}
	if len(prefill) > 0 {
		rec.PrefillLatency = Median(prefill)
		rec.TotalLatency = Median(totals)
	}
	rec.PrefillThroughput = tokensPerSecond(s.Batch*s.InputLen, rec.PrefillLatency)
	rec.OverallThroughput = tokensPerSecond((s.InputLen+s.OutputLen)*s.Batch, rec.TotalLatency)
	if s.OutputLen > 1 && len(decode) > 0 {
		median := Median(decode)
		throughput := tokensPerSecond(s.Batch, median)
		rec.MedianDecodeLatency = &median
		rec.MedianDecodeThroughput = &throughput
	}
	return rec
}

// AppendOneBatchJSONL appends one JSON object per record to path, creating
// it when missing and never truncating it (one_batch's --result-filename).
// The records are written in one write call.
func AppendOneBatchJSONL(path string, recs []OneBatchRecord) error {
	var buf bytes.Buffer
	for i, rec := range recs {
		line, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("encode one_batch record %d: %w", i, err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	_, writeErr := f.Write(buf.Bytes())
	closeErr := f.Close()
	if err := errors.Join(writeErr, closeErr); err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	return nil
}
