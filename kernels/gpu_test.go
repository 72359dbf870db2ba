package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels/ref"
)

// gpu is one context with the kernels loaded; every call comes from the test
// goroutine, locked to its OS thread (the cuda threading rule).
type gpu struct {
	t      *testing.T // the test whose goroutine owns the context
	ctx    *cuda.Context
	stream *cuda.Stream
	set    *Set
	allocs []cuda.DevPtr
}

// poison is a NaN bf16 pattern written over every output before a launch, so
// that an element the kernel forgets to write fails the test.
const poison = 0xFFFF

func newGPU(t *testing.T) *gpu {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	drv, err := cuda.OpenDriver()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	count, err := drv.DeviceCount()
	if err != nil || count == 0 {
		t.Skipf("no GPU: %d devices, %v", count, err)
	}
	props, err := drv.Props(0)
	if err != nil {
		t.Fatal(err)
	}
	nv := openNVRTCForTest(t)
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := Compile(nv, srcs, props.Major*10+props.Minor, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := drv.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	g := &gpu{t: t, ctx: ctx}
	t.Cleanup(func() {
		for _, p := range g.allocs {
			if err := ctx.Free(p); err != nil {
				t.Error(err)
			}
		}
		if g.set != nil {
			if err := g.set.Close(); err != nil {
				t.Error(err)
			}
		}
		if g.stream != nil {
			if err := g.stream.Destroy(); err != nil {
				t.Error(err)
			}
		}
		if err := ctx.Close(); err != nil {
			t.Error(err)
		}
	})
	if g.stream, err = ctx.NewStream(); err != nil {
		t.Fatal(err)
	}
	if g.set, err = Load(ctx, compiled, props.SMCount); err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU %s (sm_%d%d, %d SMs)", props.Name, props.Major, props.Minor, props.SMCount)
	return g
}

func (g *gpu) check(err error) {
	g.t.Helper()
	if err != nil {
		g.t.Fatal(err)
	}
}

func (g *gpu) alloc(bytes int) cuda.DevPtr {
	g.t.Helper()
	p, err := g.ctx.Alloc(max(bytes, 16))
	g.check(err)
	g.allocs = append(g.allocs, p)
	return p
}

// upload copies raw bytes through pinned memory and waits.
func (g *gpu) upload(dst cuda.DevPtr, src unsafe.Pointer, bytes int) {
	g.t.Helper()
	if bytes == 0 {
		return
	}
	h, err := g.ctx.AllocHost(bytes)
	g.check(err)
	defer func() { g.check(g.ctx.FreeHost(h)) }()
	copy(unsafe.Slice((*byte)(h.Ptr), bytes), unsafe.Slice((*byte)(src), bytes))
	g.check(g.stream.CopyHtoD(dst, h.Ptr, bytes))
	g.check(g.stream.Sync())
}

func (g *gpu) download(dst unsafe.Pointer, src cuda.DevPtr, bytes int) {
	g.t.Helper()
	if bytes == 0 {
		return
	}
	h, err := g.ctx.AllocHost(bytes)
	g.check(err)
	defer func() { g.check(g.ctx.FreeHost(h)) }()
	g.check(g.stream.CopyDtoH(h.Ptr, src, bytes))
	g.check(g.stream.Sync())
	copy(unsafe.Slice((*byte)(dst), bytes), unsafe.Slice((*byte)(h.Ptr), bytes))
}

func (g *gpu) bf16(data []uint16) cuda.DevPtr {
	p := g.alloc(2 * len(data))
	if len(data) > 0 {
		g.upload(p, unsafe.Pointer(&data[0]), 2*len(data))
	}
	return p
}

func (g *gpu) f32(data []float32) cuda.DevPtr {
	p := g.alloc(4 * len(data))
	if len(data) > 0 {
		g.upload(p, unsafe.Pointer(&data[0]), 4*len(data))
	}
	return p
}

func (g *gpu) i32(data []int32) cuda.DevPtr {
	p := g.alloc(4 * len(data))
	if len(data) > 0 {
		g.upload(p, unsafe.Pointer(&data[0]), 4*len(data))
	}
	return p
}

// poisoned allocates n bf16 filled with NaN.
func (g *gpu) poisoned(n int) cuda.DevPtr {
	p := g.alloc(2 * n)
	g.check(g.stream.Memset16(p, poison, n))
	return p
}

func (g *gpu) getBF16(p cuda.DevPtr, n int) []uint16 {
	out := make([]uint16, n)
	if n > 0 {
		g.check(g.stream.Sync()) // surface launch errors before the copy
		g.download(unsafe.Pointer(&out[0]), p, 2*n)
	}
	return out
}

func (g *gpu) getI32(p cuda.DevPtr, n int) []int32 {
	out := make([]int32, n)
	if n > 0 {
		g.check(g.stream.Sync())
		g.download(unsafe.Pointer(&out[0]), p, 4*n)
	}
	return out
}

// randomBF16 draws n bf16 values from N(mean, std²).
func randomBF16(rng *rand.Rand, n int, mean, std float64) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = ref.F32ToBF16(float32(mean + std*rng.NormFloat64()))
	}
	return out
}

// relErrBF16 is ||got-want|| / ||want||; a NaN in got is an error.
func relErrBF16(got, want []uint16) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	var diff, norm float64
	for i := range got {
		g, w := float64(ref.BF16ToF32(got[i])), float64(ref.BF16ToF32(want[i]))
		if math.IsNaN(g) {
			return 0, fmt.Errorf("element %d is NaN (%#04x), want %g", i, got[i], w)
		}
		if math.IsNaN(w) {
			return 0, fmt.Errorf("reference element %d is NaN", i)
		}
		diff += (g - w) * (g - w)
		norm += w * w
	}
	if norm == 0 {
		return math.Sqrt(diff), nil
	}
	return math.Sqrt(diff / norm), nil
}

// closeBF16 fails the test when got is not within 1e-2 relative error of want.
func closeBF16(t *testing.T, name string, got, want []uint16) {
	t.Helper()
	rel, err := relErrBF16(got, want)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if rel > 1e-2 {
		t.Errorf("%s: relative error %.3g > 1e-2", name, rel)
	}
}

func equalBits[T comparable](t *testing.T, name string, got, want []T) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d elements, want %d", name, len(got), len(want))
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: element %d = %v, want %v (first difference)", name, i, got[i], want[i])
			return
		}
	}
}

// modelShape is a model's widths; llama-tiny-ish has odd sizes that take the
// scalar paths, llama-3-8b the real ones.
type modelShape struct {
	name                    string
	hidden, inter, vocab    int
	heads, kvHeads, headDim int
	ropeTheta               float64
}

var modelShapes = []modelShape{
	{name: "tiny", hidden: 256, inter: 172, vocab: 1003, heads: 4, kvHeads: 2, headDim: 64, ropeTheta: 10000},
	{name: "llama-3-8b", hidden: 4096, inter: 14336, vocab: 128256, heads: 32, kvHeads: 8, headDim: 128, ropeTheta: 500000},
}

// TestGPU runs every kernel against its kernels/ref twin. It uses no
// subtests: t.Run starts a new goroutine, and every call of a CUDA context
// must come from the goroutine (OS thread) that made it current.
func TestGPU(t *testing.T) {
	g := newGPU(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range modelShapes {
		t.Logf("model shape %s", m.name)
		testEmbed(t, g, rng, m)
		testAddRMSNorm(t, g, rng, m)
		testSiluMul(t, g, rng, m)
		testGatherLast(t, g, rng, m)
		testArgmax(t, g, rng, m)
		testRope(t, g, rng, m)
	}
	testAttention(t, g, rng)
	testFillDummy(t, g)
}

func testEmbed(t *testing.T, g *gpu, rng *rand.Rand, m modelShape) {
	const tokens = 37
	vocab := min(m.vocab, 8192) // the row width is what matters; a full 8B table is 1 GB of random draws
	table := randomBF16(rng, vocab*m.hidden, 0, 1)
	ids := make([]int32, tokens)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	ids[0], ids[1] = 0, int32(vocab-1) // both ends of the table
	want := make([]uint16, tokens*m.hidden)
	ref.Embed(want, table, ids, m.hidden)
	out := g.poisoned(tokens * m.hidden)
	g.check(g.set.Embed(g.stream, out, g.bf16(table), g.i32(ids), tokens, m.hidden))
	equalBits(t, "embed", g.getBF16(out, tokens*m.hidden), want)
}

func testAddRMSNorm(t *testing.T, g *gpu, rng *rand.Rand, m modelShape) {
	for _, rows := range []int{1, 5, 128} {
		for _, withAdd := range []bool{true, false} {
			n := rows * m.hidden
			residual := randomBF16(rng, n, 0, 2)
			add := randomBF16(rng, n, 0.5, 1)
			weight := randomBF16(rng, m.hidden, 1, 0.1)
			const eps = 1e-5
			wantOut := make([]uint16, n)
			wantRes := append([]uint16(nil), residual...)
			var refAdd []uint16
			addPtr := cuda.DevPtr(0)
			if withAdd {
				refAdd = add
				addPtr = g.bf16(add)
			}
			ref.AddRMSNorm(wantOut, wantRes, refAdd, weight, rows, m.hidden, eps)
			out, res := g.poisoned(n), g.bf16(residual)
			g.check(g.set.AddRMSNorm(g.stream, out, res, addPtr, g.bf16(weight), rows, m.hidden, eps))
			name := fmt.Sprintf("add_rmsnorm rows=%d add=%v", rows, withAdd)
			closeBF16(t, name+" out", g.getBF16(out, n), wantOut)
			// The residual sum is one bf16 rounding of exact inputs: bit-identical.
			equalBits(t, name+" residual", g.getBF16(res, n), wantRes)
		}
	}
}

func testSiluMul(t *testing.T, g *gpu, rng *rand.Rand, m modelShape) {
	for _, rows := range []int{1, 64} {
		gateUp := randomBF16(rng, rows*2*m.inter, 0, 2)
		want := make([]uint16, rows*m.inter)
		ref.SiluMul(want, gateUp, rows, m.inter)
		out := g.poisoned(rows * m.inter)
		g.check(g.set.SiluMul(g.stream, out, g.bf16(gateUp), rows, m.inter))
		closeBF16(t, fmt.Sprintf("silu_mul rows=%d", rows), g.getBF16(out, rows*m.inter), want)
	}
}

func testGatherLast(t *testing.T, g *gpu, rng *rand.Rand, m modelShape) {
	const batch, seqLen = 3, 19
	for _, width := range []int{m.hidden, m.vocab} {
		in := randomBF16(rng, batch*seqLen*width, 0, 1)
		want := make([]uint16, batch*width)
		ref.GatherLast(want, in, batch, seqLen, width)
		out := g.poisoned(batch * width)
		g.check(g.set.GatherLast(g.stream, out, g.bf16(in), batch, seqLen, width))
		equalBits(t, fmt.Sprintf("gather_last width=%d", width), g.getBF16(out, batch*width), want)
	}
}

func testArgmax(t *testing.T, g *gpu, rng *rand.Rand, m modelShape) {
	const rows = 6
	logits := randomBF16(rng, rows*m.vocab, 0, 3)
	row := func(r int) []uint16 { return logits[r*m.vocab : (r+1)*m.vocab] }
	const nan, bigValue = 0x7fc0, 0x4300 // 128.0 beats every N(0, 9) draw
	// Row 1: a tie at the max; the first index must win.
	row(1)[m.vocab-2], row(1)[m.vocab/3] = bigValue, bigValue
	// Row 2: NaN everywhere but one element; NaN never wins.
	for i := range row(2) {
		row(2)[i] = nan
	}
	row(2)[m.vocab/2] = ref.F32ToBF16(-5)
	// Row 3: all NaN → 0, as the reference.
	for i := range row(3) {
		row(3)[i] = poison
	}
	// Row 4: max in the last element, a NaN in front of it.
	row(4)[m.vocab-1], row(4)[0] = bigValue, nan
	want := make([]int32, rows)
	ref.Argmax(want, logits, rows, m.vocab)
	out := g.alloc(4 * rows)
	g.check(g.stream.Memset32(out, 0xFFFFFFFF, rows))
	g.check(g.set.Argmax(g.stream, out, g.bf16(logits), rows, m.vocab))
	equalBits(t, "argmax", g.getI32(out, rows), want)
}

func testRope(t *testing.T, g *gpu, rng *rand.Rand, m modelShape) {
	for _, a := range []AttnShape{
		{Batch: 2, SeqLen: 9, StartPos: 0, MaxSeq: 32},
		{Batch: 3, SeqLen: 1, StartPos: 4000, MaxSeq: 4100},
		{Batch: 1, SeqLen: 128, StartPos: 300, MaxSeq: 512},
	} {
		a.Heads, a.KVHeads, a.HeadDim = m.heads, m.kvHeads, m.headDim
		name := fmt.Sprintf("rope_kv_write %+v", a)
		tokens := a.Batch * a.SeqLen
		qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
		qkv := randomBF16(rng, tokens*(qWidth+2*kvWidth), 0, 1)
		invFreq := ref.RopeInvFreq(a.HeadDim, m.ropeTheta, nil)
		cacheLen := a.Batch * a.MaxSeq * kvWidth
		kCache, vCache := randomBF16(rng, cacheLen, 0, 1), randomBF16(rng, cacheLen, 0, 1)
		dK, dV := g.bf16(kCache), g.bf16(vCache)
		// Poison exactly the cache rows the kernel must write.
		for b := 0; b < a.Batch; b++ {
			at := (b*a.MaxSeq + a.StartPos) * kvWidth
			g.check(g.stream.Memset16(dK+cuda.DevPtr(2*at), poison, a.SeqLen*kvWidth))
			g.check(g.stream.Memset16(dV+cuda.DevPtr(2*at), poison, a.SeqLen*kvWidth))
		}
		wantQ := make([]uint16, tokens*qWidth)
		ref.RopeKVWrite(wantQ, kCache, vCache, qkv, invFreq, a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
		q := g.poisoned(tokens * qWidth)
		g.check(g.set.RopeKVWrite(g.stream, q, dK, dV, g.bf16(qkv), g.f32(invFreq), a))
		closeBF16(t, name+" q", g.getBF16(q, tokens*qWidth), wantQ)
		gotK, gotV := g.getBF16(dK, cacheLen), g.getBF16(dV, cacheLen)
		for b := 0; b < a.Batch; b++ {
			lo, hi := (b*a.MaxSeq+a.StartPos)*kvWidth, (b*a.MaxSeq+a.StartPos+a.SeqLen)*kvWidth
			closeBF16(t, fmt.Sprintf("%s k rows of batch %d", name, b), gotK[lo:hi], kCache[lo:hi])
			equalBits(t, fmt.Sprintf("%s v rows of batch %d", name, b), gotV[lo:hi], vCache[lo:hi])
		}
		// Every other cache row stays as it was.
		equalBits(t, name+" whole k cache", maskRows(gotK, a), maskRows(kCache, a))
		equalBits(t, name+" whole v cache", maskRows(gotV, a), maskRows(vCache, a))
	}
}

// maskRows zeroes the rows RopeKVWrite writes, leaving those it must not touch.
func maskRows(cache []uint16, a AttnShape) []uint16 {
	out := append([]uint16(nil), cache...)
	kvWidth := a.KVHeads * a.HeadDim
	for b := 0; b < a.Batch; b++ {
		clear(out[(b*a.MaxSeq+a.StartPos)*kvWidth : (b*a.MaxSeq+a.StartPos+a.SeqLen)*kvWidth])
	}
	return out
}

func testAttention(t *testing.T, g *gpu, rng *rand.Rand) {
	shapes := []AttnShape{
		// decode: one split, several splits with a short last chunk, long KV, MHA at D=32
		{Batch: 3, SeqLen: 1, StartPos: 37, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 64},
		{Batch: 2, SeqLen: 1, StartPos: 700, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 1024},
		{Batch: 1, SeqLen: 1, StartPos: 4095, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 4096},
		{Batch: 8, SeqLen: 1, StartPos: 1000, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 1100},
		{Batch: 2, SeqLen: 1, StartPos: 0, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 8},
		{Batch: 2, SeqLen: 1, StartPos: 300, Heads: 8, KVHeads: 8, HeadDim: 32, MaxSeq: 512},
		// prefill: from 0, partial query tile, with cached prefix (startPos > 0)
		{Batch: 2, SeqLen: 17, StartPos: 0, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 32},
		{Batch: 1, SeqLen: 128, StartPos: 200, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 512},
		{Batch: 2, SeqLen: 70, StartPos: 5, Heads: 6, KVHeads: 3, HeadDim: 32, MaxSeq: 80},
		{Batch: 1, SeqLen: 128, StartPos: 0, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 128},
	}
	for _, a := range shapes {
		name := fmt.Sprintf("attention %+v", a)
		tokens := a.Batch * a.SeqLen
		qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
		q := randomBF16(rng, tokens*qWidth, 0, 1)
		kCache := randomBF16(rng, a.Batch*a.MaxSeq*kvWidth, 0, 1)
		vCache := randomBF16(rng, a.Batch*a.MaxSeq*kvWidth, 0, 1)
		want := make([]uint16, tokens*qWidth)
		ref.Attention(want, q, kCache, vCache, a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)

		wsBytes := g.set.AttentionWorkspaceBytes(a)
		var ws cuda.DevPtr
		if wsBytes > 0 {
			ws = g.alloc(wsBytes)
		}
		out := g.poisoned(tokens * qWidth)
		g.check(g.set.Attention(g.stream, out, g.bf16(q), g.bf16(kCache), g.bf16(vCache), ws, wsBytes, a))
		closeBF16(t, name, g.getBF16(out, tokens*qWidth), want)
	}
}

func testFillDummy(t *testing.T, g *gpu) {
	const n = 100_003
	key := ref.DummyKey(42, "model.layers.0.mlp.down_proj.weight")
	for _, first := range []uint64{0, 12345, 1 << 33} {
		for _, kind := range []ref.DummyKind{ref.DummyUniform, ref.DummyOnes} {
			want := make([]uint16, n)
			for i := range want {
				want[i] = ref.DummyElem(key, first+uint64(i), kind)
			}
			dst := g.poisoned(n)
			g.check(g.set.FillDummy(g.stream, dst, n, key, first, kind))
			equalBits(t, fmt.Sprintf("fill_dummy first=%d kind=%d", first, kind), g.getBF16(dst, n), want)
		}
	}
}
