package gpu

import (
	"fmt"
	"math"
	"strings"
	"unsafe"

	"stepbench/cuda"
	"stepbench/internal/input"
	"stepbench/kernels"
	"stepbench/runner"
)

// oplib_kv.go is the op libraries' side of the KV ops (rope_kv_write,
// attn_prefill, attn_decode) in op ABI 2 (include/stepbench_op.h): a
// library takes only the tabled form (the block table, the lengths, the
// slot mapping), declares the page sizes, layouts and dtypes it takes
// (checked when it is loaded: CheckLibKV), and may plan on the host
// (PlanKV) outside captures and timed regions.

var _ runner.KVPlanner = (*Backend)(nil)
var _ runner.KVTableUser = (*Backend)(nil)

// kvOps are the ops whose libraries take the KV view.
var kvOps = []string{kernels.OpRope, kernels.OpAttnPrefill, kernels.OpAttnDecode}

// libsNeedTable reports whether an op library replaces a KV op (ABI 2
// libraries take only the tabled form): Backend.UsesKVTable ORs it in.
func (k *Kernels) libsNeedTable() bool {
	for _, op := range kvOps {
		if k.Replaces(op) {
			return true
		}
	}
	return false
}

// errLibNeedsTable is a contiguous-form call of an op a library replaces:
// the caller should have gone tabled (UsesKVTable).
func (k *Kernels) errLibNeedsTable(op string) error {
	o := k.opLib(op)
	return fmt.Errorf("%s: op library %s takes the block table only (op ABI 2), not the contiguous form's position: run the step tabled (runner.KVTableUser)", op, o.Library().Path)
}

// CheckKV refuses, as bad input, a run whose KV cache, laid out as o, an
// op library's KV op does not take (Kernels.CheckLibKV).
func (c *Backend) CheckKV(o runner.KVOptions) error { return c.set.CheckLibKV(&o) }

// CheckLibKV checks each KV op's library's caps against a run's cache laid
// out as o (capsLacks); o nil is no run's in particular (verify, which
// checks a library at the page sizes it takes): the layout and dtype
// only. The error is one line naming the library with its sha256, marked
// as bad input.
func (k *Kernels) CheckLibKV(o *runner.KVOptions) error {
	for _, op := range kvOps {
		lib := k.opLib(op)
		if lib == nil {
			continue
		}
		if lacks := capsLacks(lib.Caps(), o, lib.Library().ABI); len(lacks) > 0 {
			return input.Bad(fmt.Errorf("op library %s (sha256 %s): op %s does not take %s", lib.Library().Path, lib.Library().SHA256, op, strings.Join(lacks, "; ")))
		}
	}
	return nil
}

// capsLacks is what of a cache laid out as o caps do not take:
// stepbench's NHD layout, the cache's dtype (bf16, or an FP8 format from a
// library built for ABI 2.1, the first to pass the scales), and the page
// size (the contiguous layout's page is a sequence's whole cache, whose
// size varies by run: only caps taking any page size take it); o nil: the
// layout and bf16 only. abi is the library's ABI version.
func capsLacks(caps cuda.OpCaps, o *runner.KVOptions, abi uint32) []string {
	var lacks []string
	if caps.Layouts&cuda.OpKVNHD == 0 {
		lacks = append(lacks, fmt.Sprintf("stepbench's NHD cache layout (it declares %s)", layoutNames(caps.Layouts)))
	}
	switch {
	case o != nil && o.DType.FP8():
		if caps.DTypes&opKVDType(o.DType) == 0 {
			lacks = append(lacks, fmt.Sprintf("an %s KV cache (--kv-cache-dtype %s; it declares %s in caps.kv_dtypes)", o.DType, o.DType, dtypeNames(caps.DTypes)))
		} else if abi&0xffff < 1 {
			lacks = append(lacks, fmt.Sprintf("an %s KV cache's scales (it was built for op ABI %s; FP8 caches need 2.1)", o.DType, cuda.FormatABI(abi)))
		}
	case caps.DTypes&cuda.OpKVBF16 == 0:
		lacks = append(lacks, fmt.Sprintf("stepbench's bf16 cache (it declares %s)", dtypeNames(caps.DTypes)))
	}
	switch {
	case o == nil:
	case !o.Paged() && !caps.AnyPageSize():
		lacks = append(lacks, fmt.Sprintf("the contiguous layout, whose page is a sequence's whole cache (it takes pages of %s: run with --kv-layout paged --page-size %d)",
			pageSizeNames(caps), firstPageSize(caps)))
	case o.Paged():
		ps := o.PageSize
		if ps == 0 {
			ps = runner.DefaultPageSize
		}
		if !caps.TakesPageSize(ps) {
			lacks = append(lacks, fmt.Sprintf("pages of %d tokens (it takes pages of %s: run with --page-size %d)", ps, pageSizeNames(caps), firstPageSize(caps)))
		}
	}
	return lacks
}

func layoutNames(bits uint32) string {
	return bitNames(bits, []uint32{cuda.OpKVNHD, cuda.OpKVHND}, []string{"NHD", "HND"})
}

func dtypeNames(bits uint32) string {
	return bitNames(bits, []uint32{cuda.OpKVBF16, cuda.OpKVFP16, cuda.OpKVFP8E4M3, cuda.OpKVFP8E5M2}, []string{"bf16", "fp16", "fp8 e4m3", "fp8 e5m2"})
}

func bitNames(bits uint32, values []uint32, names []string) string {
	var out []string
	for i, v := range values {
		if bits&v != 0 {
			out = append(out, names[i])
		}
	}
	if rest := bits &^ (values[len(values)-1]<<1 - 1); rest != 0 {
		out = append(out, fmt.Sprintf("unknown bits %#x", rest))
	}
	return strings.Join(out, ", ")
}

// pageSizeNames lists the page sizes caps take ("16, 32", "any multiple of 16").
func pageSizeNames(caps cuda.OpCaps) string {
	if caps.PageSizes == nil {
		if caps.PageSizeMultiple > 1 {
			return fmt.Sprintf("any multiple of %d tokens", caps.PageSizeMultiple)
		}
		return "any size"
	}
	s := make([]string, len(caps.PageSizes))
	for i, p := range caps.PageSizes {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ", ") + " tokens"
}

// firstPageSize is a page size caps take, for the refusal's advice.
func firstPageSize(caps cuda.OpCaps) int {
	if len(caps.PageSizes) > 0 {
		return caps.PageSizes[0]
	}
	return caps.PageSizeMultiple * max(1, runner.DefaultPageSize/caps.PageSizeMultiple)
}

// kvCall is the KV view (tensors 2..8) and fields of a tabled call at a:
// the device view, or with host set a plan call's host copy of it.
type kvCall struct {
	view   []cuda.OpTensor
	kv     *cuda.OpKV
	scales []cuda.OpTensor // an FP8 cache's k_scale and v_scale (tensors 10, 11); nil for bf16
}

// tabledView builds a's view over the caches, laid out as layout
// (cuda.OpKVNHD, stepbench's, or OpKVHND: the same shape, other strides);
// host, when set, holds the values of a plan call (the device pointers
// are then ignored).
func tabledView(kCache, vCache cuda.DevPtr, p KVPtrs, a kernels.AttnShape, host *runner.KVHostView, layout uint32) kvCall {
	T := a.Tokens()
	cache := []int64{int64(a.NumPages), int64(a.PageSize), int64(a.KVHeads), int64(a.HeadDim)}
	var strides []int64 // nil: compact, NHD
	if layout == cuda.OpKVHND {
		strides = []int64{cache[1] * cache[2] * cache[3], cache[3], cache[1] * cache[3], 1}
	}
	dt := cuda.OpBF16
	switch a.Cache {
	case kernels.CacheE4M3:
		dt = cuda.OpFP8E4M3
	case kernels.CacheE5M2:
		dt = cuda.OpFP8E5M2
	}
	view := []cuda.OpTensor{
		{Ptr: kCache, DType: dt, Shape: cache, Strides: strides}, {Ptr: vCache, DType: dt, Shape: cache, Strides: strides},
		i32T(p.BlockTable, a.Batch, a.MaxPages), i32T(p.SeqLens, a.Batch), i32T(p.QueryStart, a.Batch+1),
		i32T(p.Positions, T), opTensor(p.SlotMapping, cuda.OpI64, []int{T}),
	}
	if host != nil {
		view[0].Ptr, view[1].Ptr = 0, 0
		for i, b := range [][]byte{i32Bytes(host.BlockTable), i32Bytes(host.SeqLens), i32Bytes(host.QueryStart), i32Bytes(host.Positions), i64Bytes(host.SlotMapping)} {
			view[2+i].Ptr, view[2+i].Host = 0, b
		}
	}
	maxQ := a.SeqLen
	for _, q := range a.QLens {
		maxQ = max(maxQ, q)
	}
	c := kvCall{view: view, kv: &cuda.OpKV{NumSeqs: a.Batch, NumTokens: T, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim,
		PageSize: a.PageSize, NumPages: a.NumPages, MaxPages: a.MaxPages, MaxQueryLen: maxQ, MaxSeqLen: a.MaxPages * a.PageSize,
		Layout: layout, DType: opKVDType(a.Cache), SoftmaxScale: float32(1 / math.Sqrt(float64(a.HeadDim)))}}
	if a.Cache.FP8() {
		// ABI 2.1: the layer's scales after the view's other operands
		// (appended by ropeTensors and attentionTensors), per KV head.
		c.scales = []cuda.OpTensor{f32T(p.KScale, a.KVHeads), f32T(p.VScale, a.KVHeads)}
		c.kv.QScale = 1
	}
	return c
}

// opKVDType is the ABI's kv_dtype of a cache of dtype c.
func opKVDType(c kernels.CacheDType) uint32 {
	switch c {
	case kernels.CacheE4M3:
		return cuda.OpKVFP8E4M3
	case kernels.CacheE5M2:
		return cuda.OpKVFP8E5M2
	}
	return cuda.OpKVBF16
}

// i32Bytes and i64Bytes are a host view's values as the bytes of a tensor
// ([]byte{} for none: still a host tensor).
func i32Bytes(x []int32) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

func i64Bytes(x []int64) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*len(x))
}

// ropeTensors are rope_kv_write's operands around the view.
func ropeTensors(q, qkv, invFreq cuda.DevPtr, c kvCall, a kernels.AttnShape) []cuda.OpTensor {
	T := a.Tokens()
	t := append([]cuda.OpTensor{bf16T(q, T, a.Heads, a.HeadDim), bf16T(qkv, T, a.Heads+2*a.KVHeads, a.HeadDim)}, c.view...)
	c.kv.QScale = 0 // attention's only
	return append(append(t, f32T(invFreq, a.HeadDim/2)), c.scales...)
}

// attentionTensors are attention's operands around the view; lse 0 is
// absent (not asked for).
func attentionTensors(out, q, lse cuda.DevPtr, c kvCall, a kernels.AttnShape) []cuda.OpTensor {
	T := a.Tokens()
	t := append([]cuda.OpTensor{bf16T(out, T, a.Heads, a.HeadDim), bf16T(q, T, a.Heads, a.HeadDim)}, c.view...)
	l := f32T(lse, T, a.Heads)
	l.Absent = !c.kv.WantLSE
	return append(append(t, l), c.scales...)
}

// checkLibTabled checks a tabled call of a library's KV op: the shape,
// the pointers, and the page size and layout against the library's caps.
func (k *Kernels) checkLibTabled(c *argCheck, o *cuda.Op, a kernels.AttnShape, ptrs map[string]cuda.DevPtr, kv KVPtrs, layout uint32) {
	c.require(a.Tabled(), "the call is not tabled (op ABI 2 takes the block table only)")
	c.positive("batch", a.Batch)
	c.positive("heads", a.Heads)
	c.positive("kvHeads", a.KVHeads)
	c.positive("headDim", a.HeadDim)
	c.positive("numPages", a.NumPages)
	c.positive("maxPages", a.MaxPages)
	c.require(a.KVHeads > 0 && a.Heads%a.KVHeads == 0, "heads = %d is not a multiple of kvHeads = %d", a.Heads, a.KVHeads)
	c.require(o.Caps().TakesPageSize(a.PageSize), "op library %s takes pages of %s, not %d", o.Library().Path, pageSizeNames(o.Caps()), a.PageSize)
	c.require(o.Caps().Layouts&layout != 0, "op library %s takes the %s layouts, not %s", o.Library().Path, layoutNames(o.Caps().Layouts), layoutNames(layout))
	c.require(o.Caps().DTypes&opKVDType(a.Cache) != 0, "op library %s takes %s KV caches, not %s", o.Library().Path, dtypeNames(o.Caps().DTypes), a.Cache)
	if a.Cache.FP8() {
		c.require(o.Library().ABI&0xffff >= 1, "op library %s was built for op ABI %s: an FP8 cache's scales need 2.1", o.Library().Path, cuda.FormatABI(o.Library().ABI))
		c.pointer("k scale", kv.KScale, 4)
		c.pointer("v scale", kv.VScale, 4)
	}
	for name, p := range ptrs {
		c.pointer(name, p, 2)
	}
	c.pointer("block table", kv.BlockTable, 4)
	c.pointer("sequence lengths", kv.SeqLens, 4)
	c.pointer("query starts", kv.QueryStart, 4)
	c.pointer("positions", kv.Positions, 4)
	c.pointer("slot mapping", kv.SlotMapping, 8)
}

// libRopeKVWrite runs rope_kv_write's library on a tabled call; ran is
// false when no library replaces it.
func (k *Kernels) libRopeKVWrite(s *cuda.Stream, q, kCache, vCache, qkv, invFreq cuda.DevPtr, kv KVPtrs, a kernels.AttnShape) (ran bool, err error) {
	return k.libRopeLayout(s, q, kCache, vCache, qkv, invFreq, kv, a, cuda.OpKVNHD)
}

// libRopeLayout is libRopeKVWrite over caches laid out as layout.
func (k *Kernels) libRopeLayout(s *cuda.Stream, q, kCache, vCache, qkv, invFreq cuda.DevPtr, kv KVPtrs, a kernels.AttnShape, layout uint32) (bool, error) {
	o := k.opLib(kernels.OpRope)
	if o == nil {
		return false, nil
	}
	c := argCheck{op: kernels.OpRope}
	k.checkLibTabled(&c, o, a, map[string]cuda.DevPtr{"q": q, "kCache": kCache, "vCache": vCache, "qkv": qkv}, kv, layout)
	c.pointer("invFreq", invFreq, 4)
	c.require(a.HeadDim%2 == 0, "headDim = %d is odd", a.HeadDim)
	if err := c.err(); err != nil || a.Tokens() == 0 {
		return true, err
	}
	call := tabledView(kCache, vCache, kv, a, nil, layout)
	return true, k.runLib(s, o, kernels.OpRope, cuda.OpArgs{KV: call.kv, Tensors: ropeTensors(q, qkv, invFreq, call, a)})
}

// libAttention runs the attention library (attn_prefill or attn_decode,
// by attentionOp) on a tabled call; ran is false when no library replaces
// the op.
func (k *Kernels) libAttention(s *cuda.Stream, out, q, kCache, vCache cuda.DevPtr, kv KVPtrs, a kernels.AttnShape) (ran bool, err error) {
	return k.libAttentionLSE(s, out, q, kCache, vCache, 0, kv, a, cuda.OpKVNHD)
}

// libAttentionLSE is libAttention over caches laid out as layout, writing
// the log-sum-exp into lse ([T, heads] float32) when lse is not 0 (the
// library must declare STEPBENCH_CAP_LSE).
func (k *Kernels) libAttentionLSE(s *cuda.Stream, out, q, kCache, vCache, lse cuda.DevPtr, kv KVPtrs, a kernels.AttnShape, layout uint32) (ran bool, err error) {
	op := libAttentionOp(a)
	o := k.opLib(op)
	if o == nil {
		return false, nil
	}
	c := argCheck{op: op}
	k.checkLibTabled(&c, o, a, map[string]cuda.DevPtr{"out": out, "q": q, "kCache": kCache, "vCache": vCache}, kv, layout)
	if lse != 0 {
		c.pointer("lse", lse, 4)
		c.require(o.Caps().Flags&cuda.OpCapLSE != 0, "op library %s does not declare STEPBENCH_CAP_LSE: the log-sum-exp cannot be asked of it", o.Library().Path)
	}
	if err := c.err(); err != nil || a.Tokens() == 0 {
		return true, err
	}
	call := tabledView(kCache, vCache, kv, a, nil, layout)
	call.kv.WantLSE = lse != 0
	return true, k.runLib(s, o, op, cuda.OpArgs{KV: call.kv, Tensors: attentionTensors(out, q, lse, call, a)})
}

// libAttentionOp is the op a tabled call at a is: attn_decode when every
// sequence brings one new token, else attn_prefill (a varlen prefill,
// chunked or not, with decode rows among its sequences or not).
func libAttentionOp(a kernels.AttnShape) string {
	maxQ := a.SeqLen
	for _, q := range a.QLens {
		maxQ = max(maxQ, q)
	}
	if maxQ > 1 {
		return kernels.OpAttnPrefill
	}
	return kernels.OpAttnDecode
}

// PlanKV is runner.KVPlanner: the engine's host view of a run's prefill
// and first decode step, given at Begin, outside captures and timed
// regions, to the plan entry point of each op library that has one.
func (c *Backend) PlanKV(prefill runner.KVHostView, prefillShape runner.AttnShape, decode runner.KVHostView, decodeShape runner.AttnShape) error {
	if err := c.notCapturing("plan the op libraries"); err != nil {
		return err
	}
	if err := c.set.planLibs(c.stream, prefill, prefillShape, cuda.OpPhasePrefill); err != nil {
		return err
	}
	if decodeShape.Batch == 0 {
		return nil
	}
	return c.set.planLibs(c.stream, decode, decodeShape, cuda.OpPhaseDecode)
}

// planLibs plans the ops a step of shape a runs, rope_kv_write and its
// attention, where a library with a plan replaces them.
func (k *Kernels) planLibs(s *cuda.Stream, view runner.KVHostView, a kernels.AttnShape, phase int) error {
	if !a.Tabled() || a.Batch == 0 {
		return nil
	}
	for _, op := range []string{kernels.OpRope, libAttentionOp(a)} {
		if err := k.planLib(s, op, view, a, phase, false, cuda.OpKVNHD); err != nil {
			return err
		}
	}
	return nil
}

// planLib makes op's library's plan call, if it has one, for a step of
// shape a whose view starts as view over caches laid out as layout;
// wantLSE says whether the run calls will ask for the log-sum-exp.
func (k *Kernels) planLib(s *cuda.Stream, op string, view runner.KVHostView, a kernels.AttnShape, phase int, wantLSE bool, layout uint32) error {
	o := k.opLib(op)
	if o == nil || !o.HasPlan() {
		return nil
	}
	call := tabledView(0, 0, KVPtrs{}, a, &view, layout)
	call.kv.Phase, call.kv.WantLSE = phase, wantLSE && op != kernels.OpRope
	tensors := attentionTensors(0, 0, 0, call, a)
	if op == kernels.OpRope {
		tensors = ropeTensors(0, 0, 0, call, a)
	}
	if err := o.Plan(s, cuda.OpArgs{KV: call.kv, Tensors: tensors}); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}
