// activation.go is the twin of kernels/activation.cu: SwiGLU's gate.

package ref

import "math"

// SiluMul is SwiGLU's gate: gateUp is [rows, 2*inter] with the gate in columns
// [0, inter) and up in [inter, 2*inter) (the fused gate_up projection). With
// g = f32(gate):
//
//	a = bf16(g / (1 + exp(-g)))          (HF: silu on a bf16 tensor returns bf16)
//	out[r*inter+i] = bf16(f32(a) * f32(up))
//
// exp is math.Exp in float64 rounded to float32 (as close as float32 expf gets).
//
// Preconditions: rows, inter >= 0, len(gateUp) >= rows*2*inter, len(out) >= rows*inter.
func SiluMul(out, gateUp []uint16, rows, inter int) {
	needShape("SiluMul", rows >= 0 && inter >= 0, "bad shape rows %d inter %d", rows, inter)
	needLen("SiluMul", "gateUp", len(gateUp), rows*2*inter)
	needLen("SiluMul", "out", len(out), rows*inter)
	for r := 0; r < rows; r++ {
		gate := gateUp[r*2*inter : r*2*inter+inter]
		up := gateUp[r*2*inter+inter : (r+1)*2*inter]
		o := out[r*inter : (r+1)*inter]
		for i := range o {
			g := BF16ToF32(gate[i])
			a := RoundBF16(g / (1 + float32(math.Exp(float64(-g)))))
			o[i] = F32ToBF16(a * BF16ToF32(up[i]))
		}
	}
}
