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
// It needs no cgo: the reason bits are NVML's documented values, declared
// here (the nvml package's tests check them against go-nvml's).
package telemetry
