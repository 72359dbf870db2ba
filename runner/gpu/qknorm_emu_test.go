package gpu

import (
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
	"stepbench/kernels"
	"stepbench/runner"
)

// qwenShapes are the kernel shapes of the Qwen presets verify covers.
func qwenShapes(t *testing.T, names ...string) []kernels.ModelShape {
	t.Helper()
	var out []kernels.ModelShape
	for _, n := range names {
		c, err := runner.Preset(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.KernelShape())
	}
	return out
}

// missingQNorm is qk_norm with the q heads' norm dropped (as a kernel that
// took k_norm's branch for every head but v would, or an engine that never
// passed q_norm).
var missingQNorm = seededBug{
	name: "qk_norm: missing q-norm", file: "norm.cu", kernel: "qk_norm",
	old:  "const u32x4* w = head < heads ? q_norm : (head < heads + kv_heads ? k_norm : 0);",
	new:  "const u32x4* w = head < heads ? 0 : (head < heads + kv_heads ? k_norm : 0);",
	want: []string{"qk_norm", "qwen3-8b"},
}

// qk_norm passes verify at Qwen3-8B's and Qwen2.5-7B's heads; the seeded
// missing q-norm fails it at Qwen3-8B's.
func TestEmulatorQKNormAtQwenShapes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	emutest.Use(t)
	cache := testCache()
	srcs, err := kernels.Sources("")
	if err != nil {
		t.Fatal(err)
	}
	if failures := verifyOnEmulator(t, srcs, qwenShapes(t, "qwen3-8b", "qwen2.5-7b"), cache, "qk_norm"); len(failures) > 0 {
		t.Errorf("qk_norm at the Qwen shapes:\n%s", strings.Join(failures, "\n"))
	}
	failures := verifyOnEmulator(t, missingQNorm.seed(t), qwenShapes(t, "qwen3-8b"), cache, "qk_norm")
	if len(failures) == 0 {
		t.Fatalf("%s: every check passed", missingQNorm.name)
	}
	for _, w := range missingQNorm.want {
		if !strings.Contains(failures[0], w) {
			t.Fatalf("%s: first failure lacks %q:\n%s", missingQNorm.name, w, failures[0])
		}
	}
	t.Logf("%s caught: %s", missingQNorm.name, failures[0])
	seeded.Caught(t, "qk_norm: missing q-norm")
}
