package runner

import (
	"strings"
	"testing"
)

func TestHostMemory(t *testing.T) {
	meminfo := "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\nHugePages_Total:       0\n"
	available, total, err := HostMemory([]byte(meminfo))
	if err != nil || available != 20000000*1024 || total != 24000000*1024 {
		t.Errorf("available %d total %d err %v", available, total, err)
	}
	if _, _, err := HostMemory([]byte("MemTotal: 5 kB\n")); err == nil {
		t.Error("no error without MemAvailable")
	}
}

// The cpu backend refuses a run that does not fit, with the numbers, as
// the cuda backend does.
func TestCPUCheckMemory(t *testing.T) {
	cpu := NewCPU()
	if err := cpu.CheckMemory(MemoryEstimate{WeightBytes: 1 << 20}); err != nil {
		t.Errorf("1 MiB does not fit: %v", err)
	}
	err := cpu.CheckMemory(MemoryEstimate{WeightBytes: 1 << 50})
	if err == nil || !strings.Contains(err.Error(), "the host (cpu backend; its weights are counted as bf16 and a float32 copy") || !strings.Contains(err.Error(), "GB are free") {
		t.Errorf("1 PiB: %v", err)
	}
}

func TestCheckFits(t *testing.T) {
	est := MemoryEstimate{WeightBytes: 16e9, KVCacheBytes: 4e9, ActivationBytes: 1e9}
	tests := []struct {
		name      string
		freeBytes uint64
		wantErr   string
	}{
		{"fits", 30e9, ""},
		{"exactly with headroom", 22e9, ""},
		{"short by the headroom", 21.5e9, "needs 22.00 GB"},
		{"far too small", 8e9, "only 8.00 GB of 80.00 GB are free"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckFits(est, tt.freeBytes, 80e9, 1e9, "H100")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "weights 16.00 GB") {
				t.Fatalf("error %v, want it to mention %q and the parts", err, tt.wantErr)
			}
		})
	}
}
