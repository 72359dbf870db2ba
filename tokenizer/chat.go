package tokenizer

import (
	"strings"
	"unicode"
)

// Llama3Chat renders one user message as Llama-3-Instruct's chat template
// does with add_generation_prompt (the template of Meta's
// tokenizer_config.json, written out):
//
//	<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n
//	{message, trimmed}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n
//
// The template trims the message (Jinja's trim is Python's str.strip). Encode
// the result with EncodePlain: it holds its own <|begin_of_text|>. Llama-3.1's
// template also writes a system header with a knowledge cutoff and today's
// date when no system message is given; this one does not.
func Llama3Chat(user string) string {
	return "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + pythonStrip(user) +
		"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
}

// pythonStrip is Python's str.strip(): White_Space and the separators
// U+001C..U+001F, which Python also counts as whitespace.
func pythonStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) })
}

// EndOfTurn are the tokens a Llama-3 generation ends with: <|eot_id|>
// (Instruct's end of turn) and <|end_of_text|> (the base model's end).
var EndOfTurn = []string{"<|eot_id|>", "<|end_of_text|>"}

// Llama3ChatTokens are the added tokens Llama3Chat's text holds: a
// tokenizer without one of them would encode it as plain text.
var Llama3ChatTokens = []string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}

// Missing are those of contents that are no added token of t, in order.
func (t *Tokenizer) Missing(contents []string) []string {
	var out []string
	for _, c := range contents {
		if _, ok := t.TokenID(c); !ok {
			out = append(out, c)
		}
	}
	return out
}
