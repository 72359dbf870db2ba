package gpu

import (
	"fmt"
	"os"
	"testing"
)

// testCacheEnv names the cubin cache the tests of this package, and the
// child processes they start, share: each source (seeded bugs change one)
// is compiled once per 'go test' rather than once per test.
const testCacheEnv = "STEPBENCH_TEST_CACHE"

func TestMain(m *testing.M) {
	if os.Getenv(testCacheEnv) != "" { // a child process: its parent's cache
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "stepbench-gpu-test-cache")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test cache:", err)
		os.Exit(1)
	}
	os.Setenv(testCacheEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testCache is the shared cubin cache directory.
func testCache() string { return os.Getenv(testCacheEnv) }
