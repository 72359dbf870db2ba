package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/kernels"
	"stepbench/runner"
)

// kvFlags are the KV cache's layout (--kv-layout, --page-size,
// --page-order) and a ragged batch's lengths (--context-lens, --kv-fill).
type kvFlags struct {
	layout, order, fill string
	pageSize            int
	contextLens         string
	spec                bench.LengthSpec // --context-lens parsed (check)
	// cacheDType is --kv-cache-dtype, dtype its value (check); scales
	// is --kv-scales.
	cacheDType, scales string
	dtype              kernels.CacheDType
	// scaleReport is an FP8 cache's scales once set (applyKVScales).
	scaleReport *report.KVScales
}

// The --kv-scales sources.
const (
	kvScalesCheckpoint = "checkpoint"
	kvScalesCalibrate  = "calibrate"
)

// defaultKVLayout is the layout a run takes without --kv-layout.
const defaultKVLayout = runner.KVPaged

func (k *kvFlags) register(fs *pflag.FlagSet, ragged bool) {
	fs.StringVar(&k.layout, "kv-layout", defaultKVLayout, "the KV cache's layout: paged (vLLM's: per layer K and V each [pages][page_size][kv_heads][head_dim], a block table per sequence) or contiguous (one [max_seq] stripe per sequence, for comparison)")
	fs.IntVar(&k.pageSize, "page-size", runner.DefaultPageSize, "tokens per page of the paged layout (1, 16, 32, 64, 128 or any up to 65536; 16 is vLLM's on CUDA)")
	fs.StringVar(&k.order, "page-order", runner.PagesSequential, "how the paged layout hands out pages: sequential (each sequence's pages one after another) or shuffled (a permutation of the pool seeded by --seed, as a long-running server's allocator leaves them)")
	if !ragged {
		return
	}
	fs.StringVar(&k.cacheDType, "kv-cache-dtype", "auto", "the KV cache's element type, vLLM's names: auto (the model's bf16), fp8 or fp8_e4m3 (E4M3 bytes with per-layer K and V scales), fp8_e5m2 (E5M2 bytes, scales of 1 unless the checkpoint has some)")
	fs.StringVar(&k.scales, "kv-scales", kvScalesCheckpoint, "an FP8 cache's K and V scales: checkpoint (the checkpoint's k_scale/v_scale under vLLM's names, else 1.0) or calibrate (the first shape's prefill, untimed: amax over 200 for K, 100 for V, as vLLM's)")
	fs.StringVar(&k.contextLens, "context-lens", "", "a ragged batch: each sequence's length instead of --input-len: a list 128,4096,512 (the batch size is its length), uniform:LO-HI or normal:MEAN,SD (drawn per batch size, seeded by --seed, clipped to [1, the model's maximum])")
	fs.StringVar(&k.fill, "kv-fill", bench.KVFillPrefill, "how each sequence's context gets into the cache: prefill (the timed prefill computes all of it) or synthetic (every position but the last holds deterministic values written untimed; the prefill runs each sequence's last token over them: long-context decode without its prefill)")
}

// check validates the flags and parses --context-lens; input says whether
// --input-len was given (it and --context-lens exclude each other).
func (k *kvFlags) check(fs *pflag.FlagSet) error {
	switch k.layout {
	case runner.KVPaged, runner.KVContiguous:
	default:
		return usagef("--kv-layout %q: want %s or %s", k.layout, runner.KVPaged, runner.KVContiguous)
	}
	switch k.order {
	case runner.PagesSequential, runner.PagesShuffled:
	default:
		return usagef("--page-order %q: want %s or %s", k.order, runner.PagesSequential, runner.PagesShuffled)
	}
	if k.pageSize < 1 || k.pageSize > runner.MaxPageSize {
		return usagef("--page-size %d: want 1..%d", k.pageSize, runner.MaxPageSize)
	}
	if k.layout == runner.KVContiguous && (fs.Changed("page-size") || fs.Changed("page-order")) {
		return usagef("--page-size and --page-order describe the paged layout; --kv-layout %s has none", runner.KVContiguous)
	}
	switch k.fill {
	case "", bench.KVFillPrefill, bench.KVFillSynthetic:
	default:
		return usagef("--kv-fill %q: want %s or %s", k.fill, bench.KVFillPrefill, bench.KVFillSynthetic)
	}
	var err error
	if k.dtype, err = kernels.ParseCacheDType(k.cacheDType); err != nil {
		return usagef("--kv-cache-dtype %s: not a KV-cache dtype: want auto, fp8, fp8_e4m3 or fp8_e5m2 (vLLM's names)", k.cacheDType)
	}
	switch k.scales {
	case "", kvScalesCheckpoint, kvScalesCalibrate:
	default:
		return usagef("--kv-scales %q: want %s or %s", k.scales, kvScalesCheckpoint, kvScalesCalibrate)
	}
	if fs.Changed("kv-scales") && !k.dtype.FP8() {
		return usagef("--kv-scales sets an FP8 cache's scales: give --kv-cache-dtype fp8 (or fp8_e4m3, fp8_e5m2)")
	}
	if k.dtype == kernels.CacheE5M2 && k.fill == bench.KVFillSynthetic {
		return usagef("--kv-fill synthetic writes E4M3 bytes: use --kv-cache-dtype fp8_e4m3, or --kv-fill prefill")
	}
	if k.contextLens == "" {
		return nil
	}
	if fs.Changed("input-len") {
		return usagef("--context-lens gives each sequence its length: it replaces --input-len (give one of them)")
	}
	spec, err := bench.ParseLengthSpec(k.contextLens)
	if err != nil {
		return usagef("--context-lens %v", err)
	}
	if spec.List != nil && fs.Changed("batch-size") {
		return usagef("--context-lens %s lists %d sequences: the batch size is its length (leave --batch-size out, or use uniform:LO-HI / normal:MEAN,SD)",
			k.contextLens, len(spec.List))
	}
	k.spec = spec
	return nil
}

// tabled says whether the runs index their cache through a block table
// (the paged layout, or a ragged batch on either layout): the kernel
// versions they resolve to are the block table's (kernels.Selection's
// ResolveLayout).
func (k *kvFlags) tabled() bool {
	return k.layout == runner.KVPaged || k.contextLens != "" || k.dtype.FP8() // an FP8 cache is read through the table only
}

// batchSizes is the run's batch sizes: an explicit --context-lens list's
// length, else --batch-size's.
func (k *kvFlags) batchSizes(batch []int) []int {
	if k.spec.List != nil {
		return []int{len(k.spec.List)}
	}
	return batch
}

// options is the engine's layout; seed orders shuffled pages.
func (k *kvFlags) options(seed uint64) runner.KVOptions {
	o := runner.KVOptions{Layout: k.layout, DType: k.dtype}
	if k.layout == runner.KVPaged {
		o.PageSize, o.Order, o.Seed = k.pageSize, k.order, seed
	}
	return o
}

// apply puts the lengths and the fill into the harness's options.
func (k *kvFlags) apply(opt *bench.Options, cfg runner.Config) {
	opt.BatchSizes = k.batchSizes(opt.BatchSizes)
	opt.ContextLens, opt.MaxPositions = k.spec, cfg.MaxPositionEmbeddings
	if k.fill == bench.KVFillSynthetic {
		opt.KVFill = bench.KVFillSynthetic
	}
}

// describe is the layout as the progress lines name it.
func (k *kvFlags) describe(seed uint64) string {
	s := "KV cache " + k.options(seed).String()
	if k.contextLens != "" {
		s += ", context lengths " + k.contextLens
	}
	if k.fill == bench.KVFillSynthetic {
		s += ", contexts filled synthetically (the prefill runs each sequence's last token)"
	}
	return s
}

// baselineKV is ab's baseline arm's layout (--baseline-kv-layout,
// --baseline-page-size, --baseline-page-order): A's where not given.
type baselineKV struct {
	layout, order string
	pageSize      int
}

func (b *baselineKV) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.layout, "baseline-kv-layout", "", "baseline (B): the KV cache's layout (default: --kv-layout's)")
	fs.IntVar(&b.pageSize, "baseline-page-size", 0, "baseline (B): tokens per page (default: --page-size's)")
	fs.StringVar(&b.order, "baseline-page-order", "", "baseline (B): how pages are handed out (default: --page-order's)")
}

// resolve is B's flags: A's (k) with b's given ones over them, checked as A's.
func (b *baselineKV) resolve(fs *pflag.FlagSet, k kvFlags) (kvFlags, error) {
	kb := k
	if fs.Changed("baseline-kv-layout") {
		kb.layout = b.layout
	}
	if fs.Changed("baseline-page-size") {
		kb.pageSize = b.pageSize
	}
	if fs.Changed("baseline-page-order") {
		kb.order = b.order
	}
	switch {
	case kb.layout != runner.KVPaged && kb.layout != runner.KVContiguous:
		return kb, usagef("--baseline-kv-layout %q: want %s or %s", kb.layout, runner.KVPaged, runner.KVContiguous)
	case kb.order != runner.PagesSequential && kb.order != runner.PagesShuffled:
		return kb, usagef("--baseline-page-order %q: want %s or %s", kb.order, runner.PagesSequential, runner.PagesShuffled)
	case kb.pageSize < 1 || kb.pageSize > runner.MaxPageSize:
		return kb, usagef("--baseline-page-size %d: want 1..%d", kb.pageSize, runner.MaxPageSize)
	}
	return kb, nil
}

// sweep is the run's shapes with their lengths resolved (bench.Options.Shapes).
func sweep(k *kvFlags, s shapeFlags, seed uint64, cfg runner.Config) ([]bench.Shape, error) {
	opt := bench.Options{BatchSizes: s.batch, InputLens: s.input, OutputLens: s.output, Seed: seed}
	k.apply(&opt, cfg)
	shapes, err := opt.Shapes()
	if err != nil {
		return nil, usagef("--context-lens: %v", err)
	}
	return shapes, nil
}

// kvEstimate is the memory of the largest of shapes under the layout: the
// largest batch, prefill and cache (in pages, not batch × positions) of any.
func kvEstimate(cfg runner.Config, l runner.TPLayout, shapes []bench.Shape, kv runner.KVOptions) runner.MemoryEstimate {
	var batch, tokens, maxPages int
	var slots int64
	for _, sh := range shapes {
		seqs := sh.Seqs()
		positions := make([]int, len(seqs))
		for b, q := range seqs {
			positions[b] = q.Context + runner.Positions(q.Prompt, sh.OutputLen)
		}
		n, pages := runner.PlanSize(positions, kv)
		batch, tokens, slots = max(batch, sh.Batch), max(tokens, sh.PromptTokens()), max(slots, int64(n))
		if kv.Paged() || sh.Ragged() || kv.DType.FP8() {
			maxPages = max(maxPages, pages)
		}
	}
	est := runner.EstimateMemorySlots(cfg, l, batch, tokens, slots, maxPages)
	if kv.DType.FP8() {
		est = est.FP8Cache(cfg, l)
	}
	return est
}

// report is the layout as the native report records it.
func (k *kvFlags) report() *report.KVCache {
	r := &report.KVCache{Layout: k.layout, ContextLens: k.contextLens, KVFill: k.fill}
	if r.KVFill == "" {
		r.KVFill = bench.KVFillPrefill
	}
	if k.layout == runner.KVPaged {
		r.PageSize, r.PageOrder = k.pageSize, k.order
	}
	if k.dtype.FP8() {
		r.DType, r.Scales = k.dtype.String(), k.scaleReport
	}
	return r
}

// kvNote is the one line -v prints about the layout.
func kvNote(k *kvFlags, seed uint64) string { return fmt.Sprintf("stepbench: %s", k.describe(seed)) }
