package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/bench/report"
	"stepbench/internal/seeded"
)

// faultRun is one child run of the fault test: a four-shape sweep writing
// all three result files into one directory shared by every run, its
// records named by the run.
type faultRun struct {
	name                 string
	exitCode             int
	killed               bool
	stderr               string
	startedShapes        int // the last "shape k/4" line printed
	limitBytes, killAtMs int
}

// faultSweep has four shapes; a run of it takes a few hundred ms.
func faultSweep(dir, runName string) []string {
	return []string{"run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1", "2", "--input-len", "8", "16",
		"--output-len", "4", "--num-iters", "3", "--num-iters-warmup", "0", "--energy-window-seconds", "0", "--run-name", runName,
		"--result-filename", filepath.Join(dir, "r.jsonl"), "--output-json", filepath.Join(dir, "v.json"),
		"--json-out", filepath.Join(dir, "n.json")}
}

var startedShape = regexp.MustCompile(`(?m)^shape (\d)/4: `)

// runFault runs the sweep in a child, SIGKILLed after killAfter (0: never),
// under a file size limit (0: none).
func runFault(t *testing.T, dir, name string, killAfter time.Duration, limitBytes int) faultRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], faultSweep(dir, name)...)
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1")
	if limitBytes > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", fileSizeLimitEnv, limitBytes))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if killAfter > 0 {
		timer := time.AfterFunc(killAfter, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("%s: still running after 60 s:\n%s", name, stderr.String())
	}
	r := faultRun{name: name, stderr: stderr.String(), limitBytes: limitBytes, killAtMs: int(killAfter.Milliseconds())}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	r.killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
	r.exitCode = cmd.ProcessState.ExitCode()
	for _, m := range startedShape.FindAllStringSubmatch(r.stderr, -1) {
		r.startedShapes = int(m[1][0] - '0')
	}
	return r
}

// writtenShapes is how many shapes the run reported written: a shape's
// files are written before the next shape starts, all of them at exit 0.
func (r faultRun) writtenShapes() int {
	if r.exitCode == 0 && !r.killed {
		return 4
	}
	return max(r.startedShapes-1, 0)
}

// checkFaultFiles checks the shared files after run r: every JSONL line
// parses (a torn one would also make the next run refuse the file), r's
// records are at least the shapes it reported written and at most the ones
// it started, the native report and every vLLM file parse, and the native
// report, when it is r's, holds every shape r reported written.
func checkFaultFiles(t *testing.T, dir string, r faultRun) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "r.jsonl"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s: r.jsonl ends in a torn record: %q", r.name, data[max(0, len(data)-120):])
	}
	mine := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var rec struct {
			RunName string `json:"run_name"`
		}
		if line != "" && json.Unmarshal([]byte(line), &rec) != nil {
			t.Errorf("%s: r.jsonl line %d does not parse: %q", r.name, i+1, line)
		}
		if rec.RunName == r.name+"-cpu" { // the cpu backend marks its run names
			mine++
		}
	}
	if mine < r.writtenShapes() || mine > max(r.startedShapes, r.writtenShapes()) {
		t.Errorf("%s: %d records in r.jsonl; it reported %d shapes written and started %d", r.name, mine, r.writtenShapes(), r.startedShapes)
	}
	rep, err := report.Read(filepath.Join(dir, "n.json"))
	switch {
	case err != nil && !os.IsNotExist(err) && !strings.Contains(err.Error(), "no such file"):
		t.Errorf("%s: n.json: %v", r.name, err)
	case err == nil && rep.Config.RunName == r.name && len(rep.Shapes) < r.writtenShapes():
		t.Errorf("%s: n.json holds %d shapes, it reported %d written", r.name, len(rep.Shapes), r.writtenShapes())
	case err != nil && r.writtenShapes() > 0:
		t.Errorf("%s: no n.json after %d shapes reported written", r.name, r.writtenShapes())
	}
	vllm, _ := filepath.Glob(filepath.Join(dir, "v_*.json"))
	for _, path := range vllm {
		if data, err := os.ReadFile(path); err != nil || !json.Valid(data) {
			t.Errorf("%s: %s is not valid JSON (%v)", r.name, path, err)
		}
	}
	if len(vllm) < min(r.writtenShapes(), 4) {
		t.Errorf("%s: %d vLLM files, %d shapes reported written", r.name, len(vllm), r.writtenShapes())
	}
}

// checkFaultStderr checks how a run ended: killed, or (under a file size
// limit) exit 1 with each error once and naming its file; never exit 2 (a
// torn file refused), never a crash.
func checkFaultStderr(t *testing.T, r faultRun) {
	t.Helper()
	for _, crash := range []string{"panic", "fatal error", "goroutine "} {
		if strings.Contains(r.stderr, crash) {
			t.Errorf("%s crashed:\n%s", r.name, r.stderr)
		}
	}
	switch {
	case r.killed:
	case r.limitBytes > 0:
		lines := regexp.MustCompile(`(?m)^.*file too large.*$`).FindAllString(r.stderr, -1)
		seen := map[string]bool{}
		for _, l := range lines {
			for _, part := range strings.Split(strings.TrimPrefix(l, "stepbench run: "), "; ") {
				if seen[part] {
					t.Errorf("%s: the error %q is printed twice", r.name, part)
				}
				seen[part] = true
			}
		}
		if r.exitCode != exitFailure || len(lines) == 0 || !regexp.MustCompile(`--(result-filename|output-json|json-out) `).MatchString(r.stderr) {
			t.Errorf("%s (limit %d bytes): exit %d, stderr:\n%s\nwant exit 1 naming the file it could not write", r.name, r.limitBytes, r.exitCode, r.stderr)
		}
	case r.exitCode != 0:
		t.Errorf("%s: exit %d:\n%s", r.name, r.exitCode, r.stderr)
	}
}

// TestResultFilesSurviveFaults kills runs with SIGKILL at 50 random times
// and stops 20 at a random file size limit (a full disk: see
// fileSizeLimitEnv), all on the same three result files, and checks after
// each: every JSONL line parses, the native report and the vLLM files are
// valid, no record is lost that had been reported written, and no run
// refuses the files the runs before left. A last clean run appends and
// leaves no temporary file.
func TestResultFilesSurviveFaults(t *testing.T) {
	seeded.Expect(t, "SIGKILLs and write faults over shared result files")
	if testing.Short() {
		t.Skip("70 child processes")
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 22))
	t.Logf("seed %d", seed)
	start := time.Now()
	first := runFault(t, dir, "clean-0", 0, 0)
	checkFaultStderr(t, first)
	checkFaultFiles(t, dir, first)
	duration := time.Since(start)
	var kills, full, killedMidRun int
	for i := 1; kills < 50 || full < 20; i++ {
		var r faultRun
		if full >= 20 || (kills < 50 && rng.IntN(70) < 50) {
			kills++
			r = runFault(t, dir, fmt.Sprintf("kill-%d", i), time.Duration(rng.Int64N(int64(duration*6/5)))+time.Millisecond, 0)
			if r.killed && r.startedShapes > 0 {
				killedMidRun++
			}
		} else {
			full++
			r = runFault(t, dir, fmt.Sprintf("full-%d", i), 0, faultLimit(t, dir, rng))
		}
		checkFaultStderr(t, r)
		checkFaultFiles(t, dir, r)
		if t.Failed() {
			t.Fatalf("after %s (killed %v at %d ms, limit %d, started %d shapes), stderr:\n%s", r.name, r.killed, r.killAtMs, r.limitBytes, r.startedShapes, r.stderr)
		}
	}
	last := runFault(t, dir, "clean-last", 0, 0)
	checkFaultStderr(t, last)
	checkFaultFiles(t, dir, last)
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left after a clean run: %v", left)
	}
	t.Logf("%d SIGKILLs (%d during the sweep), %d file size limits, a clean run of %.2f s; %.1f s in all",
		kills, killedMidRun, full, duration.Seconds(), time.Since(start).Seconds())
}

// faultLimit is a file size limit that stops some write of the next run:
// within the JSONL's next records, the native report's growth (about 5 KB
// a shape) or, now and then, a vLLM file (about 350 bytes).
func faultLimit(t *testing.T, dir string, rng *rand.Rand) int {
	info, err := os.Stat(filepath.Join(dir, "r.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if rng.IntN(5) == 0 {
		return 100 + rng.IntN(250)
	}
	return 300 + rng.IntN(max(22_000, int(info.Size())+1300)-300)
}
