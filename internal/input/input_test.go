package input

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Open and ReadFile refuse everything but a regular file, at once: a FIFO
// with no writer would block a plain open forever.
func TestOpenRefusesWhatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifo-link")
	if err := os.Symlink(fifo, fifoLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{fifo, "a named pipe (FIFO), not a regular file"},
		{fifoLink, "a named pipe (FIFO), not a regular file"},
		{dir, "a directory, not a regular file"},
		{"/dev/zero", "a character device, not a regular file"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := ReadFile(c.path, 1<<20, "a test file")
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("ReadFile(%s) = %v, want an error naming it and %q", c.path, err, c.want)
			}
			if c.want != "no such file" && !errors.Is(err, ErrNotRegular) {
				t.Errorf("ReadFile(%s): %v does not wrap ErrNotRegular", c.path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ReadFile(%s) blocks", c.path)
		}
	}
	for _, p := range []string{regular, link} {
		if data, err := ReadFile(p, 4, "a test file"); err != nil || string(data) != "data" {
			t.Errorf("ReadFile(%s) = %q, %v", p, data, err)
		}
	}
}

func TestReadFileNamesItsLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, make([]byte, 2<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(path, 2<<20, "a model's config.json")
	if err == nil || !strings.Contains(err.Error(), "2 MiB") || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "a model's config.json") {
		t.Errorf("ReadFile of 2 MiB + 1 byte with a 2 MiB limit: %v", err)
	}
	if data, err := ReadFile(path, 2<<20+1, "a test file"); err != nil || len(data) != 2<<20+1 {
		t.Errorf("at the limit: %d bytes, %v", len(data), err)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{16 << 20: "16 MiB", 1 << 30: "1 GiB", 100: "100 bytes", 4096: "4 KiB", 3<<20 + 1: "3145729 bytes"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBad(t *testing.T) {
	base := errors.New("field x: 3 is too large")
	err := fmt.Errorf("load: %w", Bad(base))
	if !IsBad(err) || !errors.Is(err, base) || err.Error() != "load: field x: 3 is too large" {
		t.Errorf("Bad: %v (IsBad %v)", err, IsBad(err))
	}
	if IsBad(base) || Bad(nil) != nil {
		t.Error("an unmarked error is bad input, or Bad(nil) is not nil")
	}
}
