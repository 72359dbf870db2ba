#!/usr/bin/env python3
"""Compare stepbench's --correctness-test with HF transformers' LlamaForCausalLM.

Needs torch and transformers (the GPU machine has PyTorch); stepbench itself needs neither.

  hf-check.py make DIR
      writes DIR/: a small random LlamaForCausalLM in llama-tiny's shape (config.json and
      model.safetensors, bf16), DIR/prompts.txt (token ids, one prompt per line) and
      DIR/hf.jsonl: HF's greedy generation, {"prompt", "generated", "logits"} per prompt,
      the same format as stepbench's --logits-out.
  hf-check.py compare DIR/hf.jsonl STEPBENCH.jsonl
      compares them: greedy tokens must agree up to the first step where HF's top two logits
      are within bf16 resolution of each other (a near tie either side may break), and the
      first step's logits (one prefill, no decode) must agree to a relative error of 2e-2.
      Exit 1 on a failure.

HF runs the full sequence at every step (use_cache=False) in bf16 on CUDA when available.
"""
import json
import math
import os
import random
import sys

OUTPUT_LEN = 8
NEAR_TIE = 0.0625  # a bf16 ulp at magnitudes 8..16, above typical logit rounding
MAX_REL_ERR = 2e-2


def make(directory):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, vocab_size=4096, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=2048, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
        initializer_range=0.05, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)

    rng = random.Random(1)
    prompts = [[rng.randrange(cfg.vocab_size) for _ in range(n)] for n in (1, 5, 17, 64)]
    with open(os.path.join(directory, "prompts.txt"), "w") as f:
        for p in prompts:
            f.write(" ".join(map(str, p)) + "\n")
    with open(os.path.join(directory, "hf.jsonl"), "w") as f, torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            generated, logits = [], []
            for _ in range(OUTPUT_LEN):
                last = model(ids, use_cache=False).logits[0, -1]
                nxt = int(torch.argmax(last))
                generated.append(nxt)
                logits.append(last.float().cpu().tolist())
                ids = torch.cat([ids, torch.tensor([[nxt]], device=device)], dim=1)
            f.write(json.dumps({"prompt": p, "generated": generated, "logits": logits}) + "\n")
    print(f"hf-check: wrote {directory} (model, prompts.txt, hf.jsonl; HF on {device})")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rel_err(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den) if den else float("inf")


def top2_gap(row):
    first = second = -math.inf
    for v in row:
        if v > first:
            first, second = v, first
        elif v > second:
            second = v
    return first - second


def compare(hf_path, sb_path):
    hf, sb = read_jsonl(hf_path), read_jsonl(sb_path)
    if len(hf) != len(sb):
        print(f"hf-check: {len(hf)} HF records, {len(sb)} stepbench records")
        return 1
    failed = 0
    print("prompt  len  tokens_equal  first_divergence  first_step_logits_rel_err  verdict")
    for i, (h, s) in enumerate(zip(hf, sb), 1):
        if h["prompt"] != s["prompt"]:
            print(f"{i:6d}  prompts differ")
            failed = 1
            continue
        err = rel_err(s["logits"][0], h["logits"][0])
        diverge = next((k for k, (a, b) in enumerate(zip(h["generated"], s["generated"])) if a != b), None)
        ok = err <= MAX_REL_ERR
        if diverge is not None:
            # Allowed only where HF itself had a near tie at that step.
            ok = ok and top2_gap(h["logits"][diverge]) <= NEAR_TIE
        equal = sum(a == b for a, b in zip(h["generated"], s["generated"]))
        print(f"{i:6d}  {len(h['prompt']):3d}  {equal:5d}/{len(h['generated']):<6d}  "
              f"{'-' if diverge is None else diverge:>16}  {err:25.3g}  {'ok' if ok else 'FAIL'}")
        failed |= not ok
    return failed


def main(argv):
    if len(argv) == 3 and argv[1] == "make":
        make(argv[2])
        return 0
    if len(argv) == 4 and argv[1] == "compare":
        return compare(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
