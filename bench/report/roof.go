package report

import (
	"fmt"
	"slices"

	"stepbench/bench/roofline"
)

// Roof choices (run's and kernel's --gpu) besides a preset's name.
const (
	RoofAuto = "auto"
	RoofNone = "none"
)

// ChooseRoof picks a run's one roof, before anything is measured, from what
// env says of its GPU and choice (--gpu):
//   - RoofNone: no roof (no floors, no attainment);
//   - a preset's name: that preset's datasheet roof, as asked;
//   - RoofAuto: a cached calibration of this GPU (measured, from the cache
//     in calibrationDir, "" for the user cache directory), else the roof
//     its SM count and maximum clocks give (device), else the datasheet of
//     the preset matching its name; no roof without a GPU.
//
// known lists every roof env allows, the chosen one first, for the report.
//
// Only an FP8 model's roofs keep their FP8 ceilings (fp8): nothing of a
// bf16 run runs at that rate.
func ChooseRoof(env Environment, choice, calibrationDir string, fp8 bool) (roof *roofline.Roof, known []roofline.Roof, err error) {
	roof, known, err = chooseRoof(env, choice, calibrationDir)
	if err != nil || fp8 {
		return roof, known, err
	}
	for i := range known {
		known[i] = known[i].WithoutFP8()
	}
	if len(known) > 0 && roof != nil {
		roof = &known[0]
	}
	return roof, known, nil
}

func chooseRoof(env Environment, choice, calibrationDir string) (roof *roofline.Roof, known []roofline.Roof, err error) {
	var preset *roofline.Preset
	switch choice {
	case RoofNone, RoofAuto:
		if p, ok := roofline.PresetForDevice(env.GPUName); ok && env.GPUName != "" {
			preset = &p
		}
	default:
		p, err := roofline.LookupPreset(choice)
		if err != nil {
			return nil, nil, err
		}
		preset = &p
	}
	known = knownRoofs(env, preset, calibrationDir)
	switch choice {
	case RoofNone:
		return nil, known, nil
	case RoofAuto:
		if len(known) == 0 {
			return nil, nil, nil
		}
		return &known[0], known, nil
	}
	i := slices.IndexFunc(known, func(r roofline.Roof) bool { return r.Source == roofline.SourceDatasheet })
	chosen := known[i]
	known = append([]roofline.Roof{chosen}, slices.Delete(known, i, i+1)...)
	return &known[0], known, nil
}

// knownRoofs are the roofs env allows, in the order a run prefers them:
// measured, device, datasheet.
func knownRoofs(env Environment, preset *roofline.Preset, calibrationDir string) []roofline.Roof {
	var roofs []roofline.Roof
	if env.GPUUUID != "" {
		if c, err := roofline.LoadCalibration(calibrationDir, env.GPUUUID); err == nil {
			roofs = append(roofs, c.Roof())
		}
	}
	if c, err := deviceCeilings(env); err == nil {
		roofs = append(roofs, c.Roof())
	}
	if preset != nil {
		roofs = append(roofs, preset.Roof())
		// Neither a calibration nor the device attributes measure the
		// link: every roof of this GPU takes its datasheet's.
		for i := range roofs {
			roofs[i].LinkBytesPerSec = preset.LinkBytesPerSec
		}
	}
	return roofs
}

// deviceCeilings are the roofs of env's GPU at its maximum SM clock (what
// it may reach, so that throttling shows as lower attainment, not a lower
// roof) and its maximum memory clock.
func deviceCeilings(env Environment) (roofline.DeviceCeilings, error) {
	var major, minor int
	if _, err := fmt.Sscanf(env.ComputeCapability, "%d.%d", &major, &minor); err != nil {
		return roofline.DeviceCeilings{}, fmt.Errorf("compute capability %q: %w", env.ComputeCapability, err)
	}
	memClock := env.MaxMemoryClockMHz
	if memClock == 0 {
		memClock = env.MemoryClockMHz
	}
	c, err := roofline.ComputeDeviceCeilings(env.SMCount, major, minor, env.MaxSMClockMHz, memClock, env.MemoryBusWidthBits)
	if err == nil {
		c.ClockSourceDescribe = "maximum SM and memory clocks"
	}
	return c, err
}

// RoofLine names the run's roof for every text output: "roof: measured
// (...): 989.4 TFLOP/s, ..." or that there is none.
func RoofLine(roof *roofline.Roof) string {
	if roof == nil {
		return "no roof: --gpu PRESET gives a datasheet's floors and attainment"
	}
	return roof.Label()
}
