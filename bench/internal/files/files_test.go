package files

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteAtomicReplacesWholeFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	for _, text := range []string{"first, longer\n", "second\n"} {
		if err := WriteAtomic(path, []byte(text)); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != text {
			t.Errorf("file holds %q, want %q", got, text)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	err := WriteAtomic(filepath.Join(dir, "missing", "r.json"), []byte("x"))
	if err == nil || strings.Contains(err.Error(), dir) {
		t.Errorf("write into a missing directory: %v, want an error that does not repeat the path", err)
	}
}

func TestAppendNeverTruncates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	for _, line := range []string{"a\n", "b\n"} {
		if err := Append(path, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != "a\nb\n" {
		t.Errorf("appended file holds %q", got)
	}
}

func TestBare(t *testing.T) {
	err := &os.PathError{Op: "open", Path: "/x/y", Err: os.ErrPermission}
	if got := Bare(err); !errors.Is(got, os.ErrPermission) || strings.Contains(got.Error(), "/x/y") {
		t.Errorf("Bare = %v", got)
	}
}

// appendChildEnv makes the test binary a child that appends under a file
// size limit (RLIMIT_FSIZE, SIGXFSZ ignored: the write fails with EFBIG as
// a full disk fails with ENOSPC).
const appendChildEnv = "STEPBENCH_FILES_TEST_APPEND_CHILD"

func TestAppendChild(t *testing.T) {
	path := os.Getenv(appendChildEnv)
	if path == "" {
		t.Skip("the child of TestAppendIsAllOrNothing")
	}
	signal.Ignore(syscall.SIGXFSZ)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 100, Max: 100}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{strings.Repeat("a", 59) + "\n", strings.Repeat("b", 79) + "\n"} {
		fmt.Printf("append %c: %v\n", rec[0], Append(path, []byte(rec)))
	}
}

// A record that does not fit (the second: 60 + 80 bytes > 100) leaves
// nothing of itself: the file is truncated back, and the next append, with
// room, starts on a fresh line. Before, the file kept the 40 bytes that fit,
// and the next run appended onto that line.
func TestAppendIsAllOrNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAppendChild$", "-test.v")
	cmd.Env = append(os.Environ(), appendChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "append a: <nil>") ||
		!strings.Contains(string(out), "append b: append: file too large (nothing of the record was kept: the file is back to its 60 bytes)") {
		t.Errorf("child:\n%s", out)
	}
	if err := Append(path, []byte("c\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != strings.Repeat("a", 59)+"\nc\n" {
		t.Errorf("file holds %q", got)
	}
}

// A temporary file left by a process killed during a write is reused and
// renamed away by the next write, not left beside the file.
func TestWriteAtomicReusesAStaleTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n.json")
	if err := os.WriteFile(TempPath(path), []byte("half a rep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if got, _ := os.ReadFile(path); string(got) != "{}\n" {
		t.Errorf("file holds %q", got)
	}
	// A link planted at the temporary name is not written through.
	target := filepath.Join(dir, "target")
	if err := os.Symlink(target, TempPath(path)); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(path, []byte("{}\n")); err == nil {
		t.Error("WriteAtomic wrote through a link at its temporary name")
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
}
