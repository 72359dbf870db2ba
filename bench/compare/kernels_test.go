package compare

import (
	"bytes"
	"strings"
	"testing"

	"stepbench/bench/kernelbench"
	"stepbench/bench/report"
	"stepbench/bench/stats"
)

// kernelSamples are n samples around base with a small deterministic spread.
func kernelSamples(n int, base float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = base * (1 + 0.002*float64(i%5))
	}
	return out
}

func TestKernelReportsAndPaired(t *testing.T) {
	gpu := report.Environment{Backend: "cuda", GPUName: "H100"}
	old := report.Report{Schema: report.Schema, Environment: gpu, KernelResults: []kernelbench.Result{
		{Op: "attention", ShapeLabel: "batch=1/seq=1/pos=1024", DeviceSeconds: kernelSamples(30, 10e-6)},
		{Op: "attention", ShapeLabel: "batch=1/seq=1024/pos=0", DeviceSeconds: kernelSamples(30, 100e-6)}}}
	faster := old
	faster.KernelResults = []kernelbench.Result{
		{Op: "attention", ShapeLabel: "batch=1/seq=1/pos=1024", DeviceSeconds: kernelSamples(30, 8e-6)},
		{Op: "attention", ShapeLabel: "batch=4/seq=1/pos=1024", DeviceSeconds: kernelSamples(30, 8e-6)}}
	res, err := Reports(old, faster, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || res.Rows[0].Verdict != stats.VerdictFaster || res.Rows[0].Op != "attention" || !res.Kernels ||
		!strings.Contains(strings.Join(res.Warnings, "\n"), "batch=1/seq=1024/pos=0 is only in OLD") {
		t.Fatalf("Reports of kernel reports: %+v", res)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, res); err != nil || !strings.Contains(md.String(), "| attention | batch=1/seq=1/pos=1024 | kernel_device | 30/30 |") ||
		!strings.Contains(md.String(), "one value per cold launch") {
		t.Errorf("markdown of kernel rows (%v):\n%s", err, md.String())
	}
	paired, err := KernelPaired(old.KernelResults[:1], faster.KernelResults[:1], Options{})
	if err != nil || len(paired.Rows) != 1 || paired.Rows[0].Verdict != stats.VerdictFaster || !paired.Paired {
		t.Errorf("KernelPaired: %+v, %v", paired, err)
	}
	if _, err := Reports(old, report.Report{Schema: report.Schema, Environment: gpu, KernelResults: []kernelbench.Result{
		{Op: "argmax", ShapeLabel: "batch=1/seq=1/pos=0", DeviceSeconds: kernelSamples(3, 1e-6)}}}, Options{}); err == nil {
		t.Error("no op in common: no error")
	}
}
