package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

//go:embed *.cu
var embeddedSources embed.FS

// CommonSource is the helper file prepended to every other source; it is not
// compiled on its own.
const CommonSource = "common.cu"

// Sources returns the embedded sources, or the *.cu files of dir when dir != ""
// (--kernels-dir), keyed by file name.
func Sources(dir string) (map[string]string, error) {
	var fsys fs.FS = embeddedSources
	where := "embedded kernels"
	if dir != "" {
		fsys = os.DirFS(dir)
		where = dir
	}
	names, err := fs.Glob(fsys, "*.cu")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", where, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("list %s: no *.cu files", where)
	}
	srcs := make(map[string]string, len(names))
	for _, name := range names {
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read kernel source %s: %w", filepath.Join(where, name), err)
		}
		srcs[name] = string(text)
	}
	if _, ok := srcs[CommonSource]; !ok {
		return nil, fmt.Errorf("kernel sources in %s: %s is missing", where, CommonSource)
	}
	return srcs, nil
}

// ChangedSources names the files of dir's sources that differ from the
// embedded ones, sorted: a different text, a file only in dir, or an
// embedded file dir lacks. None means dir holds the embedded kernels.
func ChangedSources(dir string) ([]string, error) {
	embedded, err := Sources("")
	if err != nil {
		return nil, err
	}
	theirs, err := Sources(dir)
	if err != nil {
		return nil, err
	}
	var changed []string
	for name, text := range theirs {
		if mine, ok := embedded[name]; !ok || mine != text {
			changed = append(changed, name)
		}
	}
	for name := range embedded {
		if _, ok := theirs[name]; !ok {
			changed = append(changed, name)
		}
	}
	sort.Strings(changed)
	return changed, nil
}
