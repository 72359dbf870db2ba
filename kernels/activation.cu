// activation.cu — SwiGLU: out = silu(gate) * up.

// silu_mul over gateUp [rows, 2*inter] (gate then up), out [rows, inter]:
//   a = bf16(g / (1 + exp(-g))); out = bf16(a * u).
// Grid-stride over 8-element groups when vec8 (inter % 8 == 0, aligned),
// else over single elements.
extern "C" __global__ void silu_mul(unsigned short* __restrict__ out,
                                    const unsigned short* __restrict__ gateUp, int rows,
                                    int inter, int vec8) {
    SB_PDL_WAIT();
    SB_PDL_LAUNCH_DEPENDENTS();
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec8) {
        const int per_row = inter / 8;
        const long long total = (long long)rows * per_row;
        for (long long v = first; v < total; v += stride) {
            const long long r = v / per_row;
            const int c = (int)(v - r * per_row);
            const u32x4* gate = (const u32x4*)(gateUp + r * 2 * inter);
            const u32x4* up = (const u32x4*)(gateUp + r * 2 * inter + inter);
            float g[8], u[8];
            unpack8(gate[c], g);
            unpack8(up[c], u);
            for (int j = 0; j < 8; j++) g[j] = round_bf16(g[j] / (1.0f + expf(-g[j]))) * u[j];
            ((u32x4*)(out + r * inter))[c] = pack8(g);
        }
    } else {
        const long long total = (long long)rows * inter;
        for (long long i = first; i < total; i += stride) {
            const long long r = i / inter;
            const long long c = i - r * inter;
            const float g = bf16_to_f32(gateUp[r * 2 * inter + c]);
            const float u = bf16_to_f32(gateUp[r * 2 * inter + inter + c]);
            out[i] = f32_to_bf16_rne(round_bf16(g / (1.0f + expf(-g))) * u);
        }
    }
}
