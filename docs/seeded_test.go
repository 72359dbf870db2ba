package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// seededListRow is a row of development.md's "Seeded bugs":
// "| `NAME` | ... | `PACKAGE` `TestName` |" (scripts/testtimes -seeded
// reads the same rows at the end of make test).
var seededListRow = regexp.MustCompile("^\\| `([^`]+)` \\|.*\\| `([a-z0-9_/]+)` `(Test\\w+)` \\|$")

// TestSeededBugListNamesItsTests is the static half of the seeded-bug
// list's check, run without the emulated device: each row's test exists in
// its package, and that package's tests report the row's bug by that name
// (seeded.Caught or seeded.Expect with it, or a seededBug literal of that
// name, whose test reports b.name). Each bug the tests report is listed.
// The run-time half is make test's: every listed bug reported caught by
// its test, which passed, in that run (scripts/testtimes -seeded).
func TestSeededBugListNamesItsTests(t *testing.T) {
	data, err := os.ReadFile("development.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	in, rows := false, 0
	listed := map[string]bool{}
	reported := map[string]map[string]bool{} // package → names its tests report
	tests := map[string]map[string]bool{}    // package → its test functions
	for i, line := range lines {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Seeded bugs"
			continue
		}
		m := seededListRow.FindStringSubmatch(line)
		if !in || m == nil {
			if in && strings.HasPrefix(line, "| `") {
				t.Errorf("development.md:%d: not a row of the list's form: %s", i+1, line)
			}
			continue
		}
		rows++
		name, pkg, test := m[1], m[2], m[3]
		listed[pkg+"\x00"+name] = true
		if tests[pkg] == nil {
			tests[pkg], reported[pkg] = seededReports(t, filepath.Join("..", pkg))
		}
		if !tests[pkg][test] {
			t.Errorf("development.md:%d: %s has no test %s", i+1, pkg, test)
		}
		if !reported[pkg][name] {
			t.Errorf("development.md:%d: no test of %s reports %q caught", i+1, pkg, name)
		}
	}
	if rows < 40 {
		t.Fatalf("development.md's \"Seeded bugs\": %d rows", rows)
	}
	for _, pkg := range []string{"runner/gpu", "cuda", "cmd/stepbench"} {
		if tests[pkg] == nil {
			tests[pkg], reported[pkg] = seededReports(t, filepath.Join("..", pkg))
		}
		for name := range reported[pkg] {
			if !listed[pkg+"\x00"+name] {
				t.Errorf("%s's tests report the seeded bug %q caught: list it in development.md's \"Seeded bugs\"", pkg, name)
			}
		}
	}
}

// seededReports parses the test files of dir: its test functions, and the
// seeded bugs they report (string arguments of seeded.Caught and
// seeded.Expect, names of seededBug literals).
func seededReports(t *testing.T, dir string) (tests, names map[string]bool) {
	t.Helper()
	tests, names = map[string]bool{}, map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no test files (%v)", dir, err)
	}
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv == nil && strings.HasPrefix(n.Name.Name, "Test") {
					tests[n.Name.Name] = true
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isIdent(sel.X, "seeded") && (sel.Sel.Name == "Caught" || sel.Sel.Name == "Expect") {
					for _, a := range n.Args[1:] {
						addString(names, a)
					}
				}
			case *ast.CompositeLit:
				for _, lit := range seededBugLiterals(n) {
					for _, e := range lit.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "name") {
							addString(names, kv.Value)
						}
					}
				}
			}
			return true
		})
	}
	return tests, names
}

// seededBugLiterals is n when it is a seededBug{...}, or its elements when
// it is a []seededBug{{...}}.
func seededBugLiterals(n *ast.CompositeLit) []*ast.CompositeLit {
	if isIdent(n.Type, "seededBug") {
		return []*ast.CompositeLit{n}
	}
	arr, ok := n.Type.(*ast.ArrayType)
	if !ok || !isIdent(arr.Elt, "seededBug") {
		return nil
	}
	var out []*ast.CompositeLit
	for _, e := range n.Elts {
		if lit, ok := e.(*ast.CompositeLit); ok {
			out = append(out, lit)
		}
	}
	return out
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func addString(set map[string]bool, e ast.Expr) {
	if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		if s, err := strconv.Unquote(lit.Value); err == nil {
			set[s] = true
		}
	}
}
