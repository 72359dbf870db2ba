package main

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"stepbench/runner"
)

// weightFlags choose how a model's weights load, for run and ab alike:
// --load-format and --quantization.
type weightFlags struct {
	loadFormat   string
	quantization string
}

func (w *weightFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&w.loadFormat, "load-format", "auto", "weights: auto (safetensors with --model-path, else dummy), dummy, safetensors")
	registerQuantization(fs, &w.quantization)
}

func (w *weightFlags) check() error {
	if !slices.Contains([]string{"auto", "dummy", "safetensors"}, w.loadFormat) {
		return usagef("--load-format: %q is not auto, dummy or safetensors", w.loadFormat)
	}
	return nil
}

// resolve is the load format a model directory (modelPath, "" for none)
// gives auto: its safetensors when there is one, else dummy weights.
func (w *weightFlags) resolve(modelPath string) (string, error) {
	format := w.loadFormat
	if format == "auto" {
		format = "dummy"
		if modelPath != "" {
			format = "safetensors"
		}
	}
	if format == "safetensors" && modelPath == "" {
		return "", usagef("--load-format safetensors needs --model-path")
	}
	return format, nil
}

// openWeights is the source of a model's weights: dummy from the seed, or
// the safetensors of modelPath checked against cfg (closeSrc releases them
// after loading).
func openWeights(format, modelPath string, seed uint64, cfg runner.Config) (src runner.WeightSource, closeSrc func(), err error) {
	src.Seed = seed
	if format != "safetensors" {
		return src, func() {}, nil
	}
	st, err := runner.OpenSafetensors(modelPath)
	if err != nil {
		return src, nil, err
	}
	if err := st.Check(cfg); err != nil {
		st.Close()
		return src, nil, err
	}
	src.Reader = st
	return src, func() { st.Close() }, nil
}

// weightsLine says what weights a run loaded, for a report's header.
func weightsLine(format, modelPath string, seed uint64, cfg runner.Config) string {
	what := fmt.Sprintf("dummy (seed %d, uniform on ±1/32: no checkpoint's values)", seed)
	if format == "safetensors" {
		what = "the safetensors of " + modelPath
	}
	if q := cfg.Quantization; q != nil {
		what += ", " + q.String()
	}
	return fmt.Sprintf("weights: %s, model %s", what, cfg.Name)
}
