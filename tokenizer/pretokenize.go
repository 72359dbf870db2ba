package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Llama3Pattern is the Split pre-tokenizer's regular expression in Llama-3's
// tokenizer.json (as tiktoken's cl100k pattern, but with letters allowed one
// leading non-letter, digits in groups of up to three, and case-insensitive
// contractions). split matches it by hand: its `\s+(?!\S)` needs a
// look-ahead, which Go's regexp (RE2: no look-around, by design) lacks. A
// hand-written scanner of this one pattern needs no dependency, reads the
// text once and allocates nothing; a backtracking engine (regexp2) would
// bring a dependency whose speed and \s and \p classes we would have to
// check against Oniguruma's anyway.
const Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Qwen2Pattern is the Split pattern of Qwen2's, Qwen2.5's and Qwen3's
// tokenizer.json: Llama-3's with every digit a piece of its own (`\p{N}`,
// not `\p{N}{1,3}`). The same scanner matches it (split with digits 1).
const Qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// digitRun returns how many digits (\p{N}) one piece of pattern holds at
// most: 3 for Llama-3's, 1 for Qwen2's; 0 for a pattern split cannot match.
func digitRun(pattern string) int {
	switch pattern {
	case Llama3Pattern:
		return 3
	case Qwen2Pattern:
		return 1
	}
	return 0
}

// Character classes of the pattern. The `tokenizers` library runs it on
// Oniguruma: \p{L} and \p{N} are the Unicode general categories L and N,
// \s is the White_Space property (U+0085 and U+00A0 included, U+FEFF not).
const (
	classOther  = iota // neither letter, number nor whitespace
	classLetter        // \p{L}
	classNumber        // \p{N}
	classSpace         // \s
)

// asciiClass is the class of every ASCII byte.
var asciiClass = func() (c [128]uint8) {
	for b := 0; b < 128; b++ {
		switch r := rune(b); {
		case unicode.IsLetter(r):
			c[b] = classLetter
		case unicode.IsNumber(r):
			c[b] = classNumber
		case unicode.IsSpace(r):
			c[b] = classSpace
		}
	}
	return c
}()

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r): // Unicode's White_Space property beyond Latin-1
		return classSpace
	}
	return classOther
}

// runeAt decodes the rune at s[i:] (s is valid UTF-8) and its class.
func runeAt(s string, i int) (rune, int, uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, n, classOf(r)
}

// split appends to ends the end offset of every piece Llama3Pattern (digits
// 3) or Qwen2Pattern (digits 1) cuts s (valid UTF-8) into: the pattern
// matches at every position, so the pieces tile s. Each alternative is tried
// in order at the piece's start, with the pattern's greedy quantifiers and
// their backtracking.
func split(s string, ends []int, digits int) []int {
	for i := 0; i < len(s); {
		i = matchAt(s, i, digits)
		ends = append(ends, i)
	}
	return ends
}

// matchAt returns the end of the match that starts at i; a run of digits
// ends after at most digits of them.
func matchAt(s string, i int, digits int) int {
	r, n, class := runeAt(s, i)
	if r == '\'' {
		if end := contraction(s, i+n); end > 0 {
			return end
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if class == classLetter {
		return skipClass(s, i+n, classLetter)
	}
	if class != classNumber && r != '\r' && r != '\n' && i+n < len(s) {
		if _, _, next := runeAt(s, i+n); next == classLetter {
			return skipClass(s, i+n, classLetter)
		}
	}
	// \p{N}{1,3} (Llama-3), \p{N} (Qwen2)
	if class == classNumber {
		end := i + n
		for k := 1; k < digits && end < len(s); k++ {
			_, m, c := runeAt(s, end)
			if c != classNumber {
				break
			}
			end += m
		}
		return end
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := i
	if r == ' ' && i+1 < len(s) {
		if _, _, next := runeAt(s, i+1); next == classOther {
			start = i + 1
		}
	}
	if _, _, c := runeAt(s, start); c == classOther {
		end := skipClass(s, start, classOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	return whitespace(s, i)
}

// whitespace matches the last three alternatives at i, a whitespace
// character: `\s*[\r\n]+` ends after the run's last line break; else
// `\s+(?!\S)` takes the run but its last character when a non-space follows
// (that character then leads the next piece, " word"); else `\s+`.
func whitespace(s string, i int) int {
	end, lastBreak, lastStart := i, -1, i
	for end < len(s) {
		r, n, c := runeAt(s, end)
		if c != classSpace {
			break
		}
		if r == '\r' || r == '\n' {
			lastBreak = end + n
		}
		lastStart = end
		end += n
	}
	switch {
	case lastBreak > 0:
		return lastBreak
	case end < len(s) && lastStart > i:
		return lastStart
	}
	return end
}

// skipClass returns the end of the run of class c from i.
func skipClass(s string, i int, c uint8) int {
	for i < len(s) {
		_, n, class := runeAt(s, i)
		if class != c {
			break
		}
		i += n
	}
	return i
}

// contraction matches `(?i:s|t|re|ve|m|ll|d)` at i, just after an
// apostrophe, and returns its end (0: none). Case-insensitive is Unicode
// simple case folding, as in Oniguruma: 'ſ' (U+017F) matches s.
func contraction(s string, i int) int {
	letter := func(at int, want rune) int {
		if at >= len(s) {
			return 0
		}
		r, n := utf8.DecodeRuneInString(s[at:])
		if foldsTo(r, want) {
			return at + n
		}
		return 0
	}
	for _, one := range []rune{'s', 't', 'm', 'd'} {
		if end := letter(i, one); end > 0 {
			return end
		}
	}
	for _, two := range [][2]rune{{'r', 'e'}, {'v', 'e'}, {'l', 'l'}} {
		if mid := letter(i, two[0]); mid > 0 {
			if end := letter(mid, two[1]); end > 0 {
				return end
			}
		}
	}
	return 0
}

// foldsTo says whether r and the lower-case ASCII letter want are equal
// under simple case folding.
func foldsTo(r, want rune) bool {
	for f := want; ; {
		if f == r {
			return true
		}
		if f = unicode.SimpleFold(f); f == want {
			return false
		}
	}
}
