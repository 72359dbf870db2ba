package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"stepbench/runner"
)

// servingFlags are the flags vLLM's and SGLang's users type out of habit:
// accepted where they mean something here, otherwise refused in one line
// saying what stepbench does instead (a flag silently dropped would time
// something else than the user asked for).
type servingFlags struct {
	maxModelLen     int
	dtype           string
	trustRemoteCode bool
	tokenizer       string
	cudaGraphMaxBS  int
	n               int
	// Refused whatever their value: stepbench has no pool to size.
	gpuMemoryUtilization, memFractionStatic float64
}

func (s *servingFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&s.maxModelLen, "max-model-len", 0, "vLLM's: the longest context in positions; every shape's input + output − 1 must fit it (default: the model's max_position_embeddings)")
	fs.StringVar(&s.dtype, "dtype", "auto", "vLLM's: auto or bfloat16 (stepbench runs bf16 weights and activations; FP8 projections: --quantization fp8)")
	fs.BoolVar(&s.trustRemoteCode, "trust-remote-code", false, "vLLM's and SGLang's: accepted; stepbench runs no model code (config.json and safetensors only)")
	fs.StringVar(&s.tokenizer, "tokenizer", "", "vLLM's: the directory whose tokenizer.json text prompts are encoded with (default: --model-path)")
	fs.IntVar(&s.cudaGraphMaxBS, "cuda-graph-max-bs", 0, "SGLang's: accepted when every --batch-size is at most it (stepbench captures the decode step of every batch, or of none with --disable-cuda-graph)")
	fs.IntVar(&s.n, "n", 1, "vLLM's sequences per prompt: 1 (a batch of B runs B prompts)")
	fs.Float64Var(&s.gpuMemoryUtilization, "gpu-memory-utilization", 0, "")
	fs.Float64Var(&s.memFractionStatic, "mem-fraction-static", 0, "")
	for _, name := range []string{"gpu-memory-utilization", "mem-fraction-static"} {
		_ = fs.MarkHidden(name)
	}
}

// noPool is what stepbench does instead of sizing a KV-cache pool.
const noPool = "stepbench has no KV-cache pool to size: it allocates the weights, one KV cache for the sweep's largest shape " +
	"and the activations, and checks they fit in free memory before loading anything; leave it out"

// check refuses the values that mean nothing here, before any model.
func (s *servingFlags) check(fs *pflag.FlagSet) error {
	switch {
	case fs.Changed("gpu-memory-utilization"):
		return usagef("--gpu-memory-utilization: %s", noPool)
	case fs.Changed("mem-fraction-static"):
		return usagef("--mem-fraction-static: %s", noPool)
	case fs.Changed("max-model-len") && s.maxModelLen < 1:
		return usagef("--max-model-len: %d must be at least 1", s.maxModelLen)
	case fs.Changed("cuda-graph-max-bs") && s.cudaGraphMaxBS < 0:
		return usagef("--cuda-graph-max-bs: %d must not be negative", s.cudaGraphMaxBS)
	case s.n != 1:
		return usagef("--n %d: stepbench generates one sequence per prompt (vLLM's n=1); --batch-size B runs B prompts at once", s.n)
	}
	switch strings.ToLower(s.dtype) {
	case "auto", "bfloat16", "bf16":
	default:
		return usagef("--dtype %s: stepbench runs bf16 weights and activations (auto or bfloat16); for FP8 projections use --quantization fp8", s.dtype)
	}
	return nil
}

// checkShapes refuses, once the model is known, a --max-model-len beyond
// its positions (as vLLM does), a shape beyond --max-model-len and
// batches above --cuda-graph-max-bs.
func (s *servingFlags) checkShapes(fs *pflag.FlagSet, cfg runner.Config, shapes shapeFlags, eager bool) error {
	if fs.Changed("max-model-len") {
		if s.maxModelLen > cfg.MaxPositionEmbeddings {
			return usagef("--max-model-len %d exceeds %s's max_position_embeddings %d", s.maxModelLen, cfg.Name, cfg.MaxPositionEmbeddings)
		}
		for _, in := range shapes.input {
			for _, out := range shapes.output {
				if n := runner.Positions(in, out); n > s.maxModelLen {
					return usagef("--max-model-len %d: --input-len %d + --output-len %d − 1 = %d positions exceed it", s.maxModelLen, in, out, n)
				}
			}
		}
	}
	if fs.Changed("cuda-graph-max-bs") && !eager {
		for _, b := range shapes.batch {
			if b > s.cudaGraphMaxBS {
				return usagef("--cuda-graph-max-bs %d: SGLang would run batch %d eagerly; stepbench captures the decode step of every batch or of none: "+
					"time the batches above %d in a run of their own with --disable-cuda-graph", s.cudaGraphMaxBS, b, s.cudaGraphMaxBS)
			}
		}
	}
	return nil
}

// tokenizerDir is where text prompts' tokenizer.json is: --tokenizer, else
// the model directory.
func (s *servingFlags) tokenizerDir(modelPath string) string {
	if s.tokenizer != "" {
		return s.tokenizer
	}
	return modelPath
}

// servingHelp lists the vLLM and SGLang flags refused outright, for --help.
func servingHelp() string {
	return fmt.Sprintf("refused (vLLM's --gpu-memory-utilization, SGLang's --mem-fraction-static): %s\n", noPool)
}
