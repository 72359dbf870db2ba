package compat

import (
	"fmt"
	"strings"

	"stepbench/bench"
	"stepbench/bench/internal/files"
	"stepbench/bench/stats"
)

// OneBatchRecord is one line of SGLang one_batch's --result-filename JSONL:
// one shape. Latencies are host seconds, throughputs tokens/s.
type OneBatchRecord struct {
	RunName   string
	BatchSize int
	InputLen  int
	OutputLen int
	// PrefillLatency is the median over iterations of the prefill latency.
	PrefillLatency    float64
	PrefillThroughput float64 // batch*input_len / PrefillLatency
	// MedianDecodeLatency is the median over every decode step of every
	// iteration; nil (left out) when output_len == 1, as one_batch.
	MedianDecodeLatency    *float64
	MedianDecodeThroughput *float64 // batch / MedianDecodeLatency
	// TotalLatency is the median over iterations of prefill + Σ decode.
	TotalLatency      float64
	OverallThroughput float64 // (input_len+output_len)*batch / TotalLatency
	// Device is "" on a GPU (the record is one_batch's, byte for byte),
	// else DeviceCPU or DeviceEmulated: the times are a CPU's (see Device).
	Device string
	// Ragged is set for a ragged or synthetically filled batch
	// (bench.Shape.Ragged), whose record one_batch cannot write: InputLen
	// is then the lengths' mean, the throughputs count the tokens the
	// steps ran, and the record carries the lengths (see Ragged).
	Ragged *Ragged
}

// Ragged is what the one_batch and vLLM files of a ragged batch add after
// one_batch's or vLLM's own keys: each sequence's context length, their
// sum, and the fill when it is synthetic (every position but each
// sequence's last written untimed; the prefill runs the last).
type Ragged struct {
	ContextLens []int
	KVTokens    int
	KVFill      string // "" or bench.KVFillSynthetic
}

// raggedOf is a shape's Ragged, nil for a uniform batch.
func raggedOf(s bench.Shape) *Ragged {
	if !s.Ragged() {
		return nil
	}
	return &Ragged{ContextLens: s.ContextLens(), KVTokens: s.KVTokens(), KVFill: s.KVFill}
}

// fields are r's keys in the order the files write them: context_lens,
// kv_tokens and, for a synthetic fill, kv_fill; none for nil.
func (r *Ragged) fields() []pyField {
	if r == nil {
		return nil
	}
	out := []pyField{{"context_lens", r.ContextLens}, {"kv_tokens", r.KVTokens}}
	if r.KVFill != "" {
		out = append(out, pyField{"kv_fill", r.KVFill})
	}
	return out
}

// The devices whose times are a CPU's, as the compatible result files name
// them: the "device" field (vLLM's own name for its --device) and the
// run_name's suffix, so that a dashboard keyed by either never files them
// under a GPU's series.
const (
	DeviceCPU      = "cpu"      // the cpu backend
	DeviceEmulated = "emulated" // the emulated CUDA device: CPU threads
)

// Device is the device field of a run on backend (emulated: the emulated
// device's description), "" for a GPU.
func Device(backend, emulated string) string {
	switch {
	case emulated != "":
		return DeviceEmulated
	case backend == "cpu":
		return DeviceCPU
	}
	return ""
}

// MarkedRunName is runName with "-" + device appended (once) when the
// device is not a GPU: "default" on the cpu backend is "default-cpu".
func MarkedRunName(runName, device string) string {
	if device == "" || strings.HasSuffix(runName, "-"+device) {
		return runName
	}
	return runName + "-" + device
}

// NewOneBatchRecord condenses a shape's timed iterations into one_batch's
// record. With one iteration it equals what one_batch writes, bit for bit
// (np.median, one_batch's formulas and summation order).
func NewOneBatchRecord(runName string, s bench.ShapeResult) OneBatchRecord {
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
		rec.PrefillLatency = stats.Median(prefill)
		rec.TotalLatency = stats.Median(totals)
	}
	// One_batch's batch × input_len and (input_len + output_len) × batch,
	// and a ragged batch's own counts (the same for a uniform one).
	rec.PrefillThroughput = bench.TokensPerSecond(s.PromptTokens(), rec.PrefillLatency)
	rec.OverallThroughput = bench.TokensPerSecond(s.IterationTokens(), rec.TotalLatency)
	rec.Ragged = raggedOf(s.Shape)
	if s.OutputLen > 1 && len(decode) > 0 {
		median := stats.Median(decode)
		throughput := bench.TokensPerSecond(s.Batch, median)
		rec.MedianDecodeLatency = &median
		rec.MedianDecodeThroughput = &throughput
	}
	return rec
}

// JSON is the record as one_batch writes it: json.dumps(record), byte for
// byte, keys in one_batch's order (the two median keys only with decode
// steps); a ragged batch's keys (Ragged) and then the device follow.
func (r OneBatchRecord) JSON() (string, error) {
	obj := pyObject{
		{"run_name", r.RunName},
		{"batch_size", r.BatchSize},
		{"input_len", r.InputLen},
		{"output_len", r.OutputLen},
		{"prefill_latency", r.PrefillLatency},
		{"prefill_throughput", r.PrefillThroughput},
	}
	if r.MedianDecodeLatency != nil && r.MedianDecodeThroughput != nil {
		obj = append(obj, pyField{"median_decode_latency", *r.MedianDecodeLatency},
			pyField{"median_decode_throughput", *r.MedianDecodeThroughput})
	}
	obj = append(obj, pyField{"total_latency", r.TotalLatency}, pyField{"overall_throughput", r.OverallThroughput})
	obj = append(obj, r.Ragged.fields()...)
	if r.Device != "" {
		obj = append(obj, pyField{"device", r.Device})
	}
	return pyDumps(obj, 0)
}

// AppendOneBatchJSONL appends one line per record to path, creating it
// when missing and never truncating it (one_batch's --result-filename). The
// records are written in one write call and synced to disk before it
// returns, so a record that was reported written survives a crash.
func AppendOneBatchJSONL(path string, recs []OneBatchRecord) error {
	var b strings.Builder
	for i, rec := range recs {
		line, err := rec.JSON()
		if err != nil {
			return fmt.Errorf("encode one_batch record %d: %w", i, err)
		}
		b.WriteString(line + "\n")
	}
	return files.Append(path, []byte(b.String()))
}
