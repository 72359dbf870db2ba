package tokenizer

import (
	"slices"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to token ids and decodes ids to text. It holds no
// mutable state: one Tokenizer may serve any number of goroutines.
type Tokenizer struct {
	// pieces maps the bytes a model vocabulary entry stands for to its id.
	pieces       map[string]int32
	byteIDs      [256]int32
	merges       map[uint64]merge
	ignoreMerges bool
	// text is what each id decodes to, before the UTF-8 repair; known marks
	// the ids in use (the vocabulary may leave gaps).
	text  [][]byte
	known []bool
	// added are the added tokens, matched in the text before pre-tokenizing.
	added addedTokens
	// prefix and suffix are the post-processor's single-sequence template
	// around the text ($A): Llama-3's is [<|begin_of_text|>] and [].
	prefix, suffix []int32
	special        map[int32]bool
	// digits is the longest run of digits one piece of the Split pattern
	// holds: 3 (Llama3Pattern) or 1 (Qwen2Pattern).
	digits int
	// nfc: the normalizer is NFC (Qwen2, Qwen3); Llama-3 has none.
	nfc bool
}

// Encode returns the token ids of text as the library's
// encode(text, add_special_tokens=True) does: added tokens (special ones
// such as <|eot_id|> included) are matched first, the text between them is
// split by the pre-tokenizer and merged by BPE, and the post-processor's
// template adds its tokens (Llama-3: <|begin_of_text|> first).
func (t *Tokenizer) Encode(text string) []int32 {
	return t.encode(text, true)
}

// EncodePlain is Encode without the post-processor's tokens
// (add_special_tokens=False): what a chat template's text is encoded with.
func (t *Tokenizer) EncodePlain(text string) []int32 {
	return t.encode(text, false)
}

func (t *Tokenizer) encode(text string, template bool) []int32 {
	if !utf8.ValidString(text) {
		// The library takes only Unicode strings; bytes that are not UTF-8
		// are what a caller would have to repair first.
		text = string(validUTF8([]byte(text)))
	}
	out := make([]int32, 0, len(text)/3+len(t.prefix)+len(t.suffix)+1)
	if template {
		out = append(out, t.prefix...)
	}
	var sc scratch
	t.added.split(text, t.normalize, func(segment string, added int32) {
		if added >= 0 {
			out = append(out, added)
			return
		}
		sc.ends = split(segment, sc.ends[:0], t.digits)
		start := 0
		for _, end := range sc.ends {
			out = t.bpe([]byte(segment[start:end]), out, &sc)
			start = end
		}
	})
	if template {
		out = append(out, t.suffix...)
	}
	return out
}

// normalize is the normalizer, applied (as the library applies it) to the
// text between the added tokens that are not normalized: NFC (Qwen2's
// normalizer), or nothing (Llama-3 has none). NFC of valid UTF-8 is valid
// UTF-8.
func (t *Tokenizer) normalize(s string) string {
	if t.nfc {
		return norm.NFC.String(s)
	}
	return s
}

// Decode returns the text of ids as the library's decode(ids) does: each
// token's bytes (an added token's: its content) joined, then read as UTF-8
// with every ill-formed sequence replaced by U+FFFD (see validUTF8). Ids the
// vocabulary lacks are left out, as the library leaves them out; Known tells
// them apart.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		if t.Known(id) {
			b = append(b, t.text[id]...)
		}
	}
	return string(validUTF8(b))
}

// Known says whether id is a token of the vocabulary or an added token.
func (t *Tokenizer) Known(id int32) bool {
	return id >= 0 && int(id) < len(t.known) && t.known[id]
}

// Size is the largest id plus one: the least vocab_size of a model that can
// read every id this tokenizer gives.
func (t *Tokenizer) Size() int { return len(t.known) }

// TokenID returns the id of an added token (such as "<|eot_id|>") by its
// content.
func (t *Tokenizer) TokenID(content string) (int32, bool) {
	id, ok := t.added.ids[content]
	return id, ok
}

// IsSpecial says whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int32) bool { return t.special[id] }

// addedTokens are the added tokens in the library's two passes
// (added_vocabulary.rs, extract_and_normalize): those not normalized are
// matched in the raw text, then what is left between them is normalized and
// those normalized are matched in it.
type addedTokens struct {
	ids            map[string]int32
	raw, normed    tokenSet
	normalizedPass bool // some added tokens are normalized
}

// tokenSet matches a set of strings leftmost-longest, as the library's
// Aho-Corasick automaton (MatchKind::LeftmostLongest): the match that
// starts first, the longest of those.
type tokenSet struct {
	ids     map[string]int32
	lengths []int     // distinct lengths, longest first
	first   [256]bool // first bytes of the tokens
}

func newTokenSet(tokens map[string]int32) tokenSet {
	s := tokenSet{ids: tokens}
	seen := map[int]bool{}
	for content := range tokens {
		s.first[content[0]] = true
		if !seen[len(content)] {
			seen[len(content)] = true
			s.lengths = append(s.lengths, len(content))
		}
	}
	slices.Sort(s.lengths)
	slices.Reverse(s.lengths)
	return s
}

// find returns the first match in s at or after from: its start, end and
// id, or start -1.
func (s *tokenSet) find(text string, from int) (int, int, int32) {
	if len(s.ids) == 0 {
		return -1, 0, 0
	}
	for i := from; i < len(text); i++ {
		if !s.first[text[i]] {
			continue
		}
		for _, n := range s.lengths {
			if i+n <= len(text) {
				if id, ok := s.ids[text[i:i+n]]; ok {
					return i, i + n, id
				}
			}
		}
	}
	return -1, 0, 0
}

// split calls emit with every segment of text in order: an added token as
// its id, the text between them, normalized, with id -1.
func (a *addedTokens) split(text string, normalize func(string) string, emit func(segment string, id int32)) {
	a.raw.each(text, func(segment string, id int32) {
		switch {
		case id >= 0:
			emit(segment, id)
		case !a.normalizedPass:
			emit(normalize(segment), id)
		default:
			a.normed.each(normalize(segment), emit)
		}
	})
}

func (s *tokenSet) each(text string, emit func(string, int32)) {
	at := 0
	for {
		start, end, id := s.find(text, at)
		if start < 0 {
			break
		}
		if start > at {
			emit(text[at:start], -1)
		}
		emit(text[start:end], id)
		at = end
	}
	if at < len(text) {
		emit(text[at:], -1)
	}
}
