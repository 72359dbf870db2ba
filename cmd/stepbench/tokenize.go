package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"stepbench/tokenizer"
)

// loadTokenizer reads DIR/tokenizer.json; a missing or bad file is bad
// input (exit 2), in one line.
func loadTokenizer(flag, dir string) (*tokenizer.Tokenizer, error) {
	if dir == "" {
		return nil, usagef("%s needs --model-path DIR holding tokenizer.json", flag)
	}
	path := filepath.Join(dir, "tokenizer.json")
	tok, err := tokenizer.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("%s: %s has no tokenizer.json", flag, dir)
	}
	if err != nil {
		return nil, usagef("%s: %v", flag, err)
	}
	return tok, nil
}

// tokenizeCmd prints the ids of a text, or with --decode the text of ids:
// stepbench tokenize --model-path DIR [TEXT | --file F].
func tokenizeCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokenize", stderr)
	var modelPath, file string
	var decode, noBOS, allowBinary bool
	fs.StringVar(&modelPath, "model-path", "", "model directory holding tokenizer.json (Hugging Face's, of the Llama-3 or Qwen2/Qwen3 kind)")
	fs.StringVar(&file, "file", "", "read the text (with --decode: the ids) from this file instead of the argument; - reads stdin")
	fs.BoolVar(&decode, "decode", false, "decode: the input is token ids separated by spaces; the text is printed as it is, without a newline of its own")
	fs.BoolVar(&noBOS, "no-bos", false, "encode without the post-processor's tokens (Llama-3: <|begin_of_text|>; Qwen adds none), as add_special_tokens=False")
	fs.BoolVar(&allowBinary, "allow-binary", false, "read a --file that is not text (NUL or control bytes, invalid UTF-8) as the bytes it holds")
	input, err := tokenizeInput(fs, args, &file, &allowBinary)
	if err != nil {
		return err
	}
	if decode && fs.Changed("no-bos") {
		return usagef("--no-bos is for encoding; --decode prints every id it is given")
	}
	tok, err := loadTokenizer("--model-path", modelPath)
	if err != nil {
		return err
	}
	if decode {
		ids, err := parseIDs(input, tok)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, tok.Decode(ids))
		return err
	}
	ids := tok.Encode(input)
	if noBOS {
		ids = tok.EncodePlain(input)
	}
	_, err = fmt.Fprintln(stdout, joinIDs(ids))
	return err
}

// tokenizeInput parses the flags and returns the input: the one TEXT
// argument, or the --file's contents (standard input for -).
func tokenizeInput(fs *pflag.FlagSet, args []string, file *string, allowBinary *bool) (string, error) {
	fs.SetInterspersed(true)
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(out, "usage of %s --model-path DIR [TEXT | --file F]:\n", fs.Name())
		fs.PrintDefaults()
		return "", err
	}
	if err != nil {
		return "", usageError{err}
	}
	switch n := fs.NArg(); {
	case *file != "" && n > 0:
		return "", usagef("give TEXT or --file, not both")
	case *file == "" && n != 1:
		return "", usagef("want one TEXT argument (quote it) or --file F, got %d arguments", n)
	case *file == "":
		return fs.Arg(0), nil
	}
	data, err := readText("--file", *file, *allowBinary, "--allow-binary")
	return string(data), err
}

// parseIDs reads token ids separated by white space; each must be a token
// of tok.
func parseIDs(input string, tok *tokenizer.Tokenizer) ([]int32, error) {
	fields := strings.Fields(input)
	ids := make([]int32, len(fields))
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, usagef("--decode: token %d %q is not an integer id", i+1, f)
		}
		if !tok.Known(int32(v)) {
			return nil, usagef("--decode: token %d: id %d is not in the tokenizer (ids 0..%d)", i+1, v, tok.Size()-1)
		}
		ids[i] = int32(v)
	}
	return ids, nil
}
