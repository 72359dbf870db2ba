// Package input is about what stepbench reads from its user: input files
// opened so that none can hang or exhaust the process, and errors marked
// as bad input (the CLI's exit code 2) wherever they are made.
//
// Only regular files, or links to one, are opened: the open never blocks
// (a FIFO is refused, not waited on), and a directory, a device such as
// /dev/zero or a socket is refused with what it is. A whole-file read is
// bounded by a limit that its error names, and by a deadline
// (ReadTimeout): a file system that stops answering (a dead network
// mount) is an error, not a hang.
//
// Every file stepbench reads goes through this package (a test lists the
// calls of os.ReadFile and os.Open outside it: /proc files only).
package input

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// DefaultReadTimeout is ReadTimeout's default.
const DefaultReadTimeout = time.Minute

// ReadTimeout is how long Open and ReadFile wait for a file system:
// STEPBENCH_READ_TIMEOUT (a duration, for tests), else DefaultReadTimeout.
func ReadTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("STEPBENCH_READ_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return DefaultReadTimeout
}

// ErrTimeout is wrapped by the error of a read that did not end in time.
var ErrTimeout = errors.New("the file system did not answer")

// openFile is os.OpenFile; tests replace it with one that blocks.
var openFile = os.OpenFile

// within runs f, which reads path, with ReadTimeout as its deadline. Past
// it, f goes on in the background (a read cannot be interrupted) and its
// result is dropped; cleanup, if not nil, releases what it returns late.
func within[T any](path string, f func() (T, error), cleanup func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	d := ReadTimeout()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		go func() {
			if r := <-done; r.err == nil && cleanup != nil {
				cleanup(r.v)
			}
		}()
		var zero T
		return zero, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w within %s (a network or FUSE mount that hangs?)", ErrTimeout, d)}
	}
}

// Open opens path for reading when it is a regular file (links followed).
// It never blocks: the file is opened non-blocking, checked, and then
// made blocking again; a file system that does not answer the open within
// ReadTimeout is an error.
func Open(path string) (*os.File, error) {
	return within(path, func() (*os.File, error) { return open(path) }, func(f *os.File) { f.Close() })
}

func open(path string) (*os.File, error) {
	f, err := openFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: notRegular{info.Mode()}}
	}
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return f, nil
}

// ErrNotRegular is wrapped by Open's error for anything but a regular file.
var ErrNotRegular = errors.New("not a regular file")

type notRegular struct{ mode fs.FileMode }

func (n notRegular) Error() string {
	return fmt.Sprintf("%s, not a regular file", Kind(n.mode))
}

func (n notRegular) Is(target error) bool { return target == ErrNotRegular }

// Kind names what a file mode is: "a directory", "a named pipe (FIFO)", ...
func Kind(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode.IsRegular():
		return "a regular file"
	}
	return "an irregular file"
}

// ReadFile reads the whole of the regular file path, which must hold at
// most limit bytes; what names the kind of file in the limit's error
// ("a config.json", "a native report"). The open and the read end within
// ReadTimeout.
func ReadFile(path string, limit int64, what string) ([]byte, error) {
	return within(path, func() ([]byte, error) { return readFile(path, limit, what) }, nil)
}

// ReadAll reads r (standard input) to its end, which must come within
// limit bytes; name and what are for the error, as ReadFile's. A reader
// that never ends (a terminal, a pipe left open) is not timed out.
func ReadAll(r io.Reader, limit int64, name, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than the %s that %s may hold", name, Bytes(limit), what)
	}
	return data, nil
}

func readFile(path string, limit int64, what string) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() > limit {
		return nil, tooLarge(path, info.Size(), limit, what)
	}
	// The file may grow after the Stat: read one byte past the limit to see.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, int64(len(data)), limit, what)
	}
	return data, nil
}

func tooLarge(path string, size, limit int64, what string) error {
	return fmt.Errorf("%s: %d bytes is more than the %s that %s may hold", path, size, Bytes(limit), what)
}

// Bytes writes a byte count as stepbench's limits are written: 16 MiB.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// badInput marks an error as bad input.
type badInput struct{ err error }

func (b badInput) Error() string { return b.err.Error() }
func (b badInput) Unwrap() error { return b.err }

// Bad marks err (nil stays nil) as bad input: a malformed or unusable file
// or value the user gave, which the CLI reports with exit code 2.
func Bad(err error) error {
	if err == nil {
		return nil
	}
	return badInput{err}
}

// IsBad reports whether err, or an error it wraps, was marked by Bad.
func IsBad(err error) bool {
	var b badInput
	return errors.As(err, &b)
}
