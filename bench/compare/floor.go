package compare

import (
	"fmt"

	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// Run-to-run floors: how far the medians of two separate runs of the same
// kernels may lie apart without any change, per backend. Within one run the
// iterations are close to exchangeable; between processes every real
// machine adds drift the within-run intervals cannot see (clocks,
// temperature, placement, other load), so a verdict between two reports
// must clear the floor as well as 1. docs/design.md says how each was set.
const (
	// FloorGPU: a GPU run (cuda backend). A default until the device bundle
	// measures it: unlocked boost clocks and temperature move step times by
	// a few percent between runs.
	FloorGPU = 0.03
	// FloorEmulated: the emulated CUDA device, CPU threads emulating a GPU
	// under whatever else the machine runs. Six A/A processes on a shared
	// 2-core machine: medians up to 19% apart, the nearer interval edge up
	// to 8% from 1.
	FloorEmulated = 0.30
	// FloorCPU: the cpu backend, plain Go on the host's cores. Six A/A
	// processes: medians up to 25% apart, the nearer edge up to 16% from 1.
	FloorCPU = 0.30
)

// RunToRunFloor is the floor of runs made where env says, and the words
// that name it.
func RunToRunFloor(env report.Environment) (float64, string) {
	switch {
	case env.Emulated != "":
		return FloorEmulated, "emulated-device"
	case env.Backend == "cpu":
		return FloorCPU, "cpu-backend"
	}
	return FloorGPU, "GPU"
}

// floorOf is the larger floor of the two runs, or --threshold's when given.
func floorOf(oldEnv, newEnv report.Environment, opt Options) (float64, string) {
	if opt.ThresholdSet {
		return opt.Threshold, "--threshold"
	}
	f, why := RunToRunFloor(oldEnv)
	if g, whyNew := RunToRunFloor(newEnv); g > f {
		f, why = g, whyNew
	}
	return f, why
}

// hostBound says whether a run's times are the host CPU's: the cpu backend
// and the emulated device, whose times other processes' load inflates.
func hostBound(env report.Environment) bool { return env.Backend == "cpu" || env.Emulated != "" }

// maxOtherCPU caps the share of the host other processes are taken to
// have used: near 1 the inflation bound 1/(1-c) explodes.
const maxOtherCPU = 0.9

// QuietOtherCPU is the most of the host's CPU time other processes may have
// taken, in either run, for a host-bound shape to be judged SAME: at 10%
// the load alone can slow a run by at most 11% (1/(1 − 0.1)), a third of
// the cpu and emulated floors. Beyond it a run-to-run difference within
// the load's reach is INCONCLUSIVE: load hides a change as easily as it
// makes one.
const QuietOtherCPU = 0.10

// busiestShare is the larger share of the host's CPU time other processes
// took while either run timed the shape; false when neither run knows.
func busiestShare(o, n report.ShapeReport) (float64, bool) {
	worst, known := 0.0, false
	for _, c := range []*float64{o.HostOtherCPUFraction, n.HostOtherCPUFraction} {
		if c != nil {
			worst, known = max(worst, *c), true
		}
	}
	return worst, known
}

// loadBound is what other processes' CPU use c may have added to a
// host-bound shape's times: a run whose host others kept busy a share c of
// the time can be slowed by up to 1/(1-c) (a fully parallel process
// sharing the cores), so either run may be off by that factor for that
// reason alone.
func loadBound(c float64) float64 { return 1/(1-min(c, maxOtherCPU)) - 1 }

// loadRule is the verdict rule of one shape of two separate runs: opt's,
// and for host-bound runs (cpu backend, emulated device) without
// --threshold, FASTER and SLOWER beyond what the busier run's load could
// explain and no SAME on a busy host. It returns the note a busy shape's
// INCONCLUSIVE rows carry and the warning the comparison shows.
func loadRule(oldEnv, newEnv report.Environment, o, n report.ShapeReport, opt Options) (rule stats.Rule, note, warning string) {
	rule = opt.rule()
	c, known := busiestShare(o, n)
	if !known || !(hostBound(oldEnv) || hostBound(newEnv)) {
		return rule, "", ""
	}
	shares := fmt.Sprintf("other processes used %s (OLD) and %s (NEW) of the host's CPU time while shape %s was timed",
		shareText(o.HostOtherCPUFraction), shareText(n.HostOtherCPUFraction), o.Shape)
	load := loadBound(c)
	switch {
	case opt.ThresholdSet && c > QuietOtherCPU:
		return rule, "", fmt.Sprintf("%s, which alone can slow a cpu or emulated run up to %.2g×: --threshold %s is taken to cover it",
			shares, 1+load, stats.PercentText(opt.Threshold))
	case opt.ThresholdSet || load == 0:
		return rule, "", ""
	}
	rule.Load, rule.Busy = load, c > QuietOtherCPU
	if rule.Busy {
		note = fmt.Sprintf("host busy: %s (more than %s is busy), which alone can slow a cpu or emulated run up to %.2g×: "+
			"between separate runs that hides a change as easily as it makes one, so neither SAME nor a change within that reach can be told; "+
			"use stepbench ab (both arms paired in one process), rerun on a quiet host, or give your own floor with --threshold PCT",
			shares, stats.PercentText(QuietOtherCPU), 1+load)
		return rule, note, ""
	}
	lower, upper := rule.Bounds()
	return rule, "", fmt.Sprintf("%s, which alone can slow a cpu or emulated run up to %.2g×: FASTER needs the interval below %.2g, SLOWER above %.2g",
		shares, 1+load, lower, upper)
}

func shareText(c *float64) string {
	if c == nil {
		return "unknown"
	}
	return stats.PercentText(*c)
}

// floorHeader says the rule between separate runs and where to go below it.
func floorHeader(floor float64, source string) string {
	which := fmt.Sprintf("the run-to-run floor of %s runs; --threshold PCT sets another", source)
	if source == "--threshold" {
		which = "the run-to-run floor --threshold gave"
	}
	return fmt.Sprintf("separate runs: a verdict needs the ratio's interval beyond 1±%s (%s), "+
		"since drift between processes is in neither run's intervals; for smaller effects use stepbench ab, which interleaves both kernel sets in one process",
		stats.PercentText(floor), which)
}
