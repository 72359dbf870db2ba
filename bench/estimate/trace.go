package estimate

import (
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// callCost is what one backend call moves and computes, and what its
// launches need to price themselves.
type callCost struct {
	bytes, flops float64
	// xBytes is what each block of a GEMV launch reads of its activation
	// rows (and a fused norm's sums and weights): every block past the
	// first reads them from L2.
	xBytes float64
	// tailBytes is what a call's second launch moves (a combine's or
	// argmax's final pass over the first's workspace).
	tailBytes float64
	// attn is the call's attention shape (prefill attention's L2 re-reads
	// and shared-memory cycles).
	attn *runner.AttnShape
}

// tracer is the planner with every op that launches wrapped: each call's
// cost is noted before the planner records its launches.
type tracer struct {
	*gpu.Backend
	op      string // the engine's op (OnOp)
	call    callCost
	inCall  int // launches recorded since the call began
	on      bool
	records []record
}

// record is one planned launch and its call's cost.
type record struct {
	op      string
	planned gpu.PlannedLaunch
	cost    callCost
	first   bool // the call's first launch (its bytes); later ones move tailBytes
}

func (t *tracer) planned(p gpu.PlannedLaunch) {
	if !t.on {
		return
	}
	t.records = append(t.records, record{op: t.op, planned: p, cost: t.call, first: t.inCall == 0})
	t.inCall++
}

// begin notes the cost of the call about to be made.
func (t *tracer) begin(c callCost) {
	t.call, t.inCall = c, 0
}

// costOf is the cost model's minimum for the calls run makes.
func costOf(run func(be runner.Backend) error) callCost {
	oc, err := runner.CostOf("call", run)
	if err != nil {
		return callCost{}
	}
	return callCost{bytes: oc.Bytes, flops: oc.FLOPs}
}

func linearCost(m, n, k int) callCost {
	c := costOf(func(be runner.Backend) error { return be.Linear(nil, nil, nil, m, n, k) })
	c.xBytes = 2 * float64(m) * float64(k)
	return c
}

// siluCost is gate_up's product with SiLU·mul fused: gate and up are not
// written, the product out is.
func siluCost(m, inter, k int) callCost {
	c := linearCost(m, 2*inter, k)
	M, I := float64(m), float64(inter)
	c.bytes += -2*M*2*I + 2*M*I
	c.flops += 5 * M * I
	return c
}

// normPrologue is what a fused RMSNorm adds to a product over k: the
// producer's squared sums read (m × NormParts(k) floats) and the norm
// weights; every block reads them.
func normPrologue(c callCost, m, k int) callCost {
	extra := 4*float64(m)*float64(kernels.NormParts(k)) + 2*float64(k)
	c.bytes += extra
	c.xBytes += extra
	c.flops += 4 * float64(m) * float64(k)
	return c
}

func (t *tracer) Embed(out, table, ids runner.Buffer, tokens, hidden int) error {
	t.begin(costOf(func(be runner.Backend) error { return be.Embed(nil, nil, nil, tokens, hidden) }))
	return t.Backend.Embed(out, table, ids, tokens, hidden)
}

func (t *tracer) AddRMSNorm(out, residual, add, weight runner.Buffer, rows, hidden int, eps float32) error {
	t.begin(costOf(func(be runner.Backend) error { return be.AddRMSNorm(nil, nil, add, nil, rows, hidden, eps) }))
	return t.Backend.AddRMSNorm(out, residual, add, weight, rows, hidden, eps)
}

func (t *tracer) Linear(out, x, w runner.Buffer, m, n, k int) error {
	t.begin(linearCost(m, n, k))
	return t.Backend.Linear(out, x, w, m, n, k)
}

func (t *tracer) LinearSiluMul(out, x, w runner.Buffer, m, inter, k int) error {
	t.begin(siluCost(m, inter, k))
	return t.Backend.LinearSiluMul(out, x, w, m, inter, k)
}

// LinearResidual reads the residual and adds into it, and writes each
// row's squared sums.
func (t *tracer) LinearResidual(residual, part, x, w runner.Buffer, m, n, k int) error {
	c := linearCost(m, n, k)
	c.bytes += 2*float64(m)*float64(n) + 4*float64(m)*float64(kernels.NormParts(n))
	c.flops += float64(m) * float64(n)
	t.begin(c)
	return t.Backend.LinearResidual(residual, part, x, w, m, n, k)
}

func (t *tracer) NormLinear(out, residual, part, normW, w runner.Buffer, m, n, k int, eps float32) error {
	t.begin(normPrologue(linearCost(m, n, k), m, k))
	return t.Backend.NormLinear(out, residual, part, normW, w, m, n, k, eps)
}

func (t *tracer) NormLinearSiluMul(out, residual, part, normW, w runner.Buffer, m, inter, k int, eps float32) error {
	t.begin(normPrologue(siluCost(m, inter, k), m, k))
	return t.Backend.NormLinearSiluMul(out, residual, part, normW, w, m, inter, k, eps)
}

func (t *tracer) RopeKVWrite(q, kCache, vCache, qkv, invFreq runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	t.begin(costOf(func(be runner.Backend) error { return be.RopeKVWrite(nil, nil, nil, nil, nil, kv, s) }))
	return t.Backend.RopeKVWrite(q, kCache, vCache, qkv, invFreq, kv, s)
}

func (t *tracer) AdvanceKV(kv runner.KVView, s runner.AttnShape) error {
	t.begin(costOf(func(be runner.Backend) error { return be.AdvanceKV(kv, s) }))
	return t.Backend.AdvanceKV(kv, s)
}

func (t *tracer) GatherLastRagged(out, in, queryStart runner.Buffer, batch, width int) error {
	t.begin(costOf(func(be runner.Backend) error { return be.GatherLastRagged(nil, nil, nil, batch, width) }))
	return t.Backend.GatherLastRagged(out, in, queryStart, batch, width)
}

// attentionCost is the cost model's attention, and for a decode split's
// combine (versions 1 and 2) the partials it reads and the output.
func attentionCost(kv runner.KVView, s runner.AttnShape, sms int) callCost {
	c := costOf(func(be runner.Backend) error { return be.Attention(nil, nil, nil, nil, kv, s) })
	if s.SeqLen == 1 && !s.Tabled() {
		_, splits := kernels.DecodePlan(s, sms)
		c.tailBytes = float64(kernels.DecodePartialBytes(s, splits)) + 2*float64(s.Tokens()*s.Heads*s.HeadDim)
	}
	shape := s
	c.attn = &shape
	return c
}

func (t *tracer) Attention(out, q, kCache, vCache runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	t.begin(attentionCost(kv, s, t.Info().Device.SMCount))
	return t.Backend.Attention(out, q, kCache, vCache, kv, s)
}

// RopeAttention is rope_kv_write and decode attention without the
// rotated q written and read back.
func (t *tracer) RopeAttention(out, qkv, kCache, vCache, invFreq runner.Buffer, kv runner.KVView, s runner.AttnShape) error {
	c := attentionCost(kv, s, t.Info().Device.SMCount)
	r := costOf(func(be runner.Backend) error { return be.RopeKVWrite(nil, nil, nil, nil, nil, kv, s) })
	c.bytes += r.bytes - 2*2*float64(s.Tokens()*s.Heads*s.HeadDim)
	c.flops += r.flops
	t.begin(c)
	return t.Backend.RopeAttention(out, qkv, kCache, vCache, invFreq, kv, s)
}

func (t *tracer) AddI32(buf runner.Buffer, delta int) error {
	t.begin(costOf(func(be runner.Backend) error { return be.AddI32(buf, delta) }))
	return t.Backend.AddI32(buf, delta)
}

func (t *tracer) SiluMul(out, gateUp runner.Buffer, rows, inter int) error {
	t.begin(costOf(func(be runner.Backend) error { return be.SiluMul(nil, nil, rows, inter) }))
	return t.Backend.SiluMul(out, gateUp, rows, inter)
}

func (t *tracer) GatherLast(out, in runner.Buffer, batch, seqLen, width int) error {
	t.begin(costOf(func(be runner.Backend) error { return be.GatherLast(nil, nil, batch, seqLen, width) }))
	return t.Backend.GatherLast(out, in, batch, seqLen, width)
}

// Argmax: version 2's final pass reads the partials' workspace.
func (t *tracer) Argmax(out, logits runner.Buffer, rows, vocab int) error {
	c := costOf(func(be runner.Backend) error { return be.Argmax(nil, nil, rows, vocab) })
	c.tailBytes = float64(kernels.ArgmaxWorkspaceBytes(rows, vocab)) + 4*float64(rows)
	t.begin(c)
	return t.Backend.Argmax(out, logits, rows, vocab)
}
