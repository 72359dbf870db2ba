package tokenizer

import "unicode/utf8"

// byteLevel is GPT-2's byte-to-character table, the alphabet of byte-level
// BPE: the printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves, the others for U+0100 upwards in byte order (space is 'Ġ',
// U+0120; newline 'Ċ', U+010A). Vocabulary entries are spelled in it.
type byteLevel struct {
	char [256]rune
	byte map[rune]byte
}

func newByteLevel() *byteLevel {
	var bl byteLevel
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		if printable(b) {
			bl.char[b] = rune(b)
		} else {
			bl.char[b] = next
			next++
		}
	}
	bl.byte = make(map[rune]byte, 256)
	for b, c := range bl.char {
		bl.byte[c] = byte(b)
	}
	return &bl
}

// bytes returns the bytes a vocabulary entry stands for, and false when a
// character of it lies outside the alphabet (such an entry can never come
// out of the pre-tokenizer; the decoder gives its UTF-8 as it is).
func (bl *byteLevel) bytes(token string) ([]byte, bool) {
	out := make([]byte, 0, len(token))
	for _, c := range token {
		b, ok := bl.byte[c]
		if !ok {
			return []byte(token), false
		}
		out = append(out, b)
	}
	return out, true
}

// validUTF8 returns s with every ill-formed sequence replaced by U+FFFD, one
// replacement per maximal subpart (Unicode's recommended practice, which
// WHATWG's TextDecoder, Rust's String::from_utf8_lossy and Python's
// errors="replace" follow): a truncated but well-begun sequence is one
// U+FFFD, and the byte that broke it is read again. Go's
// strings.ToValidUTF8 (one replacement per run) and utf8.DecodeRune (one per
// byte) both differ from it.
func validUTF8(s []byte) []byte {
	if utf8.Valid(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		n, ok := sequenceAt(s[i:])
		if ok {
			out = append(out, s[i:i+n]...)
		} else {
			out = utf8.AppendRune(out, utf8.RuneError)
		}
		i += n
	}
	return out
}

// sequenceAt reads the UTF-8 sequence at the start of s: its length and
// whether it is well formed. An ill-formed one's length is its maximal
// subpart (at least 1 byte), the bytes one U+FFFD replaces.
func sequenceAt(s []byte) (int, bool) {
	b := s[0]
	var need int
	lower, upper := byte(0x80), byte(0xBF)
	switch {
	case b < 0x80:
		return 1, true
	case b >= 0xC2 && b <= 0xDF:
		need = 1
	case b == 0xE0:
		need, lower = 2, 0xA0
	case b == 0xED:
		need, upper = 2, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		need = 2
	case b == 0xF0:
		need, lower = 3, 0x90
	case b == 0xF4:
		need, upper = 3, 0x8F
	case b >= 0xF1 && b <= 0xF3:
		need = 3
	default:
		return 1, false
	}
	n := 1
	for ; n <= need; n++ {
		if n >= len(s) || s[n] < lower || s[n] > upper {
			return n, false
		}
		lower, upper = 0x80, 0xBF
	}
	return n, true
}
