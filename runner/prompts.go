package runner

import (
	"bufio"
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
