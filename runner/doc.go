// Package runner is the model: a Llama-family configuration (presets or an
// HF config.json), its weights (safetensors or the dummy generator), the KV
// cache and the forward pass, written once against the Backend interface.
// Engine runs one fixed batch at a time: Begin resets the cache (no prefix
// is ever reused), Prefill and Decode enqueue a step, and decode steps are
// captured once and replayed on backends that can (StepCapturer, with the
// decode-graph cache beside the engine).
//
// Backends: CPU, the plain-Go reference (kernels/ref) and the no-GPU
// fallback, in this package; the CUDA backend in runner/gpu. The cost
// model runs the same forward pass on a backend that only counts, so every
// op's minimal FLOPs and bytes (each input read once, each output written
// once) cannot drift from the code; EstimateMemory sizes a run before
// anything is allocated. CompareWithCPU checks any backend against the cpu
// backend end to end.
//
// runner knows the model, not timing: it needs no cgo, and bench measures
// it through Engine. Sizes are in elements unless a name says bytes.
package runner
