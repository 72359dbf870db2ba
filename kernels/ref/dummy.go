// dummy.go is the twin of kernels/dummy.cu: the dummy-weight generator.

package ref

// Dummy weights come from a counter-based generator: every element is a pure
// function of (seed, tensor name, element index), so the CUDA kernel
// kernels/dummy.cu fills device memory with exactly the same bits without any
// host-to-device copy, and the cpu backend needs no copy of the GPU's weights.
//
// The generator, in full:
//
//	key   = mix64(seed + mix64(FNV-1a-64(name)))          (once per tensor, on the host)
//	h     = mix64(key + index * 0x9E3779B97F4A7C15)        (splitmix64's stream at `index`)
//	m     = h >> 41                                        (23 bits, 0 .. 2^23-1)
//	odd   = 2*m - (2^23 - 1)                               (odd, so never zero, |odd| < 2^23)
//	value = bf16_rne(float32(odd) * 2^-28)                 (uniform, |value| <= 1/32; the product is exact in fp32)
//
// mix64 is splitmix64's finaliser. Norm weights (DummyOnes) are 1.0 exactly.
// Every step is integer arithmetic or an exact float32 product, so any
// IEEE-754 machine computes the same bits.

// DummyKind says which distribution a dummy tensor takes.
type DummyKind int

const (
	// DummyUniform is the symmetric uniform distribution on [-1/32, 1/32]
	// (bf16 rounding lifts about 1 in 512 values to exactly ±1/32).
	DummyUniform DummyKind = iota
	// DummyOnes is 1.0 everywhere (RMSNorm weights).
	DummyOnes
)

const (
	golden64     = 0x9E3779B97F4A7C15
	fnvOffset64  = 0xcbf29ce484222325
	fnvPrime64   = 0x100000001b3
	dummyScale   = 1.0 / (1 << 28) // 2^-28: odd/2^23 * 2^-5
	bf16One      = 0x3f80
	dummyHalfMax = (1 << 23) - 1
)

// Mix64 is the splitmix64 finaliser.
func Mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// NameHash is the 64-bit FNV-1a hash of a tensor name.
func NameHash(name string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= fnvPrime64
	}
	return h
}

// DummyKey is the per-tensor key the CUDA generator receives.
func DummyKey(seed uint64, name string) uint64 {
	return Mix64(seed + Mix64(NameHash(name)))
}

// DummyElem returns element `index` of the tensor whose key is `key`.
func DummyElem(key uint64, index uint64, kind DummyKind) uint16 {
	if kind == DummyOnes {
		return bf16One
	}
	h := Mix64(key + index*golden64)
	m := int64(h >> 41)
	odd := 2*m - dummyHalfMax
	return F32ToBF16(float32(odd) * dummyScale)
}

// FillDummy writes elements [first, first+len(dst)) of tensor `name` into dst.
func FillDummy(dst []uint16, seed uint64, name string, first uint64, kind DummyKind) {
	FillDummyRows(dst, len(dst), seed, name, first, 0, kind)
}

// FillDummyRows writes rows of rowLen elements of tensor `name`, the first
// starting at element first and each next one rowStride further, into dst
// one after another: a column block of a matrix (the twin of fill_dummy).
func FillDummyRows(dst []uint16, rowLen int, seed uint64, name string, first, rowStride uint64, kind DummyKind) {
	key := DummyKey(seed, name)
	for i := range dst {
		dst[i] = DummyElem(key, first+uint64(i/rowLen)*rowStride+uint64(i%rowLen), kind)
	}
}
