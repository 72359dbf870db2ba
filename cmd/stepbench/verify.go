package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"stepbench/bench/report"
	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// endToEndMaxRelErr bounds the logits' relative error of a whole forward
// pass (many bf16 roundings deep) against the cpu reference.
const endToEndMaxRelErr = 2e-2

// oddShape takes the kernels' scalar (non-vectorised) paths.
var oddShape = kernels.ModelShape{Name: "odd-widths", Hidden: 256, Inter: 172, Vocab: 1003, Heads: 4, KVHeads: 2, HeadDim: 64, RopeTheta: 10000}

// verifyCmd checks every kernel against its Go twin, the device dummy
// weights against the cpu generator, and llama-tiny end to end against the
// cpu backend; it prints a table and fails on any failed check.
func verifyCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("verify", stderr)
	var flags backendFlags
	flags.register(fs)
	model := fs.String("model", "llama-3-8b", "model preset whose shapes the kernels are checked at: "+joinNames(runner.PresetNames()))
	seed := fs.Uint64("seed", 1, "seed of the random inputs and dummy weights")
	only := fs.StringSlice("check", nil, "check only these kernels (repeat or comma-separate): "+strings.Join(gpu.VerifyKernelNames, ", ")+"; the end-to-end run is then skipped")
	long := fs.Bool("long", false, "also check the shapes too slow for every run on the emulated device (attention over 1000-token prompts at batch 3; the FP8 cache's attention after 1k and 8k tokens of context, which --check paged_fp8 checks too)")
	var shapes shapeFlags
	shapes.register(fs, []int{1024}, []int{16})
	counters := fs.String("counters", "", "emulated device only: count every check's loads and stores (warp requests, 32-byte sectors, shared-memory bank conflicts) into this JSONL file and print them per check beside the cost model's bytes")
	registerOneRank(fs, "verify")
	var stepTimeout stepTimeoutFlag
	stepTimeout.register(fs, "verify")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := stepTimeout.check(); err != nil {
		return err
	}
	atRunShapes := fs.Changed("batch-size") || fs.Changed("input-len") || fs.Changed("output-len")
	cfg, err := runner.Preset(*model)
	if err != nil {
		return usagef("--model: %v", err)
	}
	if atRunShapes {
		if err := shapes.validate(cfg); err != nil {
			return err
		}
	}
	for _, k := range *only {
		if !slices.Contains(gpu.VerifyKernelNames, k) {
			return usagef("--check: %q is not one of %s", k, strings.Join(gpu.VerifyKernelNames, ", "))
		}
	}
	if err := checkKernelsDir(flags.kernelsDir); err != nil {
		return err
	}
	sel, err := flags.selection()
	if err != nil {
		return err
	}
	ops, err := parseOps("--op", flags.ops) // a library that is no file is refused before any GPU is looked for
	if err != nil {
		return err
	}
	if *counters != "" {
		// Read by the emulated driver and NVRTC as they start (and ignored by a real one).
		if err := os.Setenv("STEPBENCH_EMU_COUNTERS", *counters); err != nil {
			return fmt.Errorf("--counters: %w", err)
		}
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		return fmt.Errorf("no usable GPU: %w", withEmulatorHint(err))
	}
	if *counters != "" && drv.Emulated() == "" {
		return usagef("--counters: the access counters are the emulated device's (STEPBENCH_CUDA_LIBS=$PWD/build/emu); on a GPU Nsight Compute measures them: ncu --metrics %s stepbench verify ...", ncuCounterMetrics)
	}
	if err := checkIncludeDirs(flags.includeDirs); err != nil {
		return err
	}
	if err := probeOpLibraries("--op", ops, flags); err != nil {
		return err
	}
	defer watchSteps("verify", stepTimeout.resolve(cfg, slices.Max(shapes.batch), slices.Max(shapes.input), drv.Emulated() != ""), stderr, nil)()
	be, err := gpu.New(gpu.Options{Ops: ops, KernelsDir: flags.kernelsDir, IncludeDirs: flags.includeDirs, NVRTCPath: flags.nvrtcPath, CublasPath: flags.cublasPath,
		DisableGraphs: flags.disableCUDAGraph, Kernels: sel, Progress: stderr})
	if err != nil {
		return openFailure("no usable GPU", err)
	}
	defer be.Close()
	printVerifyHeader(stdout, be.Info(), flags.kernelsDir, sel)
	if atRunShapes {
		return verifyAtRunShapes(be, cfg, runShapes(shapes.batch, shapes.input, shapes.output), *only, *seed, *counters, stdout)
	}
	return runVerify(be, cfg, *seed, gpu.VerifyOptions{Only: *only, Long: *long, Counters: *counters}, stdout)
}

// printVerifyHeader says what verify runs on: the device, the libraries,
// the kernels and their versions, and every op library.
func printVerifyHeader(stdout io.Writer, info gpu.Info, kernelsDir string, sel kernels.Selection) {
	if info.Emulated != "" {
		fmt.Fprintln(stdout, report.EmulatedNote)
	}
	fmt.Fprintf(stdout, "verify on %s (sm_%d%d), NVRTC %d.%d, cuBLAS %s, kernels %s, versions %s, decode %s\n\n",
		info.Device.Name, info.Device.Major, info.Device.Minor, info.NVRTCMajor, info.NVRTCMinor,
		cublasVersionString(info.CublasVersion), kernelsOrigin(kernelsDir), verifiedVersions(sel), graphMode(info.GraphsEnabled))
	for _, l := range info.OpLibraries {
		fmt.Fprintf(stdout, "op %s from %s (sha256 %s; %s, ABI %d.%d)\n", l.Op, l.Path, l.SHA256, l.Name, l.ABI>>16, l.ABI&0xffff)
	}
}

// ncuCounterMetrics are Nsight Compute's names of what --counters counts.
const ncuCounterMetrics = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum," +
	"smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"

// verifyAtRunShapes runs the checks a timed run makes before timing
// (gpu.VerifyRunShapes) at the shapes of --batch-size, --input-len and
// --output-len: every kernel, or those --check names.
func verifyAtRunShapes(be *gpu.Backend, cfg runner.Config, shapes []gpu.RunShape, only []string, seed uint64, counters string, stdout io.Writer) error {
	checks := only
	if len(checks) == 0 {
		checks = gpu.VerifyKernelNames
	}
	v := verifyTable{tw: tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)}
	fmt.Fprintln(v.tw, "check\tshape\tmax rel err\tstatus")
	results, err := be.VerifyRunShapes(cfg.KernelShape(), shapes, checks, seed, counters)
	for _, r := range results {
		v.row(r.Check, r.Shape, r.RelErr, r.Exact, r.Err)
	}
	if err != nil {
		v.row("kernel checks", "", 0, false, err)
	}
	if err := v.tw.Flush(); err != nil {
		return err
	}
	if counters != "" {
		if err := writeCountersTable(stdout, results); err != nil {
			return err
		}
	}
	if v.failures > 0 {
		return fmt.Errorf("%d check(s) failed", v.failures)
	}
	fmt.Fprintf(stdout, "\nall %d checks passed at the run shapes (kernels %s; end to end not run)\n", len(results), strings.Join(checks, ", "))
	return nil
}

// verifyTable is verify's table of checks, counting the failures.
type verifyTable struct {
	tw       *tabwriter.Writer
	failures int
}

func (v *verifyTable) row(check, shape string, rel float64, exact bool, err error) {
	relText := fmt.Sprintf("%.2e", rel)
	if exact {
		relText = "bit-exact"
	}
	status := "ok"
	if err != nil {
		status = "FAIL: " + err.Error()
		v.failures++
	}
	fmt.Fprintf(v.tw, "%s\t%s\t%s\t%s\n", check, shape, relText, status)
}

// runVerify runs the kernel checks at the odd widths and cfg's, then (when
// every kernel was asked for and the context survived) llama-tiny end to
// end, and prints the table.
func runVerify(be *gpu.Backend, cfg runner.Config, seed uint64, opts gpu.VerifyOptions, stdout io.Writer) error {
	only := opts.Only
	v := verifyTable{tw: tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)}
	fmt.Fprintln(v.tw, "check\tshape\tmax rel err\tstatus")
	results, err := be.VerifyKernels([]kernels.ModelShape{oddShape, cfg.KernelShape()}, seed, opts)
	lost := false
	for _, r := range results {
		v.row(r.Check, r.Shape, r.RelErr, r.Exact, r.Err)
		lost = lost || errors.Is(r.Err, gpu.ErrContextLost)
	}
	defer func() {
		if opts.Counters != "" {
			_ = writeCountersTable(stdout, results)
		}
	}()
	if err != nil {
		v.row("kernel checks", "", 0, false, err)
	}
	checks, what := len(results), ""
	if lost || len(only) > 0 {
		what = fmt.Sprintf(" (kernels %s; end to end not run)", strings.Join(only, ", "))
	} else {
		tiny, err := runner.Preset("llama-tiny")
		if err != nil {
			return err
		}
		checks += verifyEndToEnd(be, tiny, seed, v.row)
		if be.CheckFP8() == nil { // and FP8: dummy weights quantized at load, cuBLASLt's GEMMs
			tiny.Name, tiny.Quantization = tiny.Name+"-fp8", runner.QuantizeAtLoad()
			checks += verifyEndToEnd(be, tiny, seed, v.row)
		}
	}
	if err := v.tw.Flush(); err != nil {
		return err
	}
	if v.failures > 0 {
		return fmt.Errorf("%d check(s) failed", v.failures)
	}
	fmt.Fprintf(stdout, "\nall %d checks passed%s\n", checks, what)
	return nil
}

// verifyEndToEnd runs llama-tiny on the GPU against the cpu backend, one
// row per prompt; it returns the count of rows.
func verifyEndToEnd(be *gpu.Backend, tiny runner.Config, seed uint64, row func(check, shape string, rel float64, exact bool, err error)) int {
	prompts := [][]int32{{1, 2, 3, 4, 5, 6, 7, 8}, {42}, {300, 17, 9, 9, 9, 250, 3, 1, 77, 5, 11, 12, 13}}
	const outputLen = 8
	e2e, err := runner.CompareWithCPU(be, tiny, seed, prompts, outputLen)
	for i, r := range e2e {
		var bad error
		switch {
		case !r.TokensMatch():
			bad = fmt.Errorf("greedy tokens %v, cpu %v", r.Tokens, r.RefTokens)
		case r.MaxLogitsRelErr > endToEndMaxRelErr:
			bad = fmt.Errorf("logits relative error %.3g > %g", r.MaxLogitsRelErr, endToEndMaxRelErr)
		}
		row("end to end vs cpu", fmt.Sprintf("%s prompt %d: %d tokens in, %d out", tiny.Name, i, r.PromptLen, r.OutputLen), r.MaxLogitsRelErr, false, bad)
	}
	if err != nil {
		row("end to end vs cpu", tiny.Name, 0, false, err)
	}
	return len(e2e)
}

func kernelsOrigin(dir string) string {
	if dir == "" {
		return "embedded"
	}
	return "from " + dir
}

func graphMode(enabled bool) string {
	if enabled {
		return "as CUDA graphs"
	}
	return "eager"
}

// verifiedVersions says which kernel versions verify checks: every version
// of an op unless --kernel pins one.
func verifiedVersions(sel kernels.Selection) string {
	if len(sel) == 0 {
		return "all"
	}
	return "all but " + sel.String()
}

// writeCountersTable prints each check's access counters per kernel beside
// the cost model's bytes of the op at the check's shape.
func writeCountersTable(w io.Writer, results []gpu.CheckResult) error {
	fmt.Fprintln(w, "\naccess counters (EMULATED: counted by the emulated device from the addresses its threads touch, no caches, not measured on a GPU;")
	fmt.Fprintln(w, "Nsight Compute's names: sectors/req = l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{ld,st,ldgsts}.ratio, used% =")
	fmt.Fprintln(w, "smsp__sass_average_data_bytes_per_sector_mem_global_op_*.pct, conflicts/req = l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_*.sum per request;")
	fmt.Fprintln(w, "sector MB = 32 B x every global sector; model MB = the cost model's minimum bytes of the op at the check's shape)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "check\tshape\tkernel\tld sectors/req\tld used%\tst sectors/req\tst used%\tcp.async sectors/req\tsmem ld conflicts/req\tsmem st conflicts/req\tsector MB\tmodel MB")
	for _, r := range results {
		for i, k := range r.Counters {
			model := "" // the op's, on its first kernel's row
			if i == 0 && r.ModelBytes > 0 {
				model = fmt.Sprintf("%.4g", r.ModelBytes/1e6)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.4g\t%s\n", r.Check, r.Shape, k.Kernel,
				perReq(k.GlobalLoad.Requests, k.GlobalLoad.SectorsPerRequest()), pct(k.GlobalLoad.Requests, k.GlobalLoad.UsedPercent()),
				perReq(k.GlobalStore.Requests, k.GlobalStore.SectorsPerRequest()), pct(k.GlobalStore.Requests, k.GlobalStore.UsedPercent()),
				perReq(k.CpAsync.Requests, k.CpAsync.SectorsPerRequest()),
				perReq(k.SharedLoad.Requests, k.SharedLoad.ConflictsPerRequest()), perReq(k.SharedStore.Requests, k.SharedStore.ConflictsPerRequest()),
				k.SectorBytes()/1e6, model)
		}
	}
	return tw.Flush()
}

func perReq(requests, v float64) string {
	if requests == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g", v)
}

func pct(requests, v float64) string {
	if requests == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v)
}
