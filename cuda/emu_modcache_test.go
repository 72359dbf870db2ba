package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stepbench/cuda/emutest"
)

// The emulated NVRTC's module cache (STEPBENCH_EMU_MODULE_CACHE, what make
// test shares between its test binaries): a second compile of the same
// inputs is served from it with the same bytes and log, and so is one with
// an -I directory that gives no file; a header's content, the options and a
// damaged entry each make g++ build the module again.
func TestEmulatedModuleCache(t *testing.T) {
	emutest.Use(t)
	n := openTestNVRTC(t)
	if n.Emulated() == "" {
		t.Fatal("STEPBENCH_CUDA_LIBS points at the emulated device, but the NVRTC opened is not emulated")
	}
	dir := t.TempDir()
	t.Setenv("STEPBENCH_EMU_MODULE_CACHE", dir)
	inc := t.TempDir()
	header := filepath.Join(inc, "k.cuh")
	writeFile(t, header, "#define K 1.0f\n")
	const src = "#include \"k.cuh\"\nextern \"C\" __global__ void k(float* d) { d[threadIdx.x] = K; }\n"
	compile := func(arch string, extra ...string) ([]byte, string) {
		t.Helper()
		cubin, log, err := n.Compile(src, "k.cu", append([]string{"--gpu-architecture=" + arch, "-I" + inc, "--ptxas-options=-v"}, extra...))
		if err != nil {
			t.Fatalf("%v\n%s", err, log)
		}
		return cubin, log
	}
	entries := func(want int) []string {
		t.Helper()
		found, _ := filepath.Glob(filepath.Join(dir, "*.module"))
		if len(found) != want {
			t.Fatalf("%d cache entries, want %d: %v", len(found), want, found)
		}
		return found
	}
	first, log := compile("sm_90")
	entry := entries(1)[0]
	if again, againLog := compile("sm_90"); !bytes.Equal(again, first) || againLog != log {
		t.Errorf("the second compile differs from the first: %d and %d bytes, logs\n%s\n%s", len(again), len(first), againLog, log)
	}
	entries(1)
	// A directory of -I that gives no file (a --kernels-dir overlay's) does not change the key.
	if again, _ := compile("sm_90", "-I"+t.TempDir()); !bytes.Equal(again, first) {
		t.Error("an unused -I directory changed the module")
	}
	entries(1)
	// Served from the entry: one rewritten with a marked log (its checksum right) gives that log.
	rewriteEntry(t, entry, log+"(from the cache)\n", first)
	if _, marked := compile("sm_90"); !strings.HasSuffix(marked, "(from the cache)\n") {
		t.Errorf("a compile of the same inputs was not served from the cache:\n%s", marked)
	}
	// A damaged entry is built again and replaced.
	data := readFile(t, entry)
	data[len(data)-100] ^= 0xff
	writeFile(t, entry, string(data))
	if again, againLog := compile("sm_90"); !bytes.Equal(again, first) || againLog != log {
		t.Errorf("a damaged entry was used: log\n%s", againLog)
	}
	if err := checkEntry(entry); err != nil {
		t.Errorf("the damaged entry was not replaced: %v", err)
	}
	// A header's content and the options are in the key.
	writeFile(t, header, "#define K 2.0f\n")
	if other, _ := compile("sm_90"); bytes.Equal(other, first) {
		t.Error("an edited header's module is the old one")
	}
	entries(2)
	compile("sm_80")
	entries(3)
}

// checkEntry checks the header and checksum of the module cache entry at path.
func checkEntry(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	magic, rest, _ := bytes.Cut(data, []byte("\n"))
	line, body, _ := bytes.Cut(rest, []byte("\n"))
	var logBytes, moduleBytes int
	var sum string
	if string(magic) != "sbemu-module-entry/v1" {
		return fmt.Errorf("magic %q", magic)
	}
	if _, err := fmt.Sscanf(string(line), "%d %d %s", &logBytes, &moduleBytes, &sum); err != nil || len(body) != logBytes+moduleBytes {
		return fmt.Errorf("header %q, %d bytes of body: %v", line, len(body), err)
	}
	key := strings.TrimSuffix(filepath.Base(path), ".module")
	if got := sha256.Sum256(append([]byte(key+"\n"), body...)); hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("checksum %s, want %s", hex.EncodeToString(got[:]), sum)
	}
	return nil
}

// rewriteEntry writes the entry at path with log and module, and the checksum
// the emulated NVRTC checks: sha256 of the key, a newline and the body.
func rewriteEntry(t *testing.T, path, log string, module []byte) {
	t.Helper()
	key := strings.TrimSuffix(filepath.Base(path), ".module")
	body := append([]byte(log), module...)
	sum := sha256.Sum256(append([]byte(key+"\n"), body...))
	writeFile(t, path, fmt.Sprintf("sbemu-module-entry/v1\n%d %d %s\n%s", len(log), len(module), hex.EncodeToString(sum[:]), body))
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
