package tokenizer

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"stepbench/tokenizer/tokenizertest"
)

// synthetic is a small tokenizer of the Llama-3 kind (tokenizertest),
// built once per test binary.
var synthetic = sync.OnceValues(func() (*Tokenizer, error) {
	data, err := tokenizertest.JSON(1024, false)
	if err != nil {
		return nil, err
	}
	return Parse(data, "synthetic")
})

func syntheticTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	tok, err := synthetic()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// The pieces of Llama-3's pattern, worked out from the regular expression
// under Oniguruma's semantics (the library's engine). The last rows are
// where llama3-tokenizer-js (JavaScript's \s and [sS]) would differ, so the
// corpus comparison leaves them to this test.
func TestSplitLlama3(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello world", []string{"Hello", " world"}},
		{"Hello  world", []string{"Hello", " ", " world"}},
		{"it's IT'S it'Ll", []string{"it", "'s", " IT", "'S", " it", "'Ll"}},
		{"'hello 'sand", []string{"'hello", " '", "sand"}},
		{"1234567", []string{"123", "456", "7"}},
		{" 123", []string{" ", "123"}},
		{"a\n\nb", []string{"a", "\n\n", "b"}},
		{"a \n b", []string{"a", " \n", " b"}},
		{"  \n  x", []string{"  \n", " ", " x"}},
		{"x   ", []string{"x", "   "}},
		{"x!!!\n\ny", []string{"x", "!!!\n\n", "y"}},
		{" !! ?", []string{" !!", " ?"}},
		{"\thello\t\tx", []string{"\thello", "\t", "\tx"}},
		{"(hello)", []string{"(hello", ")"}},
		{"a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},
		{"中文 text", []string{"中文", " text"}},
		{"e\u0301", []string{"e", "\u0301"}},
		{"x²½", []string{"x", "²½"}},
		// JavaScript's \s lacks U+0085 and has U+FEFF; Oniguruma's is the
		// White_Space property, the other way round.
		{"a\u0085\u0085b", []string{"a", "\u0085", "\u0085b"}},
		{"\ufeff\ufeffx", []string{"\ufeff\ufeff", "x"}},
		// Case-insensitive is case folding: 'ſ' (U+017F) is an s.
		{"x'ſ", []string{"x", "'ſ"}},
	} {
		if got := pieces(c.in, 3); !slices.Equal(got, c.want) {
			t.Errorf("split %q = %q, want %q", c.in, got, c.want)
		}
	}
}

// pieces are the pieces split cuts s into.
func pieces(s string, digits int) []string {
	var out []string
	start := 0
	for _, end := range split(s, nil, digits) {
		out = append(out, s[start:end])
		start = end
	}
	return out
}

// Qwen2's pattern is Llama-3's with every digit (\p{N}) a piece of its own;
// the rest is cut as Llama-3's is.
func TestSplitQwen2(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"1234567", []string{"1", "2", "3", "4", "5", "6", "7"}},
		{" 123", []string{" ", "1", "2", "3"}},
		{"v1.25x", []string{"v", "1", ".", "2", "5", "x"}},
		{"x²½", []string{"x", "²", "½"}},
		{"٣٤ and 42", []string{"٣", "٤", " and", " ", "4", "2"}},
		{"it's IT'S", []string{"it", "'s", " IT", "'S"}},
		{"  \n  x", []string{"  \n", " ", " x"}},
		{"中文123text", []string{"中文", "1", "2", "3", "text"}},
	} {
		if got := pieces(c.in, 1); !slices.Equal(got, c.want) {
			t.Errorf("split %q = %q, want %q", c.in, got, c.want)
		}
	}
	if digitRun(Qwen2Pattern) != 1 || digitRun(Llama3Pattern) != 3 || digitRun(strings.Replace(Qwen2Pattern, `\p{N}|`, `\p{N}+|`, 1)) != 0 {
		t.Error("digitRun does not tell the two patterns (and no third) apart")
	}
}

// Ill-formed UTF-8 becomes one U+FFFD per maximal subpart (the bytes of a
// truncated sequence are one; a byte that can start nothing is one).
func TestValidUTF8(t *testing.T) {
	const r = "\uFFFD"
	for _, c := range []struct{ in, want string }{
		{"héllo", "héllo"},
		{"a\xffb", "a" + r + "b"},
		{"\xc3(", r + "("},
		{"\xe2\x82(", r + "("},
		{"\xe2\x82", r},
		{"\xf0\x9f\xa6", r},
		{"\xc0\x80", r + r},
		{"\xe0\x80\x80", r + r + r},
		{"\xed\xa0\x80", r + r + r},
		{"\xf4\x90\x80\x80", r + r + r + r},
		{"\xf8\x88\x80\x80\x80", r + r + r + r + r},
		{"\xe6\x97\xa5\xe6\x9c", "日" + r},
	} {
		if got := string(validUTF8([]byte(c.in))); got != c.want {
			t.Errorf("validUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// BPE merges the pair of lowest rank first, the leftmost among equals: with
// merges "~ ~" then "~ `", "~~`" is [~~, `], not [~, ~`]; "~~~" is [~~, ~].
func TestBPEMergeOrder(t *testing.T) {
	data := strings.Replace(string(mustJSON(t)), `"merges": [`, `"merges": ["~ ~", "~ `+"`"+`", `, 1)
	data = strings.Replace(data, `"vocab": {`, `"vocab": {"~~": 2000, "~`+"`"+`": 2001, `, 1)
	tok, err := Parse([]byte(data), "order")
	if err != nil {
		t.Fatal(err)
	}
	tt, tq, tilde, quote := int32(2000), int32(2001), tok.byteIDs['~'], tok.byteIDs['`']
	for _, c := range []struct {
		in   string
		want []int32
	}{{"~~`", []int32{tt, quote}}, {"~~~", []int32{tt, tilde}}, {"~~~~", []int32{tt, tt}}, {"~`", []int32{tq}}, {"`~", []int32{quote, tilde}}} {
		if got := tok.bpe([]byte(c.in), nil, &scratch{}); !slices.Equal(got, c.want) {
			t.Errorf("bpe(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func mustJSON(t *testing.T) []byte {
	t.Helper()
	data, err := tokenizertest.JSON(1024, false)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The post-processor's BOS comes first; added tokens are matched before
// BPE, leftmost-longest; decode gives every valid string back.
func TestEncodeDecode(t *testing.T) {
	tok := syntheticTokenizer(t)
	bos, _ := tok.TokenID("<|begin_of_text|>")
	eot, _ := tok.TokenID("<|eot_id|>")
	if ids := tok.Encode("Hello"); ids[0] != bos || slices.Contains(ids[1:], bos) {
		t.Errorf("Encode(Hello) = %v: want <|begin_of_text|> (%d) first, once", ids, bos)
	}
	if ids := tok.EncodePlain(""); len(ids) != 0 {
		t.Errorf("EncodePlain(\"\") = %v", ids)
	}
	if ids := tok.Encode(""); !slices.Equal(ids, []int32{bos}) {
		t.Errorf("Encode(\"\") = %v, want [%d]", ids, bos)
	}
	ids := tok.EncodePlain("a<|eot_id|>b<|eot_id|><|eot_id|>")
	if n := strings.Count(tok.Decode(ids), "<|eot_id|>"); n != 3 || !slices.Contains(ids, eot) {
		t.Errorf("special tokens: %v decodes to %q", ids, tok.Decode(ids))
	}
	for _, s := range append(corpus()[:500], "The capital of France is Paris.", "<|start_header_id|>user<|end_header_id|>\n\nhi") {
		ids := tok.EncodePlain(s)
		want := s
		if !utf8.ValidString(s) {
			want = string(validUTF8([]byte(s)))
		}
		if got := tok.Decode(ids); got != want {
			t.Errorf("decode(encode(%q)) = %q", s, got)
		}
		for _, id := range ids {
			if !tok.Known(id) {
				t.Fatalf("encode(%q) gave id %d, not in the vocabulary", s, id)
			}
		}
	}
	if tok.Size() != 1024 {
		t.Errorf("Size() = %d, want 1024", tok.Size())
	}
}

// Bad tokenizer files are refused in one line that says what is wrong.
func TestBadFiles(t *testing.T) {
	good := string(mustJSON(t))
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("the synthetic file lacks %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	for _, c := range []struct{ name, data, want string }{
		{"not JSON", "{\"model\": ", "not JSON"},
		{"not JSON at all", "llama", "not JSON"},
		{"WordPiece", `{"model": {"type": "WordPiece", "vocab": {}}}`, "model type WordPiece is not supported"},
		{"Unigram", `{"model": {"type": "Unigram", "vocab": []}}`, "model type Unigram is not supported"},
		{"Llama-2", replace(`"byte_fallback": false`, `"byte_fallback": true`), "SentencePiece, the Llama-2 kind"},
		{"no type", replace(`"type": "BPE"`, `"kind": "BPE"`), "the model has no type"},
		{"merge of an unknown token", replace(`"merges": [`, `"merges": ["Ġzzzq a", `), `names "Ġzzzq", which is not in model.vocab`},
		{"merge making an unknown token", replace(`"merges": [`, `"merges": ["x q", `), `makes "xq", which is not in model.vocab`},
		{"bad merge string", replace(`"merges": [`, `"merges": ["a b c", `), "not two tokens separated by one space"},
		{"merges null", regexp.MustCompile(`"merges": \[[^\]]*\]`).ReplaceAllString(good, `"merges": null`), "model.merges is missing or null"},
		{"no merges", regexp.MustCompile(`"merges": \[[^\]]*\],?`).ReplaceAllString(good, ``), "model.merges is missing or null"},
		{"duplicate vocab id", replace(`"vocab": {`, `"vocab": {"zzz": 5, `), "duplicate id 5"},
		{"token listed twice", replace(`"vocab": {`, `"vocab": {"!": 33, `), `lists token "!" twice`},
		{"added token on a vocab id", replace(`"id": 1016,`, `"id": 7,`), "duplicate id 7"},
		{"normalizer", replace(`"normalizer": null`, `"normalizer": {"type": "NFKC"}`), "normalizer NFKC is not supported"},
		{"normalizer sequence", replace(`"normalizer": null`, `"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]}`), "normalizer Sequence is not supported"},
		{"another pattern", replace(`\\p{N}{1,3}`, `\\p{N}+`), "its Split pattern (pretokenizers[0].pattern.Regex) is neither Llama-3's nor Qwen2's"},
		{"GPT-2 pre-tokenizer", replace(`"use_regex": false`, `"use_regex": true`), "splits by its own regex"},
		{"missing byte", replace(`"!": 33,`, ``), "no token \"!\" for byte 0x21"},
		{"lstrip", replace(`"lstrip": false`, `"lstrip": true`), "lstrip, rstrip or single_word"},
		{"post-processor", replace(`"type": "TemplateProcessing"`, `"type": "RobertaProcessing"`), "RobertaProcessing is not supported"},
		{"truncation", replace(`"truncation": null`, `"truncation": {"max_length": 512, "strategy": "LongestFirst"}`), "truncation or padding is set"},
		{"padding", replace(`"padding": null`, `"padding": {"strategy": {"Fixed": 64}}`), "truncation or padding is set"},
	} {
		_, err := Parse([]byte(c.data), "dir/tokenizer.json")
		switch {
		case err == nil:
			t.Errorf("%s: accepted", c.name)
		case !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "dir/tokenizer.json: ") || strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error %q, want one line with %q", c.name, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// The merges may be pairs: the same tokenizer.
func TestMergePairs(t *testing.T) {
	data, err := tokenizertest.JSON(1024, true)
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := Parse(data, "pairs")
	if err != nil {
		t.Fatal(err)
	}
	tok := syntheticTokenizer(t)
	for _, s := range corpus()[:300] {
		if a, b := tok.Encode(s), pairs.Encode(s); !slices.Equal(a, b) {
			t.Errorf("%q: %v with \"a b\" merges, %v with pairs", s, a, b)
		}
	}
}

// benchmarkText is 1 MB of the corpus's prose and code.
func benchmarkText() string {
	var b strings.Builder
	for b.Len() < 1<<20 {
		for _, s := range append(append([]string{}, prose...), code...) {
			b.WriteString(s)
			b.WriteString("\n")
		}
	}
	return b.String()[:1<<20]
}

// BenchmarkEncode1MB encodes 1 MB of text with Meta's vocabulary when the
// oracle is set up (make oracle), else with the synthetic one.
func BenchmarkEncode1MB(b *testing.B) {
	tok := syntheticTokenizer(b)
	if dir, _ := oracleDir(); dir != "" {
		var err error
		if tok, err = Load(filepath.Join(dir, "tokenizer.json")); err != nil {
			b.Fatal(err)
		}
		b.Logf("vocabulary: llama3-tokenizer-js's (%d ids)", tok.Size())
	} else {
		b.Logf("vocabulary: synthetic (%d ids); make oracle for Meta's", tok.Size())
	}
	text := benchmarkText()
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		tok.Encode(text)
	}
}

func FuzzParse(f *testing.F) {
	small, err := tokenizertest.JSON(300, true)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	qwen, err := tokenizertest.QwenJSON(300)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(qwen)
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data, "fuzz")
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("a multi-line error: %q", err)
			}
			return
		}
		text := "Hello, world! <|eot_id|> 123 'll \xff"
		if got, want := tok.Decode(tok.EncodePlain(text)), string(validUTF8([]byte(text))); got != want {
			t.Errorf("decode(encode(%q)) = %q", text, got)
		}
	})
}

func FuzzEncode(f *testing.F) {
	for _, s := range corpus()[:200] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := syntheticTokenizer(t)
		ids := tok.Encode(s)
		for _, id := range ids {
			if !tok.Known(id) {
				t.Fatalf("encode(%q) gave unknown id %d", s, id)
			}
		}
		bos := tok.Decode(tok.prefix)
		if got, want := tok.Decode(ids), bos+string(validUTF8([]byte(s))); got != want {
			t.Errorf("decode(encode(%q)) = %q, want %q", s, got, want)
		}
	})
}

// Load reads a file from disk, as the CLI does.
func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, mustJSON(t), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode(tok.Encode("round trip")); got != "<|begin_of_text|>round trip" {
		t.Errorf("got %q", got)
	}
}

// The chat prompt is the template's text; its special tokens encode as
// themselves and it holds one BOS.
func TestLlama3Chat(t *testing.T) {
	got := Llama3Chat("  What is 2+2?\n\x1f")
	want := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Fatalf("Llama3Chat = %q, want %q", got, want)
	}
	tok := syntheticTokenizer(t)
	ids := tok.EncodePlain(got)
	var specials []string
	for _, id := range ids {
		if tok.IsSpecial(id) {
			specials = append(specials, tok.Decode([]int32{id}))
		}
	}
	wantSpecials := []string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"}
	if !slices.Equal(specials, wantSpecials) {
		t.Errorf("special tokens %q, want %q", specials, wantSpecials)
	}
}

// The chat template around any user text: the encoding starts with BOS and
// the user header, ends with the assistant header, and decodes back to the
// template's text (invalid UTF-8 repaired as the library does); the
// tokenizer lacks none of its tokens; nothing panics.
func FuzzLlama3Chat(f *testing.F) {
	for _, s := range []string{"What is 2+2?", "  \x1f\n", "<|eot_id|> inside", "\xff\xfe", "日本語", ""} {
		f.Add(s)
	}
	tok := syntheticTokenizer(f)
	if missing := tok.Missing(Llama3ChatTokens); len(missing) > 0 {
		f.Fatalf("the synthetic tokenizer lacks %q", missing)
	}
	bos, _ := tok.TokenID("<|begin_of_text|>")
	header, _ := tok.TokenID("<|start_header_id|>")
	end, _ := tok.TokenID("<|end_header_id|>")
	f.Fuzz(func(t *testing.T, user string) {
		text := Llama3Chat(user)
		ids := tok.EncodePlain(text)
		if len(ids) < 6 || ids[0] != bos || ids[1] != header {
			t.Fatalf("Llama3Chat(%q) encodes as %v", user, ids)
		}
		lastEnd := len(ids) - 1
		for lastEnd >= 0 && ids[lastEnd] != end {
			lastEnd--
		}
		if lastEnd < 0 || tok.Decode(ids[lastEnd:]) != "<|end_header_id|>\n\n" {
			t.Errorf("Llama3Chat(%q) does not end with the assistant's header: %v", user, ids)
		}
		if got, want := tok.Decode(ids), string(validUTF8([]byte(text))); got != want {
			t.Errorf("decode(encode(Llama3Chat(%q))) = %q, want %q", user, got, want)
		}
	})
}
