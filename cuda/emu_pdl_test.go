package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
)

// Kernels for the emulated device's programmatic-dependent-launch check
// (STEPBENCH_EMU_CHECK_PDL): a producer, and consumers that touch its data
// before or after griddepcontrol.wait (device.h's emulated instruction).
const pdlSrc = `
#define WAIT() sbemu_griddepcontrol_wait()
#define TRIGGER() sbemu_griddepcontrol_launch_dependents()
extern "C" __global__ void produce(float* out, const float* in) {
    WAIT();
    out[threadIdx.x] = in[threadIdx.x] + 1.0f;
}
// Reads the producer's output before waiting: a race under PDL.
extern "C" __global__ void read_early(float* dst, const float* src) {
    const float v = src[threadIdx.x];
    WAIT();
    dst[threadIdx.x] = v;
}
// Overwrites the producer's input before waiting: a write-after-read race.
extern "C" __global__ void clobber_early(float* in) {
    in[threadIdx.x] = 0.0f;
    WAIT();
}
// Waits first: correct.
extern "C" __global__ void read_after_wait(float* dst, const float* src) {
    WAIT();
    dst[threadIdx.x] = src[threadIdx.x];
}
// Touches only its own buffer before waiting (a prologue that does not
// depend on the predecessor): correct.
extern "C" __global__ void own_prologue(float* own, float* dst, const float* src) {
    own[threadIdx.x] = 2.0f;
    WAIT();
    dst[threadIdx.x] = src[threadIdx.x] * own[threadIdx.x];
}
// Lets its dependents begin before it waits, or only after.
extern "C" __global__ void trigger_early(float* scratch) {
    TRIGGER();
    WAIT();
    scratch[threadIdx.x] = 1.0f;
}
extern "C" __global__ void trigger_after_wait(float* scratch) {
    WAIT();
    TRIGGER();
    scratch[threadIdx.x] = 1.0f;
}
`

// pdlStep is one launch of a pdlCase: the kernel, programmatic or plain,
// and its buffers by name.
type pdlStep struct {
	kernel       string
	programmatic bool
	bufs         []string
}

type pdlCase struct {
	name    string
	steps   []pdlStep
	capture bool     // capture the steps into a graph and replay it
	want    []string // the fault's parts; none: the run passes
}

// pdlCases: each starts with produce(b, a), plain, writing b from a.
func pdlCases() []pdlCase {
	produce := pdlStep{kernel: "produce", bufs: []string{"b", "a"}}
	readEarly := []string{"c", "b"}
	race := []string{"CUDA_ERROR_LAUNCH_FAILED", "kernel read_early reads byte offset 0 of allocation", "'pdl b'",
		"[argument src]", "before griddepcontrol.wait", "(kernel produce) wrote it"}
	return []pdlCase{
		{name: "read before wait, programmatic", steps: []pdlStep{produce, {"read_early", true, readEarly}}, want: race},
		{name: "read before wait, plain launch (launch=1: not checked)", steps: []pdlStep{produce, {"read_early", false, readEarly}}},
		{name: "wait first", steps: []pdlStep{produce, {"read_after_wait", true, readEarly}}},
		{name: "own prologue before wait", steps: []pdlStep{produce, {"own_prologue", true, []string{"d", "c", "b"}}}},
		{name: "write the predecessor's input before wait", steps: []pdlStep{produce, {"clobber_early", true, []string{"a"}}},
			want: []string{"CUDA_ERROR_LAUNCH_FAILED", "kernel clobber_early writes byte offset 0 of allocation", "'pdl a'", "(kernel produce) read it"}},
		{name: "a copy between: nothing to overlap", steps: []pdlStep{produce, {kernel: "copy"}, {"read_early", true, readEarly}}},
		{name: "captured: the graph keeps the attribute", capture: true, steps: []pdlStep{produce, {"read_early", true, readEarly}}, want: race},
		{name: "captured, wait first", capture: true, steps: []pdlStep{produce, {"read_after_wait", true, readEarly}}},
		// trigger_early lets read_early begin while produce may still run.
		{name: "launch_dependents before wait carries the predecessor", steps: []pdlStep{produce, {"trigger_early", true, []string{"d"}}, {"read_early", true, readEarly}},
			want: []string{"kernel read_early reads", "'pdl b'", "(kernel produce) wrote it"}},
		{name: "launch_dependents after wait does not", steps: []pdlStep{produce, {"trigger_after_wait", true, []string{"d"}}, {"read_early", true, readEarly}}},
	}
}

// TestEmulatorProgrammaticLaunchRaces runs each case in a child process
// with STEPBENCH_EMU_CHECK_PDL=1 (the modules are then instrumented, and
// settings are per process): a programmatic launch that touches its
// predecessor's data before griddepcontrol.wait fails with a fault naming
// the kernels and the buffer; waiting first, a plain launch, or work in
// between passes. The same cases without the setting all pass (no check).
func TestEmulatorProgrammaticLaunchRaces(t *testing.T) {
	if os.Getenv("STEPBENCH_TEST_PDL") == "1" {
		for _, c := range pdlCases() {
			t.Run(c.name, func(t *testing.T) { fmt.Printf("CASE %s: %v\n", c.name, runPDLCase(t, c)) })
		}
		return
	}
	emutest.Use(t)
	seeded.Expect(t, "PDL: an access before griddepcontrol.wait (pdlCases)")
	for _, check := range []string{"1", "0"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorProgrammaticLaunchRaces$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_PDL=1", "STEPBENCH_EMU_CHECK_PDL="+check)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("check %s: %v\n%s", check, err, out)
		}
		for _, c := range pdlCases() {
			line := caseLine(string(out), c.name)
			if check == "0" || len(c.want) == 0 {
				if line != "<nil>" {
					t.Errorf("check %s: %s: %s, want it to pass", check, c.name, line)
				}
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(line, w) {
					t.Errorf("check %s: %s: %q lacks %q", check, c.name, line, w)
				}
			}
		}
	}
}

// caseLine is what the child printed for the named case.
func caseLine(out, name string) string {
	prefix := "CASE " + name + ": "
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return rest
		}
	}
	return "(no line for the case)"
}

// runPDLCase runs c's steps on a fresh context (a fault is sticky) and
// returns what the stream's synchronisation says.
func runPDLCase(t *testing.T, c pdlCase) error {
	g := newGPUEnv(t)
	cubin, log, err := openTestNVRTC(t).Compile(pdlSrc, "pdl.cu", []string{"--gpu-architecture=sm_90"})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	mod, err := g.ctx.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mod.Unload() }()
	bufs := map[string]DevPtr{}
	for _, name := range []string{"a", "b", "c", "d"} {
		// Not freed: after a fault only the context's release frees it.
		if bufs[name], err = g.ctx.Alloc(4096); err != nil {
			t.Fatal(err)
		}
		g.ctx.NameAllocation(bufs[name], "pdl "+name)
	}
	run := func(s pdlStep) error {
		if s.kernel == "copy" {
			return g.stream.CopyDtoD(bufs["d"], bufs["a"], 256)
		}
		f, err := mod.Function(s.kernel)
		if err != nil {
			return err
		}
		var args []any
		for _, b := range s.bufs {
			args = append(args, bufs[b])
		}
		if s.programmatic {
			return g.stream.LaunchProgrammatic(f, Dim3{1, 1, 1}, Dim3{64, 1, 1}, 0, args...)
		}
		return g.stream.Launch(f, Dim3{1, 1, 1}, Dim3{64, 1, 1}, 0, args...)
	}
	// Every kernel runs once eagerly first (lazy loading refuses a first launch in a capture).
	for _, s := range c.steps {
		if err := run(pdlStep{kernel: s.kernel, bufs: s.bufs}); err != nil {
			t.Fatal(err)
		}
		if err := g.stream.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if c.capture {
		return runCaptured(t, g, c, run)
	}
	for _, s := range c.steps {
		if err := run(s); err != nil {
			return err
		}
	}
	return g.stream.Sync()
}

func runCaptured(t *testing.T, g *gpuEnv, c pdlCase, run func(pdlStep) error) error {
	if err := g.stream.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.steps {
		if err := run(s); err != nil {
			t.Fatal(err)
		}
	}
	graph, err := g.stream.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = graph.Destroy() }()
	ge, err := graph.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ge.Destroy() }()
	if err := ge.Launch(g.stream); err != nil {
		return err
	}
	return g.stream.Sync()
}
