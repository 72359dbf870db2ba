package input

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readsAllowed are the files that may read a file without this package,
// and why: each names a file the kernel writes (/proc) or a test helper's.
// Anything else that reads a file must use Open, ReadFile or ReadAll.
var readsAllowed = map[string]string{
	"runner/cpu.go":                "/proc/meminfo",
	"bench/hostload/hostload.go":   "/proc/stat and /proc/self/stat",
	"bench/benchtest/benchtest.go": "a test helper's golden files",
}

// forbiddenReads are the calls that read a file (or standard input)
// without a limit, a regular-file check or a deadline.
var forbiddenReads = map[string]bool{
	"os.ReadFile": true, "os.Open": true, "ioutil.ReadFile": true, "ioutil.ReadAll": true, "io.ReadAll": true,
}

// No file of the module outside this package reads a file by os.ReadFile,
// os.Open or io.ReadAll (tests, scripts and the allowed files aside): a
// new reader cannot forget the limits.
func TestEveryFileReadGoesThroughInput(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	found := 0
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "internal/input", rel == "scripts", rel == "build", strings.HasPrefix(d.Name(), "."), d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		found++
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			if name := pkg.Name + "." + sel.Sel.Name; forbiddenReads[name] && readsAllowed[rel] == "" {
				t.Errorf("%s: %s reads without internal/input's limits (use input.Open, input.ReadFile or input.ReadAll)",
					fset.Position(call.Pos()), name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 100 {
		t.Errorf("found only %d Go files under %s", found, root)
	}
}
