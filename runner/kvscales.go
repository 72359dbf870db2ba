package runner

import (
	"fmt"
	"math"
	"strings"

	"stepbench/internal/input"
)

// kvScaleNames are the names a checkpoint stores layer l's K and V cache
// scales under, in the order they are looked up: vLLM's own
// (self_attn.k_scale / v_scale), ModelOpt's on the projections
// (k_proj.k_scale / v_proj.v_scale), a fused projection's
// (qkv_proj.k_scale / v_scale), and the deprecated single kv_scale that
// serves both (vLLM's maybe_remap_kv_scale_name maps each onto the
// attention layer's k_scale and v_scale).
func kvScaleNames(l int) [][2]string {
	p := fmt.Sprintf("model.layers.%d.self_attn.", l)
	return [][2]string{
		{p + "k_scale", p + "v_scale"},
		{p + "k_proj.k_scale", p + "v_proj.v_scale"},
		{p + "qkv_proj.k_scale", p + "qkv_proj.v_scale"},
		{p + "kv_scale", p + "kv_scale"},
	}
}

// KVScaleSource says where a run's FP8 cache scales came from.
type KVScaleSource struct {
	// Kind is "checkpoint", "unit" (1.0: the checkpoint has none, or dummy
	// weights) or "calibrated".
	Kind string `json:"kind"`
	// Names is the pair of tensor names of layer 0 (a checkpoint's).
	Names   [2]string `json:"names,omitempty"`
	PerHead bool      `json:"per_kv_head,omitempty"`
}

func (s KVScaleSource) String() string {
	switch s.Kind {
	case "checkpoint":
		per := "per tensor"
		if s.PerHead {
			per = "per KV head"
		}
		return fmt.Sprintf("from the checkpoint (%s, %s; %s)", s.Names[0], s.Names[1], per)
	case "calibrated":
		return "calibrated (the prefill's amax over 200 for K, 100 for V, as vLLM's)"
	}
	return "1.0 (no scales in the checkpoint)"
}

// ReadKVScales reads an FP8 cache's K and V scales from m under the names
// vLLM reads (kvScaleNames): a scalar (or [1]) per tensor, or one per KV
// head. A checkpoint with none gives 1.0 everywhere (vLLM's default);
// one that has them for some layers only, in a shape that fits neither,
// or with a value that is not positive and finite is bad input naming the
// tensor.
func ReadKVScales(m *SafetensorsModel, cfg Config) (KVScales, KVScaleSource, error) {
	layers, kvHeads := cfg.NumHiddenLayers, cfg.NumKeyValueHeads
	s := UnitKVScales(layers, kvHeads)
	src := KVScaleSource{Kind: "unit"}
	found := 0
	for l := range layers {
		var names [2]string
		for _, n := range kvScaleNames(l) {
			if _, ok := m.byName[n[0]]; ok {
				if _, ok := m.byName[n[1]]; !ok {
					return s, src, input.Bad(fmt.Errorf("kv cache scales in %s: %q without %q", m.source, n[0], n[1]))
				}
				names = n
				break
			}
		}
		if names[0] == "" {
			continue
		}
		found++
		for i, name := range names {
			v, err := m.Scales(name)
			if err != nil {
				return s, src, input.Bad(fmt.Errorf("kv cache scales: %w", err))
			}
			dst := [][]float32{s.K[l], s.V[l]}[i]
			switch len(v) {
			case 1:
				for g := range dst {
					dst[g] = v[0]
				}
			case kvHeads:
				copy(dst, v)
				src.PerHead = true
			default:
				return s, src, input.Bad(fmt.Errorf("kv cache scales: tensor %q holds %d values: want 1 (per tensor) or %d (per KV head)", name, len(v), kvHeads))
			}
			for g, x := range dst {
				if !(x > 0) || math.IsInf(float64(x), 0) {
					return s, src, input.Bad(fmt.Errorf("kv cache scales: tensor %q: KV head %d's scale is %v: want positive and finite", name, g, x))
				}
			}
		}
		if src.Names[0] == "" {
			src.Names = names
		}
	}
	switch {
	case found == 0:
		return s, src, nil
	case found < layers:
		return s, src, input.Bad(fmt.Errorf("kv cache scales in %s: %d of %d layers have them (e.g. %s): want all or none",
			m.source, found, layers, strings.Join(src.Names[:], ", ")))
	}
	src.Kind = "checkpoint"
	return s, src, nil
}
