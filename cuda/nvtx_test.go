package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
)

func TestNVTXDetachedWithoutATool(t *testing.T) {
	for _, n := range []*NVTX{nil, OpenNVTX(nil), OpenNVTX(func(string) string { return "" })} {
		if n.Attached() {
			t.Errorf("%q: attached without %s", n.Source(), NVTXInjectionVar)
		}
		n.Push("x") // no tool: nothing happens, nothing fails
		n.Mark("x")
		n.Pop()
	}
}

func TestNVTXBadToolStaysDetached(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "nothing.so")
	n := OpenNVTX(func(string) string { return lib })
	if n.Attached() && !strings.Contains(n.Source(), nvtxLibrary) {
		t.Fatalf("attached to a missing tool: %s", n.Source())
	}
	if !strings.Contains(n.Source(), lib) {
		t.Errorf("source %q does not name the tool it could not load", n.Source())
	}
}

// TestNVTXRecorderAndProfilerWindow attaches the emulator's NVTX recorder
// through the injection protocol and checks that its ranges land in the
// emulated driver's profiler log between cuProfilerStart and cuProfilerStop,
// around the one launch made inside the window.
func TestNVTXRecorderAndProfilerWindow(t *testing.T) {
	e := newEmuEnv(t)
	dir := emutest.Use(t)
	logPath := filepath.Join(t.TempDir(), "profile.log")
	t.Setenv("STEPBENCH_EMU_PROFILE_LOG", logPath)
	tool := filepath.Join(dir, "libsbemu_nvtx.so")
	n := OpenNVTX(func(v string) string {
		if v == NVTXInjectionVar {
			return tool
		}
		return ""
	})
	if !n.Attached() {
		t.Fatalf("recorder not attached: %s", n.Source())
	}
	d := e.alloc(t, 4096)
	one := Dim3{1, 1, 1}
	poke := e.fn(t, "poke")
	launch := func() {
		if err := e.stream.Launch(poke, one, Dim3{32, 1, 1}, 0, d, int64(0)); err != nil {
			t.Fatal(err)
		}
		e.sync(t)
	}
	launch() // before the window: not logged
	if err := e.ctx.ProfilerStart(); err != nil {
		t.Fatal(err)
	}
	n.Push("outer")
	n.Push("inner step 0")
	launch()
	n.Pop()
	n.Mark("done")
	n.Pop()
	if err := e.ctx.ProfilerStop(); err != nil {
		t.Fatal(err)
	}
	launch() // after: not logged
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	want := "profiler start\npush outer\npush inner step 0\nlaunch kernel poke\npop\nmark done\npop\nprofiler stop\n"
	if string(data) != want {
		t.Errorf("profile log:\n%s\nwant:\n%s", data, want)
	}
}
