package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"stepbench/bench/report"
	"stepbench/internal/input"
	"stepbench/runner"
)

// readPrompts reads and checks the correctness prompts.
func readPrompts(path string, cfg runner.Config, outputLens []int) ([][]int32, error) {
	data, err := input.ReadFile(path, runner.MaxPromptFileBytes, "a --prompt-ids file")
	if err != nil {
		return nil, usagef("--prompt-ids: %v", err)
	}
	prompts, err := runner.ParsePromptIDs(bytes.NewReader(data), path, cfg.VocabSize)
	if err != nil {
		return nil, usagef("--prompt-ids: %v", err)
	}
	if outputLens[0] > cfg.MaxPositionEmbeddings {
		return nil, usagef("--output-len: %d exceeds %s's max_position_embeddings %d", outputLens[0], cfg.Name, cfg.MaxPositionEmbeddings)
	}
	for i, p := range prompts {
		if n := runner.Positions(len(p), outputLens[0]); n > cfg.MaxPositionEmbeddings {
			return nil, usagef("--prompt-ids: prompt %d has %d tokens; with --output-len %d that is %d positions (input + output − 1), beyond %s's %d",
				i+1, len(p), outputLens[0], n, cfg.Name, cfg.MaxPositionEmbeddings)
		}
	}
	return prompts, nil
}

// correctnessRecord is one line of --logits-out.
type correctnessRecord struct {
	Prompt    []int32     `json:"prompt"`
	Generated []int32     `json:"generated"`
	Logits    [][]float32 `json:"logits"`
}

// generator is what greedy generation needs: an Engine, or a
// tensor-parallel Group.
type generator interface {
	Begin(batch, inputLen, outputLen int, prompts []int32) error
	Prefill() error
	Decode() error
	NextTokens() ([]int32, error)
	Logits() ([][]float32, error)
}

// runCorrectness generates greedily from each prompt on its own (batch 1,
// so prompts may differ in length) and prints the generated ids.
// Each prompt's --logits-out record is appended whole or not at all.
func runCorrectness(e generator, prompts [][]int32, outputLen int, logitsOut string, stdout io.Writer) error {
	for i, p := range prompts {
		rec, err := generate(e, p, outputLen, logitsOut != "")
		if err != nil {
			return fmt.Errorf("prompt %d: %w", i+1, err)
		}
		fmt.Fprintf(stdout, "prompt %d: %s\n", i+1, joinIDs(rec.Generated))
		if logitsOut != "" {
			if err := report.AppendRecord(logitsOut, rec); err != nil {
				return fmt.Errorf("--logits-out %s: prompt %d: %w", logitsOut, i+1, err)
			}
		}
	}
	return nil
}

// generate runs one prompt greedily for outputLen tokens.
func generate(e generator, prompt []int32, outputLen int, withLogits bool) (correctnessRecord, error) {
	rec := correctnessRecord{Prompt: prompt}
	if err := e.Begin(1, len(prompt), outputLen, prompt); err != nil {
		return rec, err
	}
	for step := 0; step < outputLen; step++ {
		var err error
		if step == 0 {
			err = e.Prefill()
		} else {
			err = e.Decode()
		}
		if err != nil {
			return rec, fmt.Errorf("step %d: %w", step, err)
		}
		ids, err := e.NextTokens()
		if err != nil {
			return rec, fmt.Errorf("step %d: %w", step, err)
		}
		rec.Generated = append(rec.Generated, ids[0])
		if withLogits {
			logits, err := e.Logits()
			if err != nil {
				return rec, fmt.Errorf("step %d: %w", step, err)
			}
			rec.Logits = append(rec.Logits, logits[0])
		}
	}
	return rec, nil
}

func joinIDs(ids []int32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, id)
	}
	return b.String()
}
