package docs

import (
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// helperPackages are packages outside the design's layers: test helpers
// and the lint tool. Nothing but tests and main packages may import them.
var helperPackages = map[string]bool{"bench/benchtest": true, "cuda/emutest": true, "runner/quanttest": true, "scripts/funclen": true,
	"scripts/testtimes": true, "internal/testmatrix": true, "internal/seeded": true}

// designLayers reads the layer diagram of docs/design.md: package → layer.
func designLayers(t *testing.T) map[string]int {
	t.Helper()
	data, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	layers := map[string]int{}
	row := regexp.MustCompile(`(?m)^layer (\d+) +(.*)$`)
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[1])
		for _, pkg := range strings.Fields(m[2]) {
			layers[strings.TrimSuffix(pkg, "*")] = n
		}
	}
	if len(layers) < 10 {
		t.Fatalf("design.md: found %d packages in the layer diagram", len(layers))
	}
	return layers
}

// modulePackages are the module's package directories (relative to the
// module root, forward slashes) and their non-test imports within the
// module.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		top := map[string]bool{"../build": true, "../bin": true, "../dist": true} // build outputs
		if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || top[path]) {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		var deps []string
		for _, imp := range p.Imports {
			if dep, ok := strings.CutPrefix(imp, "stepbench/"); ok {
				deps = append(deps, dep)
			}
		}
		pkgs[rel] = deps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// Every package is in the design's layer diagram (or is a helper), and
// every import points to a lower layer: the diagram is the import graph.
func TestDesignLayersAreTheImports(t *testing.T) {
	layers := designLayers(t)
	pkgs := modulePackages(t)
	for pkg := range layers {
		if _, ok := pkgs[pkg]; !ok {
			t.Errorf("design.md's layers name %s, which is no package", pkg)
		}
	}
	for pkg, deps := range pkgs {
		layer, listed := layers[pkg]
		if !listed && !helperPackages[pkg] && pkg != "docs" {
			t.Errorf("%s is in no layer of design.md", pkg)
			continue
		}
		for _, dep := range deps {
			if helperPackages[dep] && !strings.HasPrefix(pkg, "cmd/") {
				t.Errorf("%s imports the helper %s", pkg, dep)
			}
			if l, ok := layers[dep]; listed && ok && l >= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): design.md says imports point to lower layers", pkg, layer, dep, l)
			}
		}
	}
}

// anchor is GitHub's anchor of a heading: lower case, punctuation but - and
// _ dropped, spaces as -.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link of the README and of docs/*.md names a file that
// exists and, after #, a heading of it: moving a section breaks no link.
func TestLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile(`(?m)^#+ (.+)$`)
	anchors := func(path string) map[string]bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		out := map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(string(data), -1) {
			out[anchor(m[1])] = true
		}
		return out
	}
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchors(path)[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", page, target, path, frag)
			}
		}
	}
}
