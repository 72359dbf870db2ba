package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"stepbench/runner"
)

// modelFlags are the flags that choose a model, shared by several commands.
type modelFlags struct {
	model, modelPath string
}

func (m *modelFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&m.model, "model", "llama-3-8b", "built-in model preset ("+joinNames(runner.PresetNames())+"), or an HF model directory as --model-path")
	fs.StringVar(&m.modelPath, "model-path", "", "HF model directory (config.json and *.safetensors); overrides --model")
}

// resolve returns the model's config, from --model-path's config.json or a
// preset. A --model that names no preset but a directory is taken as
// --model-path (vLLM's habit). Every bad path is a usage error (exit 2),
// a missing config.json included.
func (m *modelFlags) resolve() (runner.Config, error) {
	if m.modelPath == "" {
		cfg, err := runner.Preset(m.model)
		if err == nil {
			return cfg, nil
		}
		if st, statErr := os.Stat(m.model); statErr != nil || !st.IsDir() {
			return cfg, usagef("--model: %v, and no directory %s", err, m.model)
		}
		m.modelPath = m.model
	}
	st, err := os.Stat(m.modelPath)
	if err != nil {
		return runner.Config{}, usagef("--model-path: %v", err)
	}
	if !st.IsDir() {
		return runner.Config{}, usagef("--model-path: %s is not a directory", m.modelPath)
	}
	cfg, err := runner.LoadConfigFile(filepath.Join(m.modelPath, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, usagef("--model-path: %s has no config.json", m.modelPath)
	}
	if err != nil {
		return cfg, fmt.Errorf("--model-path: %w", err)
	}
	return cfg, nil
}

// emulatedNote is what a command says when the emulated device makes it
// run llama-tiny.
const emulatedNote = "the emulated CUDA device (STEPBENCH_CUDA_LIBS) runs the GPU path on the CPU: model llama-tiny unless --model names another"

// fitEmulated makes llama-tiny the model on the emulated device when none
// was named (an 8B model there takes minutes per step); say so
// (emulatedNote) when it did and the command goes on.
func (m *modelFlags) fitEmulated(fs *pflag.FlagSet) bool {
	if !fs.Changed("model") && m.modelPath == "" && emulatedDriver() {
		m.model = "llama-tiny"
		return true
	}
	return false
}

// resolveFitted is resolve after fitEmulated, saying on stderr when the
// emulated device made it llama-tiny.
func (m *modelFlags) resolveFitted(fs *pflag.FlagSet, stderr io.Writer) (runner.Config, error) {
	if m.fitEmulated(fs) {
		fmt.Fprintln(stderr, "stepbench: "+emulatedNote)
	}
	return m.resolve()
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}

// shapeFlags are the batch × input × output lists.
type shapeFlags struct {
	batch, input, output []int
}

func (s *shapeFlags) register(fs *pflag.FlagSet, defaultInput, defaultOutput []int) {
	intListVar(fs, &s.batch, "batch-size", []int{1}, "batch sizes: 1,2,4 or 1 2 4")
	intListVar(fs, &s.input, "input-len", defaultInput, "prompt lengths in tokens (list, as --batch-size)")
	intListVar(fs, &s.output, "output-len", defaultOutput, "tokens generated per sequence, including the prefill's (list, as --batch-size)")
}

// validate checks every list is non-empty and positive, each value within
// its limit (runner.MaxBatch, the model's positions), every shape's
// positions, input + output − 1, within the model's and every batch × input
// within runner.MaxTokens, each before it is added or multiplied.
func (s *shapeFlags) validate(cfg runner.Config) error {
	for _, l := range []struct {
		flag  string
		vals  []int
		limit int
		what  string
	}{
		{"--batch-size", s.batch, runner.MaxBatch, "the limit"},
		{"--input-len", s.input, cfg.MaxPositionEmbeddings, cfg.Name + "'s max_position_embeddings"},
		{"--output-len", s.output, cfg.MaxPositionEmbeddings, cfg.Name + "'s max_position_embeddings"},
	} {
		if len(l.vals) == 0 {
			return usagef("%s: empty list", l.flag)
		}
		for _, v := range l.vals {
			if v < 1 {
				return usagef("%s: %d must be at least 1", l.flag, v)
			}
			if v > l.limit {
				return usagef("%s: %d exceeds %s %d", l.flag, v, l.what, l.limit)
			}
		}
	}
	for _, in := range s.input {
		for _, out := range s.output {
			if n := runner.Positions(in, out); n > cfg.MaxPositionEmbeddings {
				return usagef("--input-len %d + --output-len %d − 1 = %d positions (the prefill's, then one per decode step) exceeds %s's max_position_embeddings %d",
					in, out, n, cfg.Name, cfg.MaxPositionEmbeddings)
			}
		}
		for _, b := range s.batch {
			if b > runner.MaxTokens/in {
				return usagef("--batch-size %d × --input-len %d = %d prompt tokens in one prefill exceeds the limit %d",
					b, in, int64(b)*int64(in), runner.MaxTokens)
			}
		}
	}
	return nil
}
