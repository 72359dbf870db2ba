package libdir

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fake serves one environment variable value and a fixed set of folders and files.
func fake(value string, dirs []string, files ...string) Lookup {
	return Lookup{
		Getenv: func(k string) string {
			if k == EnvVar {
				return value
			}
			return ""
		},
		IsDir:  func(p string) bool { return slices.Contains(dirs, p) },
		Exists: func(p string) bool { return slices.Contains(files, p) || slices.Contains(dirs, p) },
	}
}

func TestResolveAny(t *testing.T) {
	nvrtc := []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}
	tests := []struct {
		name    string
		value   string
		dirs    []string
		files   []string
		want    []string
		wantErr []string // substrings of the error
	}{
		{name: "unset: the sonames, for the loader path", want: nvrtc},
		{
			name: "set: each soname present in DIR, in order", value: "/emu", dirs: []string{"/emu"},
			files: []string{"/emu/libnvrtc.so.11.2", "/emu/libnvrtc.so.13", "/other/libnvrtc.so.12"},
			want:  []string{"/emu/libnvrtc.so.13", "/emu/libnvrtc.so.11.2"},
		},
		{
			name: "set, folder missing: names the variable and the path", value: "/nowhere",
			wantErr: []string{"STEPBENCH_CUDA_LIBS=/nowhere", "/nowhere is not a directory"},
		},
		{
			name: "set, no soname in DIR: names the variable and every path looked at", value: "/emu", dirs: []string{"/emu"},
			files:   []string{"/usr/lib/libnvrtc.so.12"},
			wantErr: []string{"STEPBENCH_CUDA_LIBS=/emu", "/emu/libnvrtc.so.13", "/emu/libnvrtc.so.11.2"},
		},
		{
			name: "a trailing slash is the same folder", value: "/emu/", dirs: []string{"/emu"},
			files: []string{"/emu/libnvrtc.so.12"}, want: []string{"/emu/libnvrtc.so.12"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fake(tt.value, tt.dirs, tt.files...).ResolveAny(nvrtc...)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ResolveAny = %q, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ResolveAny = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestResolveOneName(t *testing.T) {
	l := fake("/emu", []string{"/emu"}, "/emu/libnvidia-ml.so.1")
	if got, err := l.Resolve("libnvidia-ml.so.1"); err != nil || got != "/emu/libnvidia-ml.so.1" {
		t.Errorf("Resolve = %q, %v", got, err)
	}
	_, err := l.Resolve("libnccl.so.2")
	if err == nil || err.Error() != "STEPBENCH_CUDA_LIBS=/emu: /emu/libnccl.so.2 not found" {
		t.Errorf("Resolve of a missing library: err = %v", err)
	}
	if got, err := fake("", nil).Resolve("libcuda.so.1"); err != nil || got != "libcuda.so.1" {
		t.Errorf("unset: Resolve = %q, %v; want the soname", got, err)
	}
}

// The real Host lookup: a relative DIR is taken from the working directory.
func TestHostRelativeDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libcuda.so.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(dir))
	t.Setenv(EnvVar, filepath.Base(dir))
	got, err := Resolve("libcuda.so.1")
	if err != nil || got != filepath.Join(dir, "libcuda.so.1") {
		t.Errorf("Resolve = %q, %v; want %s", got, err, filepath.Join(dir, "libcuda.so.1"))
	}
	t.Setenv(EnvVar, filepath.Join(dir, "libcuda.so.1")) // a file, not a folder
	if _, err := Resolve("libcuda.so.1"); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file as DIR: err = %v", err)
	}
}
