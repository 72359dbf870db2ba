package kernels

import (
	"strings"
	"testing"
)

func TestParseArch(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Arch
	}{
		{"90", Arch{90, false}}, {"sm_90", Arch{90, false}}, {"compute_90", Arch{90, false}}, {"9.0", Arch{90, false}},
		{"sm_90a", Arch{90, true}}, {"90a", Arch{90, true}}, {"9.0a", Arch{90, true}}, {"SM_80", Arch{80, false}},
		{"8.6", Arch{86, false}}, {"10.0", Arch{100, false}}, {"sm_120", Arch{120, false}}, {"12.0a", Arch{120, true}},
	} {
		got, err := ParseArch(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseArch(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "sm_", "hopper", "9", "9.", "9.00", "sm_9x", "-90", "+90", "a", "0.9", "sm_90b"} {
		if a, err := ParseArch(bad); err == nil || !strings.Contains(err.Error(), "sm_90, compute_90, 90 or 9.0") {
			t.Errorf("ParseArch(%q) = %+v, %v; want an error naming the forms", bad, a, err)
		}
	}
}

func TestArchSpecificNeedsItsNVRTC(t *testing.T) {
	for _, tc := range []struct {
		arch         Arch
		major, minor int
		emulated     string
		want         string // "" = accepted
	}{
		{Arch{90, false}, 11, 8, "", ""},
		{Arch{90, true}, 12, 0, "", ""},
		{Arch{90, true}, 11, 8, "", "sm_90a needs NVRTC 12.0 or newer; this one is 11.8"},
		{Arch{100, true}, 12, 6, "", "sm_100a needs NVRTC 12.8"},
		{Arch{80, true}, 12, 8, "", "sm_80a does not exist"},
		{Arch{90, true}, 1, 0, "stepbench emulated CUDA device", "the emulated NVRTC (stepbench emulated CUDA device) builds sm_80 and sm_90 only"},
	} {
		err := tc.arch.CheckSpecific(tc.major, tc.minor, tc.emulated)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on NVRTC %d.%d %q: %v, want %q", tc.arch, tc.major, tc.minor, tc.emulated, err, tc.want)
		}
	}
}
