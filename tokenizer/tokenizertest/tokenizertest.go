// Package tokenizertest builds small tokenizer.json files for tests: the
// 256 byte tokens, BPE merges learned from a few paragraphs of English, and
// either Llama-3's special tokens in the layout of Meta's file (JSON) or
// Qwen3's added tokens, pattern and NFC normalizer in the layout of Qwen's
// (QwenJSON). Tests need no download and no npm to run a text prompt.
package tokenizertest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// trainingText is what the merges are learned from.
const trainingText = `The capital of France is Paris. The capital of Italy is Rome, and the capital of Spain is Madrid.
A language model reads tokens and writes tokens; each step of the decoder reads every weight once.
The kernel author measured the prefill and the decode steps, then compared the medians of both runs.
Hello world! Hello there, how are you today? I am fine, thank you, and you?
Numbers like 1, 22, 333 and 4444 are split into groups of at most three digits before the merges run.
In the beginning the tokenizer knows only bytes; every merge it learns joins two tokens into a longer one.
She said that they're sure it's right, but we'll check again, because you've seen what I'd do.
The quick brown fox jumps over the lazy dog while the slow green turtle watches from the river bank.
Attention compares each query with every key of the cache and sums the values, weighted by the softmax.
`

// Specials are the special tokens every built tokenizer has, after its
// BPE tokens and in this order; reserved ones fill it up to the size asked.
var Specials = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
	"<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"}

// Pattern is Llama-3's pre-tokenizer pattern, as the file spells it.
const Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// QwenPattern is Qwen2's and Qwen3's pre-tokenizer pattern, as their files
// spell it: Llama-3's with one digit a piece.
const QwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// QwenAdded are Qwen3's added tokens in the order (and so the ids, after
// the BPE tokens) of its tokenizer.json; the first QwenSpecial of them are
// special, the rest (<tool_call>, the fill-in-the-middle tokens, <think>,
// ...) are not.
var QwenAdded = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
	"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
	"<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
	"<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
	"</tool_response>", "<think>", "</think>"}

// QwenSpecial is how many of QwenAdded are special.
const QwenSpecial = 14

// byteChars is GPT-2's byte-to-character table.
func byteChars() [256]string {
	var out [256]string
	next := 256
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = string(rune(b))
		} else {
			out[b] = string(rune(next))
			next++
		}
	}
	return out
}

// JSON returns a tokenizer.json of exactly size ids (at least 256 +
// len(Specials)); pairs writes the merges as ["a", "b"] instead of "a b".
func JSON(size int, pairs bool) ([]byte, error) {
	if size < 256+len(Specials) {
		return nil, fmt.Errorf("tokenizertest: size %d is below %d", size, 256+len(Specials))
	}
	chars := byteChars()
	vocab := map[string]int{}
	for b, c := range chars {
		vocab[c] = b
	}
	merges := learnMerges(size-256-len(Specials), vocab)
	var mergeList []any
	for _, m := range merges {
		if pairs {
			mergeList = append(mergeList, []string{m[0], m[1]})
		} else {
			mergeList = append(mergeList, m[0]+" "+m[1])
		}
	}
	specials := append([]string(nil), Specials...)
	for i := 0; len(vocab)+len(specials) < size; i++ {
		specials = append(specials, fmt.Sprintf("<|reserved_special_token_%d|>", i))
	}
	var added []map[string]any
	for i, s := range specials {
		added = append(added, map[string]any{"id": len(vocab) + i, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	return json.MarshalIndent(document(vocab, mergeList, added), "", "  ")
}

// QwenJSON returns a tokenizer.json of Qwen3's kind with at most size ids
// (at least 256 + len(QwenAdded)): the BPE tokens (merges as pairs, as
// Qwen3's file has them; as many as the training text yields, up to the
// size), then QwenAdded; the NFC normalizer, QwenPattern, and no template
// (Qwen adds no BOS). As Qwen's, the tokenizer may have fewer ids than the
// model's vocab_size.
func QwenJSON(size int) ([]byte, error) {
	if size < 256+len(QwenAdded) {
		return nil, fmt.Errorf("tokenizertest: size %d is below %d", size, 256+len(QwenAdded))
	}
	chars := byteChars()
	vocab := map[string]int{}
	for b, c := range chars {
		vocab[c] = b
	}
	var merges []any
	for _, m := range learnMerges(size-256-len(QwenAdded), vocab) {
		merges = append(merges, []string{m[0], m[1]})
	}
	var added []map[string]any
	for i, s := range QwenAdded {
		added = append(added, map[string]any{"id": len(vocab) + i, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": i < QwenSpecial})
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	return json.MarshalIndent(map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": QwenPattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}, "", "  ")
}

// document is the file's layout, as Meta's Llama-3 tokenizer.json.
func document(vocab map[string]int, merges []any, added []map[string]any) map[string]any {
	bos := Specials[0]
	bosID := added[0]["id"]
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing",
				"single": []any{map[string]any{"SpecialToken": map[string]any{"id": bos, "type_id": 0}},
					map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
				"special_tokens": map[string]any{bos: map[string]any{"id": bos, "ids": []any{bosID}, "tokens": []string{bos}}}},
		}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
			"vocab": vocab, "merges": merges},
	}
}

// learnMerges learns up to n merges from trainingText (words with their
// leading space, as the pre-tokenizer cuts them), most frequent pair first,
// and adds each merged token to vocab.
func learnMerges(n int, vocab map[string]int) [][2]string {
	chars := byteChars()
	counts := map[string]int{}
	for _, w := range strings.SplitAfter(strings.ReplaceAll(trainingText, "\n", " "), " ") {
		w = " " + strings.TrimSpace(w)
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	var words []word
	for w, c := range counts {
		var syms []string
		for _, b := range []byte(w) {
			syms = append(syms, chars[b])
		}
		words = append(words, word{syms, c})
	}
	sort.Slice(words, func(i, j int) bool { return strings.Join(words[i].syms, "") < strings.Join(words[j].syms, "") })
	var merges [][2]string
	for len(merges) < n {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		best, bestCount := [2]string{}, 0
		for p, c := range pairs {
			if c > bestCount || (c == bestCount && p[0]+" "+p[1] < best[0]+" "+best[1]) {
				best, bestCount = p, c
			}
		}
		if bestCount == 0 {
			break
		}
		merged := best[0] + best[1]
		if _, ok := vocab[merged]; !ok {
			vocab[merged] = len(vocab)
		}
		merges = append(merges, best)
		for i := range words {
			words[i].syms = mergeWord(words[i].syms, best, merged)
		}
	}
	return merges
}

func mergeWord(syms []string, pair [2]string, merged string) []string {
	out := syms[:0]
	for i := 0; i < len(syms); i++ {
		if i+1 < len(syms) && syms[i] == pair[0] && syms[i+1] == pair[1] {
			out = append(out, merged)
			i++
			continue
		}
		out = append(out, syms[i])
	}
	return out
}

// WriteFile writes JSON(size, false) as dir/tokenizer.json.
func WriteFile(dir string, size int) error {
	data, err := JSON(size, false)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
}

// WriteQwenFile writes QwenJSON(size) as dir/tokenizer.json.
func WriteQwenFile(dir string, size int) error {
	data, err := QwenJSON(size)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
}
