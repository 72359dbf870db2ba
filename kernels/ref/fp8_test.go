package ref

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestE4M3Decode(t *testing.T) {
	for _, c := range []struct {
		bits uint8
		want float64
	}{
		{0x00, 0}, {0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64}, {0x38, 1}, {0x39, 1.125},
		{0x3f, 1.875}, {0x40, 2}, {0x7e, 448}, {0x77, 240}, {0xb8, -1}, {0xfe, -448},
	} {
		if got := E4M3ToF32(c.bits); float64(got) != c.want {
			t.Errorf("E4M3ToF32(%#02x) = %g, want %g", c.bits, got, c.want)
		}
	}
	if !math.IsNaN(float64(E4M3ToF32(0x7f))) || !math.IsNaN(float64(E4M3ToF32(0xff))) {
		t.Error("0x7f and 0xff must decode to NaN")
	}
	if !math.Signbit(float64(E4M3ToF32(0x80))) {
		t.Error("0x80 must decode to -0")
	}
}

// Every E4M3 value survives a round trip through float32.
func TestE4M3RoundTrip(t *testing.T) {
	for b := 0; b < 256; b++ {
		if b&0x7f == 0x7f {
			continue // NaN
		}
		if got := F32ToE4M3(E4M3ToF32(uint8(b))); got != uint8(b) {
			t.Errorf("F32ToE4M3(E4M3ToF32(%#02x)) = %#02x", b, got)
		}
	}
}

func TestF32ToE4M3Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint8
	}{
		{0.5 / 512, 0x00}, // halfway to the least subnormal: to even (0)
		{1.5 / 512, 0x02}, // halfway 1 and 2 subnormal steps: to even (2)
		{7.5 / 512, 0x08}, // rounds up into the least normal
		{1.0625, 0x38},    // halfway 1 and 1.125: to even mantissa (1)
		{1.1875, 0x3a},    // halfway 1.125 and 1.25: to 1.25
		{447, 0x7e},       // nearest is 448
		{464, 0x7e},       // beyond 448: saturates
		{1e30, 0x7e},      // far beyond
		{float32(math.Inf(1)), 0x7e},
		{float32(math.Inf(-1)), 0xfe},
		{-1.0625, 0xb8},
		{float32(math.NaN()), E4M3NaN},
		{float32(math.Copysign(0, -1)), 0x80},
		{1e-30, 0x00},
	} {
		if got := F32ToE4M3(c.in); got != c.want {
			t.Errorf("F32ToE4M3(%g) = %#02x, want %#02x", c.in, got, c.want)
		}
	}
}

// F32ToE4M3 picks the nearest finite E4M3 value (ties to the even
// mantissa), checked against every value by brute force.
func TestF32ToE4M3IsNearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ {
		f := float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(24)-14))
		got := E4M3ToF32(F32ToE4M3(f))
		best := math.Inf(1)
		for b := 0; b < 256; b++ {
			if b&0x7f == 0x7f {
				continue
			}
			best = math.Min(best, math.Abs(float64(E4M3ToF32(uint8(b)))-float64(f)))
		}
		if math.Abs(float64(got)-float64(f)) != best && math.Abs(float64(f)) < FP8Max {
			t.Fatalf("F32ToE4M3(%g) = %g, %g away; the nearest is %g away", f, got, math.Abs(float64(got-f)), best)
		}
	}
}

func TestQuantizeFP8Tensor(t *testing.T) {
	x := []uint16{F32ToBF16(1), F32ToBF16(-3.5), F32ToBF16(0.25), F32ToBF16(7)}
	out := make([]uint8, len(x))
	s := QuantizeFP8Tensor(out, x)
	if s != float32(7)/448 {
		t.Errorf("scale %g, want 7/448", s)
	}
	if out[3] != 0x7e { // the absolute maximum maps to 448
		t.Errorf("the maximum quantizes to %#02x, want 0x7e", out[3])
	}
	for i, v := range x {
		got, want := float64(E4M3ToF32(out[i])*s), float64(BF16ToF32(v))
		if math.Abs(got-want) > math.Abs(want)/16 {
			t.Errorf("element %d: %g dequantized, was %g", i, got, want)
		}
	}
	zero := make([]uint16, 4)
	if s := QuantizeFP8Tensor(out, zero); s != FP8MinScale {
		t.Errorf("all-zero tensor: scale %g, want the least scale %g", s, FP8MinScale)
	}
	for i, b := range out {
		if b != 0 {
			t.Errorf("all-zero tensor: element %d quantizes to %#02x", i, b)
		}
	}
	withNaN := []uint16{F32ToBF16(1), 0x7fc0}
	if s := QuantizeFP8Tensor(out[:2], withNaN); !math.IsNaN(float64(s)) {
		t.Errorf("a NaN element: scale %g, want NaN", s)
	}
}

func TestQuantizeFP8TokenScalesEachRow(t *testing.T) {
	x := []uint16{F32ToBF16(1), F32ToBF16(-2), F32ToBF16(100), F32ToBF16(50)}
	out, scales := make([]uint8, 4), make([]float32, 2)
	QuantizeFP8Token(out, scales, x, 2, 2)
	if scales[0] != float32(2)/448 || scales[1] != float32(100)/448 {
		t.Errorf("scales %v, want [2/448 100/448]", scales)
	}
	if out[1] != 0xfe || out[2] != 0x7e {
		t.Errorf("each row's maximum maps to ±448: got %#02x %#02x", out[1], out[2])
	}
}

// LinearFP8 is the dequantized product: Σ x·w in float64 scaled, within
// one bf16 rounding (float32 accumulation of exact products).
func TestLinearFP8MatchesDequantizedProduct(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 5, 7, 64
	x, w := make([]uint8, m*k), make([]uint8, n*k)
	for i := range x {
		x[i] = F32ToE4M3(float32(rng.NormFloat64() * 40))
	}
	for i := range w {
		w[i] = F32ToE4M3(float32(rng.NormFloat64() * 100))
	}
	xs := []float32{0.01, 0.02, 0.5, 1, 3}
	ws := []float32{1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3, 7e-3}
	for _, strides := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
		out := make([]uint16, m*n)
		LinearFP8(out, x, xs, strides[0], w, ws, strides[1], m, n, k)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var acc float64
				for p := 0; p < k; p++ {
					acc += float64(E4M3ToF32(x[i*k+p])) * float64(E4M3ToF32(w[j*k+p]))
				}
				want := acc * float64(xs[i*strides[0]]) * float64(ws[j*strides[1]])
				got := float64(BF16ToF32(out[i*n+j]))
				if math.Abs(got-want) > math.Abs(want)/128+1e-30 {
					t.Errorf("strides %v: out[%d,%d] = %g, want %g", strides, i, j, got, want)
				}
			}
		}
	}
}

func TestRequantizeE4M3(t *testing.T) {
	in := []uint8{0x38, 0x40, 0x7e, 0xb8} // 1, 2, 448, -1
	out := make([]uint8, len(in))
	RequantizeE4M3(out, in, 0.5, 1) // values halve
	want := []uint8{F32ToE4M3(0.5), 0x38, F32ToE4M3(224), F32ToE4M3(-0.5)}
	for i := range out {
		if out[i] != want[i] {
			t.Errorf("element %d: %#02x, want %#02x", i, out[i], want[i])
		}
	}
}

// GemvFP8 with a bf16 activation is the product with the dequantized
// weights (each output's float64 sum rounded once to bf16, within a bf16
// step), and with an FP8 one exactly the quantizer followed by LinearFP8.
func TestGemvFP8Modes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 3, 5, 48
	x, wb := make([]uint16, m*k), make([]uint16, n*k)
	for i := range x {
		x[i] = F32ToBF16(float32(rng.NormFloat64()))
	}
	for i := range wb {
		wb[i] = F32ToBF16(float32(rng.NormFloat64() * 0.02))
	}
	w, ws := make([]uint8, n*k), make([]float32, n)
	QuantizeFP8Token(w, ws, wb, n, k)
	got := make([]uint16, m*n)
	GemvFP8(got, x, 0, FP8ActBF16, w, ws, 1, m, n, k)
	for i := range m {
		for j := range n {
			var s float64
			for kk := range k {
				s += float64(BF16ToF32(x[i*k+kk])) * float64(E4M3ToF32(w[j*k+kk]))
			}
			want := s * float64(ws[j])
			if d := math.Abs(float64(BF16ToF32(got[i*n+j])) - want); d > math.Abs(want)/128+1e-6 {
				t.Errorf("bf16 x: out[%d,%d] = %g, want %g", i, j, BF16ToF32(got[i*n+j]), want)
			}
		}
	}
	for _, act := range []FP8Act{FP8ActStatic, FP8ActTensor, FP8ActToken} {
		xq, xs, xStride := make([]uint8, m*k), []float32{0.01}, 0
		switch act {
		case FP8ActStatic:
			QuantizeFP8(xq, x, xs[0])
		case FP8ActTensor:
			xs[0] = QuantizeFP8Tensor(xq, x)
		case FP8ActToken:
			xs, xStride = make([]float32, m), 1
			QuantizeFP8Token(xq, xs, x, m, k)
		}
		want := make([]uint16, m*n)
		LinearFP8(want, xq, xs, xStride, w, ws, 1, m, n, k)
		GemvFP8(got, x, 0.01, act, w, ws, 1, m, n, k)
		if !slices.Equal(got, want) {
			t.Errorf("act %d: GemvFP8 differs from the quantizer and LinearFP8", act)
		}
	}
}
