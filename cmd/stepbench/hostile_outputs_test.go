package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// The smaller findings of issue 31 on outputs, reports and flags, each as
// a user meets it, in real processes.

var tinyTwoShapes = []string{"run", "--device", "cpu", "--model", "llama-tiny", "--batch-size", "1,2", "--input-len", "4",
	"--output-len", "2", "--num-iters", "1", "--num-iters-warmup", "0"}

// A --json-out (or --output-json) that is a symbolic link is written
// through: the link stays and its target, in another directory, is
// replaced whole; a dangling link's target is created. The link was
// replaced by a regular file.
func TestSymlinkedOutputsWrittenThrough(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	linkDir, targetDir := t.TempDir(), t.TempDir()
	native, vllm := filepath.Join(targetDir, "native.json"), filepath.Join(targetDir, "vllm.json")
	if err := os.WriteFile(native, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	nativeLink, vllmLink := filepath.Join(linkDir, "n.json"), filepath.Join(linkDir, "v.json")
	for link, target := range map[string]string{nativeLink: native, vllmLink: vllm} { // vllm.json does not exist yet
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "4", "--output-len", "2", "--num-iters", "1",
		"--json-out", nativeLink, "--output-json", vllmLink}
	if code, _, stderr := runProcess(t, 60*time.Second, nil, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for link, target := range map[string]string{nativeLink: native, vllmLink: vllm} {
		info, err := os.Lstat(link)
		if err != nil || info.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a link (%v)", link, err)
		}
		data, err := os.ReadFile(target)
		if err != nil || !json.Valid(data) {
			t.Errorf("%s, the link's target: %v, %.40q", target, err, data)
		}
	}
	if entries, _ := os.ReadDir(linkDir); len(entries) != 2 {
		t.Errorf("the links' directory holds %d entries, want the 2 links (no temporary files)", len(entries))
	}
}

// An output that is a device is refused before the run, naming it, and
// no file is made beside it: --output-json /dev/full with two shapes wrote
// /dev/full_batch1_input4_output2.json and its sibling into /dev. Regular
// files only means after resolving links: a link to /dev/full is refused.
func TestDeviceOutputsRefused(t *testing.T) {
	seeded.Expect(t, "an output that is a device, FIFO or directory")
	if testing.Short() {
		t.Skip("child processes")
	}
	before, _ := filepath.Glob("/dev/full*")
	linkToFull := filepath.Join(t.TempDir(), "out.json")
	if err := os.Symlink("/dev/full", linkToFull); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag, path string
	}{
		{"--output-json", "/dev/full"},
		{"--output-json", linkToFull},
		{"--json-out", "/dev/full"},
		{"--json-out", linkToFull},
		{"--result-filename", linkToFull},
	} {
		code, _, stderr := runProcess(t, 30*time.Second, nil, append(tinyTwoShapes, tc.flag, tc.path)...)
		wantOneLine(t, tc.flag+" "+tc.path, code, stderr, exitUsage, tc.flag+" "+tc.path, "a character device, not a regular file")
	}
	after, _ := filepath.Glob("/dev/full*")
	if len(after) != len(before) {
		t.Errorf("files made in /dev: %v", after)
		for _, p := range after {
			if p != "/dev/full" {
				os.Remove(p)
			}
		}
	}
}

// A report whose times are finite but past any step's (1e308 s) is
// refused as malformed, naming the sample: compare printed +Inf medians,
// a 0.0000 ratio and SAME.
func TestCompareRefusesAbsurdTimes(t *testing.T) {
	seeded.Expect(t, "a report with absurd sample times")
	if testing.Short() {
		t.Skip("child processes")
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if code, _, stderr := runProcess(t, 60*time.Second, nil, "run", "--device", "cpu", "--model", "llama-tiny", "--input-len", "4",
		"--output-len", "2", "--num-iters", "3", "--json-out", good); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	for _, shape := range rep["shapes"].([]any) {
		for _, sample := range shape.(map[string]any)["samples"].([]any) {
			sample.(map[string]any)["host_seconds"] = 1e308
		}
	}
	huge := filepath.Join(dir, "huge.json")
	data, _ = json.Marshal(rep)
	if err := os.WriteFile(huge, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runProcess(t, 30*time.Second, nil, "compare", good, huge)
	wantOneLine(t, "compare 1e308", code, stderr, exitUsage, huge, "sample 0: a time longer than any step takes")
	if strings.Contains(stdout, "SAME") || strings.Contains(stdout, "Inf") {
		t.Errorf("compare printed a verdict:\n%s", stdout)
	}
}

// A list flag's item that overflows says so (it was "not a whole
// number"), and an item listed twice is refused (20,000 duplicates were
// taken silently).
func TestListFlagOverflowAndDuplicates(t *testing.T) {
	dup := strings.TrimSuffix(strings.Repeat("4,", 20000), ",")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-size", "9223372036854775808"}, "item 1 of 1, 9223372036854775808, is a whole number too large to count"},
		{[]string{"--input-len", "1,-99999999999999999999"}, "item 2 of 2, -99999999999999999999, is a whole number too large to count"},
		{[]string{"--batch-size", dup}, `--batch-size "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,...": item 2 of 20000, 4, is listed twice`},
		{[]string{"--batch-size", "1,2", "--batch-size", "2"}, "item 1 of 1, 2, is listed twice"},
		{[]string{"--output-len", "3", "3"}, "listed twice"},
	} {
		code, _, stderr := runProcess(t, 30*time.Second, nil, append([]string{"run", "--device", "cpu", "--model", "llama-tiny"}, tc.args...)...)
		wantOneLine(t, strings.Join(tc.args, " ")[:min(40, len(strings.Join(tc.args, " ")))], code, stderr, exitUsage, tc.want)
		if len(stderr) > 400 {
			t.Errorf("%.40v: a %d-byte message", tc.args, len(stderr))
		}
	}
}
