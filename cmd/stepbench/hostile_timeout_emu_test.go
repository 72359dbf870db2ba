package main

import (
	"strings"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// --step-timeout covers every command that launches work (issue 31): a
// kernel that never returns (spinningKernels: embed spins) ends verify,
// kernel and ab with exit 1 and one line naming the stuck work and the
// stream's last kernel; a GEMM too long for the timeout ends calibrate.
// verify and kernel had no step timeout at all and waited forever, and ab
// none either.
func TestEmulatedStepTimeoutEveryCommand(t *testing.T) {
	seeded.Expect(t, "a kernel that never returns (verify, kernel, ab, calibrate)")
	onEmulator(t)
	spin := spinningKernels(t)
	env := []string{"XDG_CACHE_HOME=" + emuCacheHome}
	const stuck = "step timeout: the device's work (a kernel that never returns? the stream's last launch: "
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--kernels-dir", spin, "--check", "embed", "--step-timeout", "1s"},
			"stepbench verify: " + stuck + "embed) did not finish within 1s (--step-timeout)"},
		{[]string{"kernel", "input_norm", "--model", "llama-tiny", "--kernels-dir", spin, "--input-len", "4", "--step-timeout", "1s"},
			"stepbench kernel: " + stuck + "embed) did not finish within 1s"},
		{[]string{"ab", "--model", "llama-tiny", "--kernels-dir", spin, "--batch-size", "1", "--input-len", "4", "--output-len", "2",
			"--num-iters", "1", "--step-timeout", "1s"}, "stepbench ab: " + stuck + "embed) did not finish within 1s"},
		{[]string{"calibrate", "--force", "--cache-dir", t.TempDir(), "--gemm-size", "4096", "--repeats", "1", "--copy-mib", "1",
			"--step-timeout", "500ms"}, "stepbench calibrate: " + stuck + "no kernel of ours; a library's) did not finish within 500ms"},
	} {
		code, _, stderr := runProcess(t, 120*time.Second, env, tc.args...)
		if code != exitFailure || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "step timeout") != 1 {
			t.Errorf("%s: exit %d, stderr:\n%s\nwant exit 1 and once %q", tc.args[0], code, stderr, tc.want)
		}
	}
}
