// Package compat writes the result files of the tools stepbench replaces,
// byte for byte as their Python writes them: SGLang bench_one_batch's
// --result-filename JSONL (one record per shape, appended) and vLLM bench
// latency's --output-json (one document per shape).
//
// Its numbers mean what those tools mean: one_batch's latencies are medians
// over iterations of host seconds (prefill; every decode step, pooled, as
// one_batch does; the iteration total) and its throughputs tokens per
// second by one_batch's formulas; vLLM's latencies are iteration totals
// (prefill + every decode step, host seconds) with np.mean, np.std
// (population) and np.percentile. Floats are Python's repr, so a file
// compares equal to the one the replaced tool would write for the same
// times.
//
// Neither tool runs a ragged batch (each sequence its own length) or a
// synthetic context. Their records (Ragged) keep the tools' keys and
// order, input_len the lengths' mean and the throughputs over the tokens
// the steps ran, then add context_lens, kv_tokens and kv_fill before the
// device: readers that look up the keys they know read them; a uniform
// batch's files are the tools' own, byte for byte, on any KV layout.
package compat
