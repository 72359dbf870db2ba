// Package quanttest is for tests of FP8 models end to end: checkpoints in
// the formats people publish (AutoFP8 / vLLM "fp8", compressed-tensors,
// NVIDIA ModelOpt) written from the dummy generator, and Model64, a float64
// evaluation of a quantized model (its dequantized weights, the same
// activation quantization) that a backend's FP8 logits are held against.
package quanttest

import (
	"fmt"
	"math"

	"stepbench/kernels"
	"stepbench/kernels/ref"
	"stepbench/runner"
)

// The bounds of an FP8 model's logits against the float64 evaluation of the
// same quantized model (docs/fp8.md, "How FP8 is checked"), on every
// backend:
//
//   - MaxRelErrBF16Activations: the evaluation stores activations in bf16
//     where the backends do and quantizes them from there, its arithmetic
//     inside each op float64. A backend differs from it only by float32
//     arithmetic inside ops (sums in another order, exp), which moves a
//     stored bf16 value by one step where it lands next to a rounding
//     boundary (about 2^-16 of the elements) and, rarer still, an activation
//     by one E4M3 step. Measured on llama-tiny (four formats and dummy
//     weights quantized at load, 8 steps each): at most 1.5e-4 on the cpu
//     backend and 3.7e-5 on the emulated device (compressed-tensors per
//     channel; every other case below 3e-7). 1e-3 is seven times the worst
//     and 55-70 times below what one layer's scale bug costs (a k_proj
//     scale off by 4x: 5.5e-2; two per-channel scales swapped: 7.0e-2).
//   - MaxRelErrFloat64: the evaluation in float64 throughout. Its
//     activations differ from a backend's by bf16 roundings, and each one
//     that crosses an E4M3 rounding boundary moves by a whole E4M3 step
//     (6-12%): 4.3-6.7% on llama-tiny, as far as the float64 evaluation of
//     the unquantized model is (6.9%). It bounds the noise FP8 adds; it
//     cannot tell a subtle bug from that noise.
//   - MaxRelErrFP8KVCache: an FP8 KV cache against the evaluation that
//     fake-quantizes K and V the same way (Model64.KVCache), bf16
//     activations. The two quantize the same bf16 values with the same
//     function, so they differ only where a K or V value differs by a bf16
//     step (float32 arithmetic inside an op, as above) and that step
//     crosses an FP8 rounding boundary: the element then moves by a whole
//     FP8 step (12-25% for E5M2), and the layers after amplify it. At scales
//     that are powers of two every bf16 value keeps its bits, about 5% of
//     them sit exactly on an E5M2 tie, and the flips are common: measured on
//     llama-tiny (8 steps), E5M2 at scales of one 4.9e-3, E5M2 and E4M3 at
//     scales that differ by layer and head 3.7e-5 and 1.2e-6. 1e-2 is twice
//     the worst; what it must catch costs 2.4-3.2 times it (K's and V's
//     scales swapped: 3.2e-2; the bf16 cache's evaluation: 2.4e-2; 5.3e-2
//     for E5M2).
const (
	MaxRelErrFP8KVCache      = 1e-2
	MaxRelErrBF16Activations = 1e-3
	MaxRelErrFloat64         = 8e-2
)

// Linear64 is one projection: w [rows, cols] as the model computes with it
// (dequantized E4M3 values times their scales, or bf16 values), and how its
// input is quantized (Act "": not at all, a bf16 projection).
type Linear64 struct {
	W           []float64
	Rows, Cols  int
	Act         string  // "", runner.ActStatic, ActDynamicTensor or ActDynamicToken
	StaticScale float64 // the input scale of ActStatic
}

// Layer64 is one decoder layer.
type Layer64 struct {
	InputNorm, PostNorm  []float64
	QKV, O, GateUp, Down Linear64
	// QKVBias [(H+2KV)*D] is Qwen2's q/k/v bias, QNorm and KNorm [D]
	// Qwen3's per-head norm weights; nil where the architecture has none.
	QKVBias, QNorm, KNorm []float64
}

// Model64 is a Llama model evaluated in float64 (HF LlamaForCausalLM
// semantics, no rounding anywhere but the activations' FP8 quantization),
// or a Qwen3 or Qwen2 one (Qwen3's q/k norm, Qwen2's q/k/v bias: Layer64).
//
// With BF16Activations every tensor a backend stores is rounded to bf16
// where the backends round it (each op's output; RoPE and SiLU·mul round as
// HF's bf16 ops do, kernels/ref documents each) and activations are
// quantized from those bf16 values with float32 scales, as the backends
// do: the arithmetic inside each op stays float64. Without it, the same
// quantized model is evaluated in float64 throughout, and every E4M3
// rounding of an activation that lands on the other side of a rounding
// boundary than the backend's (its inputs differ by bf16 roundings) moves
// that element by a whole E4M3 step (6-12%): see docs/fp8.md for what that
// does to the logits.
type Model64 struct {
	BF16Activations bool
	Cfg             runner.Config
	Embed           []float64 // [vocab, hidden]
	LMHead          []float64 // [vocab, hidden]
	FinalNorm       []float64
	Layers          []Layer64
	// KVCache, when FP8, stores every K and V element as the FP8 cache
	// does: the value (bf16 with BF16Activations) divided by its layer's
	// and KV head's scale (KScale, VScale [layer][kvHead]; in float32 with
	// BF16Activations, as the backends divide), rounded to the format, and
	// read back times the scale: a fake quantization.
	KVCache        kernels.CacheDType
	KScale, VScale [][]float64
	// calibrate, when set, records each projection input's absmax by layer
	// and projection (qkv, o, gate_up, down) instead of quantizing.
	calibrate map[[2]int]float64
}

// Logits runs prompt (batch 1) and then each of forced as the next token,
// returning the logits after the prompt and after each forced token.
func (m *Model64) Logits(prompt, forced []int32) [][]float64 {
	c := m.Cfg
	kv := make([][2][]float64, c.NumHiddenLayers) // per layer: K, V [pos][kvHeads*headDim]
	out := [][]float64{m.step(prompt, 0, kv)}
	pos := len(prompt)
	for _, t := range forced {
		out = append(out, m.step([]int32{t}, pos, kv))
		pos++
	}
	return out
}

// Calibrate returns each projection input's largest |x| over prompt, by
// layer and projection (0 qkv, 1 o, 2 gate_up, 3 down), evaluating the
// model without quantizing activations: what AutoFP8 and ModelOpt measure
// to set static input scales.
func (m *Model64) Calibrate(prompt []int32) map[[2]int]float64 {
	m.calibrate = map[[2]int]float64{}
	defer func() { m.calibrate = nil }()
	m.step(prompt, 0, make([][2][]float64, m.Cfg.NumHiddenLayers))
	return m.calibrate
}

// step runs tokens at positions start.., appending to the caches, and
// returns the last token's logits.
func (m *Model64) step(tokens []int32, start int, kv [][2][]float64) []float64 {
	c := m.Cfg
	h, T := c.HiddenSize, len(tokens)
	x := make([]float64, T*h)
	for t, id := range tokens {
		copy(x[t*h:(t+1)*h], m.Embed[int(id)*h:(int(id)+1)*h])
	}
	for l := range m.Layers {
		m.layer(l, x, T, start, kv)
	}
	last := m.rmsNorm(x[(T-1)*h:], m.FinalNorm, 1, h, c.RMSNormEps)
	logits := make([]float64, c.VocabSize)
	for v := range logits {
		logits[v] = m.r(dot(m.LMHead[v*h:(v+1)*h], last))
	}
	return logits
}

// r rounds a stored value to bf16 (BF16Activations), else leaves it.
func (m *Model64) r(x float64) float64 {
	if !m.BF16Activations {
		return x
	}
	return roundBF16(x)
}

// roundBF16 rounds x to bf16's 8 significant bits, nearest even (once:
// no float32 step).
func roundBF16(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	frac, exp := math.Frexp(x)
	return math.Ldexp(math.RoundToEven(frac*256)/256, exp)
}

// layer runs decoder layer l over x [T, hidden] in place.
func (m *Model64) layer(l int, x []float64, T, start int, kv [][2][]float64) {
	c, L := m.Cfg, &m.Layers[l]
	h, D, H, KV := c.HiddenSize, c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads
	qkv := m.linear(l, 0, L.QKV, m.rmsNorm(x, L.InputNorm, T, h, c.RMSNormEps), T)
	width := (H + 2*KV) * D
	m.qkNorm(L, qkv, T, width)
	inv := c.RopeInvFreq()
	q := make([]float64, T*H*D)
	for t := 0; t < T; t++ {
		row := qkv[t*width : (t+1)*width]
		for hd := 0; hd < H; hd++ {
			copy(q[(t*H+hd)*D:(t*H+hd+1)*D], m.rope(row[hd*D:(hd+1)*D], start+t, inv))
		}
		k := make([]float64, KV*D)
		for hd := 0; hd < KV; hd++ {
			copy(k[hd*D:(hd+1)*D], m.rope(row[(H+hd)*D:(H+hd+1)*D], start+t, inv))
		}
		kv[l][0] = append(kv[l][0], m.cached(l, 0, k)...)
		kv[l][1] = append(kv[l][1], m.cached(l, 1, row[(H+KV)*D:])...)
	}
	attn := attention(q, kv[l][0], kv[l][1], T, start, H, KV, D)
	for i, v := range attn {
		attn[i] = m.r(v)
	}
	o := m.linear(l, 1, L.O, attn, T)
	for i := range x {
		x[i] = m.r(x[i] + o[i])
	}
	gu := m.linear(l, 2, L.GateUp, m.rmsNorm(x, L.PostNorm, T, h, c.RMSNormEps), T)
	inter := c.IntermediateSize
	act := make([]float64, T*inter)
	for t := 0; t < T; t++ {
		for i := 0; i < inter; i++ {
			g, u := gu[t*2*inter+i], gu[t*2*inter+inter+i]
			act[t*inter+i] = m.r(m.r(g/(1+math.Exp(-g))) * u)
		}
	}
	d := m.linear(l, 3, L.Down, act, T)
	for i := range x {
		x[i] = m.r(x[i] + d[i])
	}
}

// qkNorm applies Qwen2's q/k/v bias and Qwen3's per-head RMSNorm of q and
// k to qkv [T, width] in place (HF: the bias inside q/k/v_proj, q_norm and
// k_norm on each head before RoPE).
func (m *Model64) qkNorm(L *Layer64, qkv []float64, T, width int) {
	c := m.Cfg
	H, KV, D := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	for t := 0; t < T; t++ {
		row := qkv[t*width : (t+1)*width]
		for j := range row {
			if L.QKVBias != nil {
				row[j] = m.r(row[j] + L.QKVBias[j])
			}
		}
		for hd := 0; hd < H+KV; hd++ {
			w := L.QNorm
			if hd >= H {
				w = L.KNorm
			}
			if w != nil {
				copy(row[hd*D:(hd+1)*D], m.rmsNorm(row[hd*D:(hd+1)*D], w, 1, D, c.RMSNormEps))
			}
		}
	}
}

// cached is one token's K (which 0) or V (1) row [KV*D] as layer l's
// cache gives it back: unchanged for a bf16 cache, fake-quantized for an
// FP8 one.
func (m *Model64) cached(l, which int, row []float64) []float64 {
	if !m.KVCache.FP8() {
		return row
	}
	scales := [][][]float64{m.KScale, m.VScale}[which][l]
	D := len(row) / len(scales)
	out := make([]float64, len(row))
	for i, x := range row {
		sc := scales[i/D]
		var b uint8
		switch {
		case m.BF16Activations && m.KVCache == kernels.CacheE5M2:
			b = ref.F32ToE5M2(float32(x) / float32(sc))
		case m.BF16Activations:
			b = ref.F32ToE4M3(float32(x) / float32(sc))
		case m.KVCache == kernels.CacheE5M2:
			b = ref.F64ToE5M2(x / sc)
		default:
			b = ref.F64ToE4M3(x / sc)
		}
		v := ref.E4M3ToF32(b)
		if m.KVCache == kernels.CacheE5M2 {
			v = ref.E5M2ToF32(b)
		}
		out[i] = float64(v) * sc
	}
	return out
}

// linear is y[T, rows] = q(x)·wᵀ with x [T, cols] quantized by lin.Act.
func (m *Model64) linear(layer, which int, lin Linear64, x []float64, T int) []float64 {
	if m.calibrate != nil {
		key := [2]int{layer, which}
		for _, v := range x {
			m.calibrate[key] = math.Max(m.calibrate[key], math.Abs(v))
		}
	} else if m.BF16Activations {
		x = quantize32(x, T, lin.Cols, lin.Act, lin.StaticScale)
	} else {
		x = quantize(x, T, lin.Cols, lin.Act, lin.StaticScale)
	}
	y := make([]float64, T*lin.Rows)
	for t := 0; t < T; t++ {
		for r := 0; r < lin.Rows; r++ {
			y[t*lin.Rows+r] = m.r(dot(lin.W[r*lin.Cols:(r+1)*lin.Cols], x[t*lin.Cols:(t+1)*lin.Cols]))
		}
	}
	return y
}

// quantize32 rounds bf16 values x [T, cols] through E4M3 as the backends
// do (kernels/ref: a float32 scale and its float32 inverse).
func quantize32(x []float64, T, cols int, act string, static float64) []float64 {
	if act == "" {
		return x
	}
	b := make([]uint16, len(x))
	for i, v := range x {
		b[i] = ref.F32ToBF16(float32(v)) // exact: v is a bf16 value
	}
	q := make([]uint8, len(x))
	scales := []float32{float32(static)}
	switch act {
	case runner.ActDynamicTensor:
		scales[0] = ref.QuantizeFP8Tensor(q, b)
	case runner.ActDynamicToken:
		scales = make([]float32, T)
		ref.QuantizeFP8Token(q, scales, b, T, cols)
	default:
		ref.QuantizeFP8(q, b, scales[0])
	}
	out := make([]float64, len(x))
	for i, v := range q {
		s := scales[0]
		if act == runner.ActDynamicToken {
			s = scales[i/cols]
		}
		out[i] = float64(ref.E4M3ToF32(v)) * float64(s)
	}
	return out
}

// quantize rounds x [T, cols] through E4M3 with the scheme's scale (kept in
// float64: s = max(absmax/448, 1/(448·512)), x → E4M3(x/s)·s).
func quantize(x []float64, T, cols int, act string, static float64) []float64 {
	if act == "" {
		return x
	}
	out := make([]float64, len(x))
	scaleOf := func(xs []float64) float64 {
		a := 0.0
		for _, v := range xs {
			a = math.Max(a, math.Abs(v))
		}
		return math.Max(a/ref.FP8Max, float64(ref.FP8MinScale))
	}
	rows, width := 1, T*cols
	if act == runner.ActDynamicToken {
		rows, width = T, cols
	}
	for r := 0; r < rows; r++ {
		xs := x[r*width : (r+1)*width]
		s := static
		if act != runner.ActStatic {
			s = scaleOf(xs)
		}
		for i, v := range xs {
			out[r*width+i] = float64(ref.E4M3ToF32(ref.F64ToE4M3(v/s))) * s
		}
	}
	return out
}

func (m *Model64) rmsNorm(x, w []float64, rows, h int, eps float64) []float64 {
	out := make([]float64, rows*h)
	for r := 0; r < rows; r++ {
		row := x[r*h : (r+1)*h]
		inv := 1 / math.Sqrt(dot(row, row)/float64(h)+eps)
		for i, v := range row {
			out[r*h+i] = m.r(m.r(v*inv) * w[i])
		}
	}
	return out
}

// rope rotates one head's vector (rotate-half) at position pos; with
// BF16Activations every product and sum is rounded as HF's bf16 ops.
func (m *Model64) rope(v []float64, pos int, invFreq []float32) []float64 {
	half := len(v) / 2
	out := make([]float64, len(v))
	for i := 0; i < half; i++ {
		sin, cos := math.Sincos(float64(float32(pos) * invFreq[i]))
		sin, cos = m.r(sin), m.r(cos)
		out[i] = m.r(m.r(v[i]*cos) + m.r(-v[i+half]*sin))
		out[i+half] = m.r(m.r(v[i+half]*cos) + m.r(v[i]*sin))
	}
	return out
}

// attention is causal GQA attention of q [T, H*D] at positions start..
// over the caches k, v [start+T][KV*D].
func attention(q, k, v []float64, T, start, H, KV, D int) []float64 {
	out := make([]float64, T*H*D)
	scale := 1 / math.Sqrt(float64(D))
	for t := 0; t < T; t++ {
		for hd := 0; hd < H; hd++ {
			g := hd / (H / KV)
			qv := q[(t*H+hd)*D : (t*H+hd+1)*D]
			n := start + t + 1
			w := make([]float64, n)
			top := math.Inf(-1)
			for p := 0; p < n; p++ {
				w[p] = dot(qv, k[(p*KV+g)*D:(p*KV+g+1)*D]) * scale
				top = math.Max(top, w[p])
			}
			sum := 0.0
			for p := range w {
				w[p] = math.Exp(w[p] - top)
				sum += w[p]
			}
			o := out[(t*H+hd)*D : (t*H+hd+1)*D]
			for p := range w {
				for i := range o {
					o[i] += w[p] / sum * v[(p*KV+g)*D+i]
				}
			}
		}
	}
	return out
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// RelErr is ref.RelErr of a backend's logits against the float64
// evaluation's (rounded to float32: 6e-8 relative, far below any bound).
func RelErr(got []float32, want []float64) (float64, error) {
	w := make([]float32, len(want))
	for i, v := range want {
		w[i] = float32(v)
	}
	return ref.RelErr(got, w)
}

// Compare runs prompt (batch 1) on e for outputLen tokens, greedy, and the
// float64 evaluation on the same tokens (the engine's, teacher-forced),
// returning the largest RelErr of the logits over the steps and each step's.
func Compare(e *runner.Engine, m *Model64, prompt []int32, outputLen int) (worst float64, steps []float64, err error) {
	if err := e.Begin(1, len(prompt), outputLen, prompt); err != nil {
		return 0, nil, err
	}
	if err := e.Prefill(); err != nil {
		return 0, nil, err
	}
	var got [][]float32
	var tokens []int32
	for step := 0; step < outputLen; step++ {
		if step > 0 {
			if err := e.Decode(); err != nil {
				return 0, nil, err
			}
		}
		logits, err := e.Logits()
		if err != nil {
			return 0, nil, err
		}
		got = append(got, logits[0])
		next, err := e.NextTokens()
		if err != nil {
			return 0, nil, err
		}
		tokens = append(tokens, next[0])
	}
	want := m.Logits(prompt, tokens[:outputLen-1])
	for i := range got {
		rel, err := RelErr(got[i], want[i])
		if err != nil {
			return 0, nil, fmt.Errorf("step %d: %w", i, err)
		}
		worst = math.Max(worst, rel)
		steps = append(steps, rel)
	}
	return worst, steps, nil
}
