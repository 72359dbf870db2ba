// Package files writes stepbench's result files so that nothing already
// written is lost: a whole file replaced atomically (temporary file, sync,
// rename), lines appended and synced, and errors that name the reason
// without repeating the path (the caller names the file once, with the flag
// that chose it).
package files

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteAtomic writes data to path through a temporary file in the same
// directory and a rename, so that a reader (or a crash) never sees half a
// file and an existing file is replaced only by a complete one. Its errors
// do not repeat the path: the caller names the file once.
func WriteAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("create a temporary file beside it: %w", Bare(err))
	}
	tmpName := tmp.Name()
	_, writeErr := tmp.Write(data)
	syncErr := tmp.Sync()
	closeErr := tmp.Close()
	if err := errors.Join(writeErr, syncErr, closeErr, os.Chmod(tmpName, 0o644)); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("write: %w", Bare(err))
	}
	if err := os.Rename(tmpName, path); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("rename into place: %w", Bare(err))
	}
	return nil
}

// Bare is err without the path an *os.PathError or *os.LinkError
// carries (e.g. "permission denied" for "open /x/y: permission denied").
func Bare(err error) error {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Err
	}
	var linkErr *os.LinkError
	if errors.As(err, &linkErr) {
		return linkErr.Err
	}
	return err
}

// Append appends data to path in one write, creating the file when missing
// and never truncating it, and syncs it to disk before returning, so that
// what was reported written survives a crash.
func Append(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open: %w", Bare(err))
	}
	_, writeErr := f.Write(data)
	syncErr := f.Sync()
	if err := errors.Join(writeErr, syncErr, f.Close()); err != nil {
		return fmt.Errorf("append: %w", Bare(err))
	}
	return nil
}
