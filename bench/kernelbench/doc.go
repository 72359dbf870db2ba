// Package kernelbench times one op of the model alone, cold: its buffers
// are filled once, the L2 cache is overwritten before every sample, and
// each sample is one launch between two events.
//
// Its numbers mean: device seconds per launch (every sample kept), their
// median with its noise (the relative half-width of the median's 95%
// interval; sampling stops when it reaches MaxNoise, or at MaxSamples or
// Timeout), and the op's FLOPs and bytes from the cost model (package
// runner), so GB/s and TFLOP/s are the minimal work over the median time.
package kernelbench
