package gpu

import (
	"errors"
	"fmt"

	"stepbench/cuda"
	"stepbench/runner"
)

var _ runner.FP8Backend = (*Backend)(nil)

const (
	// MinFP8Arch is the oldest architecture with FP8 tensor cores (Ada,
	// sm_89): cuBLASLt has no FP8 GEMM below it.
	MinFP8Arch = 89
	// ltWorkspaceBytes is cuBLASLt's workspace (32 MiB: what NVIDIA's
	// guide advises for Hopper), fixed so that a GEMM never allocates.
	ltWorkspaceBytes = 32 << 20
	// fp8AccBytes is the fp32 product of an FP8 GEMM whose scales are
	// vectors, before fp8_scale_out applies them: a GEMM wider than it
	// runs in row chunks that fit.
	fp8AccBytes = 64 << 20
)

// fp8State is what the FP8 path holds: cuBLASLt and its workspace, the
// dynamic scale's partial maxima, the fp32 product buffer.
type fp8State struct {
	lt        *cuda.CublasLt
	handle    *cuda.LtHandle
	workspace cuda.DevPtr
	partials  cuda.DevPtr
	acc       cuda.DevPtr
}

// CheckFP8 says in one line why this GPU cannot run FP8 GEMMs (nil: it can).
func (c *Backend) CheckFP8() error { return CheckFP8Device(c.info.Device) }

// CheckFP8Device says in one line why d cannot run FP8 GEMMs (nil: it
// can): before a backend opens, a refusal needs no kernel compiled.
func CheckFP8Device(d cuda.DeviceProps) error {
	if arch := d.Major*10 + d.Minor; arch < MinFP8Arch {
		return fmt.Errorf("FP8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell: FP8 tensor cores); %s is %d.%d", d.Name, d.Major, d.Minor)
	}
	return nil
}

// EnableFP8 opens cuBLASLt beside cuBLAS and allocates the FP8 path's
// workspaces, once; it refuses a GPU below compute capability 8.9.
func (c *Backend) EnableFP8() error {
	if c.fp8 != nil {
		return nil
	}
	if c.planning != nil {
		return errors.New("FP8 weights: the planner (the estimate) does not plan cuBLASLt's FP8 products yet")
	}
	if err := c.CheckFP8(); err != nil {
		return err
	}
	if err := c.notCapturing("enable fp8"); err != nil {
		return err
	}
	lt, err := cuda.OpenCublasLt(c.blas)
	if err != nil {
		return fmt.Errorf("FP8 GEMMs: %w", err)
	}
	f := &fp8State{lt: lt}
	if f.handle, err = lt.NewHandle(); err != nil {
		return fmt.Errorf("FP8 GEMMs: %w", err)
	}
	c.fp8 = f
	for _, a := range []struct {
		dst   *cuda.DevPtr
		bytes int
		what  string
	}{{&f.workspace, ltWorkspaceBytes, "cuBLASLt workspace"}, {&f.partials, FP8PartialsBytes, "FP8 partial maxima"},
		{&f.acc, fp8AccBytes, "FP8 fp32 products"}} {
		if *a.dst, err = c.ctx.Alloc(a.bytes); err != nil {
			return errors.Join(fmt.Errorf("%s: %w", a.what, err), c.closeFP8())
		}
		c.ctx.NameAllocation(*a.dst, a.what)
	}
	c.info.CublasLtPath, c.info.CublasLtVersion = lt.Path(), lt.Version()
	return nil
}

func (c *Backend) closeFP8() error {
	f := c.fp8
	if f == nil {
		return nil
	}
	c.fp8 = nil
	var errs []error
	if f.handle != nil {
		errs = append(errs, f.handle.Destroy())
	}
	for _, p := range []cuda.DevPtr{f.workspace, f.partials, f.acc} {
		if p != 0 {
			errs = append(errs, c.ctx.Free(p))
		}
	}
	return errors.Join(errs...)
}

// UploadFP8 copies E4M3 bytes into dst at element offset.
func (c *Backend) UploadFP8(dst runner.Buffer, offset int, src []uint8) error {
	if offset < 0 {
		return fmt.Errorf("upload fp8: offset %d", offset)
	}
	p, err := dev(dst, runner.F8E4M3, offset+len(src), "upload fp8", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload fp8", p+cuda.DevPtr(offset), src)
}

// DownloadFP8 waits for the stream and copies the first len(dst) bytes.
func (c *Backend) DownloadFP8(src runner.Buffer, dst []uint8) error {
	p, err := dev(src, runner.F8E4M3, len(dst), "download fp8", "src", false)
	if err != nil {
		return err
	}
	return c.download("download fp8", dst, p)
}

// DownloadF32 waits for the stream and copies the first len(dst) elements.
func (c *Backend) DownloadF32(src runner.Buffer, dst []float32) error {
	p, err := dev(src, runner.F32, len(dst), "download f32", "src", false)
	if err != nil {
		return err
	}
	return c.download("download f32", asBytes(dst), p)
}

// QuantizeFP8 quantizes x [rows, cols] into out with fp8.cu's kernels
// (runner.FP8Backend). A static scale needs no FP8 path (EnableFP8: an FP8
// KV cache's synthetic fill quantizes with it on any GPU, without
// cuBLASLt); the dynamic modes do.
func (c *Backend) QuantizeFP8(out, scale, x runner.Buffer, rows, cols int, mode runner.ActQuant) error {
	if c.fp8 == nil && mode != runner.QuantStatic {
		return errors.New("quantize fp8: EnableFP8 first")
	}
	if rows < 0 || cols < 0 {
		return fmt.Errorf("quantize fp8: rows %d cols %d", rows, cols)
	}
	n := rows * cols
	scales := 1
	if mode == runner.QuantDynamicToken {
		scales = rows
	}
	o := operands{op: "quantize fp8"}
	pOut := o.get(out, runner.F8E4M3, n, "out")
	pScale := o.get(scale, runner.F32, scales, "scale")
	pX := o.get(x, runner.BF16, n, "x")
	if o.err != nil {
		return o.err
	}
	switch mode {
	case runner.QuantDynamicToken:
		return c.set.QuantizeFP8Token(c.stream, pOut, pScale, pX, rows, cols)
	case runner.QuantStatic, runner.QuantDynamicTensor:
		var partials cuda.DevPtr
		if c.fp8 != nil {
			partials = c.fp8.partials
		}
		return c.set.QuantizeFP8Tensor(c.stream, pOut, pScale, partials, pX, n, mode == runner.QuantDynamicTensor)
	}
	return fmt.Errorf("quantize fp8: unknown mode %d", mode)
}

// LinearFP8 is out[m,n] = x[m,k]·w[n,k]ᵀ of E4M3 operands through
// cuBLASLt (runner.FP8Backend). Scalar scales are cuBLASLt's A and B scale
// pointers and the product comes out in bf16; where a scale is a vector
// (per-token x, per-channel w) cuBLASLt writes the fp32 product, in row
// chunks of fp8AccBytes, and fp8_scale_out applies both scales.
func (c *Backend) LinearFP8(out, x, xScale, w, wScale runner.Buffer, m, n, k int, xPerRow, wPerRow bool) error {
	if c.fp8 == nil {
		return errors.New("linear fp8: EnableFP8 first")
	}
	if m < 0 || n < 1 || k < 1 {
		return fmt.Errorf("linear fp8: m=%d n=%d k=%d", m, n, k)
	}
	xs, ws := 1, 1
	if xPerRow {
		xs = m
	}
	if wPerRow {
		ws = n
	}
	o := operands{op: "linear fp8"}
	pOut := o.get(out, runner.BF16, m*n, "out")
	pX := o.get(x, runner.F8E4M3, m*k, "x")
	pXs := o.get(xScale, runner.F32, xs, "x scale")
	pW := o.get(w, runner.F8E4M3, n*k, "w")
	pWs := o.get(wScale, runner.F32, ws, "w scale")
	if o.err != nil || m == 0 {
		return o.err
	}
	if err := c.fp8.linear(c.stream, c.set, pOut, pX, pXs, pW, pWs, m, n, k, xPerRow, wPerRow); err != nil {
		return fmt.Errorf("linear fp8: %w", c.rootCause(err))
	}
	return nil
}

// linear is LinearFP8 on device pointers (the verifier's checks call it too).
func (f *fp8State) linear(s *cuda.Stream, set *Kernels, out, x, xs, w, ws cuda.DevPtr, m, n, k int, xPerRow, wPerRow bool) error {
	mm := cuda.FP8Matmul{M: n, N: m, K: k, A: w, Lda: k, B: x, Ldb: k, D: out, Ldd: n,
		Workspace: f.workspace, WorkspaceBytes: ltWorkspaceBytes}
	if !xPerRow && !wPerRow {
		mm.AScale, mm.BScale = ws, xs
		return f.handle.MatmulFP8(s, mm)
	}
	xStride, wStride := 0, 0
	if xPerRow {
		xStride = 1
	}
	if wPerRow {
		wStride = 1
	}
	chunk := max(1, fp8AccBytes/(4*n))
	for r0 := 0; r0 < m; r0 += chunk {
		rows := min(chunk, m-r0)
		mm.N, mm.B, mm.D, mm.OutF32 = rows, x+cuda.DevPtr(r0*k), f.acc, true
		if err := f.handle.MatmulFP8(s, mm); err != nil {
			return err
		}
		if err := set.ScaleFP8Out(s, out+cuda.DevPtr(2*r0*n), f.acc, xs+cuda.DevPtr(4*r0*xStride), xStride, ws, wStride, rows, n); err != nil {
			return err
		}
	}
	return nil
}
