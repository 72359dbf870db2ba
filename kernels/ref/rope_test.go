package ref

import (
	"fmt"
	"math"
	"testing"
)

func TestRopeInvFreqUnscaled(t *testing.T) {
	tests := []struct {
		headDim int
		theta   float64
	}{{128, 500000}, {64, 10000}, {2, 10000}, {6, 1e6}}
	for _, tc := range tests {
		got := RopeInvFreq(tc.headDim, tc.theta, nil)
		if len(got) != tc.headDim/2 {
			t.Fatalf("headDim %d: %d frequencies, want %d", tc.headDim, len(got), tc.headDim/2)
		}
		for i, g := range got {
			want := math.Exp(-float64(2*i) / float64(tc.headDim) * math.Log(tc.theta))
			if math.Abs(float64(g)-want) > 2e-7*want {
				t.Errorf("headDim %d theta %g: inv_freq[%d] = %g, want %g", tc.headDim, tc.theta, i, g, want)
			}
		}
	}
}

// Llama-3.1-8B: head_dim 128, rope_theta 500000, rope_scaling llama3 with
// factor 8, low_freq_factor 1, high_freq_factor 4, original 8192 positions.
// Wavelengths below 2048 are kept, above 8192 divided by 8; i = 29..34 are medium.
func TestRopeInvFreqLlama31(t *testing.T) {
	scaling := &Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
	scaled := RopeInvFreq(128, 500000, scaling)
	plain := RopeInvFreq(128, 500000, nil)

	for i, inv := range plain {
		wavelen := 2 * math.Pi / float64(inv)
		var want float64
		switch {
		case wavelen < 2048:
			want = float64(inv)
		case wavelen > 8192:
			want = float64(inv) / 8
		default:
			smooth := (8192/wavelen - 1) / (4 - 1)
			want = (1-smooth)*float64(inv)/8 + smooth*float64(inv)
		}
		if float64(scaled[i]) != float64(float32(want)) {
			t.Errorf("inv_freq[%d] = %g, want %g", i, scaled[i], want)
		}
	}

	tests := []struct {
		name  string
		index int
		check func(scaled, plain float32) bool
	}{
		{"high frequency unchanged", 10, func(s, p float32) bool { return s == p }},
		{"low frequency divided by 8", 50, func(s, p float32) bool { return s == p/8 }},
		{"medium frequency between", 31, func(s, p float32) bool { return s > p/8 && s < p }},
	}
	for _, tc := range tests {
		if !tc.check(scaled[tc.index], plain[tc.index]) {
			t.Errorf("%s: inv_freq[%d] scaled %g, plain %g", tc.name, tc.index, scaled[tc.index], plain[tc.index])
		}
	}

	// Pinned bit patterns: any change to the rounding or the rule shows here.
	pinned := []struct {
		index int
		bits  uint32
	}{
		{0, 0x3f800000},  // 1.0: i = 0 is the highest frequency
		{31, 0x3a60979e}, // 8.5675146e-4: medium, smooth = 0.4212
		{63, 0x34a4c2ff}, // 3.068926e-7: low, 500000^(-126/128) / 8
	}
	for _, p := range pinned {
		if got := math.Float32bits(scaled[p.index]); got != p.bits {
			t.Errorf("inv_freq[%d] = %g (%#08x), pinned %g (%#08x)", p.index, scaled[p.index], got,
				math.Float32frombits(p.bits), p.bits)
		}
	}
}

// ropeCase is one RopeKVWrite/Attention shape.
type ropeCase struct {
	batch, seqLen, startPos, heads, kvHeads, headDim, maxSeq int
}

func (c ropeCase) String() string {
	return fmt.Sprintf("B%d S%d start%d H%d KV%d D%d max%d",
		c.batch, c.seqLen, c.startPos, c.heads, c.kvHeads, c.headDim, c.maxSeq)
}

var ropeCases = []ropeCase{
	{1, 1, 0, 1, 1, 2, 1},
	{1, 5, 0, 4, 2, 16, 8},  // GQA 2:1, prefill
	{2, 3, 4, 8, 1, 8, 9},   // GQA 8:1, chunk after a cached prefix
	{3, 1, 6, 4, 4, 64, 11}, // decode, plain MHA
	{2, 7, 100, 4, 2, 128, 120},
}

func TestRopeKVWriteAgainstDirect(t *testing.T) {
	for _, tc := range ropeCases {
		t.Run(tc.String(), func(t *testing.T) {
			r := newRand(40)
			tokens := tc.batch * tc.seqLen
			qWidth, kvWidth := tc.heads*tc.headDim, tc.kvHeads*tc.headDim
			rowWidth := qWidth + 2*kvWidth
			qkv := randomBF16(r, tokens*rowWidth, 1)
			invFreq := RopeInvFreq(tc.headDim, 10000, nil)

			const poison = 0x7fc1 // a NaN: any cache slot written by mistake shows
			q := make([]uint16, tokens*qWidth)
			kCache := make([]uint16, tc.batch*tc.maxSeq*kvWidth)
			vCache := make([]uint16, len(kCache))
			for i := range kCache {
				kCache[i], vCache[i] = poison, poison
			}
			RopeKVWrite(q, kCache, vCache, qkv, invFreq, tc.batch, tc.seqLen, tc.startPos,
				tc.heads, tc.kvHeads, tc.headDim, tc.maxSeq)

			half := tc.headDim / 2
			rotate := func(x []uint16, pos int) []float64 {
				out := make([]float64, tc.headDim)
				for i := 0; i < half; i++ {
					angle := float64(pos) * math.Pow(10000, -float64(2*i)/float64(tc.headDim))
					c, s := math.Cos(angle), math.Sin(angle)
					out[i] = f64(x[i])*c - f64(x[i+half])*s
					out[i+half] = f64(x[i+half])*c + f64(x[i])*s
				}
				return out
			}
			var gotQ, gotK []uint16
			var wantQ, wantK []float64
			for b := 0; b < tc.batch; b++ {
				for s := 0; s < tc.seqLen; s++ {
					tok, pos := b*tc.seqLen+s, tc.startPos+s
					row := qkv[tok*rowWidth:][:rowWidth]
					for h := 0; h < tc.heads; h++ {
						gotQ = append(gotQ, q[tok*qWidth+h*tc.headDim:][:tc.headDim]...)
						wantQ = append(wantQ, rotate(row[h*tc.headDim:], pos)...)
					}
					slot := (b*tc.maxSeq + pos) * kvWidth
					for h := 0; h < tc.kvHeads; h++ {
						gotK = append(gotK, kCache[slot+h*tc.headDim:][:tc.headDim]...)
						wantK = append(wantK, rotate(row[qWidth+h*tc.headDim:], pos)...)
					}
					for d := 0; d < kvWidth; d++ {
						if vCache[slot+d] != row[qWidth+kvWidth+d] {
							t.Fatalf("v(b%d p%d)[%d] = %#04x, want %#04x", b, pos, d, vCache[slot+d], row[qWidth+kvWidth+d])
						}
					}
				}
			}
			// Four bf16 roundings per element plus bf16 cos/sin; the angle error grows with p.
			checkRelErr(t, "q", gotQ, wantQ, 1e-2)
			checkRelErr(t, "k", gotK, wantK, 1e-2)

			for b := 0; b < tc.batch; b++ {
				for p := 0; p < tc.maxSeq; p++ {
					if p >= tc.startPos && p < tc.startPos+tc.seqLen {
						continue
					}
					slot := (b*tc.maxSeq + p) * kvWidth
					for d := 0; d < kvWidth; d++ {
						if kCache[slot+d] != poison || vCache[slot+d] != poison {
							t.Fatalf("cache slot b%d p%d written outside [startPos, startPos+seqLen)", b, p)
						}
					}
				}
			}
		})
	}
}

// At position 0 RoPE is the identity (cos 1, sin 0), bit for bit.
func TestRopeKVWritePositionZeroIsIdentity(t *testing.T) {
	const heads, kvHeads, headDim = 2, 1, 8
	qkv := randomBF16(newRand(41), (heads+2*kvHeads)*headDim, 1)
	q := make([]uint16, heads*headDim)
	kCache := make([]uint16, kvHeads*headDim)
	vCache := make([]uint16, kvHeads*headDim)
	RopeKVWrite(q, kCache, vCache, qkv, RopeInvFreq(headDim, 10000, nil), 1, 1, 0, heads, kvHeads, headDim, 1)
	for i := range q {
		if q[i] != qkv[i] {
			t.Errorf("q[%d] = %#04x, want %#04x", i, q[i], qkv[i])
		}
	}
	for i := range kCache {
		if kCache[i] != qkv[heads*headDim+i] {
			t.Errorf("k[%d] = %#04x, want %#04x", i, kCache[i], qkv[heads*headDim+i])
		}
	}
}

func TestRopeKVWriteBeyondMaxSeqPanics(t *testing.T) {
	qkv := make([]uint16, 2*3*4)
	mustPanic(t, "startPos+seqLen > maxSeq", func() {
		RopeKVWrite(make([]uint16, 2*4), make([]uint16, 4*4), make([]uint16, 4*4), qkv,
			RopeInvFreq(4, 10000, nil), 1, 2, 3, 1, 1, 4, 4)
	})
}
