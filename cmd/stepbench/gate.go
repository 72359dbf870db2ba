package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// kernelGate is what a command must check before it times kernels other
// than the embedded defaults: the checks covering the files of
// --kernels-dir that differ from the embedded sources and the ops --kernel
// pins (docs/design.md, "Nothing is timed before it is checked").
type kernelGate struct {
	flag     string // how the arm's kernels were given, for messages: "--kernels-dir", "--baseline-kernels-dir"
	dir      string
	sel      kernels.Selection
	selFlag  string   // "--kernel" or "--baseline-kernel"
	changed  []string // files of dir that differ from the embedded ones
	files    []report.KernelFile
	includes []string          // --include
	opFlag   string            // "--op" or "--baseline-op"
	ops      map[string]string // op → library
	checks   []string          // gpu.VerifyKernelNames to run
	noVerify bool
}

// planGate finds what the kernels of dir (or the embedded ones) in the
// versions sel pins change, and so what must be checked.
func planGate(dirFlag, dir, selFlag string, sel kernels.Selection, noVerify bool) (kernelGate, error) {
	g := kernelGate{flag: dirFlag, dir: dir, sel: sel, selFlag: selFlag, noVerify: noVerify}
	if dir != "" {
		overrides, err := kernels.Overrides(dir)
		if err != nil {
			return g, usagef("%s: %v", dirFlag, err)
		}
		for _, o := range overrides {
			g.files = append(g.files, report.KernelFile{File: o.Name, Path: o.Path, SHA256: o.SHA256, Changed: o.Changed})
			if o.Changed {
				g.changed = append(g.changed, o.Name)
			}
		}
		if len(g.changed) > 0 {
			g.checks = gpu.ChecksForSources(g.changed)
		}
	}
	var ops []string
	for op := range sel {
		ops = append(ops, op)
	}
	if len(ops) > 0 {
		g.checks = append(g.checks, gpu.ChecksForOps(ops)...)
	}
	slices.Sort(g.checks)
	g.checks = slices.Compact(g.checks)
	return g, nil
}

// gate plans the check of the kernels these flags choose.
func (b *backendFlags) gate(noVerify bool) (kernelGate, error) {
	sel, err := b.selection()
	if err != nil {
		return kernelGate{}, err
	}
	g, err := planGate("--kernels-dir", b.kernelsDir, "--kernel", sel, noVerify)
	if err != nil {
		return g, err
	}
	g.includes = b.includeDirs
	ops, err := parseOps("--op", b.ops)
	g.withOps("--op", ops)
	return g, err
}

// withOps adds the checks of the ops libraries replace (flag names them).
func (g *kernelGate) withOps(flag string, ops map[string]string) {
	g.opFlag, g.ops = flag, ops
	if len(ops) == 0 {
		return
	}
	var names []string
	for op := range ops {
		names = append(names, op)
	}
	g.checks = append(g.checks, gpu.ChecksForOps(names)...)
	slices.Sort(g.checks)
	g.checks = slices.Compact(g.checks)
}

const noVerifyHelp = "time kernels other than the embedded defaults without checking them first at the run's shapes (every output is marked unverified)"

// registerNoVerify adds --no-verify.
func registerNoVerify(fs *pflag.FlagSet, dst *bool) {
	fs.BoolVar(dst, "no-verify", false, noVerifyHelp)
}

// describe names the arm's non-default kernels: "kernels from DIR
// (attention.cu changed), --kernel attn_decode=1".
func (g kernelGate) describe() string {
	var parts []string
	if g.dir != "" {
		what := "the embedded sources"
		if len(g.changed) > 0 {
			what = strings.Join(g.changed, ", ") + " changed"
		}
		parts = append(parts, fmt.Sprintf("kernels from %s (%s)", g.dir, what))
	}
	if len(g.sel) > 0 {
		parts = append(parts, g.selFlag+" "+g.sel.String())
	}
	var ops []string
	for op, path := range g.ops {
		ops = append(ops, op+"="+path)
	}
	slices.Sort(ops)
	if len(ops) > 0 {
		parts = append(parts, g.opFlag+" "+strings.Join(ops, ","))
	}
	return strings.Join(parts, ", ")
}

// check runs the gate on be at the run's shapes: nothing to check (the
// embedded defaults), skipped (--no-verify, said on stderr), or the checks,
// of which the first failure is the error (exit 1) naming the kernel, the
// shape and the verify command that reproduces it.
func (g kernelGate) check(be *gpu.Backend, cfg runner.Config, shapes []gpu.RunShape, seed uint64, stderr io.Writer) (report.Verification, error) {
	v := report.Verification{Status: report.VerificationEmbedded, Kernels: g.describe(), Files: g.files}
	if be != nil && (len(g.files) > 0 || len(g.includes) > 0) {
		v.IncludeDirs = be.Info().IncludeDirs
	}
	if be != nil {
		for _, l := range be.Info().OpLibraries {
			v.OpLibraries = append(v.OpLibraries, report.OpLibrary{Op: l.Op, Path: l.Path, SHA256: l.SHA256, Name: l.Name, ABI: fmt.Sprintf("%d.%d", l.ABI>>16, l.ABI&0xffff)})
		}
	}
	switch {
	case len(g.checks) == 0:
		return v, nil
	case g.noVerify:
		v.Status = report.VerificationSkipped
		fmt.Fprintf(stderr, "stepbench: --no-verify: %s NOT checked before timing\n", v.Kernels)
		return v, nil
	}
	fmt.Fprintf(stderr, "stepbench: checking %s against their Go twins at the run's shapes (%s) before timing\n", v.Kernels, strings.Join(g.checks, ", "))
	results, err := be.VerifyRunShapes(cfg.KernelShape(), shapes, g.checks, seed, "")
	if err != nil {
		return v, fmt.Errorf("check %s before timing: %w", v.Kernels, err)
	}
	for _, r := range results {
		if r.Err != nil {
			return v, fmt.Errorf("%s: %s failed its check before timing, at %s: %v (nothing was timed; reproduce: %s; --no-verify times it anyway)",
				v.Kernels, r.Check, r.Shape, r.Err, g.reproduce(cfg, shapes, seed, r.Check))
		}
		v.Checks++
		v.WorstRelErr = max(v.WorstRelErr, r.RelErr)
	}
	v.Status = report.VerificationPassed
	fmt.Fprintf(stderr, "stepbench: %d checks passed (worst relative error %.2e)\n", v.Checks, v.WorstRelErr)
	return v, nil
}

// reproduce is the verify command that runs the failed check alone at the
// same shapes.
func (g kernelGate) reproduce(cfg runner.Config, shapes []gpu.RunShape, seed uint64, check string) string {
	args := []string{"stepbench verify"}
	if _, err := runner.Preset(cfg.Name); err == nil {
		args = append(args, "--model "+cfg.Name)
	}
	if g.dir != "" {
		args = append(args, "--kernels-dir "+g.dir)
	}
	if len(g.sel) > 0 {
		args = append(args, "--kernel "+strings.ReplaceAll(g.sel.String(), " ", ","))
	}
	var ops []string
	for op, path := range g.ops {
		ops = append(ops, op+"="+path)
	}
	slices.Sort(ops)
	if len(ops) > 0 {
		args = append(args, "--op "+strings.Join(ops, ","))
	}
	name := strings.Fields(check)[0]
	if name == "decode" {
		name = "decode_graph"
	}
	var batch, input, output []string
	for _, s := range shapes {
		batch, input, output = appendDistinct(batch, s.Batch), appendDistinct(input, s.InputLen), appendDistinct(output, s.OutputLen)
	}
	args = append(args, "--check "+name, "--batch-size "+strings.Join(batch, ","),
		"--input-len "+strings.Join(input, ","), "--output-len "+strings.Join(output, ","), fmt.Sprintf("--seed %d", seed))
	return strings.Join(args, " ")
}

func appendDistinct(list []string, n int) []string {
	s := fmt.Sprint(n)
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// runShapes is the cross product of a sweep's lists, as the harness runs it.
// runGateShapes are the run's resolved shapes as the gate takes them.
func runGateShapes(shapes []bench.Shape, kv runner.KVOptions) []gpu.RunShape {
	var out []gpu.RunShape
	for _, sh := range shapes {
		rs := gpu.RunShape{Batch: sh.Batch, InputLen: sh.InputLen, OutputLen: sh.OutputLen, KV: kv}
		if sh.Ragged() {
			rs.Seqs = sh.Seqs()
		}
		out = append(out, rs)
	}
	return out
}

func runShapes(batch, input, output []int) []gpu.RunShape {
	var out []gpu.RunShape
	for _, b := range batch {
		for _, i := range input {
			for _, o := range output {
				out = append(out, gpu.RunShape{Batch: b, InputLen: i, OutputLen: o})
			}
		}
	}
	return out
}
