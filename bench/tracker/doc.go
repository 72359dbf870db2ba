// Package tracker writes a run's results in the formats of the dashboards
// kernel teams track performance with, so that a run's file goes straight
// into them:
//   - PyTorchBenchmark: the records vLLM's benchmarks write for the PyTorch
//     OSS benchmark database (benchmark, model, metric with
//     benchmark_values, and runners), one metric per record;
//   - GitHubActionBenchmark: github-action-benchmark's customSmallerIsBetter
//     input, [{name, unit, value, range, extra}];
//   - Bencher: Bencher Metric Format (BMF), {benchmark: {measure: {value,
//     lower_value, upper_value}}}, latency in nanoseconds.
//
// Every format carries the same metrics of every complete shape (Metrics):
// the prefill's device time, the median decode step's device time (with
// decode steps) and the iteration's host time (vLLM's latency), each from
// one value per timed iteration: the median and its distribution-free 95%
// interval (stats.NewMedianCI). The device the times were measured on is
// in every series name (a GPU's name, "cpu" or "emulated"), so that a
// dashboard never files a CPU's or the emulated device's times under a
// GPU's series.
package tracker
