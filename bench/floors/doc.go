// Package floors costs a sweep of shapes under a GPU preset's datasheet roof
// without running anything, and writes the tables stepbench roofline prints:
// per shape, prefill, the first and last decode steps and the whole
// iteration with their FLOPs and bytes (runner's cost model) and floor, the
// larger of FLOPs / peak FLOP/s and bytes / peak bytes/s; per op for one
// shape. With tensor parallelism the figures are one GPU's share, plus its
// all-reduce bytes at the preset's link bandwidth. Every figure is derived,
// none measured.
package floors
