// fp8.go is the twin of kernels/fp8.cu: FP8 E4M3 conversion, the
// activation quantizers (static and dynamic per tensor, dynamic per token),
// the per-row/per-column dequantization epilogue, and the FP8 GEMM the cuda
// backend runs through cuBLASLt (cublasLtMatmul with E4M3 inputs).

package ref

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// E4M3 is OCP FP8 E4M3 ("e4m3fn", torch.float8_e4m3fn, safetensors
// F8_E4M3): 1 sign, 4 exponent (bias 7) and 3 mantissa bits, no infinities,
// one NaN per sign (S.1111.111), the largest finite value 448, the smallest
// normal 2^-6 and subnormals down to 2^-9.
const (
	// FP8Max is E4M3's largest finite value.
	FP8Max = 448
	// FP8MinScale is the least dynamic scale (vLLM's min_scaling_factor,
	// 1/(448·512)): an all-zero tensor or token gets this scale instead of 0,
	// whose inverse would make every element NaN.
	FP8MinScale = float32(1.0 / (FP8Max * 512.0))
	// E4M3NaN is the NaN the conversion writes.
	E4M3NaN = 0x7f
)

// E4M3ToF32 widens an E4M3 bit pattern to float32 (exact).
func E4M3ToF32(b uint8) float32 { return e4m3Table[b] }

// e4m3Table holds every E4M3 value (a table: widening a whole weight
// matrix at every FP8 GEMM of the cpu backend must be cheap).
var e4m3Table = func() (t [256]float32) {
	for b := range t {
		t[b] = e4m3Value(uint8(b))
	}
	return t
}()

// e4m3Value decodes one E4M3 bit pattern by its definition.
func e4m3Value(b uint8) float32 {
	exp, mant := int(b>>3)&0xf, int(b&7)
	var v float32
	switch {
	case exp == 0xf && mant == 7:
		v = float32(math.NaN())
	case exp == 0:
		v = float32(mant) / 512 // mant × 2^-9
	default:
		v = float32(math.Ldexp(1+float64(mant)/8, exp-7))
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

// F32ToE4M3 rounds a float32 to E4M3 to nearest even, saturating: a
// magnitude beyond 448 (infinity included) becomes ±448, NaN becomes
// E4M3NaN. This is PTX's cvt.rn.satfinite.e4m3x2.f32 (sm_89+) and what
// torch's clamp-then-cast gives for every finite input.
func F32ToE4M3(f float32) uint8 { return F64ToE4M3(float64(f)) }

// F64ToE4M3 is F32ToE4M3 of a float64, rounded once (no float32 step).
func F64ToE4M3(a float64) uint8 {
	if a != a {
		return E4M3NaN
	}
	var sign uint8
	if math.Signbit(a) {
		sign, a = 0x80, -a
	}
	if a >= FP8Max {
		return sign | 0x7e
	}
	if a < 1.0/64 { // subnormal range: multiples of 2^-9 (8 of them is 2^-6, the least normal)
		return sign | uint8(math.RoundToEven(a*512))
	}
	frac, exp := math.Frexp(a) // a = frac × 2^exp, frac in [0.5, 1)
	e := exp - 1               // a = (2·frac) × 2^e, 2·frac in [1, 2)
	m := math.RoundToEven((2*frac - 1) * 8)
	if m == 8 {
		m, e = 0, e+1
	}
	if e+7 > 15 || (e+7 == 15 && m == 7) { // rounded past 448
		return sign | 0x7e
	}
	return sign | uint8(e+7)<<3 | uint8(m)
}

// E4M3ToF32s widens E4M3 bytes to float32.
func E4M3ToF32s(dst []float32, src []uint8) {
	for i, b := range src {
		dst[i] = E4M3ToF32(b)
	}
}

// FP8Scale is a dynamic scale from an absolute maximum: absmax/448 in
// float32, raised to FP8MinScale (a NaN stays NaN: a tensor holding NaN
// quantizes to NaN rather than hiding it).
func FP8Scale(absmax float32) float32 {
	s := absmax / FP8Max
	if s < FP8MinScale {
		s = FP8MinScale
	}
	return s
}

// AbsMaxBF16 is the largest |x| of a bf16 tensor: the maximum of the
// magnitudes' bit patterns, so NaN (above every number) wins and the result
// does not depend on the order the elements are visited in.
func AbsMaxBF16(x []uint16) float32 {
	var m uint16
	for _, v := range x {
		m = max(m, v&0x7fff)
	}
	return BF16ToF32(m)
}

// QuantizeFP8 quantizes x (bf16, n elements) with scale:
//
//	inv = 1/scale (float32);  out[i] = E4M3(f32(x[i]) · inv)
//
// the static per-tensor quantizer (scale from the checkpoint's
// input_scale) and the second pass of the dynamic one.
func QuantizeFP8(out []uint8, x []uint16, scale float32) {
	needLen("QuantizeFP8", "out", len(out), len(x))
	inv := 1 / scale
	for i, v := range x {
		out[i] = F32ToE4M3(BF16ToF32(v) * inv)
	}
}

// QuantizeFP8Tensor is dynamic per-tensor quantization: one scale for the
// whole tensor, FP8Scale(AbsMaxBF16(x)), returned; then QuantizeFP8.
func QuantizeFP8Tensor(out []uint8, x []uint16) float32 {
	s := FP8Scale(AbsMaxBF16(x))
	QuantizeFP8(out, x, s)
	return s
}

// QuantizeFP8Token is dynamic per-token quantization of x [rows, cols]:
// row r gets scales[r] = FP8Scale(absmax of the row) and is quantized with it.
func QuantizeFP8Token(out []uint8, scales []float32, x []uint16, rows, cols int) {
	needShape("QuantizeFP8Token", rows >= 0 && cols >= 0, "bad shape rows %d cols %d", rows, cols)
	needLen("QuantizeFP8Token", "x", len(x), rows*cols)
	needLen("QuantizeFP8Token", "out", len(out), rows*cols)
	needLen("QuantizeFP8Token", "scales", len(scales), rows)
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		scales[r] = QuantizeFP8Tensor(out[r*cols:(r+1)*cols], row)
	}
}

// ScaleFP8Out is the dequantization epilogue where a scale is a vector:
//
//	out[i, j] = bf16(acc[i, j] · xScale[i·xStride] · wScale[j·wStride])
//
// in float32, left to right; a stride of 0 takes element 0 for every
// row (column), a stride of 1 one scale per row (token) or per column
// (output channel of the weight).
func ScaleFP8Out(out []uint16, acc []float32, xScale []float32, xStride int, wScale []float32, wStride, m, n int) {
	needShape("ScaleFP8Out", m >= 0 && n >= 0 && xStride >= 0 && xStride <= 1 && wStride >= 0 && wStride <= 1,
		"bad shape m %d n %d strides %d %d", m, n, xStride, wStride)
	needLen("ScaleFP8Out", "acc", len(acc), m*n)
	needLen("ScaleFP8Out", "out", len(out), m*n)
	if m > 0 {
		needLen("ScaleFP8Out", "xScale", len(xScale), (m-1)*xStride+1)
	}
	if n > 0 {
		needLen("ScaleFP8Out", "wScale", len(wScale), (n-1)*wStride+1)
	}
	for i := 0; i < m; i++ {
		sx := xScale[i*xStride]
		for j := 0; j < n; j++ {
			out[i*n+j] = F32ToBF16(acc[i*n+j] * sx * wScale[j*wStride])
		}
	}
}

// LinearFP8 is the FP8 GEMM of a quantized linear layer: x [m, k] and w
// [n, k] (PyTorch's weight layout) in E4M3 with their scales, out [m, n] in
// bf16:
//
//	acc[i, j] = Σ_kk f32(x[i, kk]) · f32(w[j, kk])      (float32, gonum's sgemm order)
//	out[i, j] = bf16(acc[i, j] · xScale[i·xStride] · wScale[j·wStride])
//
// Every product of two E4M3 values is exact in float32; the sum's rounding
// depends on its order, as on the GPU. xStride 1 is a per-token activation
// scale, wStride 1 a per-channel weight scale (0: per tensor).
func LinearFP8(out []uint16, x []uint8, xScale []float32, xStride int, w []uint8, wScale []float32, wStride, m, n, k int) {
	needShape("LinearFP8", m >= 0 && n >= 0 && k >= 0, "bad shape m %d n %d k %d", m, n, k)
	needLen("LinearFP8", "x", len(x), m*k)
	needLen("LinearFP8", "w", len(w), n*k)
	needLen("LinearFP8", "out", len(out), m*n)
	if m == 0 || n == 0 {
		return
	}
	acc := make([]float32, m*n)
	if k > 0 {
		xf, wf := make([]float32, m*k), make([]float32, n*k)
		E4M3ToF32s(xf, x[:m*k])
		E4M3ToF32s(wf, w[:n*k])
		blas32.Gemm(blas.NoTrans, blas.Trans, 1,
			blas32.General{Rows: m, Cols: k, Stride: k, Data: xf},
			blas32.General{Rows: n, Cols: k, Stride: k, Data: wf}, 0,
			blas32.General{Rows: m, Cols: n, Stride: n, Data: acc})
	}
	ScaleFP8Out(out, acc, xScale, xStride, wScale, wStride, m, n)
}

// RequantizeE4M3 re-expresses E4M3 values quantized with scale from as
// values quantized with scale to (to ≥ from: the larger scale of a fused
// matrix's parts, as vLLM's requantize_with_max_scale does):
//
//	out[i] = E4M3(f32(f32(in[i]) · from) / to)
//
// in float32 (the product and the quotient rounded each), on the host at
// load time, so every backend holds the same bytes.
func RequantizeE4M3(out, in []uint8, from, to float32) {
	needLen("RequantizeE4M3", "out", len(out), len(in))
	for i, b := range in {
		out[i] = F32ToE4M3(E4M3ToF32(b) * from / to)
	}
}

// FP8Act is how GemvFP8 takes its activation: the kernels' act argument
// (kernels.FP8Act*, G8_ACT_* in fp8.cu).
type FP8Act int

const (
	// FP8ActBF16 multiplies the bf16 activation as it is (weight-only
	// FP8, "W8A16": not vLLM's FP8 path, which quantizes activations).
	FP8ActBF16 FP8Act = iota
	// FP8ActStatic quantizes the activation with one given scale
	// (QuantizeFP8 with a checkpoint's input_scale).
	FP8ActStatic
	// FP8ActTensor quantizes it with one dynamic scale (QuantizeFP8Tensor
	// over all m rows).
	FP8ActTensor
	// FP8ActToken quantizes each row with its own dynamic scale
	// (QuantizeFP8Token).
	FP8ActToken
)

// GemvFP8 is linear version 5's decode projection (fp8.cu's gemv_fp8_*):
// x [m, k] bf16 and w [n, k] E4M3 with wScale (one, wStride 0, or one per
// output channel, wStride 1), out [m, n] bf16. With an FP8 act it is
// exactly the two launches it replaces, the activation quantizer (static
// with inputScale, dynamic per tensor or per token) then LinearFP8:
//
//	xq = E4M3(f32(x) · (1/s_x));  out = bf16(Σ f32(xq)·f32(w) · s_x · s_w)
//
// and with FP8ActBF16 (inputScale unused)
//
//	out = bf16(Σ f32(x)·f32(w) · 1 · s_w)
//
// (the kernel sums k in its own order: bf16 tolerance).
func GemvFP8(out, x []uint16, inputScale float32, act FP8Act, w []uint8, wScale []float32, wStride, m, n, k int) {
	needShape("GemvFP8", m >= 0 && n >= 0 && k >= 0 && act >= FP8ActBF16 && act <= FP8ActToken,
		"bad shape m %d n %d k %d act %d", m, n, k, act)
	needLen("GemvFP8", "x", len(x), m*k)
	xs, xStride := []float32{inputScale}, 0
	xq := make([]uint8, m*k)
	switch act {
	case FP8ActBF16:
		gemvFP8WeightOnly(out, x[:m*k], w, wScale, wStride, m, n, k)
		return
	case FP8ActStatic:
		QuantizeFP8(xq, x[:m*k], inputScale)
	case FP8ActTensor:
		xs[0] = QuantizeFP8Tensor(xq, x[:m*k])
	case FP8ActToken:
		xs, xStride = make([]float32, max(m, 1)), 1
		QuantizeFP8Token(xq, xs[:m], x[:m*k], m, k)
	}
	LinearFP8(out, xq, xs, xStride, w, wScale, wStride, m, n, k)
}

// gemvFP8WeightOnly is GemvFP8 with FP8ActBF16: bf16 x times the widened
// E4M3 weights, float32 sums, then ScaleFP8Out with an activation scale of 1.
func gemvFP8WeightOnly(out, x []uint16, w []uint8, wScale []float32, wStride, m, n, k int) {
	needLen("GemvFP8", "w", len(w), n*k)
	needLen("GemvFP8", "out", len(out), m*n)
	acc := make([]float32, m*n)
	if m > 0 && n > 0 && k > 0 {
		xf, wf := make([]float32, m*k), make([]float32, n*k)
		ToF32(xf, x)
		E4M3ToF32s(wf, w[:n*k])
		blas32.Gemm(blas.NoTrans, blas.Trans, 1,
			blas32.General{Rows: m, Cols: k, Stride: k, Data: xf},
			blas32.General{Rows: n, Cols: k, Stride: k, Data: wf}, 0,
			blas32.General{Rows: m, Cols: n, Stride: n, Data: acc})
	}
	ScaleFP8Out(out, acc, []float32{1}, 0, wScale, wStride, m, n)
}

// GemvFP8SiluMul is linear version 5's gate_up_proj with silu_mul fused
// (gemv_fp8_silu_*): w the fused [2*inter, k] E4M3 gate_up matrix (wScale
// one, or 2*inter per channel), gateUp = GemvFP8(x, w) in bf16, then out =
// SiluMul(gateUp) [m, inter].
func GemvFP8SiluMul(out, x []uint16, inputScale float32, act FP8Act, w []uint8, wScale []float32, wStride, m, inter, k int) {
	needShape("GemvFP8SiluMul", m >= 0 && inter >= 0 && k >= 0, "bad shape m %d inter %d k %d", m, inter, k)
	gateUp := make([]uint16, m*2*inter)
	GemvFP8(gateUp, x, inputScale, act, w, wScale, wStride, m, 2*inter, k)
	SiluMul(out, gateUp, m, inter)
}
