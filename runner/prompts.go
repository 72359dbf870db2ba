package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxPromptFileBytes bounds a --prompt-ids file.
const MaxPromptFileBytes = 64 << 20

// ParsePromptIDs reads prompts for the correctness mode: one prompt per
// line, its token ids separated by spaces or tabs. Blank lines and lines
// starting with '#' are skipped. Every id must lie in [0, vocab). name is
// used in errors (the file's path).
func ParsePromptIDs(r io.Reader, name string, vocab int) ([][]int32, error) {
	var prompts [][]int32
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		ids := make([]int32, len(fields))
		for i, f := range fields {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: token %d %q is not an integer id", name, line, i+1, f)
			}
			if v < 0 || v >= int64(vocab) {
				return nil, fmt.Errorf("%s:%d: token id %d outside the vocabulary [0, %d)", name, line, v, vocab)
			}
			ids[i] = int32(v)
		}
		prompts = append(prompts, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("%s: no prompts (one prompt per line, token ids separated by spaces)", name)
	}
	return prompts, nil
}

// ParsePromptText reads text prompts: one prompt per line (the line's end,
// "\n" or "\r\n", is not part of it), or JSON lines with a "prompt" string
// (a prompt with line breaks of its own). A file whose first non-empty line
// is a JSON object is read as JSON lines. Empty lines are skipped. name is
// used in errors (the file's path).
func ParsePromptText(r io.Reader, name string) ([]string, error) {
	var prompts []string
	br := bufio.NewReader(r)
	jsonl := false
	for line := 1; ; line++ {
		text, err := br.ReadString('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		text = strings.TrimSuffix(strings.TrimSuffix(text, "\n"), "\r")
		if text != "" {
			if len(prompts) == 0 && !jsonl {
				trimmed := bytes.TrimSpace([]byte(text))
				jsonl = len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed)
			}
			if jsonl {
				var rec struct {
					Prompt *string `json:"prompt"`
				}
				if json.Unmarshal([]byte(text), &rec) != nil || rec.Prompt == nil {
					return nil, fmt.Errorf("%s:%d: not a JSON object with a \"prompt\" string (the file is JSON lines: its first line is a JSON object)", name, line)
				}
				text = *rec.Prompt
			}
			if text != "" {
				prompts = append(prompts, text)
			}
		}
		if err == io.EOF {
			break
		}
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("%s: no prompts (one per line, or JSON lines with a \"prompt\" field)", name)
	}
	return prompts, nil
}
