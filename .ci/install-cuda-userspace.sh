#!/usr/bin/env bash
# Installs NVRTC 11.8 (libnvrtc11.2 + libnvrtc-builtins11.8) from Debian 12's
# contrib/non-free components so that cuda/ tests and CI can compile kernels
# without a GPU or the CUDA toolkit. Run as root on Debian 12 (bookworm).
# Idempotent: the sources entry is rewritten only when it differs, and the apt
# steps are skipped when both packages are already installed.
#
# STEPBENCH_CUDA_HEADERS=1 also puts Debian's CUDA 11.8 headers (cuda_bf16.h,
# cuda_fp16.h, ...) into /usr/local/cuda-11.8/include, where stepbench looks
# for a toolkit's headers, for the tests that compile kernels including them.
# They come from nvidia-cuda-dev, which is not installed: its .deb is a 774 MB
# download and 2.7 GB installed, with cuBLAS, cuFFT, NPP and more as
# dependencies, so only its usr/include is extracted (about 20 MB; the
# download took 10 s here). .ci/run sets it; the tests skip with a message
# without the headers.
set -euo pipefail

readonly packages=(libnvrtc11.2 libnvrtc-builtins11.8)
readonly nonfree_sources=/etc/apt/sources.list.d/debian-nonfree.sources
readonly keyring=/usr/share/keyrings/debian-archive-keyring.gpg

all_installed() {
	local pkg status
	for pkg in "${packages[@]}"; do
		status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
		[[ "$status" == "install ok installed" ]] || return 1
	done
}

# debian_mirror prints the URI of the main Debian archive (the entry serving
# suite "bookworm", not bookworm-security) that this machine already uses.
debian_mirror() {
	local uri=""
	if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
		# deb822: stanzas separated by blank lines; pick the one whose Suites
		# field lists exactly "bookworm".
		uri=$(awk '
			BEGIN { RS = ""; FS = "\n" }
			{
				uris = ""; main_suite = 0
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, u, /[ \t]+/); uris = u[1] }
					if ($i ~ /^Suites:/) {
						sub(/^Suites:[ \t]*/, "", $i); n = split($i, s, /[ \t]+/)
						for (j = 1; j <= n; j++) if (s[j] == "bookworm") main_suite = 1
					}
				}
				if (main_suite && uris != "") { print uris; exit }
			}' /etc/apt/sources.list.d/debian.sources)
	fi
	if [[ -z "$uri" && -r /etc/apt/sources.list ]]; then
		# One-line format: deb [options] URI SUITE COMPONENTS...
		uri=$(awk '$1 == "deb" {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i + 1) == "bookworm") { print $i; exit }
			}' /etc/apt/sources.list)
	fi
	if [[ -z "$uri" ]]; then
		echo "install-cuda-userspace: cannot find the Debian bookworm mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list" >&2
		return 1
	fi
	printf '%s\n' "$uri"
}

readonly headers_dir=/usr/local/cuda-11.8/include

# install_cuda_headers extracts nvidia-cuda-dev's usr/include (see above).
install_cuda_headers() {
	if [[ -f "$headers_dir/cuda_bf16.h" ]]; then
		echo "install-cuda-userspace: CUDA headers already in $headers_dir"
		return 0
	fi
	local tmp status=0
	tmp=$(mktemp -d)
	chmod 755 "$tmp" # apt's _apt user writes the download
	if (cd "$tmp" && apt-get download nvidia-cuda-dev) && mkdir -p "$tmp/x" &&
		dpkg-deb --fsys-tarfile "$tmp"/nvidia-cuda-dev_*.deb | tar -x -C "$tmp/x" --wildcards './usr/include/*'; then
		mkdir -p "$(dirname "$headers_dir")"
		rm -rf "$headers_dir.tmp" && mv "$tmp/x/usr/include" "$headers_dir.tmp" && mv "$headers_dir.tmp" "$headers_dir"
		echo "install-cuda-userspace: CUDA 11.8 headers from nvidia-cuda-dev in $headers_dir"
	else
		status=1
	fi
	rm -rf "$tmp"
	return "$status"
}

main() {
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-cuda-userspace: must run as root" >&2
		exit 1
	fi
	local mirror wanted
	mirror=$(debian_mirror)
	wanted="Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: ${keyring}"
	if [[ ! -f "$nonfree_sources" ]] || [[ "$(cat "$nonfree_sources")" != "$wanted" ]]; then
		printf '%s\n' "$wanted" >"$nonfree_sources"
		echo "install-cuda-userspace: wrote $nonfree_sources (mirror $mirror)"
	fi

	export DEBIAN_FRONTEND=noninteractive
	if all_installed; then
		echo "install-cuda-userspace: ${packages[*]} already installed; skipping apt"
	else
		apt-get update
		apt-get install -y --no-install-recommends "${packages[@]}"
	fi
	if [[ "${STEPBENCH_CUDA_HEADERS:-}" == 1 ]]; then
		install_cuda_headers
	fi
}

main "$@"
