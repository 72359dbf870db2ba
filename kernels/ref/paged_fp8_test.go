package ref

import (
	"math"
	"testing"
)

// Every finite E5M2 value converts back to its own bits; the halfway
// points round to the even neighbour; the range saturates.
func TestE5M2(t *testing.T) {
	for b := range 256 {
		v := E5M2ToF32(uint8(b))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		if got := F32ToE5M2(v); got != uint8(b) && !(v == 0 && got&0x7f == 0) {
			t.Errorf("E5M2 %#02x = %v converts back to %#02x", b, v, got)
		}
	}
	for _, tc := range []struct {
		in   float32
		want uint8
	}{
		{1.125, 0x3c}, // halfway 1 and 1.25: even (1)
		{1.375, 0x3e}, // halfway 1.25 and 1.5: even (1.5)
		{57344, 0x7b}, // the largest finite
		{1e9, 0x7b},   // saturated
		{float32(math.Inf(-1)), 0xfb},
		{1.0 / 65536, 0x01},  // the least subnormal
		{1.0 / 131072, 0x00}, // its half: to even, zero
		{float32(math.NaN()), E5M2NaN},
	} {
		if got := F32ToE5M2(tc.in); got != tc.want {
			t.Errorf("F32ToE5M2(%v) = %#02x, want %#02x", tc.in, got, tc.want)
		}
	}
}

// With scales of one and bf16 caches holding only E4M3 values, the FP8
// attention is the bf16 one, bit for bit; scaling a cache's bytes down by
// its scale gives the same output again.
func TestAttentionPagedFP8IsAttentionPaged(t *testing.T) {
	const heads, kvHeads, headDim = 4, 2, 8
	for i, c := range pagedCases {
		kv := pagedView(c, uint64(i))
		r := newRand(uint64(i))
		T, slots := kv.Tokens(), kv.NumPages*kv.PageSize
		q := randomBF16(r, T*heads*headDim, 1)
		kBytes, vBytes := make([]uint8, slots*kvHeads*headDim), make([]uint8, slots*kvHeads*headDim)
		kBF16, vBF16 := make([]uint16, len(kBytes)), make([]uint16, len(vBytes))
		for j := range kBytes {
			kBytes[j], vBytes[j] = uint8(r.IntN(0x7e)), uint8(r.IntN(0x7e))|uint8(r.IntN(2))<<7
			kBF16[j], vBF16[j] = F32ToBF16(E4M3ToF32(kBytes[j])/64), F32ToBF16(E4M3ToF32(vBytes[j]))
		}
		want := make([]uint16, T*heads*headDim)
		AttentionPaged(want, q, kBF16, vBF16, kv, heads, kvHeads, headDim, nil)
		got := make([]uint16, len(want))
		AttentionPagedFP8(got, q, kBytes, vBytes, kv, heads, kvHeads, headDim, nil, CacheE4M3, []float32{1.0 / 64, 1.0 / 64}, []float32{1, 1})
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("%v: element %d: fp8 %#04x, bf16 %#04x", c, j, got[j], want[j])
			}
		}
	}
}

// A cache written by RopeKVWritePagedFP8 holds, at each written slot, the
// bf16 write's values divided by the KV head's scale and rounded once; the
// rotated q is the bf16 write's.
func TestRopeKVWritePagedFP8QuantizesTheBF16Write(t *testing.T) {
	const tokens, heads, kvHeads, headDim, numSlots = 5, 4, 2, 8, 9
	r := newRand(7)
	qkv := randomBF16(r, tokens*(heads+2*kvHeads)*headDim, 3)
	invFreq := RopeInvFreq(headDim, 10000, nil)
	positions := []int32{0, 1, 2, 7, 3}
	slots := []int64{4, -1, 0, 8, 2}
	kvWidth := kvHeads * headDim
	qWant, kWant, vWant := make([]uint16, tokens*heads*headDim), make([]uint16, numSlots*kvWidth), make([]uint16, numSlots*kvWidth)
	RopeKVWritePaged(qWant, kWant, vWant, qkv, invFreq, positions, slots, tokens, heads, kvHeads, headDim, numSlots)
	kScale, vScale := []float32{0.5, 0.02}, []float32{3, 0.25}
	for _, f := range []FP8Cache{CacheE4M3, CacheE5M2} {
		q, k, v := make([]uint16, len(qWant)), make([]uint8, numSlots*kvWidth), make([]uint8, numSlots*kvWidth)
		RopeKVWritePagedFP8(q, k, v, qkv, invFreq, positions, slots, tokens, heads, kvHeads, headDim, numSlots, f, kScale, vScale)
		for i := range q {
			if q[i] != qWant[i] {
				t.Fatalf("format %d: q[%d] %#04x, want %#04x", f, i, q[i], qWant[i])
			}
		}
		for _, s := range slots {
			if s < 0 {
				continue
			}
			for i := range kvWidth {
				g, j := i/headDim, int(s)*kvWidth+i
				if want := f.Quantize(BF16ToF32(kWant[j]), kScale[g]); k[j] != want {
					t.Fatalf("format %d: slot %d K %d: %#02x, want %#02x", f, s, i, k[j], want)
				}
				if want := f.Quantize(BF16ToF32(vWant[j]), vScale[g]); v[j] != want {
					t.Fatalf("format %d: slot %d V %d: %#02x, want %#02x", f, s, i, v[j], want)
				}
			}
		}
		if k[1*kvWidth] != 0 || v[5*kvWidth] != 0 {
			t.Errorf("format %d: a slot no token maps to was written", f)
		}
	}
	mustPanic(t, "a zero scale", func() {
		q, k, v := make([]uint16, len(qWant)), make([]uint8, numSlots*kvWidth), make([]uint8, numSlots*kvWidth)
		RopeKVWritePagedFP8(q, k, v, qkv, invFreq, positions, slots, tokens, heads, kvHeads, headDim, numSlots, CacheE4M3, []float32{1, 0}, vScale)
	})
}
