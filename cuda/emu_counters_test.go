package cuda

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
)

// Kernels whose memory traffic is known by reading them: what the emulated
// device's access counters (STEPBENCH_EMU_COUNTERS) must report.
const countersSrc = `
struct __align__(16) v4 { unsigned x, y, z, w; };
// A plain 16-byte coalesced copy: a warp moves 512 contiguous bytes, 16 sectors, all used.
extern "C" __global__ void copy16(v4* dst, const v4* src) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    dst[i] = src[i];
}
// Lanes write every other float: 256 bytes span 8 sectors, half of each used.
extern "C" __global__ void every_other(float* dst) {
    dst[2 * (blockIdx.x * blockDim.x + threadIdx.x)] = 1.0f;
}
// Shared memory: a stride of two floats puts lanes t and t+16 in one bank
// (2 wavefronts, 1 conflict per request); every lane reading word 0 is a
// broadcast (1 wavefront).
extern "C" __global__ void banks(float* out) {
    __shared__ float s[64];
    s[2 * threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[0];
}
`

type counterLine struct {
	Kernel   string             `json:"kernel"`
	Emulated bool               `json:"emulated"`
	Metrics  map[string]float64 `json:"metrics"`
}

func TestEmulatorAccessCounters(t *testing.T) {
	if file := os.Getenv("STEPBENCH_TEST_COUNTERS"); file != "" {
		runCounterKernels(t)
		return
	}
	emutest.Use(t)
	file := filepath.Join(t.TempDir(), "counters.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorAccessCounters$", "-test.v")
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_COUNTERS="+file, "STEPBENCH_EMU_COUNTERS="+file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]counterLine{}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l counterLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || !l.Emulated {
			t.Fatalf("counters line %q: %v (emulated %v)", sc.Text(), err, l.Emulated)
		}
		got[l.Kernel] = l
	}
	const g = "_pipe_lsu_mem_global_op_"
	for _, tc := range []struct {
		kernel, metric string
		want           float64
	}{
		{"copy16", "l1tex__t_requests" + g + "ld.sum", 8}, // 2 blocks of 4 warps
		{"copy16", "l1tex__average_t_sectors_per_request" + g + "ld.ratio", 16},
		{"copy16", "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct", 100},
		{"copy16", "l1tex__average_t_sectors_per_request" + g + "st.ratio", 16},
		{"copy16", "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct", 100},
		{"every_other", "l1tex__average_t_sectors_per_request" + g + "st.ratio", 8},
		{"every_other", "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct", 50},
		{"banks", "smsp__sass_inst_executed_op_shared_st.sum", 1},
		{"banks", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", 2},
		{"banks", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 1},
		{"banks", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 1},
		{"banks", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 0},
	} {
		l, ok := got[tc.kernel]
		if !ok {
			t.Fatalf("no counters for %s in %v", tc.kernel, got)
		}
		if v := l.Metrics[tc.metric]; v != tc.want {
			t.Errorf("%s %s = %g, want %g", tc.kernel, tc.metric, v, tc.want)
		}
	}
}

// runCounterKernels runs countersSrc's kernels in this (child) process,
// whose emulated device counts every access.
func runCounterKernels(t *testing.T) {
	g := newGPUEnv(t)
	nv := openTestNVRTC(t)
	cubin, log, err := nv.Compile(countersSrc, "counters.cu", []string{"--gpu-architecture=sm_90"})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if !strings.Contains(nv.Emulated(), "counted") {
		t.Fatalf("the emulated NVRTC does not build counted modules: %q", nv.Emulated())
	}
	mod, err := g.ctx.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	buf := func(bytes int) DevPtr {
		p, err := g.ctx.Alloc(bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.ctx.Free(p) })
		return p
	}
	src, dst, floats := buf(256*16), buf(256*16), buf(2*256*4)
	for _, l := range []struct {
		name        string
		grid, block Dim3
		args        []any
	}{
		{"copy16", Dim3{2, 1, 1}, Dim3{128, 1, 1}, []any{dst, src}},
		{"every_other", Dim3{1, 1, 1}, Dim3{32, 1, 1}, []any{floats}},
		{"banks", Dim3{1, 1, 1}, Dim3{32, 1, 1}, []any{floats}},
	} {
		f, err := mod.Function(l.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.stream.Launch(f, l.grid, l.block, 0, l.args...); err != nil {
			t.Fatal(fmt.Errorf("%s: %w", l.name, err))
		}
	}
	if err := g.stream.Sync(); err != nil {
		t.Fatal(err)
	}
}
