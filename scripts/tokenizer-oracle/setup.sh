#!/usr/bin/env bash
# Sets up the tokenizer oracle in DIR (default build/tokenizer-oracle):
# installs llama3-tokenizer-js 1.2.0 (package-lock.json pins it) with npm ci
# and writes DIR/tokenizer.json and DIR/tokenizer-pairs.json from its
# vocabulary and merges; DIR/ready marks a finished setup, which
# tokenizer/oracle_test.go looks for.
#
# Without node or npm, or when the registry cannot be reached, it says so and
# exits 0: the corpus comparison then skips (it must not fail CI for a
# network). A failure after a good install (a broken build script) exits 1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-build/tokenizer-oracle}

skip() {
	rm -f "$dir/ready"
	echo "tokenizer oracle: SKIPPED ($1): the corpus comparison with llama3-tokenizer-js (go test ./tokenizer -run Oracle) will skip"
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
installed="$dir/node_modules/llama3-tokenizer-js/package.json"
if ! grep -q '"version": "1.2.0"' "$installed" 2>/dev/null; then
	rm -f "$dir/ready"
	# Fail fast when the registry is unreachable (two tries, 20 s each).
	if ! (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --prefer-offline --fetch-retries=1 \
		--fetch-timeout=20000 --loglevel=error) >"$dir/npm.log" 2>&1; then
		skip "npm ci failed, see $dir/npm.log"
	fi
fi
if [[ ! -f "$dir/ready" ]]; then
	if ! (cd "$dir" && node oracle.mjs build .); then
		echo "tokenizer oracle: building $dir/tokenizer.json from llama3-tokenizer-js failed" >&2
		exit 1
	fi
	touch "$dir/ready"
fi
echo "tokenizer oracle: llama3-tokenizer-js 1.2.0 on node $(node --version) in $dir"
