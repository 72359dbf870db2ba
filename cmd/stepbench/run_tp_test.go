package main

import (
	"strings"
	"testing"
)

// Bad tensor-parallel flags are refused in one line, exit 2, before
// anything is loaded.
func TestTPFlagsRefused(t *testing.T) {
	base := []string{"run", "--model", "llama-tiny", "--input-len", "4", "--output-len", "4", "--num-iters", "1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "cuda", "--tp-size", "3"}, "--tp-size: tensor-parallel size 3 does not divide llama-tiny's 4 attention heads"},
		{[]string{"--device", "cpu", "--tp-size", "2"}, "--tp-size runs ranks on the cuda backend through NCCL; the cpu backend is one rank"},
		{[]string{"--device", "cuda", "--tp-size", "0"}, "--tp-size: 0 must be at least 1"},
		{[]string{"--device", "cuda", "--tp-size", "3", "--nnodes", "2", "--dist-init-addr", "h:1"}, "--nnodes must divide --tp-size"},
		{[]string{"--device", "cuda", "--tp-size", "2", "--nnodes", "2"}, "--nnodes 2 needs --dist-init-addr"},
		{[]string{"--device", "cuda", "--tp-size", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"}, "--node-rank 2: must be 0..1"},
		{[]string{"--device", "cuda", "--dist-init-addr", "h:1"}, "are for runs over several nodes"},
		{[]string{"--device", "cuda", "--nccl", "/x/libnccl.so.2"}, "--nccl is for tensor parallelism"},
		{[]string{"--device", "cuda", "--tp-size", "2", "--breakdown", "--disable-cuda-graph"}, "--breakdown times one GPU's ops"},
	} {
		code, _, stderr := run(t, append(base, tc.args...)...)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if code != exitUsage || !strings.Contains(stderr, tc.want) || len(lines) != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line containing %q", tc.args, code, stderr, tc.want)
		}
	}
	// Over several nodes adaptive sampling would desynchronise the nodes.
	code, _, stderr := run(t, "run", "--model", "llama-tiny", "--device", "cuda", "--tp-size", "2", "--nnodes", "2",
		"--dist-init-addr", "h:1")
	if code != exitUsage || !strings.Contains(stderr, "needs --num-iters N") {
		t.Errorf("--nnodes 2 without --num-iters: exit %d, %q", code, stderr)
	}
}

// More ranks than the node's GPUs: refused before anything loads (the
// emulated device has one GPU unless told otherwise).
func TestTPMoreRanksThanGPUs(t *testing.T) {
	onEmulator(t)
	code, _, stderr := run(t, "run", "--device", "cuda", "--model", "llama-tiny", "--tp-size", "2", "--input-len", "4",
		"--output-len", "2", "--num-iters", "1")
	if code != exitUsage || !strings.Contains(stderr, "--tp-size 2 over 1 node(s) needs 2 GPUs on this node, 1 visible") ||
		strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want one line, exit 2", code, stderr)
	}
}
