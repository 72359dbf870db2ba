package runner

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// projections are the HF modules of a decoder layer that a quantized model
// may hold in FP8 (everything else stays bf16: embeddings, norms, lm_head).
var projections = []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}

// isProjection reports whether tensor is a decoder layer's projection weight.
func isProjection(tensor string) bool {
	if !strings.HasPrefix(tensor, "model.layers.") || !strings.HasSuffix(tensor, ".weight") {
		return false
	}
	for _, p := range projections {
		if strings.HasSuffix(tensor, "."+p+".weight") {
			return true
		}
	}
	return false
}

// checkQuantized checks every expected tensor's dtype against the model's
// quantization and each FP8 projection's scales (present, of the scheme's
// shape, float, positive and finite). The first problem is the error: one
// line naming the tensor and what the scheme wanted.
func (m *SafetensorsModel) checkQuantized(cfg Config) error {
	q := cfg.Quantization
	for _, spec := range ExpectedTensors(cfg) {
		f := m.byName[spec.Name]
		t := f.tensors[spec.Name]
		mod := moduleOf(spec.Name)
		if q.Serialized() && isProjection(spec.Name) && !q.Ignored(mod) {
			if err := m.checkFP8Module(f, spec, q); err != nil {
				return err
			}
			continue
		}
		if floatDType(t.DType) {
			continue
		}
		why := "config.json declares no FP8 quantization_config (a bf16 model)"
		switch {
		case q.Serialized() && !isProjection(spec.Name):
			why = "only the decoder layers' projections may be FP8 (embeddings, norms and lm_head are bf16)"
		case q.Serialized():
			why = fmt.Sprintf("the %s quantization's ignore list keeps %s in bf16", q.Format, mod)
		case q != nil:
			why = "--quantization fp8 quantizes bf16 weights while loading; an FP8 checkpoint declares its quantization_config"
		}
		return fmt.Errorf("tensor %q in %s: dtype %s, but %s", spec.Name, f.path, t.DType, why)
	}
	return nil
}

// checkFP8Module checks one FP8 projection: its weight E4M3, its
// weight_scale and (static activations) its input_scale.
func (m *SafetensorsModel) checkFP8Module(f *safetensorsFile, spec TensorSpec, q *Quantization) error {
	t := f.tensors[spec.Name]
	switch t.DType {
	case "F8_E4M3":
	case "F8_E5M2":
		return fmt.Errorf("tensor %q in %s: dtype F8_E5M2: FP8 E5M2 weights are not supported (E4M3 only)", spec.Name, f.path)
	default:
		return fmt.Errorf("tensor %q in %s: dtype %s, want F8_E4M3 (the %s quantization holds this projection in FP8)",
			spec.Name, f.path, t.DType, q.Format)
	}
	mod := moduleOf(spec.Name)
	scaleShapes := [][]int{{}, {1}}
	if q.WeightScales == ScalesChannel {
		scaleShapes = [][]int{{spec.Shape[0], 1}, {spec.Shape[0]}}
	}
	if err := m.checkScale(mod+".weight_scale", scaleShapes, fmt.Sprintf("per-%s weight scales", q.WeightScales), spec.Name); err != nil {
		return err
	}
	if q.Activations != ActStatic {
		return nil
	}
	return m.checkScale(mod+".input_scale", [][]int{{}, {1}}, "static per-tensor activation scales", spec.Name)
}

// checkScale checks a scale tensor: present, one of shapes, a float dtype,
// every value positive and finite.
func (m *SafetensorsModel) checkScale(name string, shapes [][]int, scheme, weight string) error {
	f, ok := m.byName[name]
	if !ok {
		return fmt.Errorf("tensor %q: missing from %s (%s: the FP8 weight %s needs it)", name, m.source, scheme, weight)
	}
	t := f.tensors[name]
	if !slices.ContainsFunc(shapes, func(s []int) bool { return slices.Equal(s, t.Shape) }) {
		want := make([]string, len(shapes))
		for i, s := range shapes {
			want[i] = fmt.Sprint(s)
		}
		return fmt.Errorf("tensor %q in %s: shape %v, want %s (%s)", name, f.path, t.Shape, strings.Join(want, " or "), scheme)
	}
	if !floatDType(t.DType) {
		return fmt.Errorf("tensor %q in %s: dtype %s, want F32, BF16 or F16 (a scale)", name, f.path, t.DType)
	}
	values, err := m.Scales(name)
	if err != nil {
		return err
	}
	for i, v := range values {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("tensor %q in %s: element %d is %g: a scale must be positive and finite", name, f.path, i, v)
		}
	}
	return nil
}
