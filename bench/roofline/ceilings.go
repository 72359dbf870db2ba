package roofline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"stepbench/bench/internal/files"
	"stepbench/bench/stats"
	"stepbench/internal/input"
)

// DenseBF16FLOPsPerClockPerSM is the tensor cores' dense bf16 rate (fp32
// accumulate) per SM per clock for a compute capability, checked against
// the datasheets: A100 312 TFLOP/s = 108 SMs × 1410 MHz × 2048; H100 SXM
// 989.4 TFLOP/s = 132 SMs × 1830 MHz × 4096; A40/L40S-class (sm_86/sm_89)
// 1024; B200 (sm_100) 8192.
func DenseBF16FLOPsPerClockPerSM(major, minor int) (float64, error) {
	switch {
	case major == 8 && minor == 0:
		return 2048, nil
	case major == 8 && (minor == 6 || minor == 7 || minor == 9):
		return 1024, nil
	case major == 9 && minor == 0:
		return 4096, nil
	case major == 10:
		return 8192, nil
	}
	return 0, fmt.Errorf("no dense bf16 tensor-core rate known for compute capability %d.%d", major, minor)
}

// DenseFP8FLOPsPerClockPerSM is the tensor cores' dense FP8 rate per SM per
// clock: FP8Ratio × the bf16 rate on Ada, Hopper and Blackwell (H100 SXM
// 1979 TFLOP/s = 132 × 1830 MHz × 8192), 0 below compute capability 8.9.
func DenseFP8FLOPsPerClockPerSM(major, minor int) float64 {
	if major*10+minor < 89 {
		return 0
	}
	bf16, err := DenseBF16FLOPsPerClockPerSM(major, minor)
	if err != nil {
		return 0
	}
	return FP8Ratio * bf16
}

// DeviceCeilings are the roofs derived from the device:
// peak FLOP/s = SM count × dense bf16 FLOP/clock/SM × SM clock (Hz);
// peak bytes/s = memory clock (Hz) × bus width (bits) / 8 × 2 (double data rate).
type DeviceCeilings struct {
	SMCount             int     `json:"sm_count"`
	ComputeCapability   string  `json:"compute_capability"`
	FLOPsPerClockPerSM  float64 `json:"flops_per_clock_per_sm"`
	SMClockMHz          float64 `json:"sm_clock_mhz"`
	MemoryClockMHz      float64 `json:"memory_clock_mhz"`
	MemoryBusWidthBits  int     `json:"memory_bus_width_bits"`
	PeakFLOPsPerSec     float64 `json:"peak_flops_per_second"`
	PeakBytesPerSec     float64 `json:"peak_bytes_per_second"`
	RidgeFLOPsPerByte   float64 `json:"ridge_flops_per_byte"`
	ClockSourceDescribe string  `json:"clock_source,omitempty"` // e.g. "median NVML SM clock during the run"
	// PeakFP8FLOPsPerSec is SM count × DenseFP8FLOPsPerClockPerSM × SM clock.
	PeakFP8FLOPsPerSec float64 `json:"peak_fp8_flops_per_second,omitempty"`
}

// ComputeDeviceCeilings applies DeviceCeilings' formulas.
func ComputeDeviceCeilings(smCount, major, minor int, smClockMHz, memoryClockMHz float64, busWidthBits int) (DeviceCeilings, error) {
	perSM, err := DenseBF16FLOPsPerClockPerSM(major, minor)
	if err != nil {
		return DeviceCeilings{}, err
	}
	if smCount < 1 || smClockMHz <= 0 || memoryClockMHz <= 0 || busWidthBits < 1 {
		return DeviceCeilings{}, fmt.Errorf("device ceilings need SM count, SM clock, memory clock and bus width (got %d SMs, %.0f MHz, %.0f MHz, %d bits)",
			smCount, smClockMHz, memoryClockMHz, busWidthBits)
	}
	c := DeviceCeilings{
		SMCount: smCount, ComputeCapability: fmt.Sprintf("%d.%d", major, minor), FLOPsPerClockPerSM: perSM,
		SMClockMHz: smClockMHz, MemoryClockMHz: memoryClockMHz, MemoryBusWidthBits: busWidthBits,
		PeakFLOPsPerSec: float64(smCount) * perSM * smClockMHz * 1e6,
		PeakBytesPerSec: memoryClockMHz * 1e6 * float64(busWidthBits) / 8 * 2,
	}
	c.RidgeFLOPsPerByte = c.PeakFLOPsPerSec / c.PeakBytesPerSec
	c.PeakFP8FLOPsPerSec = float64(smCount) * DenseFP8FLOPsPerClockPerSM(major, minor) * smClockMHz * 1e6
	return c, nil
}

// Roof returns the ceilings as a Roof.
func (c DeviceCeilings) Roof() Roof {
	r := NewRoof(SourceDevice, fmt.Sprintf("%d SMs × %.0f FLOP/clk × %.0f MHz; %.0f MHz × %d bit × 2",
		c.SMCount, c.FLOPsPerClockPerSM, c.SMClockMHz, c.MemoryClockMHz, c.MemoryBusWidthBits), c.PeakFLOPsPerSec, c.PeakBytesPerSec)
	r.PeakFP8FLOPsPerSec = c.PeakFP8FLOPsPerSec
	return r
}

// Calibration is what `stepbench calibrate` measured on one GPU.
type Calibration struct {
	GPUUUID    string `json:"gpu_uuid"`
	GPUName    string `json:"gpu_name"`
	MeasuredAt string `json:"measured_at"` // RFC 3339
	// CopyBytesPerSec is a device-to-device copy's read + written bytes per
	// second (median of CopySeconds).
	CopyBytesPerSec float64   `json:"copy_bytes_per_second"`
	CopyBytes       int64     `json:"copy_bytes"` // bytes copied per run (moved: twice this)
	CopySeconds     []float64 `json:"copy_seconds"`
	// GEMMFLOPsPerSec is 2·n³ per second of a cuBLAS bf16 n×n×n GEMM (fp32
	// accumulate) on random non-zero data (median of GEMMSeconds).
	GEMMFLOPsPerSec float64   `json:"gemm_flops_per_second"`
	GEMMSize        int       `json:"gemm_size"`
	GEMMSeconds     []float64 `json:"gemm_seconds"`
	SMClockMHz      float64   `json:"sm_clock_mhz,omitempty"` // NVML, after the measurement, when available
	// FP8GEMMFLOPsPerSec is 2·n³ per second of a cuBLASLt FP8 E4M3 n×n×n
	// GEMM (fp32 accumulate, bf16 out; median of FP8GEMMSeconds), on GPUs
	// with FP8 tensor cores.
	FP8GEMMFLOPsPerSec float64   `json:"fp8_gemm_flops_per_second,omitempty"`
	FP8GEMMSeconds     []float64 `json:"fp8_gemm_seconds,omitempty"`
}

// Roof returns the measured ceilings as a Roof.
func (c Calibration) Roof() Roof {
	r := NewRoof(SourceMeasured, fmt.Sprintf("cuBLAS bf16 GEMM %d³ and device copy %d MiB on %s, %s",
		c.GEMMSize, c.CopyBytes>>20, c.GPUName, c.MeasuredAt), c.GEMMFLOPsPerSec, c.CopyBytesPerSec)
	r.PeakFP8FLOPsPerSec = c.FP8GEMMFLOPsPerSec
	return r
}

// AddFP8GEMM records a cuBLASLt FP8 n×n×n GEMM's times (n the bf16 GEMM's
// size): rate = 2·n³ / median time.
func (c *Calibration) AddFP8GEMM(seconds []float64) error {
	m := stats.Median(seconds)
	if !(m > 0) {
		return fmt.Errorf("calibration: no positive FP8 GEMM times (median %v s)", m)
	}
	n := float64(c.GEMMSize)
	c.FP8GEMMSeconds, c.FP8GEMMFLOPsPerSec = seconds, 2*n*n*n/m
	return nil
}

var uuidFileName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// CalibrationPath is where a GPU's calibration is cached:
// <user cache dir>/stepbench/calibration/<uuid>.json.
func CalibrationPath(cacheDir, uuid string) (string, error) {
	if uuid == "" {
		return "", errors.New("calibration: empty GPU UUID")
	}
	if cacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("calibration cache: %w", err)
		}
		cacheDir = filepath.Join(dir, "stepbench", "calibration")
	}
	return filepath.Join(cacheDir, uuidFileName.ReplaceAllString(uuid, "_")+".json"), nil
}

// maxCalibrationBytes bounds a cached calibration (a few hundred bytes).
const maxCalibrationBytes = 1 << 20

// LoadCalibration reads a cached calibration; os.ErrNotExist (wrapped) when
// none was made. cacheDir "" is the user cache directory.
func LoadCalibration(cacheDir, uuid string) (Calibration, error) {
	path, err := CalibrationPath(cacheDir, uuid)
	if err != nil {
		return Calibration{}, err
	}
	data, err := input.ReadFile(path, maxCalibrationBytes, "a calibration")
	if err != nil {
		return Calibration{}, fmt.Errorf("load calibration: %w", err)
	}
	var c Calibration
	if err := json.Unmarshal(data, &c); err != nil {
		return Calibration{}, fmt.Errorf("load calibration %s: %w", path, err)
	}
	if c.GPUUUID != uuid || !(c.GEMMFLOPsPerSec > 0) || !(c.CopyBytesPerSec > 0) {
		return Calibration{}, fmt.Errorf("load calibration %s: not a valid calibration of %s", path, uuid)
	}
	return c, nil
}

// SaveCalibration caches c under its UUID and returns the path.
func SaveCalibration(cacheDir string, c Calibration) (string, error) {
	path, err := CalibrationPath(cacheDir, c.GPUUUID)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("save calibration: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", fmt.Errorf("save calibration: %w", err)
	}
	if err := files.WriteAtomic(path, append(data, '\n')); err != nil {
		return "", fmt.Errorf("save calibration: %w", err)
	}
	return path, nil
}

// NewCalibration summarises measured times: copy rate = 2·copyBytes /
// median copy time (read and write); GEMM rate = 2·n³ / median GEMM time.
func NewCalibration(uuid, name string, copyBytes int64, copySeconds []float64, gemmSize int, gemmSeconds []float64) (Calibration, error) {
	c := Calibration{GPUUUID: uuid, GPUName: name, MeasuredAt: time.Now().UTC().Format(time.RFC3339),
		CopyBytes: copyBytes, CopySeconds: copySeconds, GEMMSize: gemmSize, GEMMSeconds: gemmSeconds}
	copyMedian, gemmMedian := stats.Median(copySeconds), stats.Median(gemmSeconds)
	if !(copyMedian > 0) || !(gemmMedian > 0) {
		return c, fmt.Errorf("calibration: no positive times (copy median %v s, GEMM median %v s)", copyMedian, gemmMedian)
	}
	c.CopyBytesPerSec = 2 * float64(copyBytes) / copyMedian
	n := float64(gemmSize)
	c.GEMMFLOPsPerSec = 2 * n * n * n / gemmMedian
	return c, nil
}
