package runner_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stepbench/internal/seeded"
	"stepbench/runner"
	"stepbench/runner/quanttest"
)

// maxRelErrQwenBF16 bounds a bf16 Qwen fixture's logits on the cpu backend
// against its float64 evaluation with bf16 activations. The two round the
// same values to bf16; only the arithmetic inside an op differs (float32
// sums against float64), and where that moves a value across a bf16
// rounding boundary the element changes by one bf16 step (2^-8 relative),
// which the layers after carry to the logits at about that size. Measured
// (seed 7, 16 tokens and 8 steps): qwen3-tiny 3.1e-3, qwen2-tiny 7.5e-5
// (without the q/k norm, qwen3-tiny's shape gives 3.7e-5: where a flip lands
// decides it, and a 1-token prompt with 2 heads of 64 also gave 3.4e-3, with
// no attention over keys at all). 1e-2 is three times the worst; a skipped
// q-norm costs 0.44, a skipped bias 0.28: 28-44 times the bound.
const maxRelErrQwenBF16 = 1e-2

// loadQwenFixture writes preset's bf16 fixture in the HF layout and opens it
// as a user's run does.
func loadQwenFixture(t *testing.T, preset string) (runner.Config, *runner.SafetensorsModel, *quanttest.Model64) {
	t.Helper()
	want, err := runner.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), preset)
	m, err := quanttest.WriteBF16(mkdir(t, dir), want, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runner.LoadConfigFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg != want {
		t.Fatalf("%s: config.json gives %+v, want the preset %+v", preset, cfg, want)
	}
	st, err := runner.OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Check(cfg); err != nil {
		t.Fatalf("%s: %v", preset, err)
	}
	return cfg, st, m
}

// qwenWorst runs the fixture on be against m's evaluation (bf16
// activations): the worst relative error of the logits over 8 steps.
func qwenWorst(t *testing.T, cfg runner.Config, be runner.Backend, st *runner.SafetensorsModel, m *quanttest.Model64) float64 {
	t.Helper()
	e, err := runner.NewEngine(cfg, be, runner.WeightSource{Reader: st}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m.BF16Activations = true
	worst, _, err := quanttest.Compare(e, m, fp8Prompt, 8)
	if err != nil {
		t.Fatal(err)
	}
	return worst
}

// seededQKNorm is the cpu backend with a seeded bug in QKNorm: the q-norm
// skipped (noQNorm) or the bias (noBias).
type seededQKNorm struct {
	*runner.CPU
	noQNorm, noBias bool
}

func (b seededQKNorm) QKNorm(qkv, bias, qNorm, kNorm runner.Buffer, tokens, heads, kvHeads, headDim int, eps float32) error {
	if b.noQNorm {
		qNorm = nil
	}
	if b.noBias {
		bias = nil
	}
	return b.CPU.QKNorm(qkv, bias, qNorm, kNorm, tokens, heads, kvHeads, headDim, eps)
}

// Qwen3's (q/k norm, attention wider than hidden, tied embedding) and
// Qwen2's (q/k/v bias) fixtures, written in their HF layout, give on the
// cpu backend the logits of their float64 evaluation; a backend that skips
// the q-norm (Qwen3) or the bias (Qwen2) is far beyond the bound.
func TestQwenFixturesMatchFloat64(t *testing.T) {
	for _, tt := range []struct {
		preset, bug string
		buggy       seededQKNorm
		caught      func(t *testing.T)
	}{
		{"qwen3-tiny", "missing q-norm", seededQKNorm{CPU: runner.NewCPU(), noQNorm: true}, func(t *testing.T) {
			seeded.Caught(t, "qwen3: missing q-norm (cpu backend against the float64 evaluation)")
		}},
		{"qwen2-tiny", "missing q/k/v bias", seededQKNorm{CPU: runner.NewCPU(), noBias: true}, func(t *testing.T) {
			seeded.Caught(t, "qwen2: missing q/k/v bias (cpu backend against the float64 evaluation)")
		}},
	} {
		cfg, st, m := loadQwenFixture(t, tt.preset)
		worst := qwenWorst(t, cfg, runner.NewCPU(), st, m)
		t.Logf("%s: logits against the float64 evaluation with bf16 activations: worst %.3g", tt.preset, worst)
		if worst > maxRelErrQwenBF16 {
			t.Errorf("%s: logits %.3g from the float64 evaluation, bound %g", tt.preset, worst, maxRelErrQwenBF16)
		}
		buggy := qwenWorst(t, cfg, tt.buggy, st, m)
		t.Logf("%s: with the seeded bug %q: %.3g", tt.preset, tt.bug, buggy)
		if buggy < 10*maxRelErrQwenBF16 {
			t.Errorf("%s: the seeded bug %q is only %.3g from the evaluation, under 10× the bound %g", tt.preset, tt.bug, buggy, maxRelErrQwenBF16)
		} else {
			tt.caught(t)
		}
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A Qwen3 checkpoint without a layer's q_norm is refused at load, naming
// the tensor.
func TestQwenMissingQNormRefused(t *testing.T) {
	cfg, _ := runner.Preset("qwen3-tiny")
	dir := mkdir(t, filepath.Join(t.TempDir(), "qwen3-tiny"))
	const name = "model.layers.1.self_attn.q_norm.weight"
	drop := func(ts []runner.HostTensor, _ map[string]any) []runner.HostTensor {
		return slices.DeleteFunc(ts, func(x runner.HostTensor) bool { return x.Name == name })
	}
	if _, err := quanttest.WriteBF16(dir, cfg, 7, drop); err != nil {
		t.Fatal(err)
	}
	st, err := runner.OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(cfg); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("Check = %v, want an error naming %s", err, name)
	}
}
