"""A decode-attention kernel in Triton, made into a stepbench op library
(include/stepbench_op.h) by build.sh: python -m triton.tools.compile turns
it into C (the cubin embedded, a launcher per head_dim), shim.c adapts that
launcher to the ABI.

One program per (query head, sequence); the cache's keys in blocks of
BLOCK_N with an online softmax. The number of keys is read from pos on the
device (pos + 1), so a captured decode step replays right at every position.
Operands as stepbench passes them: out and q [B, 1, H, D], the caches
[B, P, K, D], bf16; pos one int32.
"""
import triton
import triton.language as tl


@triton.jit
def attn_decode(out, q, k_cache, v_cache, pos, B, H, K, P, scale, D: tl.constexpr, BLOCK_N: tl.constexpr):
    h = tl.program_id(0)
    b = tl.program_id(1)
    kvh = h // (H // K)
    keys = tl.minimum(tl.load(pos) + 1, P)
    d = tl.arange(0, D)
    qv = tl.load(q + (b * H + h) * D + d).to(tl.float32)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([D], tl.float32)
    for start in range(0, keys, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < keys
        rows = ((b * P + n) * K + kvh) * D
        kv = tl.load(k_cache + rows[:, None] + d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.where(valid, tl.sum(kv * qv[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        vv = tl.load(v_cache + rows[:, None] + d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * vv, axis=0)
        m = m_new
    tl.store(out + (b * H + h) * D + d, (acc / l).to(tl.bfloat16))
