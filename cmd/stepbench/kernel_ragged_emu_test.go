package main

import (
	"strings"
	"testing"
)

// kernel at ragged shapes on the emulated device, as a user runs it: the
// varlen prefill and the decode step of --context-lens, and a ragged decode
// step on shuffled 4-token pages, each through the block table. Skipped
// while the cuda backend has no block-table kernels (they land with the
// paged kernels: "not built yet").
func TestEmulatedKernelRagged(t *testing.T) {
	onEmulator(t)
	for _, tc := range []struct {
		args   []string
		labels []string
	}{
		{[]string{"attention", "--context-lens", "5,40,17"}, []string{"batch=3/seq=5:40:17/pos=0", "batch=3/seq=1/pos=5:40:17"}},
		{[]string{"rope_kv_write", "--shape", "lens=128:1000:512", "--kv-layout", "paged", "--page-size", "4", "--page-order", "shuffled"},
			[]string{"batch=3/seq=1/pos=128:1000:512/paged=4/shuffled"}},
	} {
		args := append(append([]string{"kernel"}, tc.args...), "--model", "llama-tiny", "--min-samples", "3", "--max-samples", "3",
			"--timeout", "10s", "--no-verify")
		code, stdout, stderr := run(t, args...)
		if code != 0 && strings.Contains(stderr, "not built yet") {
			t.Skipf("the cuda backend's block-table kernels are not built yet: %s", strings.TrimSpace(stderr))
		}
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", tc.args, code, stdout, stderr)
		}
		for _, label := range tc.labels {
			if !strings.Contains(stdout, label) {
				t.Errorf("%v: no row at %s:\n%s", tc.args, label, stdout)
			}
		}
	}
}
