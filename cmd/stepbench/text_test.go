package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"stepbench/kernels/ref"
	"stepbench/runner"
	"stepbench/tokenizer"
	"stepbench/tokenizer/tokenizertest"
)

// textModel writes a model directory for text prompts: llama-tiny's shape
// with its 4096-id vocabulary, dummy weights written as model.safetensors,
// and a synthetic tokenizer.json of the Llama-3 kind with 4096 ids.
func textModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg, _ := runner.Preset("llama-tiny")
	config := map[string]any{"architectures": []string{"LlamaForCausalLM"}, "hidden_size": cfg.HiddenSize,
		"intermediate_size": cfg.IntermediateSize, "num_hidden_layers": cfg.NumHiddenLayers,
		"num_attention_heads": cfg.NumAttentionHeads, "num_key_value_heads": cfg.NumKeyValueHeads, "head_dim": cfg.HeadDim,
		"vocab_size": cfg.VocabSize, "rms_norm_eps": cfg.RMSNormEps, "rope_theta": cfg.RopeTheta,
		"max_position_embeddings": cfg.MaxPositionEmbeddings, "torch_dtype": "bfloat16"}
	data, err := json.Marshal(config)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
	}
	if err == nil {
		err = tokenizertest.WriteFile(dir, cfg.VocabSize)
	}
	if err != nil {
		t.Fatal(err)
	}
	var tensors []runner.HostTensor
	for _, spec := range runner.ExpectedTensors(cfg) {
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		vals := make([]uint16, n)
		kind := ref.DummyUniform
		if strings.HasSuffix(spec.Name, "norm.weight") {
			kind = ref.DummyOnes
		}
		ref.FillDummy(vals, 42, spec.Name, 0, kind)
		raw := make([]byte, 2*n)
		for i, v := range vals {
			raw[2*i], raw[2*i+1] = byte(v), byte(v>>8)
		}
		tensors = append(tensors, runner.HostTensor{Name: spec.Name, DType: "BF16", Shape: spec.Shape, Data: raw})
	}
	if err := runner.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// textRecord is a --logits-out line of a text prompt.
type textRecord struct {
	Prompt, Generated []int32
	Logits            [][]float32
	PromptText        string `json:"prompt_text"`
	GeneratedText     string `json:"generated_text"`
	Chat              bool   `json:"chat"`
	StoppedAt         string `json:"stopped_at"`
}

// checkTextRun checks what a correctness run of text prompts prints and
// writes: each prompt, its ids (BOS first), the generated ids and their
// decoded text, the same in --logits-out; it returns the records.
func checkTextRun(t *testing.T, model, stdout, logits string, prompts []string) []textRecord {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join(model, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logits)
	if err != nil {
		t.Fatal(err)
	}
	var recs []textRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec textRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if len(recs) != len(prompts) {
		t.Fatalf("%d records for %d prompts", len(recs), len(prompts))
	}
	for i, rec := range recs {
		n := string(rune('1' + i))
		wantIDs := joinIDs(tok.Encode(prompts[i]))
		for _, want := range []string{
			"prompt " + n + ": " + quote(prompts[i]) + "\n",
			"prompt " + n + " ids: " + wantIDs + " (",
			"prompt " + n + " generated: " + joinIDs(rec.Generated) + " (",
			"prompt " + n + " text: " + quote(tok.Decode(rec.Generated)) + "\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		if rec.PromptText != prompts[i] || joinIDs(rec.Prompt) != wantIDs || rec.GeneratedText != tok.Decode(rec.Generated) ||
			len(rec.Logits) != len(rec.Generated) {
			t.Errorf("record %d: %+v", i+1, rec)
		}
	}
	return recs
}

func quote(s string) string { return strconv.Quote(s) }

// run --correctness-test --prompt prints text on the cpu backend, with the
// weights and tokenizer of a model directory.
func TestCorrectnessTextPrompts(t *testing.T) {
	model := textModel(t)
	dir := t.TempDir()
	logits := filepath.Join(dir, "logits.jsonl")
	prompts := []string{"The capital of France is", "Hello world!"}
	stdout, _ := mustProcess(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model,
		"--prompt", prompts[0], "--prompt", prompts[1], "--output-len", "6", "--logits-out", logits)
	recs := checkTextRun(t, model, stdout, logits, prompts)
	// The same prompts as ids give the same tokens: the text is only encoded.
	ids := filepath.Join(dir, "ids.txt")
	if err := os.WriteFile(ids, []byte(joinIDs(recs[0].Prompt)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ = mustRun(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt-ids", ids, "--output-len", "6")
	if want := "prompt 1: " + joinIDs(recs[0].Generated) + "\n"; stdout != want {
		t.Errorf("--prompt-ids of the same ids: %q, want %q", stdout, want)
	}
}

// --prompt-file (lines and JSON lines), --chat and --stop-at-eos.
func TestCorrectnessPromptFileChat(t *testing.T) {
	model := textModel(t)
	dir := t.TempDir()
	lines := filepath.Join(dir, "p.txt")
	jsonl := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(lines, []byte("What is the capital of France?\r\n\nSay hello.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jsonl, []byte(`{"prompt": "two\nlines"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logits := filepath.Join(dir, "l.jsonl")
	stdout, _ := mustRun(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt-file", lines,
		"--chat", "--stop-at-eos", "--output-len", "4", "--logits-out", logits)
	tok, _ := tokenizer.Load(filepath.Join(model, "tokenizer.json"))
	chat := tok.EncodePlain(tokenizer.Llama3Chat("What is the capital of France?"))
	if !strings.Contains(stdout, `prompt 1 (chat): "What is the capital of France?"`) || !strings.Contains(stdout, "prompt 1 ids: "+joinIDs(chat)+" (") {
		t.Errorf("--chat: stdout lacks the prompt or its chat ids %v:\n%s", chat, stdout)
	}
	var rec textRecord
	data, _ := os.ReadFile(logits)
	if err := json.Unmarshal([]byte(strings.SplitN(string(data), "\n", 2)[0]), &rec); err != nil || !rec.Chat {
		t.Errorf("--logits-out: %v %+v", err, rec)
	}
	stdout, _ = mustRun(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt-file", jsonl, "--output-len", "2")
	if !strings.Contains(stdout, `prompt 1: "two\nlines"`) {
		t.Errorf("JSON lines: %s", stdout)
	}
}

// --stop-at-eos stops at the end-of-turn token and keeps it: a model whose
// every greedy token is <|eot_id|> (its lm_head row of the largest norm).
func TestStopAtEOS(t *testing.T) {
	model := textModel(t)
	tok, _ := tokenizer.Load(filepath.Join(model, "tokenizer.json"))
	eot, _ := tok.TokenID("<|eot_id|>")
	stdout, _ := mustRun(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt", "Hi", "--output-len", "8")
	first := regexp.MustCompile(`prompt 1 generated: (\d+)`).FindStringSubmatch(stdout)
	if first == nil {
		t.Fatalf("no generated ids:\n%s", stdout)
	}
	// Give <|eot_id|> the first generated token's id: swap the two rows of
	// the tokenizer's vocabulary by editing tokenizer.json's ids.
	path := filepath.Join(model, "tokenizer.json")
	data, _ := os.ReadFile(path)
	text := string(data)
	target := first[1]
	if target == itoa(eot) {
		t.Skip("the first token already is <|eot_id|>")
	}
	text = swapID(t, text, itoa(eot), target)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ = mustRun(t, "run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt", "Hi", "--output-len", "8", "--stop-at-eos")
	if !strings.Contains(stdout, "prompt 1 generated: "+target+" (1 tokens, stopped at <|eot_id|>)") {
		t.Errorf("--stop-at-eos did not stop at the first token %s:\n%s", target, stdout)
	}
}

func itoa(id int32) string { return joinIDs([]int32{id}) }

// swapID exchanges two ids in a tokenizer.json (as values of "id" or of
// the vocabulary), so the token of one takes the other's place.
func swapID(t *testing.T, text, a, b string) string {
	t.Helper()
	re := regexp.MustCompile(`(": )(` + a + `|` + b + `)([,\n])`)
	n := 0
	text = re.ReplaceAllStringFunc(text, func(m string) string {
		sub := re.FindStringSubmatch(m)
		n++
		if sub[2] == a {
			return sub[1] + b + sub[3]
		}
		return sub[1] + a + sub[3]
	})
	if n < 2 {
		t.Fatalf("swapped %d ids", n)
	}
	return text
}

// tokenize round-trips: its ids decode to the text (--no-bos), and with BOS
// they start with <|begin_of_text|>; a real process reads --file -.
func TestTokenizeRoundTrip(t *testing.T) {
	model := textModel(t)
	text := "The capital of France is Paris.\n\tIt's 2024: 🦙 <|eot_id|>"
	ids, _ := mustProcess(t, "tokenize", "--model-path", model, "--no-bos", text)
	back, _ := mustProcess(t, "tokenize", "--model-path", model, "--decode", strings.TrimSpace(ids))
	if back != text {
		t.Errorf("decode(encode(%q)) = %q", text, back)
	}
	withBOS, _ := mustRun(t, "tokenize", "--model-path", model, text)
	if bos, _ := mustRun(t, "tokenize", "--model-path", model, "--decode", strings.Fields(withBOS)[0]); bos != "<|begin_of_text|>" {
		t.Errorf("first id of %q decodes to %q", withBOS, bos)
	}
	file := filepath.Join(t.TempDir(), "t.txt")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, _ := mustRun(t, "tokenize", "--model-path", model, "--no-bos", "--file", file)
	if fromFile != ids {
		t.Errorf("--file: %q, the argument: %q", fromFile, ids)
	}
	cmd := exec.Command(os.Args[0], "tokenize", "--model-path", model, "--decode", "--file", "-")
	cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1")
	cmd.Stdin = strings.NewReader(ids)
	if out, err := cmd.Output(); err != nil || string(out) != text {
		t.Errorf("--decode --file - in a process: %q, %v", out, err)
	}
}

// Bad text-prompt input: one line naming the flag or file, exit 2.
func TestTextPromptErrors(t *testing.T) {
	model := textModel(t)
	empty := t.TempDir()
	cfgOnly := t.TempDir()
	data, _ := os.ReadFile(filepath.Join(model, "config.json"))
	if err := os.WriteFile(filepath.Join(cfgOnly, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"model": {"type": "WordPiece"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--device", "cpu", "--correctness-test", "--model", "llama-tiny", "--prompt", "x"}, "--prompt needs --model-path DIR holding tokenizer.json"},
		{[]string{"run", "--device", "cpu", "--correctness-test", "--model-path", cfgOnly, "--prompt", "x"}, "has no tokenizer.json"},
		{[]string{"run", "--device", "cpu", "--correctness-test", "--model-path", bad, "--prompt", "x"}, "model type WordPiece is not supported"},
		{[]string{"run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt", "x", "--prompt-ids", "f"}, "use one or the other"},
		{[]string{"run", "--device", "cpu", "--model-path", model, "--prompt", "x"}, "--prompt needs --correctness-test"},
		{[]string{"run", "--device", "cpu", "--model-path", model, "--prompt-file", filepath.Join(empty, "none")}, "--prompt-file: open"},
		{[]string{"run", "--device", "cpu", "--correctness-test", "--model-path", model, "--prompt-ids", "f", "--chat"}, "are for text prompts"},
		{[]string{"tokenize", "--model-path", model}, "want one TEXT argument"},
		{[]string{"tokenize", "--model-path", model, "--decode", "1 999999"}, "token 2: id 999999 is not in the tokenizer"},
		{[]string{"tokenize", "--model-path", empty, "x"}, "has no tokenizer.json"},
		{[]string{"tokenize", "x"}, "needs --model-path"},
	}
	for _, c := range cases {
		code, _, stderr := run(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// On the emulated device the same text prompts print text, and the tokens
// the cpu backend generates.
func TestEmulatedCorrectnessTextPrompts(t *testing.T) {
	onEmulator(t)
	model := textModel(t)
	prompts := []string{"The capital of France is", "Attention compares each query with every key."}
	generated := map[string][]string{}
	for _, device := range []string{"cuda", "cpu"} {
		logits := filepath.Join(t.TempDir(), device+".jsonl")
		stdout, stderr := mustProcess(t, "run", "--device", device, "--correctness-test", "--model-path", model,
			"--prompt", prompts[0], "--prompt", prompts[1], "--output-len", "6", "--logits-out", logits)
		if device == "cuda" && !strings.Contains(stderr, "emulated") {
			t.Errorf("the cuda run did not run on the emulated device:\n%s", stderr)
		}
		for _, rec := range checkTextRun(t, model, stdout, logits, prompts) {
			generated[device] = append(generated[device], joinIDs(rec.Generated))
		}
	}
	if strings.Join(generated["cuda"], "|") != strings.Join(generated["cpu"], "|") {
		t.Errorf("emulated device generated %q, cpu backend %q", generated["cuda"], generated["cpu"])
	}
}

// run --prompt-file times iterations cut from the file's text, and the
// native report says where the prompts came from.
func TestRunPromptFile(t *testing.T) {
	model := textModel(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(file, []byte("The capital of France is Paris.\nHello world!\nNumbers like 1, 22 and 333.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	native := filepath.Join(dir, "n.json")
	stdout, stderr := mustProcess(t, "run", "--device", "cpu", "--model-path", model, "--prompt-file", file, "--batch-size", "2",
		"--input-len", "24", "--output-len", "3", "--num-iters", "2", "--json-out", native, "-v")
	if !strings.Contains(stdout, "Prefill. latency:") || !regexp.MustCompile(`--prompt-file \S+: 3 prompts, \d+ tokens`).MatchString(stderr) {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	var rep struct {
		Config struct {
			Prompts *struct {
				Source, File string
				Count        int
			} `json:"prompts"`
		} `json:"config"`
	}
	data, err := os.ReadFile(native)
	if err == nil {
		err = json.Unmarshal(data, &rep)
	}
	if err != nil || rep.Config.Prompts == nil || rep.Config.Prompts.Source != "text" || rep.Config.Prompts.File != file ||
		rep.Config.Prompts.Count != 3 {
		t.Errorf("native report's config.prompts: %+v (%v)", rep.Config.Prompts, err)
	}
	// Without --prompt-file the report has no prompts entry: random ids.
	mustProcess(t, "run", "--device", "cpu", "--model-path", model, "--input-len", "8", "--output-len", "2", "--num-iters", "1", "--json-out", native)
	if data, _ := os.ReadFile(native); strings.Contains(string(data), `"prompts"`) {
		t.Error("a run of random prompts reports text prompts")
	}
}
