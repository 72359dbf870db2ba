package kernels

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	ptxasEntryRe = regexp.MustCompile(`Compiling entry function '([^']+)'`)
	ptxasPropsRe = regexp.MustCompile(`Function properties for (\S+)`)
	// The stack-frame line is indented under "Function properties": NVRTC
	// prefixes it with "ptxas         .", nvcc with spaces only.
	ptxasSpillRe = regexp.MustCompile(`^(?:ptxas\s*\.)?\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	ptxasUsedRe  = regexp.MustCompile(`Used (\d+) registers((?:, [^,]+)*)`)
	// The parts after "Used N registers": "used 1 barriers" (CUDA 12+),
	// "128 bytes smem", "380 bytes cmem[0]", "64 bytes cumulative stack size".
	ptxasBarriersRe = regexp.MustCompile(`^used (\d+) barriers?$`)
	ptxasSmemRe     = regexp.MustCompile(`^(\d+) bytes smem$`)
)

// ParsePtxasReport reads ptxas -v lines from an NVRTC log, in the wording of
// CUDA 11.x:
//
//	ptxas info    : Compiling entry function 'add_rmsnorm' for 'sm_90'
//	ptxas info    : Function properties for add_rmsnorm
//	ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//	ptxas info    : Used 30 registers, 128 bytes smem, 380 bytes cmem[0]
//
// and of CUDA 12 and later, which adds the barrier count before smem:
//
//	ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]
//
// Entry functions and non-inlined device functions each get one entry (the
// latter without registers, which ptxas reports per entry only), in order of
// first appearance.
func ParsePtxasReport(log string) ([]KernelResources, error) {
	var report []KernelResources
	index := map[string]int{}
	at := func(name string) *KernelResources {
		i, ok := index[name]
		if !ok {
			i = len(report)
			index[name] = i
			report = append(report, KernelResources{Kernel: name})
		}
		return &report[i]
	}
	var entry, props string // the entry being compiled; the function whose properties follow
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := ptxasSpillRe.FindStringSubmatch(line); m != nil {
			name := props
			if name == "" {
				name = entry // older ptxas prints the line right after the entry
			}
			if name == "" {
				return nil, fmt.Errorf("ptxas report: spill line before any function: %q", line)
			}
			r := at(name)
			r.StackBytes = atoiOrZero(m[1])
			r.SpillStoreBytes = atoiOrZero(m[2])
			r.SpillLoadBytes = atoiOrZero(m[3])
			continue
		}
		if !strings.HasPrefix(line, "ptxas") {
			continue
		}
		if m := ptxasEntryRe.FindStringSubmatch(line); m != nil {
			entry, props = m[1], ""
			at(entry)
			continue
		}
		if m := ptxasPropsRe.FindStringSubmatch(line); m != nil {
			props = m[1]
			continue
		}
		if m := ptxasUsedRe.FindStringSubmatch(line); m != nil {
			if entry == "" {
				return nil, fmt.Errorf("ptxas report: register line before any entry function: %q", line)
			}
			r := at(entry)
			r.Registers = atoiOrZero(m[1])
			r.Barriers, r.SharedBytes = 0, 0
			for _, part := range strings.Split(strings.TrimPrefix(m[2], ", "), ", ") {
				part = strings.TrimSpace(part)
				if b := ptxasBarriersRe.FindStringSubmatch(part); b != nil {
					r.Barriers = atoiOrZero(b[1])
				} else if s := ptxasSmemRe.FindStringSubmatch(part); s != nil {
					r.SharedBytes = atoiOrZero(s[1])
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ptxas report: %w", err)
	}
	return report, nil
}

// atoiOrZero parses digits the regular expressions already matched ("" → 0).
func atoiOrZero(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return v
}
