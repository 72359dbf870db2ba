package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
