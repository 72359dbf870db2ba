package main

import (
	"fmt"
	"io"

	"stepbench/bench"
	"stepbench/bench/report"
	"stepbench/runner"
)

// kvScaled is an engine or a tensor-parallel group whose FP8 cache takes
// scales.
type kvScaled interface {
	SetKVScales(runner.KVScales) error
	CalibrateKVScales(seqs []runner.SeqSpec, prompts []int32) (runner.KVScales, error)
}

// kvScaleInputs are what --kv-scales reads before any weight loads: the
// checkpoint's scales (nil: calibrate after loading) and their source.
type kvScaleInputs struct {
	scales *runner.KVScales
	source runner.KVScaleSource
}

// readKVScales resolves an FP8 cache's scales before the weights load:
// the checkpoint's (1.0 where it has none, or dummy weights), or none yet
// for calibrate. A bf16 cache has none.
func (k *kvFlags) readKVScales(format, modelPath string, cfg runner.Config) (kvScaleInputs, error) {
	if !k.dtype.FP8() || k.scales == kvScalesCalibrate {
		return kvScaleInputs{source: runner.KVScaleSource{Kind: "calibrated"}}, nil
	}
	if format != "safetensors" {
		s := runner.UnitKVScales(cfg.NumHiddenLayers, cfg.NumKeyValueHeads)
		return kvScaleInputs{scales: &s, source: runner.KVScaleSource{Kind: "unit"}}, nil
	}
	st, err := runner.OpenSafetensors(modelPath)
	if err != nil {
		return kvScaleInputs{}, err
	}
	defer st.Close()
	s, src, err := runner.ReadKVScales(st, cfg)
	if err != nil {
		return kvScaleInputs{}, err
	}
	return kvScaleInputs{scales: &s, source: src}, nil
}

// calibrationInputs are the sequences and prompt ids a calibration's
// prefill runs: the first shape's, on prompts of a stream of their own
// (never a timed iteration's), or a correctness run's first prompt.
func calibrationInputs(shapes []bench.Shape, prompts [][]int32, text *bench.TextPrompts, seed uint64, vocab int) ([]runner.SeqSpec, []int32, error) {
	if len(shapes) == 0 {
		if len(prompts) == 0 {
			return nil, nil, fmt.Errorf("calibrate kv scales: no prompt")
		}
		return []runner.SeqSpec{{Prompt: len(prompts[0])}}, prompts[0], nil
	}
	key := bench.PromptKey{Shape: shapes[0], Iter: -2, Warmup: true}
	var ids []int32
	var err error
	if text != nil {
		ids, err = text.PromptIDs(key)
	} else {
		ids, err = bench.PromptIDs(seed, vocab, key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("calibrate kv scales: %w", err)
	}
	return shapes[0].Seqs(), ids, nil
}

// applyKVScales sets an FP8 cache's scales on e (the checkpoint's, or
// calibrated on inputs) and records them for the report; a bf16 cache
// takes none.
func (k *kvFlags) applyKVScales(e kvScaled, in kvScaleInputs, inputs func() ([]runner.SeqSpec, []int32, error), stderr io.Writer) error {
	if !k.dtype.FP8() {
		return nil
	}
	var s runner.KVScales
	if in.scales != nil {
		s = *in.scales
		if err := e.SetKVScales(s); err != nil {
			return err
		}
	} else {
		seqs, prompts, err := inputs()
		if err != nil {
			return err
		}
		if s, err = e.CalibrateKVScales(seqs, prompts); err != nil {
			return err
		}
	}
	k.scaleReport = &report.KVScales{Source: in.source.String(), K: s.K, V: s.V}
	fmt.Fprintf(stderr, "stepbench: KV cache %s, scales %s\n", k.dtype, in.source)
	return nil
}
