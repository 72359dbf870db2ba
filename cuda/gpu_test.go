package cuda

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"unsafe"
)

// The tests in this file need a GPU; they skip with "no CUDA device: ..."
// elsewhere.

func TestDeviceProps(t *testing.T) {
	g := newGPUEnv(t)
	p := g.props
	t.Logf("%+v", p)
	if v, err := g.drv.Version(); err != nil || v < 11080 {
		t.Errorf("driver Version = %d, %v; want >= 11080", v, err)
	}
	if strings.TrimSpace(p.Name) == "" {
		t.Error("empty device name")
	}
	if !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(p.UUID) {
		t.Errorf("UUID %q not in nvidia-smi form", p.UUID)
	}
	checks := []struct {
		name     string
		value    int
		min, max int
	}{
		{"Major", p.Major, 5, 20},
		{"Minor", p.Minor, 0, 9},
		{"SMCount", p.SMCount, 1, 1000},
		{"L2Bytes", p.L2Bytes, 256 << 10, 1 << 30},
		{"MaxSharedPerBlockOptinBytes", p.MaxSharedPerBlockOptinBytes, 48 << 10, 1 << 20},
		{"MemBusWidthBits", p.MemBusWidthBits, 32, 16384},
	}
	for _, c := range checks {
		if c.value < c.min || c.value > c.max {
			t.Errorf("%s = %d, want in [%d, %d]", c.name, c.value, c.min, c.max)
		}
	}
	if p.TotalMemBytes < 1<<30 {
		t.Errorf("TotalMemBytes = %d, want >= 1 GiB", p.TotalMemBytes)
	}
	free, total, err := g.ctx.MemInfo()
	if err != nil || total == 0 || total > p.TotalMemBytes || free == 0 || free > total {
		t.Errorf("MemInfo = %d free, %d total, %v; want 0 < free <= total <= %d", free, total, err, p.TotalMemBytes)
	}
}

func TestAllocCopyRoundTrip(t *testing.T) {
	g := newGPUEnv(t)
	const n = 1 << 20
	src := g.allocHost(t, n*4)
	dst := g.allocHost(t, n*4)
	srcInts := src.Int32()
	for i := range srcInts {
		srcInts[i] = int32(i*7 - 3)
	}
	a := g.alloc(t, n*4)
	b := g.alloc(t, n*4)
	if err := g.stream.CopyHtoD(a, src.Ptr, n*4); err != nil {
		t.Fatal(err)
	}
	if err := g.stream.CopyDtoD(b, a, n*4); err != nil {
		t.Fatal(err)
	}
	if err := g.stream.CopyDtoH(dst.Ptr, b, n*4); err != nil {
		t.Fatal(err)
	}
	g.sync(t)
	for i, v := range dst.Int32() {
		if v != int32(i*7-3) {
			t.Fatalf("element %d = %d, want %d", i, v, i*7-3)
		}
	}
	// Pageable Go memory works too (the driver stages it).
	goBuf := make([]int32, 16)
	if err := g.stream.CopyDtoH(unsafe.Pointer(&goBuf[0]), a, 64); err != nil {
		t.Fatal(err)
	}
	g.sync(t)
	if goBuf[15] != 15*7-3 {
		t.Errorf("pageable copy: goBuf[15] = %d", goBuf[15])
	}
}

func TestAllocErrorsNameTheCall(t *testing.T) {
	g := newGPUEnv(t)
	_, err := g.ctx.Alloc(1 << 62)
	if err == nil || !strings.HasPrefix(err.Error(), "cuMemAlloc_v2(4611686018427387904 bytes): CUDA_ERROR_") {
		t.Errorf("huge Alloc: err = %v", err)
	}
	if _, err := g.ctx.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
}

func TestMemset(t *testing.T) {
	g := newGPUEnv(t)
	const bytes = 4096
	p := g.alloc(t, bytes)
	host := g.allocHost(t, bytes)
	tests := []struct {
		name  string
		set   func() error
		check func(i int, b []byte) bool
	}{
		{"8", func() error { return g.stream.Memset8(p, 0xab, bytes) },
			func(i int, b []byte) bool { return b[i] == 0xab }},
		{"16", func() error { return g.stream.Memset16(p, 0x1234, bytes/2) },
			func(i int, b []byte) bool { return b[i] == [2]byte{0x34, 0x12}[i%2] }},
		{"32", func() error { return g.stream.Memset32(p, 0xdeadbeef, bytes/4) },
			func(i int, b []byte) bool { return b[i] == [4]byte{0xef, 0xbe, 0xad, 0xde}[i%4] }},
	}
	for _, tt := range tests {
		if err := tt.set(); err != nil {
			t.Fatalf("Memset%s: %v", tt.name, err)
		}
		if err := g.stream.CopyDtoH(host.Ptr, p, bytes); err != nil {
			t.Fatal(err)
		}
		g.sync(t)
		b := unsafe.Slice((*byte)(host.Ptr), bytes)
		for i := range b {
			if !tt.check(i, b) {
				t.Fatalf("Memset%s: byte %d = %#x", tt.name, i, b[i])
			}
		}
	}
}

func TestEventTiming(t *testing.T) {
	g := newGPUEnv(t)
	start, err := g.ctx.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := g.ctx.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	bytes := 256 << 20
	if g.drv.Emulated() != "" {
		bytes = 16 << 20 // host memory: keep the test short
	}
	p := g.alloc(t, bytes)
	if err := start.Record(g.stream); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := g.stream.Memset32(p, 1, bytes/4); err != nil {
			t.Fatal(err)
		}
	}
	if err := end.Record(g.stream); err != nil {
		t.Fatal(err)
	}
	if err := end.Sync(); err != nil {
		t.Fatal(err)
	}
	ms, err := ElapsedMs(start, end)
	if err != nil {
		t.Fatal(err)
	}
	// 1 GiB of writes: well above event resolution, well below a second
	// on any GPU (the emulated device's times are the CPU's: no bound).
	if ms <= 0 || (g.drv.Emulated() == "" && (ms <= 0.01 || ms > 1000)) {
		t.Errorf("ElapsedMs = %v, want (0.01, 1000]", ms)
	}
	t.Logf("%d MiB memset in %.3f ms (%.1f GB/s)", 4*bytes>>20, ms, 4*float64(bytes)/float64(ms)/1e6)
}

// loadAddOne compiles add_one for the device and loads it.
func loadAddOne(t *testing.T, g *gpuEnv) *Function {
	t.Helper()
	n := openTestNVRTC(t)
	cubin, log, err := n.Compile(addOneSrc, "add_one.cu", []string{"--gpu-architecture=" + g.arch()})
	if err != nil {
		t.Fatalf("Compile for %s: %v\n%s", g.arch(), err, log)
	}
	mod, err := g.ctx.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mod.Unload(); err != nil {
			t.Errorf("Unload: %v", err)
		}
	})
	if _, err := mod.Function("no_such_kernel"); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NOT_FOUND") {
		t.Errorf("missing kernel: err = %v, want CUDA_ERROR_NOT_FOUND", err)
	}
	f, err := mod.Function("add_one")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// readFloats copies n float32 from p to host and returns them.
func readFloats(t *testing.T, g *gpuEnv, p DevPtr, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := g.stream.CopyDtoH(unsafe.Pointer(&out[0]), p, n*4); err != nil {
		t.Fatal(err)
	}
	g.sync(t)
	return out
}

func TestModuleLaunch(t *testing.T) {
	g := newGPUEnv(t)
	f := loadAddOne(t, g)
	regs, local, shared, err := f.Attributes()
	// The emulated device does not model registers: it reports 0.
	if err != nil || (regs <= 0 && g.drv.Emulated() == "") || local < 0 || shared < 0 {
		t.Errorf("Attributes = %d regs, %d local, %d shared, %v", regs, local, shared, err)
	}
	if err := f.SetMaxDynamicShared(64 << 10); err != nil {
		t.Errorf("SetMaxDynamicShared(64 KiB): %v", err)
	}
	const n = 1000
	p := g.alloc(t, n*4)
	if err := g.stream.Memset32(p, math.Float32bits(41), n); err != nil {
		t.Fatal(err)
	}
	if err := g.stream.Launch(f, Dim3{(n + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 0, p, int32(n-1)); err != nil {
		t.Fatal(err)
	}
	got := readFloats(t, g, p, n)
	for i, v := range got {
		want := float32(42)
		if i == n-1 {
			want = 41 // outside the n-1 elements the kernel was told about
		}
		if v != want {
			t.Fatalf("element %d = %v, want %v", i, v, want)
		}
	}
	if err := g.stream.Launch(f, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, p, n); err == nil {
		t.Error("Launch accepted an untyped int argument")
	}
}

func TestGraphCaptureReplay(t *testing.T) {
	g := newGPUEnv(t)
	f := loadAddOne(t, g)
	const n = 4096
	p := g.alloc(t, n*4)
	// One eager launch first: with lazy module loading, drivers before 12.3
	// cannot load a kernel inside a capture (the emulated device checks this).
	if err := g.stream.Launch(f, Dim3{n / 256, 1, 1}, Dim3{256, 1, 1}, 0, p, int32(n)); err != nil {
		t.Fatal(err)
	}
	if err := g.stream.Memset32(p, 0, n); err != nil {
		t.Fatal(err)
	}
	g.sync(t)
	if err := g.stream.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	launchErr := g.stream.Launch(f, Dim3{n / 256, 1, 1}, Dim3{256, 1, 1}, 0, p, int32(n))
	graph, err := g.stream.EndCapture()
	if launchErr != nil || err != nil {
		t.Fatalf("capture: launch %v, end %v", launchErr, err)
	}
	exec, err := graph.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := graph.Destroy(); err != nil {
		t.Errorf("Graph.Destroy: %v", err)
	}
	if got := readFloats(t, g, p, 1)[0]; got != 0 {
		t.Fatalf("capture ran the kernel: element 0 = %v", got)
	}
	for range 3 {
		if err := exec.Launch(g.stream); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range readFloats(t, g, p, n) {
		if v != 3 {
			t.Fatalf("after 3 replays element %d = %v, want 3", i, v)
		}
	}
	if err := exec.Destroy(); err != nil {
		t.Errorf("GraphExec.Destroy: %v", err)
	}
}
