// Package nvml reads a GPU's telemetry from NVML through go-nvml: clocks,
// power, temperatures, the energy counter and the clock-event reasons of
// the device a run uses, matched by UUID (a MIG instance by its own UUID,
// read through the GPU it is part of). It is the one bench package that
// needs cgo; Monitor is a telemetry.Source and a bench.EnergyMeter, so the
// rest of bench never sees NVML.
//
// libnvidia-ml.so.1 is opened at run time (from $STEPBENCH_CUDA_LIBS when
// set, like every CUDA library); without it, Open returns ErrNoNVML and a
// run goes on without telemetry. Calls an older driver lacks are looked up
// first and skipped, never called (go-nvml binds lazily and would abort).
package nvml
