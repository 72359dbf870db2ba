// Package libdir implements stepbench's one switch for where the CUDA
// libraries come from: with STEPBENCH_CUDA_LIBS=DIR set, every CUDA library
// (libcuda.so.1, NVRTC, cuBLAS, NVML's libnvidia-ml.so.1, later NCCL) is
// opened from DIR and from nowhere else; unset, each is found as before
// (the loader path and the toolkit search of package cuda).
//
// Uses: the emulated CUDA device (STEPBENCH_CUDA_LIBS=build/emu), and real
// installs where the loader path would pick a mix of libraries, e.g.
// STEPBENCH_CUDA_LIBS=/usr/local/cuda-12.4/lib64 with the driver's
// libcuda.so.1 and libnvidia-ml.so.1 linked into that folder.
//
// The package is plain Go, so that packages without cgo (or with their own
// cgo, like the NVML telemetry) resolve names the same way as package cuda.
package libdir

import (
	"fmt"
	"os"
	"path/filepath"
)

// EnvVar names the switch.
const EnvVar = "STEPBENCH_CUDA_LIBS"

// Lookup is what resolving reads from the machine; Host is the real one and
// tests substitute their own.
type Lookup struct {
	Getenv func(key string) string
	IsDir  func(path string) bool
	Exists func(path string) bool
}

// Host reads the process environment and the file system.
func Host() Lookup {
	return Lookup{
		Getenv: os.Getenv,
		IsDir: func(path string) bool {
			fi, err := os.Stat(path)
			return err == nil && fi.IsDir()
		},
		Exists: func(path string) bool { _, err := os.Stat(path); return err == nil },
	}
}

// Dir returns the switch's directory made absolute (relative to the working
// directory), or "" when the switch is unset. A directory that does not
// exist is an error naming the variable and the path.
func (l Lookup) Dir() (string, error) {
	value := l.Getenv(EnvVar)
	if value == "" {
		return "", nil
	}
	dir, err := filepath.Abs(value)
	if err != nil {
		return "", fmt.Errorf("%s=%s: %w", EnvVar, value, err)
	}
	if !l.IsDir(dir) {
		return "", fmt.Errorf("%s=%s: %s is not a directory", EnvVar, value, dir)
	}
	return dir, nil
}

// Resolve returns what to dlopen for the library soname: DIR/soname when the
// switch is set, soname itself otherwise (found through the loader path).
// With the switch set, a missing DIR or file is an error naming the
// variable and the path.
func (l Lookup) Resolve(soname string) (string, error) {
	paths, err := l.ResolveAny(soname)
	if err != nil {
		return "", err
	}
	return paths[0], nil
}

// ResolveAny is Resolve for a library known by several sonames (newest
// first, e.g. libnvrtc.so.13, libnvrtc.so.12): with the switch set it
// returns DIR/name for each name present in DIR, in the given order, and an
// error when none is; unset, it returns the names unchanged.
func (l Lookup) ResolveAny(sonames ...string) ([]string, error) {
	dir, err := l.Dir()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return append([]string(nil), sonames...), nil
	}
	var found, looked []string
	for _, name := range sonames {
		path := filepath.Join(dir, name)
		looked = append(looked, path)
		if l.Exists(path) {
			found = append(found, path)
		}
	}
	if len(found) == 0 {
		what := "no library names given"
		if len(looked) == 1 {
			what = looked[0] + " not found"
		} else if len(looked) > 1 {
			what = fmt.Sprintf("none of %v found", looked)
		}
		return nil, fmt.Errorf("%s=%s: %s", EnvVar, l.Getenv(EnvVar), what)
	}
	return found, nil
}

// Resolve is Host().Resolve(soname).
func Resolve(soname string) (string, error) { return Host().Resolve(soname) }
