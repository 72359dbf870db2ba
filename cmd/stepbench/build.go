package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// buildFlags are the flags of 'stepbench build'.
type buildFlags struct {
	kernelsDir, nvrtcPath, counters, model, cacheDir, format, cubinDir string
	archItems                                                          []string
	archs                                                              []kernels.Arch
	include                                                            []string
	progress                                                           io.Writer // stderr's progress line: the compile's status
}

// buildCmd compiles the kernels and prints each entry point's ptxas report
// (registers, spills, static shared memory) per architecture and, with
// --counters on the emulated device, its access counters from the kernel
// checks beside them: a kernel change judged for registers, coalescing and
// bank conflicts before any GPU.
func buildCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("build", stderr)
	var f buildFlags
	fs.StringVar(&f.kernelsDir, "kernels-dir", "", "compile the *.cu files of this directory instead of the embedded ones")
	fs.StringVar(&f.nvrtcPath, "nvrtc", "", "path of the libnvrtc.so whose ptxas reports (a real NVRTC; the emulated one reports no registers)")
	fs.StringSliceVar(&f.archItems, "arch", []string{"sm_80", "sm_90"}, "architectures to compile for, as nvcc's sm_90 or compute_90, 90, or the compute capability 9.0; sm_90a (sm_100a, sm_120a): the architecture-specific target, with an NVRTC that has it")
	fs.StringVar(&f.counters, "counters", "", "emulated device only: run the kernel checks with access counters into this JSONL file and print them beside the ptxas report (about a minute)")
	fs.StringVar(&f.model, "model", "llama-tiny", "with --counters: the preset whose shapes the checks run at")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "cubin cache (default: <user cache dir>/stepbench/cubin)")
	registerIncludeFlag(fs, &f.include)
	fs.StringVar(&f.format, "format", "text", "output: text (a table) or json (one object per entry point and architecture)")
	fs.StringVar(&f.cubinDir, "cubin-dir", "", "also write each source's cubin to DIR/sm_XY/NAME.cubin (for cuobjdump -sass; scripts/sass-mix counts its instructions)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.format != "text" && f.format != "json" {
		return usagef("--format: %q is not text or json", f.format)
	}
	stderr = newProgressLine(stderr, false)
	defer statusOf(stderr).Status("")
	f.progress = stderr
	if err := checkIncludeDirs(f.include); err != nil {
		return err
	}
	if err := checkKernelsDir(f.kernelsDir); err != nil {
		return err
	}
	if err := f.parseArchs(); err != nil {
		return err
	}
	cfg, err := runner.Preset(f.model)
	if err != nil {
		return usagef("--model: %v", err)
	}
	srcs, err := kernels.Sources(f.kernelsDir)
	if err != nil {
		return usagef("--kernels-dir: %v", err)
	}
	var counted map[string]gpu.KernelCounters
	if f.counters != "" { // first: the emulated driver reads the variable as it starts
		if counted, err = countKernels(f, cfg, stderr); err != nil {
			return err
		}
	}
	nv, err := cuda.OpenNVRTC(f.nvrtcPath)
	if err != nil {
		return fmt.Errorf("no NVRTC: %w", err)
	}
	if err := f.checkArchs(nv); err != nil {
		return err
	}
	return f.writeTable(stdout, nv, srcs, counted)
}

// parseArchs reads --arch's items and refuses those the kernels or the
// occupancy tables do not know.
func (f *buildFlags) parseArchs() error {
	f.archs = f.archs[:0]
	for _, item := range f.archItems {
		a, err := kernels.ParseArch(item)
		if err != nil {
			return usagef("--arch: %v", err)
		}
		if a.Number < kernels.MinArch {
			return usagef("--arch %s: sm_%d is older than sm_%d, which the kernels need", item, a.Number, kernels.MinArch)
		}
		if _, ok := kernels.LimitsOf(a.Number); !ok {
			return usagef("--arch %s: no occupancy limits known for sm_%d", item, a.Number)
		}
		if !slices.Contains(f.archs, a) { // compute_90 and 9.0 are sm_90 too
			f.archs = append(f.archs, a)
		}
	}
	if len(f.archs) == 0 {
		return usagef("--arch: empty list")
	}
	return nil
}

// checkArchs refuses, before compiling, an architecture the NVRTC cannot
// build: one missing from its supported list, an architecture-specific one
// it is too old for (or the emulated NVRTC).
func (f *buildFlags) checkArchs(nv *cuda.NVRTC) error {
	major, minor := nv.Version()
	supported, listErr := nv.SupportedArchs()
	for _, a := range f.archs {
		if err := a.CheckSpecific(major, minor, nv.Emulated()); err != nil {
			return usagef("--arch: %v", err)
		}
		if nv.Emulated() == "" && listErr == nil && len(supported) > 0 && !slices.Contains(supported, a.Number) {
			return usagef("--arch %s: NVRTC %d.%d compiles for %v only", a, major, minor, supported)
		}
	}
	return nil
}

// countKernels runs the kernel checks at cfg's shapes on the emulated device
// with access counters on, summed per kernel over every check.
func countKernels(f buildFlags, cfg runner.Config, stderr io.Writer) (map[string]gpu.KernelCounters, error) {
	if err := os.Setenv("STEPBENCH_EMU_COUNTERS", f.counters); err != nil {
		return nil, fmt.Errorf("--counters: %w", err)
	}
	drv, err := cuda.OpenDriver()
	if err != nil || drv.Emulated() == "" {
		return nil, usagef("--counters needs the emulated device (STEPBENCH_CUDA_LIBS=$PWD/build/emu); on a GPU Nsight Compute measures them (%v)", err)
	}
	be, err := gpu.New(gpu.Options{KernelsDir: f.kernelsDir, CacheDir: f.cacheDir, Progress: stderr})
	if err != nil {
		return nil, openFailure("--counters", err)
	}
	defer be.Close()
	fmt.Fprintf(stderr, "stepbench build: counting every kernel's accesses in its checks at %s's shapes\n", cfg.Name)
	results, err := be.VerifyRunShapes(cfg.KernelShape(), []gpu.RunShape{{Batch: 1, InputLen: 64, OutputLen: 2}}, gpu.VerifyKernelNames, 1, f.counters)
	if err != nil {
		return nil, fmt.Errorf("--counters: %w", err)
	}
	sum := map[string]gpu.KernelCounters{}
	for _, r := range results {
		for _, k := range r.Counters {
			sum[k.Kernel] = gpu.AddCounters(sum[k.Kernel], k)
		}
	}
	return sum, nil
}

// buildRow is one entry point on one architecture.
type buildRow struct {
	Kernel             string  `json:"kernel"`
	Arch               string  `json:"arch"`
	Registers          int     `json:"registers"`
	SpillBytes         int     `json:"spill_bytes"`
	StackBytes         int     `json:"stack_bytes"`
	StaticSharedBytes  int     `json:"static_shared_bytes"`
	DynamicSharedBytes *int    `json:"dynamic_shared_bytes"` // null: not a registered entry point
	Threads            *int    `json:"threads_per_block"`
	LaunchNote         string  `json:"launch_note,omitempty"`
	BlocksPerSM        *int    `json:"blocks_per_sm"`
	OccupancyPercent   float64 `json:"occupancy_percent,omitempty"`
	LimitedBy          string  `json:"occupancy_limited_by,omitempty"`
	counters           *gpu.KernelCounters
}

// buildRows compiles for every --arch and makes one row per entry point
// (non-inlined device functions, which ptxas reports without registers,
// are left out on a real NVRTC).
func (f buildFlags) buildRows(nv *cuda.NVRTC, srcs map[string]string, counted map[string]gpu.KernelCounters) ([]buildRow, string, error) {
	var rows []buildRow
	headers := ""
	for _, arch := range f.archs {
		b, h := gpu.KernelBuild(nv, f.kernelsDir, f.include, arch.Number, f.cacheDir)
		b.Specific = arch.Specific
		major, minor := nv.Version()
		b.OnCompile = gpu.CompileProgress(f.progress, arch.String(), major, minor)
		headers = h
		compiled, err := b.Compile(nv, srcs)
		if err != nil {
			return nil, "", err
		}
		if err := f.writeCubins(compiled, arch); err != nil {
			return nil, "", err
		}
		var res []kernels.KernelResources
		for _, c := range compiled {
			res = append(res, c.Report...)
		}
		sort.Slice(res, func(i, j int) bool { return res[i].Kernel < res[j].Kernel })
		limits, _ := kernels.LimitsOf(arch.Number)
		for _, r := range res {
			if r.Registers == 0 && nv.Emulated() == "" {
				continue // a non-inlined device function: ptxas reports it inside its entry
			}
			row := buildRow{Kernel: r.Kernel, Arch: arch.String(), Registers: r.Registers, SpillBytes: r.SpillStoreBytes + r.SpillLoadBytes,
				StackBytes: r.StackBytes, StaticSharedBytes: r.SharedBytes}
			if l, ok := kernels.EntryPointLaunch(r.Kernel); ok {
				occ := kernels.OccupancyOf(limits, l.Threads, r.Registers, r.SharedBytes+l.DynamicShared)
				row.DynamicSharedBytes, row.Threads, row.LaunchNote = &l.DynamicShared, &l.Threads, l.Note
				row.BlocksPerSM, row.OccupancyPercent, row.LimitedBy = &occ.BlocksPerSM, occ.Percent, occ.LimitedBy
			}
			if counted != nil {
				k := counted[r.Kernel]
				row.counters = &k
			}
			rows = append(rows, row)
		}
	}
	return rows, headers, nil
}

// writeTable prints one row per entry point and architecture: ptxas's
// report, the launch's block and dynamic shared memory, and the occupancy
// they allow (kernels.OccupancyOf); or the rows as JSON.
func (f buildFlags) writeTable(w io.Writer, nv *cuda.NVRTC, srcs map[string]string, counted map[string]gpu.KernelCounters) error {
	rows, headers, err := f.buildRows(nv, srcs, counted)
	if err != nil {
		return err
	}
	major, minor := nv.Version()
	if f.format == "json" {
		data, err := json.MarshalIndent(struct {
			Kernels     string     `json:"kernels"`
			NVRTC       string     `json:"nvrtc"`
			Emulated    bool       `json:"emulated"`
			IncludeDirs []string   `json:"include_dirs,omitempty"`
			Rows        []buildRow `json:"rows"`
		}{kernelsOrigin(f.kernelsDir), fmt.Sprintf("%d.%d", major, minor), nv.Emulated() != "", append(f.include, headers), rows}, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(data, '\n'))
		return err
	}
	note := ""
	if nv.Emulated() != "" {
		note = "; the emulated NVRTC reports no registers: give --nvrtc PATH of a real one"
	}
	fmt.Fprintf(w, "kernels %s, NVRTC %d.%d at %s (ptxas -v%s)\n", kernelsOrigin(f.kernelsDir), major, minor, nv.Path(), note)
	if headers != "" {
		fmt.Fprintf(w, "CUDA headers offered: %s\n", headers)
	}
	fmt.Fprintln(w, "occupancy: blocks per SM = min(the arch's block limit, its warps / the block's warps, registers per SM / (registers rounded up to 256 per warp × warps), shared memory per SM / (static + dynamic + 1 KB reserved per block)); % = resident warps / the arch's; threads and dynamic shared memory as the launch code sets them (- for an entry point it does not launch)")
	if counted != nil {
		fmt.Fprintln(w, "access counters: EMULATED, summed over the kernel checks (verify --counters explains the columns)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "kernel\tarch\tregisters\tspill B\tstack B\tstatic smem B\tdynamic smem B\tthreads\tblocks/SM\toccupancy\tlimited by"
	if counted != nil {
		header += "\tld sectors/req\tld used%\tst sectors/req\tst used%\tcp.async sectors/req\tsmem ld conflicts/req\tsmem st conflicts/req"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d", r.Kernel, r.Arch, r.Registers, r.SpillBytes, r.StackBytes, r.StaticSharedBytes)
		if r.Threads != nil {
			line += fmt.Sprintf("\t%d\t%d\t%d\t%.0f%%\t%s", *r.DynamicSharedBytes, *r.Threads, *r.BlocksPerSM, r.OccupancyPercent, r.LimitedBy)
		} else {
			line += "\t-\t-\t-\t-\t-"
		}
		if r.counters != nil {
			line += counterColumns(*r.counters)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// writeCubins writes each compiled source's cubin under --cubin-dir.
func (f buildFlags) writeCubins(compiled []kernels.Compiled, arch kernels.Arch) error {
	if f.cubinDir == "" {
		return nil
	}
	dir := filepath.Join(f.cubinDir, arch.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--cubin-dir: %w", err)
	}
	for _, c := range compiled {
		path := filepath.Join(dir, strings.TrimSuffix(c.Name, ".cu")+".cubin")
		if err := os.WriteFile(path, c.Cubin, 0o644); err != nil {
			return fmt.Errorf("--cubin-dir: write %s's cubin: %w", c.Name, err)
		}
	}
	return nil
}

func counterColumns(k gpu.KernelCounters) string {
	if k.Launches == 0 {
		return strings.Repeat("\t-", 7)
	}
	return "\t" + strings.Join([]string{
		perReq(k.GlobalLoad.Requests, k.GlobalLoad.SectorsPerRequest()), pct(k.GlobalLoad.Requests, k.GlobalLoad.UsedPercent()),
		perReq(k.GlobalStore.Requests, k.GlobalStore.SectorsPerRequest()), pct(k.GlobalStore.Requests, k.GlobalStore.UsedPercent()),
		perReq(k.CpAsync.Requests, k.CpAsync.SectorsPerRequest()),
		perReq(k.SharedLoad.Requests, k.SharedLoad.ConflictsPerRequest()), perReq(k.SharedStore.Requests, k.SharedStore.ConflictsPerRequest()),
	}, "\t")
}
