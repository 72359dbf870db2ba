package runner

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
)

const (
	// cublasWorkspaceBytes is the fixed cuBLAS workspace, set after every
	// cublasSetStream so that a GEMM never allocates (graph capture forbids it).
	cublasWorkspaceBytes = 32 << 20
	// stagingBytes is the pinned host buffer every upload and download goes through.
	stagingBytes = 16 << 20
	// memoryHeadroomBytes is kept free beyond the estimate: the CUDA context,
	// cuBLAS's own state, module code and allocator rounding.
	memoryHeadroomBytes = 1 << 30
)

// StepCapturer is a backend that can record the ops of one decode step and
// replay them (the cuda backend's CUDA graphs). Engine.Decode captures the
// first decode step of a run's buffers and replays it afterwards; the ops
// read the position from the device (Backend.RopeKVWrite), so one recording
// serves every position.
type StepCapturer interface {
	// CaptureEnabled is false when the user asked for eager decode steps.
	CaptureEnabled() bool
	// BeginCapture makes the following ops be recorded instead of run.
	BeginCapture() error
	// EndCapture stops recording and returns the recorded step.
	EndCapture() (CapturedStep, error)
}

// CapturedStep is a recorded decode step.
type CapturedStep interface {
	Launch() error // enqueue one replay
	Destroy() error
}

// graphKey is what a captured decode step depends on besides the buffers
// (which Engine.ensureBuffers owns: reallocating them drops every graph).
type graphKey struct{ batch, maxSeq int }

// decodeGraphs holds the captured decode steps of the current buffers.
type decodeGraphs struct {
	steps map[graphKey]CapturedStep
	// eager marks keys whose decode step has run once without capture:
	// lazy module loading (the default since CUDA 12.2) must not load a
	// kernel, ours or cuBLAS's, inside a capture on drivers before 12.3.
	eager map[graphKey]bool
}

// ranEager reports whether k's step already ran eagerly, and marks it.
func (g *decodeGraphs) ranEager(k graphKey) bool {
	if g.eager == nil {
		g.eager = map[graphKey]bool{}
	}
	seen := g.eager[k]
	g.eager[k] = true
	return seen
}

func (g *decodeGraphs) get(k graphKey) CapturedStep { return g.steps[k] }

func (g *decodeGraphs) put(k graphKey, s CapturedStep) {
	if g.steps == nil {
		g.steps = map[graphKey]CapturedStep{}
	}
	g.steps[k] = s
}

// invalidate destroys every graph: they point at buffers about to be freed.
func (g *decodeGraphs) invalidate() error {
	var errs []error
	for k, s := range g.steps {
		errs = append(errs, s.Destroy())
		delete(g.steps, k)
	}
	clear(g.eager)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy decode graphs: %w", err)
	}
	return nil
}

// len is the number of cached graphs.
func (g *decodeGraphs) len() int { return len(g.steps) }

// CUDAOptions configure the cuda backend.
type CUDAOptions struct {
	Ordinal       int    // device ordinal
	KernelsDir    string // compile the *.cu files of this directory instead of the embedded ones
	NVRTCPath     string // explicit libnvrtc path ("" searches)
	CublasPath    string // explicit libcublas path ("" searches)
	CacheDir      string // cubin cache ("" is kernels.DefaultCacheDir)
	DisableGraphs bool   // run decode steps eagerly instead of replaying a CUDA graph
	Progress      io.Writer
}

// CUDAInfo is what the cuda backend found: the device and the libraries.
type CUDAInfo struct {
	Device              cuda.DeviceProps
	DriverVersion       int // CUDA driver API version, e.g. 13000
	NVRTCPath           string
	NVRTCMajor          int
	NVRTCMinor          int
	CublasPath          string
	CublasVersion       int // major*10000 + minor*100 + patch
	GraphsEnabled       bool
	MemFreeBytes        uint64 // at start, after the backend's own allocations
	MemTotalBytes       uint64
	KernelArch          int // sm_XY the kernels were compiled for
	KernelsFromDisk     bool
	CublasWorkspaceSize int
	// Emulated describes the emulated CUDA device when that is what runs the
	// kernels (cuda/emu: times are not GPU times); "" on a GPU.
	Emulated string
}

// CUDA runs every op on one GPU: kernels from package kernels on one stream,
// Linear through cuBLAS. Like every cuda object it belongs to the goroutine
// that made it, which must be locked to its OS thread (runtime.LockOSThread)
// for the backend's whole life.
type CUDA struct {
	info   CUDAInfo
	drv    *cuda.Driver
	nvrtc  *cuda.NVRTC
	blas   *cuda.Cublas
	ctx    *cuda.Context
	stream *cuda.Stream
	set    *kernels.Set
	handle *cuda.CublasHandle

	blasWorkspace cuda.DevPtr
	staging       cuda.HostBuf

	// Decode attention's float32 workspace; replaced ones are kept until
	// Close because a captured graph may still point at them.
	attnWorkspace      cuda.DevPtr
	attnWorkspaceBytes int
	retiredWorkspaces  []cuda.DevPtr

	events    []*cuda.Event
	capturing bool
}

// cudaBuffer is device memory of n elements of dt.
type cudaBuffer struct {
	ptr cuda.DevPtr
	dt  DType
	n   int
}

func (b *cudaBuffer) DType() DType { return b.dt }
func (b *cudaBuffer) Len() int     { return b.n }

// NewCUDA opens the driver, NVRTC and cuBLAS, compiles (or loads cached)
// kernels for the device and makes the stream, the cuBLAS handle and its
// workspace. Call it from the goroutine that will make every later call,
// locked to its OS thread.
func NewCUDA(opts CUDAOptions) (*CUDA, error) {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	c := &CUDA{}
	fail := func(err error) (*CUDA, error) { return nil, errors.Join(err, c.Close()) }
	var err error
	if c.drv, err = cuda.OpenDriver(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	count, err := c.drv.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if opts.Ordinal < 0 || opts.Ordinal >= count {
		return nil, fmt.Errorf("cuda backend: device %d requested, %d visible", opts.Ordinal, count)
	}
	if c.info.Device, err = c.drv.Props(opts.Ordinal); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if c.info.DriverVersion, err = c.drv.Version(); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	if c.nvrtc, err = cuda.OpenNVRTC(opts.NVRTCPath); err != nil {
		return nil, fmt.Errorf("cuda backend: NVRTC: %w", err)
	}
	c.info.NVRTCPath = c.nvrtc.Path()
	c.info.NVRTCMajor, c.info.NVRTCMinor = c.nvrtc.Version()
	if c.blas, err = cuda.OpenCublas(opts.CublasPath); err != nil {
		return nil, fmt.Errorf("cuda backend: cuBLAS: %w", err)
	}
	c.info.CublasPath = c.blas.Path()
	if c.info.CublasVersion, err = c.blas.Version(); err != nil {
		return nil, fmt.Errorf("cuda backend: cuBLAS: %w", err)
	}
	if err := sameKind(c.drv.Emulated(), c.nvrtc.Emulated(), c.blas.Emulated()); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	c.info.Emulated = c.drv.Emulated()

	dev := c.info.Device
	arch := dev.Major*10 + dev.Minor
	c.info.KernelArch, c.info.KernelsFromDisk = arch, opts.KernelsDir != ""
	srcs, err := kernels.Sources(opts.KernelsDir)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	start := time.Now()
	compiled, err := kernels.Compile(c.nvrtc, srcs, arch, opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	fmt.Fprintf(progress, "stepbench: kernels for sm_%d ready in %.1f s (NVRTC %d.%d)\n", arch, time.Since(start).Seconds(), c.info.NVRTCMajor, c.info.NVRTCMinor)

	if c.ctx, err = c.drv.NewContext(opts.Ordinal); err != nil {
		return fail(fmt.Errorf("cuda backend: %w", err))
	}
	if c.stream, err = c.ctx.NewStream(); err != nil {
		return fail(fmt.Errorf("cuda backend: %w", err))
	}
	if c.set, err = kernels.Load(c.ctx, compiled, dev.SMCount); err != nil {
		return fail(fmt.Errorf("cuda backend: %w", err))
	}
	if c.handle, err = c.blas.NewHandle(); err != nil {
		return fail(fmt.Errorf("cuda backend: %w", err))
	}
	if c.blasWorkspace, err = c.ctx.Alloc(cublasWorkspaceBytes); err != nil {
		return fail(fmt.Errorf("cuda backend: cuBLAS workspace: %w", err))
	}
	if err := c.handle.SetStream(c.stream, c.blasWorkspace, cublasWorkspaceBytes); err != nil {
		return fail(fmt.Errorf("cuda backend: %w", err))
	}
	c.info.CublasWorkspaceSize = cublasWorkspaceBytes
	if c.staging, err = c.ctx.AllocHost(stagingBytes); err != nil {
		return fail(fmt.Errorf("cuda backend: staging buffer: %w", err))
	}
	if c.info.MemFreeBytes, c.info.MemTotalBytes, err = c.ctx.MemInfo(); err != nil {
		return fail(fmt.Errorf("cuda backend: %w", err))
	}
	c.info.GraphsEnabled = !opts.DisableGraphs
	return c, nil
}

// sameKind refuses a mix of the emulated device's libraries with real ones
// (an emulated cubin does not load on a GPU, nor a real one on the
// emulator); the arguments are each library's Emulated() description.
func sameKind(driver, nvrtc, cublas string) error {
	if (driver == "") == (nvrtc == "") && (driver == "") == (cublas == "") {
		return nil
	}
	kind := func(emulated string) string {
		if emulated == "" {
			return "real"
		}
		return "emulated"
	}
	return fmt.Errorf("the CUDA driver is %s but NVRTC is %s and cuBLAS %s: take all three from one place (STEPBENCH_CUDA_LIBS=DIR)",
		kind(driver), kind(nvrtc), kind(cublas))
}

// Info describes the device and libraries the backend uses.
func (c *CUDA) Info() CUDAInfo { return c.info }

// Name is "cuda".
func (c *CUDA) Name() string { return "cuda" }

// CheckMemory compares est with the device's free memory now; call it before
// loading weights so that a run that cannot fit fails with the numbers.
func (c *CUDA) CheckMemory(est MemoryEstimate) error {
	free, total, err := c.ctx.MemInfo()
	if err != nil {
		return fmt.Errorf("check memory: %w", err)
	}
	return checkFits(est, free, total, memoryHeadroomBytes, c.info.Device.Name)
}

// checkFits is CheckMemory's arithmetic.
func checkFits(est MemoryEstimate, freeBytes, totalBytes uint64, headroomBytes int64, device string) error {
	need := est.Total() + headroomBytes
	if need <= 0 || uint64(need) <= freeBytes {
		return nil
	}
	gb := func(b int64) float64 { return float64(b) / 1e9 }
	return fmt.Errorf("the run needs %.2f GB on %s (weights %.2f GB + KV cache %.2f GB + activations %.2f GB + %.2f GB headroom) but only %.2f GB of %.2f GB are free: use a smaller batch size, shorter lengths or a smaller model",
		gb(need), device, gb(est.WeightBytes), gb(est.KVCacheBytes), gb(est.ActivationBytes), gb(headroomBytes),
		float64(freeBytes)/1e9, float64(totalBytes)/1e9)
}

func (c *CUDA) notCapturing(op string) error {
	if c.capturing {
		return fmt.Errorf("%s: not allowed while a decode step is being captured", op)
	}
	return nil
}

// Alloc allocates device memory (contents undefined).
func (c *CUDA) Alloc(dt DType, n int) (Buffer, error) {
	if err := c.notCapturing("alloc"); err != nil {
		return nil, err
	}
	if dt != BF16 && dt != F32 && dt != I32 {
		return nil, fmt.Errorf("alloc: unknown dtype %d", dt)
	}
	if n < 0 || int64(n) > math.MaxInt64/8 {
		return nil, fmt.Errorf("alloc %d %s elements", n, dt)
	}
	// A zero-length buffer still gets a valid, aligned address.
	p, err := c.ctx.Alloc(max(n*dt.Size(), 16))
	if err != nil {
		return nil, fmt.Errorf("alloc %d %s: %w", n, dt, err)
	}
	return &cudaBuffer{ptr: p, dt: dt, n: n}, nil
}

// NameBuffer labels b for the emulated device's fault messages (a no-op on a GPU).
func (c *CUDA) NameBuffer(b Buffer, name string) {
	if cb, ok := b.(*cudaBuffer); ok && cb.ptr != 0 {
		c.ctx.NameAllocation(cb.ptr, name)
	}
}

// Free releases a buffer's device memory.
func (c *CUDA) Free(b Buffer) error {
	if err := c.notCapturing("free"); err != nil {
		return err
	}
	cb, ok := b.(*cudaBuffer)
	if !ok || cb == nil {
		return fmt.Errorf("free: not a cuda buffer (%T)", b)
	}
	if cb.ptr == 0 {
		return errors.New("free: buffer already freed")
	}
	err := c.ctx.Free(cb.ptr)
	cb.ptr, cb.n = 0, 0
	if err != nil {
		return fmt.Errorf("free: %w", err)
	}
	return nil
}

// dev checks b is a live cuda buffer of dt holding at least need elements and
// returns its address; a nil b gives 0 when optional.
func dev(b Buffer, dt DType, need int, op, operand string, optional bool) (cuda.DevPtr, error) {
	if b == nil {
		if optional {
			return 0, nil
		}
		return 0, fmt.Errorf("%s: %s is nil", op, operand)
	}
	cb, ok := b.(*cudaBuffer)
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

func (o *operands) get(b Buffer, dt DType, need int, operand string) cuda.DevPtr {
	return o.getOpt(b, dt, need, operand, false)
}

func (o *operands) getOpt(b Buffer, dt DType, need int, operand string, optional bool) cuda.DevPtr {
	if o.err != nil {
		return 0
	}
	p, err := dev(b, dt, need, o.op, operand, optional)
	o.err = err
	return p
}

// upload copies bytes from host memory to dst through the pinned staging
// buffer, chunk by chunk, waiting for each chunk before reusing the buffer.
func (c *CUDA) upload(op string, dst cuda.DevPtr, src []byte) error {
	if err := c.notCapturing(op); err != nil {
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
func (c *CUDA) download(op string, dst []byte, src cuda.DevPtr) error {
	if err := c.notCapturing(op); err != nil {
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

func asBytes[T uint16 | int32 | float32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// UploadBF16 copies src into dst at element offset.
func (c *CUDA) UploadBF16(dst Buffer, offset int, src []uint16) error {
	if offset < 0 {
		return fmt.Errorf("upload bf16: offset %d", offset)
	}
	p, err := dev(dst, BF16, offset+len(src), "upload bf16", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload bf16", p+cuda.DevPtr(2*offset), asBytes(src))
}

// UploadF32 copies src into dst.
func (c *CUDA) UploadF32(dst Buffer, src []float32) error {
	p, err := dev(dst, F32, len(src), "upload f32", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload f32", p, asBytes(src))
}

// UploadI32 copies src into dst.
func (c *CUDA) UploadI32(dst Buffer, src []int32) error {
	p, err := dev(dst, I32, len(src), "upload i32", "dst", false)
	if err != nil {
		return err
	}
	return c.upload("upload i32", p, asBytes(src))
}

// DownloadBF16 waits for the stream and copies the first len(dst) elements.
func (c *CUDA) DownloadBF16(src Buffer, dst []uint16) error {
	p, err := dev(src, BF16, len(dst), "download bf16", "src", false)
	if err != nil {
		return err
	}
	return c.download("download bf16", asBytes(dst), p)
}

// DownloadI32 waits for the stream and copies the first len(dst) elements.
func (c *CUDA) DownloadI32(src Buffer, dst []int32) error {
	p, err := dev(src, I32, len(dst), "download i32", "src", false)
	if err != nil {
		return err
	}
	return c.download("download i32", asBytes(dst), p)
}

// FillDummy generates dummy weights on the device, bit-identical to ref.FillDummy.
func (c *CUDA) FillDummy(dst Buffer, offset, n int, seed uint64, name string, first uint64, kind ref.DummyKind) error {
	if offset < 0 || n < 0 {
		return fmt.Errorf("fill dummy %s: %d elements at %d", name, n, offset)
	}
	p, err := dev(dst, BF16, offset+n, "fill dummy "+name, "dst", false)
	if err != nil {
		return err
	}
	return c.set.FillDummy(c.stream, p+cuda.DevPtr(2*offset), n, ref.DummyKey(seed, name), first, kind)
}

// Embed gathers embedding rows; ids must be in range (the engine checks prompts).
func (c *CUDA) Embed(out, table, ids Buffer, tokens, hidden int) error {
	o := operands{op: "embed"}
	pOut := o.get(out, BF16, tokens*hidden, "out")
	pTable := o.get(table, BF16, hidden, "table")
	pIDs := o.get(ids, I32, tokens, "ids")
	if o.err != nil {
		return o.err
	}
	return c.set.Embed(c.stream, pOut, pTable, pIDs, tokens, hidden)
}

// AddRMSNorm is the fused residual add and RMSNorm.
func (c *CUDA) AddRMSNorm(out, residual, add, weight Buffer, rows, hidden int, eps float32) error {
	n := rows * hidden
	o := operands{op: "add_rmsnorm"}
	pOut := o.get(out, BF16, n, "out")
	pRes := o.get(residual, BF16, n, "residual")
	pAdd := o.getOpt(add, BF16, n, "add", true)
	pW := o.get(weight, BF16, hidden, "weight")
	if o.err != nil {
		return o.err
	}
	return c.set.AddRMSNorm(c.stream, pOut, pRes, pAdd, pW, rows, hidden, eps)
}

// Linear is out[m,n] = x[m,k]·w[n,k]ᵀ through cuBLAS: in column-major terms
// C(n×m) = op(A)·B with A = w seen as k×n (transposed), B = x seen as k×m.
func (c *CUDA) Linear(out, x, w Buffer, m, n, k int) error {
	if m < 0 || n < 1 || k < 1 {
		return fmt.Errorf("linear: m=%d n=%d k=%d", m, n, k)
	}
	o := operands{op: "linear"}
	pOut := o.get(out, BF16, m*n, "out")
	pX := o.get(x, BF16, m*k, "x")
	pW := o.get(w, BF16, n*k, "w")
	if o.err != nil || m == 0 {
		return o.err
	}
	if err := c.handle.GemmBF16(true, false, n, m, k, 1, pW, k, pX, k, 0, pOut, n); err != nil {
		return fmt.Errorf("linear: %w", c.rootCause(err))
	}
	return nil
}

// rootCause adds the stream's sticky error to a library call's failure:
// after a faulting kernel, cuBLAS only says CUBLAS_STATUS_EXECUTION_FAILED,
// and the fault is what the user needs to see. (No sync while capturing:
// it would invalidate the capture.)
func (c *CUDA) rootCause(err error) error {
	if c.capturing {
		return err
	}
	if syncErr := c.stream.Sync(); syncErr != nil && cuda.IsSticky(syncErr) {
		return fmt.Errorf("%w, after an earlier kernel fault: %w", err, syncErr)
	}
	return err
}

func kernelShape(s AttnShape) kernels.AttnShape { return kernels.AttnShape(s) }

// RopeKVWrite rotates q and k and writes k and v to the cache; the kernel
// reads the start position from pos.
func (c *CUDA) RopeKVWrite(q, kCache, vCache, qkv, invFreq, pos Buffer, s AttnShape) error {
	T, D := s.Tokens(), s.HeadDim
	cache := s.Batch * s.MaxSeq * s.KVHeads * D
	o := operands{op: "rope_kv_write"}
	pQ := o.get(q, BF16, T*s.Heads*D, "q")
	pK := o.get(kCache, BF16, cache, "kCache")
	pV := o.get(vCache, BF16, cache, "vCache")
	pQKV := o.get(qkv, BF16, T*(s.Heads+2*s.KVHeads)*D, "qkv")
	pFreq := o.get(invFreq, F32, D/2, "invFreq")
	pPos := o.get(pos, I32, 1, "pos")
	if o.err != nil {
		return o.err
	}
	return c.set.RopeKVWrite(c.stream, pQ, pK, pV, pQKV, pFreq, pPos, kernelShape(s))
}

// ReserveAttention makes the decode workspace big enough for s's batch and
// cache length. The engine calls it when it allocates a run's buffers, so
// no timed region or capture allocates (cuMemAlloc can synchronise the
// device); Attention calls it too, as a guard, and fails inside a capture.
func (c *CUDA) ReserveAttention(s AttnShape) error {
	decode := kernelShape(s)
	decode.SeqLen, decode.StartPos = 1, 0
	need := c.set.AttentionWorkspaceBytes(decode)
	if need <= c.attnWorkspaceBytes {
		return nil
	}
	if c.capturing {
		return fmt.Errorf("attention: decode workspace of %d bytes not reserved before capture (have %d)", need, c.attnWorkspaceBytes)
	}
	p, err := c.ctx.Alloc(need)
	if err != nil {
		return fmt.Errorf("attention workspace: %w", err)
	}
	if c.attnWorkspace != 0 {
		c.retiredWorkspaces = append(c.retiredWorkspaces, c.attnWorkspace)
	}
	c.attnWorkspace, c.attnWorkspaceBytes = p, need
	return nil
}

// Attention is causal GQA attention over the cache; the kernels read the
// start position from pos.
func (c *CUDA) Attention(out, q, kCache, vCache, pos Buffer, s AttnShape) error {
	T, D := s.Tokens(), s.HeadDim
	cache := s.Batch * s.MaxSeq * s.KVHeads * D
	o := operands{op: "attention"}
	pOut := o.get(out, BF16, T*s.Heads*D, "out")
	pQ := o.get(q, BF16, T*s.Heads*D, "q")
	pK := o.get(kCache, BF16, cache, "kCache")
	pV := o.get(vCache, BF16, cache, "vCache")
	pPos := o.get(pos, I32, 1, "pos")
	if o.err != nil {
		return o.err
	}
	if err := c.ReserveAttention(s); err != nil {
		return err
	}
	return c.set.Attention(c.stream, pOut, pQ, pK, pV, pPos, c.attnWorkspace, c.attnWorkspaceBytes, kernelShape(s))
}

// AddI32 adds delta to every element of buf on the device.
func (c *CUDA) AddI32(buf Buffer, delta int) error {
	p, err := dev(buf, I32, 0, "add_i32", "buf", false)
	if err != nil {
		return err
	}
	return c.set.AddI32(c.stream, p, buf.Len(), delta)
}

// SiluMul is SiLU(gate)·up.
func (c *CUDA) SiluMul(out, gateUp Buffer, rows, inter int) error {
	o := operands{op: "silu_mul"}
	pOut := o.get(out, BF16, rows*inter, "out")
	pGU := o.get(gateUp, BF16, rows*2*inter, "gateUp")
	if o.err != nil {
		return o.err
	}
	return c.set.SiluMul(c.stream, pOut, pGU, rows, inter)
}

// GatherLast copies each sequence's last row.
func (c *CUDA) GatherLast(out, in Buffer, batch, seqLen, width int) error {
	o := operands{op: "gather_last"}
	pOut := o.get(out, BF16, batch*width, "out")
	pIn := o.get(in, BF16, batch*seqLen*width, "in")
	if o.err != nil {
		return o.err
	}
	return c.set.GatherLast(c.stream, pOut, pIn, batch, seqLen, width)
}

// Argmax is each row's greedy token.
func (c *CUDA) Argmax(out, logits Buffer, rows, vocab int) error {
	o := operands{op: "argmax"}
	pOut := o.get(out, I32, rows, "out")
	pLogits := o.get(logits, BF16, rows*vocab, "logits")
	if o.err != nil {
		return o.err
	}
	return c.set.Argmax(c.stream, pOut, pLogits, rows, vocab)
}

type cudaEvent struct {
	ev     *cuda.Event
	stream *cuda.Stream
}

func (e *cudaEvent) Record() error { return e.ev.Record(e.stream) }

// NewEvent makes a timing event on the backend's stream; Close destroys it.
func (c *CUDA) NewEvent() (Event, error) {
	ev, err := c.ctx.NewEvent()
	if err != nil {
		return nil, fmt.Errorf("new event: %w", err)
	}
	c.events = append(c.events, ev)
	return &cudaEvent{ev: ev, stream: c.stream}, nil
}

// Elapsed is the device time between two recorded, completed events.
func (c *CUDA) Elapsed(start, end Event) (time.Duration, error) {
	s, ok1 := start.(*cudaEvent)
	e, ok2 := end.(*cudaEvent)
	if !ok1 || !ok2 {
		return 0, errors.New("elapsed: not cuda events")
	}
	ms, err := cuda.ElapsedMs(s.ev, e.ev)
	if err != nil {
		return 0, fmt.Errorf("elapsed: %w", err)
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Sync waits for all enqueued work; a kernel fault surfaces here.
func (c *CUDA) Sync() error {
	if err := c.stream.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// CaptureEnabled reports whether decode steps are captured as CUDA graphs
// (false with DisableGraphs).
func (c *CUDA) CaptureEnabled() bool { return c.info.GraphsEnabled }

// BeginCapture starts recording the ops enqueued on the stream into a graph.
func (c *CUDA) BeginCapture() error {
	if c.capturing {
		return errors.New("begin capture: already capturing")
	}
	if err := c.stream.BeginCapture(); err != nil {
		return fmt.Errorf("begin capture: %w", err)
	}
	c.capturing = true
	return nil
}

// EndCapture stops recording and instantiates the graph.
func (c *CUDA) EndCapture() (CapturedStep, error) {
	if !c.capturing {
		return nil, errors.New("end capture: not capturing")
	}
	c.capturing = false
	g, err := c.stream.EndCapture()
	if err != nil {
		return nil, fmt.Errorf("end capture: %w", err)
	}
	exec, err := g.Instantiate()
	if destroyErr := g.Destroy(); err != nil || destroyErr != nil {
		if exec != nil {
			destroyErr = errors.Join(destroyErr, exec.Destroy())
		}
		return nil, fmt.Errorf("end capture: %w", errors.Join(err, destroyErr))
	}
	return &cudaGraph{exec: exec, stream: c.stream}, nil
}

type cudaGraph struct {
	exec   *cuda.GraphExec
	stream *cuda.Stream
}

func (g *cudaGraph) Launch() error {
	if err := g.exec.Launch(g.stream); err != nil {
		return fmt.Errorf("replay decode step: %w", err)
	}
	return nil
}

func (g *cudaGraph) Destroy() error { return g.exec.Destroy() }

// Close releases everything the backend made (buffers it handed out are the
// caller's to free first) and the context.
func (c *CUDA) Close() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if c.stream != nil {
		add(c.stream.Sync())
	}
	for _, ev := range c.events {
		add(ev.Destroy())
	}
	c.events = nil
	// The handle goes before its workspace: cuBLAS may use the workspace
	// until the handle is destroyed.
	if c.handle != nil {
		add(c.handle.Destroy())
		c.handle = nil
	}
	if c.ctx != nil {
		for _, p := range append(c.retiredWorkspaces, c.attnWorkspace, c.blasWorkspace) {
			if p != 0 {
				add(c.ctx.Free(p))
			}
		}
		c.retiredWorkspaces, c.attnWorkspace, c.attnWorkspaceBytes, c.blasWorkspace = nil, 0, 0, 0
		add(c.ctx.FreeHost(c.staging))
		c.staging = cuda.HostBuf{}
	}
	if c.set != nil {
		add(c.set.Close())
		c.set = nil
	}
	if c.stream != nil {
		add(c.stream.Destroy())
		c.stream = nil
	}
	if c.ctx != nil {
		add(c.ctx.Close())
		c.ctx = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close cuda backend: %w", err)
	}
	return nil
}

// EndToEnd is one prompt run greedily on a backend and on the cpu reference.
type EndToEnd struct {
	PromptLen, OutputLen int
	// MaxLogitsRelErr is the largest ‖logits−ref‖/‖ref‖ over the steps.
	MaxLogitsRelErr   float64
	Tokens, RefTokens []int32 // greedy tokens, prefill's first
}

// TokensMatch reports whether both backends chose the same tokens.
func (r EndToEnd) TokensMatch() bool {
	if len(r.Tokens) != len(r.RefTokens) {
		return false
	}
	for i := range r.Tokens {
		if r.Tokens[i] != r.RefTokens[i] {
			return false
		}
	}
	return true
}

// CompareWithCPU runs each prompt (batch 1) for outputLen tokens on be and on
// the cpu backend with the same dummy weights (seed), comparing every step's
// logits and greedy tokens. The engines are made and closed here.
func CompareWithCPU(be Backend, cfg Config, seed uint64, prompts [][]int32, outputLen int) ([]EndToEnd, error) {
	src := WeightSource{Seed: seed}
	eng, err := NewEngine(cfg, be, src, nil)
	if err != nil {
		return nil, fmt.Errorf("compare: %s engine: %w", be.Name(), err)
	}
	defer eng.Close()
	cpu, err := NewEngine(cfg, NewCPU(), src, nil)
	if err != nil {
		return nil, fmt.Errorf("compare: cpu engine: %w", err)
	}
	defer cpu.Close()
	var out []EndToEnd
	for _, p := range prompts {
		r := EndToEnd{PromptLen: len(p), OutputLen: outputLen}
		for _, e := range []*Engine{eng, cpu} {
			if err := e.Begin(1, len(p), outputLen, p); err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			if err := e.Prefill(); err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
		}
		for step := 0; step < outputLen; step++ {
			if step > 0 {
				if err := eng.Decode(); err != nil {
					return out, fmt.Errorf("compare: %w", err)
				}
				if err := cpu.Decode(); err != nil {
					return out, fmt.Errorf("compare: %w", err)
				}
			}
			got, err := eng.Logits()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			want, err := cpu.Logits()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			rel, err := ref.RelErr(got[0], want[0])
			if err != nil {
				return out, fmt.Errorf("compare: prompt %d step %d logits: %w", len(out), step, err)
			}
			r.MaxLogitsRelErr = max(r.MaxLogitsRelErr, rel)
			tok, err := eng.NextTokens()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			refTok, err := cpu.NextTokens()
			if err != nil {
				return out, fmt.Errorf("compare: %w", err)
			}
			r.Tokens, r.RefTokens = append(r.Tokens, tok[0]), append(r.RefTokens, refTok[0])
		}
		out = append(out, r)
	}
	return out, nil
}

// VerifyKernels runs every kernel (or those named in only, see
// kernels.VerifyKernelNames) against its kernels/ref twin at the given
// model shapes on this backend's device (see kernels.Verifier).
func (c *CUDA) VerifyKernels(models []kernels.ModelShape, seed uint64, only ...string) ([]kernels.CheckResult, error) {
	if err := c.notCapturing("verify kernels"); err != nil {
		return nil, err
	}
	v := kernels.NewVerifier(c.ctx, c.stream, c.set, seed)
	if err := v.Only(only...); err != nil {
		return nil, err
	}
	results := v.VerifyAll(models)
	if err := v.Close(); err != nil {
		return results, fmt.Errorf("verify kernels: %w", err)
	}
	return results, nil
}

// KernelShape is the model's widths as the kernels see them.
func (cfg Config) KernelShape() kernels.ModelShape {
	return kernels.ModelShape{Name: cfg.Name, Hidden: cfg.HiddenSize, Inter: cfg.IntermediateSize, Vocab: cfg.VocabSize,
		Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, RopeTheta: cfg.RopeTheta}
}
