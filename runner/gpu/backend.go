package gpu

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"stepbench/cuda"
	"stepbench/internal/input"
	"stepbench/kernels"
	"stepbench/runner"
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

// The interfaces the engine looks for.
var (
	_ runner.Backend            = (*Backend)(nil)
	_ runner.StepCapturer       = (*Backend)(nil)
	_ runner.AttentionReserver  = (*Backend)(nil)
	_ runner.BufferNamer        = (*Backend)(nil)
	_ runner.LaunchCounter      = (*Backend)(nil)
	_ runner.GateUpFuser        = (*Backend)(nil)
	_ runner.RopeAttentionFuser = (*Backend)(nil)
)

// Options configure the cuda backend.
type Options struct {
	Ordinal    int    // device ordinal
	KernelsDir string // lay the *.cu files of this directory over the embedded sources
	// IncludeDirs are header directories for NVRTC (-I, --include), after
	// KernelsDir (headers beside the sources) and before the CUDA toolkit's.
	IncludeDirs   []string
	NVRTCPath     string // explicit libnvrtc path ("" searches)
	CublasPath    string // explicit libcublas path ("" searches)
	CacheDir      string // cubin cache ("" is kernels.DefaultCacheDir)
	DisableGraphs bool   // run decode steps eagerly instead of replaying a CUDA graph
	// Kernels chooses the versions of the ops that have several
	// (--kernel attn_prefill=1); empty runs the newest the shapes allow.
	Kernels kernels.Selection
	// Ops are the ops op libraries replace: op → library path (--op;
	// ReplaceableOps, include/stepbench_op.h).
	Ops map[string]string
	// KV is the layout of the runs' KV cache; an op library whose KV op
	// does not take it (its caps) is refused when the backend opens,
	// before any weight is loaded (Kernels.CheckLibKV). nil: no run's
	// layout in particular (verify): the layout and dtype are checked.
	KV       *runner.KVOptions
	Progress io.Writer
}

// Info is what the cuda backend found: the device and the libraries.
type Info struct {
	Device          cuda.DeviceProps
	DriverVersion   int // CUDA driver API version, e.g. 13000
	NVRTCPath       string
	NVRTCMajor      int
	NVRTCMinor      int
	CublasPath      string
	CublasVersion   int // major*10000 + minor*100 + patch
	GraphsEnabled   bool
	MemFreeBytes    uint64 // at start, after the backend's own allocations
	MemTotalBytes   uint64
	KernelArch      int // sm_XY the kernels were compiled for
	KernelsFromDisk bool
	// IncludeDirs are the directories NVRTC read headers from (-I), in
	// order; CUDAHeaders the toolkit's among them ("" when none was found).
	IncludeDirs []string
	CUDAHeaders string
	// OpLibraries are the libraries that replace ops (Options.Ops).
	OpLibraries         []OpLibraryInfo
	CublasWorkspaceSize int
	// CublasLtPath and CublasLtVersion are the cuBLASLt of the FP8 GEMMs,
	// once EnableFP8 opened it ("" and 0 before).
	CublasLtPath    string
	CublasLtVersion int
	// Emulated describes the emulated CUDA device when that is what runs the
	// kernels (cuda/emu: times are not GPU times); "" on a GPU.
	Emulated string
}

// Backend is the cuda backend: it runs every op of runner.Backend on one
// GPU, our kernels (Kernels) on one stream and Linear through cuBLAS, and
// captures decode steps as CUDA graphs (runner.StepCapturer). Like every
// cuda object it belongs to the goroutine that made it, which must be
// locked to its OS thread (runtime.LockOSThread) for the backend's whole
// life.
type Backend struct {
	info   Info
	drv    *cuda.Driver
	nvrtc  *cuda.NVRTC
	blas   *cuda.Cublas
	ctx    *cuda.Context
	stream *cuda.Stream
	set    *Kernels
	handle *cuda.CublasHandle

	blasWorkspace cuda.DevPtr
	staging       cuda.HostBuf

	// Decode attention's float32 workspace; replaced ones are kept until
	// Close because a captured graph may still point at them.
	attnWorkspace      cuda.DevPtr
	attnWorkspaceBytes int
	retiredWorkspaces  []cuda.DevPtr
	// argmax version 2's workspace, grown outside captures like attention's.
	argmaxWorkspace      cuda.DevPtr
	argmaxWorkspaceBytes int

	fp8 *fp8State // the FP8 path (EnableFP8); nil until a quantized model needs it
	// lt is gemm version 2's cuBLASLt (gemm_lt.go); nil until its first use.
	lt       *gemmLtState
	cacheDir string    // Options.CacheDir: the cubins' and the tuned GEMMs' cache
	progress io.Writer // Options.Progress: notes (the tuned GEMMs, shown with -v)

	events    []*cuda.Event
	capturing bool
	// gemms counts the cuBLAS calls enqueued (Launches).
	gemms int64
	// planning is set by NewPlanner: nothing is enqueued (plan.go).
	planning *planState
	// comm is set by JoinGroup (this backend is a tensor-parallel rank);
	// AbortCollectives reads it from other goroutines.
	comm atomic.Pointer[cuda.NCCLComm]
}

// New opens the driver, NVRTC and cuBLAS, compiles (or loads cached)
// kernels for the device and makes the stream, the cuBLAS handle and its
// workspace. Call it from the goroutine that will make every later call,
// locked to its OS thread.
func New(opts Options) (*Backend, error) {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	c := &Backend{cacheDir: opts.CacheDir, progress: progress}
	if err := c.openLibraries(opts); err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	dev := c.info.Device
	arch := dev.Major*10 + dev.Minor
	if arch < kernels.MinArch {
		return nil, fmt.Errorf("cuda backend: %s is sm_%d; the kernels need sm_%d or newer (bf16 mma.sync, cp.async)", dev.Name, arch, kernels.MinArch)
	}
	if opts.Kernels.LaunchVersion() == kernels.LaunchProgrammatic && dev.Major < 9 {
		// checkLaunchVersion's refusal, before the kernels compile for nothing.
		return nil, errors.Join(fmt.Errorf("cuda backend: %w", launchArchError(dev)), c.Close())
	}
	c.info.KernelArch, c.info.KernelsFromDisk = arch, opts.KernelsDir != ""
	srcs, err := kernels.Sources(opts.KernelsDir)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	start := time.Now()
	build := c.kernelBuild(opts, arch)
	build.OnCompile = CompileProgress(progress, fmt.Sprintf("sm_%d", arch), c.info.NVRTCMajor, c.info.NVRTCMinor)
	compiled, err := build.Compile(c.nvrtc, srcs)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	reportRebuilt(progress, compiled)
	fmt.Fprintf(progress, "stepbench: kernels for sm_%d ready in %.1f s (NVRTC %d.%d)\n", arch, time.Since(start).Seconds(), c.info.NVRTCMajor, c.info.NVRTCMinor)
	load := func() (*Kernels, error) { return c.loadKernels(build, srcs, compiled, progress) }
	if err := c.start(opts, load); err != nil {
		return nil, errors.Join(fmt.Errorf("cuda backend: %w", err), c.Close())
	}
	return c, nil
}

// CompileProgress is a kernels.Build's OnCompile that shows a compile on
// progress: at the first source the cubin cache cannot serve, one line
// saying that kernels compile (tens of seconds with a real NVRTC, once:
// the cache keeps them), then each source as progress's status where it
// shows one (a progress.Line on a terminal).
func CompileProgress(progress io.Writer, arch string, major, minor int) func(name string, done, total int) {
	said := false
	status, _ := progress.(interface{ Status(string) })
	return func(name string, done, total int) {
		if !said {
			said = true
			fmt.Fprintf(progress, "stepbench: compiling kernels for %s with NVRTC %d.%d (not in the cubin cache; later runs load them from it)\n", arch, major, minor)
		}
		if status != nil {
			status.Status(fmt.Sprintf("stepbench: compiling %s for %s (%d/%d sources)", name, arch, done, total))
		}
	}
}

// reportRebuilt says on progress which cache entries were rebuilt.
func reportRebuilt(progress io.Writer, compiled []kernels.Compiled) {
	for _, k := range compiled {
		if k.Rebuilt != "" {
			fmt.Fprintf(progress, "stepbench: kernel cache: %s\n", k.Rebuilt)
		}
	}
}

// loadKernels loads the compiled modules; where a module from the cubin
// cache fails to load (or lacks its kernels), its entry is discarded, its
// source compiled again and the load tried once more.
func (c *Backend) loadKernels(build kernels.Build, srcs map[string]string, compiled []kernels.Compiled, progress io.Writer) (*Kernels, error) {
	set, err := LoadKernels(c.ctx, compiled, c.info.Device.SMCount)
	if err == nil {
		set.pdl = kernels.PDLEntryPoints(srcs)
		return set, nil
	}
	failed := failedSources(err)
	rebuilt := false
	for i, k := range compiled {
		if !k.FromCache || !slices.Contains(failed, k.Name) {
			continue
		}
		again, rerr := build.Rebuild(c.nvrtc, srcs, k, firstLine(sourceFailure(err, k.Name)))
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		compiled[i], rebuilt = again, true
		reportRebuilt(progress, compiled[i:i+1])
	}
	if !rebuilt {
		return nil, err
	}
	if set, err = LoadKernels(c.ctx, compiled, c.info.Device.SMCount); err != nil {
		return nil, err
	}
	set.pdl = kernels.PDLEntryPoints(srcs)
	return set, nil
}

// kernelBuild is how the kernels compile here (KernelBuild), recorded in Info.
func (c *Backend) kernelBuild(opts Options, arch int) kernels.Build {
	b, headers := KernelBuild(c.nvrtc, opts.KernelsDir, opts.IncludeDirs, arch, opts.CacheDir)
	c.info.IncludeDirs, c.info.CUDAHeaders = b.Include, headers
	return b
}

// KernelBuild is how the kernels compile with nv: headers from the kernels
// directory (beside the sources), then include's directories, then a CUDA
// toolkit's include directory when one is found (for cuda_bf16.h; not for
// the emulated NVRTC, whose g++ cannot compile NVIDIA's headers), which
// headers describes ("" when none).
func KernelBuild(nv *cuda.NVRTC, kernelsDir string, include []string, arch int, cacheDir string) (b kernels.Build, headers string) {
	b = kernels.Build{Arch: arch, CacheDir: cacheDir}
	if kernelsDir != "" {
		b.Include = append(b.Include, kernelsDir)
	}
	b.Include = append(b.Include, include...)
	if nv.Emulated() == "" {
		major, _ := nv.Version()
		if h, ok := cuda.FindCUDAHeaders(major); ok {
			b.Include = append(b.Include, h.Dir)
			headers = h.String()
		}
	}
	return b, headers
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// openLibraries opens the driver, NVRTC and cuBLAS and records what they are.
func (c *Backend) openLibraries(opts Options) error {
	var err error
	if c.drv, err = cuda.OpenDriver(); err != nil {
		return err
	}
	count, err := c.drv.DeviceCount()
	if err != nil {
		return err
	}
	if opts.Ordinal < 0 || opts.Ordinal >= count {
		return fmt.Errorf("device %d requested, %d visible", opts.Ordinal, count)
	}
	if c.info.Device, err = c.drv.Props(opts.Ordinal); err != nil {
		return err
	}
	if c.info.DriverVersion, err = c.drv.Version(); err != nil {
		return err
	}
	if c.nvrtc, err = cuda.OpenNVRTC(opts.NVRTCPath); err != nil {
		return fmt.Errorf("NVRTC: %w", err)
	}
	c.info.NVRTCPath = c.nvrtc.Path()
	c.info.NVRTCMajor, c.info.NVRTCMinor = c.nvrtc.Version()
	if c.blas, err = cuda.OpenCublas(opts.CublasPath); err != nil {
		return fmt.Errorf("cuBLAS: %w", err)
	}
	c.info.CublasPath = c.blas.Path()
	if c.info.CublasVersion, err = c.blas.Version(); err != nil {
		return fmt.Errorf("cuBLAS: %w", err)
	}
	if err := sameKind(c.drv.Emulated(), c.nvrtc.Emulated(), c.blas.Emulated()); err != nil {
		return err
	}
	c.info.Emulated = c.drv.Emulated()
	return nil
}

// start makes the context, the stream, the loaded kernels, the cuBLAS
// handle with its workspace and the staging buffer; Close undoes any part.
func (c *Backend) start(opts Options, load func() (*Kernels, error)) error {
	var err error
	if c.ctx, err = c.drv.NewContext(opts.Ordinal); err != nil {
		return err
	}
	if c.stream, err = c.ctx.NewStream(); err != nil {
		return err
	}
	if c.set, err = load(); err != nil {
		return err
	}
	c.set = c.set.With(opts.Kernels)
	if err := c.checkLaunchVersion(); err != nil {
		return err
	}
	withOps, libs, err := c.set.WithOps(c.ctx, opts.Ops)
	if err != nil {
		return err
	}
	c.set, c.info.OpLibraries = withOps, libs
	if err := c.set.CheckLibKV(opts.KV); err != nil {
		return err
	}
	if c.handle, err = c.blas.NewHandle(); err != nil {
		return err
	}
	if c.blasWorkspace, err = c.ctx.Alloc(cublasWorkspaceBytes); err != nil {
		return fmt.Errorf("cuBLAS workspace: %w", err)
	}
	if err := c.handle.SetStream(c.stream, c.blasWorkspace, cublasWorkspaceBytes); err != nil {
		return err
	}
	c.info.CublasWorkspaceSize = cublasWorkspaceBytes
	if c.staging, err = c.ctx.AllocHost(stagingBytes); err != nil {
		return fmt.Errorf("staging buffer: %w", err)
	}
	if c.info.MemFreeBytes, c.info.MemTotalBytes, err = c.ctx.MemInfo(); err != nil {
		return err
	}
	c.info.GraphsEnabled = !opts.DisableGraphs
	return nil
}

// launchArchError refuses launch=2 on dev, below compute capability 9.0.
func launchArchError(dev cuda.DeviceProps) error {
	return input.Bad(fmt.Errorf("--kernel launch=%d: programmatic dependent launch needs compute capability 9.0 or newer; %s is %d.%d (use launch=1)",
		kernels.LaunchProgrammatic, dev.Name, dev.Major, dev.Minor))
}

// checkLaunchVersion refuses launch=2 where programmatic dependent launch
// cannot run: below compute capability 9.0 (griddepcontrol is sm_90's) or
// with a driver that lacks cuLaunchKernelEx. A refusal, not a silent plain
// launch: an A/B of launch=2 there would compare launch=1 with itself.
// With -v it says which kernels launch programmatically.
func (c *Backend) checkLaunchVersion() error {
	if c.set.Selection().LaunchVersion() != kernels.LaunchProgrammatic {
		return nil
	}
	dev := c.info.Device
	if dev.Major < 9 {
		return launchArchError(dev)
	}
	if !c.drv.HasLaunchEx() {
		return input.Bad(fmt.Errorf("--kernel launch=%d: the CUDA driver %s (version %d) does not export cuLaunchKernelEx (CUDA 11.8 or newer; use launch=1)",
			kernels.LaunchProgrammatic, c.drv.Path(), c.info.DriverVersion))
	}
	fmt.Fprintf(c.progress, "stepbench: launch=%d: %d kernel entry points launch with programmatic stream serialization; edited sources', op libraries' and cuBLAS's launch plain\n",
		kernels.LaunchProgrammatic, len(c.set.pdl))
	return nil
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

// Launches is how many kernels and cuBLAS calls the backend has enqueued
// (runner.LaunchCounter; a cuBLAS call counts one, whatever it launches).
func (c *Backend) Launches() int64 { return c.set.Launched() + c.gemms }

// Info describes the device and libraries the backend uses.
func (c *Backend) Info() Info { return c.info }

// Name is "cuda".
func (c *Backend) Name() string { return "cuda" }

// CheckMemory compares est with the device's free memory now; call it before
// loading weights so that a run that cannot fit fails with the numbers.
func (c *Backend) CheckMemory(est runner.MemoryEstimate) error {
	free, total, err := c.ctx.MemInfo()
	if err != nil {
		return fmt.Errorf("check memory: %w", err)
	}
	return runner.CheckFits(est, free, total, memoryHeadroomBytes, c.info.Device.Name)
}

func (c *Backend) notCapturing(op string) error {
	if c.capturing {
		return fmt.Errorf("%s: not allowed while a decode step is being captured", op)
	}
	return nil
}

type event struct {
	ev     *cuda.Event
	stream *cuda.Stream
}

func (e *event) Record() error { return e.ev.Record(e.stream) }

// NewEvent makes a timing event on the backend's stream; Close destroys it.
func (c *Backend) NewEvent() (runner.Event, error) {
	if c.planning != nil {
		return nil, errors.New("new event: a planner times nothing")
	}
	ev, err := c.ctx.NewEvent()
	if err != nil {
		return nil, fmt.Errorf("new event: %w", err)
	}
	c.events = append(c.events, ev)
	return &event{ev: ev, stream: c.stream}, nil
}

// Elapsed is the device time between two recorded, completed events.
func (c *Backend) Elapsed(start, end runner.Event) (time.Duration, error) {
	s, ok1 := start.(*event)
	e, ok2 := end.(*event)
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
func (c *Backend) Sync() error {
	if c.planning != nil {
		return nil
	}
	if err := c.stream.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// CaptureEnabled reports whether decode steps are captured as CUDA graphs
// (false with DisableGraphs).
func (c *Backend) CaptureEnabled() bool { return c.info.GraphsEnabled }

// BeginCapture starts recording the ops enqueued on the stream into a graph.
func (c *Backend) BeginCapture() error {
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
func (c *Backend) EndCapture() (runner.CapturedStep, error) {
	if !c.capturing {
		return nil, errors.New("end capture: not capturing")
	}
	c.capturing = false
	g, err := c.stream.EndCapture()
	if err != nil {
		return nil, fmt.Errorf("end capture: %w", err)
	}
	nodes, _ := g.NodeCount() // a count for reports only: a driver without cuGraphGetNodes gives none
	exec, err := g.Instantiate()
	if destroyErr := g.Destroy(); err != nil || destroyErr != nil {
		if exec != nil {
			destroyErr = errors.Join(destroyErr, exec.Destroy())
		}
		return nil, fmt.Errorf("end capture: %w", errors.Join(err, destroyErr))
	}
	return &graph{exec: exec, stream: c.stream, nodes: nodes}, nil
}

type graph struct {
	exec   *cuda.GraphExec
	stream *cuda.Stream
	nodes  int // cuGraphGetNodes of the captured graph; 0 where the driver cannot count
}

// Nodes is the captured step's node count (runner.NodeCounter).
func (g *graph) Nodes() int { return g.nodes }

func (g *graph) Launch() error {
	if err := g.exec.Launch(g.stream); err != nil {
		return fmt.Errorf("replay decode step: %w", err)
	}
	return nil
}

func (g *graph) Destroy() error { return g.exec.Destroy() }

// Close releases everything the backend made (buffers it handed out are the
// caller's to free first) and the context.
func (c *Backend) Close() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if c.stream != nil {
		add(c.stream.Sync())
	}
	for _, ev := range c.events {
		add(ev.Destroy())
	}
	c.events = nil
	add(c.leaveGroup()) // after AbortCollectives, nothing to leave
	add(c.closeFP8())
	add(c.closeGemmLt())
	// The handle goes before its workspace: cuBLAS may use the workspace
	// until the handle is destroyed.
	if c.handle != nil {
		add(c.handle.Destroy())
		c.handle = nil
	}
	if c.ctx != nil {
		for _, p := range append(c.retiredWorkspaces, c.attnWorkspace, c.argmaxWorkspace, c.blasWorkspace) {
			if p != 0 {
				add(c.ctx.Free(p))
			}
		}
		c.retiredWorkspaces, c.attnWorkspace, c.attnWorkspaceBytes, c.blasWorkspace = nil, 0, 0, 0
		c.argmaxWorkspace, c.argmaxWorkspaceBytes = 0, 0
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

// VerifyOptions choose what VerifyKernels checks.
type VerifyOptions struct {
	Only []string // kernels to check (VerifyKernelNames); empty: all
	Long bool     // also the shapes too slow for every emulated run (Verifier.IncludeLong)
	// Counters, when set, is the emulated device's STEPBENCH_EMU_COUNTERS
	// file: each check carries its launches' access counters.
	Counters string
}

// VerifyKernels runs every kernel (or those named in opts.Only) against its
// kernels/ref twin at the given model shapes on this backend's device (see
// Verifier).
func (c *Backend) VerifyKernels(models []kernels.ModelShape, seed uint64, opts VerifyOptions) ([]CheckResult, error) {
	if err := c.notCapturing("verify kernels"); err != nil {
		return nil, err
	}
	v := NewVerifier(c.ctx, c.stream, c.set, seed)
	if err := v.Only(opts.Only...); err != nil {
		return nil, err
	}
	if v.wants("fp8") && c.CheckFP8() == nil {
		if err := c.EnableFP8(); err != nil {
			return nil, fmt.Errorf("verify kernels: %w", err)
		}
		v.fp8 = c.fp8
	}
	if v.wants("gemm") {
		v.gemmLt = c.linearLt
	}
	if opts.Long {
		v.IncludeLong()
	}
	if opts.Counters != "" {
		v.CountAccesses(opts.Counters)
	}
	results := v.VerifyAll(models)
	if err := v.Close(); err != nil {
		return results, fmt.Errorf("verify kernels: %w", err)
	}
	return results, nil
}
