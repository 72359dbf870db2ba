package gpu

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// buffer is device memory of n elements of dt.
type buffer struct {
	ptr cuda.DevPtr
	dt  runner.DType
	n   int
}

func (b *buffer) DType() runner.DType { return b.dt }
func (b *buffer) Len() int            { return b.n }

// Alloc allocates device memory (contents undefined).
func (c *Backend) Alloc(dt runner.DType, n int) (runner.Buffer, error) {
	if err := c.notCapturing("alloc"); err != nil {
		return nil, err
	}
	if dt != runner.BF16 && dt != runner.F32 && dt != runner.I32 && dt != runner.F8E4M3 && dt != runner.I64 {
		return nil, fmt.Errorf("alloc: unknown dtype %d", dt)
	}
	if n < 0 || int64(n) > math.MaxInt64/8 {
		return nil, fmt.Errorf("alloc %d %s elements", n, dt)
	}
	// A zero-length buffer still gets a valid, aligned address.
	p, err := c.devAlloc(max(n*dt.Size(), 16))
	if err != nil {
		return nil, fmt.Errorf("alloc %d %s: %w", n, dt, err)
	}
	return &buffer{ptr: p, dt: dt, n: n}, nil
}

// NameBuffer labels b for the emulated device's fault messages (a no-op on a GPU).
func (c *Backend) NameBuffer(b runner.Buffer, name string) {
	if cb, ok := b.(*buffer); ok && cb.ptr != 0 && c.planning == nil {
		c.ctx.NameAllocation(cb.ptr, name)
	}
}

// Free releases a buffer's device memory.
func (c *Backend) Free(b runner.Buffer) error {
	if err := c.notCapturing("free"); err != nil {
		return err
	}
	cb, ok := b.(*buffer)
	if !ok || cb == nil {
		return fmt.Errorf("free: not a cuda buffer (%T)", b)
	}
	if cb.ptr == 0 {
		return errors.New("free: buffer already freed")
	}
	var err error
	if c.planning == nil {
		err = c.ctx.Free(cb.ptr)
	}
	cb.ptr, cb.n = 0, 0
	if err != nil {
		return fmt.Errorf("free: %w", err)
	}
	return nil
}

// dev checks b is a live cuda buffer of dt holding at least need elements and
// returns its address; a nil b gives 0 when optional.
func dev(b runner.Buffer, dt runner.DType, need int, op, operand string, optional bool) (cuda.DevPtr, error) {
	if b == nil {
		if optional {
			return 0, nil
		}
		return 0, fmt.Errorf("%s: %s is nil", op, operand)
	}
	cb, ok := b.(*buffer)
	if !ok || cb == nil {
		return 0, fmt.Errorf("%s: %s is not a cuda buffer (%T)", op, operand, b)
	}
	switch {
	case cb.ptr == 0:
		return 0, fmt.Errorf("%s: %s was freed", op, operand)
	case cb.dt != dt:
		return 0, fmt.Errorf("%s: %s is %s, want %s", op, operand, cb.dt, dt)
	case need < 0 || cb.n < need:
		return 0, fmt.Errorf("%s: %s holds %d elements, needs %d", op, operand, cb.n, need)
	}
	return cb.ptr, nil
}

// operands resolves several buffers at once, stopping at the first problem.
type operands struct {
	op  string
	err error
}

func (o *operands) get(b runner.Buffer, dt runner.DType, need int, operand string) cuda.DevPtr {
	return o.getOpt(b, dt, need, operand, false)
}

func (o *operands) getOpt(b runner.Buffer, dt runner.DType, need int, operand string, optional bool) cuda.DevPtr {
	if o.err != nil {
		return 0
	}
	p, err := dev(b, dt, need, o.op, operand, optional)
	o.err = err
	return p
}

// upload copies bytes from host memory to dst through the pinned staging
// buffer, chunk by chunk, waiting for each chunk before reusing the buffer.
func (c *Backend) upload(op string, dst cuda.DevPtr, src []byte) error {
	if err := c.notCapturing(op); err != nil || c.planning != nil {
		return err
	}
	stage := unsafe.Slice((*byte)(c.staging.Ptr), c.staging.Bytes)
	for done := 0; done < len(src); {
		n := copy(stage, src[done:])
		if err := c.stream.CopyHtoD(dst+cuda.DevPtr(done), c.staging.Ptr, n); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if err := c.stream.Sync(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		done += n
	}
	return nil
}

// download copies len(dst) bytes from src through the staging buffer; it
// waits for all work enqueued before it.
func (c *Backend) download(op string, dst []byte, src cuda.DevPtr) error {
	if err := c.notCapturing(op); err != nil || c.planning != nil {
		return err
	}
	for done := 0; done < len(dst); {
		n := min(len(dst)-done, c.staging.Bytes)
		if err := c.stream.CopyDtoH(c.staging.Ptr, src+cuda.DevPtr(done), n); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if err := c.stream.Sync(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		copy(dst[done:done+n], unsafe.Slice((*byte)(c.staging.Ptr), n))
		done += n
	}
	return nil
}

func asBytes[T uint8 | uint16 | int32 | int64 | float32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// UploadBF16 copies src into dst at element offset.
func (c *Backend) UploadBF16(dst runner.Buffer, offset int, src []uint16) error {
	if offset < 0 {
		return fmt.Errorf("upload bf16: offset %d", offset)
	}
	p, err := dev(dst, runner.BF16, offset+len(src), "upload bf16", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload bf16", p+cuda.DevPtr(2*offset), asBytes(src))
}

// UploadF32 copies src into dst.
func (c *Backend) UploadF32(dst runner.Buffer, src []float32) error {
	p, err := dev(dst, runner.F32, len(src), "upload f32", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload f32", p, asBytes(src))
}

// UploadI32 copies src into dst.
func (c *Backend) UploadI32(dst runner.Buffer, src []int32) error {
	p, err := dev(dst, runner.I32, len(src), "upload i32", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload i32", p, asBytes(src))
}

// UploadI64 copies src into dst.
func (c *Backend) UploadI64(dst runner.Buffer, src []int64) error {
	p, err := dev(dst, runner.I64, len(src), "upload i64", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload i64", p, asBytes(src))
}

// DownloadBF16 waits for the stream and copies the first len(dst) elements.
func (c *Backend) DownloadBF16(src runner.Buffer, dst []uint16) error {
	p, err := dev(src, runner.BF16, len(dst), "download bf16", "src", false)
	if err != nil {
		return err
	}
	return c.download("download bf16", asBytes(dst), p)
}

// DownloadI32 waits for the stream and copies the first len(dst) elements.
func (c *Backend) DownloadI32(src runner.Buffer, dst []int32) error {
	p, err := dev(src, runner.I32, len(dst), "download i32", "src", false)
	if err != nil {
		return err
	}
	return c.download("download i32", asBytes(dst), p)
}

// FillDummy generates dummy weights on the device, bit-identical to ref.FillDummy.
func (c *Backend) FillDummy(dst runner.Buffer, offset, n int, seed uint64, name string, first uint64, kind ref.DummyKind) error {
	return c.FillDummyRows(dst, offset, 1, n, seed, name, first, 0, kind)
}

// FillDummyRows generates a block of dummy weights on the device in one
// launch, bit-identical to ref.FillDummyRows.
func (c *Backend) FillDummyRows(dst runner.Buffer, offset, rows, cols int, seed uint64, name string, first, rowStride uint64, kind ref.DummyKind) error {
	if offset < 0 || rows < 0 || cols < 0 {
		return fmt.Errorf("fill dummy %s: %d×%d elements at %d", name, rows, cols, offset)
	}
	p, err := dev(dst, runner.BF16, offset+rows*cols, "fill dummy "+name, "dst", false)
	if err != nil {
		return err
	}
	return c.set.FillDummy(c.stream, p+cuda.DevPtr(2*offset), rows*cols, cols, ref.DummyKey(seed, name), first, rowStride, kind)
}
