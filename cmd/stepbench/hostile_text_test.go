package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// The tests of this file are issue 31's text inputs (tokenizer.json,
// --prompt-file, tokenize --file) and issue 30's binary prompts, fed to
// real processes: each must end at once with one line naming the file and
// exit 2. A FIFO tokenizer.json blocked forever; one linked to /dev/zero
// ran out of memory; a 3 GB sparse one was read whole.

// linkToDevZero replaces path by a symbolic link to /dev/zero.
func linkToDevZero(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", path); err != nil {
		t.Fatal(err)
	}
}

// sparseFile replaces path by a sparse file of size bytes (zeros).
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestIrregularTokenizerRefusedAtOnce(t *testing.T) {
	seeded.Expect(t, "a tokenizer.json that is a FIFO, a directory or /dev/zero")
	if testing.Short() {
		t.Skip("child processes")
	}
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, path string)
		want    string
	}{
		{"fifo", replaceWithFIFO, "a named pipe (FIFO), not a regular file"},
		{"/dev/zero", linkToDevZero, "a character device, not a regular file"},
		{"3 GB sparse", func(t *testing.T, path string) { sparseFile(t, path, 3<<30) }, "is more than the 64 MiB that a tokenizer.json may hold"},
	} {
		model := textModel(t)
		path := filepath.Join(model, "tokenizer.json")
		tc.replace(t, path)
		prompts := filepath.Join(t.TempDir(), "prompts.txt")
		if err := os.WriteFile(prompts, []byte("hello\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"tokenize", "--model-path", model, "hello"},
			{"run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt", "hello", "--output-len", "2"},
			{"run", "--device", "cpu", "--model-path", model, "--prompt-file", prompts, "--num-iters", "1"},
		} {
			code, _, stderr := runProcess(t, 30*time.Second, nil, args...)
			wantOneLine(t, tc.name+" tokenizer.json: "+args[0], code, stderr, exitUsage, path, tc.want)
		}
	}
}

func TestIrregularPromptFilesRefusedAtOnce(t *testing.T) {
	seeded.Expect(t, "a prompt file that is a FIFO, a directory or /dev/zero")
	if testing.Short() {
		t.Skip("child processes")
	}
	model := textModel(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, path string)
		want    string
	}{
		{"fifo", replaceWithFIFO, "a named pipe (FIFO), not a regular file"},
		{"/dev/zero", linkToDevZero, "a character device, not a regular file"},
		{"200 MB line", func(t *testing.T, path string) { sparseFile(t, path, 200<<20) }, "is more than the 64 MiB that --"},
	} {
		path := filepath.Join(dir, "prompts.txt")
		tc.replace(t, path)
		for _, args := range [][]string{
			{"run", "--device", "cpu", "--model-path", model, "--prompt-file", path, "--num-iters", "1"},
			{"run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt-file", path, "--output-len", "2"},
			{"tokenize", "--model-path", model, "--file", path},
		} {
			code, _, stderr := runProcess(t, 30*time.Second, nil, args...)
			wantOneLine(t, tc.name+": "+strings.Join(args[:2], " "), code, stderr, exitUsage, path, tc.want)
		}
	}
}

// Issue 30: a prompt file that is not text (an executable's bytes, NULs,
// Latin-1) is refused in one line naming where and the flag that reads it
// anyway; with that flag it is timed. It was timed as text, exit 0.
func TestBinaryPromptFiles(t *testing.T) {
	seeded.Expect(t, "a prompt file that is not text")
	if testing.Short() {
		t.Skip("child processes")
	}
	model := textModel(t)
	dir := t.TempDir()
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, want string
	}{
		{"an executable's first 3000 bytes", string(exe[:3000]), "line 1 (byte 0): control byte 0x7f"},
		{"a NUL", "first line\nsecond\x00line\n", "line 2 (byte 17): a NUL byte"},
		{"Latin-1", "caf\xe9 au lait\n", "line 1 (byte 3): invalid UTF-8 (byte 0xe9)"},
		{"a terminal escape", "\x1b]0;title\x07text\n", "line 1 (byte 0): control byte 0x1b"},
	} {
		path := filepath.Join(dir, "prompts.txt")
		if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		timing := []string{"run", "--device", "cpu", "--model-path", model, "--prompt-file", path, "--batch-size", "1",
			"--input-len", "8", "--output-len", "2", "--num-iters", "1", "-q"}
		tokenize := []string{"tokenize", "--model-path", model, "--file", path}
		code, _, stderr := runProcess(t, 30*time.Second, nil, timing...)
		wantOneLine(t, tc.name+": run", code, stderr, exitUsage, "--prompt-file "+path+": "+tc.want, "--allow-binary-prompts")
		code, _, stderr = runProcess(t, 30*time.Second, nil, tokenize...)
		wantOneLine(t, tc.name+": tokenize", code, stderr, exitUsage, "--file "+path+": "+tc.want, "--allow-binary")
		if code, _, stderr := runProcess(t, 30*time.Second, nil, append(timing, "--allow-binary-prompts")...); code != 0 {
			t.Errorf("%s: run --allow-binary-prompts: exit %d\n%s", tc.name, code, stderr)
		}
		if code, stdout, stderr := runProcess(t, 30*time.Second, nil, append(tokenize, "--allow-binary")...); code != 0 || stdout == "" {
			t.Errorf("%s: tokenize --allow-binary: exit %d\n%s", tc.name, code, stderr)
		}
	}
}

// --chat with a tokenizer that lacks the chat template's tokens is refused:
// they were encoded as text without a word.
func TestChatNeedsTheChatTokens(t *testing.T) {
	model := textModel(t)
	path := filepath.Join(model, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// (json.Marshal wrote < and > as \u003c and \u003e.)
	data = []byte(strings.ReplaceAll(string(data), "start_header_id", "start_of_header"))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runProcess(t, 30*time.Second, nil, "run", "--device", "cpu", "--correctness-test", "--model-path", model,
		"--prompt", "hello", "--chat", "--output-len", "2")
	wantOneLine(t, "--chat", code, stderr, exitUsage, "--chat: ", `no added tokens ["<|start_header_id|>"]`)
}
