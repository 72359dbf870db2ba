package tokenizer

import (
	"fmt"
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

// ChatML renders one user message as Qwen3's chat template (ChatML) does
// with add_generation_prompt, no system message and no tools (the template
// of Qwen's tokenizer_config.json, written out):
//
//	<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n
//
// The message is written as it is (Qwen's template does not trim it), and
// there is no BOS: encode the result with EncodePlain (for Qwen, Encode
// adds nothing either). Qwen2.5-Instruct's template also writes a default
// system message ("You are Qwen, created by Alibaba Cloud. You are a
// helpful assistant.") when none is given, and Qwen3's with
// enable_thinking=false an empty <think></think>; this one writes neither.
func ChatML(user string) string {
	return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
}

// EndOfTurn are the tokens a generation ends with: Llama-3's <|eot_id|>
// (Instruct's end of turn) and <|end_of_text|> (the base model's end),
// Qwen's <|im_end|> (ChatML's end of turn) and <|endoftext|> (the base
// model's end). A tokenizer has the ones of its kind.
var EndOfTurn = []string{"<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>"}

// Llama3ChatTokens are the added tokens Llama3Chat's text holds: a
// tokenizer without one of them would encode it as plain text.
var Llama3ChatTokens = []string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}

// ChatMLTokens are the added tokens ChatML's text holds.
var ChatMLTokens = []string{"<|im_start|>", "<|im_end|>"}

// Chat is a chat template written out in Go.
type Chat struct {
	Name   string                   // "Llama-3-Instruct", "ChatML (Qwen)"
	Tokens []string                 // the added tokens its text holds
	Render func(user string) string // one user message, then the assistant's turn
}

// Chat returns the chat template whose added tokens t has: Llama-3-Instruct's
// (Llama3Chat) or ChatML (Qwen2, Qwen2.5, Qwen3). With neither it says which
// tokens each lacks: the template's would be encoded as plain text.
func (t *Tokenizer) Chat() (Chat, error) {
	chats := []Chat{
		{"Llama-3-Instruct", Llama3ChatTokens, Llama3Chat},
		{"ChatML (Qwen)", ChatMLTokens, ChatML},
	}
	var lacks []string
	for _, c := range chats {
		missing := t.Missing(c.Tokens)
		if len(missing) == 0 {
			return c, nil
		}
		lacks = append(lacks, fmt.Sprintf("%q (%s's)", missing, c.Name))
	}
	return Chat{}, fmt.Errorf("has no added tokens %s: the chat template's would be encoded as text", strings.Join(lacks, " nor "))
}

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
