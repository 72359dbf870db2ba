package kernels

import (
	"slices"
	"testing"
)

// ptxasReportTests are NVRTC logs in the wording of CUDA 11.x and 12+ and
// what ParsePtxasReport reads from them.
var ptxasReportTests = []struct {
	name string
	log  string
	want []KernelResources
}{
	{
		name: "empty",
		log:  "",
		want: nil,
	},
	{
		name: "entry with smem and cmem (NVRTC 11.8, sm_90)",
		log: "ptxas info    : 0 bytes gmem\n" +
			"ptxas info    : Compiling entry function 'add_rmsnorm' for 'sm_90'\n" +
			"ptxas info    : Function properties for add_rmsnorm\n" +
			"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
			"ptxas info    : Used 30 registers, 128 bytes smem, 380 bytes cmem[0]\n",
		want: []KernelResources{{Kernel: "add_rmsnorm", Registers: 30, SharedBytes: 128}},
	},
	{
		name: "spills and a non-inlined device function",
		log: "ptxas info    : Compiling entry function 'attn_decode_split_d128' for 'sm_90'\n" +
			"ptxas info    : Function properties for attn_decode_split_d128\n" +
			"ptxas         .     8 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n" +
			"ptxas info    : Used 255 registers\n" +
			"ptxas info    : Function properties for _Z17attn_decode_splitILi128EEvPf\n" +
			"ptxas         .     0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n" +
			"ptxas info    : Compiling entry function 'embed' for 'sm_90'\n" +
			"ptxas info    : Function properties for embed\n" +
			"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
			"ptxas info    : Used 16 registers, 380 bytes cmem[0]\n",
		want: []KernelResources{
			{Kernel: "attn_decode_split_d128", Registers: 255, SpillStoreBytes: 16, SpillLoadBytes: 12, StackBytes: 8},
			{Kernel: "_Z17attn_decode_splitILi128EEvPf", SpillStoreBytes: 4, SpillLoadBytes: 4},
			{Kernel: "embed", Registers: 16},
		},
	},
	{
		name: "CUDA 12+ wording: barriers before smem, compile time",
		log: "ptxas info    : 0 bytes gmem\n" +
			"ptxas info    : Compiling entry function 'add_rmsnorm' for 'sm_90'\n" +
			"ptxas info    : Function properties for add_rmsnorm\n" +
			"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
			"ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]\n" +
			"ptxas info    : Compile time = 23.759 ms\n" +
			"ptxas info    : Compiling entry function 'embed' for 'sm_90'\n" +
			"ptxas info    : Function properties for embed\n" +
			"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
			"ptxas info    : Used 16 registers, used 0 barriers, 380 bytes cmem[0]\n",
		want: []KernelResources{
			{Kernel: "add_rmsnorm", Registers: 30, SharedBytes: 128, Barriers: 1},
			{Kernel: "embed", Registers: 16},
		},
	},
	{
		name: "CUDA 12.8+ on sm_90: no cmem, cumulative stack size",
		log: "ptxas info    : Compiling entry function 'attn_prefill_d128' for 'sm_90'\n" +
			"ptxas info    : Function properties for attn_prefill_d128\n" +
			"ptxas         .     64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
			"ptxas info    : Used 96 registers, used 2 barriers, 64 bytes cumulative stack size, 4096 bytes smem\n",
		want: []KernelResources{{Kernel: "attn_prefill_d128", Registers: 96, SharedBytes: 4096, Barriers: 2, StackBytes: 64}},
	},
	{
		name: "nvcc style: stack-frame line without the ptxas prefix",
		log: "ptxas info    : Compiling entry function 'k' for 'sm_61'\n" +
			"ptxas info    : Function properties for k\n" +
			"    32 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n" +
			"ptxas info    : Used 40 registers, 32768 bytes smem, 400 bytes cmem[0], 12 bytes cmem[2]\n",
		want: []KernelResources{{Kernel: "k", Registers: 40, SharedBytes: 32768, SpillStoreBytes: 8, SpillLoadBytes: 4, StackBytes: 32}},
	},
	{
		name: "non-ptxas lines are ignored",
		log:  "norm.cu(3): warning: variable \"x\" was declared but never referenced\nUsed 99 registers\n",
		want: nil,
	},
}

func TestParsePtxasReport(t *testing.T) {
	for _, tt := range ptxasReportTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePtxasReport(tt.log)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParsePtxasReport = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParsePtxasReportRejectsOrphanLines(t *testing.T) {
	for _, log := range []string{
		"ptxas info    : Used 30 registers\n",
		"ptxas         .     0 bytes stack frame, 4 bytes spill stores, 0 bytes spill loads\n",
	} {
		if _, err := ParsePtxasReport(log); err == nil {
			t.Errorf("ParsePtxasReport(%q): want an error", log)
		}
	}
}

func FuzzParsePtxasReport(f *testing.F) {
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n" +
		"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 22 registers, 256 bytes smem\n")
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n" +
		"ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n" +
		"ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 380 bytes cmem[0]\nptxas info    : Compile time = 1.5 ms\n")
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\n" +
		"ptxas info    : Used 96 registers, used 1 barriers, 64 bytes cumulative stack size, 4096 bytes smem\n")
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_61'\n    32 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n")
	f.Add("ptxas info    : Used 99999999999999999999999 registers\n")
	f.Fuzz(func(t *testing.T, log string) {
		report, err := ParsePtxasReport(log)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, r := range report {
			if seen[r.Kernel] {
				t.Errorf("function %q reported twice", r.Kernel)
			}
			seen[r.Kernel] = true
			if r.Registers < 0 || r.SpillStoreBytes < 0 || r.SpillLoadBytes < 0 || r.SharedBytes < 0 || r.Barriers < 0 {
				t.Errorf("negative resource in %+v", r)
			}
		}
	})
}
