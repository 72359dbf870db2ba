// Package estimate is docs/kernel.md's per-launch model as code: the
// launches of one step are the cuda backend's own (the engine's step run on
// runner/gpu's planner, which picks kernels, versions, grids and fusions
// with the code that launches them on a GPU), and each launch is costed
// from its call's shapes:
//
//	HBM bytes    the cost model's minimum for the call (runner.CostOf: each
//	             input read once, each output written once), a fused
//	             call's as the sum of its parts less the intermediates it
//	             no longer writes and reads back
//	L2 re-reads  what blocks read again that another block already brought
//	             into L2: a GEMV block's activation rows (and a fused
//	             norm's sums and weights), a prefill attention block's K/V
//	FLOPs        the cost model's (4 per element of a norm, 2mnk, ...)
//	smem cycles  attn_prefill 2..5: per warp and 64-key tile its Q rows
//	             (16 × D), K and V (64 × D each) through ldmatrix, bf16, at
//	             SharedBytesPerClock per SM (72 LDSM.x4 at D = 128)
//
// and its time is
//
//	kernel = max(max(HBM/HBMRate, (HBM+L2)/L2Rate, FLOPs/MatrixRate, smem/(SMs·clock)) + Ramp, MinKernel)
//	gap    = NodeGap (a captured decode step) or LaunchGap (an eager prefill),
//	         less PDLSaving where the edge is programmatic: the launch is
//	         programmatic (launch=2) and its predecessor opted in too
//	time   = kernel + gap
//
// where a grid of fewer blocks than SMs gets that share of each rate
// (ASSUMPTION: the chip's bandwidth and rate split evenly over its SMs; a
// library call's grid is its own and gets the whole chip),
// and each launch pays one gap and the PDL saving only on the edges that
// exist. Every constant is named with its source (GPU.Constants). These
// are ESTIMATES: nothing here was measured on a GPU.
package estimate
