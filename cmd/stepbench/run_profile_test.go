package main

import (
	"strings"
	"testing"
)

// Bad profiler flags are refused in one line, exit 2, before any weight loads.
func TestProfileFlagsRefused(t *testing.T) {
	base := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "4", "--output-len", "4", "--num-iters", "1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--profile-steps", "2"}, "--profile-steps needs --profile"},
		{[]string{"--profile", "--profile-phase", "prefill", "--profile-steps", "2"}, "--profile-steps counts decode steps"},
		{[]string{"--profile", "--profile-phase", "both", "--profile-start-step", "1"}, "starts at the prefill"},
		{[]string{"--profile", "--profile-phase", "decode", "--profile-start-step", "2", "--profile-steps", "2"},
			"ends at decode step 3, but output length 4 has decode steps 0..2 only"},
		{[]string{"--profile", "--profile-phase", "warmup"}, "not prefill, decode or both"},
		{[]string{"--profile"}, "--profile opens a CUDA profiler window: it needs --device cuda"},
	} {
		code, _, stderr := run(t, append(base, tc.args...)...)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if code != exitUsage || !strings.Contains(stderr, tc.want) || len(lines) != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line containing %q", tc.args, code, stderr, tc.want)
		}
	}
}
