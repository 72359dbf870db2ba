package estimate

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Report is what the estimate command prints and writes: the model, the
// GPU and its constants, and each step.
type Report struct {
	Label     string     `json:"label"` // always "ESTIMATE"
	Model     string     `json:"model"`
	GPU       GPU        `json:"gpu"`
	Constants []Constant `json:"constants"`
	// Kernels is the selection as --kernel gave it ("fast" for the set),
	// Versions what every op with versions runs.
	Kernels  string `json:"kernels"`
	Versions string `json:"versions"`
	KV       string `json:"kv_cache"`
	Steps    []Step `json:"steps"`
	// Floors are each step's floor at the datasheet's peaks (the
	// roofline's), in seconds, in Steps' order.
	Floors []float64 `json:"floor_seconds"`
}

// Label is every figure's label: a model at stated constants, not a
// measurement.
const Label = "ESTIMATE"

// WriteHeader prints the report's first lines: what is estimated under
// which constants.
func WriteHeader(w io.Writer, r Report) {
	fmt.Fprintf(w, "%s (a model of the launches, not a measurement): %s on %s, kernels %s (%s), KV cache %s\n",
		Label, r.Model, r.GPU.Description, r.Kernels, r.Versions, r.KV)
	fmt.Fprintln(w, "kernel = max(max(HBM/hbm_rate, (HBM+L2 re-read)/l2_rate, FLOPs/matrix_rate, smem cycles/(sms·clock)) + ramp, min_kernel); time = kernel + gap;")
	fmt.Fprintln(w, "gap = node_gap (a captured decode step) or launch_gap (an eager prefill), less pdl_saving on a programmatic edge (launch=2, both kernels opted in): one gap per launch")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "constant\tvalue\tunit\tsource")
	for _, c := range r.Constants {
		fmt.Fprintf(tw, "%s\t%.4g\t%s\t%s\n", c.Name, c.Value, c.Unit, c.Source)
	}
	tw.Flush()
}

// WriteLaunches prints every launch of a step.
func WriteLaunches(w io.Writer, st Step) error {
	fmt.Fprintf(w, "\n%s %s: every launch\n", Label, st.Shape)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\top\tentry\tversion\tgrid\tblock\tsmem KB\tHBM MB\tL2 re-read MB\tGFLOP\tsmem kcycles\tbound\tkernel µs\tgap µs\tPDL\ttime µs\t")
	for _, l := range st.Launches {
		pdl := ""
		if l.Programmatic {
			pdl = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%.1f\t%.3f\t%.3f\t%.3f\t%.1f\t%s\t%.2f\t%.2f\t%s\t%.2f\t\n",
			l.Index, l.Op, l.Entry, dash(l.Version), grid(l.Grid), l.Block, float64(l.SharedBytes)/1024, l.HBMBytes/1e6, l.L2Bytes/1e6,
			l.FLOPs/1e9, l.SmemCycles/1e3, l.Bound, l.KernelSec*1e6, l.GapSec*1e6, pdl, l.TimeSec*1e6)
	}
	return tw.Flush()
}

// WriteByOp prints a step's launches summed per engine op and entry
// point, in the order they first run, and the step's total.
func WriteByOp(w io.Writer, st Step, floor float64) error {
	fmt.Fprintf(w, "\n%s %s: by op\n", Label, st.Shape)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tentry\tlaunches\tHBM MB\tL2 re-read MB\tGFLOP\tsmem Mcycles\tkernel ms\tgap ms\ttime ms\t")
	for _, g := range groupByOp(st.Launches) {
		t := Sum(g.launches)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.3f\t%.3f\t%.3f\t\n", g.op, g.entry, t.Launches, t.HBMBytes/1e6, t.L2Bytes/1e6,
			t.FLOPs/1e9, t.SmemCycles/1e6, t.KernelSec*1e3, t.GapSec*1e3, t.TimeSec*1e3)
	}
	t := st.Total
	fmt.Fprintf(tw, "total\t\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.3f\t%.3f\t%.3f\t\n", t.Launches, t.HBMBytes/1e6, t.L2Bytes/1e6,
		t.FLOPs/1e9, t.SmemCycles/1e6, t.KernelSec*1e3, t.GapSec*1e3, t.TimeSec*1e3)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s %s: %.3f ms, %d launches (%d programmatic edges); floor %.3f ms at the datasheet's peaks (%.0f%% of the floor)\n",
		Label, st.Shape, t.TimeSec*1e3, t.Launches, t.Programmatic, floor*1e3, 100*floor/t.TimeSec)
	return nil
}

type opGroup struct {
	op, entry string
	launches  []Launch
}

// groupByOp groups launches by (op, entry), in first-run order.
func groupByOp(ls []Launch) []opGroup {
	var out []opGroup
	at := map[[2]string]int{}
	for _, l := range ls {
		k := [2]string{l.Op, l.Entry}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, opGroup{op: l.Op, entry: l.Entry})
		}
		out[i].launches = append(out[i].launches, l)
	}
	return out
}

func grid(g [3]int) string {
	if g == [3]int{} {
		return "library"
	}
	return fmt.Sprintf("%d×%d×%d", g[0], g[1], g[2])
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
