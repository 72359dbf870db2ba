package gpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"unsafe"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// CheckResult is one kernel compared with its kernels/ref twin.
type CheckResult struct {
	Check string // kernel (and variant), e.g. "add_rmsnorm out"
	Shape string // the shape it ran at
	// RelErr is ‖out−ref‖/‖ref‖ over the output; for checks that must be
	// bit-identical it is 0 when they are and Err says where they are not.
	RelErr float64
	Exact  bool  // the check demands identical bits
	Err    error // nil when the check passed
	// Counters are the emulated device's access counters of the check's
	// launches (CountAccesses), and ModelBytes the cost model's minimum
	// bytes of the op at the check's shape (0: not costed).
	Counters   []KernelCounters
	ModelBytes float64
}

// MaxRelErrBF16 is the tolerance of bf16 outputs (docs/design.md, Kernels).
const MaxRelErrBF16 = 1e-2

// poisonBF16 is a NaN bf16 pattern written over every output before a
// launch, so that an element a kernel forgets to write fails its check.
const poisonBF16 = 0xFFFF

// Verifier compares kernels with their twins on fresh random inputs. Like
// every cuda object it must be used from the goroutine (locked OS thread)
// that owns the context.
type Verifier struct {
	ctx    *cuda.Context
	stream *cuda.Stream
	set    *Kernels
	rng    *rand.Rand
	allocs []cuda.DevPtr
	// moeShapes are the MoE layers of the moe checks (nil: kernels.MoEShapes).
	moeShapes []kernels.MoEShape
	err       error // first cuda error of the current check (sticky until read)
	results   []CheckResult
	only      []string // kernels to check (Only); empty: all
	long      bool     // also the slow shapes (IncludeLong)
	dead      error    // a sticky CUDA error: the context is unusable, no more checks run
	// stopAtFailure ends the run at the first failing check (StopAtFirstFailure).
	stopAtFailure bool
	// counters reads the access counters each check's launches appended
	// (CountAccesses); modelBytes is the current check's cost-model bytes.
	counters   *counterReader
	modelBytes float64
	// fp8 runs the FP8 GEMM checks (cuBLASLt); nil on a GPU without FP8.
	fp8 *fp8State
	// gemmLt runs gemm version 2's products (Backend.linearLt); nil: the
	// gemm checks are skipped.
	gemmLt gemmRunner
}

// CountAccesses attaches to every check the access counters the emulated
// device appends to path (its STEPBENCH_EMU_COUNTERS file) for the check's
// launches.
func (v *Verifier) CountAccesses(path string) {
	v.counters = &counterReader{path: path}
	if fi, err := os.Stat(path); err == nil {
		v.counters.offset = fi.Size() // only what this verifier's launches add
	}
}

// NewVerifier makes a verifier drawing its inputs from seed.
func NewVerifier(ctx *cuda.Context, stream *cuda.Stream, set *Kernels, seed uint64) *Verifier {
	return &Verifier{ctx: ctx, stream: stream, set: set, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// Close frees the verifier's device memory.
func (v *Verifier) Close() error {
	var errs []error
	for _, p := range v.allocs {
		errs = append(errs, v.ctx.Free(p))
	}
	v.allocs = nil
	return errors.Join(errs...)
}

// VerifyAll runs every kernel at each model shape, then attention at the
// shapes of models (and a fixed set of edge cases), decode attention replayed
// from a CUDA graph, and the dummy-weight generator. It frees each check's
// memory as it goes.
func (v *Verifier) VerifyAll(models []kernels.ModelShape) []CheckResult {
	v.results = nil
	perModel := []struct {
		kernel string
		check  func(kernels.ModelShape)
	}{
		{"embed", v.verifyEmbed}, {"add_rmsnorm", v.verifyAddRMSNorm}, {"silu_mul", v.verifySiluMul},
		{"gather_last", v.verifyGatherLast}, {"argmax", v.verifyArgmax}, {"rope_kv_write", v.verifyRope},
		{"argmax_keys", v.verifyArgmaxKeys}, {"linear", v.verifyLinear}, {"linear_fp8", v.verifyLinearFP8}, {"fp8", v.verifyFP8},
		{"gemm", v.verifyGemm}, {"qk_norm", v.verifyQKNorm},
	}
	for _, m := range models {
		for _, c := range perModel {
			if v.wants(c.kernel) && v.dead == nil {
				c.check(m)
			}
		}
	}
	if v.wants("attention") {
		for _, a := range attentionShapes(models, v.long) {
			if v.dead == nil {
				v.verifyAttention(a)
			}
		}
	}
	// Op libraries' KV ops (the tabled form only): verify_oplib_kv.go.
	v.verifyLibKVSuite(models)
	if v.wants("decode_graph") && !v.set.Selection().UsesKVTable() { // else only the tabled step runs: verifyPagedDecodeGraph
		for _, m := range models {
			if supportedHeadDim(m.HeadDim) && v.dead == nil {
				v.verifyDecodeGraph(m)
			}
		}
	}
	v.verifyPagedAll(models)
	v.verifyMoEAll()
	if v.wants("add_i32") {
		v.verifyAddI32()
	}
	if v.wants("fill_dummy") {
		v.verifyFillDummy()
	}
	if v.wants("linear") {
		v.verifyLinearEdges()
	}
	if v.wants("linear_fp8") && v.dead == nil {
		v.verifyLinearFP8Edges()
	}
	if v.dead != nil && !errors.Is(v.dead, errStopped) {
		v.results = append(v.results, CheckResult{Check: "remaining checks", Err: ErrContextLost})
	}
	return v.results
}

// errStopped marks a run StopAtFirstFailure ended: the checks after the
// first failure are not run (not reported as failed).
var errStopped = errors.New("stopped at the first failure")

// StopAtFirstFailure makes VerifyAll run no check after the first that
// fails (the seeded-bug tests: one failure shows the bug caught).
func (v *Verifier) StopAtFirstFailure() { v.stopAtFailure = true }

// ErrContextLost marks the checks not run after a sticky CUDA error (a
// faulting kernel leaves the context unusable).
var ErrContextLost = errors.New("not run: a kernel fault above left the CUDA context unusable")

// VerifyKernelNames are the names Only accepts: one per kernel (attention
// covers decode and prefill, linear versions 2 and 3's kernels of gemv.cu),
// decode_graph for the replayed decode step, and paged for every check of
// the block table's kernels alone (their attention, rope_kv_write,
// gather_last, decode graph and kv_advance checks, the FP8 cache's
// included), paged_fp8 for the FP8 cache's alone (rope_kv_write 4,
// attn_prefill 5, attn_decode 7, their decode graph).
var VerifyKernelNames = []string{"embed", "add_rmsnorm", "silu_mul", "gather_last", "argmax", "rope_kv_write",
	"attention", "decode_graph", "add_i32", "fill_dummy", "argmax_keys", "linear", "linear_fp8", "fp8", "gemm", "kv_advance", "paged", "paged_fp8", "moe", "qk_norm"}

// Only restricts VerifyAll to the named kernels (VerifyKernelNames); with
// no names every kernel is checked. An unknown name is an error.
func (v *Verifier) Only(names ...string) error {
	for _, n := range names {
		if !slices.Contains(VerifyKernelNames, n) {
			return fmt.Errorf("verify: unknown kernel %q (want one of %s)", n, strings.Join(VerifyKernelNames, ", "))
		}
	}
	v.only = names
	return nil
}

// IncludeLong adds the shapes too slow for every run on the emulated
// device: attention over 1000-token prompts at batch 3.
func (v *Verifier) IncludeLong() { v.long = true }

func (v *Verifier) wants(kernel string) bool {
	return len(v.only) == 0 || slices.Contains(v.only, kernel)
}

func supportedHeadDim(d int) bool { return slices.Contains(kernels.SupportedHeadDims, d) }

// attentionShapes are edge cases (one split, many splits with a short last
// chunk, keys far below MaxSeq so most splits are empty, MHA at D=32 and 64,
// 8 query heads per kv head, cached prefixes in prefill) plus a decode and a prefill at each model's heads;
// long adds the slow prompt lengths (promptLengthShapes).
func attentionShapes(models []kernels.ModelShape, long bool) []kernels.AttnShape {
	shapes := []kernels.AttnShape{
		{Batch: 3, SeqLen: 1, StartPos: 37, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 64},
		{Batch: 2, SeqLen: 1, StartPos: 700, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 1024},
		{Batch: 1, SeqLen: 1, StartPos: 4095, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 4096},
		{Batch: 1, SeqLen: 1, StartPos: 5, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 4096},
		{Batch: 8, SeqLen: 1, StartPos: 1000, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 1100},
		{Batch: 2, SeqLen: 1, StartPos: 0, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 8},
		{Batch: 2, SeqLen: 1, StartPos: 300, Heads: 8, KVHeads: 8, HeadDim: 32, MaxSeq: 512},
		// The group bounds of the version 2+ decode kernels at their ends: MHA (1 query head per kv head) and 8.
		{Batch: 2, SeqLen: 1, StartPos: 300, Heads: 8, KVHeads: 8, HeadDim: 64, MaxSeq: 512},
		{Batch: 1, SeqLen: 1, StartPos: 777, Heads: 16, KVHeads: 2, HeadDim: 128, MaxSeq: 1024},
		{Batch: 2, SeqLen: 17, StartPos: 0, Heads: 4, KVHeads: 2, HeadDim: 64, MaxSeq: 32},
		{Batch: 1, SeqLen: 128, StartPos: 200, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 512},
		{Batch: 2, SeqLen: 70, StartPos: 5, Heads: 6, KVHeads: 3, HeadDim: 32, MaxSeq: 80},
		{Batch: 1, SeqLen: 128, StartPos: 0, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 128},
	}
	for _, m := range models {
		if !supportedHeadDim(m.HeadDim) {
			continue
		}
		shapes = append(shapes,
			kernels.AttnShape{Batch: 4, SeqLen: 1, StartPos: 1030, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, MaxSeq: 1056},
			kernels.AttnShape{Batch: 1, SeqLen: 200, StartPos: 0, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, MaxSeq: 232})
		if m.HeadDim == 128 { // Llama-3-8B's head shape (the slowest cases on the emulated device)
			shapes = append(shapes, promptLengthShapes(m.HeadDim, long)...)
		}
	}
	return shapes
}

// promptLengthShapes run the attention of prompts of 1, 7, 129 and 1000
// tokens at batch 1 and 3 (1000 at batch 3 only when long: about 3x the
// emulated time of batch 1) with head_dim d and 4 query heads per kv head
// (8 and 2: the per-head work of Llama-3-8B's 32 and 8).
func promptLengthShapes(d int, long bool) []kernels.AttnShape {
	var out []kernels.AttnShape
	cases := []struct{ batch, seq int }{{1, 1}, {3, 1}, {1, 7}, {3, 7}, {1, 129}, {3, 129}, {1, 1000}}
	if long {
		cases = append(cases, struct{ batch, seq int }{3, 1000})
	}
	for _, c := range cases {
		a := kernels.AttnShape{Batch: c.batch, SeqLen: c.seq, Heads: 8, KVHeads: 2, HeadDim: d, MaxSeq: 1032}
		if c.seq == 1 { // a decode step after a 1000-token prompt, and the first one
			a.StartPos = 1000 * (c.batch - 1) / 2
		}
		out = append(out, a)
	}
	return out
}

// record closes one check: a cuda error of the check wins over its comparison.
func (v *Verifier) record(check, shape string, relErr float64, exact bool, cmpErr error) {
	err := v.err
	v.err = nil
	if err == nil {
		err = cmpErr
	}
	if v.dead != nil { // the context is gone: nothing more to report or free
		v.allocs = nil
		return
	}
	res := CheckResult{Check: check, Shape: shape, RelErr: relErr, Exact: exact, Err: err, ModelBytes: v.modelBytes}
	v.modelBytes = 0
	if v.counters != nil {
		counters, cErr := v.counters.next()
		res.Counters = counters
		if cErr != nil && res.Err == nil {
			res.Err = cErr
		}
	}
	v.results = append(v.results, res)
	if cuda.IsSticky(err) {
		v.dead = err
		v.allocs = nil // frees would fail with the same error
		return
	}
	// Each check's memory is its own: free it now (errors of frees count too).
	if freeErr := v.Close(); freeErr != nil && err == nil {
		v.results[len(v.results)-1].Err = freeErr
	}
	if v.stopAtFailure && v.results[len(v.results)-1].Err != nil {
		v.dead = errStopped
	}
}

func (v *Verifier) fail(err error) {
	if v.err == nil && err != nil {
		v.err = err
	}
}

func (v *Verifier) alloc(bytes int) cuda.DevPtr {
	if v.err != nil {
		return 0
	}
	p, err := v.ctx.Alloc(max(bytes, 16))
	if err != nil {
		v.fail(err)
		return 0
	}
	v.allocs = append(v.allocs, p)
	return p
}

// upload copies raw bytes through pinned memory and waits.
func (v *Verifier) upload(dst cuda.DevPtr, src unsafe.Pointer, bytes int) {
	if v.err != nil || bytes == 0 {
		return
	}
	h, err := v.ctx.AllocHost(bytes)
	if err != nil {
		v.fail(err)
		return
	}
	copy(unsafe.Slice((*byte)(h.Ptr), bytes), unsafe.Slice((*byte)(src), bytes))
	v.fail(v.stream.CopyHtoD(dst, h.Ptr, bytes))
	v.fail(v.stream.Sync())
	v.fail(v.ctx.FreeHost(h))
}

func (v *Verifier) download(dst unsafe.Pointer, src cuda.DevPtr, bytes int) {
	if v.err != nil || bytes == 0 {
		return
	}
	v.fail(v.stream.Sync()) // surface launch errors before the copy
	h, err := v.ctx.AllocHost(bytes)
	if err != nil {
		v.fail(err)
		return
	}
	v.fail(v.stream.CopyDtoH(h.Ptr, src, bytes))
	v.fail(v.stream.Sync())
	copy(unsafe.Slice((*byte)(dst), bytes), unsafe.Slice((*byte)(h.Ptr), bytes))
	v.fail(v.ctx.FreeHost(h))
}

func (v *Verifier) bf16(data []uint16) cuda.DevPtr {
	p := v.alloc(2 * len(data))
	if len(data) > 0 {
		v.upload(p, unsafe.Pointer(&data[0]), 2*len(data))
	}
	return p
}

func (v *Verifier) f32(data []float32) cuda.DevPtr {
	p := v.alloc(4 * len(data))
	if len(data) > 0 {
		v.upload(p, unsafe.Pointer(&data[0]), 4*len(data))
	}
	return p
}

func (v *Verifier) i32(data []int32) cuda.DevPtr {
	p := v.alloc(4 * len(data))
	if len(data) > 0 {
		v.upload(p, unsafe.Pointer(&data[0]), 4*len(data))
	}
	return p
}

// poisoned allocates n bf16 filled with NaN.
func (v *Verifier) poisoned(n int) cuda.DevPtr {
	p := v.alloc(2 * n)
	if v.err == nil {
		v.fail(v.stream.Memset16(p, poisonBF16, n))
	}
	return p
}

func (v *Verifier) getBF16(p cuda.DevPtr, n int) []uint16 {
	out := make([]uint16, n)
	if n > 0 {
		v.download(unsafe.Pointer(&out[0]), p, 2*n)
	}
	return out
}

func (v *Verifier) getI32(p cuda.DevPtr, n int) []int32 {
	out := make([]int32, n)
	if n > 0 {
		v.download(unsafe.Pointer(&out[0]), p, 4*n)
	}
	return out
}

// launch runs a wrapper unless the check already failed.
func (v *Verifier) launch(f func() error) {
	if v.err == nil {
		v.fail(f())
	}
}

// RandomBF16 draws n bf16 values from N(mean, std²).
func RandomBF16(rng *rand.Rand, n int, mean, std float64) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = ref.F32ToBF16(float32(mean + std*rng.NormFloat64()))
	}
	return out
}

// closeBF16 compares within MaxRelErrBF16.
func closeBF16(got, want []uint16) (float64, error) {
	rel, err := ref.RelErrBF16(got, want)
	if err != nil {
		return rel, err
	}
	if rel > MaxRelErrBF16 {
		return rel, fmt.Errorf("relative error %.3g > %g", rel, MaxRelErrBF16)
	}
	return rel, nil
}

// equalBits reports the first element where got and want differ.
func equalBits[T comparable](got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("element %d = %v, want %v (first difference)", i, got[i], want[i])
		}
	}
	return nil
}

func (v *Verifier) verifyEmbed(m kernels.ModelShape) { v.embedAt(m, 37, 37) }

// embedAt checks embed over tokens ids (of the run's `of`, when capped).
func (v *Verifier) embedAt(m kernels.ModelShape, tokens, of int) {
	vocab := min(m.Vocab, 8192) // the row width is what matters; a full table is a gigabyte of draws
	table := RandomBF16(v.rng, vocab*m.Hidden, 0, 1)
	ids := make([]int32, tokens)
	for i := range ids {
		ids[i] = int32(v.rng.IntN(vocab))
	}
	ids[0], ids[tokens-1] = 0, int32(vocab-1) // both ends of the table
	want := make([]uint16, tokens*m.Hidden)
	ref.Embed(want, table, ids, m.Hidden)
	out := v.poisoned(tokens * m.Hidden)
	dTable, dIDs := v.bf16(table), v.i32(ids)
	v.launch(func() error { return v.set.Embed(v.stream, out, dTable, dIDs, tokens, m.Hidden) })
	v.modelBytes = costBytes("embed", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Embed(b(1), b(1), b(1), tokens, m.Hidden)
	})
	got := v.getBF16(out, tokens*m.Hidden)
	v.record("embed", fmt.Sprintf("%s %s hidden=%d", m.Name, strings.Replace(rowsLabel(tokens, of), "rows", "tokens", 1), m.Hidden), 0, true, equalBits(got, want))
}

func (v *Verifier) verifyAddRMSNorm(m kernels.ModelShape) {
	for _, rows := range []int{1, 5, 128} {
		for _, withAdd := range []bool{true, false} {
			v.addRMSNormAt(m, rows, withAdd, rows)
		}
	}
}

// addRMSNormAt checks add_rmsnorm over rows rows (of the run's `of`).
func (v *Verifier) addRMSNormAt(m kernels.ModelShape, rows int, withAdd bool, of int) {
	n := rows * m.Hidden
	residual := RandomBF16(v.rng, n, 0, 2)
	add := RandomBF16(v.rng, n, 0.5, 1)
	weight := RandomBF16(v.rng, m.Hidden, 1, 0.1)
	const eps = 1e-5
	wantOut := make([]uint16, n)
	wantRes := append([]uint16(nil), residual...)
	var refAdd []uint16
	addPtr := cuda.DevPtr(0)
	if withAdd {
		refAdd = add
		addPtr = v.bf16(add)
	}
	ref.AddRMSNorm(wantOut, wantRes, refAdd, weight, rows, m.Hidden, eps)
	out, res, w := v.poisoned(n), v.bf16(residual), v.bf16(weight)
	v.launch(func() error { return v.set.AddRMSNorm(v.stream, out, res, addPtr, w, rows, m.Hidden, eps) })
	v.modelBytes = costBytes("add_rmsnorm", func(be runner.Backend, b func(int) runner.Buffer) error {
		var addBuf runner.Buffer
		if withAdd {
			addBuf = b(1)
		}
		return be.AddRMSNorm(b(1), b(1), addBuf, b(1), rows, m.Hidden, eps)
	})
	gotOut, gotRes := v.getBF16(out, n), v.getBF16(res, n)
	shape := fmt.Sprintf("%s %s hidden=%d add=%v", m.Name, rowsLabel(rows, of), m.Hidden, withAdd)
	rel, err := closeBF16(gotOut, wantOut)
	// The residual sum is one bf16 rounding of exact inputs: bit-identical.
	if resErr := equalBits(gotRes, wantRes); resErr != nil {
		err = errors.Join(err, fmt.Errorf("residual: %w", resErr))
	}
	v.record("add_rmsnorm"+v.set.libLabel(OpNorm), shape, rel, false, err)
}

func (v *Verifier) verifySiluMul(m kernels.ModelShape) {
	for _, rows := range []int{1, 64} {
		v.siluMulAt(m, rows, rows)
	}
}

// siluMulAt checks silu_mul over rows rows (of the run's `of`).
func (v *Verifier) siluMulAt(m kernels.ModelShape, rows, of int) {
	gateUp := RandomBF16(v.rng, rows*2*m.Inter, 0, 2)
	want := make([]uint16, rows*m.Inter)
	ref.SiluMul(want, gateUp, rows, m.Inter)
	out, dGateUp := v.poisoned(rows*m.Inter), v.bf16(gateUp)
	v.launch(func() error { return v.set.SiluMul(v.stream, out, dGateUp, rows, m.Inter) })
	v.modelBytes = costBytes("silu_mul", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.SiluMul(b(1), b(1), rows, m.Inter)
	})
	rel, err := closeBF16(v.getBF16(out, rows*m.Inter), want)
	v.record("silu_mul"+v.set.libLabel(OpSiluMul), fmt.Sprintf("%s %s inter=%d", m.Name, rowsLabel(rows, of), m.Inter), rel, false, err)
}

func (v *Verifier) verifyGatherLast(m kernels.ModelShape) {
	for _, width := range []int{m.Hidden, m.Vocab} {
		v.gatherLastAt(m, 3, 19, width)
	}
}

// gatherLastAt checks gather_last of batch sequences of seqLen rows.
func (v *Verifier) gatherLastAt(m kernels.ModelShape, batch, seqLen, width int) {
	in := RandomBF16(v.rng, batch*seqLen*width, 0, 1)
	want := make([]uint16, batch*width)
	ref.GatherLast(want, in, batch, seqLen, width)
	out, dIn := v.poisoned(batch*width), v.bf16(in)
	v.launch(func() error { return v.set.GatherLast(v.stream, out, dIn, batch, seqLen, width) })
	v.modelBytes = costBytes("gather_last", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.GatherLast(b(1), b(1), batch, seqLen, width)
	})
	err := equalBits(v.getBF16(out, batch*width), want)
	v.record("gather_last", fmt.Sprintf("%s batch=%d seq=%d width=%d", m.Name, batch, seqLen, width), 0, true, err)
}

func (v *Verifier) verifyArgmax(m kernels.ModelShape) {
	const rows = 6
	logits := RandomBF16(v.rng, rows*m.Vocab, 0, 3)
	row := func(r int) []uint16 { return logits[r*m.Vocab : (r+1)*m.Vocab] }
	const nan, bigValue = 0x7fc0, 0x4300 // 128.0 beats every N(0, 9) draw
	// Row 1: a tie at the max; the first index must win.
	row(1)[m.Vocab-2], row(1)[m.Vocab/3] = bigValue, bigValue
	// Row 2: NaN everywhere but one element; NaN never wins.
	for i := range row(2) {
		row(2)[i] = nan
	}
	row(2)[m.Vocab/2] = ref.F32ToBF16(-5)
	// Row 3: all NaN → 0, as the reference.
	for i := range row(3) {
		row(3)[i] = poisonBF16
	}
	// Row 4: max in the last element, a NaN in front of it.
	row(4)[m.Vocab-1], row(4)[0] = bigValue, nan
	want := make([]int32, rows)
	ref.Argmax(want, logits, rows, m.Vocab)
	for _, ver := range v.versions(kernels.OpArgmax) {
		set := v.pinned(kernels.OpArgmax, ver)
		if _, err := set.Selection().ArgmaxVersion(m.Vocab); err != nil {
			continue // this version does not take the shape
		}
		got := v.runArgmax(set, logits, rows, m.Vocab)
		v.record(v.checkName(kernels.OpArgmax, "argmax", ver), fmt.Sprintf("%s rows=%d vocab=%d", m.Name, rows, m.Vocab), 0, true, equalBits(got, want))
	}
}

// runArgmax launches one argmax version on logits (the output poisoned
// first) and returns its indices.
func (v *Verifier) runArgmax(set *Kernels, logits []uint16, rows, vocab int) []int32 {
	out, dLogits := v.alloc(4*rows), v.bf16(logits)
	wsBytes := kernels.ArgmaxWorkspaceBytes(rows, vocab)
	ws := v.alloc(wsBytes)
	if v.err == nil {
		v.fail(v.stream.Memset32(out, 0xFFFFFFFF, rows))
	}
	v.launch(func() error { return set.Argmax(v.stream, out, dLogits, ws, wsBytes, rows, vocab) })
	v.modelBytes = costBytes("argmax", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Argmax(b(1), b(1), rows, vocab)
	})
	return v.getI32(out, rows)
}

// versions are the versions of op to check on a bf16 cache: the one the
// selection pins, or all; one (whichever) when an op library runs op
// instead. The FP8 cache's versions are never among them (fp8Version).
func (v *Verifier) versions(op string) []int {
	if ver, ok := v.set.Selection().Chosen(op); ok {
		if ver == kernels.FP8Version(op) {
			return nil
		}
		return []int{ver}
	}
	if v.set.Replaces(op) {
		return kernels.Versions(op)[len(kernels.Versions(op))-1:]
	}
	return slices.DeleteFunc(kernels.Versions(op), func(ver int) bool { return ver == kernels.FP8Version(op) })
}

// fp8Version is the FP8 cache's version of op to check, 0 when the
// selection pins another.
func (v *Verifier) fp8Version(op string) int {
	if ver, ok := v.set.Selection().Chosen(op); ok && ver != kernels.FP8Version(op) {
		return 0
	}
	return kernels.FP8Version(op)
}

// checkName names a check of op: "argmax v2", or with the op library that
// runs op instead, "argmax [op library libargmax.so]".
func (v *Verifier) checkName(op, check string, ver int) string {
	if v.set.Replaces(op) {
		return check + v.set.libLabel(op)
	}
	return versioned(check, ver)
}

// pinned is the verifier's kernels with op pinned to version ver.
func (v *Verifier) pinned(op string, ver int) *Kernels {
	sel := kernels.Selection{}
	for k, x := range v.set.Selection() {
		sel[k] = x
	}
	sel[op] = ver
	return v.set.With(sel)
}

// versioned names a check of one kernel version, "argmax v2".
func versioned(check string, ver int) string { return fmt.Sprintf("%s v%d", check, ver) }

func (v *Verifier) verifyRope(m kernels.ModelShape) {
	for _, ver := range v.versions(kernels.OpRope) {
		set := v.pinned(kernels.OpRope, ver)
		if _, err := set.Selection().RopeVersion(m.HeadDim); err != nil || ver == kernels.RopeTabledVersion {
			continue // this version does not take the shape (the table's: verifyPagedRopes)
		}
		for _, a := range []kernels.AttnShape{
			{Batch: 2, SeqLen: 9, StartPos: 0, MaxSeq: 32},
			{Batch: 3, SeqLen: 1, StartPos: 4000, MaxSeq: 4100},
			{Batch: 1, SeqLen: 128, StartPos: 300, MaxSeq: 512},
		} {
			a.Heads, a.KVHeads, a.HeadDim = m.Heads, m.KVHeads, m.HeadDim
			if v.libRopeAt(m, a) { // an op library's: the tabled form
				continue
			}
			v.verifyRopeAt(set, v.checkName(kernels.OpRope, "rope_kv_write", ver), m, a)
		}
	}
}

// verifyRopeAt checks one RoPE version at one shape: q, the written cache
// rows, and every other cache row untouched.
func (v *Verifier) verifyRopeAt(set *Kernels, check string, m kernels.ModelShape, a kernels.AttnShape) {
	shape := fmt.Sprintf("%s %s", m.Name, FormatShape(a))
	tokens := a.Batch * a.SeqLen
	qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	qkv := RandomBF16(v.rng, tokens*(qWidth+2*kvWidth), 0, 1)
	invFreq := ref.RopeInvFreq(a.HeadDim, m.RopeTheta, nil)
	cacheLen := a.Batch * a.MaxSeq * kvWidth
	kCache, vCache := RandomBF16(v.rng, cacheLen, 0, 1), RandomBF16(v.rng, cacheLen, 0, 1)
	dK, dV := v.bf16(kCache), v.bf16(vCache)
	// Poison exactly the cache rows the kernel must write.
	for b := 0; b < a.Batch && v.err == nil; b++ {
		at := (b*a.MaxSeq + a.StartPos) * kvWidth
		v.fail(v.stream.Memset16(dK+cuda.DevPtr(2*at), poisonBF16, a.SeqLen*kvWidth))
		v.fail(v.stream.Memset16(dV+cuda.DevPtr(2*at), poisonBF16, a.SeqLen*kvWidth))
	}
	wantQ := make([]uint16, tokens*qWidth)
	ref.RopeKVWrite(wantQ, kCache, vCache, qkv, invFreq, a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
	q, dQKV, dFreq, pos := v.poisoned(tokens*qWidth), v.bf16(qkv), v.f32(invFreq), v.i32([]int32{int32(a.StartPos)})
	v.launch(func() error { return set.RopeKVWrite(v.stream, q, dK, dV, dQKV, dFreq, KVPtrs{Pos: pos}, a) })
	v.modelBytes = costBytes("rope_kv_write", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.RopeKVWrite(b(1), b(1), b(1), b(1), b(1), runner.KVView{Pos: b(1)}, a)
	})
	rel, err := closeBF16(v.getBF16(q, tokens*qWidth), wantQ)
	gotK, gotV := v.getBF16(dK, cacheLen), v.getBF16(dV, cacheLen)
	for b := 0; b < a.Batch; b++ {
		lo, hi := (b*a.MaxSeq+a.StartPos)*kvWidth, (b*a.MaxSeq+a.StartPos+a.SeqLen)*kvWidth
		kRel, kErr := closeBF16(gotK[lo:hi], kCache[lo:hi])
		rel = max(rel, kRel)
		if kErr != nil {
			err = errors.Join(err, fmt.Errorf("k rows of batch %d: %w", b, kErr))
		}
		if vErr := equalBits(gotV[lo:hi], vCache[lo:hi]); vErr != nil {
			err = errors.Join(err, fmt.Errorf("v rows of batch %d: %w", b, vErr))
		}
	}
	// Every other cache row stays as it was.
	if e := equalBits(maskRows(gotK, a), maskRows(kCache, a)); e != nil {
		err = errors.Join(err, fmt.Errorf("k cache outside the written rows: %w", e))
	}
	if e := equalBits(maskRows(gotV, a), maskRows(vCache, a)); e != nil {
		err = errors.Join(err, fmt.Errorf("v cache outside the written rows: %w", e))
	}
	v.record(check, shape, rel, false, err)
}

// FormatShape prints an attention shape compactly for tables.
func FormatShape(a kernels.AttnShape) string {
	return fmt.Sprintf("b=%d s=%d pos=%d h=%d kv=%d d=%d max=%d", a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
}

// maskRows zeroes the rows RopeKVWrite writes, leaving those it must not touch.
func maskRows(cache []uint16, a kernels.AttnShape) []uint16 {
	out := append([]uint16(nil), cache...)
	kvWidth := a.KVHeads * a.HeadDim
	for b := 0; b < a.Batch; b++ {
		clear(out[(b*a.MaxSeq+a.StartPos)*kvWidth : (b*a.MaxSeq+a.StartPos+a.SeqLen)*kvWidth])
	}
	return out
}

func (v *Verifier) verifyAttention(a kernels.AttnShape) {
	if v.libAttentionAt(a) { // an op library's: the tabled form
		return
	}
	op, name := kernels.OpAttnDecode, "attention decode"
	if a.SeqLen > 1 {
		op, name = kernels.OpAttnPrefill, "attention prefill"
	}
	var in *attentionCase
	outs := map[int][]uint16{}
	for _, ver := range v.versions(op) {
		if ver == kernels.TabledVersion(op) {
			continue // the block table's: verifyPagedAttentions
		}
		set := v.pinned(op, ver)
		var supported error
		if op == kernels.OpAttnPrefill {
			_, supported = set.Selection().PrefillVersion(a)
		} else {
			_, supported = set.Selection().DecodeVersion(a)
		}
		if supported != nil {
			continue
		}
		if in == nil { // inputs and the reference, shared by the versions
			in = v.newAttentionCase(a)
		}
		if kernels.DecodeFusesRope(ver) && op == kernels.OpAttnDecode && !v.set.Replaces(op) && !v.set.Replaces(kernels.OpRope) {
			v.verifyRopeAttentionAt(v.checkName(op, name, ver), in) // the rope fused in: its own check
			continue
		}
		// Version 3 of either op is version 2's sums in version 2's order
		// (decode: the combine moved into the last block; prefill: a tile
		// that masks a row whole adds exact zeros): the same bits. An op
		// library is held to the bound only.
		var sameAs []uint16
		if ver == 3 && !v.set.Replaces(op) {
			sameAs = outs[2]
		}
		outs[ver] = v.verifyAttentionAt(set, v.checkName(op, name, ver), in, sameAs)
	}
}

// attentionCase is one attention shape's random inputs and reference output.
type attentionCase struct {
	a                 kernels.AttnShape
	q, kCache, vCache []uint16
	want              []uint16
}

func (v *Verifier) newAttentionCase(a kernels.AttnShape) *attentionCase {
	c := v.drawAttentionInputs(a)
	ref.Attention(c.want, c.q, c.kCache, c.vCache, a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
	return c
}

// drawAttentionInputs draws a case's q and caches; want is left to fill.
func (v *Verifier) drawAttentionInputs(a kernels.AttnShape) *attentionCase {
	tokens := a.Batch * a.SeqLen
	qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	return &attentionCase{a: a, q: RandomBF16(v.rng, tokens*qWidth, 0, 1),
		kCache: RandomBF16(v.rng, a.Batch*a.MaxSeq*kvWidth, 0, 1), vCache: RandomBF16(v.rng, a.Batch*a.MaxSeq*kvWidth, 0, 1),
		want: make([]uint16, tokens*qWidth)}
}

// verifyAttentionAt checks one attention version at one case, and that
// its output has the bits of sameAs when that is set, and returns it.
func (v *Verifier) verifyAttentionAt(set *Kernels, check string, c *attentionCase, sameAs []uint16) []uint16 {
	got := v.runAttention(set, c)
	rel, err := closeBF16(got, c.want)
	if sameAs != nil {
		if e := equalBits(got, sameAs); e != nil {
			err = errors.Join(err, fmt.Errorf("not bit-identical to version 2: %w", e))
		}
	}
	v.record(check, FormatShape(c.a), rel, false, err)
	return got
}

// runAttention launches one attention version on c's inputs (output
// poisoned first) and returns its output.
func (v *Verifier) runAttention(set *Kernels, c *attentionCase) []uint16 {
	a := c.a
	wsBytes := set.AttentionWorkspaceBytes(a)
	var ws cuda.DevPtr
	if wsBytes > 0 {
		ws = v.alloc(wsBytes)
		v.launch(func() error { return set.ZeroAttentionWorkspace(v.stream, ws, wsBytes) })
	}
	out := v.poisoned(len(c.want))
	dQ, dK, dV, pos := v.bf16(c.q), v.bf16(c.kCache), v.bf16(c.vCache), v.i32([]int32{int32(a.StartPos)})
	v.launch(func() error { return set.Attention(v.stream, out, dQ, dK, dV, KVPtrs{Pos: pos}, ws, wsBytes, a) })
	v.modelBytes = costBytes("attention", func(be runner.Backend, b func(int) runner.Buffer) error {
		return be.Attention(b(1), b(1), b(1), b(1), runner.KVView{Pos: b(1)}, a)
	})
	return v.getBF16(out, len(c.want))
}

// verifyDecodeGraph captures one decode step (rope_kv_write, attention,
// add_i32 on the position) into a CUDA graph at position start and replays
// it at the following positions, as the cuda backend does: each replay must
// match the reference at its own position.
func (v *Verifier) verifyDecodeGraph(m kernels.ModelShape) {
	const batch, start, replays = 2, 60, 70 // replays cross a 64-key chunk boundary
	v.decodeGraphAt(m, batch, start, replays, start+replays+1, nil)
}

// decodeGraphAt captures a decode step of batch sequences at position start
// (caches of maxSeq positions) and replays it replays times, comparing the
// replays at the positions compareAt lists (nil: every replay).
func (v *Verifier) decodeGraphAt(m kernels.ModelShape, batch, start, replays, maxSeq int, compareAt []int) {
	if v.libDecodeGraphAt(m, batch, start, replays, maxSeq, compareAt) { // op libraries': the tabled form
		return
	}
	a := kernels.AttnShape{Batch: batch, SeqLen: 1, StartPos: start, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, MaxSeq: maxSeq}
	qWidth, kvWidth := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	cacheLen := batch * a.MaxSeq * kvWidth
	kCache, vCache := RandomBF16(v.rng, cacheLen, 0, 1), RandomBF16(v.rng, cacheLen, 0, 1)
	qkv := RandomBF16(v.rng, batch*(qWidth+2*kvWidth), 0, 1)
	invFreq := ref.RopeInvFreq(a.HeadDim, m.RopeTheta, nil)
	dK, dV, dQKV, dFreq := v.bf16(kCache), v.bf16(vCache), v.bf16(qkv), v.f32(invFreq)
	pos := v.i32([]int32{int32(start)})
	q, out := v.alloc(2*batch*qWidth), v.alloc(2*batch*qWidth)
	wsBytes := v.set.AttentionWorkspaceBytes(a)
	ws := v.alloc(wsBytes)
	v.launch(func() error { return v.set.ZeroAttentionWorkspace(v.stream, ws, wsBytes) })
	shape := fmt.Sprintf("%s b=%d pos=%d..%d max=%d", m.Name, batch, start, start+replays-1, a.MaxSeq)

	// attn_decode version 5 (chosen) replays its fused rope + attention:
	// each replay must pick the writer of the new key from pos anew.
	check, fused := "decode graph replay", v.set.FusesRope(a)
	if fused {
		check += " (rope fused, attn_decode v5)"
	}
	step := func() error {
		if fused {
			if err := v.set.RopeAttention(v.stream, out, dQKV, dK, dV, dFreq, KVPtrs{Pos: pos}, ws, wsBytes, a); err != nil {
				return err
			}
			return v.set.AddI32(v.stream, pos, 1, 1)
		}
		if err := v.set.RopeKVWrite(v.stream, q, dK, dV, dQKV, dFreq, KVPtrs{Pos: pos}, a); err != nil {
			return err
		}
		if err := v.set.Attention(v.stream, out, q, dK, dV, KVPtrs{Pos: pos}, ws, wsBytes, a); err != nil {
			return err
		}
		return v.set.AddI32(v.stream, pos, 1, 1)
	}
	// One eager step first, as the cuda backend does: with lazy module
	// loading, drivers before 12.3 cannot load a kernel inside a capture. Its
	// cache writes at position start are the ones the first replay repeats;
	// the position goes back to start afterwards.
	v.launch(step)
	if v.err == nil {
		v.fail(v.stream.Memset32(pos, uint32(start), 1))
	}
	var exec *cuda.GraphExec
	if v.err == nil {
		exec = v.captureStep(step)
	}
	var worst float64
	var cmpErr error
	wantQ, want := make([]uint16, batch*qWidth), make([]uint16, batch*qWidth)
	for p := start; p < start+replays && v.err == nil && cmpErr == nil; p++ {
		if v.err == nil {
			v.fail(v.stream.Memset16(out, poisonBF16, batch*qWidth))
		}
		v.launch(func() error { return exec.Launch(v.stream) })
		ref.RopeKVWrite(wantQ, kCache, vCache, qkv, invFreq, batch, 1, p, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
		if compareAt != nil && !slices.Contains(compareAt, p) {
			continue
		}
		ref.Attention(want, wantQ, kCache, vCache, batch, 1, p, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq)
		rel, err := closeBF16(v.getBF16(out, batch*qWidth), want)
		worst = max(worst, rel)
		if err != nil {
			cmpErr = fmt.Errorf("replay at position %d: %w", p, err)
		}
	}
	if exec != nil {
		v.fail(exec.Destroy())
	}
	v.record(check, shape, worst, false, cmpErr)
}

// captureStep records enqueue into a graph on the verifier's stream.
func (v *Verifier) captureStep(enqueue func() error) *cuda.GraphExec {
	if err := v.stream.BeginCapture(); err != nil {
		v.fail(err)
		return nil
	}
	runErr := enqueue()
	g, endErr := v.stream.EndCapture()
	if err := errors.Join(runErr, endErr); err != nil {
		if g != nil {
			_ = g.Destroy()
		}
		v.fail(fmt.Errorf("capture: %w", err))
		return nil
	}
	exec, err := g.Instantiate()
	v.fail(errors.Join(err, g.Destroy()))
	return exec
}

func (v *Verifier) verifyAddI32() {
	const n = 1000
	in := make([]int32, n)
	for i := range in {
		in[i] = int32(v.rng.IntN(1<<20)) - 1<<19
	}
	buf := v.i32(in)
	v.launch(func() error { return v.set.AddI32(v.stream, buf, n, -7) })
	want := append([]int32(nil), in...)
	ref.AddI32(want, -7)
	v.record("add_i32", fmt.Sprintf("n=%d delta=-7", n), 0, true, equalBits(v.getI32(buf, n), want))
}

func (v *Verifier) verifyFillDummy() {
	const name = "model.layers.0.mlp.down_proj.weight"
	key := ref.DummyKey(42, name)
	// Contiguous ranges (one row of n), and a column block: 37 rows of 1000
	// elements taken 4096 apart, as a row-parallel rank's slice.
	for _, c := range []struct {
		rows, cols int
		first      uint64
		rowStride  uint64
	}{{1, 100_003, 0, 0}, {1, 100_003, 12345, 0}, {1, 100_003, 1 << 33, 0}, {37, 1000, 123, 4096}} {
		for _, kind := range []ref.DummyKind{ref.DummyUniform, ref.DummyOnes} {
			n := c.rows * c.cols
			want := make([]uint16, n)
			ref.FillDummyRows(want, c.cols, 42, name, c.first, c.rowStride, kind)
			dst := v.poisoned(n)
			v.launch(func() error { return v.set.FillDummy(v.stream, dst, n, c.cols, key, c.first, c.rowStride, kind) })
			err := equalBits(v.getBF16(dst, n), want)
			v.record("fill_dummy", fmt.Sprintf("rows=%d cols=%d first=%d stride=%d kind=%d", c.rows, c.cols, c.first, c.rowStride, kind), 0, true, err)
		}
	}
}
