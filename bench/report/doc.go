// Package report turns a run into its outputs: the native report (schema
// stepbench/v1: environment, configuration, every sample with its
// telemetry, summaries, noise, floors, roofline points), the result files
// written shape by shape so that an interrupted run keeps what finished,
// the text tables printed after a run, and Go benchmark lines for benchstat.
//
// Its numbers mean: summaries are numpy's over the kept samples (host and
// device seconds); floors and attainment are derived from the cost model
// under the run's one roof (bench/roofline), which every output names;
// telemetry is NVML's reading after each region (W, MHz, °C, mJ), never
// one taken inside it; over several GPUs, the node's combined figures
// under names that say how they combine (power_watts_sum, sm_clock_mhz_min,
// ...: bench/telemetry's Combine) and each GPU's own. A value that was not
// measured is left out or null,
// never a zero that looks measured.
package report
