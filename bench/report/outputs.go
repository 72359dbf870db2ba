package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"stepbench/bench/internal/files"
)

// CheckOutputs checks, before anything is loaded or measured, that the
// run's files can be written: no two of them (and none of them and an
// input) name the same file, and each one's directory exists and takes a
// new file, or the existing file is a regular file open for writing. It
// changes nothing: an existing file is opened without truncation and a
// probe file is removed. The error names the flag and the file once.
func CheckOutputs(outputs, inputs []OutputFile) error {
	if err := checkDistinct(outputs, inputs); err != nil {
		return err
	}
	for _, o := range outputs {
		if err := checkWritable(o.Path); err != nil {
			return fmt.Errorf("%s %s: %w", o.Label, o.Path, err)
		}
	}
	return nil
}

func checkDistinct(outputs, inputs []OutputFile) error {
	all := append(append([]OutputFile{}, outputs...), inputs...)
	for i, a := range all {
		if i >= len(outputs) {
			break // two inputs may be the same file
		}
		for _, b := range all[i+1:] {
			if samePath(a.Path, b.Path) {
				if a.Label == b.Label {
					return fmt.Errorf("%s: two of its files are %s", a.Label, a.Path)
				}
				return fmt.Errorf("%s and %s name the same file %s: give each its own", a.Label, b.Label, a.Path)
			}
		}
	}
	return nil
}

// samePath compares where two output paths would write: both resolved
// through every link, the last component's too even when its target does
// not exist yet (a dangling link is where the file will be created), and
// existing files by identity (hard links).
func samePath(a, b string) bool {
	if resolvePath(a) == resolvePath(b) {
		return true
	}
	infoA, errA := os.Stat(a)
	infoB, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(infoA, infoB)
}

// resolvePath is the absolute path a write to p creates or replaces: its
// directory with links evaluated, and the last component followed through
// links (at most 40, as the kernel does). Where a step fails the path so
// far stands.
func resolvePath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	for range 40 {
		dir, base := filepath.Split(abs)
		if d, err := filepath.EvalSymlinks(dir); err == nil {
			dir = d
		}
		abs = filepath.Join(dir, base)
		info, err := os.Lstat(abs)
		if err != nil || info.Mode()&os.ModeSymlink == 0 {
			return abs
		}
		target, err := os.Readlink(abs)
		if err != nil {
			return abs
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		abs = filepath.Clean(target)
	}
	return abs
}

func checkWritable(path string) error {
	dir := filepath.Dir(path)
	if info, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("directory %s does not exist", dir)
		}
		return files.Bare(err)
	} else if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	info, err := os.Stat(path)
	switch {
	case err == nil && !info.Mode().IsRegular():
		return errors.New("not a regular file")
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("cannot write it: %w", files.Bare(err))
		}
		return f.Close()
	case !errors.Is(err, os.ErrNotExist):
		return files.Bare(err)
	}
	probe, err := os.CreateTemp(dir, ".stepbench-probe-*")
	if err != nil {
		return fmt.Errorf("cannot create files in %s: %w", dir, files.Bare(err))
	}
	probe.Close()
	return os.Remove(probe.Name())
}
