// Package tokenizer reads a Hugging Face tokenizer.json of the Llama-3 kind
// and encodes and decodes as the `tokenizers` library does: byte-level BPE
// with ignore_merges, Llama-3's split pattern (matched by a hand-written
// scanner, see Llama3Pattern), merges as "a b" strings or as pairs, added
// and special tokens matched before BPE, the post-processor's template
// (Llama-3: <|begin_of_text|> first) and decoding to UTF-8 with U+FFFD for
// ill-formed sequences. Other kinds of tokenizer are refused by name.
//
// It is checked against an independent implementation, the npm package
// llama3-tokenizer-js, on a corpus of over 2,000 strings (oracle_test.go,
// scripts/tokenizer-oracle).
package tokenizer
