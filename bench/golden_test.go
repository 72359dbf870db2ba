package bench

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

// checkGolden compares got with testdata/golden/name (rewriting it with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./bench -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (go test ./bench -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s",
			name, t.Name(), got, want)
	}
}
