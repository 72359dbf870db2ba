package gpu

import (
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"

	"stepbench/cuda"
	"stepbench/cuda/emutest"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// gemmLtBackend is a cuda backend running gemm version 2 whose tuned
// choices go to a directory of the test's own; the caller closes it
// (closeBackend) on its locked thread.
func gemmLtBackend(t *testing.T, progress *strings.Builder) (*Backend, *gemmLtState) {
	t.Helper()
	if drv, err := cuda.OpenDriver(); err != nil || drv.Emulated() != "" {
		emutest.Use(t)
	}
	be, err := New(Options{CacheDir: testCache(), Kernels: kernels.Selection{kernels.OpGemm: 2}, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	g, err := be.gemmLt()
	if err != nil {
		closeBackend(t, be)
		t.Fatal(err)
	}
	g.dir = t.TempDir()
	return be, g
}

func closeBackend(t *testing.T, be *Backend) {
	t.Helper()
	if err := be.Close(); err != nil {
		t.Error(err)
	}
}

// linearOnce runs Linear at m×n×k on fresh inputs and checks it against ref.Linear.
func linearOnce(t *testing.T, be *Backend, m, n, k int) {
	t.Helper()
	x, w := make([]uint16, m*k), make([]uint16, n*k)
	for i := range x {
		x[i] = ref.F32ToBF16(float32(i%13-6) / 8)
	}
	for i := range w {
		w[i] = ref.F32ToBF16(float32(i%11-5) / 16)
	}
	bufs := make([]runner.Buffer, 3)
	for i, n := range []int{m * k, n * k, m * n} {
		b, err := be.Alloc(runner.BF16, n)
		if err != nil {
			t.Fatal(err)
		}
		defer be.Free(b)
		bufs[i] = b
	}
	if err := be.UploadBF16(bufs[0], 0, x); err != nil {
		t.Fatal(err)
	}
	if err := be.UploadBF16(bufs[1], 0, w); err != nil {
		t.Fatal(err)
	}
	if err := be.Linear(bufs[2], bufs[0], bufs[1], m, n, k); err != nil {
		t.Fatal(err)
	}
	got, want := make([]uint16, m*n), make([]uint16, m*n)
	if err := be.DownloadBF16(bufs[2], got); err != nil {
		t.Fatal(err)
	}
	ref.Linear(want, x, w, m, n, k)
	if rel, err := ref.RelErrBF16(got, want); err != nil || rel > 1e-2 {
		t.Fatalf("gemm v2 m=%d n=%d k=%d: relative error %.3g (%v) against ref.Linear", m, n, k, rel, err)
	}
}

// gemm version 2 tunes a shape once: the heuristic's candidates are timed,
// the fastest kept, checked against cublasGemmEx and written to the cache;
// a second backend (a later run) reads it without timing; a corrupt, stale
// or foreign entry is noted and the shape tuned again; another GPU's name
// picks another entry. Every product matches ref.Linear.
func TestGemmV2TunesOnceAndCaches(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const m, n, k = 40, 72, 96
	var progress strings.Builder
	be, g := gemmLtBackend(t, &progress)
	defer closeBackend(t, be)
	linearOnce(t, be, m, n, k)
	linearOnce(t, be, m, n, k) // the process's own choice: no new tuning
	choices := be.GemmChoices()
	if len(choices) != 1 || g.tunings != 1 {
		t.Fatalf("after two calls of one shape: %d choices, %d tunings; want 1 and 1", len(choices), g.tunings)
	}
	ch := choices[0]
	if ch.FromCache || ch.Candidates < 2 || len(ch.MedianUs) != ch.Candidates || ch.Key.M != n || ch.Key.N != m || ch.Key.K != k {
		t.Fatalf("choice %+v: want a tuning of several candidates at cuBLAS's m=%d n=%d k=%d", ch, n, m, k)
	}
	for i, us := range ch.MedianUs {
		if us < ch.MedianUs[ch.Index] {
			t.Errorf("candidate %d took %.1f µs, less than the chosen %d's %.1f", i, us, ch.Index, ch.MedianUs[ch.Index])
		}
	}
	if _, err := os.Stat(ch.Path); err != nil {
		t.Fatalf("no cache entry written: %v", err)
	}
	line := "stepbench: gemm v2 m=40 n=72 k=96 (bf16 TN): cuBLASLt algorithm "
	if !strings.Contains(progress.String(), line) || (be.info.Emulated != "" && !strings.Contains(progress.String(), "EMULATED")) {
		t.Errorf("progress does not describe the choice:\n%s", progress.String())
	}

	t.Log(strings.TrimSpace(progress.String()))
	// A later run: the entry is read, nothing timed.
	reset := func() { g.choices, g.order = map[GemmKey]*GemmChoice{}, nil }
	reset()
	linearOnce(t, be, m, n, k)
	if c := be.GemmChoices()[0]; !c.FromCache || g.tunings != 1 || c.Algo != ch.Algo {
		t.Fatalf("a cached shape: from cache %v, tunings %d, algo %v (tuned %v)", c.FromCache, g.tunings, c.Algo, ch.Algo)
	}
	valid, err := os.ReadFile(ch.Path)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name, note string
		edit       func([]byte) []byte
	}{
		{"truncated", "not a cache entry", func(b []byte) []byte { return b[:len(b)/2] }},
		{"a time changed, checksum kept", "checksum mismatch", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"median_us":[`, `"median_us":[1e-9,`, 1))
		}},
		{"an algorithm cuBLASLt does not offer", "no longer offers", func(b []byte) []byte { return resealed(t, b, func(c *GemmChoice) { c.Algo[0] ^= 1 }) }},
		{"another GPU's entry under this key", "written for another GPU", func(b []byte) []byte { return resealed(t, b, func(c *GemmChoice) { c.Key.GPU = "NVIDIA H100" }) }},
		{"another format", "format", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), gemmCacheFormat, "stepbench gemm-lt cache 0", 1))
		}},
	} {
		if err := os.WriteFile(ch.Path, tc.edit(valid), 0o644); err != nil {
			t.Fatal(err)
		}
		progress.Reset()
		reset()
		linearOnce(t, be, m, n, k)
		if c := be.GemmChoices()[0]; c.FromCache || g.tunings != 2+i || !strings.Contains(progress.String(), tc.note) {
			t.Errorf("%s: from cache %v, tunings %d (want %d), notes:\n%s", tc.name, c.FromCache, g.tunings, 2+i, progress.String())
		}
		if again, err := loadGemmChoice(g.dir, ch.Key); err != nil || again == nil {
			t.Errorf("%s: the entry was not written again whole: %v", tc.name, err)
		}
	}
	// Another GPU (its name in the key) reads nothing of this one's.
	tunings := g.tunings
	be.info.Device.Name += " (another)"
	reset()
	linearOnce(t, be, m, n, k)
	if c := be.GemmChoices()[0]; c.FromCache || g.tunings != tunings+1 || c.Path == ch.Path {
		t.Errorf("another GPU: from cache %v, tunings %d (want %d), path %s", c.FromCache, g.tunings, tunings+1, c.Path)
	}
}

// resealed is entry b with its choice edited and its checksum made valid.
func resealed(t *testing.T, b []byte, edit func(*GemmChoice)) []byte {
	t.Helper()
	var e gemmCacheEntry
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	var c GemmChoice
	if err := json.Unmarshal(e.Choice, &c); err != nil {
		t.Fatal(err)
	}
	edit(&c)
	dir := t.TempDir()
	path, err := storeGemmChoice(dir, &c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A shape first met inside a graph capture cannot be tuned there: the
// error says so rather than timing inside the capture.
func TestGemmV2RefusesToTuneWhileCapturing(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	be, g := gemmLtBackend(t, &strings.Builder{})
	defer closeBackend(t, be)
	p := cuda.BF16Matmul{M: 16, N: 17, K: 32, TransA: true, A: 1 << 20, Lda: 32, B: 2 << 20, Ldb: 32, D: 3 << 20, Ldd: 16,
		Workspace: g.workspace, WorkspaceBytes: ltWorkspaceBytes}
	be.capturing = true
	_, err := be.gemmChoice(g, p)
	be.capturing = false
	if err == nil || !strings.Contains(err.Error(), "not tuned before the graph capture") {
		t.Fatalf("tuning while capturing: %v", err)
	}
}

// verify's gemm check runs gemm version 2 (its tuning included) at a
// model's projections with prefill rows, against ref.Linear; the
// Llama-3-8B widths are capped to gemmMaxMACs and say so.
func TestVerifyGemmV2(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	be, g := gemmLtBackend(t, &strings.Builder{})
	defer closeBackend(t, be)
	tiny, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	llama8B := kernels.ModelShape{Name: "llama-3-8b", Hidden: 4096, Inter: 14336, Vocab: 128256, Heads: 32, KVHeads: 8, HeadDim: 128}
	results, err := be.VerifyKernels([]kernels.ModelShape{tiny.KernelShape(), llama8B}, 3, VerifyOptions{Only: []string{"gemm"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(gemmRows) * 5; len(results) != want {
		t.Fatalf("%d gemm checks, want %d", len(results), want)
	}
	capped := 0
	for _, r := range results {
		if r.Check != "gemm v2" || r.Err != nil {
			t.Errorf("%s %s: rel err %.3g, %v", r.Check, r.Shape, r.RelErr, r.Err)
		}
		if strings.Contains(r.Shape, "capped") {
			capped++
		}
	}
	if capped == 0 || g.tunings == 0 {
		t.Errorf("%d capped checks, %d tunings: want Llama-3-8B's capped and the shapes tuned", capped, g.tunings)
	}
	t.Logf("%s %s: rel err %.3g", results[len(results)-1].Check, results[len(results)-1].Shape, results[len(results)-1].RelErr)
}

func TestGemmShapeCaps(t *testing.T) {
	for _, tc := range []struct{ rows, n, k, wantRows, wantN int }{
		{17, 96, 64, 17, 96},
		{17, 6144, 4096, 17, 1920},
		{64, 4096, 14336, 64, 144},
		{8192, 16, 4096, 2048, 16},
	} {
		r, n, label := gemmShape(tc.rows, tc.n, tc.k)
		if r != tc.wantRows || n != tc.wantN || r*n*tc.k > gemmMaxMACs && n > 16 {
			t.Errorf("gemmShape(%d, %d, %d) = %d, %d (%s); want %d, %d", tc.rows, tc.n, tc.k, r, n, label, tc.wantRows, tc.wantN)
		}
	}
}
