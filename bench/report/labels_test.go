package report

import (
	"slices"
	"testing"

	"stepbench/runner"
)

func TestRunLabelsNameWhatDiffers(t *testing.T) {
	withKV := func(dtype string) Report {
		r := Report{Config: RunConfig{Model: runner.Config{Name: "llama-tiny"},
			KV: &KVCache{Layout: "paged", PageSize: 16, PageOrder: "sequential", DType: dtype}}}
		r.Environment.Backend = "cuda"
		return r
	}
	fp8Weights := withKV("fp8_e4m3")
	fp8Weights.Config.Model.Quantization = &runner.Quantization{Method: "fp8"}
	otherGPU := withKV("")
	otherGPU.Environment.GPUName = "NVIDIA H200"
	for _, tc := range []struct {
		name    string
		reports []Report
		want    []string
	}{
		{"cache dtype", []Report{withKV(""), withKV("fp8_e4m3")}, []string{"bf16 cache", "fp8_e4m3 cache"}},
		{"cache and weights", []Report{withKV(""), fp8Weights}, []string{"bf16 cache, bf16 weights", "fp8_e4m3 cache, fp8 weights"}},
		{"gpu", []Report{withKV(""), otherGPU}, []string{"cuda", "NVIDIA H200"}},
		{"nothing differs: file names", []Report{withKV(""), withKV("")}, []string{"a", "b"}},
		{"labels collide: file names", []Report{withKV(""), withKV("fp8_e4m3"), withKV("")}, []string{"a", "b", "c"}},
	} {
		paths := []string{"/x/a.json", "b.json", "c.json"}[:len(tc.reports)]
		if got := RunLabels(tc.reports, paths); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
