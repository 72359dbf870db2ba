package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"stepbench/internal/input"
)

// maxID bounds the ids a file may give, so a bad file cannot make Load
// allocate without limit (Llama-3's largest is 128255).
const maxID = 1 << 24

// MaxFileBytes bounds a tokenizer.json (Llama-3's is 8.7 MB).
const MaxFileBytes = 64 << 20

// Load reads a Hugging Face tokenizer.json of the Llama-3 or Qwen2 kind
// (Qwen2, Qwen2.5, Qwen3): a regular file (a FIFO or a device is refused at
// once) of at most MaxFileBytes.
func Load(path string) (*Tokenizer, error) {
	data, err := input.ReadFile(path, MaxFileBytes, "a tokenizer.json")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return Parse(data, path)
}

// Parse reads the contents of a tokenizer.json; name (its path) starts every
// error. Only byte-level BPE with Llama-3's or Qwen2's pre-tokenizer (and
// Qwen2's NFC normalizer) is read: any other kind (SentencePiece/Llama-2,
// WordPiece, Unigram, another normalizer, another split pattern) is refused
// in one line that names the field and what the file has.
func Parse(data []byte, name string) (*Tokenizer, error) {
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

type fileJSON struct {
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

type addedTokenJSON struct {
	ID         int64  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

func parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, fmt.Errorf("not JSON: %v (at byte %d)", err, syntax.Offset)
		}
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	if err := checkKind(&f); err != nil {
		return nil, err
	}
	bl := newByteLevel()
	t := &Tokenizer{ignoreMerges: f.Model.IgnoreMerges, special: map[int32]bool{}}
	var err error
	if t.nfc, err = readNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.digits, err = checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	vocab, err := readVocab(f.Model.Vocab)
	if err != nil {
		return nil, err
	}
	if err := t.setVocab(vocab, bl); err != nil {
		return nil, err
	}
	if err := t.setMerges(f.Model.Merges, vocab); err != nil {
		return nil, err
	}
	if err := t.setAdded(f.AddedTokens, vocab, bl); err != nil {
		return nil, err
	}
	if err := t.setTemplate(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	return t, nil
}

// kindJSON is any component's type, and what a Sequence holds.
type kindJSON struct {
	Type          string            `json:"type"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`
}

// kindOf names a component ("null" when absent), a Sequence with its parts.
func kindOf(raw json.RawMessage) string {
	if isNull(raw) {
		return "null"
	}
	var k kindJSON
	if json.Unmarshal(raw, &k) != nil || k.Type == "" {
		return "of no type"
	}
	parts := append(append(k.PreTokenizers, k.Processors...), k.Decoders...)
	if k.Type != "Sequence" || len(parts) == 0 {
		return k.Type
	}
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = kindOf(p)
	}
	return "Sequence[" + strings.Join(names, ", ") + "]"
}

// supportedKinds is what every refusal of a kind of tokenizer ends with.
const supportedKinds = "stepbench reads byte-level BPE tokenizers of the Llama-3 and Qwen2 kinds"

// checkKind refuses every tokenizer whose model or decoder is not the
// byte-level BPE of Llama-3 and Qwen2, naming the field and what the file
// has; readNormalizer and checkPreTokenizer read the rest.
func checkKind(f *fileJSON) error {
	m := f.Model
	switch {
	case m == nil:
		return errors.New("no model")
	case m.Type == "":
		return errors.New("the model has no type")
	case m.Type != "BPE":
		return fmt.Errorf("model type %s is not supported: %s", m.Type, supportedKinds)
	case m.ByteFallback || strings.Contains(kindOf(f.PreTokenizer), "Metaspace"):
		return fmt.Errorf("model type BPE with byte_fallback or a Metaspace pre-tokenizer (SentencePiece, the Llama-2 kind) is not supported: %s", supportedKinds)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model: BPE dropout %g is not supported (encoding would be random)", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model: BPE with a subword prefix or suffix is not supported: %s", supportedKinds)
	case !strings.HasPrefix(kindOf(f.Decoder), "ByteLevel"):
		return fmt.Errorf("decoder %s is not supported (Llama-3's and Qwen2's is ByteLevel): %s", kindOf(f.Decoder), supportedKinds)
	case !isNull(f.Truncation), !isNull(f.Padding):
		// The library's encode would cut or pad every text to a length.
		return errors.New("truncation or padding is set: stepbench encodes whole texts, as Llama-3's and Qwen2's files (both null) have it")
	}
	return nil
}

// isNull says whether a component is absent or null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// readNormalizer reads the normalizer: none (Llama-3) or NFC (Qwen2, Qwen3),
// and says whether it is NFC. Any other (NFKC, Lowercase, a Sequence, ...)
// is refused by name.
func readNormalizer(raw json.RawMessage) (bool, error) {
	switch k := kindOf(raw); k {
	case "null":
		return false, nil
	case "NFC":
		return true, nil
	default:
		return false, fmt.Errorf("normalizer %s is not supported (Llama-3 has none, Qwen2 NFC): %s", k, supportedKinds)
	}
}

// checkPreTokenizer accepts Llama-3's and Qwen2's: a Sequence of
// Split(Llama3Pattern or Qwen2Pattern, Isolated) and ByteLevel without its
// own regex or a prefix space. It returns the pattern's digitRun.
func checkPreTokenizer(raw json.RawMessage) (int, error) {
	var seq struct {
		Type          string `json:"type"`
		PreTokenizers []struct {
			Type           string `json:"type"`
			Pattern        struct{ Regex, String *string }
			Behavior       string `json:"behavior"`
			Invert         bool   `json:"invert"`
			AddPrefixSpace bool   `json:"add_prefix_space"`
			UseRegex       *bool  `json:"use_regex"`
		} `json:"pretokenizers"`
	}
	fail := func(why string) (int, error) {
		return 0, fmt.Errorf("pre_tokenizer %s is not Llama-3's or Qwen2's (Sequence[Split, ByteLevel]): %s", kindOf(raw), why)
	}
	if json.Unmarshal(raw, &seq) != nil || seq.Type != "Sequence" || len(seq.PreTokenizers) != 2 {
		return fail("a Sequence of two is expected")
	}
	split, bl := seq.PreTokenizers[0], seq.PreTokenizers[1]
	switch {
	case split.Type != "Split" || bl.Type != "ByteLevel":
		return fail("Split then ByteLevel is expected")
	case split.Pattern.Regex == nil || digitRun(*split.Pattern.Regex) == 0:
		return fail("its Split pattern (pretokenizers[0].pattern.Regex) is neither Llama-3's nor Qwen2's")
	case split.Behavior != "Isolated" || split.Invert:
		return fail(fmt.Sprintf("its Split behavior %q (invert %v) is not Isolated", split.Behavior, split.Invert))
	case bl.AddPrefixSpace || bl.UseRegex == nil || *bl.UseRegex:
		return fail("its ByteLevel (pretokenizers[1]) adds a prefix space (add_prefix_space) or splits by its own regex (use_regex)")
	}
	return digitRun(*split.Pattern.Regex), nil
}

// readVocab reads the model's vocabulary object. A token listed twice
// would silently keep its last id in encoding/json's map: when the map has
// fewer entries than the object, the object is read again token by token to
// name the one listed twice.
func readVocab(raw json.RawMessage) (map[string]int32, error) {
	var vocab map[string]int64
	if err := json.Unmarshal(raw, &vocab); err != nil || vocab == nil {
		return nil, errors.New("model.vocab is not an object of token: id")
	}
	out := make(map[string]int32, len(vocab))
	for token, id := range vocab {
		if id < 0 || id >= maxID {
			return nil, fmt.Errorf("model.vocab: token %q has id %d, outside [0, %d)", token, id, maxID)
		}
		out[token] = int32(id)
	}
	if objectEntries(raw) != len(vocab) {
		return nil, listedTwice(raw)
	}
	return out, nil
}

// objectEntries counts the members of a JSON object of scalars (the colons
// outside strings).
func objectEntries(raw []byte) int {
	n, inString, escaped := 0, false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == ':':
			n++
		}
	}
	return n
}

// listedTwice names the first token a vocabulary object lists twice.
func listedTwice(raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	seen := map[string]bool{}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("model.vocab: %w", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return fmt.Errorf("model.vocab: %w", err)
		}
		var id json.RawMessage
		if err := dec.Decode(&id); err != nil {
			return fmt.Errorf("model.vocab: %w", err)
		}
		if token, _ := key.(string); seen[token] {
			return fmt.Errorf("model.vocab lists token %q twice", token)
		}
		seen[key.(string)] = true
	}
	return errors.New("model.vocab: an entry that is not token: id")
}

// setVocab fills the id tables from the vocabulary: every id once, and a
// token for each of the 256 bytes (byte-level BPE starts from them).
func (t *Tokenizer) setVocab(vocab map[string]int32, bl *byteLevel) error {
	size := 0
	for _, id := range vocab {
		size = max(size, int(id)+1)
	}
	t.text, t.known = make([][]byte, size), make([]bool, size)
	owner := make([]string, size)
	t.pieces = make(map[string]int32, len(vocab))
	for token, id := range vocab {
		if t.known[id] {
			a, b := min(owner[id], token), max(owner[id], token)
			return fmt.Errorf("model.vocab: duplicate id %d (tokens %q and %q)", id, a, b)
		}
		t.known[id], owner[id] = true, token
		raw, inAlphabet := bl.bytes(token)
		t.text[id] = raw
		if inAlphabet {
			t.pieces[string(raw)] = id
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := vocab[string(bl.char[b])]
		if !ok {
			return fmt.Errorf("model.vocab has no token %q for byte 0x%02x: byte-level BPE needs all 256", string(bl.char[b]), b)
		}
		t.byteIDs[b] = id
	}
	return nil
}
