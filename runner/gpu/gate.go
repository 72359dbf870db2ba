package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// RunShape is one shape of a timed run: Batch sequences of InputLen prompt
// tokens generating OutputLen tokens (the prefill's included), as the engine
// runs it: the KV cache holds InputLen+OutputLen positions, the prefill
// starts at position 0 and decode step k at InputLen+k.
//
// Seqs, when set, are a ragged run's own sequences (runner.Engine.BeginSeqs:
// each its context and prompt; Batch is then their count and InputLen
// their mean), and KV the cache's layout (the zero value: contiguous). A run the engine
// takes through the block table (the paged layout, a ragged batch, or a
// selection of the table's kernel versions: RunShape.tabled) is checked at
// its own table, lengths and slots (gate_paged.go).
type RunShape struct {
	Batch, InputLen, OutputLen int
	Seqs                       []runner.SeqSpec
	KV                         runner.KVOptions
}

// maxSeq is the engine's cache length for the shape (runner.Engine.Begin).
func (s RunShape) maxSeq() int { return s.InputLen + s.OutputLen }

// decodePositions are the first, a middle and the last decode step's
// StartPos (the cache length before the step), without repeats.
func (s RunShape) decodePositions() []int {
	if s.OutputLen < 2 {
		return nil
	}
	first, last := s.InputLen, s.InputLen+s.OutputLen-2
	var out []int
	for _, p := range []int{first, (first + last) / 2, last} {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Budgets that keep the Go references of a check at a large run shape to a
// few seconds: the kernel always runs at the whole shape; a row-wise op's
// tensors are capped at gateMaxElements (beyond a few thousand rows the
// launch geometry no longer changes: grid-stride kernels cap their grid at
// the SM count, the others run one block per row), and prefill attention's
// reference computes a sample of query rows once the whole would cost more
// than gateAttentionFLOPs.
const (
	gateMaxElements    = 1 << 25
	gateAttentionFLOPs = 2e9
)

// checkForFamily is the Verifier check of each kernel family (Only's names).
func checkForFamily(family string) string {
	switch {
	case strings.HasPrefix(family, "attn_"):
		return "attention"
	case strings.HasPrefix(family, "rope_kv_write"):
		return "rope_kv_write"
	case family == "argmax_keys" || family == "key_index":
		return "argmax_keys"
	case strings.HasPrefix(family, "argmax"):
		return "argmax"
	case strings.HasPrefix(family, "fp8_"):
		return "fp8"
	case strings.HasPrefix(family, "gemv_fp8"):
		return "linear_fp8"
	case strings.HasPrefix(family, "gemv"):
		return "linear"
	case strings.HasPrefix(family, "gather_last"):
		return "gather_last"
	case strings.HasPrefix(family, "moe_"):
		return "moe"
	}
	return family
}

// ChecksForSources are the checks that cover the kernels of the named source
// files: every check for common.cu (every kernel includes it) or a file
// no kernel of the registry lives in.
func ChecksForSources(files []string) []string {
	bySource := map[string][]string{}
	for _, f := range kernels.Families() {
		bySource[f.Source] = append(bySource[f.Source], checkForFamily(f.Name))
	}
	var out []string
	for _, file := range files {
		checks, known := bySource[file]
		if file == kernels.CommonSource || !known {
			return slices.Clone(VerifyKernelNames)
		}
		out = append(out, checks...)
	}
	return withDecodeGraph(out)
}

// ChecksForOps are the checks of the ops a selection pins a version of or
// op libraries replace (every op but attention's two and launch has a check
// of its name; launch's is the captured decode step, kernels launched one
// after another as a run launches them).
func ChecksForOps(ops []string) []string {
	var out []string
	for _, op := range ops {
		switch op {
		case kernels.OpAttnPrefill, kernels.OpAttnDecode:
			out = append(out, "attention")
		case kernels.OpLaunch:
			out = append(out, "decode_graph")
		default:
			out = append(out, op)
		}
	}
	return withDecodeGraph(out)
}

// withDecodeGraph adds the captured decode step's check where its kernels
// (rope_kv_write, attention, kv_advance) are checked, and sorts without
// repeats.
func withDecodeGraph(checks []string) []string {
	if slices.Contains(checks, "attention") || slices.Contains(checks, "rope_kv_write") || slices.Contains(checks, "kv_advance") {
		checks = append(checks, "decode_graph")
	}
	slices.Sort(checks)
	return slices.Compact(checks)
}

// VerifyRunShapes checks the named kernels (Only's names) at the shapes a
// run is about to time, before it times them: prefill at every batch × input
// length, decode at the first, a middle and the last position of every
// shape, in the versions the run's selection picks there, plus attention's
// fixed edge cases (VerifyAll's); dummy weights, add_i32 and argmax_keys as
// VerifyAll checks them. graphs adds the captured decode step replayed
// over each shape's positions.
func (v *Verifier) VerifyRunShapes(m kernels.ModelShape, shapes []RunShape, checks []string, graphs bool) ([]CheckResult, error) {
	if err := v.Only(checks...); err != nil {
		return nil, err
	}
	if len(checks) == 0 {
		return nil, errors.New("verify run shapes: no checks named")
	}
	v.results = nil
	shapes = slices.Clone(shapes)
	for i, s := range shapes {
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("verify run shapes: %w", err)
		}
		shapes[i] = s.normalized()
	}
	contiguous, tabled := v.splitTabled(shapes)
	v.gateRowWise(m, shapes)
	if v.wants("attention") {
		for _, a := range attentionShapes(nil, false) {
			v.gateAttention(a)
		}
		for _, a := range runAttentionShapes(m, contiguous) {
			v.gateAttention(a)
		}
	}
	v.verifyLibKVSuite([]kernels.ModelShape{m}, RunPageSizes(shapes)...) // op libraries' KV ops: verify_oplib_kv.go
	if v.wants("decode_graph") && graphs {
		for _, s := range contiguous {
			if s.OutputLen >= 2 && v.dead == nil {
				v.gateDecodeGraph(m, s)
			}
		}
	}
	for _, s := range tabled {
		v.gatePaged(m, s, graphs)
	}
	if v.wants("add_i32") && v.dead == nil {
		v.verifyAddI32()
	}
	if v.wants("fill_dummy") && v.dead == nil {
		v.verifyFillDummy()
	}
	if v.wants("argmax_keys") && v.dead == nil {
		v.verifyArgmaxKeys(m)
	}
	if v.dead != nil {
		v.results = append(v.results, CheckResult{Check: "remaining checks", Err: ErrContextLost})
	}
	return v.results, nil
}

// runAttentionShapes are the attention calls of the shapes: each prefill
// and the decode steps at decodePositions.
func runAttentionShapes(m kernels.ModelShape, shapes []RunShape) []kernels.AttnShape {
	var out []kernels.AttnShape
	add := func(a kernels.AttnShape) {
		if !slices.ContainsFunc(out, a.Same) {
			out = append(out, a)
		}
	}
	for _, s := range shapes {
		base := kernels.AttnShape{Batch: s.Batch, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, MaxSeq: s.maxSeq()}
		prefill := base
		prefill.SeqLen = s.InputLen
		add(prefill)
		for _, p := range s.decodePositions() {
			d := base
			d.SeqLen, d.StartPos = 1, p
			add(d)
		}
	}
	return out
}

// gateRowWise checks the ops whose work is rows of the model's widths at
// the shapes' row counts: the prefill's batch×input rows and a decode
// step's batch rows.
func (v *Verifier) gateRowWise(m kernels.ModelShape, shapes []RunShape) {
	var rows, batches []int
	for _, s := range shapes {
		for _, r := range []int{s.tokens(), s.Batch} {
			if !slices.Contains(rows, r) {
				rows = append(rows, r)
			}
		}
		if !slices.Contains(batches, s.Batch) {
			batches = append(batches, s.Batch)
		}
	}
	for _, r := range rows {
		if v.wants("embed") && v.dead == nil {
			v.embedAt(m, capRows(r, m.Hidden), r)
		}
		for _, withAdd := range []bool{true, false} {
			if v.wants("add_rmsnorm") && v.dead == nil {
				v.addRMSNormAt(m, capRows(r, m.Hidden), withAdd, r)
			}
		}
		if v.wants("silu_mul") && v.dead == nil {
			v.siluMulAt(m, capRows(r, 2*m.Inter), r)
		}
		if v.wants("qk_norm") && v.dead == nil && (m.QKNorm || m.QKVBias) {
			v.qkNormAt(m, capRows(r, (m.Heads+2*m.KVHeads)*m.HeadDim), r)
		}
		if v.wants("linear") && v.dead == nil {
			v.libLinearAt(m, r)
		}
		if v.wants("gemm") {
			v.gateGemm(m, r)
		}
	}
	for _, s := range shapes {
		if s.tabled(v.set.Selection()) {
			continue // gatePaged checks its gather and rope_kv_write
		}
		if v.wants("gather_last") && s.InputLen > 1 && v.dead == nil {
			v.gatherLastAt(m, capRows(s.Batch, s.InputLen*m.Hidden), s.InputLen, m.Hidden)
		}
		if v.wants("rope_kv_write") {
			for _, a := range runAttentionShapes(m, []RunShape{s}) {
				v.gateRope(m, a)
			}
		}
	}
	for _, b := range batches {
		if v.wants("argmax") && v.dead == nil {
			v.gateArgmax(m, b)
		}
		if v.wants("linear") && v.dead == nil {
			v.gateLinear(m, b)
		}
	}
}

// capRows is rows, or fewer so that rows×width stays within gateMaxElements.
func capRows(rows, width int) int {
	return max(1, min(rows, gateMaxElements/max(width, 1)))
}

// rowsLabel names a row count in a check's shape, saying when it was capped.
func rowsLabel(rows, of int) string {
	if rows == of {
		return fmt.Sprintf("rows=%d", rows)
	}
	return fmt.Sprintf("rows=%d (of the run's %d: capped)", rows, of)
}

func (v *Verifier) gateRope(m kernels.ModelShape, a kernels.AttnShape) {
	if v.dead != nil || v.libRopeAt(m, a) { // an op library's: the tabled form
		return
	}
	ver, err := v.set.Selection().RopeVersion(a.HeadDim)
	if err != nil || v.dead != nil {
		return // the run cannot use this op at these shapes either
	}
	if a.Tokens()*(a.Heads+2*a.KVHeads)*a.HeadDim > gateMaxElements {
		return // a prefill too large to draw in Go: its decode steps are checked
	}
	v.verifyRopeAt(v.pinned(kernels.OpRope, ver), v.checkName(kernels.OpRope, "rope_kv_write", ver), m, a)
}

func (v *Verifier) gateArgmax(m kernels.ModelShape, batch int) {
	ver, err := v.set.Selection().ArgmaxVersion(m.Vocab)
	if err != nil {
		return
	}
	rows := capRows(batch, m.Vocab)
	logits := RandomBF16(v.rng, rows*m.Vocab, 0, 3)
	logits[m.Vocab-1] = 0x4300 // the first row's maximum in its last element
	want := make([]int32, rows)
	ref.Argmax(want, logits, rows, m.Vocab)
	got := v.runArgmax(v.pinned(kernels.OpArgmax, ver), logits, rows, m.Vocab)
	v.record(v.checkName(kernels.OpArgmax, "argmax", ver), fmt.Sprintf("%s %s vocab=%d", m.Name, rowsLabel(rows, batch), m.Vocab), 0, true, equalBits(got, want))
}

// gateAttention checks the attention version the selection picks at a.
func (v *Verifier) gateAttention(a kernels.AttnShape) {
	if v.dead != nil || v.libAttentionAt(a) { // an op library's: the tabled form
		return
	}
	op, name := kernels.OpAttnDecode, "attention decode"
	ver, err := v.set.Selection().DecodeVersion(a)
	if a.SeqLen > 1 {
		op, name = kernels.OpAttnPrefill, "attention prefill"
		ver, err = v.set.Selection().PrefillVersion(a)
	}
	if err != nil || ver == kernels.TabledVersion(op) {
		return // no version takes the shape: neither can the run (the table's: gatePaged)
	}
	c, label := v.newSampledAttentionCase(a)
	v.verifySampledAttention(v.pinned(op, ver), v.checkName(op, name, ver), c, label)
}

// sampledAttentionCase is an attention case whose reference holds the rows
// of tokens only (nil: every row).
type sampledAttentionCase struct {
	attentionCase
	tokens []int
}

// newSampledAttentionCase draws a's inputs and computes the reference of
// every row when that costs at most gateAttentionFLOPs, else of a sample
// (sampleQueryTokens); label names the sample for the table.
func (v *Verifier) newSampledAttentionCase(a kernels.AttnShape) (*sampledAttentionCase, string) {
	tokens := sampleQueryTokens(a, gateAttentionFLOPs, v.rng.Uint64())
	c := &sampledAttentionCase{tokens: tokens, attentionCase: *v.drawAttentionInputs(a)}
	ref.AttentionTokens(c.want, c.q, c.kCache, c.vCache, a.Batch, a.SeqLen, a.StartPos, a.Heads, a.KVHeads, a.HeadDim, a.MaxSeq, tokens)
	label := FormatShape(a)
	if tokens != nil {
		label += fmt.Sprintf(" (%d of %d query rows compared, every row written)", len(tokens), a.Tokens())
	}
	return c, label
}

// attentionFLOPs is the reference's work for the listed tokens of a.
func attentionFLOPs(a kernels.AttnShape, tokens []int) float64 {
	perKey := float64(4 * a.Heads * a.HeadDim)
	total := 0.0
	for _, t := range tokens {
		total += perKey * float64(a.StartPos+t%a.SeqLen+1)
	}
	return total
}

// sampleQueryTokens is nil when the reference of every row of a costs at
// most budget FLOPs; else the rows worth most per FLOP, within the budget:
// each sequence's first and last rows, the rows on either side of every
// 64-row tile edge of the first and last sequences (where tiling bugs
// live), then rows drawn at random.
func sampleQueryTokens(a kernels.AttnShape, budget float64, seed uint64) []int {
	all := make([]int, a.Tokens())
	for t := range all {
		all[t] = t
	}
	if attentionFLOPs(a, all) <= budget {
		return nil
	}
	var picked []int
	spent := 0.0
	take := func(b, s int) {
		if b < 0 || b >= a.Batch || s < 0 || s >= a.SeqLen {
			return
		}
		t := b*a.SeqLen + s
		cost := attentionFLOPs(a, []int{t})
		if slices.Contains(picked, t) || spent+cost > budget {
			return
		}
		picked, spent = append(picked, t), spent+cost
	}
	for b := 0; b < a.Batch; b++ {
		take(b, 0)
		take(b, a.SeqLen-1)
	}
	for _, b := range []int{0, a.Batch - 1} {
		for edge := 64; edge < a.SeqLen; edge += 64 {
			take(b, edge-1)
			take(b, edge)
		}
	}
	state := seed | 1
	for tries := 0; tries < 4*a.Tokens() && spent < budget; tries++ {
		state = state*6364136223846793005 + 1442695040888963407
		t := int((state >> 17) % uint64(a.Tokens()))
		take(t/a.SeqLen, t%a.SeqLen)
	}
	slices.Sort(picked)
	return picked
}

// verifySampledAttention runs one attention version over the whole shape
// and compares the sampled rows with the reference; every row must be
// written (no poison left anywhere).
func (v *Verifier) verifySampledAttention(set *Kernels, check string, c *sampledAttentionCase, label string) {
	got, want := v.runAttention(set, &c.attentionCase), c.want
	if c.tokens != nil {
		width := c.a.Heads * c.a.HeadDim
		if err := allWritten(got, width); err != nil {
			v.record(check, label, 0, false, err)
			return
		}
		got, want = pickRows(got, c.tokens, width), pickRows(c.want, c.tokens, width)
	}
	rel, err := closeBF16(got, want)
	v.record(check, label, rel, false, err)
}

// allWritten fails at the first output row still holding the poison.
func allWritten(out []uint16, width int) error {
	for i, x := range out {
		if x == poisonBF16 {
			return fmt.Errorf("output row %d element %d was never written (still the NaN poison)", i/width, i%width)
		}
	}
	return nil
}

// pickRows gathers the listed rows of a [rows][width] tensor.
func pickRows(x []uint16, rows []int, width int) []uint16 {
	out := make([]uint16, 0, len(rows)*width)
	for _, r := range rows {
		out = append(out, x[r*width:(r+1)*width]...)
	}
	return out
}

// gateDecodeGraph replays a captured decode step over every position of the
// shape's decode steps, comparing at its first, middle and last.
func (v *Verifier) gateDecodeGraph(m kernels.ModelShape, s RunShape) {
	if s.Batch*s.maxSeq()*m.KVHeads*m.HeadDim > gateMaxElements {
		return // caches too large to draw in Go: the decode steps were checked one by one
	}
	v.decodeGraphAt(m, s.Batch, s.InputLen, s.OutputLen-1, s.maxSeq(), s.decodePositions())
}

// VerifyRunShapes checks the named kernels at the shapes a run is about to
// time (Verifier.VerifyRunShapes) on this backend's device, with decode
// graphs when the backend captures them.
func (c *Backend) VerifyRunShapes(m kernels.ModelShape, shapes []RunShape, checks []string, seed uint64, counters string) ([]CheckResult, error) {
	if err := c.notCapturing("verify run shapes"); err != nil {
		return nil, err
	}
	v := NewVerifier(c.ctx, c.stream, c.set, seed)
	if counters != "" {
		v.CountAccesses(counters)
	}
	if slices.Contains(checks, "gemm") {
		v.gemmLt = c.linearLt
	}
	results, err := v.VerifyRunShapes(m, shapes, checks, c.info.GraphsEnabled)
	if closeErr := v.Close(); closeErr != nil && err == nil {
		err = fmt.Errorf("verify run shapes: %w", closeErr)
	}
	return results, err
}
