package kernels

import (
	"errors"
	"fmt"
	"math/rand/v2"

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
}

// DefaultCalibrateOptions: a 1 GiB copy (far beyond L2) and an 8192³ GEMM
// (large enough for cuBLAS to reach its peak), 20 timed runs each.
func DefaultCalibrateOptions() CalibrateOptions {
	return CalibrateOptions{CopyBytes: 1 << 30, GEMMSize: 8192, Repeats: 20, Warmup: 3, Seed: 1}
}

// CalibrateResult is the device times of every timed run.
type CalibrateResult struct {
	DeviceName, UUID string
	CopyBytes        int
	CopySeconds      []float64
	GEMMSize         int
	GEMMSeconds      []float64
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
	n := opt.GEMMSize
	matrixBytes := n * n * 2
	if free, need := props.TotalMemBytes, uint64(2*opt.CopyBytes+3*matrixBytes); need > free {
		return res, fmt.Errorf("calibrate: needs %d MiB, device has %d MiB", need>>20, free>>20)
	}

	ctx, err := drv.NewContext(opt.Ordinal)
	if err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanup[i]())
		}
		err = errors.Join(err, ctx.Close())
	}()
	alloc := func(bytes int) (cuda.DevPtr, error) {
		p, err := ctx.Alloc(bytes)
		if err == nil {
			cleanup = append(cleanup, func() error { return ctx.Free(p) })
		}
		return p, err
	}
	stream, err := ctx.NewStream()
	if err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	cleanup = append(cleanup, stream.Destroy)
	start, err := ctx.NewEvent()
	if err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	cleanup = append(cleanup, start.Destroy)
	end, err := ctx.NewEvent()
	if err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	cleanup = append(cleanup, end.Destroy)
	timed := func(what string, enqueue func() error) ([]float64, error) {
		var seconds []float64
		for i := 0; i < opt.Warmup+opt.Repeats; i++ {
			if err := start.Record(stream); err != nil {
				return nil, err
			}
			if err := enqueue(); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if err := end.Record(stream); err != nil {
				return nil, err
			}
			if err := end.Sync(); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			ms, err := cuda.ElapsedMs(start, end)
			if err != nil {
				return nil, err
			}
			if i >= opt.Warmup {
				seconds = append(seconds, float64(ms)/1e3)
			}
		}
		return seconds, nil
	}

	// Copy bandwidth.
	src, err := alloc(opt.CopyBytes)
	if err != nil {
		return res, fmt.Errorf("calibrate copy: %w", err)
	}
	dst, err := alloc(opt.CopyBytes)
	if err != nil {
		return res, fmt.Errorf("calibrate copy: %w", err)
	}
	if err := stream.Memset8(src, 0x5a, opt.CopyBytes); err != nil {
		return res, fmt.Errorf("calibrate copy: %w", err)
	}
	if res.CopySeconds, err = timed("device-to-device copy", func() error { return stream.CopyDtoD(dst, src, opt.CopyBytes) }); err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}

	// GEMM rate on random data: zeros would let the tensor cores idle on
	// some parts and power draw would not be representative.
	a, err := alloc(matrixBytes)
	if err != nil {
		return res, fmt.Errorf("calibrate GEMM: %w", err)
	}
	b, err := alloc(matrixBytes)
	if err != nil {
		return res, fmt.Errorf("calibrate GEMM: %w", err)
	}
	c, err := alloc(matrixBytes)
	if err != nil {
		return res, fmt.Errorf("calibrate GEMM: %w", err)
	}
	rng := rand.New(rand.NewPCG(opt.Seed, 0x63616c6962726174)) // "calibrat"
	for _, m := range []cuda.DevPtr{a, b} {
		if err := uploadRandomBF16(ctx, stream, m, n*n, rng); err != nil {
			return res, fmt.Errorf("calibrate GEMM inputs: %w", err)
		}
	}
	// The workspace is allocated first so that cleanup, which runs in
	// reverse, destroys the handle before freeing the memory it uses.
	const workspaceBytes = 32 << 20
	workspace, err := alloc(workspaceBytes)
	if err != nil {
		return res, fmt.Errorf("calibrate GEMM workspace: %w", err)
	}
	handle, err := blas.NewHandle()
	if err != nil {
		return res, fmt.Errorf("calibrate GEMM: %w", err)
	}
	cleanup = append(cleanup, handle.Destroy)
	if err := handle.SetStream(stream, workspace, workspaceBytes); err != nil {
		return res, fmt.Errorf("calibrate GEMM: %w", err)
	}
	gemm := func() error { return handle.GemmBF16(false, false, n, n, n, 1, a, n, b, n, 0, c, n) }
	if res.GEMMSeconds, err = timed("cuBLAS bf16 GEMM", gemm); err != nil {
		return res, fmt.Errorf("calibrate: %w", err)
	}
	return res, nil
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
