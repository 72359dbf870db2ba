package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"stepbench/bench/internal/files"
	"stepbench/internal/input"
)

// CheckOutputs checks, before anything is loaded or measured, that the
// run's files can be written: no two of them (and none of them and an
// input) name the same file, each one's directory exists and takes a new
// file (where the file is replaced through a temporary file beside it), an
// existing file is a regular file open for writing, and an existing file
// records are appended to holds whole records (CheckJSONL): appending to a
// torn or foreign file would bury the new records in an unreadable one. It
// changes nothing: an existing file is opened without truncation and a
// probe file is removed. The error names the flag and the file once.
func CheckOutputs(outputs, inputs []OutputFile) error {
	if err := checkDistinct(outputs, inputs); err != nil {
		return err
	}
	for _, o := range outputs {
		if err := checkWritable(o.Path, o.Appended); err != nil {
			return fmt.Errorf("%s %s: %w", o.Label, o.Path, err)
		}
		if o.Appended {
			if err := CheckJSONL(o.Path); err != nil {
				return fmt.Errorf("%s %s: %w", o.Label, o.Path, err)
			}
		}
	}
	return nil
}

// MaxJSONLLineBytes bounds one record of an appended file read back
// (a --logits-out record of a long generation is tens of MB).
const MaxJSONLLineBytes = 1 << 30

// CheckJSONL checks that the file at path, when it exists, holds whole JSON
// records, one per line: every line parses and the file ends in a newline.
// The error names the first bad line.
func CheckJSONL(path string) error {
	f, err := input.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return files.Bare(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for line := 1; ; line++ {
		text, err := readLine(r, MaxJSONLLineBytes)
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, errLineTooLong) {
			return fmt.Errorf("line %d is longer than %s: not a file of JSON records", line, input.Bytes(MaxJSONLLineBytes))
		}
		if err != nil && err != errNoNewline {
			return fmt.Errorf("read line %d: %w", line, files.Bare(err))
		}
		if err == errNoNewline {
			return fmt.Errorf("line %d does not end in a newline (a record cut short by a crash or a full disk?): "+
				"appending would join the next record to it; move the file away or repair it", line)
		}
		if !json.Valid(text) {
			return fmt.Errorf("line %d is not a JSON record (%.40q): appending would bury new records in a file that does not parse; "+
				"move it away or repair it", line, text)
		}
	}
}

var (
	errNoNewline   = errors.New("no newline at the end")
	errLineTooLong = errors.New("line too long")
)

// readLine reads one line without its newline: errNoNewline for a last
// line without one, io.EOF at the end.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return line, errNoNewline
		}
		return nil, err
	}
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

// checkWritable checks path can be written: appended to when appended,
// else replaced through a temporary file in its directory, which must then
// take new files even when path exists (/proc/version exists, is regular
// and opens for writing, yet no file can be created beside it).
func checkWritable(path string, appended bool) error {
	path = files.Resolve(path) // a link is written through: its target is what is replaced
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
		return fmt.Errorf("%s, not a regular file", input.Kind(info.Mode()))
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("cannot write it: %w", files.Bare(err))
		}
		if err := f.Close(); err != nil || appended {
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return files.Bare(err)
	}
	// One probe name per path (not a random one): a probe left by a process
	// killed between its create and its remove is reused and removed by the
	// next check of the same path instead of piling up.
	probeName := files.ProbePath(path)
	probe, err := os.OpenFile(probeName, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("cannot create files in %s: %w", dir, files.Bare(err))
	}
	probe.Close()
	if err := os.Remove(probeName); err != nil && !errors.Is(err, os.ErrNotExist) {
		return files.Bare(err)
	}
	return nil
}

// AppendRecord appends v as one JSON line to path, whole or not at all,
// and synced (as the one_batch JSONL).
func AppendRecord(path string, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return files.Append(path, append(line, '\n'))
}
