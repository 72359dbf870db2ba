package runner

import (
	"fmt"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// fp8Format is the twins' name of an FP8 cache's byte format.
func fp8Format(c kernels.CacheDType) ref.FP8Cache {
	if c == kernels.CacheE5M2 {
		return ref.CacheE5M2
	}
	return ref.CacheE4M3
}

// fp8Caches are an FP8 step's caches (bytes) and its layer's scales, read
// from their buffers and checked against s.
type fp8Caches struct {
	k, v           []uint8
	kScale, vScale []float32
}

func cpuFP8Caches(kCache, vCache Buffer, kv KVView, s AttnShape, op string) (fp8Caches, error) {
	var c fp8Caches
	if !s.Tabled() {
		return c, fmt.Errorf("%s: an FP8 cache (%s) is read through a block table only", op, s.Cache)
	}
	n := s.CacheSlots() * s.KVHeads * s.HeadDim
	for i, b := range []Buffer{kCache, vCache} {
		cb, err := asCPU(b, F8E4M3, op+" "+[]string{"k", "v"}[i]+" cache")
		if err != nil {
			return c, err
		}
		if len(cb.u8) < n {
			return c, fmt.Errorf("%s: %s cache holds %d bytes, need %d", op, []string{"k", "v"}[i], len(cb.u8), n)
		}
		if i == 0 {
			c.k = cb.u8[:n]
		} else {
			c.v = cb.u8[:n]
		}
	}
	for i, b := range []Buffer{kv.KScale, kv.VScale} {
		name := []string{"k_scale", "v_scale"}[i]
		if b == nil {
			return c, fmt.Errorf("%s: an FP8 cache without its %s", op, name)
		}
		cb, err := asCPU(b, F32, op+" "+name)
		if err != nil {
			return c, err
		}
		if len(cb.f32) < s.KVHeads {
			return c, fmt.Errorf("%s: %s holds %d, need one per KV head (%d)", op, name, len(cb.f32), s.KVHeads)
		}
		for g, x := range cb.f32[:s.KVHeads] {
			if !(x > 0) || x > 1e30 {
				return c, fmt.Errorf("%s: %s of KV head %d is %v (want positive and finite)", op, name, g, x)
			}
		}
		if i == 0 {
			c.kScale = cb.f32[:s.KVHeads]
		} else {
			c.vScale = cb.f32[:s.KVHeads]
		}
	}
	return c, nil
}

// ropeKVWriteFP8 is RopeKVWrite into an FP8 cache
// (ref.RopeKVWritePagedFP8).
func (*CPU) ropeKVWriteFP8(q, kCache, vCache, qkv, invFreq Buffer, kv KVView, s AttnShape) error {
	const op = "rope_kv_write"
	T, D := s.Tokens(), s.HeadDim
	caches, err := cpuFP8Caches(kCache, vCache, kv, s, op)
	if err != nil {
		return err
	}
	bs, err := bf16s(op, []Buffer{q, qkv}, []int{T * s.Heads * D, T * (s.Heads + 2*s.KVHeads) * D}, 1)
	if err != nil {
		return err
	}
	fb, err := asCPU(invFreq, F32, op+" inv_freq")
	if err != nil {
		return err
	}
	if len(fb.f32) < D/2 {
		return fmt.Errorf("%s: %d inverse frequencies for head_dim %d", op, len(fb.f32), D)
	}
	pb, err := asCPU(kv.Positions, I32, op+" positions")
	if err != nil {
		return err
	}
	sb, err := asCPU(kv.SlotMapping, I64, op+" slot mapping")
	if err != nil {
		return err
	}
	if len(pb.i32) < T || len(sb.i64) < T {
		return fmt.Errorf("%s: %d positions and %d slots for %d tokens", op, len(pb.i32), len(sb.i64), T)
	}
	for t := range T {
		if pb.i32[t] < 0 || sb.i64[t] >= int64(s.CacheSlots()) {
			return fmt.Errorf("%s: token %d at position %d, slot %d of %d", op, t, pb.i32[t], sb.i64[t], s.CacheSlots())
		}
	}
	ref.RopeKVWritePagedFP8(bs[0], caches.k, caches.v, bs[1], fb.f32, pb.i32, sb.i64, T, s.Heads, s.KVHeads, D, s.CacheSlots(),
		fp8Format(s.Cache), caches.kScale, caches.vScale)
	return nil
}

// attentionFP8 is Attention over an FP8 cache (ref.AttentionPagedFP8),
// shared among the cores as attentionPaged.
func (c *CPU) attentionFP8(out, q, kCache, vCache Buffer, kv KVView, s AttnShape) error {
	const op = "attention"
	T, D := s.Tokens(), s.HeadDim
	caches, err := cpuFP8Caches(kCache, vCache, kv, s, op)
	if err != nil {
		return err
	}
	bs, err := bf16s(op, []Buffer{out, q}, []int{T * s.Heads * D, T * s.Heads * D}, 1)
	if err != nil {
		return err
	}
	view, err := cpuView(kv, s, op)
	if err != nil {
		return err
	}
	per := max(1, T/(8*c.workers))
	c.parallel((T+per-1)/per, T*s.KVTokens()/max(1, s.Batch)*s.Heads*s.HeadDim, func(i int) {
		rows := make([]int, 0, per)
		for t := i * per; t < min(T, (i+1)*per); t++ {
			rows = append(rows, t)
		}
		ref.AttentionPagedFP8(bs[0], bs[1], caches.k, caches.v, view, s.Heads, s.KVHeads, s.HeadDim, rows,
			fp8Format(s.Cache), caches.kScale, caches.vScale)
	})
	return nil
}
