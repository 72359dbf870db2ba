package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"stepbench/tokenizer/tokenizertest"
)

func qwenSynthetic(t *testing.T) *Tokenizer {
	t.Helper()
	data, err := tokenizertest.QwenJSON(1024)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data, "qwen")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// A tokenizer of Qwen's kind (tokenizertest.QwenJSON: Qwen3's layout, added
// tokens, pattern and normalizer, with merges learned from English, digit
// pairs among them): NFC first, one digit a piece, the added tokens matched
// before, no template.
func TestQwenKind(t *testing.T) {
	tok, llama := qwenSynthetic(t), syntheticTokenizer(t)
	if tok.Size() > 1024 || tok.Size() < 600 {
		t.Errorf("Size() = %d, want at most 1024 (the merges the training text yields)", tok.Size())
	}
	if a, b := tok.Encode("cafe\u0301 A\u030a"), tok.Encode("café Å"); !slices.Equal(a, b) {
		t.Errorf("NFC: %v for the decomposed text, %v for the composed", a, b)
	}
	if got := tok.Decode(tok.Encode("cafe\u0301")); got != "café" {
		t.Errorf("decode(encode(cafe+U+0301)) = %q, want the NFC form", got)
	}
	if a, b := llama.Encode("cafe\u0301"), llama.Encode("café"); slices.Equal(a, b) {
		t.Error("Llama-3 (no normalizer) encodes decomposed and composed text alike")
	}
	four := tok.byteIDs['4']
	if got := tok.Encode("4444"); !slices.Equal(got, []int32{four, four, four, four}) {
		t.Errorf("Encode(4444) = %v, want four times the byte token of 4 (%d)", got, four)
	}
	if got := llama.EncodePlain("4444"); len(got) >= 4 {
		t.Errorf("Llama-3 EncodePlain(4444) = %v, want the pieces 444 and 4 merged", got)
	}
	if got := tok.Encode(""); len(got) != 0 {
		t.Errorf("Encode(\"\") = %v: Qwen has no BOS", got)
	}
	start, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	think, _ := tok.TokenID("<think>")
	ids := tok.Encode(ChatML("hi"))
	if ids[0] != start || !slices.Contains(ids, end) || !slices.Equal(ids, tok.EncodePlain(ChatML("hi"))) {
		t.Errorf("Encode(ChatML(hi)) = %v: want <|im_start|> (%d) first, <|im_end|> (%d) in it, and no template", ids, start, end)
	}
	if !tok.IsSpecial(start) || tok.IsSpecial(think) || think != int32(tok.Size()-2) {
		t.Errorf("<|im_start|> special %v, <think> special %v at %d: want true, false at %d", tok.IsSpecial(start), tok.IsSpecial(think), think, tok.Size()-2)
	}
	for _, s := range append(corpus()[:300], nfcCorpus()...) {
		got, want := tok.Decode(tok.Encode(s)), string(validUTF8([]byte(s)))
		if norm.NFC.String(got) != norm.NFC.String(want) {
			t.Errorf("decode(encode(%q)) = %q, not canonically equivalent to it", s, got)
		}
	}
	// NFC normalizes the text between added tokens, each part apart: > and
	// U+0338 compose to ≯, but not across the end of <|im_end|>.
	if got := tok.Decode(tok.Encode("<|im_end|>\u0338 >\u0338")); got != "<|im_end|>\u0338 \u226f" {
		t.Errorf("decode(encode(<|im_end|>+U+0338 >+U+0338)) = %q, want the first mark kept, the second composed", got)
	}
}

// The chat template follows the tokenizer: ChatML for Qwen's, Llama-3's for
// Llama-3's; with neither set of tokens it says what each lacks.
func TestChatTemplates(t *testing.T) {
	if got, want := ChatML("  hi "), "<|im_start|>user\n  hi <|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("ChatML = %q, want %q (the message as it is)", got, want)
	}
	for _, c := range []struct {
		tok  *Tokenizer
		want string
	}{{qwenSynthetic(t), "ChatML (Qwen)"}, {syntheticTokenizer(t), "Llama-3-Instruct"}} {
		chat, err := c.tok.Chat()
		if err != nil || chat.Name != c.want {
			t.Errorf("Chat() = %q, %v; want %s", chat.Name, err, c.want)
		}
	}
	data, err := tokenizertest.QwenJSON(1024)
	if err != nil {
		t.Fatal(err)
	}
	// (json.Marshal wrote < and > as \u003c and \u003e.)
	tok, err := Parse([]byte(strings.ReplaceAll(string(data), "im_end", "im_stop")), "qwen")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tok.Chat()
	if want := `["<|im_end|>"] (ChatML (Qwen)'s)`; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "<|start_header_id|>") {
		t.Errorf("Chat() without <|im_end|>: %v, want it to name %s and Llama-3's", err, want)
	}
}

// A file of Qwen's kind with what stepbench does not implement is refused
// in one line naming the field.
func TestBadQwenFiles(t *testing.T) {
	data, err := tokenizertest.QwenJSON(1024)
	if err != nil {
		t.Fatal(err)
	}
	good := string(data)
	for _, c := range []struct{ old, new, want string }{
		{`"type": "NFC"`, `"type": "NFKC"`, "normalizer NFKC is not supported"},
		{`\\p{N}|`, `\\p{N}{1,2}|`, "pretokenizers[0].pattern.Regex) is neither Llama-3's nor Qwen2's"},
		{`"continuing_subword_prefix": ""`, `"continuing_subword_prefix": "##"`, "subword prefix"},
		{`"rstrip": false`, `"rstrip": true`, "lstrip, rstrip or single_word"},
		{`"use_regex": false`, `"use_regex": true`, "use_regex"}, // the last: the pre-tokenizer's (keys are sorted)
	} {
		at := strings.LastIndex(good, c.old)
		if at < 0 {
			t.Fatalf("the Qwen file lacks %q", c.old)
		}
		_, err := Parse([]byte(good[:at]+c.new+good[at+len(c.old):]), "qwen/tokenizer.json")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "qwen/tokenizer.json: ") {
			t.Errorf("%s -> %s: %v, want %q", c.old, c.new, err, c.want)
		}
	}
}

// Any text encodes, with a tokenizer of Qwen's kind, to known ids that
// decode to text canonically equivalent to it.
func FuzzEncodeQwen(f *testing.F) {
	for _, s := range append(corpus()[:100], nfcCorpus()...) {
		f.Add(s)
	}
	data, err := tokenizertest.QwenJSON(1024)
	if err != nil {
		f.Fatal(err)
	}
	tok, err := Parse(data, "qwen")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if !tok.Known(id) {
				t.Fatalf("encode(%q) gave unknown id %d", s, id)
			}
		}
		if got, want := tok.Decode(ids), string(validUTF8([]byte(s))); norm.NFC.String(got) != norm.NFC.String(want) {
			t.Errorf("decode(encode(%q)) = %q, not canonically equivalent to it", s, got)
		}
	})
}
