package main

import (
	"errors"
	"fmt"
	"io"

	"stepbench/bench/report"
	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
	"stepbench/runner/gpu"
)

// loadGroupArms loads both arms tensor-parallel over this node's first
// --tp-size GPUs: each arm its own group (its own communicator and rank
// threads), its kernels checked at rank 0's shapes on a backend of their
// own before its group forms, both groups on the same weights. Arm A's
// GPUs must hold room for B's share too.
func (f *abFlags) loadGroupArms(cfg runner.Config, stderr io.Writer) ([]abArm, []string, func(), error) {
	var closers []func() error
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	t := &f.tp
	est := f.armsEstimate(t.rankLayout(cfg, true), cfg)
	fmt.Fprintf(stderr, "stepbench ab: two copies of %s of weights on each of %d GPUs (tensor-parallel size %d)\n",
		report.Bytes(est.WeightBytes), t.size, t.size)
	job := t.job("stepbench ab")
	ranks := job.LocalRanks()
	if err := gpu.CheckGPUCount(t.size, len(ranks)); errors.Is(err, gpu.ErrTooFewGPUs) {
		return nil, nil, closeAll, usageError{err}
	} else if err != nil {
		return nil, nil, closeAll, err
	}
	nccl, err := cuda.OpenNCCL(t.ncclPath)
	if err != nil {
		return nil, nil, closeAll, fmt.Errorf("--tp-size: %w", err)
	}
	src, closeSrc, err := openWeights(f.loadFormat, f.model.modelPath, f.seed, cfg)
	if err != nil {
		return nil, nil, closeAll, err
	}
	defer closeSrc()
	arms, header := make([]abArm, 2), []string(nil)
	for i := range arms {
		opts := f.armOptions(i)
		lines, err := f.checkGroupArm(i, opts, cfg, stderr)
		header = append(header, lines...)
		if err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		id, err := gpu.GroupID(nccl, job, "", t.distTimeout, stderr)
		if err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		need := runner.MemoryEstimate{WeightBytes: int64(2-i) * est.WeightBytes,
			KVCacheBytes: 2 * est.KVCacheBytes, ActivationBytes: 2 * est.ActivationBytes}
		g, err := gpu.OpenGroup(gpu.GroupOptions{Config: cfg, Size: t.size, Ranks: ranks, Backend: opts, Progress: stderr,
			NCCL: nccl, ID: id, Estimate: need, Weights: src, LoadProgress: loadProgress(stderr, f.loadFormat)})
		if err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		closers = append(closers, g.Close)
		if err := g.SetKVOptions(f.armKV(i).options(f.seed)); err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		if err := f.armKVScales(i, g, cfg, stderr); err != nil {
			return nil, header, closeAll, fmt.Errorf("arm %c: %w", "AB"[i], err)
		}
		arms[i] = g
		fmt.Fprintf(stderr, "stepbench ab: arm %c: kernels %s, versions %s, ranks %v (NCCL %s)\n", "AB"[i], kernelsOrigin(opts.KernelsDir),
			[]string{f.versionsOfA, f.versionsOfB}[i], ranks, nccl.Path())
	}
	header = append(header, f.inputLines(cfg)...)
	header = append(header, fmt.Sprintf("both arms: tensor-parallel size %d, each arm its own NCCL communicator over the same GPUs", t.size))
	return arms, header, closeAll, nil
}

// armOptions are arm i's backend options: the shared flags, the arm's
// kernels directory and versions.
func (f *abFlags) armOptions(i int) gpu.Options {
	opts := f.backend.options([]kernels.Selection{f.selA, f.selB}[i])
	opts.KernelsDir = []string{f.kernelsA, f.kernelsB}[i]
	return opts
}

// checkGroupArm checks arm i's kernels at rank 0's shapes on a backend
// opened and closed before its group forms (a rank that fails while the
// others join the communicator could not be aborted).
func (f *abFlags) checkGroupArm(i int, opts gpu.Options, cfg runner.Config, stderr io.Writer) ([]string, error) {
	opts.Progress = stderr
	be, err := gpu.New(opts)
	if err != nil {
		return nil, openFailure(fmt.Sprintf("kernels %q", opts.KernelsDir), err)
	}
	rank := cfg
	m := f.tp.rankShape(cfg)
	rank.NumAttentionHeads, rank.NumKeyValueHeads, rank.IntermediateSize, rank.VocabSize = m.Heads, m.KVHeads, m.Inter, m.Vocab
	lines, err := f.checkArm(i, be, rank, stderr)
	return lines, errors.Join(err, be.Close())
}
