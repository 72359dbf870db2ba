#!/usr/bin/env bash
# device-check.sh — the device bundle's one run on a GPU machine (no Go, no
# network): devices, verify (plain and under compute-sanitizer), a short
# llama-3-8b dummy sweep and the roofline floors for the same shapes. Every
# step's output goes to $OUT/<step>.log with its exit code; a failing step
# never stops the ones after it. A short table is printed last.
#
#   STEPBENCH  the binary (default: stepbench beside this script, then bin/stepbench)
#   OUT        where logs and JSON go (default: ./out)
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-./out}"
mkdir -p "$OUT"
if [[ -z "${STEPBENCH:-}" ]]; then
  for candidate in "$here/stepbench" "$here/bin/stepbench" "$here/../bin/stepbench"; do
    if [[ -x "$candidate" ]]; then STEPBENCH="$candidate"; break; fi
  done
fi
if [[ -z "${STEPBENCH:-}" || ! -x "$STEPBENCH" ]]; then
  echo "device-check: no stepbench binary beside $here (set STEPBENCH)" >&2
  exit 1
fi
# The cubin cache lives under $OUT so repeated runs on a fresh machine reuse it.
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$OUT/cache}"

steps=()
codes=()

# run STEP CMD... : run one step, log it, remember its exit code.
run() {
  local step="$1"; shift
  local log="$OUT/$step.log"
  echo "== $step: $*" >&2
  { echo "\$ $*"; "$@"; } >"$log" 2>&1
  local rc=$?
  echo "exit code: $rc" >>"$log"
  steps+=("$step"); codes+=("$rc")
  echo "   exit $rc ($log)" >&2
}

sanitizer=""
if command -v compute-sanitizer >/dev/null 2>&1; then
  sanitizer="$(command -v compute-sanitizer)"
elif [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
fi

run devices "$STEPBENCH" devices
run verify "$STEPBENCH" verify
if [[ -n "$sanitizer" ]]; then
  run memcheck "$sanitizer" --tool memcheck --error-exitcode 3 "$STEPBENCH" verify
  run racecheck "$sanitizer" --tool racecheck --error-exitcode 3 "$STEPBENCH" verify
else
  echo "compute-sanitizer not found on PATH or in /usr/local/cuda/bin: memcheck and racecheck skipped" >"$OUT/sanitizer.log"
fi
run sweep "$STEPBENCH" run --device cuda --model llama-3-8b --load-format dummy --batch-size 1,32 \
  --input-len 1024 --output-len 32 --num-iters 3 --json-out "$OUT/sweep.json" --result-filename "$OUT/sweep.jsonl"
run roofline "$STEPBENCH" roofline --gpu h200 --model llama-3-8b --batch-size 1,32 --input-len 1024 --output-len 32

# HF transformers on the same weights (when torch and transformers are installed): a small random
# LlamaForCausalLM, greedy tokens and logits compared with stepbench's on cuda and on cpu.
if python3 -c 'import torch, transformers' >/dev/null 2>&1 && [[ -f "$here/hf-check.py" ]]; then
  hf="$OUT/hf-model"
  run hf-make python3 "$here/hf-check.py" make "$hf"
  for dev in cuda cpu; do
    rm -f "$OUT/correctness-$dev.jsonl"
    run "correct-$dev" "$STEPBENCH" run --device "$dev" --model-path "$hf" --correctness-test \
      --prompt-ids "$hf/prompts.txt" --output-len 8 --logits-out "$OUT/correctness-$dev.jsonl"
    run "hf-vs-$dev" python3 "$here/hf-check.py" compare "$hf/hf.jsonl" "$OUT/correctness-$dev.jsonl"
  done
else
  echo "torch or transformers not importable: the HF comparison was skipped" >"$OUT/hf-check.log"
fi

# field NAME LINE: a number field of a one_batch JSONL record (no jq needed).
field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" <<<"$2"; }
ms() { awk -v s="$1" 'BEGIN { if (s == "") print "-"; else printf "%.3f", s * 1000 }'; }

echo
echo "step           exit"
for i in "${!steps[@]}"; do printf '%-14s %4s\n' "${steps[$i]}" "${codes[$i]}"; done
for jsonl in "$OUT/sweep.jsonl"; do
  [[ -s "$jsonl" ]] || continue
  echo
  echo "$(basename "$jsonl"): batch  prefill ms (1024 tokens)  decode median ms"
  while IFS= read -r rec; do
    printf '  %5s  %24s  %16s\n' "$(field batch_size "$rec")" "$(ms "$(field prefill_latency "$rec")")" \
      "$(ms "$(field median_decode_latency "$rec")")"
  done <"$jsonl"
done
if [[ -s "$OUT/roofline.log" ]]; then
  echo
  echo "floors (stepbench roofline --gpu h200):"
  grep -v '^\$ \|^exit code' "$OUT/roofline.log" | head -n 20
fi
failed=0
for rc in "${codes[@]}"; do [[ "$rc" == 0 ]] || failed=1; done
exit "$failed"
