// Package bench is the one-batch harness of stepbench: it sweeps shapes,
// times prefill and every decode step as separate synchronised regions, keeps
// every sample, summarises them and writes the result formats (SGLang
// one_batch's stdout lines and JSONL, vLLM's latency JSON, the native
// stepbench/v1 report and a summary table).
//
// Times are seconds unless a name says otherwise. A sample's host time is the
// wall clock around a synchronised region (what one_batch reports); its device
// time is the elapsed time between two events recorded in the stream around
// the step. bench knows timing and statistics, never CUDA: the engine is
// reached only through Target.
package bench
