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
	"unicode/utf8"
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

// CheckText finds the first byte that is not text, by line and offset.
func TestCheckText(t *testing.T) {
	for _, c := range []struct {
		data string
		want string // "" for text
	}{
		{"plain text\n\tindented\r\n", ""},
		{"UTF-8: café, 日本語, 🙂, U+FFFD \ufffd\f\v", ""},
		{"", ""},
		{"two\nlines\x00", "line 2 (byte 9): a NUL byte"},
		{"\x1b[31mred", "line 1 (byte 0): control byte 0x1b"},
		{"del\x7f", "control byte 0x7f"},
		{"a\nb\nc\xff", "line 3 (byte 5): invalid UTF-8 (byte 0xff)"},
		{"cut \xe6\x97", "invalid UTF-8 (byte 0xe6)"},
		{"overlong \xc0\xaf", "invalid UTF-8 (byte 0xc0)"},
		{"surrogate \xed\xa0\x80", "invalid UTF-8 (byte 0xed)"},
	} {
		err := CheckText([]byte(c.data))
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckText(%q) = %v, want %q", c.data, err, c.want)
		}
	}
	if exe, err := os.ReadFile("/proc/self/exe"); err == nil {
		if err := CheckText(exe[:3000]); err == nil {
			t.Error("an executable's first 3000 bytes pass as text")
		}
	}
}

// A file system that does not answer ends Open and ReadFile at the
// deadline (STEPBENCH_READ_TIMEOUT), naming the file; the blocked call
// is dropped.
func TestReadTimeout(t *testing.T) {
	t.Setenv("STEPBENCH_READ_TIMEOUT", "50ms")
	release, entered := make(chan struct{}), make(chan struct{}, 2)
	openFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		entered <- struct{}{}
		<-release
		return os.OpenFile(name, flag, perm)
	}
	defer func() {
		<-entered // both calls have read openFile: restoring it races with neither
		<-entered
		openFile = os.OpenFile
		close(release)
	}()
	path := filepath.Join(t.TempDir(), "on-a-dead-mount")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, 10, "a test file"); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "within 50ms") {
		t.Errorf("ReadFile on a hung file system: %v", err)
	}
	if _, err := Open(path); !errors.Is(err, ErrTimeout) {
		t.Errorf("Open on a hung file system: %v", err)
	}
	if d := ReadTimeout(); d != 50*time.Millisecond {
		t.Errorf("ReadTimeout() = %s", d)
	}
}

// ReadAll bounds standard input as ReadFile bounds a file.
func TestReadAllLimit(t *testing.T) {
	if data, err := ReadAll(strings.NewReader("1234"), 4, "stdin", "a text"); err != nil || string(data) != "1234" {
		t.Errorf("4 bytes under a limit of 4: %q, %v", data, err)
	}
	if _, err := ReadAll(strings.NewReader("12345"), 4, "stdin", "a text"); err == nil ||
		!strings.Contains(err.Error(), "stdin: more than the 4 bytes that a text may hold") {
		t.Errorf("5 bytes under a limit of 4: %v", err)
	}
}

// CheckText passes exactly valid UTF-8 without NUL or control bytes other
// than \t \n \v \f \r, and its error points at such a byte.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"text\n", "\x00", "\xff", "é\x1b", "\r\n\t\v\f"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := utf8.Valid(data) && !strings.ContainsFunc(string(data), func(r rune) bool {
			return (r < 0x20 && !strings.ContainsRune("\t\n\v\f\r", r)) || r == 0x7f
		})
		err := CheckText(data)
		if (err == nil) != want {
			t.Fatalf("CheckText(%q) = %v, want text %v", data, err, want)
		}
		var nt *NotTextError
		if err != nil && (!errors.As(err, &nt) || nt.Offset >= int64(len(data)) || data[nt.Offset] != nt.Byte ||
			nt.Line != 1+strings.Count(string(data[:nt.Offset]), "\n")) {
			t.Errorf("CheckText(%q): %v does not point at the byte", data, err)
		}
	})
}
