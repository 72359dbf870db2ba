package kernels

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"stepbench/internal/input"
)

//go:embed *.cu
var embeddedSources embed.FS

// CommonSource is the helper file prepended to every other source; it is not
// compiled on its own.
const CommonSource = "common.cu"

// maxSourceBytes bounds a --kernels-dir source (ours are 2-40 KB).
const maxSourceBytes = 16 << 20

// Sources returns the embedded sources keyed by file name, with the *.cu
// files of dir laid over them when dir != "" (--kernels-dir): a directory
// may hold any subset of the files (an edited attention.cu alone), and a
// file of a name the embedded sources lack is compiled too.
func Sources(dir string) (map[string]string, error) {
	names, err := fs.Glob(embeddedSources, "*.cu")
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("list the embedded kernels: %v (%d files)", err, len(names))
	}
	srcs := make(map[string]string, len(names))
	for _, name := range names {
		text, err := fs.ReadFile(embeddedSources, name)
		if err != nil {
			return nil, fmt.Errorf("read embedded kernel source %s: %w", name, err)
		}
		srcs[name] = string(text)
	}
	if dir == "" {
		return srcs, nil
	}
	overrides, err := Overrides(dir)
	if err != nil {
		return nil, err
	}
	for _, o := range overrides {
		srcs[o.Name] = o.text
	}
	return srcs, nil
}

// Override is one *.cu file of a --kernels-dir laid over the embedded sources.
type Override struct {
	Name   string // file name, e.g. "attention.cu"
	Path   string // where it was read
	SHA256 string // of its bytes, hex
	// Changed says it differs from the embedded file of its name (or that
	// there is none); an identical copy overrides nothing.
	Changed bool
	text    string
}

// Overrides reads the *.cu files of dir, sorted by name: at least one must
// be there. Each is a user's file: a FIFO must not hang the run, nor a huge
// file fill memory (input.ReadFile), and an unreadable one is bad input.
func Overrides(dir string) ([]Override, error) {
	names, err := fs.Glob(os.DirFS(dir), "*.cu")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(names) == 0 {
		if _, statErr := os.Stat(dir); statErr != nil {
			return nil, input.Bad(fmt.Errorf("list %s: %w", dir, statErr))
		}
		return nil, input.Bad(fmt.Errorf("list %s: no *.cu files", dir))
	}
	sort.Strings(names)
	out := make([]Override, 0, len(names))
	for _, name := range names {
		path := filepath.Join(dir, name)
		text, err := input.ReadFile(path, maxSourceBytes, "a kernel source")
		if err != nil {
			return nil, fmt.Errorf("read kernel source %s: %w", path, input.Bad(err))
		}
		sum := sha256.Sum256(text)
		embedded, err := fs.ReadFile(embeddedSources, name)
		changed := err != nil || !bytes.Equal(embedded, text)
		out = append(out, Override{Name: name, Path: path, SHA256: hex.EncodeToString(sum[:]), Changed: changed, text: string(text)})
	}
	return out, nil
}

// ChangedSources names the files of dir that differ from the embedded ones,
// sorted: a different text or a file the embedded sources lack. A file dir
// does not hold comes from the embedded sources and is no change; none
// means dir changes nothing.
func ChangedSources(dir string) ([]string, error) {
	overrides, err := Overrides(dir)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, o := range overrides {
		if o.Changed {
			changed = append(changed, o.Name)
		}
	}
	return changed, nil
}
