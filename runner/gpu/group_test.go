package gpu

import (
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/runner"
	"stepbench/runner/dist"
)

// openTestGroup opens a one-node group of size 1 (one rank through NCCL)
// on llama-tiny with est, on a GPU or else the emulated device.
func openTestGroup(t *testing.T, est runner.MemoryEstimate) (*Group, error) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	nccl, err := cuda.OpenNCCL("")
	if err != nil {
		t.Fatal(err)
	}
	job := dist.Job{NNodes: 1, TPSize: 1}
	id, err := GroupID(nccl, job, "", time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return OpenGroup(GroupOptions{Config: cfg, Size: 1, Ranks: job.LocalRanks(), Backend: Options{CacheDir: testCache()},
		NCCL: nccl, ID: id, Estimate: est, Weights: runner.WeightSource{Seed: 7}})
}

// A group opened by OpenGroup generates the cpu backend's tokens and
// names its GPU.
func TestOpenGroupMatchesCPU(t *testing.T) {
	cfg, _ := runner.Preset("llama-tiny")
	g, err := openTestGroup(t, runner.EstimateMemory(cfg, 2, 16, 12))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cpu, err := runner.NewEngine(cfg, runner.NewCPU(), runner.WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	prompts := []int32{1, 2, 3, 4, 5, 6, 7, 8, 100, 3, 200, 17, 9, 9, 9, 42}
	for _, target := range []interface {
		Begin(batch, inputLen, outputLen int, prompts []int32) error
		Prefill() error
		Decode() error
	}{g, cpu} {
		if err := target.Begin(2, 8, 4, prompts); err != nil {
			t.Fatal(err)
		}
		if err := target.Prefill(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := target.Decode(); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := g.NextTokens()
	if err != nil {
		t.Fatal(err)
	}
	want, err := cpu.NextTokens()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("group's tokens %v, cpu backend's %v", got, want)
	}
	if uuids := g.GPUUUIDs(); len(uuids) != 1 || uuids[0] != g.Info(0).Device.UUID || uuids[0] == "" {
		t.Errorf("GPU UUIDs %v, rank 0's %q", uuids, g.Info(0).Device.UUID)
	}
}

// A rank whose GPU cannot hold the estimate stops the group before any
// weight is loaded, naming the GPU; more ranks than GPUs are refused
// before anything is opened.
func TestOpenGroupRefusesWhatDoesNotFit(t *testing.T) {
	_, err := openTestGroup(t, runner.MemoryEstimate{WeightBytes: 1 << 60})
	if err == nil || !strings.Contains(err.Error(), "--tp-size 1: GPU 0: ") {
		t.Errorf("an estimate no GPU holds: %v", err)
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := drv.DeviceCount()
	err = CheckGPUCount(2*(n+1), n+1)
	if !errors.Is(err, ErrTooFewGPUs) || !strings.Contains(err.Error(), "needs") {
		t.Errorf("%d ranks on %d GPUs: %v", n+1, n, err)
	}
	if err := CheckGPUCount(n, n); err != nil {
		t.Errorf("%d ranks on %d GPUs: %v", n, n, err)
	}
}
