package compare

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"stepbench/bench/report"
)

// environmentWarnings lists the differences that make two runs hard to
// compare: GPU, driver and library versions, clocks, model and flags.
func environmentWarnings(oldReport, newReport report.Report) []string {
	var warnings []string
	o, n := oldReport.Environment, newReport.Environment
	for _, field := range []struct {
		name     string
		old, new string
	}{
		{"backend", o.Backend, n.Backend},
		{"GPU", o.GPUName, n.GPUName},
		{"GPU UUID", o.GPUUUID, n.GPUUUID},
		{"driver", o.DriverVersion, n.DriverVersion},
		{"CUDA", o.CUDAVersion, n.CUDAVersion},
		{"NVRTC", o.NVRTCVersion, n.NVRTCVersion},
		{"cuBLAS", o.CUBLASVersion, n.CUBLASVersion},
		{"SM clock MHz", formatNumber(o.SMClockMHz), formatNumber(n.SMClockMHz)},
		{"max SM clock MHz", formatNumber(o.MaxSMClockMHz), formatNumber(n.MaxSMClockMHz)},
		{"memory clock MHz", formatNumber(o.MemoryClockMHz), formatNumber(n.MemoryClockMHz)},
		{"power limit W", formatNumber(o.PowerLimitWatts), formatNumber(n.PowerLimitWatts)},
	} {
		if field.old != field.new {
			warnings = append(warnings, fmt.Sprintf("%s differs: OLD %q, NEW %q", field.name, field.old, field.new))
		}
	}
	oc, nc := oldReport.Config, newReport.Config
	if !reflect.DeepEqual(oc.Model, nc.Model) {
		warnings = append(warnings, fmt.Sprintf("model differs: OLD %q, NEW %q (or their configurations)", oc.Model.Name, nc.Model.Name))
	}
	if oc.LoadFormat != nc.LoadFormat {
		warnings = append(warnings, fmt.Sprintf("load format differs: OLD %q, NEW %q", oc.LoadFormat, nc.LoadFormat))
	}
	if diff := flagDifferences(oc.Flags, nc.Flags); len(diff) > 0 {
		warnings = append(warnings, "flags differ: "+strings.Join(diff, ", "))
	}
	return warnings
}

// outputOnlyFlags name files or labels, or say how many iterations to
// take, where a profiler's window goes or where nodes meet; they do not
// change what one iteration measures.
var outputOnlyFlags = []string{"json-out", "result-filename", "output-json", "run-name", "format", "logits-out", "plot",
	"num-iters", "target-noise", "max-seconds", "min-iters",
	"profile", "profile-phase", "profile-start-step", "profile-steps", "node-rank", "dist-init-addr", "dist-timeout"}

func flagDifferences(oldFlags, newFlags map[string]string) []string {
	names := map[string]bool{}
	for k := range oldFlags {
		names[k] = true
	}
	for k := range newFlags {
		names[k] = true
	}
	var diff []string
	for name := range names {
		if slices.Contains(outputOnlyFlags, name) {
			continue
		}
		o, inOld := oldFlags[name]
		n, inNew := newFlags[name]
		if o != n || inOld != inNew {
			diff = append(diff, fmt.Sprintf("--%s OLD %q NEW %q", name, o, n))
		}
	}
	sort.Strings(diff)
	return diff
}

func formatNumber(x float64) string {
	if x == 0 {
		return ""
	}
	return fmt.Sprintf("%g", x)
}
