package gpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels/ref"
)

// CalibrateOptions sizes the measured roofline ceilings.
type CalibrateOptions struct {
	Ordinal   int // CUDA device
	CopyBytes int // bytes per device-to-device copy (read once, written once)
	GEMMSize  int // n of the n×n×n bf16 GEMM
	Repeats   int // timed runs of each; the caller takes the median
	Warmup    int // untimed runs before them
	Seed      uint64
	// Context, when cancelled (SIGINT), stops the calibration between two
	// runs: Calibrate returns an error wrapping its error.
	Context context.Context
	// Progress, when set, is told each run as it starts ("GEMM 3/23").
	Progress func(msg string)
}

// DefaultCalibrateOptions: a 1 GiB copy (far beyond L2) and an 8192³ GEMM
// (large enough for cuBLAS to reach its peak), 20 timed runs each.
func DefaultCalibrateOptions() CalibrateOptions {
	return CalibrateOptions{CopyBytes: 1 << 30, GEMMSize: 8192, Repeats: 20, Warmup: 3, Seed: 1}
}

// EmulatedCalibrateOptions are the defaults on the emulated device, whose
// copies and GEMMs run on the CPU (an 8192³ GEMM takes minutes there): a
// 64 MiB copy and a 512³ GEMM, 5 timed runs each. Its ceilings are the
// CPU's, not a GPU's, whatever the sizes.
func EmulatedCalibrateOptions() CalibrateOptions {
	return CalibrateOptions{CopyBytes: 64 << 20, GEMMSize: 512, Repeats: 5, Warmup: 1, Seed: 1}
}

// CalibrateResult is the device times of every timed run.
type CalibrateResult struct {
	DeviceName, UUID string
	CopyBytes        int
	CopySeconds      []float64
	GEMMSize         int
	GEMMSeconds      []float64
	// FP8GEMMSeconds are a cuBLASLt FP8 E4M3 GEMM's (n×n×n, bf16 out) on
	// GPUs with FP8 tensor cores (compute capability 8.9 and later); nil
	// elsewhere.
	FP8GEMMSeconds []float64
}

// Calibrate measures a device-to-device copy and a cuBLAS bf16 GEMM
// (C = A·B, fp32 accumulate) on uniformly random non-zero inputs, timing
// each run with events on one stream. Like every cuda call it must run on
// one locked OS thread.
func Calibrate(drv *cuda.Driver, blas *cuda.Cublas, opt CalibrateOptions) (res CalibrateResult, err error) {
	if opt.CopyBytes < 1 || opt.GEMMSize < 16 || opt.Repeats < 1 || opt.Warmup < 0 {
		return res, fmt.Errorf("calibrate: copy bytes %d, GEMM size %d (>= 16), repeats %d and warmup %d out of range",
			opt.CopyBytes, opt.GEMMSize, opt.Repeats, opt.Warmup)
	}
	props, err := drv.Props(opt.Ordinal)
	if err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	res.DeviceName, res.UUID, res.CopyBytes, res.GEMMSize = props.Name, props.UUID, opt.CopyBytes, opt.GEMMSize
	matrixBytes := opt.GEMMSize * opt.GEMMSize * 2
	if free, need := props.TotalMemBytes, uint64(2*opt.CopyBytes+3*matrixBytes); need > free {
		return res, fmt.Errorf("calibrate: needs %d MiB, device has %d MiB", need>>20, free>>20)
	}
	ctx, err := drv.NewContext(opt.Ordinal)
	if err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	m := &calibration{ctx: ctx, opt: opt}
	defer func() { err = errors.Join(err, m.close()) }()
	if err := m.open(); err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	if res.CopySeconds, err = m.measureCopy(); err != nil {
		return res, fmt.Errorf("calibrate copy: %w", err)
	}
	if res.GEMMSeconds, err = m.measureGEMM(blas); err != nil {
		return res, fmt.Errorf("calibrate GEMM: %w", err)
	}
	if props.Major*10+props.Minor >= MinFP8Arch {
		if res.FP8GEMMSeconds, err = m.measureFP8GEMM(blas); err != nil {
			return res, fmt.Errorf("calibrate FP8 GEMM: %w", err)
		}
	}
	return res, nil
}

// measureFP8GEMM times n×n×n cuBLASLt FP8 GEMMs (E4M3 in, fp32
// accumulate, bf16 out, unit scales) on random non-zero E4M3 data.
func (m *calibration) measureFP8GEMM(blas *cuda.Cublas) ([]float64, error) {
	n := m.opt.GEMMSize
	lt, err := cuda.OpenCublasLt(blas)
	if err != nil {
		return nil, err
	}
	var a, b, d, ws cuda.DevPtr
	for _, x := range []struct {
		dst   *cuda.DevPtr
		bytes int
	}{{&a, n * n}, {&b, n * n}, {&d, 2 * n * n}, {&ws, ltWorkspaceBytes}} {
		if *x.dst, err = m.alloc(x.bytes); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(m.opt.Seed, 0x6670386361)) // "fp8ca"
	for _, p := range []cuda.DevPtr{a, b} {
		if err := uploadRandomE4M3(m.ctx, m.stream, p, n*n, rng); err != nil {
			return nil, fmt.Errorf("inputs: %w", err)
		}
	}
	handle, err := lt.NewHandle()
	if err != nil {
		return nil, err
	}
	m.cleanup = append(m.cleanup, handle.Destroy)
	mm := cuda.FP8Matmul{M: n, N: n, K: n, A: a, Lda: n, B: b, Ldb: n, D: d, Ldd: n, Workspace: ws, WorkspaceBytes: ltWorkspaceBytes}
	if n%16 != 0 {
		return nil, fmt.Errorf("--gemm-size %d: cuBLASLt's FP8 GEMM needs a multiple of 16", n)
	}
	return m.timed("cuBLASLt FP8 GEMM", func() error { return handle.MatmulFP8(m.stream, mm) })
}

// uploadRandomE4M3 fills count E4M3 bytes at dst with uniform values in
// ±[1/16, 1) (never zero).
func uploadRandomE4M3(ctx *cuda.Context, s *cuda.Stream, dst cuda.DevPtr, count int, rng *rand.Rand) (err error) {
	host, err := ctx.AllocHost(count)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ctx.FreeHost(host)) }()
	vals := unsafe.Slice((*uint8)(host.Ptr), count)
	for i := range vals {
		v := float32(1.0/16 + rng.Float64()*(1-1.0/16))
		if rng.IntN(2) == 0 {
			v = -v
		}
		vals[i] = ref.F32ToE4M3(v)
	}
	if err := s.CopyHtoD(dst, host.Ptr, count); err != nil {
		return err
	}
	return s.Sync()
}

// calibration holds one measurement's context, stream, events and
// everything to release, in the order made.
type calibration struct {
	ctx        *cuda.Context
	opt        CalibrateOptions
	stream     *cuda.Stream
	start, end *cuda.Event
	cleanup    []func() error
}

func (m *calibration) open() error {
	var err error
	if m.stream, err = m.ctx.NewStream(); err != nil {
		return err
	}
	m.cleanup = append(m.cleanup, m.stream.Destroy)
	if m.start, err = m.ctx.NewEvent(); err != nil {
		return err
	}
	m.cleanup = append(m.cleanup, m.start.Destroy)
	if m.end, err = m.ctx.NewEvent(); err != nil {
		return err
	}
	m.cleanup = append(m.cleanup, m.end.Destroy)
	return nil
}

// close releases everything in reverse order, then the context.
func (m *calibration) close() error {
	var err error
	for i := len(m.cleanup) - 1; i >= 0; i-- {
		err = errors.Join(err, m.cleanup[i]())
	}
	return errors.Join(err, m.ctx.Close())
}

func (m *calibration) alloc(bytes int) (cuda.DevPtr, error) {
	p, err := m.ctx.Alloc(bytes)
	if err == nil {
		m.cleanup = append(m.cleanup, func() error { return m.ctx.Free(p) })
	}
	return p, err
}

// timed runs enqueue Warmup+Repeats times between two events and returns
// the device seconds of the timed runs.
func (m *calibration) timed(what string, enqueue func() error) ([]float64, error) {
	var seconds []float64
	runs := m.opt.Warmup + m.opt.Repeats
	for i := 0; i < runs; i++ {
		if ctx := m.opt.Context; ctx != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%s: stopped before run %d of %d: %w", what, i+1, runs, ctx.Err())
		}
		if m.opt.Progress != nil {
			m.opt.Progress(fmt.Sprintf("%s %d/%d", what, i+1, runs))
		}
		if err := m.start.Record(m.stream); err != nil {
			return nil, err
		}
		if err := enqueue(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if err := m.end.Record(m.stream); err != nil {
			return nil, err
		}
		if err := m.end.Sync(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		ms, err := cuda.ElapsedMs(m.start, m.end)
		if err != nil {
			return nil, err
		}
		if i >= m.opt.Warmup {
			seconds = append(seconds, float64(ms)/1e3)
		}
	}
	return seconds, nil
}

// measureCopy times device-to-device copies of CopyBytes.
func (m *calibration) measureCopy() ([]float64, error) {
	src, err := m.alloc(m.opt.CopyBytes)
	if err != nil {
		return nil, err
	}
	dst, err := m.alloc(m.opt.CopyBytes)
	if err != nil {
		return nil, err
	}
	if err := m.stream.Memset8(src, 0x5a, m.opt.CopyBytes); err != nil {
		return nil, err
	}
	return m.timed("device-to-device copy", func() error { return m.stream.CopyDtoD(dst, src, m.opt.CopyBytes) })
}

// measureGEMM times n×n×n cuBLAS bf16 GEMMs on random data: zeros would
// let the tensor cores idle on some parts and power draw would not be
// representative.
func (m *calibration) measureGEMM(blas *cuda.Cublas) ([]float64, error) {
	n := m.opt.GEMMSize
	var mats [3]cuda.DevPtr
	for i := range mats {
		var err error
		if mats[i], err = m.alloc(n * n * 2); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(m.opt.Seed, 0x63616c6962726174)) // "calibrat"
	for _, p := range mats[:2] {
		if err := uploadRandomBF16(m.ctx, m.stream, p, n*n, rng); err != nil {
			return nil, fmt.Errorf("inputs: %w", err)
		}
	}
	// The workspace is allocated before the handle so that cleanup, which
	// runs in reverse, destroys the handle before freeing the memory it uses.
	const workspaceBytes = 32 << 20
	workspace, err := m.alloc(workspaceBytes)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	handle, err := blas.NewHandle()
	if err != nil {
		return nil, err
	}
	m.cleanup = append(m.cleanup, handle.Destroy)
	if err := handle.SetStream(m.stream, workspace, workspaceBytes); err != nil {
		return nil, err
	}
	a, b, c := mats[0], mats[1], mats[2]
	return m.timed("cuBLAS bf16 GEMM", func() error { return handle.GemmBF16(false, false, n, n, n, 1, a, n, b, n, 0, c, n) })
}

// uploadRandomBF16 fills count bf16 values at dst with uniform values in
// ±[1/16, 1) (never zero) through a pinned staging buffer.
func uploadRandomBF16(ctx *cuda.Context, s *cuda.Stream, dst cuda.DevPtr, count int, rng *rand.Rand) (err error) {
	const chunk = 8 << 20 // elements per staging copy
	host, err := ctx.AllocHost(2 * min(chunk, count))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ctx.FreeHost(host)) }()
	vals := host.Bytes16()
	for done := 0; done < count; {
		n := min(chunk, count-done)
		for i := range vals[:n] {
			v := float32(1.0/16 + rng.Float64()*(1-1.0/16))
			if rng.IntN(2) == 0 {
				v = -v
			}
			vals[i] = ref.F32ToBF16(v)
		}
		if err := s.CopyHtoD(dst+cuda.DevPtr(2*done), host.Ptr, 2*n); err != nil {
			return err
		}
		// The staging buffer is refilled next round: wait for the copy.
		if err := s.Sync(); err != nil {
			return err
		}
		done += n
	}
	return nil
}
