package kernels

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var (
	// An entry point: extern "C" __global__ void [__launch_bounds__(N)] name(
	entryRe = regexp.MustCompile(`extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(`)
	// A macro that defines an entry point per head dimension, its body
	// naming stem##D, and the lines that invoke it; or per head dimension
	// and group bound (stem##D##_g##G, invoked as NAME(128, 4)).
	entryMacroRe = regexp.MustCompile(`(?m)^#define (\w+)\(D\)((?:.*\\\n)+.*)`)
	stemRe       = regexp.MustCompile(`extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)##D\s*\(`)
	groupMacroRe = regexp.MustCompile(`(?m)^#define (\w+)\(D, G\)((?:.*\\\n)+.*)`)
	groupStemRe  = regexp.MustCompile(`extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)##D##_g##G\s*\(`)
	lineComment  = regexp.MustCompile(`//.*`)
)

// entryPoints lists the extern "C" kernels a source defines, macro-made
// ones (DEFINE_PREFILL(128) → attn_prefill_d128) included.
func entryPoints(src string) []string {
	src = lineComment.ReplaceAllString(src, "")
	var names []string
	for _, m := range entryRe.FindAllStringSubmatch(src, -1) {
		// A macro's stem##D( fails the match after the bounds, and the
		// regular expression then takes __launch_bounds__ for the name.
		if m[1] != "__launch_bounds__" {
			names = append(names, m[1])
		}
	}
	for _, m := range entryMacroRe.FindAllStringSubmatch(src, -1) {
		stem := stemRe.FindStringSubmatch(m[2])
		if stem == nil {
			continue
		}
		uses := regexp.MustCompile(`(?m)^`+m[1]+`\((\d+)\)`).FindAllStringSubmatch(src, -1)
		for _, u := range uses {
			names = append(names, stem[1]+u[1])
		}
	}
	for _, m := range groupMacroRe.FindAllStringSubmatch(src, -1) {
		stem := groupStemRe.FindStringSubmatch(m[2])
		if stem == nil {
			continue
		}
		uses := regexp.MustCompile(`(?m)^`+m[1]+`\((\d+), (\d+)\)`).FindAllStringSubmatch(src, -1)
		for _, u := range uses {
			names = append(names, stem[1]+u[1]+"_g"+u[2])
		}
	}
	sort.Strings(names)
	return names
}

func TestRegistryNamesEveryEntryPoint(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	registered := EntryPointSources()
	found := map[string]string{}
	for file, src := range srcs {
		if strings.Contains(src, "#include") {
			t.Errorf("%s includes a header; sources must be header-free for NVRTC 11.8", file)
		}
		for _, name := range entryPoints(src) {
			found[name] = file
			if registered[name] != file {
				t.Errorf("%s defines entry point %s, registered in %q: add it to Families", file, name, registered[name])
			}
		}
	}
	for name, file := range registered {
		if found[name] != file {
			t.Errorf("registered entry point %s is not defined in %s", name, file)
		}
	}
	if len(found) < 15 {
		t.Errorf("found only %d entry points: the source scan is broken (%v)", len(found), found)
	}
}

// TestEveryKernelHasItsTwin checks that each source but common.cu has its
// twin file in kernels/ref, of the same base name, declaring every twin
// function the registry names for it.
func TestEveryKernelHasItsTwin(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string][]string{}
	for file := range srcs {
		if file == CommonSource {
			continue
		}
		twin := filepath.Join("ref", strings.TrimSuffix(file, ".cu")+".go")
		f, err := parser.ParseFile(token.NewFileSet(), twin, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s has no twin file %s: %v", file, twin, err)
			continue
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				declared[file] = append(declared[file], fn.Name.Name)
			}
		}
	}
	for _, f := range Families() {
		if !slices.Contains(declared[f.Source], f.Twin) {
			t.Errorf("kernel %s: its twin ref.%s is not declared in ref/%s.go", f.Name, f.Twin, strings.TrimSuffix(f.Source, ".cu"))
		}
	}
}

// launchConstants are the Go constants the sources state too: the pattern's
// first group, read from the source, must equal the value.
var launchConstants = []struct {
	name, file, pattern string
	value               int
}{
	{"DecodeThreads", "attention.cu", `__launch_bounds__\((\d+)\) attn_decode_split_d##D`, DecodeThreads},
	{"PrefillThreads", "attention.cu", `#define PF_THREADS (\d+)`, PrefillThreads},
	{"PrefillQueryTile", "attention.cu", `#define PF_BQ (\d+)`, PrefillQueryTile},
	{"PrefillKeyTile", "attention.cu", `#define PF_BK (\d+)`, PrefillKeyTile},
	{"RopeMaxHeadDim/2 (cos)", "rope.cu", `__shared__ float cos_s\[(\d+)\]`, RopeMaxHeadDim / 2},
	{"RopeMaxHeadDim/2 (sin)", "rope.cu", `__shared__ float sin_s\[(\d+)\]`, RopeMaxHeadDim / 2},
	{"MaxReduceThreads/32 (norm)", "norm.cu", `__shared__ float scratch\[(\d+)\]`, MaxReduceThreads / 32},
	{"MaxReduceThreads/32 (argmax)", "sample.cu", `__shared__ float best_vals\[(\d+)\]`, MaxReduceThreads / 32},
	{"PrefillTCThreads", "attention.cu", `#define FA_THREADS (\d+)`, PrefillTCThreads},
	{"PrefillTCQueryTile", "attention.cu", `#define FA_BQ (\d+)`, PrefillTCQueryTile},
	{"PrefillTCKeyTile", "attention.cu", `#define FA_BK (\d+)`, PrefillTCKeyTile},
	{"Decode2Threads", "attention.cu", `#define DEC_THREADS (\d+)`, Decode2Threads},
	{"ArgmaxChunk", "sample.cu", `#define ARGMAX_CHUNK (\d+)`, ArgmaxChunk},
	{"Argmax2Threads", "sample.cu", `#define ARGMAX_THREADS (\d+)`, Argmax2Threads},
	{"FP8Threads", "fp8.cu", `#define FP8_THREADS (\d+)`, FP8Threads},
	{"FP8Partials", "fp8.cu", `#define FP8_PARTIALS (\d+)`, FP8Partials},
	{"PrefillV3Threads", "attention.cu", `#define FA3_THREADS (\d+)`, PrefillV3Threads},
	{"PrefillV3QueryTile", "attention.cu", `#define FA3_BQ (\d+)`, PrefillV3QueryTile},
	{"PrefillV3KeyTile", "attention.cu", `#define FA3_BK (\d+)`, PrefillV3KeyTile},
	{"Decode4Warps", "attention.cu", `#define DEC4_WARPS (\d+)`, Decode4Warps},
	{"Decode4SubKeys", "attention.cu", `#define DEC4_SUB (\d+)`, Decode4SubKeys},
	{"GemvThreads", "gemv.cu", `#define GEMV_THREADS (\d+)`, GemvThreads},
	{"GemvRows", "gemv.cu", `#define GEMV_ROWS (\d+)`, GemvRows},
	{"Gemv32Threads", "gemv.cu", `#define GEMV32_THREADS (\d+)`, Gemv32Threads},
	{"Gemv32Cols", "gemv.cu", `#define GEMV32_COLS (\d+)`, Gemv32Cols},
	{"GemvFP8Threads", "fp8.cu", `#define G8_THREADS (\d+)`, GemvFP8Threads},
	{"GemvFP8Rows", "fp8.cu", `#define G8_ROWS (\d+)`, GemvFP8Rows},
	{"GemvFP8MaxRows", "fp8.cu", `#define G8_MAX_ROWS (\d+)`, GemvFP8MaxRows},
	{"FP8ActStatic", "fp8.cu", `#define G8_ACT_STATIC (\d+)`, FP8ActStatic},
	{"FP8ActTensor", "fp8.cu", `#define G8_ACT_TENSOR (\d+)`, FP8ActTensor},
	{"FP8ActToken", "fp8.cu", `#define G8_ACT_TOKEN (\d+)`, FP8ActToken},
	{"Prefill4Threads", "paged_attention.cu", `#define PF4_THREADS (\d+)`, Prefill4Threads},
	{"Prefill4QueryTile", "paged_attention.cu", `#define PF4_BQ (\d+)`, Prefill4QueryTile},
	{"Prefill4KeyTile", "paged_attention.cu", `#define PF4_BK (\d+)`, Prefill4KeyTile},
	{"Decode6Warps", "paged_attention.cu", `#define DEC6_WARPS (\d+)`, Decode6Warps},
	{"Decode6SubKeys", "paged_attention.cu", `#define DEC6_SUB (\d+)`, Decode6SubKeys},
	{"RopeMaxHeadDim/2 (rope_kv_write3's and 4's cos)", "rope.cu", `void rope_paged\([^{]*\{[^}]*__shared__ float cos_s\[(\d+)\]`, RopeMaxHeadDim / 2},
	{"QKNormWarps", "norm.cu", `#define QK_NORM_WARPS (\d+)`, QKNormWarps},
	{"MoEThreads", "moe.cu", `#define MOE_THREADS (\d+)`, MoEThreads},
	{"MoERowsPerBlock (2 rows × 4 warps)", "moe.cu", `#define MOE_ROWS_PER_WARP (\d+)`, MoERowsPerBlock / (MoEThreads / 32)},
	{"MoEMaxExperts", "moe.cu", `#define MOE_MAX_EXPERTS (\d+)`, MoEMaxExperts},
	{"MoEAlignThreads", "moe.cu", `#define MOE_ALIGN_THREADS (\d+)`, MoEAlignThreads},
	{"MoEAlignMaxExperts", "moe.cu", `#define MOE_ALIGN_MAX_EXPERTS (\d+)`, MoEAlignMaxExperts},
	{"KVAdvanceThreads", "copy.cu", `__launch_bounds__\((\d+)\) kv_advance\(`, KVAdvanceThreads},
}

func TestLaunchConstantsMatchSources(t *testing.T) {
	srcs, err := Sources("")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range launchConstants {
		m := regexp.MustCompile(c.pattern).FindStringSubmatch(srcs[c.file])
		if m == nil {
			t.Errorf("%s: %s no longer states it (%s): update the test with the source", c.name, c.file, c.pattern)
			continue
		}
		if v, _ := strconv.Atoi(m[1]); v != c.value {
			t.Errorf("%s: %s says %d, the Go launch code %d", c.name, c.file, v, c.value)
		}
	}
	if !strings.Contains(srcs["attention.cu"], "__launch_bounds__(PF_THREADS) attn_prefill_d##D") {
		t.Error("attn_prefill's launch bounds are no longer PF_THREADS")
	}
	if ArgmaxThreads > MaxReduceThreads || RopeThreads > MaxReduceThreads || ArgmaxThreads%32 != 0 {
		t.Error("a block size exceeds what the block reductions serve or is not a multiple of 32")
	}
}

func TestEntryPoint(t *testing.T) {
	if got := EntryPoint("attn_prefill", 128); got != "attn_prefill_d128" {
		t.Errorf("EntryPoint = %q", got)
	}
	f := Family{Name: "k", HeadDims: []int{32, 64}}
	if got := f.EntryPoints(); !slices.Equal(got, []string{"k_d32", "k_d64"}) {
		t.Errorf("EntryPoints = %v", got)
	}
}
