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

// deviceFunction finds a __device__ function's definition: its name, just
// before the parameter list whose body follows.
var deviceFunction = regexp.MustCompile(`__device__[^;{()]*?\b(\w+)\s*\(`)

// body is the text of the braces opening at or after from, to their match.
func body(text string, from int) string {
	open := strings.IndexByte(text[from:], '{') + from
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
	return text[open:end]
}

// waitingFunctions are the __device__ functions of text that call
// SB_PDL_WAIT(), directly or through another such function (gemv.cu's
// kernels wait inside gemv_inputs_ready, after their first weight loads).
func waitingFunctions(text string) []string {
	bodies := map[string]string{}
	for _, m := range deviceFunction.FindAllStringSubmatchIndex(text, -1) {
		if semi := strings.IndexAny(text[m[1]:], ";{"); semi >= 0 && text[m[1]+semi] == '{' {
			bodies[text[m[2]:m[3]]] += body(text, m[1])
		}
	}
	var waits []string
	for changed := true; changed; {
		changed = false
		for name, b := range bodies {
			if !slices.Contains(waits, name) && callsWait(b, waits) {
				waits, changed = append(waits, name), true
			}
		}
	}
	return waits
}

// callsWait reports whether a body calls SB_PDL_WAIT() or one of funcs.
func callsWait(body string, funcs []string) bool {
	if strings.Contains(body, "SB_PDL_WAIT()") {
		return true
	}
	for _, f := range funcs {
		if regexp.MustCompile(`\b` + f + `\s*(<[^;(]*>)?\s*\(`).MatchString(body) {
			return true
		}
	}
	return false
}

// waitingKernels are the families whose entry points' bodies, in the
// embedded sources, call SB_PDL_WAIT() (the body from the definition's
// first brace to its match), directly or through their source's
// waitingFunctions.
func waitingKernels(t *testing.T) (waits, all []string) {
	t.Helper()
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range srcs {
		helpers := waitingFunctions(text)
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
			if callsWait(text[open:end], helpers) {
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
// kernels are in it (they wait in gemv_inputs_ready).
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
	if !all["gemv_t8"] || !all["gemv_silu_t32"] || !all["gemv_norm_t16"] {
		t.Errorf("PDLEntryPoints lacks gemv.cu's kernels, which wait in gemv_inputs_ready")
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
