package kernels

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/internal/input"
)

// A header of the user's own, reached through an include directory and a
// header beside it: editing either compiles the unit again; editing a file
// the unit cannot reach does not.
func TestCacheKeyCoversEveryReachableHeader(t *testing.T) {
	inc, other := t.TempDir(), t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(inc, "mine.cuh"), "#pragma once\n#include \"detail.cuh\"\n#include <absent.h>\n__device__ int mine() { return 1; }\n")
	write(filepath.Join(inc, "detail.cuh"), "// detail v1\n")
	write(filepath.Join(inc, "unrelated.cuh"), "// not included\n")
	write(filepath.Join(other, "detail.cuh"), "// a second detail.cuh, later on the path: never read\n")
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	srcs = map[string]string{CommonSource: srcs[CommonSource], "norm.cu": "#include \"mine.cuh\"\n" + srcs["norm.cu"]}
	b := Build{Arch: 90, CacheDir: t.TempDir(), Include: []string{inc, other}}
	var c fakeCompiler
	compile := func(what string, wantCompiles int) {
		t.Helper()
		before := c.compiles
		got, err := b.Compile(&c, srcs)
		if err != nil {
			t.Fatal(err)
		}
		if c.compiles-before != wantCompiles {
			t.Errorf("%s: %d compiles, want %d (from cache: %v)", what, c.compiles-before, wantCompiles, got[0].FromCache)
		}
	}
	compile("first", 1)
	compile("nothing changed", 0)
	write(filepath.Join(inc, "unrelated.cuh"), "// edited, still not included\n")
	write(filepath.Join(other, "detail.cuh"), "// edited, still shadowed\n")
	compile("an unreachable header edited", 0)
	write(filepath.Join(inc, "detail.cuh"), "// detail v2\n")
	compile("a header included by a header edited", 1)
	write(filepath.Join(other, "absent.h"), "// now it exists\n")
	compile("a missing header appeared", 1)
	// A directory first on the path that holds none of the headers (a
	// --kernels-dir overlay of other files): the same headers are reached, so
	// the cubin is the cache's. A header it does hold is reached instead.
	b.Include = append([]string{t.TempDir()}, b.Include...)
	compile("a directory before them that holds none of the headers", 0)
	write(filepath.Join(b.Include[0], "mine.cuh"), "#pragma once\n__device__ int mine() { return 2; }\n")
	compile("a directory before them that shadows a header", 1)
	b.Include = b.Include[1:]
	if opts := b.Options(); opts[len(opts)-2] != "-I"+inc || opts[len(opts)-1] != "-I"+other {
		t.Errorf("options %v do not end with -I for each directory in order", opts)
	}
}

// A computed include cannot be followed: every file under the directories
// is hashed.
func TestComputedIncludeHashesWholeDirectories(t *testing.T) {
	inc := t.TempDir()
	path := filepath.Join(inc, "any.txt")
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	unit := "#define H \"x.h\"\n#include H\n"
	a, err := headerDigest(unit, []string{inc})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := headerDigest(unit, []string{inc}); err != nil || a == b {
		t.Errorf("editing a file under the directory keeps the digest (%v)", err)
	}
	if d, _ := headerDigest(unit, nil); d != "" {
		t.Errorf("no include directories: digest %q, want none", d)
	}
}

// A header that is no regular file (a FIFO NVRTC would block on, a link
// to /dev/zero) is refused before the compile, naming it and the #include
// that reached it, as bad input; so is one a computed include could reach.
func TestIrregularHeadersRefusedBeforeTheCompile(t *testing.T) {
	inc := t.TempDir()
	fifo := filepath.Join(inc, "fifo.cuh")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(inc, "zero.cuh")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ unit, want string }{
		{"#include \"fifo.cuh\"\n", "#include \"fifo.cuh\"): open " + fifo + ": a named pipe (FIFO), not a regular file"},
		{"#include <zero.cuh>\n", "#include <zero.cuh>): open " + filepath.Join(inc, "zero.cuh") + ": a character device"},
		{"#include \"" + fifo + "\"\n", "a named pipe (FIFO)"},
		{"#define H \"x.h\"\n#include H\n", "a named pipe (FIFO), which a computed #include could reach"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := headerDigest(c.unit, []string{inc})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) || !input.IsBad(err) {
				t.Errorf("%q: %v, want bad input with %q", c.unit, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: headerDigest blocks", c.unit)
		}
	}
}
