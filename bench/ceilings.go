package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"stepbench/runner"

	"stepbench/bench/internal/files"
	"stepbench/bench/stats"
)

// Roof sources.
const (
	RoofDevice    = "device"    // SM count × FLOP/clock/SM × NVML SM clock; memory clock × bus width × 2
	RoofMeasured  = "measured"  // stepbench calibrate: cuBLAS bf16 GEMM and device-to-device copy
	RoofDatasheet = "datasheet" // a --gpu preset
)

// Roof is a pair of roofline ceilings: dense bf16 FLOP/s and memory bytes/s.
type Roof struct {
	Source            string  `json:"source"` // RoofDevice, RoofMeasured or RoofDatasheet
	Description       string  `json:"description,omitempty"`
	PeakFLOPsPerSec   float64 `json:"peak_flops_per_second"`
	PeakBytesPerSec   float64 `json:"peak_bytes_per_second"`
	RidgeFLOPsPerByte float64 `json:"ridge_flops_per_byte"` // where the two roofs meet
}

// NewRoof makes a roof and computes its ridge.
func NewRoof(source, description string, flopsPerSec, bytesPerSec float64) Roof {
	r := Roof{Source: source, Description: description, PeakFLOPsPerSec: flopsPerSec, PeakBytesPerSec: bytesPerSec}
	if bytesPerSec > 0 {
		r.RidgeFLOPsPerByte = flopsPerSec / bytesPerSec
	}
	return r
}

// DatasheetRoof is a GPU preset's roof.
func DatasheetRoof(g GPUSpec) Roof {
	return NewRoof(RoofDatasheet, g.Description+" datasheet", g.PeakFLOPsPerSec, g.PeakBytesPerSec)
}

// Spec is the roof as a GPUSpec, for FloorOf and ComputeFloors.
func (r Roof) Spec() GPUSpec {
	return GPUSpec{Name: r.Source, Description: r.Description, PeakFLOPsPerSec: r.PeakFLOPsPerSec, PeakBytesPerSec: r.PeakBytesPerSec}
}

// AttainableFLOPsPerSec is the roofline: min(peak, intensity × bandwidth).
func (r Roof) AttainableFLOPsPerSec(intensityFLOPsPerByte float64) float64 {
	return math.Min(r.PeakFLOPsPerSec, intensityFLOPsPerByte*r.PeakBytesPerSec)
}

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
	return c, nil
}

// Roof returns the ceilings as a Roof.
func (c DeviceCeilings) Roof() Roof {
	return NewRoof(RoofDevice, fmt.Sprintf("device: %d SMs × %.0f FLOP/clk × %.0f MHz; %.0f MHz × %d bit × 2",
		c.SMCount, c.FLOPsPerClockPerSM, c.SMClockMHz, c.MemoryClockMHz, c.MemoryBusWidthBits), c.PeakFLOPsPerSec, c.PeakBytesPerSec)
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
}

// Roof returns the measured ceilings as a Roof.
func (c Calibration) Roof() Roof {
	return NewRoof(RoofMeasured, fmt.Sprintf("measured %s: cuBLAS bf16 GEMM %d³, device copy %d MiB",
		c.MeasuredAt, c.GEMMSize, c.CopyBytes>>20), c.GEMMFLOPsPerSec, c.CopyBytesPerSec)
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

// LoadCalibration reads a cached calibration; os.ErrNotExist (wrapped) when
// none was made. cacheDir "" is the user cache directory.
func LoadCalibration(cacheDir, uuid string) (Calibration, error) {
	path, err := CalibrationPath(cacheDir, uuid)
	if err != nil {
		return Calibration{}, err
	}
	data, err := os.ReadFile(path)
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

// RooflinePoint is one measured step or op placed on a roofline.
type RooflinePoint struct {
	Label     string `json:"label"`          // e.g. "decode b=8"
	Phase     string `json:"phase"`          // "prefill" or "decode"
	Op        string `json:"op,omitempty"`   // set for per-op points
	Batch     int    `json:"batch_size"`     //
	InputLen  int    `json:"input_len"`      //
	OutputLen int    `json:"output_len"`     //
	Position  int    `json:"position"`       // KV length the cost was computed at
	Roof      string `json:"roof,omitempty"` // the roof's Source
	// The cost model's work and the measured (median device) time.
	FLOPs   float64 `json:"flops"`
	Bytes   float64 `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// Derived: FLOPs/Bytes, FLOPs/Seconds, Bytes/Seconds.
	IntensityFLOPsPerByte float64 `json:"intensity_flops_per_byte"`
	AchievedFLOPsPerSec   float64 `json:"achieved_flops_per_second"`
	AchievedBytesPerSec   float64 `json:"achieved_bytes_per_second"`
	AttainableFLOPsPerSec float64 `json:"attainable_flops_per_second,omitempty"` // min(peak, I × bandwidth)
	FloorSeconds          float64 `json:"floor_seconds,omitempty"`               // max(FLOPs/peak, Bytes/bandwidth)
	AttainmentFraction    float64 `json:"attainment_fraction,omitempty"`         // floor / measured
	Bound                 string  `json:"bound,omitempty"`                       // "compute" or "memory": the roof that binds
}

// NewRooflinePoint places work (flops, bytes) done in seconds under roof
// (nil: no roof, only the achieved rates). The attainment is
// achieved / attainable FLOP/s, computed as floor / measured time so that
// ops without FLOPs (copies) get one too; the two are equal otherwise.
func NewRooflinePoint(roof *Roof, flops, bytes, seconds float64) RooflinePoint {
	p := RooflinePoint{FLOPs: flops, Bytes: bytes, Seconds: seconds}
	if bytes > 0 {
		p.IntensityFLOPsPerByte = flops / bytes
	}
	if seconds > 0 {
		p.AchievedFLOPsPerSec = flops / seconds
		p.AchievedBytesPerSec = bytes / seconds
	}
	if roof == nil || !(roof.PeakFLOPsPerSec > 0) || !(roof.PeakBytesPerSec > 0) {
		return p
	}
	p.Roof = roof.Source
	p.AttainableFLOPsPerSec = roof.AttainableFLOPsPerSec(p.IntensityFLOPsPerByte)
	f := FloorOf(roof.Spec(), flops, bytes)
	p.FloorSeconds, p.Bound = f.Seconds, f.Bound
	if seconds > 0 {
		p.AttainmentFraction = f.Seconds / seconds
	}
	return p
}

// stepSeconds is the device time when there is one, else the host time
// (the CPU backend's events may measure nothing).
func stepSeconds(device, host stats.Summary) float64 {
	if device.N > 0 && device.Median > 0 {
		return device.Median
	}
	if host.N > 0 {
		return host.Median
	}
	return 0
}

// ShapeRooflinePoints places a shape's prefill (median time) and its decode
// steps (median time, costed at the median step's position) under roof.
func ShapeRooflinePoints(cfg runner.Config, roof *Roof, s ShapeResult) ([]RooflinePoint, error) {
	var points []RooflinePoint
	if seconds := stepSeconds(s.Summary.PrefillDeviceSeconds, s.Summary.PrefillHostSeconds); seconds > 0 {
		c, err := runner.PrefillCost(cfg, s.Batch, s.InputLen)
		if err != nil {
			return nil, fmt.Errorf("roofline point: %w", err)
		}
		p := NewRooflinePoint(roof, c.FLOPs, c.Bytes, seconds)
		p.Label, p.Phase, p.Batch, p.InputLen, p.OutputLen = fmt.Sprintf("prefill b=%d", s.Batch), PhasePrefill, s.Batch, s.InputLen, s.OutputLen
		points = append(points, p)
	}
	if seconds := stepSeconds(s.Summary.DecodeDeviceSeconds, s.Summary.DecodeHostSeconds); seconds > 0 && s.OutputLen > 1 {
		position := s.InputLen + (s.OutputLen-2)/2
		c, err := runner.DecodeCost(cfg, s.Batch, position)
		if err != nil {
			return nil, fmt.Errorf("roofline point: %w", err)
		}
		p := NewRooflinePoint(roof, c.FLOPs, c.Bytes, seconds)
		p.Label, p.Phase, p.Batch, p.InputLen, p.OutputLen, p.Position = fmt.Sprintf("decode b=%d", s.Batch), PhaseDecode, s.Batch, s.InputLen, s.OutputLen, position
		points = append(points, p)
	}
	return points, nil
}

// OpRooflinePoints places every op of a step that has a measured time
// (seconds per step, summed over the op's calls) under roof, sorted by op.
func OpRooflinePoints(roof *Roof, step runner.StepCost, opSeconds map[string]float64) []RooflinePoint {
	var points []RooflinePoint
	for _, op := range step.Ops {
		seconds, ok := opSeconds[op.Op]
		if !ok || !(seconds > 0) {
			continue
		}
		p := NewRooflinePoint(roof, op.FLOPs, op.Bytes, seconds)
		p.Label = fmt.Sprintf("%s %s b=%d", step.Phase, op.Op, step.Batch)
		p.Phase, p.Op, p.Batch, p.Position = step.Phase, op.Op, step.Batch, step.StartPos
		points = append(points, p)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].Op < points[j].Op })
	return points
}
