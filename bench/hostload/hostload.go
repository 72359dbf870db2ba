// Package hostload measures how much of the host's CPU time other processes
// took while a shape was timed: on the cpu backend and the emulated device
// the "device" is the host's cores, so another process's load inflates
// every time, and two runs made under different loads differ for that
// reason alone (compare gives no verdict within what the load can explain).
package hostload

import (
	"os"
	"strconv"
	"strings"
)

// Sample is the host's CPU time counters at one moment, in clock ticks:
// all CPUs' total and busy time, and this process's own CPU time.
type Sample struct {
	total, busy, self uint64
	ok                bool
}

// Now reads /proc/stat and /proc/self/stat; on a system without them the
// sample is marked unknown (OtherFraction then says so).
func Now() Sample {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Sample{}
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return Sample{}
	}
	var s Sample
	if s.total, s.busy, err = parseCPULine(string(stat)); err != nil {
		return Sample{}
	}
	if s.self, err = parseSelf(string(self)); err != nil {
		return Sample{}
	}
	s.ok = true
	return s
}

// parseCPULine reads the first line of /proc/stat, "cpu user nice system
// idle iowait irq softirq steal ...": idle and iowait are not busy; steal
// (time a hypervisor gave another guest) is.
func parseCPULine(stat string) (total, busy uint64, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, strconv.ErrSyntax
	}
	var idle uint64
	for i, f := range fields[1:] {
		if i >= 8 { // guest times are already in user and nice
			break
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return total, total - idle, nil
}

// parseSelf reads utime + stime (fields 14 and 15) of /proc/self/stat,
// after the parenthesised command name, which may hold spaces.
func parseSelf(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, strconv.ErrSyntax
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, strconv.ErrSyntax
	}
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return utime + stime, nil
}

// OtherFraction is the share of all CPUs' time between a and b that other
// processes kept busy (0: the host was ours; 0.5 on 2 CPUs: one core's
// worth), and false when it is unknown (no samples, too short to tell).
func OtherFraction(a, b Sample) (float64, bool) {
	if !a.ok || !b.ok || b.total <= a.total {
		return 0, false
	}
	total := float64(b.total - a.total)
	other := float64(b.busy-a.busy) - float64(b.self-a.self)
	if total < 10 { // under ~0.1 s of one CPU: clock ticks too coarse
		return 0, false
	}
	f := other / total
	return min(max(f, 0), 1), true
}
