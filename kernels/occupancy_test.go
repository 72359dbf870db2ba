package kernels

import "testing"

func TestOccupancyOf(t *testing.T) {
	sm90, _ := LimitsOf(90)
	sm86, _ := LimitsOf(86)
	for _, c := range []struct {
		name                       string
		l                          ArchLimits
		threads, registers, shared int
		blocks                     int
		percent                    float64
		by                         string
	}{
		// 64 registers × 32 lanes = 2048 per warp: 32 warps, 8 blocks of 4.
		{"registers", sm90, 128, 64, 0, 8, 50, "registers"},
		// 48 KB + 1 KB reserved: 4 blocks in 228 KB.
		{"shared memory", sm90, 128, 32, 48 * 1024, 4, 25, "shared memory"},
		// 1024 threads = 32 warps: sm_86 holds 48 warps, one block.
		{"warps", sm86, 1024, 0, 0, 1, 200.0 / 3, "warps"},
		// 32 threads, nothing else: the block limit.
		{"blocks", sm90, 32, 16, 0, 32, 50, "blocks"},
		// 33 registers round up to 40 per lane (1280 per warp).
		{"granularity", sm90, 256, 33, 0, 6, 75, "registers"},
	} {
		o := OccupancyOf(c.l, c.threads, c.registers, c.shared)
		if o.BlocksPerSM != c.blocks || o.Percent != c.percent || o.LimitedBy != c.by {
			t.Errorf("%s: %+v, want %d blocks, %.4g%%, %s", c.name, o, c.blocks, c.percent, c.by)
		}
	}
}

// Every registered entry point has a launch the table can show.
func TestEveryEntryPointHasALaunch(t *testing.T) {
	for entry := range EntryPointSources() {
		l, ok := EntryPointLaunch(entry)
		if !ok || l.Threads < 32 || l.Threads%32 != 0 {
			t.Errorf("%s: launch %+v, %v", entry, l, ok)
		}
	}
	if _, ok := EntryPointLaunch("attn_prefill_d128x"); ok {
		t.Error("a name that only starts like an entry point has a launch")
	}
}
