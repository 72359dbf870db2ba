package cuda

// NCCLUint64 is ncclUint64: tensor parallelism's argmax all-reduces 64-bit
// keys with NCCLMax.
const NCCLUint64 NCCLDataType = 5
