package kernels

import (
	"fmt"
	"strconv"
	"strings"
)

// Arch is a compile target: a compute capability as a number (90 for
// sm_90, compute capability 9.0) and whether it is the architecture-specific
// variant (sm_90a), whose extra instructions (wgmma, setmaxnreg) run on
// that architecture alone.
type Arch struct {
	Number   int
	Specific bool
}

// String is NVRTC's and nvcc's name of the real architecture: "sm_90",
// "sm_90a".
func (a Arch) String() string {
	if a.Specific {
		return fmt.Sprintf("sm_%da", a.Number)
	}
	return fmt.Sprintf("sm_%d", a.Number)
}

// specificSince is the first CUDA release (major, minor) whose NVRTC
// compiles each architecture-specific target (LLVM's NVPTX table of PTX
// ISA versions: sm_90a needs PTX 8.0, CUDA 12.0; sm_100a PTX 8.6 and
// sm_120a PTX 8.7, CUDA 12.8).
var specificSince = map[int][2]int{90: {12, 0}, 100: {12, 8}, 120: {12, 8}}

// ParseArch reads an architecture as people write it: "90", "sm_90",
// "compute_90" (the virtual architecture: its real one is compiled, since
// ptxas reports only on cubins), "9.0" (a compute capability), and the
// architecture-specific "sm_90a", "90a", "9.0a".
func ParseArch(s string) (Arch, error) {
	text := strings.ToLower(strings.TrimSpace(s))
	for _, prefix := range []string{"sm_", "compute_"} {
		text = strings.TrimPrefix(text, prefix)
	}
	var a Arch
	if strings.HasSuffix(text, "a") {
		a.Specific, text = true, strings.TrimSuffix(text, "a")
	}
	bad := fmt.Errorf("%q is not an architecture: write sm_90, compute_90, 90 or 9.0 (sm_90a for the architecture-specific target)", s)
	if major, minor, dotted := strings.Cut(text, "."); dotted {
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		if err1 != nil || err2 != nil || len(minor) != 1 || ma < 1 {
			return Arch{}, bad
		}
		a.Number = 10*ma + mi
		return a, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 10 || text[0] == '+' {
		return Arch{}, bad
	}
	a.Number = n
	return a, nil
}

// CheckSpecific refuses an architecture-specific target a compiler cannot
// build: one no release has (sm_80a), or one newer than NVRTC major.minor.
// emulated names the emulated NVRTC, which builds sm_80 and sm_90 only.
func (a Arch) CheckSpecific(major, minor int, emulated string) error {
	if !a.Specific {
		return nil
	}
	since, ok := specificSince[a.Number]
	switch {
	case !ok:
		return fmt.Errorf("%s does not exist: the architecture-specific targets are sm_90a, sm_100a and sm_120a", a)
	case emulated != "":
		return fmt.Errorf("%s: the emulated NVRTC (%s) builds sm_80 and sm_90 only; leave out the a, or give --nvrtc a real NVRTC %d.%d or newer", a, emulated, since[0], since[1])
	case major < since[0] || major == since[0] && minor < since[1]:
		return fmt.Errorf("%s needs NVRTC %d.%d or newer; this one is %d.%d", a, since[0], since[1], major, minor)
	}
	return nil
}
