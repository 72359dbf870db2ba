#!/usr/bin/env bash
# build.sh OUT.so — the Triton recipe (op ABI 2): compile attn_decode_triton.py ahead of
# time with python -m triton.tools.compile for head_dim 64 and 128 (the
# cubin for this machine's GPU embedded in C), then gcc the generated C and
# shim.c into an op library. Needs Triton (pip install triton) and a GPU
# driver (libcuda.so.1); cuda.h comes from Triton's own include directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# stepbench_op.h: beside the recipes in the device bundle, else the repository's include/.
sbinc="$here/../include"
[[ -f "$sbinc/stepbench_op.h" ]] || sbinc="$here/../../../include"
out="${1:?usage: build.sh OUT.so}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
inc="$(python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "include"))')"
defs=()
for d in 64 128; do
	# *bf16:16 — pointers 16-byte aligned; the table and lengths *i32; B, H, K, PS, MP i32; the caches'
	# strides i64 (elements); scale fp32; D and BLOCK_N compile-time constants.
	python3 -m triton.tools.compile "$here/attn_decode_triton.py" --kernel-name attn_decode \
		--signature "*bf16:16, *bf16:16, *bf16:16, *bf16:16, *i32, *i32, *i32, i32, i32, i32, i32, i32, i64, i64, i64, i64, i64, i64, fp32, $d, 64" \
		--grid "H,B,1" --num-warps 4 --out-name "attn_decode_d$d" --out-path "$work/attn_decode_d$d"
	header="$(ls "$work"/attn_decode_d$d.*.h)"
	# The launcher's name (attn_decode_dD_<signature hash>_<specialization>): the function the header declares.
	name="$(sed -n "s/^CUresult[[:space:]]*\(attn_decode_d${d}_[A-Za-z0-9_]*\)(CUstream.*/\1/p" "$header" | head -n 1)"
	[[ -n "$name" ]] || { echo "build.sh: no launcher declared in $header" >&2; exit 1; }
	defs+=("-DTRITON_D$d=$name")
done
gcc -std=c11 -O2 -fPIC -shared -I"$inc" -I"$sbinc" "${defs[@]}" -o "$out" "$here/shim.c" "$work"/*.c -l:libcuda.so.1 -lm
echo "build.sh: wrote $out (${defs[*]})"
