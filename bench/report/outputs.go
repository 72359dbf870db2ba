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

// samePath compares cleaned absolute paths, and existing files by identity
// (a link or another spelling of the same file).
func samePath(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if errA == nil && errB == nil && absA == absB {
		return true
	}
	infoA, errA := os.Stat(a)
	infoB, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(infoA, infoB)
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
