package gpu

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
	"stepbench/kernels"
	"stepbench/runner"
)

// The reference op library (examples/ops/reference, ABI 2.1) declares the
// FP8 caches: verify's FP8 suite calls it for rope_kv_write, attn_decode
// and attn_prefill with FP8 byte caches and the K and V scales as tensors
// 10 and 11, and holds it to ref.RopeKVWritePagedFP8 and
// ref.AttentionPagedFP8 in both formats at the suite's page sizes; its caps
// take an FP8 run (CheckLibKV), a library without them does not.
func TestEmulatorFP8OpLibrary(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc: %v", err)
	}
	lib := filepath.Join(t.TempDir(), "libreference_ops.so")
	if out, err := exec.Command(gcc, "-std=c11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-I../../include",
		"-o", lib, "../../examples/ops/reference/reference_ops.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ctx, stream, set := emulatorKernels(t, mustSources(t), testCache())
	defer ctx.Close()
	libs := map[string]string{kernels.OpRope: lib, kernels.OpAttnDecode: lib, kernels.OpAttnPrefill: lib}
	withLibs, _, err := set.WithOps(ctx, libs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := withLibs.closeLibs(); err != nil {
			t.Error(err)
		}
	}()
	for _, d := range []kernels.CacheDType{kernels.CacheE4M3, kernels.CacheE5M2} {
		if err := withLibs.CheckLibKV(&runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, DType: d}); err != nil {
			t.Errorf("the reference library on an %s cache: %v", d, err)
		}
	}
	v := NewVerifier(ctx, stream, withLibs, 1)
	v.verifyLibKVSuiteFP8(tinyShapes[0], nil)
	var seen []string
	for _, r := range v.results {
		if r.Err != nil {
			t.Errorf("%s [%s]: %v", r.Check, r.Shape, r.Err)
		} else {
			t.Logf("ok %s [%s] rel err %.3g", r.Check, r.Shape, r.RelErr)
		}
		seen = append(seen, r.Check)
	}
	for _, want := range []string{"rope_kv_write [op library", "attention decode [op library", "attention prefill [op library"} {
		for _, format := range []string{"fp8_e4m3", "fp8_e5m2"} {
			found := false
			for _, s := range seen {
				found = found || strings.HasPrefix(s, want) && strings.HasSuffix(s, "paged "+format)
			}
			if !found {
				t.Errorf("no check %q ... %s among %q", want, format, seen)
			}
		}
	}
}
