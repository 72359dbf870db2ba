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
	if err == nil || !strings.Contains(err.Error(), "the host (cpu backend)") || !strings.Contains(err.Error(), "GB are free") {
		t.Errorf("1 PiB: %v", err)
	}
}
