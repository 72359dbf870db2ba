package gpu

import (
	"errors"
	"fmt"
	"slices"

	"stepbench/cuda"
	"stepbench/kernels/ref"
)

// gemm_lt.go runs gemm version 2: the products Backend.Linear gives the
// library (every prefill GEMM) through cuBLASLt, with an algorithm chosen
// per shape at the shape's first use (which is eager: a prefill is never
// captured, and a decode step is captured only after one eager step) and
// kept on disk (gemm_cache.go).

const (
	// gemmLtCandidates is how many of the heuristic's algorithms are timed.
	gemmLtCandidates = 8
	// gemmLtWarmups and gemmLtRuns are the calls of each candidate before
	// timing and the timed ones (the median is kept); fewer on the
	// emulated device, whose times are CPU times and whose GEMMs are slow.
	gemmLtWarmups, gemmLtRuns       = 3, 5
	gemmLtEmuWarmups, gemmLtEmuRuns = 1, 3
	// gemmLtMaxRelErr is the bf16 output bound (docs/design.md) the chosen
	// algorithm must meet against cublasGemmEx.
	gemmLtMaxRelErr = 1e-2
)

// gemmLtState is gemm version 2's cuBLASLt, handle, workspace and choices.
type gemmLtState struct {
	lt        *cuda.CublasLt
	handle    *cuda.LtHandle
	workspace cuda.DevPtr
	dir       string
	choices   map[GemmKey]*GemmChoice
	order     []GemmKey // the choices in the order they were made
	tunings   int       // shapes timed (not read from the cache): for tests
}

// gemmLt opens cuBLASLt and its workspace at the first use of gemm
// version 2 (never while capturing).
func (c *Backend) gemmLt() (*gemmLtState, error) {
	if c.lt != nil {
		return c.lt, nil
	}
	if err := c.notCapturing("gemm v2: open cuBLASLt"); err != nil {
		return nil, err
	}
	dir, err := GemmCacheDir(c.cacheDir)
	if err != nil {
		return nil, fmt.Errorf("gemm v2: %w", err)
	}
	lt, err := cuda.OpenCublasLt(c.blas)
	if err != nil {
		return nil, fmt.Errorf("gemm v2: %w", err)
	}
	g := &gemmLtState{lt: lt, dir: dir, choices: map[GemmKey]*GemmChoice{}}
	if g.handle, err = lt.NewHandle(); err != nil {
		return nil, fmt.Errorf("gemm v2: %w", err)
	}
	if g.workspace, err = c.ctx.Alloc(ltWorkspaceBytes); err != nil {
		return nil, errors.Join(fmt.Errorf("gemm v2: cuBLASLt workspace: %w", err), g.handle.Destroy())
	}
	c.ctx.NameAllocation(g.workspace, "gemm v2 cuBLASLt workspace")
	c.lt = g
	return g, nil
}

func (c *Backend) closeGemmLt() error {
	g := c.lt
	if g == nil {
		return nil
	}
	c.lt = nil
	return errors.Join(g.handle.Destroy(), c.ctx.Free(g.workspace))
}

// GemmChoices are gemm version 2's choices so far, in the order made.
func (c *Backend) GemmChoices() []GemmChoice {
	if c.lt == nil {
		return nil
	}
	out := make([]GemmChoice, 0, len(c.lt.order))
	for _, k := range c.lt.order {
		out = append(out, *c.lt.choices[k])
	}
	return out
}

// linearLt is out[m, n] = x[m, k]·w[n, k]ᵀ through cuBLASLt with the
// shape's tuned algorithm (Backend.Linear's column-major call: TN, cuBLAS's
// m = n, n = m).
func (c *Backend) linearLt(out, x, w cuda.DevPtr, m, n, k int) error {
	if c.planning != nil {
		c.planLibrary("linear", LibraryGemmLt)
		return nil
	}
	g, err := c.gemmLt()
	if err != nil {
		return err
	}
	p := cuda.BF16Matmul{M: n, N: m, K: k, TransA: true, A: w, Lda: k, B: x, Ldb: k, D: out, Ldd: n,
		Workspace: g.workspace, WorkspaceBytes: ltWorkspaceBytes}
	choice, err := c.gemmChoice(g, p)
	if err != nil {
		return fmt.Errorf("linear (gemm v2, m=%d n=%d k=%d): %w", m, n, k, c.rootCause(err))
	}
	if err := g.handle.MatmulBF16(c.stream, p, ltAlgo(choice)); err != nil {
		return fmt.Errorf("linear (gemm v2): %w", c.rootCause(err))
	}
	c.gemms++
	c.observeLibrary("linear", LibraryGemmLt)
	return nil
}

func ltAlgo(ch *GemmChoice) cuda.LtAlgo {
	return cuda.LtAlgo{Data: ch.Algo, WorkspaceBytes: ch.AlgoWorkspaceBytes}
}

// gemmKey is p's cache key on this device and cuBLASLt.
func (c *Backend) gemmKey(g *gemmLtState, p cuda.BF16Matmul) GemmKey {
	d := c.info.Device
	a, b, o := p.Alignments()
	return GemmKey{AlignBytes: [3]int{a, b, o}, GPU: d.Name, ComputeCapability: fmt.Sprintf("%d.%d", d.Major, d.Minor), CublasLtVersion: g.lt.Version(),
		Emulated: g.lt.Emulated(), M: p.M, N: p.N, K: p.K, Layout: "TN", DType: "bf16 A, B, D; fp32 compute",
		Lda: p.Lda, Ldb: p.Ldb, Ldd: p.Ldd, WorkspaceBytes: p.WorkspaceBytes}
}

// gemmChoice is p's algorithm: made before in this process, else read from
// the cache (if cuBLASLt still offers it), else tuned, checked and stored.
func (c *Backend) gemmChoice(g *gemmLtState, p cuda.BF16Matmul) (*GemmChoice, error) {
	key := c.gemmKey(g, p)
	if ch, ok := g.choices[key]; ok {
		return ch, nil
	}
	if c.capturing {
		return nil, errors.New("the shape was not tuned before the graph capture (its first call must be eager)")
	}
	algos, err := g.handle.BF16Algos(p, gemmLtCandidates)
	if err != nil {
		return nil, err
	}
	ch, err := loadGemmChoice(g.dir, key)
	if err == nil && ch != nil {
		if !slices.ContainsFunc(algos, func(a cuda.LtAlgo) bool { return a.Data == ch.Algo && a.WorkspaceBytes == ch.AlgoWorkspaceBytes }) {
			err = fmt.Errorf("%s: cuBLASLt no longer offers its algorithm", ch.Path)
		}
	}
	if err != nil {
		c.note(fmt.Sprintf("stepbench: gemm cache: ignored (%v); tuning again", err))
	}
	if err != nil || ch == nil {
		if ch, err = c.tuneGemm(g, p, key, algos); err != nil {
			return nil, err
		}
	}
	g.choices[key] = ch
	g.order = append(g.order, key)
	c.note(describeChoice(ch))
	return ch, nil
}

// tuneGemm times every candidate on p's own buffers, keeps the fastest,
// checks its output against cublasGemmEx's and stores the choice.
func (c *Backend) tuneGemm(g *gemmLtState, p cuda.BF16Matmul, key GemmKey, algos []cuda.LtAlgo) (*GemmChoice, error) {
	warmups, runs := gemmLtWarmups, gemmLtRuns
	if c.info.Emulated != "" {
		warmups, runs = gemmLtEmuWarmups, gemmLtEmuRuns
	}
	g.tunings++
	ch := &GemmChoice{Key: key, Candidates: len(algos), Emulated: c.info.Emulated != ""}
	for i, a := range algos {
		us, err := c.timeAlgo(g, p, a, warmups, runs)
		if err != nil {
			return nil, fmt.Errorf("time algorithm %d of %d: %w", i, len(algos), err)
		}
		ch.MedianUs = append(ch.MedianUs, us)
		if us < ch.MedianUs[ch.Index] {
			ch.Index = i
		}
	}
	ch.Algo, ch.AlgoWorkspaceBytes = algos[ch.Index].Data, algos[ch.Index].WorkspaceBytes
	rel, err := c.checkAgainstGemmEx(g, p, algos[ch.Index])
	if err != nil {
		return nil, fmt.Errorf("algorithm %d of %d: %w", ch.Index, len(algos), err)
	}
	ch.CheckRelErr = rel
	if path, err := storeGemmChoice(g.dir, ch); err != nil {
		c.note(fmt.Sprintf("stepbench: gemm cache: not written (%v)", err))
	} else {
		ch.Path = path
	}
	return ch, nil
}

// timeAlgo is the median of runs timed calls of algo (CUDA events around
// each, synced), after warmups untimed ones, in µs.
func (c *Backend) timeAlgo(g *gemmLtState, p cuda.BF16Matmul, algo cuda.LtAlgo, warmups, runs int) (float64, error) {
	start, err := c.ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := c.ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	for i := 0; i < warmups; i++ {
		if err := g.handle.MatmulBF16(c.stream, p, algo); err != nil {
			return 0, err
		}
	}
	times := make([]float64, 0, runs)
	for i := 0; i < runs; i++ {
		if err := start.Record(c.stream); err != nil {
			return 0, err
		}
		if err := g.handle.MatmulBF16(c.stream, p, algo); err != nil {
			return 0, err
		}
		if err := end.Record(c.stream); err != nil {
			return 0, err
		}
		if err := end.Sync(); err != nil {
			return 0, err
		}
		ms, err := cuda.ElapsedMs(start, end)
		if err != nil {
			return 0, err
		}
		times = append(times, float64(ms)*1e3)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// checkAgainstGemmEx runs algo and cublasGemmEx on p's inputs and returns
// ref.RelErr of the two outputs, an error beyond the bf16 bound.
func (c *Backend) checkAgainstGemmEx(g *gemmLtState, p cuda.BF16Matmul, algo cuda.LtAlgo) (float64, error) {
	elems := p.M * p.N
	want, err := c.ctx.Alloc(2 * elems)
	if err != nil {
		return 0, fmt.Errorf("check against cublasGemmEx: %w", err)
	}
	defer c.ctx.Free(want)
	if err := c.handle.GemmBF16(true, false, p.M, p.N, p.K, 1, p.A, p.Lda, p.B, p.Ldb, 0, want, p.M); err != nil {
		return 0, err
	}
	if err := g.handle.MatmulBF16(c.stream, p, algo); err != nil {
		return 0, err
	}
	got, exp := make([]uint16, elems), make([]uint16, elems)
	if err := c.download("gemm v2 check", asBytes(got), p.D); err != nil {
		return 0, err
	}
	if err := c.download("gemm v2 check", asBytes(exp), want); err != nil {
		return 0, err
	}
	rel, err := ref.RelErrBF16(got, exp)
	if err != nil {
		return 0, fmt.Errorf("against cublasGemmEx: %w", err)
	}
	if rel > gemmLtMaxRelErr {
		return rel, fmt.Errorf("output %.3g from cublasGemmEx's (relative), bound %g", rel, gemmLtMaxRelErr)
	}
	return rel, nil
}

// describeChoice is the -v line of a choice.
func describeChoice(ch *GemmChoice) string {
	src := "tuned"
	if ch.FromCache {
		src = "from cache"
	}
	if ch.Path != "" {
		src += " " + ch.Path
	}
	times := "µs"
	if ch.Emulated {
		times = "µs EMULATED (CPU time, not GPU time)"
	}
	k := ch.Key
	return fmt.Sprintf("stepbench: gemm v2 m=%d n=%d k=%d (bf16 TN): cuBLASLt algorithm %d of %d candidates, median %.1f %s, %s",
		k.N, k.M, k.K, ch.Index, ch.Candidates, ch.MedianUs[min(ch.Index, len(ch.MedianUs)-1)], times, src)
}

// note writes msg as a status (shown with -v) where progress is a status
// line, else as a line.
func (c *Backend) note(msg string) {
	if s, ok := c.progress.(interface{ Status(string) }); ok {
		s.Status(msg)
		return
	}
	fmt.Fprintln(c.progress, msg)
}
