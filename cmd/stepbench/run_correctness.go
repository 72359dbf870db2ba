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

// correctnessRecord is one line of --logits-out. The text fields are there
// for text prompts only.
type correctnessRecord struct {
	Prompt    []int32     `json:"prompt"`
	Generated []int32     `json:"generated"`
	Logits    [][]float32 `json:"logits"`
	// PromptText is the prompt as given (before --chat wraps it), Chat
	// whether it was wrapped, GeneratedText the generated ids decoded, and
	// StoppedAt the end-of-turn token that stopped it (--stop-at-eos).
	PromptText    string `json:"prompt_text,omitempty"`
	Chat          bool   `json:"chat,omitempty"`
	GeneratedText string `json:"generated_text,omitempty"`
	StoppedAt     string `json:"stopped_at,omitempty"`
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
// so prompts may differ in length) and prints the generated ids; for text
// prompts also the prompt, its ids and the generated text. Each prompt's
// --logits-out record is appended whole or not at all.
func (f *runFlags) runCorrectness(e generator, s runSetup, stdout io.Writer) error {
	var stop map[int32]string
	if s.text != nil {
		stop = s.text.stop
	}
	for i, p := range s.prompts {
		rec, err := generate(e, p, f.shapes.output[0], f.logitsOut != "", stop)
		if err != nil {
			return fmt.Errorf("prompt %d: %w", i+1, err)
		}
		if s.text == nil {
			fmt.Fprintf(stdout, "prompt %d: %s\n", i+1, joinIDs(rec.Generated))
		} else {
			rec.PromptText, rec.Chat = s.text.texts[i], f.text.chat
			rec.GeneratedText = s.text.tok.Decode(rec.Generated)
			printTextRecord(stdout, i+1, rec)
		}
		if f.logitsOut != "" {
			if err := report.AppendRecord(f.logitsOut, rec); err != nil {
				return fmt.Errorf("--logits-out %s: prompt %d: %w", f.logitsOut, i+1, err)
			}
		}
	}
	return nil
}

// printTextRecord prints a text prompt's generation: the prompt as given,
// its ids (the chat template's included), the generated ids and their text.
func printTextRecord(w io.Writer, n int, rec correctnessRecord) {
	chat, stopped := "", ""
	if rec.Chat {
		chat = " (chat)"
	}
	if rec.StoppedAt != "" {
		stopped = ", stopped at " + rec.StoppedAt
	}
	fmt.Fprintf(w, "prompt %d%s: %q\n", n, chat, rec.PromptText)
	fmt.Fprintf(w, "prompt %d ids: %s (%d tokens)\n", n, joinIDs(rec.Prompt), len(rec.Prompt))
	fmt.Fprintf(w, "prompt %d generated: %s (%d tokens%s)\n", n, joinIDs(rec.Generated), len(rec.Generated), stopped)
	fmt.Fprintf(w, "prompt %d text: %q\n", n, rec.GeneratedText)
}

// generate runs one prompt greedily for outputLen tokens, or until a token
// of stop (which it keeps, as generate() in transformers does).
func generate(e generator, prompt []int32, outputLen int, withLogits bool, stop map[int32]string) (correctnessRecord, error) {
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
		if name, ok := stop[ids[0]]; ok {
			rec.StoppedAt = name
			break
		}
	}
	return rec, nil
}

// runRaggedCorrectness runs the prompts as one ragged batch against each
// alone (runner.RaggedAgainstAlone) and prints each sequence's agreement;
// a sequence that disagrees is exit 1.
func (f *runFlags) runRaggedCorrectness(g runner.Generator, s runSetup, stdout io.Writer) error {
	outputLen := f.shapes.output[0]
	checks, err := runner.RaggedAgainstAlone(g, s.prompts, outputLen)
	if err != nil {
		return err
	}
	lens := make([]int, len(checks))
	bad := 0
	for i, c := range checks {
		lens[i] = c.PromptLen
		verdict := "same tokens"
		switch {
		case c.FirstTokenDiffer >= 0:
			verdict = fmt.Sprintf("tokens differ from step %d", c.FirstTokenDiffer)
		case len(c.NearTies) > 0:
			verdict = fmt.Sprintf("same tokens but at near ties (step %s: the alone run's logits of both within %g of the row's largest)",
				joinInts(c.NearTies), runner.NearTieFraction)
		}
		if !c.OK() {
			bad++
		}
		fmt.Fprintf(stdout, "prompt %d (%d tokens): batch %s | alone %s: %s, logits worst rel err %.3g at step %d (bound %g)\n",
			i+1, c.PromptLen, joinIDs(c.Batch), joinIDs(c.Alone), verdict, c.WorstRelErr, c.WorstStep, runner.RaggedBound)
	}
	what := fmt.Sprintf("ragged batch of %d prompts (lengths %s), %d steps, KV cache %s", len(checks), joinInts(lens), outputLen, f.kv.options(f.seed))
	if bad > 0 {
		return fmt.Errorf("%s: %d of %d sequences differ from the same prompt alone", what, bad, len(checks))
	}
	fmt.Fprintf(stdout, "%s: every sequence generates what it generates alone\n", what)
	return nil
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
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
