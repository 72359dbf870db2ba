package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// coveredCommand is a documented command that another test runs (and
// checks more closely than an example's exit status): the docs' run puts
// its cheap form in its place, the same command and flags on a small
// check, so the page stays runnable as written without paying twice.
type coveredCommand struct {
	page    string // docs/NAME.md or ../README.md
	command string // the line as written, without its trailing comment
	cheap   string // what TestExamplesRun runs instead
	pkg     string // the covering test's package (a directory of the repository)
	test    string // the covering test
	// args, when set, are the arguments the covering test passes to
	// stepbench (string literals of one call in its body): the same command.
	// Without them the test runs what the command runs in-process (its
	// checks under the same schedule).
	args []string
}

var coveredCommands = []coveredCommand{
	{
		page: "emulator.md", command: "stepbench verify --model llama-tiny",
		cheap: "stepbench verify --model llama-tiny --check add_i32",
		pkg:   "cmd/stepbench", test: "TestEmulatedVerify", args: []string{"verify", "--model", "llama-tiny"},
	},
	{
		// Every check under four schedules, attention at llama-3-8b's shapes too.
		page: "emulator.md", command: "STEPBENCH_EMU_SCHEDULE=reverse stepbench verify --model llama-tiny --kernels-dir kernels --check attention",
		cheap: "STEPBENCH_EMU_SCHEDULE=reverse stepbench verify --model llama-tiny --kernels-dir kernels --check add_i32",
		pkg:   "runner/gpu", test: "TestEmulatorSchedules",
	},
	{
		page: "emulator.md", command: "STEPBENCH_EMU_SCHEDULE=warp-serial stepbench verify --model llama-tiny --kernels-dir kernels --check attention",
		cheap: "STEPBENCH_EMU_SCHEDULE=warp-serial stepbench verify --model llama-tiny --kernels-dir kernels --check add_i32",
		pkg:   "runner/gpu", test: "TestEmulatorSchedules",
	},
}

// commandOf is a line of an example without its trailing comment.
func commandOf(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// cheapBody is an example's body with each covered command of its page
// replaced by its cheap form, and the replacements made.
func cheapBody(ex example) (string, []coveredCommand) {
	lines := strings.Split(ex.body, "\n")
	var used []coveredCommand
	for i, line := range lines {
		for _, c := range coveredCommands {
			if filepath.Base(c.page) == filepath.Base(ex.page) && commandOf(line) == c.command {
				lines[i] = c.cheap
				used = append(used, c)
			}
		}
	}
	return strings.Join(lines, "\n"), used
}

// TestCoveredExamplesAreRunElsewhere keeps coveredCommands honest: each
// command is on its page in an sh example, the cheap form is the same
// command on other checks, and its covering test exists (and, where args
// are given, runs stepbench with exactly those arguments).
func TestCoveredExamplesAreRunElsewhere(t *testing.T) {
	for _, c := range coveredCommands {
		found := false
		for _, ex := range examples(t, c.page) {
			if _, used := cheapBody(ex); strings.HasPrefix(ex.info, "sh") && !strings.Contains(ex.info, "needs=") &&
				slices.ContainsFunc(used, func(u coveredCommand) bool { return u.command == c.command }) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no sh example runs %q", c.page, c.command)
		}
		if base, _, _ := strings.Cut(c.command, " --check"); !strings.HasPrefix(c.cheap, base) {
			t.Errorf("%s: the cheap form %q is not the command %q on other checks", c.page, c.cheap, c.command)
		}
		body := testBody(t, filepath.Join("..", c.pkg), c.test)
		if body == nil {
			t.Errorf("%s: %q is covered by %s %s, which does not exist", c.page, c.command, c.pkg, c.test)
			continue
		}
		if c.args != nil && !callsWith(body, c.args) {
			t.Errorf("%s: %s %s runs no stepbench %s", c.page, c.pkg, c.test, strings.Join(c.args, " "))
		}
	}
}

// testBody is the body of the test function name in dir's test files.
func testBody(t *testing.T, dir, name string) *ast.BlockStmt {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == name {
				return fn.Body
			}
		}
	}
	return nil
}

// callsWith says whether a call in body has exactly args as its string
// literal arguments, in order.
func callsWith(body *ast.BlockStmt, args []string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var lits []string
		for _, a := range call.Args {
			if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					lits = append(lits, s)
				}
			}
		}
		found = found || slices.Equal(lits, args)
		return !found
	})
	return found
}
