package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/bench/report"
	"stepbench/internal/seeded"
)

// fileSizeLimitEnv, in a child run by runProcess, sets RLIMIT_FSIZE to its
// value in bytes with SIGXFSZ ignored: a write past the limit fails with
// EFBIG, as one on a full disk fails with ENOSPC. The test stands in for a
// full disk without root (no small filesystem to mount).
const fileSizeLimitEnv = "STEPBENCH_TEST_FILE_SIZE_LIMIT"

func limitFileSize(value string) error {
	if value == "" {
		return nil
	}
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", fileSizeLimitEnv, value, err)
	}
	signal.Ignore(syscall.SIGXFSZ)
	return syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n})
}

// resultRun is a two-shape run on the cpu backend writing all three result
// files into dir.
func resultRun(dir string, extra ...string) []string {
	return append([]string{"run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1", "2", "--input-len", "4",
		"--output-len", "3", "--num-iters", "2", "--num-iters-warmup", "0", "--energy-window-seconds", "0",
		"--result-filename", filepath.Join(dir, "r.jsonl"), "--output-json", filepath.Join(dir, "v.json"),
		"--json-out", filepath.Join(dir, "n.json")}, extra...)
}

// jsonlRecords checks every line of path parses and the file ends in a
// newline, and returns the count.
func jsonlRecords(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s does not end in a newline: %q", path, data[max(0, len(data)-80):])
	}
	n := 0
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" && len(data) == 0 {
			break
		}
		if !json.Valid([]byte(line)) {
			t.Errorf("%s line %d does not parse: %q", path, i+1, line)
		}
		n++
	}
	return n
}

// A JSONL record that does not fit (the file size limit sits inside the
// second record) is not kept in part; the vLLM file and the native report of
// that shape are written all the same; the error is printed once; and the
// next run, with room, appends whole records after the first. Before, the
// file kept part of the record without a newline, the next run appended onto
// that line, the vLLM file of the shape was never written and the error was
// printed twice.
func TestResultFileFullDisk(t *testing.T) {
	seeded.Expect(t, "a full disk (RLIMIT_FSIZE) under the result files")
	if testing.Short() {
		t.Skip("child processes")
	}
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "r.jsonl")
	// History: 200 KB of valid records, more than the native report will
	// ever be, so that the limit stops only the JSONL.
	var history bytes.Buffer
	for history.Len() < 200_000 {
		history.WriteString(`{"run_name": "history", "batch_size": 1}` + "\n")
	}
	if err := os.WriteFile(jsonl, history.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := history.Len() + 400 // room for the first record (about 330 bytes), not the second
	code, _, stderr := runProcess(t, 60*time.Second, []string{fmt.Sprintf("%s=%d", fileSizeLimitEnv, limit)}, resultRun(dir)...)
	if code != exitFailure || strings.Count(stderr, "file too large") != 1 || !strings.Contains(stderr, "--result-filename "+jsonl) ||
		!strings.Contains(stderr, "nothing of the record was kept") {
		t.Errorf("the second record past the limit: exit %d, stderr:\n%s\nwant exit 1 and the error once, naming the file", code, stderr)
	}
	if n := jsonlRecords(t, jsonl); n != bytes.Count(history.Bytes(), []byte("\n"))+1 {
		t.Errorf("%d records, want the history and the first shape's", n)
	}
	for _, name := range []string{"v_batch1_input4_output3.json", "v_batch2_input4_output3.json"} {
		checkVLLM(t, filepath.Join(dir, name), 2)
	}
	if rep, err := report.Read(filepath.Join(dir, "n.json")); err != nil || len(rep.Shapes) != 2 {
		t.Errorf("native report: %v (%d shapes), want both shapes", err, len(rep.Shapes))
	}
	if code, _, stderr := runProcess(t, 60*time.Second, nil, resultRun(dir)...); code != 0 {
		t.Fatalf("the next run, with room: exit %d:\n%s", code, stderr)
	}
	if n := jsonlRecords(t, jsonl); n != bytes.Count(history.Bytes(), []byte("\n"))+3 {
		t.Errorf("%d records after the next run, want 3 new ones", n)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// An existing JSONL output that does not end in a newline, or has a line
// that does not parse, is refused before any weight loads, naming the file
// and the line: appending would join the new record to a torn one. The
// file is left as it was.
func TestTornJSONLRefusedBeforeTheRun(t *testing.T) {
	seeded.Expect(t, "a torn JSONL result file")
	dir := t.TempDir()
	good := `{"run_name": "a", "batch_size": 1}` + "\n"
	for _, tc := range []struct {
		name, content, want string
		flag                string
	}{
		{"no newline at the end", good + `{"run_name": "b", "batch_si`, "line 2 does not end in a newline", "--result-filename"},
		{"a line that does not parse", good + "{\"run_name\": \"b\",\n" + good, "line 2 is not a JSON record", "--result-filename"},
		{"a foreign file", "Linux version 6.1\n", "line 1 is not a JSON record", "--result-filename"},
		{"logits without newline", `{"prompt": [1]}`, "line 1 does not end in a newline", "--logits-out"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".jsonl")
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append(tinyRun, "--model", "llama-tiny", tc.flag, path)
		if tc.flag == "--logits-out" {
			prompts := filepath.Join(dir, "prompts.txt")
			if err := os.WriteFile(prompts, []byte("1 2 3\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			args = []string{"run", "--device", "cpu", "--model", "llama-tiny", "--correctness-test", "--prompt-ids", prompts,
				"--output-len", "2", "--logits-out", path}
		}
		code, _, stderr := run(t, args...)
		wantOneLine(t, tc.name, code, stderr, exitUsage, tc.flag+" "+path, tc.want)
		if strings.Contains(stderr, "weights") {
			t.Errorf("%s: weights were loaded first:\n%s", tc.name, stderr)
		}
		if data, _ := os.ReadFile(path); string(data) != tc.content {
			t.Errorf("%s: the file changed: %q", tc.name, data)
		}
	}
}

// An output whose directory takes no new file is refused up front even
// when the file exists: /proc/version exists and opens for writing as root,
// and passed the check, then failed after the run.
func TestOutputInAProcDirectoryRefusedUpFront(t *testing.T) {
	for _, flag := range []string{"--json-out", "--output-json", "--result-filename"} {
		code, _, stderr := run(t, append(tinyRun, "--model", "llama-tiny", flag, "/proc/version")...)
		wantOneLine(t, flag, code, stderr, exitUsage, flag+" /proc/version")
		if strings.Contains(stderr, "weights") {
			t.Errorf("%s: weights were loaded first:\n%s", flag, stderr)
		}
	}
}

// A temporary file left by a process killed while it replaced the native
// report is reused by the next run, which leaves none behind.
func TestStaleTemporaryFileReused(t *testing.T) {
	dir := t.TempDir()
	for _, stale := range []string{".n.json.tmp", ".v_batch1_input4_output3.json.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, stale), []byte(`{"half": `), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := run(t, resultRun(dir)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// countLines counts the lines of r that start with prefix.
func countLines(r *bufio.Scanner, prefix string) int {
	n := 0
	for r.Scan() {
		if strings.HasPrefix(r.Text(), prefix) {
			n++
		}
	}
	return n
}
