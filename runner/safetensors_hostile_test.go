package runner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/internal/input"
)

// A shard truncated after it was opened (a copy still running, a disk
// quota) is an error naming the file; read through a mapping it was a
// SIGBUS that killed the process.
func TestSafetensorsTruncatedWhileOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	stWrite(t, path, []HostTensor{stBF16Tensor("a", []int{512, 16}, 0), stBF16Tensor("b", []int{4096, 16}, 1)}, nil)
	m, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		_, err := m.BF16(name)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("BF16(%s) of a truncated file: %v, want an error naming %s", name, err, path)
		}
	}
}

// Every file of a model directory that is not a regular file is refused at
// once, naming it and what it is: a FIFO used to block the open forever,
// a directory said "mmap: no such device".
func TestOpenSafetensorsRefusesIrregularFiles(t *testing.T) {
	fifo := func(t *testing.T, path string) {
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(t *testing.T, path string) {
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name, file, want string
		make             func(t *testing.T, path string)
		index            bool
	}{
		{"fifo model.safetensors", "model.safetensors", "a named pipe (FIFO)", fifo, false},
		{"directory model.safetensors", "model.safetensors", "a directory", mkdir, false},
		{"fifo shard", "s1.safetensors", "a named pipe (FIFO)", fifo, true},
		{"directory shard", "s1.safetensors", "a directory", mkdir, true},
		{"fifo index", "model.safetensors.index.json", "a named pipe (FIFO)", fifo, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.make(t, filepath.Join(dir, tt.file))
			if tt.index {
				stWriteIndex(t, dir, map[string]string{"a": "s1.safetensors"})
			}
			done := make(chan error, 1)
			go func() {
				m, err := OpenSafetensors(dir)
				if err == nil {
					m.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, tt.file)) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("OpenSafetensors = %v, want an error naming %s as %s", err, tt.file, tt.want)
				}
				if !input.IsBad(err) {
					t.Errorf("%v is not marked bad input", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("OpenSafetensors blocks")
			}
		})
	}
}

// An index larger than its limit is refused with the limit named.
func TestSafetensorsIndexLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors.index.json")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, maxSafetensorsIndexBytes+1); err != nil { // sparse
		t.Fatal(err)
	}
	_, err := OpenSafetensors(dir)
	if err == nil || !strings.Contains(err.Error(), "64 MiB") || !strings.Contains(err.Error(), path) {
		t.Errorf("OpenSafetensors with a huge index: %v", err)
	}
}

func FuzzSafetensorsIndex(f *testing.F) {
	f.Add([]byte(`{"metadata": {"total_size": 16}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"a": "../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {}}`))
	f.Add([]byte(`{"weight_map": {"a": 3}}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		weightMap, err := parseSafetensorsIndex("fuzz.json", data)
		if err != nil {
			return
		}
		if len(weightMap) == 0 {
			t.Fatal("an empty weight_map was accepted")
		}
		for name, shard := range weightMap {
			if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
				t.Fatalf("tensor %q: shard %q escapes the model directory", name, shard)
			}
		}
		// Through the file system: the shards are missing, a clear error.
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := OpenSafetensors(dir); err == nil {
			m.Close()
			t.Fatal("an index of missing shards was accepted")
		}
	})
}
