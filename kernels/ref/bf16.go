// Package ref holds every operation of the Llama forward pass in plain Go.
// It is the truth each CUDA kernel in package kernels is checked against and
// the engine of the cpu backend. Tensors are row-major; bf16 values are held
// as their raw 16-bit patterns (uint16) so that the GPU and the CPU agree bit
// for bit on what is stored.
package ref

import "math"

// BF16ToF32 widens a bf16 bit pattern to float32 (exact).
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 rounds a float32 to bf16 with round-to-nearest-even, the rounding
// of PyTorch's .to(torch.bfloat16) and of our CUDA helper. NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and NaN
		return uint16(bits>>16) | 0x0040
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// RoundBF16 returns f rounded through bf16 and widened back.
func RoundBF16(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }

// ToBF16 converts a float32 slice to bf16.
func ToBF16(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = F32ToBF16(v)
	}
}

// ToF32 widens a bf16 slice to float32.
func ToF32(dst []float32, src []uint16) {
	for i, v := range src {
		dst[i] = BF16ToF32(v)
	}
}
