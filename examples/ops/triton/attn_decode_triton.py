"""A decode-attention kernel in Triton over op ABI 2's paged KV cache, made
into a stepbench op library (include/stepbench_op.h) by build.sh: python -m
triton.tools.compile turns it into C (the cubin embedded, a launcher per
head_dim), shim.c adapts that launcher to the ABI.

One program per (query head, sequence); the sequence's keys in blocks of
BLOCK_N, each key found through the block table (page = table[b][n // PS],
slot n % PS; K and V by their own strides, so NHD or HND), with an online
softmax. The number of keys is read from seq_lens on the device, so a
captured decode step replays right at every step. Operands as stepbench
passes them: out and q [T, H, D] (row query_start[b] for sequence b), the
caches [pages, PS, K, D] bf16, the table and lengths int32.
"""
import triton
import triton.language as tl


@triton.jit
def attn_decode(out, q, k_cache, v_cache, block_table, seq_lens, query_start, B, H, K, PS, MP,
                ks0, ks1, ks2, vs0, vs1, vs2, scale, D: tl.constexpr, BLOCK_N: tl.constexpr):
    h = tl.program_id(0)
    b = tl.program_id(1)
    kvh = h // (H // K)
    row = tl.load(query_start + b)
    keys = tl.load(seq_lens + b)
    d = tl.arange(0, D)
    qv = tl.load(q + (row * H + h) * D + d).to(tl.float32)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([D], tl.float32)
    for start in range(0, keys, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < keys
        page = tl.load(block_table + b * MP + n // PS, mask=valid, other=0).to(tl.int64)
        k_rows = page * ks0 + (n % PS) * ks1 + kvh * ks2
        v_rows = page * vs0 + (n % PS) * vs1 + kvh * vs2
        kv = tl.load(k_cache + k_rows[:, None] + d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.where(valid, tl.sum(kv * qv[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        vv = tl.load(v_cache + v_rows[:, None] + d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * vv, axis=0)
        m = m_new
    tl.store(out + (row * H + h) * D + d, (acc / l).to(tl.bfloat16))
