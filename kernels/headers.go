package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"stepbench/internal/input"
)

// The cubin cache key covers every header a unit can reach: NVRTC reads
// headers from the include directories at compile time, so an edited header
// must compile again although the unit's text is the same. What the unit can
// reach is found by scanning its text, and each header's, for #include lines
// (whatever #if guards them: a superset of what the preprocessor reads) and
// resolving each name as NVRTC does: a quoted name first beside the file
// that includes it, then in the include directories in order. A name found
// nowhere enters the key as missing (a header that appears later changes
// it). A computed include (#include MACRO) cannot be resolved by a scan: then
// every file under every include directory is hashed.

var (
	includeRe         = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]`)
	computedIncludeRe = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]+[^<"\s]`)
)

const (
	// maxHeaderBytes bounds one header read for the key (CUDA's largest are
	// about 1 MB); maxHeaderFiles bounds the files of a whole-directory hash.
	maxHeaderBytes = 16 << 20
	maxHeaderFiles = 100_000
)

// headerDigest is the sha256 of every header unit can reach through dirs,
// each with the path it resolved to, or "" when dirs is empty.
func headerDigest(unit string, dirs []string) (string, error) {
	if len(dirs) == 0 {
		return "", nil
	}
	h := sha256.New()
	type file struct{ text, dir string }
	queue := []file{{text: unit}}
	seen := map[string]bool{}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		if computedIncludeRe.MatchString(f.text) {
			return wholeDirsDigest(dirs)
		}
		for _, m := range includeRe.FindAllStringSubmatch(f.text, -1) {
			path := resolveInclude(m[2], m[1] == `"`, f.dir, dirs)
			if path == "" {
				fmt.Fprintf(h, "missing\x00%s\x00", m[2])
				continue
			}
			if seen[path] {
				continue
			}
			seen[path] = true
			text, err := input.ReadFile(path, maxHeaderBytes, "a kernel header")
			if err != nil {
				return "", input.Bad(fmt.Errorf("kernel header %s (#include %s%s%s): %w", path, m[1], m[2], closing(m[1]), err))
			}
			fmt.Fprintf(h, "header\x00%s\x00%d\x00", path, len(text))
			h.Write(text)
			queue = append(queue, file{text: string(text), dir: filepath.Dir(path)})
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func closing(open string) string {
	if open == "<" {
		return ">"
	}
	return open
}

// resolveInclude is the file name resolves to, "" when none exists: the
// first candidate that exists and is not a directory, as the preprocessor
// opens it, so that a FIFO or a device there is found (and refused by the
// read) before NVRTC would block on it. An absolute name is itself.
func resolveInclude(name string, quoted bool, including string, dirs []string) string {
	var candidates []string
	switch {
	case filepath.IsAbs(name):
		candidates = []string{name}
	case quoted && including != "":
		candidates = append(candidates, filepath.Join(including, name))
	}
	if !filepath.IsAbs(name) {
		for _, d := range dirs {
			candidates = append(candidates, filepath.Join(d, name))
		}
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	return ""
}

// wholeDirsDigest hashes every regular file under dirs, by path.
func wholeDirsDigest(dirs []string) (string, error) {
	var paths []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch st, err := os.Stat(path); {
			case err != nil:
				return nil // a dangling link: nothing NVRTC could open
			case st.Mode().IsRegular():
				paths = append(paths, path)
			case !st.IsDir():
				return input.Bad(fmt.Errorf("%s is %s, which a computed #include could reach", path, input.Kind(st.Mode())))
			}
			if len(paths) > maxHeaderFiles {
				return fmt.Errorf("more than %d files", maxHeaderFiles)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("kernel headers under %s (a computed #include hashes them all): %w", d, err)
		}
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		text, err := input.ReadFile(p, maxHeaderBytes, "a kernel header")
		if err != nil {
			return "", fmt.Errorf("kernel header %s: %w", p, err)
		}
		fmt.Fprintf(h, "file\x00%s\x00%d\x00", p, len(text))
		h.Write(text)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
