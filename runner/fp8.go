package runner

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"stepbench/internal/input"
	"stepbench/kernels/ref"
)

// ActQuant is how QuantizeFP8 finds an activation's scale.
type ActQuant int

const (
	// QuantStatic uses the one scale already in the scale buffer (a
	// checkpoint's input_scale).
	QuantStatic ActQuant = iota
	// QuantDynamicTensor writes one scale, FP8Scale of the tensor's absmax.
	QuantDynamicTensor
	// QuantDynamicToken writes one scale per row.
	QuantDynamicToken
)

func (a ActQuant) String() string {
	switch a {
	case QuantStatic:
		return "static"
	case QuantDynamicTensor:
		return "dynamic per tensor"
	case QuantDynamicToken:
		return "dynamic per token"
	}
	return "unknown"
}

// actQuant is the ActQuant of a Quantization's activation scheme.
func actQuant(scheme string) ActQuant {
	switch scheme {
	case ActStatic:
		return QuantStatic
	case ActDynamicToken:
		return QuantDynamicToken
	}
	return QuantDynamicTensor
}

// FP8Backend is implemented by backends that run FP8 linear layers: a
// separate path beside Backend.Linear, taken only for the projections a
// quantized model holds in FP8 (see docs/fp8.md). Semantics are those of
// kernels/ref's twins (QuantizeFP8*, LinearFP8).
type FP8Backend interface {
	// EnableFP8 readies the FP8 path (libraries, workspaces) or says in one
	// line why this backend cannot run it; the engine calls it before
	// loading a quantized model.
	EnableFP8() error
	UploadFP8(dst Buffer, offset int, src []uint8) error
	DownloadFP8(src Buffer, dst []uint8) error
	DownloadF32(src Buffer, dst []float32) error
	// QuantizeFP8 quantizes x [rows, cols] (bf16) into out (F8E4M3); scale
	// (F32) holds the scale: read for QuantStatic, written (one, or one per
	// row for QuantDynamicToken) otherwise.
	QuantizeFP8(out, scale, x Buffer, rows, cols int, mode ActQuant) error
	// LinearFP8: out[m,n] (bf16) = x[m,k]·w[n,k]ᵀ of E4M3 operands times
	// xScale (one, or one per row when xPerRow) and wScale (one, or one per
	// output channel when wPerRow).
	LinearFP8(out, x, xScale, w, wScale Buffer, m, n, k int, xPerRow, wPerRow bool) error
}

// FP8Fuser is implemented by backends that run a decode step's FP8
// projection as one op, the activation's quantization included (the cuda
// backend's linear version 5, fp8.cu's gemv_fp8): the engine then drops
// NAME_quant and calls LinearFP8Act with the bf16 activation.
type FP8Fuser interface {
	// FusesFP8 reports whether LinearFP8Act takes m rows over an inner
	// dimension of k.
	FusesFP8(m, k int) bool
	// LinearFP8Act is QuantizeFP8(x, act; xScale when static, which is
	// nil otherwise) followed by LinearFP8 (ref.GemvFP8): out[m, n] (bf16)
	// from x[m, k] (bf16) and w[n, k] (F8E4M3) with wScale (one, or n when
	// wPerRow). With silu it is gate_up_proj and silu_mul
	// (ref.GemvFP8SiluMul): n is inter, w [2*inter, k], out [m, inter].
	LinearFP8Act(out, x, xScale, w, wScale Buffer, m, n, k int, act ActQuant, wPerRow, silu bool) error
}

// ErrNoFP8 marks a backend without an FP8 path.
var ErrNoFP8 = errors.New("the backend has no FP8 path")

// linearWeight is one projection's weights: bf16, or E4M3 with its scales.
type linearWeight struct {
	w          Buffer // [n, k]: BF16, or F8E4M3 when scale is set
	scale      Buffer // F32: 1 (per tensor) or n (per channel); nil for a bf16 weight
	perChannel bool
	// inputScale is a static activation scale (F32[1]); nil: dynamic.
	inputScale Buffer
	act        ActQuant
}

func (lw linearWeight) fp8() bool { return lw.scale != nil }

// FP8TensorReader yields a quantized checkpoint's tensors: E4M3 weights
// and float scales (F32, BF16 or F16 in the file), shape-checked by Check.
type FP8TensorReader interface {
	TensorReader
	E4M3(name string) ([]uint8, error)
	Scales(name string) ([]float32, error)
}

// moduleOf is the HF module of a weight tensor ("...q_proj.weight" → "...q_proj").
func moduleOf(tensor string) string { return strings.TrimSuffix(tensor, ".weight") }

// linear loads one projection made of parts (q, k, v; gate, up; or one).
func (ld *weightLoader) linear(n int, parts ...part) (linearWeight, error) {
	q := ld.cfg.Quantization
	ignored := 0
	for _, p := range parts {
		if q.Ignored(moduleOf(p.name)) {
			ignored++
		}
	}
	switch {
	case ignored == len(parts):
		b, err := ld.alloc(n, parts...)
		return linearWeight{w: b}, err
	case ignored > 0:
		return linearWeight{}, input.Bad(fmt.Errorf("quantization ignore list: %s are fused into one matrix, but only some of them are ignored (all or none)",
			strings.Join(partModules(parts), ", ")))
	}
	fb, ok := ld.be.(FP8Backend)
	if !ok {
		return linearWeight{}, fmt.Errorf("%s backend: %w", ld.be.Name(), ErrNoFP8)
	}
	lw := linearWeight{act: actQuant(q.Activations), perChannel: q.WeightScales == ScalesChannel}
	var err error
	if lw.w, err = ld.own(F8E4M3, n, parts); err != nil {
		return lw, err
	}
	if !q.Serialized() || ld.src.Reader == nil {
		return lw, ld.quantizeAtLoad(fb, &lw, n, parts)
	}
	return lw, ld.loadFP8(fb, &lw, parts)
}

// quantizeAtLoad fills a temporary bf16 matrix with the parts (dummy or
// checkpoint weights) and quantizes it: --quantization fp8's one dynamic
// per-tensor scale, or, for a quantized checkpoint's scheme with dummy weights
// (a config with quantization_config and no safetensors, or the cost model,
// which needs only the shapes), the scheme's layout: one weight scale or one
// per row (QuantizeFP8 per token of a [rows, cols] weight is per output
// channel), and a static input scale of 1 (activations up to E4M3's 448
// unclipped).
func (ld *weightLoader) quantizeAtLoad(fb FP8Backend, lw *linearWeight, n int, parts []part) error {
	rows, cols := n/parts[0].ncols, parts[0].ncols
	mode, scales := QuantDynamicTensor, 1
	if lw.perChannel {
		mode, scales = QuantDynamicToken, rows
	}
	var err error
	if lw.scale, err = ld.own(F32, scales, parts); err != nil {
		return err
	}
	tmp, err := ld.fill(n, parts)
	if err != nil {
		return err
	}
	err = fb.QuantizeFP8(lw.w, lw.scale, tmp, rows, cols, mode)
	err = errors.Join(err, ld.be.Sync(), ld.be.Free(tmp))
	if err != nil {
		return fmt.Errorf("quantize %s to FP8: %w", strings.Join(partNames(parts), " + "), err)
	}
	if lw.act != QuantStatic {
		return nil
	}
	if lw.inputScale, err = ld.own(F32, 1, parts); err != nil {
		return err
	}
	return ld.be.UploadF32(lw.inputScale, []float32{1})
}

func partModules(parts []part) []string {
	var out []string
	for _, p := range parts {
		out = append(out, moduleOf(p.name))
	}
	return out
}

// own allocates a buffer the weights keep, labelled with the parts' names.
func (ld *weightLoader) own(dt DType, n int, parts []part) (Buffer, error) {
	b, err := ld.be.Alloc(dt, n)
	if err != nil {
		return nil, fmt.Errorf("allocate %s (%d %s): %w", parts[0].name, n, dt, err)
	}
	ld.w.owned = append(ld.w.owned, b)
	nameBuffer(ld.be, b, strings.Join(partNames(parts), " + ")+" ("+dt.String()+")")
	return b, nil
}

func partNames(parts []part) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.name
	}
	return names
}

// fill allocates a bf16 buffer the weights do not keep and fills it with the parts.
func (ld *weightLoader) fill(n int, parts []part) (Buffer, error) {
	b, err := ld.be.Alloc(BF16, n)
	if err != nil {
		return nil, fmt.Errorf("allocate %s (%d bf16, to quantize): %w", parts[0].name, n, err)
	}
	for _, p := range parts {
		if err := fillPart(ld.be, b, p, ld.src); err != nil {
			return nil, errors.Join(err, ld.be.Free(b))
		}
		ld.step()
	}
	return b, nil
}

// fp8Part is one part read from a quantized checkpoint.
type fp8Part struct {
	bytes      []uint8
	scales     []float32 // 1, or one per row of the block
	inputScale float32   // 0 without one
}

// loadFP8 reads each part's E4M3 block, its weight scales and its input
// scale, then makes one matrix of them: per-tensor scales are unified to
// the largest part's (the others requantized to it, as vLLM's
// requantize_with_max_scale does, so one scalar serves cuBLASLt), per-channel
// scales are the parts' rows in order; a static input scale is the largest
// of the parts' (they quantize the same input).
func (ld *weightLoader) loadFP8(fb FP8Backend, lw *linearWeight, parts []part) error {
	r, ok := ld.src.Reader.(FP8TensorReader)
	if !ok {
		return fmt.Errorf("the weights' reader (%T) cannot read FP8 tensors", ld.src.Reader)
	}
	read := make([]fp8Part, len(parts))
	for i, p := range parts {
		var err error
		if read[i], err = readFP8Part(r, p, lw.act == QuantStatic); err != nil {
			return err
		}
	}
	var scales []float32
	if lw.perChannel {
		for _, rp := range read {
			scales = append(scales, rp.scales...)
		}
	} else {
		scales = []float32{unifyScales(read)}
	}
	for i, p := range parts {
		if err := fb.UploadFP8(lw.w, p.offset, read[i].bytes); err != nil {
			return fmt.Errorf("upload %s: %w", p.name, err)
		}
		ld.step()
	}
	var err error
	if lw.scale, err = ld.own(F32, len(scales), parts); err != nil {
		return err
	}
	if err := ld.be.UploadF32(lw.scale, scales); err != nil {
		return fmt.Errorf("upload %s scales: %w", parts[0].name, err)
	}
	if lw.act != QuantStatic {
		return nil
	}
	in := float32(0)
	for _, rp := range read {
		in = max(in, rp.inputScale)
	}
	if lw.inputScale, err = ld.own(F32, 1, parts); err != nil {
		return err
	}
	return ld.be.UploadF32(lw.inputScale, []float32{in})
}

// unifyScales requantizes every part whose per-tensor scale is below the
// largest to the largest, in place, and returns it.
func unifyScales(read []fp8Part) float32 {
	top := float32(0)
	for _, rp := range read {
		top = max(top, rp.scales[0])
	}
	for i := range read {
		if s := read[i].scales[0]; s != top {
			ref.RequantizeE4M3(read[i].bytes, read[i].bytes, s, top)
		}
	}
	return top
}

// readFP8Part reads part p's block of its E4M3 weight, the scales of the
// block's rows (or the one scale) and, when static, its input scale.
func readFP8Part(r FP8TensorReader, p part, static bool) (fp8Part, error) {
	data, err := r.E4M3(p.name)
	if err != nil {
		return fp8Part{}, fmt.Errorf("read %s: %w", p.name, err)
	}
	if len(data) != p.rows*p.cols {
		return fp8Part{}, fmt.Errorf("tensor %s: %d elements, want %d", p.name, len(data), p.rows*p.cols)
	}
	var rp fp8Part
	rp.bytes = make([]uint8, 0, p.len())
	for row := p.row0; row < p.row0+p.nrows; row++ {
		rp.bytes = append(rp.bytes, data[row*p.cols+p.col0:row*p.cols+p.col0+p.ncols]...)
	}
	mod := moduleOf(p.name)
	if rp.scales, err = r.Scales(mod + ".weight_scale"); err != nil {
		return rp, fmt.Errorf("read %s.weight_scale: %w", mod, err)
	}
	if len(rp.scales) == p.rows {
		rp.scales = slices.Clone(rp.scales[p.row0 : p.row0+p.nrows])
	}
	if static {
		in, err := r.Scales(mod + ".input_scale")
		if err != nil {
			return rp, fmt.Errorf("read %s.input_scale: %w", mod, err)
		}
		rp.inputScale = in[0]
	}
	return rp, nil
}

// FP8Weight is one FP8 projection as a backend holds it.
type FP8Weight struct {
	Bytes      []uint8
	Scales     []float32
	InputScale float32 // 0: dynamic
}

// FP8Weights downloads every FP8 projection of the engine's model, keyed
// "L.NAME" (layer and projection: "0.qkv_proj"), so that tests can compare
// what two backends loaded bit for bit.
func (e *Engine) FP8Weights() (map[string]FP8Weight, error) {
	out := map[string]FP8Weight{}
	if e.fp8 == nil {
		return out, nil
	}
	for l, lw := range e.w.layers {
		for name, w := range map[string]linearWeight{"qkv_proj": lw.qkv, "o_proj": lw.o, "gate_up_proj": lw.gateUp, "down_proj": lw.down} {
			if !w.fp8() {
				continue
			}
			fw := FP8Weight{Bytes: make([]uint8, w.w.Len()), Scales: make([]float32, w.scale.Len())}
			if err := e.fp8.DownloadFP8(w.w, fw.Bytes); err != nil {
				return nil, err
			}
			if err := e.fp8.DownloadF32(w.scale, fw.Scales); err != nil {
				return nil, err
			}
			if w.inputScale != nil {
				in := make([]float32, 1)
				if err := e.fp8.DownloadF32(w.inputScale, in); err != nil {
					return nil, err
				}
				fw.InputScale = in[0]
			}
			out[fmt.Sprintf("%d.%s", l, name)] = fw
		}
	}
	return out, nil
}
