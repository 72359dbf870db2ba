package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"stepbench/bench"
	"stepbench/bench/kernelbench"
)

// Go benchmark format (golang.org/x/perf/benchfmt), so that benchstat can
// compare stepbench runs: configuration lines "key: value", then one line
// per timed region, "BenchmarkPrefill/model=M/batch=B/input=I/output=O-1 1
// X ns/op Y device-ns/op Z tokens/s". The iteration count is 1 because
// every line is one measured step; the -1 suffix is the one stream.

// GoBenchConfig is the file-level configuration written before the
// results, e.g. {"gpu": "NVIDIA H200", "backend": "cuda"}. Keys must be
// lowercase words without spaces; empty values are left out.
type GoBenchConfig map[string]string

func writeGoBenchConfig(w io.Writer, config GoBenchConfig) error {
	keys := make([]string, 0, len(config))
	for k, v := range config {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.ContainsAny(k, " \t\n:") || k == "" || strings.ToLower(k[:1]) != k[:1] {
			return fmt.Errorf("gobench: bad configuration key %q", k)
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", k, strings.ReplaceAll(config[k], "\n", " ")); err != nil {
			return fmt.Errorf("write gobench: %w", err)
		}
	}
	return nil
}

// goBenchNameValue makes a value safe inside a benchmark name: no spaces,
// no '/', no '='.
func goBenchNameValue(v string) string {
	return strings.NewReplacer(" ", "_", "/", "_", "=", "_", "\t", "_").Replace(v)
}

// WriteGoBench writes every timed region of shapes as a Go benchmark line:
// host time as ns/op (what one_batch reports), the device time as
// device-ns/op and the step's tokens/s (a ragged batch's name adds its
// KV tokens and lengths, goBenchKV; its prefill's tokens are its prompts).
func WriteGoBench(w io.Writer, model string, config GoBenchConfig, shapes []bench.ShapeResult) error {
	if err := writeGoBenchConfig(w, config); err != nil {
		return err
	}
	for _, s := range shapes {
		suffix := fmt.Sprintf("/model=%s/batch=%d/input=%d/output=%d%s-1", goBenchNameValue(model), s.Batch, s.InputLen, s.OutputLen, goBenchKV(s.Shape))
		for _, sample := range s.Samples() {
			name, tokens := "BenchmarkPrefill", s.PromptTokens()
			if sample.Phase == bench.PhaseDecode {
				name, tokens = "BenchmarkDecode", s.Batch
			}
			if _, err := fmt.Fprintf(w, "%s%s\t1\t%.0f ns/op\t%.0f device-ns/op\t%.2f tokens/s\n", name, suffix,
				1e9*sample.HostSeconds, 1e9*sample.DeviceSeconds, bench.TokensPerSecond(tokens, sample.HostSeconds)); err != nil {
				return fmt.Errorf("write gobench: %w", err)
			}
		}
	}
	return nil
}

// goBenchKV is a ragged batch's name parts: its KV tokens, its lengths (up
// to 8; more are the configuration's context_lens and seed) and a
// synthetic fill; "" for a uniform batch.
func goBenchKV(s bench.Shape) string {
	if !s.Ragged() {
		return ""
	}
	out := fmt.Sprintf("/kv=%d", s.KVTokens())
	if lens := s.ContextLens(); s.Lens != "" && len(lens) <= 8 {
		out += "/lens=" + s.Lens
	}
	if s.KVFill != "" {
		out += "/fill=" + s.KVFill
	}
	return out
}

// KVGoBenchConfig are the configuration lines of a run's KV cache (kv
// nil or contiguous and uniform: none, so that a uniform run's file is
// as it was): kv_layout ("paged 16 shuffled"), context_lens and the seed
// that drew them, kv_fill.
func KVGoBenchConfig(kv *KVCache, seed uint64) GoBenchConfig {
	c := GoBenchConfig{}
	if kv == nil {
		return c
	}
	if kv.Layout == "paged" {
		c["kv_layout"] = fmt.Sprintf("paged %d %s", kv.PageSize, kv.PageOrder)
	}
	if kv.ContextLens != "" {
		c["context_lens"], c["seed"] = kv.ContextLens, fmt.Sprint(seed)
	}
	if kv.KVFill == bench.KVFillSynthetic {
		c["kv_fill"] = kv.KVFill
	}
	return c
}

// WriteKernelGoBench writes a kernel microbenchmark's samples, one line
// each: the device time as ns/op and the cost model's GB/s and TFLOP/s.
func WriteKernelGoBench(w io.Writer, config GoBenchConfig, results []kernelbench.Result) error {
	if err := writeGoBenchConfig(w, config); err != nil {
		return err
	}
	for _, r := range results {
		name := "BenchmarkKernel/op=" + goBenchNameValue(r.Op) + "/" + goBenchNameValue(r.ShapeLabel) + "-1"
		for _, seconds := range r.DeviceSeconds {
			if seconds <= 0 {
				continue
			}
			if _, err := fmt.Fprintf(w, "%s\t1\t%.0f ns/op\t%.2f GB/s\t%.4f TFLOP/s\n", name, 1e9*seconds,
				r.Bytes/seconds/1e9, r.FLOPs/seconds/1e12); err != nil {
				return fmt.Errorf("write gobench: %w", err)
			}
		}
	}
	return nil
}
