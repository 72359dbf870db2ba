package input

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// NotTextError says where data that should be text is not: the first NUL
// byte, control byte or invalid UTF-8 sequence, by line and byte offset.
type NotTextError struct {
	Line   int   // 1-based
	Offset int64 // of the byte, from the start
	Byte   byte
	Reason string // "a NUL byte", "control byte 0x1b", "invalid UTF-8"
}

func (e *NotTextError) Error() string {
	return fmt.Sprintf("line %d (byte %d): %s: not text", e.Line, e.Offset, e.Reason)
}

// CheckText reports whether data is text: valid UTF-8 without NUL bytes or
// control characters other than tab, line feed, carriage return, vertical
// tab and form feed (a binary file, such as an executable or a compressed
// file, fails at its first such byte). Its error is a *NotTextError.
func CheckText(data []byte) error {
	line := 1
	for i := 0; i < len(data); {
		b := data[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '\n':
				line++
			case b == 0:
				return &NotTextError{line, int64(i), b, "a NUL byte"}
			case (b < 0x20 && !bytes.ContainsRune([]byte("\t\r\v\f"), rune(b))) || b == 0x7f:
				return &NotTextError{line, int64(i), b, fmt.Sprintf("control byte 0x%02x", b)}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return &NotTextError{line, int64(i), b, fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", b)}
		}
		i += size
	}
	return nil
}
