package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"stepbench/internal/input"
	"stepbench/runner"
	"stepbench/tokenizer"
)

// textFlags are run's text prompts: --prompt and --prompt-file for
// --correctness-test, --prompt-file also for timing on real text.
type textFlags struct {
	prompts     []string
	promptFile  string
	allowBinary bool // --allow-binary-prompts: a --prompt-file's bytes are meant
	chat        bool
	stopAtEOS   bool
}

func (t *textFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&t.prompts, "prompt", nil, "with --correctness-test: a text prompt, encoded with --model-path's tokenizer.json (repeat for more)")
	registerPromptFile(fs, t, "for --correctness-test, or ")
	fs.BoolVar(&t.chat, "chat", false, "with --correctness-test: wrap each text prompt in the tokenizer's chat template, Llama-3-Instruct's or ChatML (Qwen) (a user turn, then the assistant's header)")
	fs.BoolVar(&t.stopAtEOS, "stop-at-eos", false, "with --correctness-test and text prompts: stop a prompt's generation at <|eot_id|> or <|end_of_text|> (Qwen: <|im_end|> or <|endoftext|>)")
}

// registerPromptFile adds --prompt-file and --allow-binary-prompts (run's
// and ab's).
func registerPromptFile(fs *pflag.FlagSet, t *textFlags, what string) {
	fs.StringVar(&t.promptFile, "prompt-file", "", "text prompts, one per line or JSON lines with a \"prompt\" field: "+what+
		"timed iterations whose rows are cut from them (as SGLang's random dataset) instead of random ids")
	fs.BoolVar(&t.allowBinary, "allow-binary-prompts", false, "read a --prompt-file that is not text (NUL or control bytes, invalid UTF-8) as the bytes it holds, which the tokenizer encodes byte by byte")
}

// maxPromptTextBytes bounds a --prompt-file (and tokenize's --file).
const maxPromptTextBytes = 64 << 20

// readText reads a text file a flag names: a regular file of at most
// maxPromptTextBytes ("-": standard input) that is text (input.CheckText)
// unless allowBinary, whose flag the refusal names.
func readText(flag, path string, allowBinary bool, allowFlag string) ([]byte, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = input.ReadAll(os.Stdin, maxPromptTextBytes, "standard input", flag)
	} else {
		data, err = input.ReadFile(path, maxPromptTextBytes, flag)
	}
	if err != nil {
		return nil, usagef("%s: %v", flag, err)
	}
	if !allowBinary {
		if err := input.CheckText(data); err != nil {
			return nil, usagef("%s %s: %v (a binary file?); %s reads its bytes as they are", flag, path, err, allowFlag)
		}
	}
	return data, nil
}

// given says whether text prompts were given.
func (t *textFlags) given() bool { return len(t.prompts) > 0 || t.promptFile != "" }

// textPrompts are a run's prompts given as text: the tokenizer, each
// prompt's text and the ids generation stops at (--stop-at-eos).
type textPrompts struct {
	tok   *tokenizer.Tokenizer
	texts []string
	stop  map[int32]string
}

// read returns the texts: --prompt's, then --prompt-file's.
func (t *textFlags) read() ([]string, error) {
	texts := append([]string(nil), t.prompts...)
	if t.promptFile == "" {
		return texts, nil
	}
	data, err := readText("--prompt-file", t.promptFile, t.allowBinary, "--allow-binary-prompts")
	if err != nil {
		return nil, err
	}
	fromFile, err := runner.ParsePromptText(bytes.NewReader(data), t.promptFile)
	if err != nil {
		return nil, usagef("--prompt-file: %v", err)
	}
	return append(texts, fromFile...), nil
}

// encode reads the texts and encodes them with dir's tokenizer.json
// (which must fit the model's vocabulary): with the post-processor's BOS,
// or with --chat as the chat template's text; for timing (bos false)
// without the BOS.
func (t *textFlags) encode(dir string, cfg runner.Config, bos bool) (*textPrompts, [][]int32, error) {
	flag := "--prompt-file"
	if len(t.prompts) > 0 {
		flag = "--prompt"
	}
	tok, err := loadTokenizer(flag, dir)
	if err != nil {
		return nil, nil, err
	}
	if tok.Size() > cfg.VocabSize {
		return nil, nil, usagef("%s: %s/tokenizer.json has %d ids, more than the model's vocab_size %d", flag, dir, tok.Size(), cfg.VocabSize)
	}
	texts, err := t.read()
	if err != nil {
		return nil, nil, err
	}
	var chat tokenizer.Chat
	if t.chat {
		if chat, err = tok.Chat(); err != nil {
			return nil, nil, usagef("--chat: %s/tokenizer.json %v", dir, err)
		}
	}
	tp := &textPrompts{tok: tok, texts: texts, stop: map[int32]string{}}
	if t.stopAtEOS {
		for _, name := range tokenizer.EndOfTurn {
			if id, ok := tok.TokenID(name); ok {
				tp.stop[id] = name
			}
		}
		if len(tp.stop) == 0 {
			return nil, nil, usagef("--stop-at-eos: %s/tokenizer.json has none of %v", dir, tokenizer.EndOfTurn)
		}
	}
	prompts := make([][]int32, len(texts))
	for i, text := range texts {
		switch {
		case t.chat:
			prompts[i] = tok.EncodePlain(chat.Render(text))
		case bos:
			prompts[i] = tok.Encode(text)
		default:
			prompts[i] = tok.EncodePlain(text)
		}
		if len(prompts[i]) == 0 {
			return nil, nil, usagef("%s: prompt %d (%q) has no tokens", flag, i+1, text)
		}
	}
	return tp, prompts, nil
}

// correctnessPrompts are --correctness-test's prompts: --prompt-ids' ids,
// or the text prompts encoded; each must fit the model's positions.
func (f *runFlags) correctnessPrompts(cfg runner.Config) ([][]int32, *textPrompts, error) {
	if !f.text.given() {
		prompts, err := readPrompts(f.promptIDs, cfg, f.shapes.output)
		return prompts, nil, err
	}
	text, prompts, err := f.text.encode(f.serving.tokenizerDir(f.model.modelPath), cfg, true)
	if err != nil {
		return nil, nil, err
	}
	for i, p := range prompts {
		if n := len(p) + f.shapes.output[0]; n > cfg.MaxPositionEmbeddings {
			return nil, nil, usagef("prompt %d has %d tokens; with --output-len %d that is %d positions, beyond %s's %d",
				i+1, len(p), f.shapes.output[0], n, cfg.Name, cfg.MaxPositionEmbeddings)
		}
	}
	return prompts, text, nil
}

// timingPrompts are the tokenized prompts of run --prompt-file (without
// BOS); stderr says how many rows they give before one repeats.
func (f *runFlags) timingPrompts(cfg runner.Config, stderr io.Writer) ([][]int32, error) {
	return timingPrompts(&f.text, f.serving.tokenizerDir(f.model.modelPath), cfg, stderr)
}

// timingPrompts are t's --prompt-file tokenized with dir's tokenizer.json,
// without BOS, for timed iterations (run's and ab's).
func timingPrompts(t *textFlags, dir string, cfg runner.Config, stderr io.Writer) ([][]int32, error) {
	_, prompts, err := t.encode(dir, cfg, false)
	if err != nil {
		return nil, err
	}
	tokens, shortest := 0, len(prompts[0])
	for _, p := range prompts {
		tokens, shortest = tokens+len(p), min(shortest, len(p))
	}
	fmt.Fprintf(stderr, "stepbench: --prompt-file %s: %d prompts, %d tokens; a shape's first %d rows (warmups included) start at distinct places\n",
		t.promptFile, len(prompts), tokens, len(prompts)*shortest)
	return prompts, nil
}
