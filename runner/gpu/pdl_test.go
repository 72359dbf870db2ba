package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// pdlChild marks a child process of the launch=2 tests: the emulated driver
// reads STEPBENCH_EMU_CHECK_PDL and STEPBENCH_EMU_SCHEDULE once per process.
const pdlChild = "STEPBENCH_TEST_PDL_CHILD"

// runPDLChild runs test in a child with the PDL check on and schedule set.
func runPDLChild(t *testing.T, test, schedule string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), pdlChild+"=1", "STEPBENCH_EMU_CHECK_PDL=1", "STEPBENCH_EMU_SCHEDULE="+schedule)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("schedule %s: %v\n%s", schedule, err, out)
	}
	return string(out)
}

// pdlModel is the head_dim-64 llama-tiny of the other end-to-end tests
// (every newest kernel takes it) and its prompts at batch 3.
func pdlModel(t *testing.T) (runner.Config, []int32) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 256, 512, 64
	prompts := make([]int32, 3*5)
	for i := range prompts {
		prompts[i] = int32((11*i + 3) % cfg.VocabSize)
	}
	return cfg, prompts
}

// launch=2 (programmatic dependent launch) on the emulated device, with
// every access made before griddepcontrol.wait checked
// (STEPBENCH_EMU_CHECK_PDL=1), under four thread orders: prefill and decode
// steps (eager and replayed graphs) give launch=1's tokens and logits bit
// for bit, and the cpu backend's within the end-to-end bound; every kernel
// of ours (gemv.cu's too) launches programmatically.
func TestCUDAProgrammaticLaunchMatchesPlain(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
		if os.Getenv(pdlChild) == "" {
			for _, schedule := range []string{"forward", "reverse", "random:5", "warp-serial"} {
				out := runPDLChild(t, "TestCUDAProgrammaticLaunchMatchesPlain", schedule)
				if !strings.Contains(out, "PDL-MATCH") {
					t.Errorf("schedule %s: no result in\n%s", schedule, out)
				}
				for _, l := range strings.Split(out, "\n") {
					if strings.Contains(l, "worst logits rel err") {
						t.Logf("%s: %s", schedule, strings.TrimSpace(l))
					}
				}
			}
			return
		}
	}
	cfg, prompts := pdlModel(t)
	const batch, steps, seed = 3, 6, 7
	wantTokens, wantLogits, _ := generateOn(t, runner.NewCPU(), cfg, seed, batch, prompts, steps)
	logitsOf, tokensOf := map[int][][][]float32{}, map[int][][]int32{}
	for _, ver := range []int{2, 1} {
		be, err := New(Options{CacheDir: testCache(), Kernels: kernels.Selection{kernels.OpLaunch: ver}})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"add_rmsnorm": ver == 2, "attn_decode4_d64_g2": ver == 2, "rope_kv_write2": ver == 2, "gemv_t8": ver == 2} {
			if got := be.set.Programmatic(name); got != want {
				t.Errorf("launch=%d: Programmatic(%s) = %v, want %v", ver, name, got, want)
			}
		}
		tokens, logits, graphs := generateOn(t, be, cfg, seed, batch, prompts, steps)
		if err := be.Close(); err != nil {
			t.Error(err)
		}
		worst := 0.0
		for s := range logits {
			for r := range logits[s] {
				rel, err := ref.RelErr(logits[s][r], wantLogits[s][r])
				if err != nil || rel > 2e-2 || tokens[s][r] != wantTokens[s][r] {
					t.Fatalf("launch=%d step %d row %d: logits rel err %.3g (%v), token %d, cpu %d", ver, s, r, rel, err, tokens[s][r], wantTokens[s][r])
				}
				worst = max(worst, rel)
			}
		}
		t.Logf("launch=%d: %d steps x %d rows, worst logits rel err %.3g against cpu, decode graphs %v", ver, steps+1, batch, worst, graphs)
		logitsOf[ver], tokensOf[ver] = logits, tokens
	}
	if !reflect.DeepEqual(logitsOf[2], logitsOf[1]) || !reflect.DeepEqual(tokensOf[2], tokensOf[1]) {
		t.Fatal("launch=2's logits or tokens are not launch=1's bits")
	}
	fmt.Println("PDL-MATCH")
}

// earlyNorm moves add_rmsnorm's SB_PDL_WAIT after its first pass, which
// reads the residual and the predecessor's output: a race under PDL.
func earlyNorm(t *testing.T) string {
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	text := srcs["norm.cu"]
	top := "    SB_PDL_WAIT();\n    SB_PDL_LAUNCH_DEPENDENTS();\n"
	late := "    const float ms = block_sum"
	if !strings.Contains(text, top) || !strings.Contains(text, late) {
		t.Fatal("norm.cu no longer has the lines this test moves")
	}
	text = strings.Replace(text, top, "", 1)
	text = strings.Replace(text, late, "    SB_PDL_WAIT();\n"+late, 1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "norm.cu"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A kernel that reads its predecessor's output before griddepcontrol.wait
// (add_rmsnorm with the wait moved after its first pass), launched with
// launch=2 on the emulated device, fails the decode with the emulator's
// race fault naming the kernel and the buffer; launch=1 runs the same
// kernel and passes (a plain launch is never checked). An edited source
// launches plain under launch=2 (its kernels leave the opt-in set), so the
// test opts add_rmsnorm in by hand, as a careless opt-in would.
func TestCUDAProgrammaticLaunchCatchesAnEarlyRead(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	if os.Getenv(pdlChild) == "" {
		seeded.Expect(t, "earlyNorm: add_rmsnorm reads before griddepcontrol.wait")
		out := runPDLChild(t, "TestCUDAProgrammaticLaunchCatchesAnEarlyRead", "forward")
		for _, want := range []string{"EARLY launch=1: <nil>", "EARLY launch=2: ", "kernel add_rmsnorm reads byte offset",
			"before griddepcontrol.wait", "but the grid before it on the stream (kernel "} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		return
	}
	cfg, prompts := pdlModel(t)
	dir := earlyNorm(t)
	for _, ver := range []int{1, 2} {
		be, err := New(Options{CacheDir: testCache(), KernelsDir: dir, Kernels: kernels.Selection{kernels.OpLaunch: ver}})
		if err != nil {
			t.Fatal(err)
		}
		if be.set.Programmatic("add_rmsnorm") {
			t.Errorf("launch=%d: an edited norm.cu's add_rmsnorm opts in to PDL", ver)
		}
		be.set.pdl["add_rmsnorm"] = true
		err = runSteps(be, cfg, 7, 3, prompts, 2)
		fmt.Printf("EARLY launch=%d: %v\n", ver, err)
		_ = be.Close()
	}
}

// runSteps is generateOn without its checks: the first error of a prefill
// and steps decode steps.
func runSteps(be runner.Backend, cfg runner.Config, seed uint64, batch int, prompts []int32, steps int) error {
	eng, err := runner.NewEngine(cfg, be, runner.WeightSource{Seed: seed}, nil)
	if err != nil {
		return err
	}
	defer eng.Close()
	if err := eng.Begin(batch, len(prompts)/batch, steps+1, prompts); err != nil {
		return err
	}
	for s := 0; s <= steps; s++ {
		step := eng.Prefill
		if s > 0 {
			step = eng.Decode
		}
		if err := step(); err != nil {
			return err
		}
		if _, err := eng.NextTokens(); err != nil {
			return err
		}
	}
	return nil
}

// fusedSet is the selection of every fused decode kernel: linear 4 (the
// norms in the projections) and attn_decode 5 (rope_kv_write in attention).
func fusedSet(launch int) kernels.Selection {
	return kernels.Selection{kernels.OpLaunch: launch, kernels.OpLinear: 4, kernels.OpAttnDecode: 5}
}

// launch=2 with the fused decode kernels (linear 4's gemv_res_* and
// gemv_norm_*, which load their first weights before their wait, and
// attn_decode 5), every access before griddepcontrol.wait checked: the
// same bits as launch=1 in forward and warp-serial order; and gemv.cu with
// the ring's first x loads moved above gemv_inputs_ready (a read of the
// predecessor's output before the wait), opted in by hand as a careless
// opt-in would be, fails the decode naming a gemv kernel.
func TestCUDAProgrammaticLaunchFusedKernels(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	if os.Getenv(pdlChild) == "" {
		seeded.Expect(t, "earlyX: gemv loads x before griddepcontrol.wait")
		for _, schedule := range []string{"forward", "warp-serial"} {
			out := runPDLChild(t, "TestCUDAProgrammaticLaunchFusedKernels", schedule)
			for _, want := range []string{"FUSED-MATCH", "EARLY-X launch=2: ", "before griddepcontrol.wait", "kernel gemv_"} {
				if !strings.Contains(out, want) {
					t.Errorf("schedule %s: output lacks %q:\n%s", schedule, want, out)
				}
			}
		}
		return
	}
	cfg, prompts := pdlModel(t)
	const batch, steps, seed = 3, 3, 7
	logitsOf := map[int][][][]float32{}
	for _, ver := range []int{2, 1} {
		be, err := New(Options{CacheDir: testCache(), Kernels: fusedSet(ver)})
		if err != nil {
			t.Fatal(err)
		}
		if got := be.set.Programmatic("gemv_norm_t8"); got != (ver == 2) {
			t.Errorf("launch=%d: Programmatic(gemv_norm_t8) = %v", ver, got)
		}
		_, logits, graphs := generateOn(t, be, cfg, seed, batch, prompts, steps)
		if err := be.Close(); err != nil {
			t.Error(err)
		}
		t.Logf("launch=%d with linear=4 attn_decode=5: decode graphs %v", ver, graphs)
		logitsOf[ver] = logits
	}
	if !reflect.DeepEqual(logitsOf[2], logitsOf[1]) {
		t.Fatal("launch=2's logits are not launch=1's bits with the fused kernels")
	}
	fmt.Println("FUSED-MATCH")
	be, err := New(Options{CacheDir: testCache(), KernelsDir: earlyX(t), Kernels: fusedSet(2)})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range kernels.Families() {
		if f.Source == "gemv.cu" {
			be.set.pdl[f.Name] = true
		}
	}
	err = runSteps(be, cfg, seed, batch, prompts, 1)
	fmt.Printf("EARLY-X launch=2: %v\n", err)
	_ = be.Close()
}

// earlyX is gemv.cu with the ring's first x loads issued before
// gemv_inputs_ready (gemv_partial's wait), in a kernels directory.
func earlyX(t *testing.T) string {
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	text := srcs["gemv.cu"]
	wait := "    gemv_inputs_ready(k);\n#pragma unroll\n    for (int u = 0; u < GEMV_UNROLL; u++) {\n        if (u < mine) gemv_load_x<MT>(xv[u], px, u * STRIDE);\n    }\n"
	early := "#pragma unroll\n    for (int u = 0; u < GEMV_UNROLL; u++) {\n        if (u < mine) gemv_load_x<MT>(xv[u], px, u * STRIDE);\n    }\n    gemv_inputs_ready(k);\n"
	if !strings.Contains(text, wait) {
		t.Fatal("gemv.cu no longer has the lines this test moves")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gemv.cu"), []byte(strings.Replace(text, wait, early, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
