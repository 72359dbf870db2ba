package compare

import (
	"fmt"

	"stepbench/bench/report"
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

// floorHeader says the rule between separate runs and where to go below it.
func floorHeader(floor float64, source string) string {
	which := fmt.Sprintf("the run-to-run floor of %s runs; --threshold PCT sets another", source)
	if source == "--threshold" {
		which = "the run-to-run floor --threshold gave"
	}
	return fmt.Sprintf("separate runs: a verdict needs the ratio's interval beyond 1±%g%% (%s), "+
		"since drift between processes is in neither run's intervals; for smaller effects use stepbench ab, which interleaves both kernel sets in one process",
		100*floor, which)
}
