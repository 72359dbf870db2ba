#!/usr/bin/env python3
"""Time llama-tiny's prefill and decode steps in PyTorch eager on the CPU, as
stepbench run --device cpu --model llama-tiny times them: the baseline the
cpu backend is held to (docs/cpu-backend.md).

  torch-eager-tiny.py [--batch-size 1] [--input-len 64] [--output-len 16] [--iters 30] [--threads N]

The model is llama-tiny's shape (4 layers, hidden 128, 4 heads over 2 KV heads of 32, intermediate 384,
vocab 4096) in bf16 with random weights, written as a minimal Llama in plain torch ops: RMSNorm, fused
qkv and gate_up projections, rotate-half RoPE, a preallocated KV cache, GQA attention as HF's
eager attention (matmul, causal mask, float32 softmax, matmul), SiLU*up, greedy argmax of the last position; under torch.inference_mode,
no torch.compile. HF transformers' LlamaForCausalLM does the same ops with more Python around them, so
this is, if anything, faster than HF eager. Prints one line per phase: median seconds over iterations
(decode: of each iteration's median step, as stepbench's summary).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

H, INTER, LAYERS, HEADS, KV, D, VOCAB, EPS, THETA = 128, 384, 4, 4, 2, 32, 4096, 1e-5, 500000.0


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class TinyLlama:
    def __init__(self, batch, max_seq, dtype=torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        r = lambda *shape: (torch.rand(*shape, generator=g) * 2 - 1).div(32).to(dtype)
        self.embed = r(VOCAB, H)
        self.lm_head = r(VOCAB, H)
        self.norm = torch.ones(H, dtype=dtype)
        self.layers = [dict(in_norm=torch.ones(H, dtype=dtype), post_norm=torch.ones(H, dtype=dtype),
                            qkv=r((HEADS + 2 * KV) * D, H), o=r(H, HEADS * D),
                            gate_up=r(2 * INTER, H), down=r(H, INTER)) for _ in range(LAYERS)]
        inv = 1.0 / (THETA ** (torch.arange(0, D, 2).float() / D))
        ang = torch.outer(torch.arange(max_seq).float(), inv)
        emb = torch.cat((ang, ang), dim=-1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        self.k = [torch.zeros(batch, KV, max_seq, D, dtype=dtype) for _ in range(LAYERS)]
        self.v = [torch.zeros(batch, KV, max_seq, D, dtype=dtype) for _ in range(LAYERS)]

    def forward(self, ids, start):
        b, s = ids.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[start:start + s], self.sin[start:start + s]
        residual = x
        for i, l in enumerate(self.layers):
            h = rms_norm(residual, l["in_norm"])
            qkv = F.linear(h, l["qkv"])
            q, k, v = qkv.split([HEADS * D, KV * D, KV * D], dim=-1)
            q = q.view(b, s, HEADS, D).transpose(1, 2)
            k = k.view(b, s, KV, D).transpose(1, 2)
            v = v.view(b, s, KV, D).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            self.k[i][:, :, start:start + s] = k
            self.v[i][:, :, start:start + s] = v
            keys = self.k[i][:, :, :start + s].repeat_interleave(HEADS // KV, dim=1)
            vals = self.v[i][:, :, :start + s].repeat_interleave(HEADS // KV, dim=1)
            scores = torch.matmul(q, keys.transpose(2, 3)) / (D ** 0.5)
            if s > 1:  # causal: query start+i sees keys 0..start+i
                qpos = torch.arange(start, start + s).view(s, 1)
                scores = scores.masked_fill(torch.arange(start + s).view(1, -1) > qpos, float("-inf"))
            a = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), vals)
            residual = residual + F.linear(a.transpose(1, 2).reshape(b, s, HEADS * D), l["o"])
            h = rms_norm(residual, l["post_norm"])
            gate, up = F.linear(h, l["gate_up"]).chunk(2, dim=-1)
            residual = residual + F.linear(F.silu(gate) * up, l["down"])
        last = rms_norm(residual[:, -1], self.norm)
        return torch.argmax(F.linear(last, self.lm_head), dim=-1, keepdim=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave PyTorch's default)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model = TinyLlama(a.batch_size, a.input_len + a.output_len)
    prefill, decode = [], []
    with torch.inference_mode():
        for it in range(a.iters + 1):  # the first is a warmup
            ids = torch.randint(0, VOCAB, (a.batch_size, a.input_len))
            t0 = time.perf_counter()
            nxt = model.forward(ids, 0)
            t1 = time.perf_counter()
            steps = []
            for step in range(a.output_len - 1):
                s0 = time.perf_counter()
                nxt = model.forward(nxt, a.input_len + step)
                steps.append(time.perf_counter() - s0)
            if it > 0:
                prefill.append(t1 - t0)
                decode.append(statistics.median(steps))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {a.batch_size}, input {a.input_len}, output {a.output_len}, {a.iters} iterations")
    print(f"prefill median {statistics.median(prefill) * 1e3:.3f} ms")
    print(f"decode  median {statistics.median(decode) * 1e3:.3f} ms (of each iteration's median step)")


if __name__ == "__main__":
    main()
