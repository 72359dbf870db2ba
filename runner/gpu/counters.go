package gpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"stepbench/internal/input"
	"stepbench/runner"
)

// KernelCounters are the emulated device's access counters of one kernel
// (STEPBENCH_EMU_COUNTERS), summed over its launches: global loads, stores
// and cp.async reads in warp requests and 32-byte sectors, shared loads and
// stores in requests and wavefronts. They are counted from the addresses the
// emulated threads touch (cuda/emu/counters.cpp), never measured on a GPU.
type KernelCounters struct {
	Kernel                           string
	Launches                         int
	GlobalLoad, GlobalStore, CpAsync GlobalAccess
	SharedLoad, SharedStore          SharedAccess
}

// GlobalAccess is one direction of global memory traffic.
type GlobalAccess struct {
	Requests, Sectors float64
	Bytes             float64 // bytes the lanes asked for, of Sectors×32
}

// SectorsPerRequest is 16 for a warp's coalesced 16-byte accesses.
func (g GlobalAccess) SectorsPerRequest() float64 { return ratio(g.Sectors, g.Requests) }

// UsedPercent is the share of the sectors' bytes the lanes asked for.
func (g GlobalAccess) UsedPercent() float64 { return 100 * ratio(g.Bytes, 32*g.Sectors) }

// SharedAccess is one direction of shared-memory traffic.
type SharedAccess struct {
	Requests, Wavefronts, Conflicts float64
}

// ConflictsPerRequest is the extra wavefronts bank conflicts cost per request.
func (s SharedAccess) ConflictsPerRequest() float64 { return ratio(s.Conflicts, s.Requests) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// SectorBytes is every global sector's 32 bytes: what the kernel moves
// through L2 (no cache modelled, so an upper bound on DRAM bytes).
func (k KernelCounters) SectorBytes() float64 {
	return 32 * (k.GlobalLoad.Sectors + k.GlobalStore.Sectors + k.CpAsync.Sectors)
}

type counterLine struct {
	Kernel   string             `json:"kernel"`
	Emulated bool               `json:"emulated"`
	Metrics  map[string]float64 `json:"metrics"`
}

func (l counterLine) global(op string) GlobalAccess {
	m := l.Metrics
	g := GlobalAccess{Requests: m["l1tex__t_requests_pipe_lsu_mem_global_op_"+op+".sum"],
		Sectors: m["l1tex__t_sectors_pipe_lsu_mem_global_op_"+op+".sum"]}
	g.Bytes = m["smsp__sass_average_data_bytes_per_sector_mem_global_op_"+op+".pct"] / 100 * 32 * g.Sectors
	return g
}

func (l counterLine) shared(op string) SharedAccess {
	m := l.Metrics
	return SharedAccess{Requests: m["smsp__sass_inst_executed_op_shared_"+op+".sum"],
		Wavefronts: m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_"+op+".sum"],
		Conflicts:  m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_"+op+".sum"]}
}

// counterReader reads the lines the emulated device appends to the
// counters file, from where it last stopped.
type counterReader struct {
	path   string
	offset int64
}

// next reads the launches appended since the last call, summed per kernel
// in the order each kernel first appears.
func (r *counterReader) next() ([]KernelCounters, error) {
	f, err := input.Open(r.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read access counters: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(r.offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read access counters %s: %w", r.path, err)
	}
	var out []KernelCounters
	index := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		r.offset += int64(len(sc.Bytes())) + 1
		var l counterLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || !l.Emulated {
			return out, fmt.Errorf("access counters %s: a line that is not the emulated device's: %q", r.path, sc.Text())
		}
		i, ok := index[l.Kernel]
		if !ok {
			i = len(out)
			index[l.Kernel] = i
			out = append(out, KernelCounters{Kernel: l.Kernel})
		}
		k := &out[i]
		k.Launches++
		addGlobal(&k.GlobalLoad, l.global("ld"))
		addGlobal(&k.GlobalStore, l.global("st"))
		addGlobal(&k.CpAsync, l.global("ldgsts"))
		addShared(&k.SharedLoad, l.shared("ld"))
		addShared(&k.SharedStore, l.shared("st"))
	}
	return out, sc.Err()
}

func addGlobal(dst *GlobalAccess, g GlobalAccess) {
	dst.Requests += g.Requests
	dst.Sectors += g.Sectors
	dst.Bytes += g.Bytes
}

func addShared(dst *SharedAccess, s SharedAccess) {
	dst.Requests += s.Requests
	dst.Wavefronts += s.Wavefronts
	dst.Conflicts += s.Conflicts
}

// costBytes is the cost model's minimum bytes of the backend calls run
// makes (runner.CostOf), or 0 when it cannot say.
func costBytes(op string, run func(be runner.Backend, buf func(n int) runner.Buffer) error) float64 {
	c, err := runner.CostOf(op, func(be runner.Backend) error {
		return run(be, func(n int) runner.Buffer {
			b, _ := be.Alloc(runner.BF16, n)
			return b
		})
	})
	if err != nil {
		return 0
	}
	return c.Bytes
}

// KernelNames lists the kernels of counters, sorted, for messages.
func KernelNames(counters []KernelCounters) string {
	var names []string
	for _, k := range counters {
		names = append(names, k.Kernel)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// AddCounters is a and b summed (b's kernel name kept when a has none).
func AddCounters(a, b KernelCounters) KernelCounters {
	if a.Kernel == "" {
		a.Kernel = b.Kernel
	}
	a.Launches += b.Launches
	addGlobal(&a.GlobalLoad, b.GlobalLoad)
	addGlobal(&a.GlobalStore, b.GlobalStore)
	addGlobal(&a.CpAsync, b.CpAsync)
	addShared(&a.SharedLoad, b.SharedLoad)
	addShared(&a.SharedStore, b.SharedStore)
	return a
}
