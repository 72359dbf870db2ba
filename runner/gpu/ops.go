package gpu

import (
	"errors"
	"fmt"
	"stepbench/kernels"

	"stepbench/cuda"
	"stepbench/runner"
)

// Embed gathers embedding rows; ids must be in range (the engine checks prompts).
func (c *Backend) Embed(out, table, ids runner.Buffer, tokens, hidden int) error {
	o := operands{op: "embed"}
	pOut := o.get(out, runner.BF16, tokens*hidden, "out")
	pTable := o.get(table, runner.BF16, hidden, "table")
	pIDs := o.get(ids, runner.I32, tokens, "ids")
	if o.err != nil {
		return o.err
	}
	return c.set.Embed(c.stream, pOut, pTable, pIDs, tokens, hidden)
}

// AddRMSNorm is the fused residual add and RMSNorm.
func (c *Backend) AddRMSNorm(out, residual, add, weight runner.Buffer, rows, hidden int, eps float32) error {
	n := rows * hidden
	o := operands{op: "add_rmsnorm"}
	pOut := o.get(out, runner.BF16, n, "out")
	pRes := o.get(residual, runner.BF16, n, "residual")
	pAdd := o.getOpt(add, runner.BF16, n, "add", true)
	pW := o.get(weight, runner.BF16, hidden, "weight")
	if o.err != nil {
		return o.err
	}
	return c.set.AddRMSNorm(c.stream, pOut, pRes, pAdd, pW, rows, hidden, eps)
}

// QKNorm is the q/k/v bias and the per-head RMSNorm of q and k, in place.
func (c *Backend) QKNorm(qkv, bias, qNorm, kNorm runner.Buffer, tokens, heads, kvHeads, headDim int, eps float32) error {
	width := (heads + 2*kvHeads) * headDim
	o := operands{op: "qk_norm"}
	pQKV := o.get(qkv, runner.BF16, tokens*width, "qkv")
	pBias := o.getOpt(bias, runner.BF16, width, "bias", true)
	pQ := o.getOpt(qNorm, runner.BF16, headDim, "qNorm", true)
	pK := o.getOpt(kNorm, runner.BF16, headDim, "kNorm", true)
	if o.err != nil {
		return o.err
	}
	return c.set.QKNorm(c.stream, pQKV, pBias, pQ, pK, tokens, heads, kvHeads, headDim, eps)
}

// Linear is out[m,n] = x[m,k]·w[n,k]ᵀ: linear version 2's or 3's kernels for a
// decode step's few rows (Kernels.Linear), else the library, cuBLAS's
// cublasGemmEx (gemm version 1) or tuned cuBLASLt (gemm version 2): in column-major terms
// C(n×m) = op(A)·B with A = w seen as k×n (transposed), B = x seen as k×m.
func (c *Backend) Linear(out, x, w runner.Buffer, m, n, k int) error {
	if m < 0 || n < 1 || k < 1 {
		return fmt.Errorf("linear: m=%d n=%d k=%d", m, n, k)
	}
	o := operands{op: "linear"}
	pOut := o.get(out, runner.BF16, m*n, "out")
	pX := o.get(x, runner.BF16, m*k, "x")
	pW := o.get(w, runner.BF16, n*k, "w")
	if o.err != nil || m == 0 {
		return o.err
	}
	if c.set.Replaces(OpLinear) { // --op linear=LIB: the library, not ours or cuBLAS
		return c.set.LibLinear(c.stream, pOut, pX, pW, m, n, k)
	}
	// Linear versions 2 and 3 (kernels/gemv.cu) take decode's few rows; the rest is cuBLAS's.
	if ran, err := c.set.Linear(c.stream, pOut, pX, pW, m, n, k); ran || err != nil {
		return err
	}
	if c.set.Selection().GemmVersion() == 2 { // --kernel gemm=2: cuBLASLt, tuned per shape
		return c.linearLt(pOut, pX, pW, m, n, k)
	}
	if c.planning != nil {
		c.planLibrary("linear", LibraryGemm)
		return nil
	}
	if err := c.handle.GemmBF16(true, false, n, m, k, 1, pW, k, pX, k, 0, pOut, n); err != nil {
		return fmt.Errorf("linear: %w", c.rootCause(err))
	}
	c.gemms++
	c.observeLibrary("linear", LibraryGemm)
	return nil
}

// FusesGateUp reports whether LinearSiluMul takes these shapes: linear
// version 2 or 3 at m rows over k (runner.GateUpFuser), and no op library
// replaces linear or silu_mul (the library's op must run as itself).
func (c *Backend) FusesGateUp(m, inter, k int) bool {
	if c.set.Replaces(OpLinear) || c.set.Replaces(OpSiluMul) {
		return false
	}
	takes, err := c.set.GemvTakes(m, k)
	return err == nil && takes && inter > 0
}

// LinearSiluMul is gate_up_proj and silu_mul in one kernel (gemv_silu_*):
// out[m, inter] = SiLU(gate)·up of x[m, k] · w[2*inter, k]ᵀ.
func (c *Backend) LinearSiluMul(out, x, w runner.Buffer, m, inter, k int) error {
	if m < 0 || inter < 1 || k < 1 {
		return fmt.Errorf("linear_silu_mul: m=%d inter=%d k=%d", m, inter, k)
	}
	o := operands{op: "linear_silu_mul"}
	pOut := o.get(out, runner.BF16, m*inter, "out")
	pX := o.get(x, runner.BF16, m*k, "x")
	pW := o.get(w, runner.BF16, 2*inter*k, "w")
	if o.err != nil || m == 0 {
		return o.err
	}
	ran, err := c.set.LinearSiluMul(c.stream, pOut, pX, pW, m, inter, k)
	if err == nil && !ran {
		err = fmt.Errorf("linear_silu_mul: the selected linear version does not take m=%d k=%d with these buffers (FusesGateUp said it would)", m, k)
	}
	return err
}

// FusesNormLinear reports whether linear version 4 fuses the residual add
// and RMSNorm into the projections of m rows over hidden
// (runner.NormLinearFuser).
func (c *Backend) FusesNormLinear(m, hidden, attnWidth, inter int) bool {
	return c.set.NormFuses(m, hidden) && c.set.NormProduces(attnWidth) && c.set.NormProduces(inter)
}

// NormParts is the squared sums buffer's size for m rows hidden wide.
func (c *Backend) NormParts(m, hidden int) int { return m * kernels.NormParts(hidden) }

// LinearResidual is o_proj or down_proj with the residual add fused
// (gemv_res_*).
func (c *Backend) LinearResidual(residual, part, x, w runner.Buffer, m, n, k int) error {
	o := operands{op: "linear_residual"}
	pRes := o.get(residual, runner.BF16, m*n, "residual")
	pPart := o.get(part, runner.F32, c.NormParts(m, n), "part")
	pX := o.get(x, runner.BF16, m*k, "x")
	pW := o.get(w, runner.BF16, n*k, "w")
	if o.err != nil {
		return o.err
	}
	return c.set.LinearResidual(c.stream, pRes, pPart, pX, pW, m, n, k)
}

// NormLinear is qkv_proj or lm_head with RMSNorm fused (gemv_norm_*).
func (c *Backend) NormLinear(out, residual, part, normW, w runner.Buffer, m, n, k int, eps float32) error {
	return c.normLinear("norm_linear", out, residual, part, normW, w, m, n, k, eps, false)
}

// NormLinearSiluMul is gate_up_proj and silu_mul with RMSNorm fused
// (gemv_silu_norm_*).
func (c *Backend) NormLinearSiluMul(out, residual, part, normW, w runner.Buffer, m, inter, k int, eps float32) error {
	return c.normLinear("norm_linear_silu_mul", out, residual, part, normW, w, m, inter, k, eps, true)
}

func (c *Backend) normLinear(op string, out, residual, part, normW, w runner.Buffer, m, n, k int, eps float32, silu bool) error {
	wRows := n
	if silu {
		wRows = 2 * n
	}
	o := operands{op: op}
	pOut := o.get(out, runner.BF16, m*n, "out")
	pRes := o.get(residual, runner.BF16, m*k, "residual")
	pPart := o.get(part, runner.F32, c.NormParts(m, k), "part")
	pNorm := o.get(normW, runner.BF16, k, "norm weight")
	pW := o.get(w, runner.BF16, wRows*k, "w")
	if o.err != nil {
		return o.err
	}
	return c.set.NormLinear(c.stream, pOut, pRes, pPart, pNorm, pW, m, n, k, eps, silu)
}

// rootCause adds the stream's sticky error to a library call's failure:
// after a faulting kernel, cuBLAS only says CUBLAS_STATUS_EXECUTION_FAILED,
// and the fault is what the user needs to see. (No sync while capturing:
// it would invalidate the capture.)
func (c *Backend) rootCause(err error) error {
	if c.capturing {
		return err
	}
	if syncErr := c.stream.Sync(); syncErr != nil && cuda.IsSticky(syncErr) {
		return fmt.Errorf("%w, after an earlier kernel fault: %w", err, syncErr)
	}
	return err
}

// kvPtrs are the device addresses of kv's buffers that a step of shape s
// reads: the start position of a uniform contiguous step, the whole view of
// a tabled one.
func kvPtrs(o *operands, kv runner.KVView, s runner.AttnShape) KVPtrs {
	if !s.Tabled() {
		return KVPtrs{Pos: o.get(kv.Pos, runner.I32, 1, "pos")}
	}
	T := s.Tokens()
	return KVPtrs{
		Pos:         o.getOpt(kv.Pos, runner.I32, 1, "pos", true),
		BlockTable:  o.get(kv.BlockTable, runner.I32, s.Batch*s.MaxPages, "block table"),
		SeqLens:     o.get(kv.SeqLens, runner.I32, s.Batch, "sequence lengths"),
		QueryStart:  o.get(kv.QueryStart, runner.I32, s.Batch+1, "query starts"),
		Positions:   o.get(kv.Positions, runner.I32, T, "positions"),
		SlotMapping: o.get(kv.SlotMapping, runner.I64, T, "slot mapping"),
		// An FP8 cache's scales (the KV kernels refuse a null one;
		// advance_kv reads none).
		KScale: o.getOpt(kv.KScale, runner.F32, s.KVHeads, "k scale", true),
		VScale: o.getOpt(kv.VScale, runner.F32, s.KVHeads, "v scale", true),
	}
}

// cacheDType is the buffer type of a cache of s's dtype: bf16, or FP8
// bytes (runner.F8E4M3, whatever the format: s.Cache says which).
func cacheDType(s runner.AttnShape) runner.DType {
	if s.Cache.FP8() {
		return runner.F8E4M3
	}
	return runner.BF16
}

// RopeKVWrite rotates q and k and writes k and v to the cache; the kernel
// reads the positions from kv.
func (c *Backend) RopeKVWrite(q, kCache, vCache, qkv, invFreq runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	T, D := s.Tokens(), s.HeadDim
	cache := s.CacheSlots() * s.KVHeads * D
	o := operands{op: "rope_kv_write"}
	pQ := o.get(q, runner.BF16, T*s.Heads*D, "q")
	pK := o.get(kCache, cacheDType(s), cache, "kCache")
	pV := o.get(vCache, cacheDType(s), cache, "vCache")
	pQKV := o.get(qkv, runner.BF16, T*(s.Heads+2*s.KVHeads)*D, "qkv")
	pFreq := o.get(invFreq, runner.F32, D/2, "invFreq")
	pKV := kvPtrs(&o, kv, s)
	if o.err != nil {
		return o.err
	}
	return c.set.RopeKVWrite(c.stream, pQ, pK, pV, pQKV, pFreq, pKV, s)
}

// AdvanceKV moves a tabled decode step's view one token on, on the device.
func (c *Backend) AdvanceKV(kv runner.KVView, s runner.AttnShape) error {
	o := operands{op: "advance_kv"}
	p := kvPtrs(&o, kv, s)
	if o.err != nil {
		return o.err
	}
	return c.set.AdvanceKV(c.stream, p, s)
}

// GatherLastRagged copies each sequence's last new row of a ragged step.
func (c *Backend) GatherLastRagged(out, in, queryStart runner.Buffer, batch, width int) error {
	o := operands{op: "gather_last"}
	pOut := o.get(out, runner.BF16, batch*width, "out")
	pIn := o.get(in, runner.BF16, 0, "in")
	pStarts := o.get(queryStart, runner.I32, batch+1, "query starts")
	if o.err != nil {
		return o.err
	}
	return c.set.GatherLastRagged(c.stream, pOut, pIn, pStarts, batch, width, in.Len()/max(width, 1))
}

// ReserveAttention makes the decode workspace big enough for s's batch and
// cache length. The engine calls it when it allocates a run's buffers, so
// no timed region or capture allocates (cuMemAlloc can synchronise the
// device); Attention calls it too, as a guard, and fails inside a capture.
func (c *Backend) ReserveAttention(s runner.AttnShape) error {
	decode := s
	decode.SeqLen, decode.StartPos = 1, 0 // a tabled one's lengths do not size it
	need := c.set.AttentionWorkspaceBytes(decode)
	if need <= c.attnWorkspaceBytes {
		return nil
	}
	if c.capturing {
		return fmt.Errorf("attention: decode workspace of %d bytes not reserved before capture (have %d)", need, c.attnWorkspaceBytes)
	}
	p, err := c.devAlloc(need)
	if err != nil {
		return fmt.Errorf("attention workspace: %w", err)
	}
	if c.planning != nil {
		c.attnWorkspace, c.attnWorkspaceBytes = p, need
		return nil
	}
	if err := c.set.ZeroAttentionWorkspace(c.stream, p, need); err != nil {
		return errors.Join(err, c.ctx.Free(p))
	}
	if c.attnWorkspace != 0 {
		c.retiredWorkspaces = append(c.retiredWorkspaces, c.attnWorkspace)
	}
	c.attnWorkspace, c.attnWorkspaceBytes = p, need
	return nil
}

// Attention is causal GQA attention over the cache; the kernels read the
// positions from kv.
func (c *Backend) Attention(out, q, kCache, vCache runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	T, D := s.Tokens(), s.HeadDim
	cache := s.CacheSlots() * s.KVHeads * D
	o := operands{op: "attention"}
	pOut := o.get(out, runner.BF16, T*s.Heads*D, "out")
	pQ := o.get(q, runner.BF16, T*s.Heads*D, "q")
	pK := o.get(kCache, cacheDType(s), cache, "kCache")
	pV := o.get(vCache, cacheDType(s), cache, "vCache")
	pKV := kvPtrs(&o, kv, s)
	if o.err != nil {
		return o.err
	}
	if err := c.ReserveAttention(s); err != nil {
		return err
	}
	return c.set.Attention(c.stream, pOut, pQ, pK, pV, pKV, c.attnWorkspace, c.attnWorkspaceBytes, s)
}

// FusesRopeAttention reports whether RopeAttention takes s
// (runner.RopeAttentionFuser): a decode step whose attn_decode version
// fuses rope_kv_write (version 5, chosen), and no op library replaces
// rope_kv_write or attn_decode (the library's op must run as itself).
func (c *Backend) FusesRopeAttention(s runner.AttnShape) bool {
	return s.SeqLen == 1 && c.set.FusesRope(s)
}

// RopeAttention is rope_kv_write and decode attention in one kernel
// (attn_decode version 5); the kernel reads the positions from kv.
func (c *Backend) RopeAttention(out, qkv, kCache, vCache, invFreq runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	T, D := s.Tokens(), s.HeadDim
	cache := s.CacheSlots() * s.KVHeads * D
	o := operands{op: "rope_attention"}
	pOut := o.get(out, runner.BF16, T*s.Heads*D, "out")
	pQKV := o.get(qkv, runner.BF16, T*(s.Heads+2*s.KVHeads)*D, "qkv")
	pK := o.get(kCache, runner.BF16, cache, "kCache")
	pV := o.get(vCache, runner.BF16, cache, "vCache")
	pFreq := o.get(invFreq, runner.F32, D/2, "invFreq")
	pKV := kvPtrs(&o, kv, s)
	if o.err != nil {
		return o.err
	}
	if err := c.ReserveAttention(s); err != nil {
		return err
	}
	return c.set.RopeAttention(c.stream, pOut, pQKV, pK, pV, pFreq, pKV, c.attnWorkspace, c.attnWorkspaceBytes, s)
}

// AddI32 adds delta to every element of buf on the device.
func (c *Backend) AddI32(buf runner.Buffer, delta int) error {
	p, err := dev(buf, runner.I32, 0, "add_i32", "buf", false)
	if err != nil {
		return err
	}
	return c.set.AddI32(c.stream, p, buf.Len(), delta)
}

// SiluMul is SiLU(gate)·up.
func (c *Backend) SiluMul(out, gateUp runner.Buffer, rows, inter int) error {
	o := operands{op: "silu_mul"}
	pOut := o.get(out, runner.BF16, rows*inter, "out")
	pGU := o.get(gateUp, runner.BF16, rows*2*inter, "gateUp")
	if o.err != nil {
		return o.err
	}
	return c.set.SiluMul(c.stream, pOut, pGU, rows, inter)
}

// GatherLast copies each sequence's last row.
func (c *Backend) GatherLast(out, in runner.Buffer, batch, seqLen, width int) error {
	o := operands{op: "gather_last"}
	pOut := o.get(out, runner.BF16, batch*width, "out")
	pIn := o.get(in, runner.BF16, batch*seqLen*width, "in")
	if o.err != nil {
		return o.err
	}
	return c.set.GatherLast(c.stream, pOut, pIn, batch, seqLen, width)
}

// Argmax is each row's greedy token.
func (c *Backend) Argmax(out, logits runner.Buffer, rows, vocab int) error {
	o := operands{op: "argmax"}
	pOut := o.get(out, runner.I32, rows, "out")
	pLogits := o.get(logits, runner.BF16, rows*vocab, "logits")
	if o.err != nil {
		return o.err
	}
	if err := c.reserveArgmax(rows, vocab); err != nil {
		return err
	}
	return c.set.Argmax(c.stream, pOut, pLogits, c.argmaxWorkspace, c.argmaxWorkspaceBytes, rows, vocab)
}

// reserveArgmax grows argmax version 2's workspace outside captures: the
// first argmax of a run's batch size is a prefill's, never captured, so a
// captured decode step finds it reserved (and fails otherwise).
func (c *Backend) reserveArgmax(rows, vocab int) error {
	need := kernels.ArgmaxWorkspaceBytes(rows, vocab)
	if need <= c.argmaxWorkspaceBytes {
		return nil
	}
	if c.capturing {
		return fmt.Errorf("argmax: workspace of %d bytes not reserved before capture (have %d)", need, c.argmaxWorkspaceBytes)
	}
	p, err := c.devAlloc(need)
	if err != nil {
		return fmt.Errorf("argmax workspace: %w", err)
	}
	if c.argmaxWorkspace != 0 {
		c.retiredWorkspaces = append(c.retiredWorkspaces, c.argmaxWorkspace)
	}
	c.argmaxWorkspace, c.argmaxWorkspaceBytes = p, need
	return nil
}

// UsesKVTable reports whether the selection chooses a block-table version
// of attention or rope_kv_write, or an op library replaces one of them (op
// ABI 2 takes the tabled form only: oplib_kv.go) (runner.KVTableUser): the
// engine then runs
// even a uniform contiguous batch through a table of one page per
// sequence, the only cache those kernels read.
func (c *Backend) UsesKVTable() bool { return c.set.Selection().UsesKVTable() || c.set.libsNeedTable() }
