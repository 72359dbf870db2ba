// Package gpu is stepbench's CUDA backend: runner.Backend on one NVIDIA GPU,
// and everything else that runs our kernels on one. It compiles the sources
// of package kernels with NVRTC (cached cubins), loads them and launches
// them with checked arguments (Kernels), runs Linear through cuBLAS, keeps
// every buffer, upload and download on one stream with a pinned staging
// buffer, and captures decode steps as CUDA graphs (runner.StepCapturer)
// that the engine replays at every position. Verifier checks each kernel
// against its kernels/ref twin on fresh random inputs (stepbench verify);
// Calibrate measures the copy bandwidth and bf16 GEMM rate that are the
// measured roofline ceilings (stepbench calibrate).
//
// It is one of the few packages that need cgo (through package cuda); the
// rest of stepbench reaches it only through runner.Backend. Like every cuda
// object, a Backend belongs to the goroutine that made it, locked to its OS
// thread. Without a GPU its tests run on the emulated device (cuda/emu).
package gpu
