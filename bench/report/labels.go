package report

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// RunLabels name reports drawn in one figure by what tells them apart:
// of the KV cache's dtype, the weights' quantization, the cache's layout,
// the kernel versions, the model and the GPU, those that differ between
// the reports, joined ("fp8_e4m3 cache", "fp8 weights, fp8_e4m3 cache").
// Reports that differ in none of them, or whose labels would still
// collide, are named by their files' base names (paths[i]).
func RunLabels(reports []Report, paths []string) []string {
	traits := make([][]string, len(reports))
	for i, r := range reports {
		traits[i] = runTraits(r)
	}
	labels := make([]string, len(reports))
	for k := range traits[0] {
		differs := false
		for i := range traits {
			differs = differs || traits[i][k] != traits[0][k]
		}
		if !differs {
			continue
		}
		for i := range traits {
			labels[i] = joinNonEmpty(labels[i], traits[i][k])
		}
	}
	seen := map[string]bool{}
	unique := true
	for _, l := range labels {
		unique = unique && l != "" && !seen[l]
		seen[l] = true
	}
	if !unique {
		for i, p := range paths {
			labels[i] = strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		}
	}
	return labels
}

// runTraits are a report's cache dtype, weights, layout, kernel versions,
// model and GPU, as a legend names them, in that order.
func runTraits(r Report) []string {
	cache, layout := "bf16 cache", "contiguous cache"
	if kv := r.Config.KV; kv != nil {
		if kv.DType != "" {
			cache = kv.DType + " cache"
		}
		layout = kv.Layout + " cache"
		if kv.Layout == "paged" {
			layout = fmt.Sprintf("paged cache (%d-token pages, %s)", kv.PageSize, kv.PageOrder)
		}
	}
	weights := "bf16 weights"
	if q := r.Config.Model.Quantization; q != nil {
		weights = strings.ToLower(q.Method) + " weights"
	}
	gpu := r.Environment.GPUName
	if gpu == "" {
		gpu = r.Environment.Backend
	}
	return []string{cache, weights, layout, "kernels " + r.Environment.KernelVersions, r.Config.Model.Name, gpu}
}

func joinNonEmpty(a, b string) string {
	parts := slices.DeleteFunc([]string{a, b}, func(s string) bool { return s == "" })
	return strings.Join(parts, ", ")
}
