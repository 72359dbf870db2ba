// Package files writes stepbench's result files so that nothing already
// written is lost and no record is ever torn: a whole file replaced
// atomically (temporary file, sync, rename), records appended and synced or
// not at all, and errors that name the reason without repeating the path
// (the caller names the file once, with the flag that chose it).
package files

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// TempPath is the temporary file WriteAtomic writes path through: one name
// per path, so that a temporary file left by a killed process is reused
// (and renamed away) by the next write instead of piling up.
func TempPath(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".tmp")
}

// ProbePath is the empty file a writability check creates and removes
// beside path: one name per path, for the reason TempPath has one.
func ProbePath(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+".probe")
}

// Resolve is the file a write to path creates or replaces: path with its
// links followed, the last component's too even when its target does not
// exist yet (a dangling link is where the file will be created), at most
// 40 links deep as the kernel follows them. Where a step fails, the path
// so far stands.
func Resolve(path string) string {
	p := filepath.Clean(path)
	for range 40 {
		dir, base := filepath.Split(p)
		if d, err := filepath.EvalSymlinks(dir); err == nil && dir != "" {
			p = filepath.Join(d, base)
		}
		info, err := os.Lstat(p)
		if err != nil || info.Mode()&os.ModeSymlink == 0 {
			return p
		}
		target, err := os.Readlink(p)
		if err != nil {
			return p
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
	}
	return p
}

// WriteAtomic writes data to path through a temporary file and a rename,
// so that a reader (or a crash) never sees half a file and an existing
// file is replaced only by a complete one. A path that is a symbolic link
// is written through: its target (Resolve) is replaced, beside which the
// temporary file is made, and the link stays. Its errors do not repeat
// the path: the caller names the file once.
func WriteAtomic(path string, data []byte) error {
	path = Resolve(path)
	tmpName := TempPath(path)
	// O_NOFOLLOW: a link planted at the temporary name is not written through.
	tmp, err := os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create a temporary file beside it: %w", Bare(err))
	}
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

// Append appends data (whole records) to path, creating the file when
// missing and never truncating what it held, and syncs it to disk before
// returning, so that what was reported written survives a crash. It is all
// or nothing: when the write or the sync fails (a full disk, a file size
// limit) the file is truncated back to its size before and synced, so that
// no part of data stays behind to tear the next record.
func Append(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open: %w", Bare(err))
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("append: %w", Bare(err))
	}
	before := info.Size()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		undo := errors.Join(f.Truncate(before), f.Sync())
		f.Close()
		if undo != nil {
			return fmt.Errorf("append: %w; truncating back to the %d bytes before also failed (%v): the file may end in a partial record",
				Bare(err), before, Bare(undo))
		}
		return fmt.Errorf("append: %w (nothing of the record was kept: the file is back to its %d bytes)", Bare(err), before)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append: %w", Bare(err))
	}
	return nil
}
