package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// roofline at a shape inside every limit (16383 × 131072 prompt tokens on
// llama-3.2-1b, 2^31 − 131073) under a 3 GB address-space limit prints its
// floors at once (issue 31): the cost model allocated 8.6 GB of prompt ids
// (fatal error: out of memory under a 6 GB limit; 40 s without one).
func TestRooflineAllocatesNothingPerToken(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	args := []string{"-c", `ulimit -v 3000000 && exec "$0" "$@"`, "roofline", "--model", "llama-3.2-1b", "--batch-size", "16383",
		"--input-len", "131072", "--output-len", "1"}
	code, stdout, stderr := runShell(t, 60*time.Second, args...)
	if code != 0 || !strings.Contains(stdout, "16383  131072") {
		t.Errorf("roofline at 16383 × 131072: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// roofline refuses every shape run refuses for its counts, with run's
// message word for word.
func TestRooflineRefusesWhatRunRefuses(t *testing.T) {
	for _, shape := range [][]string{
		{"--batch-size", "65537"},
		{"--batch-size", "0"},
		{"--input-len", "131073"},
		{"--input-len", "131072", "--output-len", "2"},
		{"--batch-size", "16385", "--input-len", "131072", "--output-len", "1"},
		{"--batch-size", "1,1,1,x"},
	} {
		common := append([]string{"--model", "llama-3.2-1b"}, shape...)
		runCode, _, runErr := run(t, append([]string{"run", "--device", "cpu", "--load-format", "dummy"}, common...)...)
		roofCode, _, roofErr := run(t, append([]string{"roofline"}, common...)...)
		runMsg, roofMsg := strings.TrimPrefix(runErr, "stepbench run: "), strings.TrimPrefix(roofErr, "stepbench roofline: ")
		if runCode != exitUsage || roofCode != exitUsage || runMsg != roofMsg {
			t.Errorf("%v: run exit %d %q, roofline exit %d %q; want both exit 2 with one message", shape, runCode, runErr, roofCode, roofErr)
		}
	}
}

// runShell runs sh -c SCRIPT with this test binary (as stepbench) as $0 and
// args as its arguments: args[0] is "-c", args[1] the script.
func runShell(t *testing.T, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{args[0], args[1], os.Args[0]}, args[2:]...)...)
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after %s\nstderr:\n%s", args, timeout, errb.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%v: %v", args, err)
	}
	if exit != nil {
		code = exit.ExitCode()
	}
	return code, out.String(), errb.String()
}
