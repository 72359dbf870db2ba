package kernels

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"stepbench/cuda"
	"stepbench/kernels/ref"
)

// kernelSources says which source file defines each entry point.
var kernelSources = map[string]string{
	"embed":                  "copy.cu",
	"gather_last":            "copy.cu",
	"add_i32":                "copy.cu",
	"add_rmsnorm":            "norm.cu",
	"rope_kv_write":          "rope.cu",
	"silu_mul":               "activation.cu",
	"argmax":                 "sample.cu",
	"fill_dummy":             "dummy.cu",
	"attn_decode_combine":    "attention.cu",
	"attn_decode_split_d32":  "attention.cu",
	"attn_decode_split_d64":  "attention.cu",
	"attn_decode_split_d128": "attention.cu",
	"attn_prefill_d32":       "attention.cu",
	"attn_prefill_d64":       "attention.cu",
	"attn_prefill_d128":      "attention.cu",
}

// SupportedHeadDims are the head dimensions the attention kernels are built for.
var SupportedHeadDims = []int{32, 64, 128}

const (
	// defaultSharedLimitBytes is what a block may use without opting in.
	defaultSharedLimitBytes = 48 * 1024

	decodeThreads       = 128 // attn_decode_split's __launch_bounds__
	decodeMinChunkKeys  = 64
	decodeMaxChunkKeys  = 256
	decodeBlocksPerSM   = 2 // splits aim at this many blocks per SM
	prefillThreads      = 256
	prefillQueryTile    = 64 // PF_BQ in attention.cu
	prefillKeyTile      = 32 // PF_BK in attention.cu
	maxGridYZ           = 65535
	gridStrideBlocksPer = 32 // grid-stride kernels launch at most this many blocks per SM
)

// AttnShape describes one attention call over the KV cache; it has the same
// fields as runner.AttnShape, so one converts to the other. Every sequence
// holds StartPos cached tokens and brings SeqLen new ones: token (b, s) sits
// at position StartPos+s and row b*SeqLen+s of the activations. The cache of
// one layer is [Batch][MaxSeq][KVHeads][HeadDim].
type AttnShape struct {
	Batch, SeqLen, StartPos int
	Heads, KVHeads, HeadDim int
	MaxSeq                  int
}

// Set is the loaded kernels of one context. Its methods enqueue on the given
// stream; like every cuda call they must come from the context's goroutine.
type Set struct {
	modules []*cuda.Module
	smCount int

	embed, gatherLast, addRMSNorm, ropeKVWrite *cuda.Function
	siluMul, argmax, fillDummy, decodeCombine  *cuda.Function
	addI32                                     *cuda.Function
	decodeSplit, prefill                       map[int]*cuda.Function // by head dim
}

// Load loads the compiled modules into ctx and looks up every kernel. smCount
// (the device's multiprocessor count) sizes grids and attention splits.
func Load(ctx *cuda.Context, compiled []Compiled, smCount int) (*Set, error) {
	if smCount < 1 {
		return nil, fmt.Errorf("load kernels: SM count %d < 1", smCount)
	}
	k := &Set{smCount: smCount, decodeSplit: map[int]*cuda.Function{}, prefill: map[int]*cuda.Function{}}
	byFile := map[string]*cuda.Module{}
	for _, c := range compiled {
		m, err := ctx.LoadModule(c.Cubin)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("load kernels from %s: %w", c.Name, err), k.Close())
		}
		k.modules = append(k.modules, m)
		byFile[c.Name] = m
	}
	fn := func(name string) (*cuda.Function, error) {
		file := kernelSources[name]
		m, ok := byFile[file]
		if !ok {
			return nil, fmt.Errorf("load kernel %s: no compiled %s", name, file)
		}
		f, err := m.Function(name)
		if err != nil {
			return nil, fmt.Errorf("load kernel %s from %s: %w", name, file, err)
		}
		return f, nil
	}
	var errs []error
	get := func(dst **cuda.Function, name string) {
		f, err := fn(name)
		errs = append(errs, err)
		*dst = f
	}
	get(&k.embed, "embed")
	get(&k.gatherLast, "gather_last")
	get(&k.addI32, "add_i32")
	get(&k.addRMSNorm, "add_rmsnorm")
	get(&k.ropeKVWrite, "rope_kv_write")
	get(&k.siluMul, "silu_mul")
	get(&k.argmax, "argmax")
	get(&k.fillDummy, "fill_dummy")
	get(&k.decodeCombine, "attn_decode_combine")
	for _, d := range SupportedHeadDims {
		var split, pre *cuda.Function
		get(&split, fmt.Sprintf("attn_decode_split_d%d", d))
		get(&pre, fmt.Sprintf("attn_prefill_d%d", d))
		k.decodeSplit[d], k.prefill[d] = split, pre
		if pre != nil && prefillSharedBytes(d) > defaultSharedLimitBytes {
			if err := pre.SetMaxDynamicShared(prefillSharedBytes(d)); err != nil {
				errs = append(errs, fmt.Errorf("load kernel attn_prefill_d%d: %w", d, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, k.Close())
	}
	return k, nil
}

// Close unloads the modules.
func (k *Set) Close() error {
	var errs []error
	for _, m := range k.modules {
		errs = append(errs, m.Unload())
	}
	k.modules = nil
	return errors.Join(errs...)
}

// argCheck collects every problem with one op's arguments.
type argCheck struct {
	op   string
	errs []string
}

func (c *argCheck) require(ok bool, format string, args ...any) {
	if !ok {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
}

func (c *argCheck) positive(name string, v int) {
	c.require(v > 0 && v <= math.MaxInt32, "%s = %d, want 1..%d", name, v, math.MaxInt32)
}

func (c *argCheck) count(name string, v int) {
	c.require(v >= 0 && v <= math.MaxInt32, "%s = %d, want 0..%d", name, v, math.MaxInt32)
}

// pointer checks p is set and aligned to alignBytes (what its loads need).
func (c *argCheck) pointer(name string, p cuda.DevPtr, alignBytes int) {
	c.require(p != 0, "%s is a null pointer", name)
	c.require(uint64(p)%uint64(alignBytes) == 0, "%s = %#x is not %d-byte aligned", name, uint64(p), alignBytes)
}

func (c *argCheck) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", c.op, strings.Join(c.errs, "; "))
}

func (k *Set) launch(s *cuda.Stream, op string, f *cuda.Function, grid, block cuda.Dim3, sharedBytes int, args ...any) error {
	if err := s.Launch(f, grid, block, sharedBytes, args...); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// threadsFor is a block size for n work items: a multiple of 32 in [32, maxThreads].
func threadsFor(n, maxThreads int) uint32 {
	return uint32(min(max(ceilDiv(n, 32)*32, 32), maxThreads))
}

// gridStrideBlocks caps a grid-stride kernel's grid at a few waves.
func (k *Set) gridStrideBlocks(items, threads int) uint32 {
	return uint32(max(1, min(ceilDiv(items, threads), k.smCount*gridStrideBlocksPer)))
}

// aligned16 reports whether 8-element (16-byte) vector access is possible.
func aligned16(width int, ptrs ...cuda.DevPtr) bool {
	if width%8 != 0 {
		return false
	}
	for _, p := range ptrs {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

func flag(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// Embed: out[t, :] = table[ids[t], :] for t < tokens (ids int32; in range is
// the caller's duty). hidden % 8 == 0, pointers 16-byte aligned.
func (k *Set) Embed(s *cuda.Stream, out, table, ids cuda.DevPtr, tokens, hidden int) error {
	c := argCheck{op: "embed"}
	c.count("tokens", tokens)
	c.positive("hidden", hidden)
	c.require(hidden%8 == 0, "hidden = %d is not a multiple of 8", hidden)
	c.pointer("out", out, 16)
	c.pointer("table", table, 16)
	c.pointer("ids", ids, 4)
	if err := c.err(); err != nil || tokens == 0 {
		return err
	}
	return k.launch(s, c.op, k.embed, cuda.Dim3{X: uint32(tokens), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(hidden/8, 256), Y: 1, Z: 1}, 0,
		out, table, ids, int32(tokens), int32(hidden))
}

// AddRMSNorm: residual += add (when add != 0, rounded to bf16 and written
// back), then out = bf16(weight * bf16(residual * rsqrt(mean(residual²) + eps))).
// hidden % 8 == 0, pointers 16-byte aligned.
func (k *Set) AddRMSNorm(s *cuda.Stream, out, residual, add, weight cuda.DevPtr, rows, hidden int, eps float32) error {
	c := argCheck{op: "add_rmsnorm"}
	c.count("rows", rows)
	c.positive("hidden", hidden)
	c.require(hidden%8 == 0, "hidden = %d is not a multiple of 8", hidden)
	c.require(eps >= 0 && !math.IsInf(float64(eps), 0), "eps = %g, want finite and >= 0", eps)
	c.pointer("out", out, 16)
	c.pointer("residual", residual, 16)
	c.pointer("weight", weight, 16)
	c.require(add%16 == 0, "add = %#x is not 16-byte aligned", uint64(add))
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	return k.launch(s, c.op, k.addRMSNorm, cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(hidden/8, 1024), Y: 1, Z: 1}, 0,
		out, residual, add, weight, int32(rows), int32(hidden), eps)
}

// checkAttnShape checks what both RoPE and attention need of a shape.
func checkAttnShape(c *argCheck, a AttnShape) {
	c.count("batch", a.Batch)
	c.count("seqLen", a.SeqLen)
	c.count("startPos", a.StartPos)
	c.positive("heads", a.Heads)
	c.positive("kvHeads", a.KVHeads)
	c.positive("headDim", a.HeadDim)
	c.positive("maxSeq", a.MaxSeq)
	c.require(a.KVHeads > 0 && a.Heads%a.KVHeads == 0, "heads = %d is not a multiple of kvHeads = %d", a.Heads, a.KVHeads)
	c.require(a.StartPos+a.SeqLen <= a.MaxSeq, "startPos %d + seqLen %d > maxSeq %d", a.StartPos, a.SeqLen, a.MaxSeq)
	c.require(a.Batch <= maxGridYZ, "batch = %d > %d", a.Batch, maxGridYZ)
	// Element offsets are 64-bit in the kernels, but token rows index the grid.
	c.require(int64(a.Batch)*int64(a.SeqLen) <= math.MaxInt32, "batch*seqLen = %d too large", int64(a.Batch)*int64(a.SeqLen))
}

// RopeKVWrite rotates q and k of each qkv row [T, (heads+2*kvHeads)*headDim]
// (rotate-half RoPE at position startPos+s, invFreq float32 [headDim/2]),
// writes rotated q to q [T, heads*headDim] and rotated k and raw v to the
// caches at (b, startPos+s). headDim even and <= 256.
//
// The kernel reads startPos from pos (one int32 in device memory), so that a
// captured decode step replays at every position; a.StartPos is the caller's
// expectation, used only for the argument checks. Rows whose position would
// fall outside the cache are not written.
func (k *Set) RopeKVWrite(s *cuda.Stream, q, kCache, vCache, qkv, invFreq, pos cuda.DevPtr, a AttnShape) error {
	c := argCheck{op: "rope_kv_write"}
	checkAttnShape(&c, a)
	c.require(a.HeadDim%2 == 0 && a.HeadDim <= 256, "headDim = %d, want even and <= 256", a.HeadDim)
	c.pointer("q", q, 2)
	c.pointer("kCache", kCache, 2)
	c.pointer("vCache", vCache, 2)
	c.pointer("qkv", qkv, 2)
	c.pointer("invFreq", invFreq, 4)
	c.pointer("pos", pos, 4)
	tokens := a.Batch * a.SeqLen
	if err := c.err(); err != nil || tokens == 0 {
		return err
	}
	return k.launch(s, c.op, k.ropeKVWrite, cuda.Dim3{X: uint32(tokens), Y: 1, Z: 1},
		cuda.Dim3{X: 128, Y: 1, Z: 1}, 0,
		q, kCache, vCache, qkv, invFreq, pos, int32(a.Batch), int32(a.SeqLen),
		int32(a.Heads), int32(a.KVHeads), int32(a.HeadDim), int32(a.MaxSeq))
}

// decodePlan splits the cache's MaxSeq positions into chunks so that
// batch*kvHeads*splits blocks fill the GPU about decodeBlocksPerSM times,
// with chunks of 64..256 keys (a multiple of 32). The plan depends on MaxSeq,
// not StartPos: a decode step captured in a CUDA graph keeps its grid at
// every position, and the blocks of splits beyond the current keys exit at
// once (the combine skips them).
func decodePlan(a AttnShape, smCount int) (chunkKeys, splits int) {
	keys := max(a.MaxSeq, 1)
	want := max(1, ceilDiv(decodeBlocksPerSM*smCount, max(1, a.Batch*a.KVHeads)))
	chunkKeys = min(max(ceilDiv(ceilDiv(keys, want), 32)*32, decodeMinChunkKeys), decodeMaxChunkKeys)
	return chunkKeys, ceilDiv(keys, chunkKeys)
}

// AttentionWorkspaceBytes is the float32 workspace Attention needs for shape
// a on a GPU with smCount SMs: zero for prefill (SeqLen > 1); for decode it
// depends on Batch, Heads, KVHeads, HeadDim and MaxSeq, never on StartPos.
func AttentionWorkspaceBytes(a AttnShape, smCount int) int {
	if a.SeqLen != 1 || a.Batch <= 0 || a.Heads <= 0 || a.HeadDim <= 0 {
		return 0
	}
	_, splits := decodePlan(a, smCount)
	return a.Batch * a.Heads * splits * (a.HeadDim + 2) * 4
}

// AttentionWorkspaceBytes is the package function for this Set's GPU.
func (k *Set) AttentionWorkspaceBytes(a AttnShape) int {
	return AttentionWorkspaceBytes(a, k.smCount)
}

func decodeSharedBytes(a AttnShape, chunkKeys int) int {
	group := a.Heads / a.KVHeads
	return (group*a.HeadDim + group*chunkKeys + 2*group + 2*decodeThreads) * 4
}

// prefillSharedBytes mirrors attn_prefill's shared layout.
func prefillSharedBytes(headDim int) int {
	ld := headDim + 1
	return (prefillQueryTile*ld + 2*prefillKeyTile*ld + prefillQueryTile*(prefillKeyTile+1) + 3*prefillQueryTile) * 4
}

// Attention: causal GQA attention of q [T, heads*headDim] over the caches
// (positions 0..startPos+s for token (b, s)) into out [T, heads*headDim].
// SeqLen == 1 uses flash-decoding with workspace (AttentionWorkspaceBytes);
// SeqLen > 1 the tiled prefill kernel (workspace unused, may be 0). The
// kernels read startPos from pos (one int32 in device memory); a.StartPos is
// the caller's expectation, used only for the argument checks.
func (k *Set) Attention(s *cuda.Stream, out, q, kCache, vCache, pos, workspace cuda.DevPtr, workspaceBytes int, a AttnShape) error {
	c := argCheck{op: "attention"}
	checkAttnShape(&c, a)
	c.require(a.HeadDim == 32 || a.HeadDim == 64 || a.HeadDim == 128, "headDim = %d, want one of %v", a.HeadDim, SupportedHeadDims)
	c.require(a.Heads <= maxGridYZ, "heads = %d > %d", a.Heads, maxGridYZ)
	c.pointer("out", out, 2)
	c.pointer("q", q, 16)
	c.pointer("kCache", kCache, 16)
	c.pointer("vCache", vCache, 16)
	c.pointer("pos", pos, 4)
	if err := c.err(); err != nil || a.Batch == 0 || a.SeqLen == 0 {
		return err
	}
	if a.SeqLen > 1 {
		return k.launch(s, c.op, k.prefill[a.HeadDim],
			cuda.Dim3{X: uint32(ceilDiv(a.SeqLen, prefillQueryTile)), Y: uint32(a.Heads), Z: uint32(a.Batch)},
			cuda.Dim3{X: prefillThreads, Y: 1, Z: 1}, prefillSharedBytes(a.HeadDim),
			out, q, kCache, vCache, pos, int32(a.SeqLen), int32(a.Heads),
			int32(a.KVHeads), int32(a.MaxSeq))
	}

	chunkKeys, splits := decodePlan(a, k.smCount)
	need := a.Batch * a.Heads * splits * (a.HeadDim + 2) * 4
	shared := decodeSharedBytes(a, chunkKeys)
	c.pointer("workspace", workspace, 16)
	c.require(workspaceBytes >= need, "workspace has %d bytes, need %d (see AttentionWorkspaceBytes)", workspaceBytes, need)
	c.require(a.KVHeads <= maxGridYZ, "kvHeads = %d > %d", a.KVHeads, maxGridYZ)
	c.require(shared <= defaultSharedLimitBytes, "heads/kvHeads = %d needs %d bytes of shared memory, more than %d",
		a.Heads/a.KVHeads, shared, defaultSharedLimitBytes)
	if err := c.err(); err != nil {
		return err
	}
	if err := k.launch(s, c.op, k.decodeSplit[a.HeadDim],
		cuda.Dim3{X: uint32(splits), Y: uint32(a.KVHeads), Z: uint32(a.Batch)},
		cuda.Dim3{X: decodeThreads, Y: 1, Z: 1}, shared,
		workspace, q, kCache, vCache, pos, int32(a.Batch), int32(a.Heads), int32(a.KVHeads),
		int32(a.MaxSeq), int32(chunkKeys), int32(splits)); err != nil {
		return err
	}
	return k.launch(s, c.op, k.decodeCombine,
		cuda.Dim3{X: uint32(a.Heads), Y: uint32(a.Batch), Z: 1},
		cuda.Dim3{X: threadsFor(a.HeadDim, 128), Y: 1, Z: 1}, 0,
		out, workspace, pos, int32(a.MaxSeq), int32(a.Batch), int32(a.Heads), int32(a.HeadDim),
		int32(chunkKeys), int32(splits))
}

// SiluMul: out[r, i] = bf16(bf16(silu(gate[r, i])) * up[r, i]) with gateUp
// [rows, 2*inter] (gate columns first). Vectorised when inter % 8 == 0 and
// the pointers are 16-byte aligned.
func (k *Set) SiluMul(s *cuda.Stream, out, gateUp cuda.DevPtr, rows, inter int) error {
	c := argCheck{op: "silu_mul"}
	c.count("rows", rows)
	c.positive("inter", inter)
	c.pointer("out", out, 2)
	c.pointer("gateUp", gateUp, 2)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	vec := aligned16(inter, out, gateUp)
	items := rows * inter
	if vec {
		items /= 8
	}
	return k.launch(s, c.op, k.siluMul, cuda.Dim3{X: k.gridStrideBlocks(items, 256), Y: 1, Z: 1},
		cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, out, gateUp, int32(rows), int32(inter), flag(vec))
}

// GatherLast: out[b, :] = in[b*seqLen + seqLen-1, :].
func (k *Set) GatherLast(s *cuda.Stream, out, in cuda.DevPtr, batch, seqLen, width int) error {
	c := argCheck{op: "gather_last"}
	c.count("batch", batch)
	c.positive("seqLen", seqLen)
	c.positive("width", width)
	c.pointer("out", out, 2)
	c.pointer("in", in, 2)
	if err := c.err(); err != nil || batch == 0 {
		return err
	}
	vec := aligned16(width, out, in)
	return k.launch(s, c.op, k.gatherLast, cuda.Dim3{X: uint32(batch), Y: 1, Z: 1},
		cuda.Dim3{X: 256, Y: 1, Z: 1}, 0,
		out, in, int32(batch), int32(seqLen), int32(width), flag(vec))
}

// Argmax: out[r] (int32) = first index of the max of logits[r, :]; NaN never
// wins; a row of NaN gives 0.
func (k *Set) Argmax(s *cuda.Stream, out, logits cuda.DevPtr, rows, vocab int) error {
	c := argCheck{op: "argmax"}
	c.count("rows", rows)
	c.positive("vocab", vocab)
	c.pointer("out", out, 4)
	c.pointer("logits", logits, 2)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	vec := aligned16(vocab, logits)
	return k.launch(s, c.op, k.argmax, cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
		cuda.Dim3{X: 512, Y: 1, Z: 1}, 0,
		out, logits, int32(rows), int32(vocab), flag(vec))
}

// FillDummy writes elements [first, first+n) of the dummy tensor whose key is
// key (ref.DummyKey) into dst[0:n], bit-identical to ref.DummyElem.
func (k *Set) FillDummy(s *cuda.Stream, dst cuda.DevPtr, n int, key, first uint64, kind ref.DummyKind) error {
	c := argCheck{op: "fill_dummy"}
	c.require(n >= 0, "n = %d < 0", n)
	c.require(kind == ref.DummyUniform || kind == ref.DummyOnes, "unknown dummy kind %d", kind)
	c.pointer("dst", dst, 2)
	if err := c.err(); err != nil || n == 0 {
		return err
	}
	return k.launch(s, c.op, k.fillDummy, cuda.Dim3{X: k.gridStrideBlocks(n, 256), Y: 1, Z: 1},
		cuda.Dim3{X: 256, Y: 1, Z: 1}, 0,
		dst, int64(n), key, first, int32(kind))
}

// AddI32: buf[i] += delta for i < n (int32). It advances the device-side
// position at the end of a step, inside a captured decode graph.
func (k *Set) AddI32(s *cuda.Stream, buf cuda.DevPtr, n, delta int) error {
	c := argCheck{op: "add_i32"}
	c.count("n", n)
	c.require(delta >= math.MinInt32 && delta <= math.MaxInt32, "delta = %d does not fit int32", delta)
	c.pointer("buf", buf, 4)
	if err := c.err(); err != nil || n == 0 {
		return err
	}
	return k.launch(s, c.op, k.addI32, cuda.Dim3{X: k.gridStrideBlocks(n, 256), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(n, 256), Y: 1, Z: 1}, 0, buf, int32(n), int32(delta))
}
