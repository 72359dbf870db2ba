package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
)

// profiledRegion is one timed region found inside a profile window of the
// emulated driver's log: its range name, the op ranges nested in it, and
// the launches (kernels and graphs) made inside it.
type profiledRegion struct {
	name     string
	ops      []string
	launches []string
}

// parseProfileLog cuts the log of the emulated driver and NVTX recorder
// into windows of top-level ranges. Every launch must lie inside a window
// and inside a range; the windows must open and close between ranges.
func parseProfileLog(t *testing.T, log string) [][]profiledRegion {
	t.Helper()
	var windows [][]profiledRegion
	inWindow, depth := false, 0
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		switch {
		case line == "profiler start" || line == "profiler stop":
			if depth != 0 {
				t.Errorf("%q inside a range", line)
			}
			inWindow = line == "profiler start"
			if inWindow {
				windows = append(windows, nil)
			}
		case strings.HasPrefix(line, "push "):
			depth++
			if !inWindow {
				continue
			}
			w := &windows[len(windows)-1]
			if depth == 1 {
				*w = append(*w, profiledRegion{name: strings.TrimPrefix(line, "push ")})
			} else {
				r := &(*w)[len(*w)-1]
				r.ops = append(r.ops, strings.TrimPrefix(line, "push "))
			}
		case line == "pop":
			depth--
		case strings.HasPrefix(line, "launch "):
			if !inWindow || depth == 0 || len(windows[len(windows)-1]) == 0 {
				t.Errorf("%q outside a window's ranges", line)
				continue
			}
			w := windows[len(windows)-1]
			w[len(w)-1].launches = append(w[len(w)-1].launches, strings.TrimPrefix(line, "launch "))
		}
	}
	return windows
}

// TestEmulatedProfileWindow runs --profile under the emulated driver and NVTX
// recorder, with graphs and eagerly: the window holds exactly the requested
// decode steps, each in its range, with the launches of that step only.
func TestEmulatedProfileWindow(t *testing.T) {
	onEmulator(t)
	dir, _ := emutest.Dir()
	t.Setenv(cuda.NVTXInjectionVar, filepath.Join(dir, "libsbemu_nvtx.so"))
	for _, eager := range []bool{false, true} {
		logPath := filepath.Join(t.TempDir(), "profile.log")
		t.Setenv("STEPBENCH_EMU_PROFILE_LOG", logPath)
		args := []string{"run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "2", "--input-len", "8",
			"--output-len", "6", "--num-iters", "2", "--energy-window-seconds", "0", "--profile", "--profile-phase", "decode",
			"--profile-start-step", "1", "--profile-steps", "3"}
		if eager {
			args = append(args, "--disable-cuda-graph")
		}
		_, stderr := mustRun(t, args...)
		if !strings.Contains(stderr, "profiler window: decode steps 1..3") || !strings.Contains(stderr, "NVTX ranges go to") {
			t.Errorf("eager=%v: stderr does not describe the window and NVTX:\n%s", eager, stderr)
		}
		data, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		windows := parseProfileLog(t, string(data))
		if len(windows) != 1 {
			t.Fatalf("eager=%v: %d profile windows, want 1 (one shape)\n%s", eager, len(windows), data)
		}
		checkProfiledSteps(t, eager, windows[0])
	}
}

func checkProfiledSteps(t *testing.T, eager bool, regions []profiledRegion) {
	t.Helper()
	var names []string
	for _, r := range regions {
		names = append(names, r.name)
	}
	if want := []string{"decode step 1", "decode step 2", "decode step 3"}; !slices.Equal(names, want) {
		t.Fatalf("eager=%v: window holds ranges %v, want %v", eager, names, want)
	}
	for _, r := range regions {
		if !eager {
			// A replayed graph: one launch, no op ranges.
			if len(r.launches) != 1 || !strings.HasPrefix(r.launches[0], "graph (") || len(r.ops) != 0 {
				t.Errorf("graph mode, %s: launches %v, op ranges %v; want one graph launch", r.name, r.launches, r.ops)
			}
			continue
		}
		if !slices.Equal(r.launches, regions[0].launches) || !slices.Equal(r.ops, regions[0].ops) {
			t.Errorf("eager, %s: launches or ops differ from %s's", r.name, regions[0].name)
		}
		for _, want := range []string{"embed", "qkv_proj", "attention", "down_proj", "argmax"} {
			if !slices.Contains(r.ops, want) {
				t.Errorf("eager, %s: no %s op range in %v", r.name, want, r.ops)
			}
		}
		if len(r.launches) == 0 || slices.ContainsFunc(r.launches, func(l string) bool { return strings.HasPrefix(l, "graph") }) {
			t.Errorf("eager, %s: launches %v; want kernels only", r.name, r.launches)
		}
	}
}
