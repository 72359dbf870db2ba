package quanttest

import (
	"path/filepath"
	"strings"

	"stepbench/kernels/ref"
	"stepbench/runner"
)

// WriteBF16 writes a bf16 checkpoint of cfg's shape to dir (config.json as
// the architecture's published ones spell it, model.safetensors with its HF
// tensor names: Qwen3's self_attn.q_norm/k_norm.weight, Qwen2's
// self_attn.q/k/v_proj.bias) from the dummy generator (seed), and returns
// its float64 evaluation. The q/k norm weights are spread over [0.75, 1.25]
// (the loader's dummy ones are 1.0) so that a norm applied with the wrong
// weights, or to the wrong heads, shows. edit, when set, changes the files
// (not the evaluation).
func WriteBF16(dir string, cfg runner.Config, seed uint64, edit Edit) (*Model64, error) {
	bf16 := plainDummyTensors(cfg, seed)
	for name, w := range bf16 {
		if strings.HasSuffix(name, "_norm.weight") && strings.Contains(name, ".self_attn.") {
			u := make([]uint16, len(w))
			ref.FillDummy(u, seed+1, name, 0, ref.DummyUniform) // [-1/32, 1/32]
			for i, v := range u {
				w[i] = ref.F32ToBF16(1 + 8*ref.BF16ToF32(v))
			}
		}
	}
	var tensors []runner.HostTensor
	for _, spec := range runner.ExpectedTensors(cfg) {
		tensors = append(tensors, runner.HostTensor{Name: spec.Name, DType: "BF16", Shape: spec.Shape, Data: bytes16(bf16[spec.Name])})
	}
	hf := HFConfig(cfg)
	if edit != nil {
		tensors = edit(tensors, hf)
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), hf); err != nil {
		return nil, err
	}
	if err := runner.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		return nil, err
	}
	return fusedModel64(cfg, bf16, nil)
}
