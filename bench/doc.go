// Package bench is stepbench's harness: it sweeps shapes (batch × input
// length × output length), times prefill and every decode step as separate
// synchronised regions, keeps every sample and decides how many iterations
// a shape gets. It knows timing, not CUDA: the engine is reached only
// through Target, and what happens between regions (telemetry) through
// hooks.
//
// Its numbers mean: a Sample's host time is the wall clock around a timed
// region (stream synchronise; clock; start event; enqueue the step; end
// event; synchronise; clock), what SGLang's one_batch reports; its device
// time is the elapsed time between the two events. An iteration is a
// prefill and output_len−1 decode steps on fresh prompts (one_batch's
// latency_test_run_once); its total is their sum. Per shape and metric the
// harness keeps one value per iteration (prefill: its time; decode: the
// iteration's median step, so KV lengths are never pooled), and adaptive
// sampling stops when each such median's noise (bench/stats) is at most the
// target, or the time budget is spent, never before MinIters. RunAB
// interleaves two targets pair by pair (A B, B A, ...) on the same prompts.
// Energy windows (J, J/token) are deltas of an energy counter over back-to-
// back repetitions after the timed iterations.
//
// Times are seconds unless a name says otherwise. The sibling packages hold
// the rest: stats (statistics), telemetry (NVML readings), roofline (roofs
// and floors), report (the native report and the text tables), compat
// (one_batch's and vLLM's files), compare (verdicts), plot, breakdown (per-
// op times) and kernelbench (one op, cold).
package bench
