package kernels

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// kernelDefinition finds an extern "C" entry point's definition: its name
// (for a kernel defined by a macro per head dimension, the stem before _d##D).
var kernelDefinition = regexp.MustCompile(`extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)`)

// waitingKernels are the families whose entry points' bodies, in the
// embedded sources, call SB_PDL_WAIT() (the body from the definition's
// first brace to its match).
func waitingKernels(t *testing.T) (waits, all []string) {
	t.Helper()
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range srcs {
		for _, m := range kernelDefinition.FindAllStringSubmatchIndex(text, -1) {
			family := strings.TrimSuffix(text[m[2]:m[3]], "_d")
			open := strings.IndexByte(text[m[1]:], '{') + m[1]
			depth, end := 0, open
			for ; end < len(text); end++ {
				if text[end] == '{' {
					depth++
				} else if text[end] == '}' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			all = append(all, name+":"+family)
			if strings.Contains(text[open:end], "SB_PDL_WAIT()") {
				waits = append(waits, family)
			}
		}
	}
	sort.Strings(waits)
	return waits, all
}

// TestPDLOptInMatchesTheSources: the families launch=2 launches with
// programmatic stream serialization (Family.PDL) are exactly those whose
// entry points call SB_PDL_WAIT, and every source's entry point is a family.
func TestPDLOptInMatchesTheSources(t *testing.T) {
	waits, all := waitingKernels(t)
	var listed, families []string
	for _, f := range Families() {
		families = append(families, f.Source+":"+f.Name)
		if f.PDL {
			listed = append(listed, f.Name)
		}
	}
	sort.Strings(listed)
	if !slices.Equal(waits, listed) {
		t.Errorf("entry points calling SB_PDL_WAIT: %v\nfamilies with PDL: %v", waits, listed)
	}
	for _, k := range all {
		if !slices.Contains(families, k) {
			t.Errorf("the sources define %s, which no family lists", k)
		}
	}
	if len(all) < len(Families())-1 {
		t.Errorf("found %d kernel definitions for %d families: the pattern misses some", len(all), len(Families()))
	}
}

// TestPDLEntryPointsOnlyEmbedded: an edited source's kernels, or every
// kernel under an edited common.cu, leave the opt-in set; gemv.cu's
// kernels are not in it (they do not wait yet).
func TestPDLEntryPointsOnlyEmbedded(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	all := PDLEntryPoints(srcs)
	for _, e := range []string{"add_rmsnorm", "silu_mul", "rope_kv_write2", "attn_decode4_d128_g4", "argmax2_final"} {
		if !all[e] {
			t.Errorf("PDLEntryPoints lacks %s", e)
		}
	}
	if all["gemv_t8"] || all["gemv_silu_t32"] {
		t.Errorf("PDLEntryPoints has gemv.cu's kernels, which do not call SB_PDL_WAIT")
	}
	edited := map[string]string{}
	for k, v := range srcs {
		edited[k] = v
	}
	edited["norm.cu"] += "\n// a user's edit\n"
	if got := PDLEntryPoints(edited); got["add_rmsnorm"] || !got["silu_mul"] {
		t.Errorf("with norm.cu edited: add_rmsnorm %v (want false), silu_mul %v (want true)", got["add_rmsnorm"], got["silu_mul"])
	}
	edited["common.cu"] += "\n"
	if got := PDLEntryPoints(edited); len(got) != 0 {
		t.Errorf("with common.cu edited: %d entry points opt in, want none", len(got))
	}
}
