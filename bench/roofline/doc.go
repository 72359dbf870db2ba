// Package roofline places measured steps and ops under a roof: the two
// ceilings of a GPU, dense bf16 FLOP/s and memory bytes/s, and where they
// meet (the ridge, FLOP/byte).
//
// There is one Roof type, and its Source says where the ceilings came from:
// measured (stepbench calibrate: a cuBLAS bf16 GEMM and a device-to-device
// copy, cached per GPU UUID), device (SM count × dense bf16 FLOP/clock/SM ×
// SM clock; memory clock × bus width / 8 × 2) or datasheet (a GPU preset).
// A run uses one roof for every figure it prints, and names it.
//
// Its numbers mean: a Floor is the least time a cost (the cost model's
// minimal FLOPs and bytes, package runner) can take under the roof,
// max(FLOPs / peak FLOP/s, bytes / peak bytes/s), and which ceiling binds;
// a Point adds a measured time: intensity = FLOPs/bytes, achieved FLOP/s
// and bytes/s = cost / time, attainable = min(peak FLOP/s, intensity ×
// bandwidth), attainment = floor / measured time (= achieved / attainable
// where there are FLOPs). Floors and attainment are derived, never
// measured. Seconds, bytes and FLOPs throughout.
package roofline
