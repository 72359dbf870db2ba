// Package telemetry is what a GPU reports about itself around the timed
// regions, and where each reading is filed. Readings come from a Source
// (bench/telemetry/nvml reads NVML; tests script one) after every timed
// region, never inside one, and from a background sampler for long phases.
//
// Its numbers mean: SM and memory clocks in MHz; power in W, either NVML's
// instantaneous field (PowerSourceInstant) or its 1 s moving average
// (PowerSourceAverage1s, where the instant field is unsupported); the
// energy counter in mJ since the driver loaded; GPU and memory temperature
// in °C; the clock-event reasons as NVML's bit mask and their names. A
// reading is throttled by nvbench's rule: an SM clock below 75% of the
// maximum, or a power or thermal slowdown reason.
//
// A reading of several GPUs (a Node: the GPUs of a tensor-parallel run's
// ranks on this node) keeps each GPU's reading and combines them
// (Combine): power and the energy counter summed, clocks the minimum,
// temperatures the maximum, reasons OR-ed, throttled when any GPU is; its
// JSON names each combined figure by its rule (power_watts_sum,
// sm_clock_mhz_min, ...). The Node's energy counter is the sum of the
// GPUs' counters.
//
// It needs no cgo: the reason bits are NVML's documented values, declared
// here (the nvml package's tests check them against go-nvml's).
package telemetry
