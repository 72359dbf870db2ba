package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// Kernels is the loaded kernels of one context: every entry point of
// kernels.Families, by name. Its methods check their arguments (every
// problem in one error naming the op) and enqueue on the given stream; like
// every cuda call they must come from the context's goroutine.
type Kernels struct {
	modules []*cuda.Module
	smCount int
	fn      map[string]*cuda.Function // by entry point
	// sel picks the version of the ops that have several (kernels.Ops);
	// With gives the same kernels another selection.
	sel kernels.Selection
	// libs are the ops op libraries replace (WithOps); nil for none.
	libs *opLibs
	// launched counts the kernels enqueued (captures included), shared by
	// the copies With makes.
	launched *int64
	// pdl are the entry points that launch=2 launches with programmatic
	// stream serialization (kernels.PDLEntryPoints of the sources loaded).
	pdl map[string]bool
	// record, set by NewPlanner, takes every launch instead of a stream.
	record func(PlannedLaunch)
	// observe, set by Backend.ObserveLaunches, is told every launch made.
	observe func(PlannedLaunch)
}

// Launched is how many kernels have been enqueued through k and every copy
// With made of it.
func (k *Kernels) Launched() int64 {
	if k.launched == nil {
		return 0
	}
	return *k.launched
}

// With returns the same loaded kernels (Close stays the original's) with
// versions chosen by sel.
func (k *Kernels) With(sel kernels.Selection) *Kernels {
	c := *k
	c.sel = sel
	return &c
}

// Selection is the version choice k launches with.
func (k *Kernels) Selection() kernels.Selection { return k.sel }

// LoadKernels loads the compiled modules into ctx and looks up every entry
// point of the registry in its source's module. smCount (the device's
// multiprocessor count) sizes grids and attention splits.
func LoadKernels(ctx *cuda.Context, compiled []kernels.Compiled, smCount int) (*Kernels, error) {
	if smCount < 1 {
		return nil, fmt.Errorf("load kernels: SM count %d < 1", smCount)
	}
	k := &Kernels{smCount: smCount, fn: map[string]*cuda.Function{}, launched: new(int64)}
	byFile := map[string]*cuda.Module{}
	var errs []error
	for _, c := range compiled {
		m, err := ctx.LoadModule(c.Cubin)
		if err != nil {
			errs = append(errs, sourceError{c.Name, fmt.Errorf("load kernels from %s: %w", c.Name, err)})
			continue
		}
		k.modules = append(k.modules, m)
		byFile[c.Name] = m
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, k.Close())
	}
	for name, file := range kernels.EntryPointSources() {
		m, ok := byFile[file]
		if !ok {
			errs = append(errs, fmt.Errorf("load kernel %s: no compiled %s", name, file))
			continue
		}
		f, err := m.Function(name)
		if err != nil {
			errs = append(errs, sourceError{file, fmt.Errorf("load kernel %s from %s: %w", name, file, err)})
			continue
		}
		k.fn[name] = f
	}
	for _, d := range kernels.SupportedHeadDims {
		pre := k.fn[kernels.EntryPoint("attn_prefill", d)]
		if shared := kernels.PrefillSharedBytes(d); pre != nil && shared > kernels.DefaultSharedLimitBytes {
			if err := pre.SetMaxDynamicShared(shared); err != nil {
				errs = append(errs, fmt.Errorf("load kernel attn_prefill_d%d: %w", d, err))
			}
		}
	}
	for _, d := range kernels.TensorCoreHeadDims {
		for name, shared := range map[string]int{"attn_prefill_tc": kernels.PrefillTCSharedBytes(d), "attn_prefill3": kernels.PrefillV3SharedBytes(d), "attn_prefill4": kernels.Prefill4SharedBytes(d), "attn_prefill5": kernels.Prefill5SharedBytes(d)} {
			pre := k.fn[kernels.EntryPoint(name, d)]
			if pre != nil && shared > kernels.DefaultSharedLimitBytes {
				if err := pre.SetMaxDynamicShared(shared); err != nil {
					errs = append(errs, fmt.Errorf("load kernel %s_d%d: %w", name, d, err))
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, k.Close())
	}
	return k, nil
}

// sourceError is a failure to load the module of one source (or a kernel
// from it): the backend rebuilds that source's cached cubin.
type sourceError struct {
	source string
	err    error
}

func (e sourceError) Error() string { return e.err.Error() }
func (e sourceError) Unwrap() error { return e.err }

// failedSources are the sources whose modules err says failed to load.
func failedSources(err error) []string {
	var out []string
	walkSourceErrors(err, func(e sourceError) {
		if !slices.Contains(out, e.source) {
			out = append(out, e.source)
		}
	})
	return out
}

// sourceFailure is the first failure of source in err.
func sourceFailure(err error, source string) string {
	msg := ""
	walkSourceErrors(err, func(e sourceError) {
		if e.source == source && msg == "" {
			msg = e.err.Error()
		}
	})
	return msg
}

func walkSourceErrors(err error, f func(sourceError)) {
	if se, ok := err.(sourceError); ok {
		f(se)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			walkSourceErrors(e, f)
		}
	}
}

// Close unloads the modules.
func (k *Kernels) Close() error {
	errs := []error{k.closeLibs()}
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

// launch enqueues entry point name (the op names it in errors).
func (k *Kernels) launch(s *cuda.Stream, op, name string, grid, block cuda.Dim3, sharedBytes int, args ...any) error {
	if k.record != nil {
		return k.planLaunch(op, name, grid, block, sharedBytes)
	}
	f, ok := k.fn[name]
	if !ok {
		return fmt.Errorf("%s: kernel %s is not loaded", op, name)
	}
	launch := s.Launch
	if k.Programmatic(name) {
		launch = s.LaunchProgrammatic
	}
	if err := launch(f, grid, block, sharedBytes, args...); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if k.observe != nil {
		k.observe(k.planned(op, name, grid, block, sharedBytes))
	}
	if k.launched != nil {
		*k.launched++
	}
	return nil
}

// Programmatic reports whether k launches entry point name with
// programmatic stream serialization: launch=2 is chosen and the kernel's
// source waits in-kernel (SB_PDL_WAIT; kernels.PDLEntryPoints).
func (k *Kernels) Programmatic(name string) bool {
	return k.sel.LaunchVersion() == kernels.LaunchProgrammatic && k.pdl[name]
}

// threadsFor is kernels.ThreadsFor as a block dimension.
func threadsFor(n, maxThreads int) uint32 { return uint32(kernels.ThreadsFor(n, maxThreads)) }

// gridStrideBlocks caps a grid-stride kernel's grid at a few waves.
func (k *Kernels) gridStrideBlocks(items, threads int) uint32 {
	return uint32(kernels.GridStrideBlocks(items, threads, k.smCount))
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
func (k *Kernels) Embed(s *cuda.Stream, out, table, ids cuda.DevPtr, tokens, hidden int) error {
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
	return k.launch(s, c.op, "embed", cuda.Dim3{X: uint32(tokens), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(hidden/8, 256), Y: 1, Z: 1}, 0,
		out, table, ids, int32(tokens), int32(hidden))
}

// AddRMSNorm: residual += add (when add != 0, rounded to bf16 and written
// back), then out = bf16(weight * bf16(residual * rsqrt(mean(residual²) + eps))).
// hidden % 8 == 0, pointers 16-byte aligned.
func (k *Kernels) AddRMSNorm(s *cuda.Stream, out, residual, add, weight cuda.DevPtr, rows, hidden int, eps float32) error {
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
	if o := k.opLib(OpNorm); o != nil {
		addT := bf16T(add, rows, hidden)
		addT.Absent = add == 0
		return k.runLib(s, o, OpNorm, cuda.OpArgs{Eps: eps, Tensors: []cuda.OpTensor{bf16T(out, rows, hidden), bf16T(residual, rows, hidden), addT, bf16T(weight, hidden)}})
	}
	return k.launch(s, c.op, "add_rmsnorm", cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(hidden/8, kernels.MaxReduceThreads), Y: 1, Z: 1}, 0,
		out, residual, add, weight, int32(rows), int32(hidden), eps)
}

// QKNorm adds the q/k/v bias (bias non-zero) and RMS-normalises each q and
// k head (q_norm, k_norm non-zero) in place on qkv [tokens,
// (heads+2*kvHeads)*headDim]: qk_norm, one warp per (token, head).
func (k *Kernels) QKNorm(s *cuda.Stream, qkv, bias, qNorm, kNorm cuda.DevPtr, tokens, heads, kvHeads, headDim int, eps float32) error {
	c := argCheck{op: "qk_norm"}
	c.count("tokens", tokens)
	c.positive("heads", heads)
	c.positive("kvHeads", kvHeads)
	c.positive("headDim", headDim)
	c.require(headDim%8 == 0, "headDim = %d is not a multiple of 8", headDim)
	c.require(eps >= 0 && !math.IsInf(float64(eps), 0), "eps = %g, want finite and >= 0", eps)
	c.pointer("qkv", qkv, 16)
	for _, p := range []struct {
		name string
		ptr  cuda.DevPtr
	}{{"bias", bias}, {"qNorm", qNorm}, {"kNorm", kNorm}} {
		c.require(p.ptr%16 == 0, "%s = %#x is not 16-byte aligned", p.name, uint64(p.ptr))
	}
	pairs := int64(tokens) * int64(heads+2*kvHeads)
	blocks := (pairs + kernels.QKNormWarps - 1) / kernels.QKNormWarps
	c.require(blocks <= math.MaxInt32, "tokens × heads = %d too large", pairs)
	if err := c.err(); err != nil || tokens == 0 || (bias == 0 && qNorm == 0 && kNorm == 0) {
		return err
	}
	return k.launch(s, c.op, "qk_norm", cuda.Dim3{X: uint32(blocks), Y: 1, Z: 1}, cuda.Dim3{X: kernels.QKNormWarps * 32, Y: 1, Z: 1}, 0,
		qkv, bias, qNorm, kNorm, int32(tokens), int32(heads), int32(kvHeads), int32(headDim), eps)
}

// checkAttnShape checks what both RoPE and attention need of a shape.
func checkAttnShape(c *argCheck, a kernels.AttnShape) {
	c.count("batch", a.Batch)
	c.count("seqLen", a.SeqLen)
	c.count("startPos", a.StartPos)
	c.positive("heads", a.Heads)
	c.positive("kvHeads", a.KVHeads)
	c.positive("headDim", a.HeadDim)
	c.positive("maxSeq", a.MaxSeq)
	c.require(a.KVHeads > 0 && a.Heads%a.KVHeads == 0, "heads = %d is not a multiple of kvHeads = %d", a.Heads, a.KVHeads)
	c.require(a.StartPos+a.SeqLen <= a.MaxSeq, "startPos %d + seqLen %d > maxSeq %d", a.StartPos, a.SeqLen, a.MaxSeq)
	c.require(a.Batch <= kernels.MaxGridYZ, "batch = %d > %d", a.Batch, kernels.MaxGridYZ)
	// Element offsets are 64-bit in the kernels, but token rows index the grid.
	c.require(int64(a.Batch)*int64(a.SeqLen) <= math.MaxInt32, "batch*seqLen = %d too large", int64(a.Batch)*int64(a.SeqLen))
}

// RopeKVWrite rotates q and k of each qkv row [T, (heads+2*kvHeads)*headDim]
// (rotate-half RoPE at position startPos+s, invFreq float32 [headDim/2]),
// writes rotated q to q [T, heads*headDim] and rotated k and raw v to the
// caches at (b, startPos+s). headDim even and <= kernels.RopeMaxHeadDim.
//
// The kernel reads startPos from pos (one int32 in device memory), so that a
// captured decode step replays at every position; a.StartPos is the caller's
// expectation, used only for the argument checks. Rows whose position would
// fall outside the cache are not written.
func (k *Kernels) RopeKVWrite(s *cuda.Stream, q, kCache, vCache, qkv, invFreq cuda.DevPtr, kv KVPtrs, a kernels.AttnShape) error {
	if a.Tabled() {
		return k.ropeKVWriteTabled(s, q, kCache, vCache, qkv, invFreq, kv, a)
	}
	if a.Cache.FP8() {
		return fmt.Errorf("rope_kv_write: an FP8 KV cache (%s) runs through the block table only (rope_kv_write %d)", a.Cache, kernels.RopeFP8Version)
	}
	pos := kv.Pos
	c := argCheck{op: "rope_kv_write"}
	checkAttnShape(&c, a)
	c.require(a.HeadDim%2 == 0 && a.HeadDim <= kernels.RopeMaxHeadDim, "headDim = %d, want even and <= %d", a.HeadDim, kernels.RopeMaxHeadDim)
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
	if k.Replaces(kernels.OpRope) {
		return k.errLibNeedsTable(kernels.OpRope)
	}
	version, err := k.sel.RopeVersion(a.HeadDim)
	if err != nil {
		return fmt.Errorf("%s: %w", c.op, err)
	}
	if version == kernels.RopeTabledVersion {
		return fmt.Errorf("%s: %w", c.op, tableOnly(kernels.OpRope, version))
	}
	name := "rope_kv_write"
	if version == 2 {
		// 16-byte rows: every row width is a multiple of 8 elements here.
		if !aligned16(8, q, kCache, vCache, qkv) {
			if _, chosen := k.sel.Chosen(kernels.OpRope); chosen {
				return fmt.Errorf("%s: --kernel rope_kv_write=2 needs 16-byte aligned buffers", c.op)
			}
		} else {
			name = "rope_kv_write2"
		}
	}
	return k.launch(s, c.op, name, cuda.Dim3{X: uint32(tokens), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.RopeThreads, Y: 1, Z: 1}, 0,
		q, kCache, vCache, qkv, invFreq, pos, int32(a.Batch), int32(a.SeqLen),
		int32(a.Heads), int32(a.KVHeads), int32(a.HeadDim), int32(a.MaxSeq))
}

// AttentionWorkspaceBytes is kernels.AttentionWorkspaceBytes on this GPU.
func (k *Kernels) AttentionWorkspaceBytes(a kernels.AttnShape) int {
	return kernels.AttentionWorkspaceBytes(a, k.smCount)
}

// Attention: causal GQA attention of q [T, heads*headDim] over the caches
// (positions 0..startPos+s for token (b, s)) into out [T, heads*headDim].
// SeqLen == 1 uses flash-decoding with workspace (AttentionWorkspaceBytes);
// SeqLen > 1 the tiled prefill kernel (workspace unused, may be 0). The
// kernels read startPos from pos (one int32 in device memory); a.StartPos is
// the caller's expectation, used only for the argument checks.
func (k *Kernels) Attention(s *cuda.Stream, out, q, kCache, vCache cuda.DevPtr, kv KVPtrs, workspace cuda.DevPtr, workspaceBytes int, a kernels.AttnShape) error {
	if a.Tabled() {
		return k.attentionTabled(s, out, q, kCache, vCache, kv, workspace, workspaceBytes, a)
	}
	if a.Cache.FP8() {
		return fmt.Errorf("attention: an FP8 KV cache (%s) runs through the block table only (attn_prefill %d, attn_decode %d)", a.Cache, kernels.PrefillFP8Version, kernels.DecodeFP8Version)
	}
	pos := kv.Pos
	c := argCheck{op: "attention"}
	checkAttnShape(&c, a)
	c.require(slices.Contains(kernels.SupportedHeadDims, a.HeadDim), "headDim = %d, want one of %v", a.HeadDim, kernels.SupportedHeadDims)
	c.require(a.Heads <= kernels.MaxGridYZ, "heads = %d > %d", a.Heads, kernels.MaxGridYZ)
	c.pointer("out", out, 4) // the tensor-core prefill stores bf16 pairs
	c.pointer("q", q, 16)
	c.pointer("kCache", kCache, 16)
	c.pointer("vCache", vCache, 16)
	c.pointer("pos", pos, 4)
	if err := c.err(); err != nil || a.Batch == 0 || a.SeqLen == 0 {
		return err
	}
	if op := attentionOp(a); k.Replaces(op) {
		return k.errLibNeedsTable(op)
	}
	if a.SeqLen > 1 {
		return k.prefill(s, c.op, out, q, kCache, vCache, pos, a)
	}
	return k.decode(s, &c, out, q, kCache, vCache, pos, workspace, workspaceBytes, a)
}

// tableOnly refuses a block-table version (kernels.TabledVersion) at a
// contiguous uniform shape: it reads the table the engine builds for it.
func tableOnly(op string, version int) error {
	return fmt.Errorf("%s %d reads the block table: a contiguous uniform batch reaches it through the engine's table of one page per sequence (the backend's UsesKVTable)", op, version)
}

// attentionOp is the op attention at a is: prefill for several new tokens, else decode.
func attentionOp(a kernels.AttnShape) string {
	if a.SeqLen > 1 {
		return kernels.OpAttnPrefill
	}
	return kernels.OpAttnDecode
}

// prefill launches the attn_prefill version the selection picks for a.
func (k *Kernels) prefill(s *cuda.Stream, op string, out, q, kCache, vCache, pos cuda.DevPtr, a kernels.AttnShape) error {
	version, err := k.sel.PrefillVersion(a)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if version == kernels.PrefillTabledVersion {
		return fmt.Errorf("%s: %w", op, tableOnly(kernels.OpAttnPrefill, version))
	}
	name, tile := kernels.EntryPoint("attn_prefill", a.HeadDim), kernels.PrefillQueryTile
	threads, shared := kernels.PrefillThreads, kernels.PrefillSharedBytes(a.HeadDim)
	switch version {
	case 2:
		name, tile = kernels.EntryPoint("attn_prefill_tc", a.HeadDim), kernels.PrefillTCQueryTile
		threads, shared = kernels.PrefillTCThreads, kernels.PrefillTCSharedBytes(a.HeadDim)
	case 3:
		name, tile = kernels.EntryPoint("attn_prefill3", a.HeadDim), kernels.PrefillV3QueryTile
		threads, shared = kernels.PrefillV3Threads, kernels.PrefillV3SharedBytes(a.HeadDim)
	}
	return k.launch(s, op, name,
		cuda.Dim3{X: uint32(kernels.CeilDiv(a.SeqLen, tile)), Y: uint32(a.Heads), Z: uint32(a.Batch)},
		cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}, shared,
		out, q, kCache, vCache, pos, int32(a.SeqLen), int32(a.Heads),
		int32(a.KVHeads), int32(a.MaxSeq))
}

// decode launches the attn_decode version the selection picks for a, then
// (versions 1 and 2) the combine of the splits; versions 3 and 4 combine in
// their own last block of each kv head.
func (k *Kernels) decode(s *cuda.Stream, c *argCheck, out, q, kCache, vCache, pos, workspace cuda.DevPtr, workspaceBytes int, a kernels.AttnShape) error {
	version, err := k.sel.DecodeVersion(a)
	if err != nil {
		return fmt.Errorf("%s: %w", c.op, err)
	}
	if version == kernels.DecodeTabledVersion {
		return fmt.Errorf("%s: %w", c.op, tableOnly(kernels.OpAttnDecode, version))
	}
	chunkKeys, splits := kernels.DecodePlan(a, k.smCount)
	need := kernels.DecodePartialBytes(a, splits)
	name, shared, threads := kernels.EntryPoint("attn_decode_split", a.HeadDim), kernels.DecodeSharedBytes(a, chunkKeys), kernels.DecodeThreads
	if version >= 2 {
		g := kernels.Decode2Group(a)
		name, shared = kernels.GroupEntryPoint("attn_decode2", a.HeadDim, g), kernels.Decode2SharedBytes(a.HeadDim, g)
		threads = kernels.Decode2Threads
	}
	switch version {
	case 3:
		name, need = kernels.GroupEntryPoint("attn_decode3", a.HeadDim, kernels.Decode2Group(a)), need+kernels.DecodeCounterBytes(a)
	case 4, 5: // version 5 outside RopeAttention (no rope to fuse) is version 4
		g := kernels.Decode2Group(a)
		name, need = kernels.GroupEntryPoint("attn_decode4", a.HeadDim, g), need+kernels.DecodeCounterBytes(a)
		shared, threads = kernels.Decode4SharedBytes(a.HeadDim, g), kernels.Decode4Warps*32
	}
	c.pointer("workspace", workspace, 16)
	c.require(workspaceBytes >= need, "workspace has %d bytes, need %d (see AttentionWorkspaceBytes)", workspaceBytes, need)
	c.require(a.KVHeads <= kernels.MaxGridYZ, "kvHeads = %d > %d", a.KVHeads, kernels.MaxGridYZ)
	c.require(shared <= kernels.DefaultSharedLimitBytes, "heads/kvHeads = %d needs %d bytes of shared memory, more than %d",
		a.Heads/a.KVHeads, shared, kernels.DefaultSharedLimitBytes)
	if err := c.err(); err != nil {
		return err
	}
	grid, block := cuda.Dim3{X: uint32(splits), Y: uint32(a.KVHeads), Z: uint32(a.Batch)}, cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}
	if version >= 3 { // the combine is fused: one launch
		return k.launch(s, c.op, name, grid, block, shared, out, workspace, q, kCache, vCache, pos, int32(a.Batch),
			int32(a.Heads), int32(a.KVHeads), int32(a.MaxSeq), int32(chunkKeys), int32(splits))
	}
	if err := k.launch(s, c.op, name, grid, block, shared,
		workspace, q, kCache, vCache, pos, int32(a.Batch), int32(a.Heads), int32(a.KVHeads),
		int32(a.MaxSeq), int32(chunkKeys), int32(splits)); err != nil {
		return err
	}
	return k.launch(s, c.op, "attn_decode_combine",
		cuda.Dim3{X: uint32(a.Heads), Y: uint32(a.Batch), Z: 1},
		cuda.Dim3{X: threadsFor(a.HeadDim, 128), Y: 1, Z: 1}, 0,
		out, workspace, pos, int32(a.MaxSeq), int32(a.Batch), int32(a.Heads), int32(a.HeadDim),
		int32(chunkKeys), int32(splits))
}

// FusesRope reports whether a decode step at a runs rope_kv_write and
// attention as one launch (RopeAttention): the selection's attn_decode
// version at a fuses them (version 5) and no op library replaces either op
// (a library's op must run as itself).
func (k *Kernels) FusesRope(a kernels.AttnShape) bool {
	if k.Replaces(kernels.OpRope) || k.Replaces(kernels.OpAttnDecode) {
		return false
	}
	v, err := k.sel.DecodeVersion(a)
	return err == nil && kernels.DecodeFusesRope(v)
}

// RopeAttention is RopeKVWrite (version 2's rotation) and decode Attention
// (version 4) in one launch, attn_decode version 5 (attn_decode5_dD_gG):
// it reads the step's qkv rows [batch, (heads+2*kvHeads)*headDim], writes
// rotated k and raw v of the new token to the caches at (b, startPos) and
// the attention of rotated q into out [batch, heads*headDim]. Decode only
// (a.SeqLen == 1); the caches and out get the bits of the two ops unfused.
func (k *Kernels) RopeAttention(s *cuda.Stream, out, qkv, kCache, vCache, invFreq cuda.DevPtr, kv KVPtrs, workspace cuda.DevPtr, workspaceBytes int, a kernels.AttnShape) error {
	pos := kv.Pos
	c := argCheck{op: "rope_attention"}
	c.require(!a.Tabled(), "attn_decode version 5 takes the contiguous layout's uniform batches only")
	c.require(!a.Cache.FP8(), "attn_decode version 5 takes a bf16 KV cache only; the kv cache dtype is %s", a.Cache)
	checkAttnShape(&c, a)
	c.require(a.SeqLen == 1, "seqLen = %d, want 1 (a decode step)", a.SeqLen)
	if v, err := k.sel.DecodeVersion(a); err != nil {
		c.require(false, "%v", err)
	} else {
		c.require(kernels.DecodeFusesRope(v), "attn_decode version %d does not fuse rope_kv_write (see FusesRope)", v)
	}
	c.require(a.Heads <= kernels.MaxGridYZ && a.KVHeads <= kernels.MaxGridYZ, "heads = %d, kvHeads = %d > %d", a.Heads, a.KVHeads, kernels.MaxGridYZ)
	for _, p := range []struct {
		name string
		ptr  cuda.DevPtr
		want int
	}{{"out", out, 4}, {"qkv", qkv, 16}, {"kCache", kCache, 16}, {"vCache", vCache, 16}, {"invFreq", invFreq, 4}, {"pos", pos, 4}, {"workspace", workspace, 16}} {
		c.pointer(p.name, p.ptr, p.want)
	}
	chunkKeys, splits := kernels.DecodePlan(a, k.smCount)
	g := kernels.Decode2Group(a)
	need := kernels.DecodePartialBytes(a, splits) + kernels.DecodeCounterBytes(a)
	shared := kernels.Decode4SharedBytes(a.HeadDim, g)
	c.require(workspaceBytes >= need, "workspace has %d bytes, need %d (see AttentionWorkspaceBytes)", workspaceBytes, need)
	if err := c.err(); err != nil || a.Batch == 0 {
		return err
	}
	return k.launch(s, c.op, kernels.GroupEntryPoint("attn_decode5", a.HeadDim, g),
		cuda.Dim3{X: uint32(splits), Y: uint32(a.KVHeads), Z: uint32(a.Batch)}, cuda.Dim3{X: kernels.Decode4Warps * 32, Y: 1, Z: 1}, shared,
		out, workspace, qkv, kCache, vCache, invFreq, pos, int32(a.Batch), int32(a.Heads), int32(a.KVHeads),
		int32(a.MaxSeq), int32(chunkKeys), int32(splits))
}

// ZeroAttentionWorkspace clears a decode workspace just allocated: attn_decode
// version 3's block counters (kernels.DecodeCounterBytes) must start at zero
// (each launch leaves them so). Call it outside captures, once per allocation.
func (k *Kernels) ZeroAttentionWorkspace(s *cuda.Stream, workspace cuda.DevPtr, workspaceBytes int) error {
	if workspace == 0 || workspaceBytes < 4 {
		return nil
	}
	if err := s.Memset32(workspace, 0, workspaceBytes/4); err != nil {
		return fmt.Errorf("attention: zero the decode workspace: %w", err)
	}
	return nil
}

// SiluMul: out[r, i] = bf16(bf16(silu(gate[r, i])) * up[r, i]) with gateUp
// [rows, 2*inter] (gate columns first). Vectorised when inter % 8 == 0 and
// the pointers are 16-byte aligned.
func (k *Kernels) SiluMul(s *cuda.Stream, out, gateUp cuda.DevPtr, rows, inter int) error {
	c := argCheck{op: "silu_mul"}
	c.count("rows", rows)
	c.positive("inter", inter)
	c.pointer("out", out, 2)
	c.pointer("gateUp", gateUp, 2)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	if o := k.opLib(OpSiluMul); o != nil {
		return k.runLib(s, o, OpSiluMul, cuda.OpArgs{Tensors: []cuda.OpTensor{bf16T(out, rows, inter), bf16T(gateUp, rows, 2*inter)}})
	}
	vec := aligned16(inter, out, gateUp)
	items := rows * inter
	if vec {
		items /= 8
	}
	return k.launch(s, c.op, "silu_mul", cuda.Dim3{X: k.gridStrideBlocks(items, kernels.GridStrideThreads), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.GridStrideThreads, Y: 1, Z: 1}, 0, out, gateUp, int32(rows), int32(inter), flag(vec))
}

// GatherLast: out[b, :] = in[b*seqLen + seqLen-1, :].
func (k *Kernels) GatherLast(s *cuda.Stream, out, in cuda.DevPtr, batch, seqLen, width int) error {
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
	return k.launch(s, c.op, "gather_last", cuda.Dim3{X: uint32(batch), Y: 1, Z: 1},
		cuda.Dim3{X: 256, Y: 1, Z: 1}, 0,
		out, in, int32(batch), int32(seqLen), int32(width), flag(vec))
}

// Argmax: out[r] (int32) = first index of the max of logits[r, :]; NaN never
// wins; a row of NaN gives 0. Version 2 needs workspace of
// kernels.ArgmaxWorkspaceBytes(rows, vocab) bytes (version 1 none).
func (k *Kernels) Argmax(s *cuda.Stream, out, logits, workspace cuda.DevPtr, workspaceBytes, rows, vocab int) error {
	c := argCheck{op: "argmax"}
	c.count("rows", rows)
	c.positive("vocab", vocab)
	c.pointer("out", out, 4)
	c.pointer("logits", logits, 2)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	if o := k.opLib(kernels.OpArgmax); o != nil {
		return k.runLib(s, o, kernels.OpArgmax, cuda.OpArgs{Tensors: []cuda.OpTensor{i32T(out, rows), bf16T(logits, rows, vocab)}})
	}
	version, err := k.sel.ArgmaxVersion(vocab)
	if err != nil {
		return fmt.Errorf("%s: %w", c.op, err)
	}
	vec := aligned16(vocab, logits)
	if version == 2 && vec {
		chunks := kernels.CeilDiv(vocab, kernels.ArgmaxChunk)
		c.pointer("workspace", workspace, 8)
		c.require(workspaceBytes >= kernels.ArgmaxWorkspaceBytes(rows, vocab), "workspace has %d bytes, need %d (see kernels.ArgmaxWorkspaceBytes)",
			workspaceBytes, kernels.ArgmaxWorkspaceBytes(rows, vocab))
		if err := c.err(); err != nil {
			return err
		}
		if err := k.launch(s, c.op, "argmax2_partial", cuda.Dim3{X: uint32(chunks), Y: uint32(rows), Z: 1},
			cuda.Dim3{X: kernels.Argmax2Threads, Y: 1, Z: 1}, 0, workspace, logits, int32(rows), int32(vocab), int32(chunks)); err != nil {
			return err
		}
		return k.launch(s, c.op, "argmax2_final", cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
			cuda.Dim3{X: 32, Y: 1, Z: 1}, 0, out, workspace, int32(rows), int32(chunks))
	}
	if _, chosen := k.sel.Chosen(kernels.OpArgmax); chosen && version == 2 {
		return fmt.Errorf("%s: --kernel argmax=2 needs 16-byte aligned logits", c.op)
	}
	return k.launch(s, c.op, "argmax", cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.ArgmaxThreads, Y: 1, Z: 1}, 0,
		out, logits, int32(rows), int32(vocab), flag(vec))
}

// FillDummy writes n elements of the dummy tensor whose key is key
// (ref.DummyKey) into dst[0:n], in rows of rowLen elements, row r from
// element first + r*rowStride; bit-identical to ref.FillDummyRows.
func (k *Kernels) FillDummy(s *cuda.Stream, dst cuda.DevPtr, n, rowLen int, key, first, rowStride uint64, kind ref.DummyKind) error {
	c := argCheck{op: "fill_dummy"}
	c.require(n >= 0, "n = %d < 0", n)
	c.require(n == 0 || (rowLen > 0 && n%rowLen == 0), "n = %d is not whole rows of %d", n, rowLen)
	c.require(kind == ref.DummyUniform || kind == ref.DummyOnes, "unknown dummy kind %d", kind)
	c.pointer("dst", dst, 2)
	if err := c.err(); err != nil || n == 0 {
		return err
	}
	return k.launch(s, c.op, "fill_dummy", cuda.Dim3{X: k.gridStrideBlocks(n, kernels.GridStrideThreads), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.GridStrideThreads, Y: 1, Z: 1}, 0,
		dst, int64(n), key, first, int32(kind), int64(rowLen), rowStride)
}

// AddI32: buf[i] += delta for i < n (int32). It advances the device-side
// position at the end of a step, inside a captured decode graph.
func (k *Kernels) AddI32(s *cuda.Stream, buf cuda.DevPtr, n, delta int) error {
	c := argCheck{op: "add_i32"}
	c.count("n", n)
	c.require(delta >= math.MinInt32 && delta <= math.MaxInt32, "delta = %d does not fit int32", delta)
	c.pointer("buf", buf, 4)
	if err := c.err(); err != nil || n == 0 {
		return err
	}
	return k.launch(s, c.op, "add_i32", cuda.Dim3{X: k.gridStrideBlocks(n, kernels.GridStrideThreads), Y: 1, Z: 1},
		cuda.Dim3{X: threadsFor(n, kernels.GridStrideThreads), Y: 1, Z: 1}, 0, buf, int32(n), int32(delta))
}
