package compare

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"

	"stepbench/bench"
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
		{"clocks locked", formatBool(o.ClocksLocked), formatBool(n.ClocksLocked)},
		{"emulated device", o.Emulated, n.Emulated},
	} {
		if field.old != field.new {
			warnings = append(warnings, fmt.Sprintf("%s differs: OLD %q, NEW %q", field.name, field.old, field.new))
		}
	}
	oc, nc := oldReport.Config, newReport.Config
	if oq, nq := oc.Model.Quantization.String(), nc.Model.Quantization.String(); oq != nq {
		warnings = append(warnings, fmt.Sprintf("quantization differs: OLD %q, NEW %q", oq, nq))
	}
	om, nm := oc.Model, nc.Model
	om.Quantization, nm.Quantization = nil, nil
	if !reflect.DeepEqual(om, nm) {
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
// take, where a profiler's window goes or where nodes meet, or are vLLM's
// and SGLang's flags accepted only where they change nothing measured;
// they do not change what one iteration measures.
var outputOnlyFlags = []string{"json-out", "result-filename", "output-json", "run-name", "format", "logits-out", "plot",
	"num-iters", "target-noise", "max-seconds", "min-iters",
	"profile", "profile-phase", "profile-start-step", "profile-steps", "node-rank", "dist-init-addr", "dist-timeout",
	"max-model-len", "trust-remote-code", "cuda-graph-max-bs", "n", "gpu-memory-utilization", "mem-fraction-static"}

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

// comparable refuses what no verdict can join: an emulated run against a
// GPU run (the emulator's times are the CPU's), two runs of different KV
// cache layouts, page sizes, page orders or batch lengths (kvComparable),
// and a report that lists a shape twice (which of the two would the
// verdict be about?).
func comparable(oldReport, newReport report.Report) error {
	oe, ne := oldReport.Environment, newReport.Environment
	if (oe.Emulated != "") != (ne.Emulated != "") && oe.Backend == "cuda" && ne.Backend == "cuda" {
		which := "OLD"
		if ne.Emulated != "" {
			which = "NEW"
		}
		return fmt.Errorf("%w: %s was made on the emulated CUDA device and the other on a GPU: emulated times are the CPU's, never a GPU's", ErrIncomparable, which)
	}
	if err := kvComparable(oldReport, newReport); err != nil {
		return err
	}
	for _, r := range []struct {
		run    string
		shapes []report.ShapeReport
	}{{"OLD", oldReport.Shapes}, {"NEW", newReport.Shapes}} {
		seen := map[bench.Shape]bool{}
		for _, s := range r.shapes {
			if seen[s.Shape] {
				return fmt.Errorf("%w: %s lists shape %s twice", ErrIncomparable, r.run, s.Shape)
			}
			seen[s.Shape] = true
		}
	}
	return nil
}

// verificationHeader says which run timed kernels it did not check.
func verificationHeader(oldReport, newReport report.Report) []string {
	var lines []string
	for _, r := range []struct {
		run string
		rep report.Report
	}{{"OLD", oldReport}, {"NEW", newReport}} {
		if r.rep.Verified != nil && !*r.rep.Verified {
			what := "kernels"
			if v := r.rep.Verification; v != nil && v.Kernels != "" {
				what = v.Kernels
			}
			lines = append(lines, fmt.Sprintf("UNVERIFIED: %s timed %s without checking them against their Go twins (--no-verify): its times may be of a wrong kernel", r.run, what))
		}
	}
	return lines
}

// Telemetry differences beyond these are warned about: a clock that moved
// changes step times by as much; power follows clocks and load.
const (
	clockDiffWarn = 0.01
	powerDiffWarn = 0.05
)

// telemetryWarnings compare what NVML measured of the shape in both runs:
// the median SM clock and power, and throttled readings.
func telemetryWarnings(o, n report.ShapeReport) []string {
	var w []string
	differs := func(a, b, rel float64) bool { return a > 0 && b > 0 && math.Abs(b-a) > rel*a }
	oc, nc := firstPositive(o.MedianSMClockMHz, o.MedianSMClockMHzMin), firstPositive(n.MedianSMClockMHz, n.MedianSMClockMHzMin)
	if differs(oc, nc, clockDiffWarn) {
		w = append(w, fmt.Sprintf("shape %s: median SM clock differs: OLD %g MHz, NEW %g MHz (%+.1f%%)", o.Shape, oc, nc, 100*(nc/oc-1)))
	}
	op, np := firstPositive(o.MedianPowerWatts, o.MedianPowerWattsSum), firstPositive(n.MedianPowerWatts, n.MedianPowerWattsSum)
	if differs(op, np, powerDiffWarn) {
		w = append(w, fmt.Sprintf("shape %s: median power differs: OLD %.0f W, NEW %.0f W (%+.1f%%)", o.Shape, op, np, 100*(np/op-1)))
	}
	if o.ThrottledSamples > 0 || n.ThrottledSamples > 0 {
		w = append(w, fmt.Sprintf("shape %s: throttled samples: OLD %d, NEW %d", o.Shape, o.ThrottledSamples, n.ThrottledSamples))
	}
	return w
}

func firstPositive(xs ...float64) float64 {
	for _, x := range xs {
		if x > 0 {
			return x
		}
	}
	return 0
}

func formatBool(b *bool) string {
	if b == nil {
		return ""
	}
	return fmt.Sprint(*b)
}
