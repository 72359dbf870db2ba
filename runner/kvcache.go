package runner

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"stepbench/kernels"
)

// The KV cache's layouts. Paged is what serving engines run (vLLM's
// FlashAttention backend: per layer, K and V each a pool of pages
// [num_pages][page_size][kv_heads][head_dim], every sequence's pages listed
// in a block table); contiguous is one [batch][max_seq] stripe per sequence,
// kept for comparison and for the kernels that predate pages.
const (
	KVPaged      = "paged"
	KVContiguous = "contiguous"
)

// The orders in which a paged run's sequences get their pages: one after
// another (sequential), or a seeded permutation of the whole pool
// (shuffled), as a long-running server's allocator leaves them.
const (
	PagesSequential = "sequential"
	PagesShuffled   = "shuffled"
)

// DefaultPageSize is vLLM's block size on CUDA.
const DefaultPageSize = 16

// MaxPageSize bounds --page-size (the largest vLLM offers is 128; FA3
// takes any; beyond a few thousand a page is a contiguous stripe).
const MaxPageSize = 1 << 16

// KVOptions is how the engine lays its cache out. The zero value is the
// contiguous layout.
type KVOptions struct {
	Layout   string // KVPaged or KVContiguous ("" is contiguous)
	PageSize int    // tokens per page (paged; 0 is DefaultPageSize)
	Order    string // PagesSequential ("") or PagesShuffled
	Seed     uint64 // the shuffled order's permutation
	// PoisonTable fills the block table's entries past each sequence's
	// pages (and a padded row's) with the first page id past the pool
	// instead of vLLM's zeros, so that a kernel reading past a sequence's
	// pages faults instead of reading another sequence's (verify, tests).
	PoisonTable bool
	// DType is the caches' element type: bf16 (the zero value) or FP8
	// bytes with per-layer K and V scales (Engine.SetKVScales).
	DType kernels.CacheDType
}

// Paged reports whether the layout is paged.
func (o KVOptions) Paged() bool { return o.Layout == KVPaged }

// Validate names what is wrong with o.
func (o KVOptions) Validate() error {
	switch o.Layout {
	case "", KVContiguous, KVPaged:
	default:
		return fmt.Errorf("kv layout %q: want %s or %s", o.Layout, KVPaged, KVContiguous)
	}
	switch o.Order {
	case "", PagesSequential, PagesShuffled:
	default:
		return fmt.Errorf("page order %q: want %s or %s", o.Order, PagesSequential, PagesShuffled)
	}
	if o.DType > kernels.CacheE5M2 {
		return fmt.Errorf("kv cache dtype %v: want auto, fp8_e4m3 or fp8_e5m2", o.DType)
	}
	if o.PageSize < 0 || o.PageSize > MaxPageSize {
		return fmt.Errorf("page size %d: want 1..%d", o.PageSize, MaxPageSize)
	}
	return nil
}

// String is the layout as reports name it: "paged 16 shuffled", "contiguous".
func (o KVOptions) String() string {
	layout := KVContiguous
	if o.Paged() {
		layout = strings.Join([]string{KVPaged, fmt.Sprint(o.pageSize()), o.order()}, " ")
	}
	if o.DType.FP8() {
		layout += " " + o.DType.String()
	}
	return layout
}

func (o KVOptions) pageSize() int {
	if o.PageSize == 0 {
		return DefaultPageSize
	}
	return o.PageSize
}

func (o KVOptions) order() string {
	if o.Order == "" {
		return PagesSequential
	}
	return o.Order
}

// SeqSpec is one sequence of a run: Context tokens already in its cache
// when the run begins (a deterministic fill, never computed: the way to
// reach a long context without timing its prefill) and Prompt new tokens
// that the prefill runs over them (bottom-right causal: chunked prefill
// when Context > 0).
type SeqSpec struct {
	Context, Prompt int
}

// Uniform reports whether every sequence is the same and none has a
// context: the batch today's contiguous kernels take.
func Uniform(seqs []SeqSpec) bool {
	for _, s := range seqs {
		if s != seqs[0] || s.Context != 0 {
			return false
		}
	}
	return len(seqs) > 0
}

// KVPlan is a run's cache geometry and block table, made on the host at
// Begin. The contiguous layout is one page of MaxSeq positions per
// sequence (PageSize = MaxSeq, NumPages = batch, table [b] = b).
type KVPlan struct {
	PageSize, NumPages, MaxPages int
	// Pages is each sequence's page count (the table's live entries).
	Pages []int
	// Table is [batch][MaxPages] int32.
	Table []int32
}

// PlanSize is PlanKV's slots per layer and pages per sequence, without
// making its table (for memory estimates).
func PlanSize(positions []int, o KVOptions) (slots, maxPages int) {
	longest := 1
	for _, n := range positions {
		longest = max(longest, n)
	}
	if !o.Paged() {
		return len(positions) * longest, 1
	}
	ps := o.pageSize()
	for _, n := range positions {
		slots += (max(n, 1) + ps - 1) / ps * ps
	}
	return slots, (longest + ps - 1) / ps
}

// PlanKV lays out sequences that each write up to positions[b] positions
// (context, prompt and the decode steps' tokens) under o: a pool of
// exactly the pages they need, handed out in o's order; contiguous, one
// page of max(positions) per sequence.
func PlanKV(positions []int, o KVOptions) KVPlan {
	batch := len(positions)
	longest := 1
	for _, n := range positions {
		longest = max(longest, n)
	}
	if !o.Paged() {
		p := KVPlan{PageSize: longest, NumPages: batch, MaxPages: 1, Pages: make([]int, batch), Table: make([]int32, batch)}
		for b := range batch {
			p.Pages[b], p.Table[b] = 1, int32(b)
		}
		return p
	}
	ps := o.pageSize()
	p := KVPlan{PageSize: ps, MaxPages: (longest + ps - 1) / ps, Pages: make([]int, batch)}
	for b, n := range positions {
		p.Pages[b] = (max(n, 1) + ps - 1) / ps
		p.NumPages += p.Pages[b]
	}
	pool := make([]int32, p.NumPages)
	for i := range pool {
		pool[i] = int32(i)
	}
	if o.order() == PagesShuffled {
		r := rand.New(rand.NewPCG(o.Seed, 0x9a9e5))
		r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	}
	p.Table = make([]int32, batch*p.MaxPages)
	if o.PoisonTable {
		for i := range p.Table {
			// The first page past the pool: its slots start where the
			// cache's allocation ends, so a read of one faults at once on
			// the emulated device's guard page after it (an id far past
			// the pool may land in another live allocation by chance).
			p.Table[i] = int32(p.NumPages)
		}
	}
	next := 0
	for b := range batch {
		for i := range p.Pages[b] {
			p.Table[b*p.MaxPages+i] = pool[next]
			next++
		}
	}
	return p
}

// Slot is the cache slot of position j of sequence b, −1 past its pages.
func (p KVPlan) Slot(b, j int) int64 {
	if j/p.PageSize >= p.Pages[b] {
		return -1
	}
	return int64(p.Table[b*p.MaxPages+j/p.PageSize])*int64(p.PageSize) + int64(j%p.PageSize)
}

// Slots is the token rows one layer's K (or V) cache holds.
func (p KVPlan) Slots() int { return p.NumPages * p.PageSize }

// KVView is where a step's attention finds the batch's view of the cache
// on the backend: every buffer but Pos only for a tabled step
// (AttnShape.Tabled), set by the engine before the step and, for a decode
// step, moved on by Backend.AdvanceKV on the device at its end, so that a
// captured step replays at every position.
type KVView struct {
	Pos         Buffer // I32[1]: the uniform start position (the contiguous kernels)
	BlockTable  Buffer // I32[batch·MaxPages]
	SeqLens     Buffer // I32[batch]: each sequence's tokens after the step's write
	QueryStart  Buffer // I32[batch+1]: vLLM's query_start_loc
	Positions   Buffer // I32[T]: each new token's position
	SlotMapping Buffer // I64[T]: each new token's cache slot (negative: padding, not written)
	// KScale and VScale are an FP8 cache's layer's dequantization
	// multipliers, F32[KVHeads] (x ≈ byte · scale); nil for a bf16 cache.
	// The engine sets them per layer (KVView.Layer).
	KScale, VScale Buffer
}

// Layer is v with layer l's scales of an FP8 cache (none: v).
func (v KVView) Layer(kScales, vScales []Buffer, l int) KVView {
	if kScales != nil {
		v.KScale, v.VScale = kScales[l], vScales[l]
	}
	return v
}

// kvStep is the host's side of a tabled step's view: what the engine
// uploads into a KVView.
type kvStep struct {
	seqLens, queryStart, positions []int32
	slots                          []int64
}

// stepView is the view of a step in which sequence b brings newTokens[b]
// tokens after cached[b].
func (p KVPlan) stepView(cached, newTokens []int) kvStep {
	batch := len(cached)
	v := kvStep{seqLens: make([]int32, batch), queryStart: make([]int32, batch+1)}
	for b := range batch {
		v.seqLens[b] = int32(cached[b] + newTokens[b])
		v.queryStart[b+1] = v.queryStart[b] + int32(newTokens[b])
		for i := range newTokens[b] {
			v.positions = append(v.positions, int32(cached[b]+i))
			v.slots = append(v.slots, p.Slot(b, cached[b]+i))
		}
	}
	return v
}

// KVHostView is the host's copy of a tabled step's view (KVView's
// buffers' contents when the step begins).
type KVHostView struct {
	BlockTable, SeqLens, QueryStart, Positions []int32
	SlotMapping                                []int64
}

// KVPlanner is implemented by backends that prepare a tabled run's steps on
// the host before they run (an op library's plan entry point, FlashInfer's
// plan): the engine calls PlanKV at Begin, after uploading the views,
// outside any timed region or capture, with the prefill's view and shape
// and the first decode step's (decode.Batch 0 when the run has no decode
// step). Later decode steps move their view on the device (AdvanceKV): a
// plan must stay valid for them, as a captured step's launches do.
type KVPlanner interface {
	PlanKV(prefill KVHostView, prefillShape AttnShape, decode KVHostView, decodeShape AttnShape) error
}

func (v kvStep) host(table []int32) KVHostView {
	return KVHostView{BlockTable: table, SeqLens: v.seqLens, QueryStart: v.queryStart, Positions: v.positions, SlotMapping: v.slots}
}
