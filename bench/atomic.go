package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so that a reader (or a crash) never sees half a
// file and an existing file is replaced only by a complete one. Its errors
// do not repeat the path: the caller names the file once.
func writeFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("create a temporary file beside it: %w", bareError(err))
	}
	tmpName := tmp.Name()
	_, writeErr := tmp.Write(data)
	syncErr := tmp.Sync()
	closeErr := tmp.Close()
	if err := errors.Join(writeErr, syncErr, closeErr, os.Chmod(tmpName, 0o644)); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("write: %w", bareError(err))
	}
	if err := os.Rename(tmpName, path); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("rename into place: %w", bareError(err))
	}
	return nil
}

// bareError is err without the path an *os.PathError or *os.LinkError
// carries (e.g. "permission denied" for "open /x/y: permission denied").
func bareError(err error) error {
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
