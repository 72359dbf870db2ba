package compat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Python's json module, byte for byte: SGLang and vLLM write their result
// files with json.dumps/json.dump, and a tool that replaces them must write
// the same bytes for the same values (separators ", " and ": ", or "," and
// ": " with an indent; ensure_ascii escapes; float repr such as 123.0,
// 1e-05 and 1e+16; NaN and Infinity as bare words).

// pyField is one key of a pyObject; Value is a string, an int, a float64,
// a *float64 (nil is null), a []float64 or a pyObject.
type pyField struct {
	Key   string
	Value any
}

// pyObject is a JSON object whose keys keep their order (a Python dict).
type pyObject []pyField

// pyDumps is json.dumps(v) (indent 0) or json.dumps(v, indent=indent).
func pyDumps(v any, indent int) (string, error) {
	var b strings.Builder
	if err := pyEncode(&b, v, indent, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func pyEncode(b *strings.Builder, v any, indent, depth int) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[x])
	case string:
		b.WriteString(pyString(x))
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(pyFloat(x))
	case *float64:
		if x == nil {
			b.WriteString("null")
		} else {
			b.WriteString(pyFloat(*x))
		}
	case []float64:
		items := make([]any, len(x))
		for i, f := range x {
			items[i] = f
		}
		return pyContainer(b, "[", "]", len(items), indent, depth, func(i int) error {
			return pyEncode(b, items[i], indent, depth+1)
		})
	case []int:
		return pyContainer(b, "[", "]", len(x), indent, depth, func(i int) error {
			b.WriteString(strconv.Itoa(x[i]))
			return nil
		})
	case pyObject:
		return pyContainer(b, "{", "}", len(x), indent, depth, func(i int) error {
			b.WriteString(pyString(x[i].Key))
			b.WriteString(": ")
			return pyEncode(b, x[i].Value, indent, depth+1)
		})
	default:
		return fmt.Errorf("python json: cannot encode %T", v)
	}
	return nil
}

// pyContainer writes n items between open and close as Python's encoder
// does: "[]" when empty; ", " between items without an indent; with one,
// a newline and (depth+1)×indent spaces before each item, "," after all
// but the last, and the closing bracket on its own line.
func pyContainer(b *strings.Builder, open, close string, n, indent, depth int, item func(int) error) error {
	b.WriteString(open)
	if n == 0 {
		b.WriteString(close)
		return nil
	}
	inner := "\n" + strings.Repeat(" ", indent*(depth+1))
	for i := 0; i < n; i++ {
		switch {
		case indent > 0 && i > 0:
			b.WriteString("," + inner)
		case indent > 0:
			b.WriteString(inner)
		case i > 0:
			b.WriteString(", ")
		}
		if err := item(i); err != nil {
			return err
		}
	}
	if indent > 0 {
		b.WriteString("\n" + strings.Repeat(" ", indent*depth))
	}
	b.WriteString(close)
	return nil
}

// pyFloat is float.__repr__ (what json.dumps writes for a float): the
// shortest digits that round-trip, positional when the decimal exponent
// is in [-4, 16) with at least one digit after the point, else d.ddde±XX.
// NaN and ±Inf are json's NaN, Infinity and -Infinity.
func pyFloat(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	// Go's shortest digits are the same round-trip digits Python's repr
	// uses; only the layout differs.
	e := strconv.FormatFloat(x, 'e', -1, 64)
	sign := ""
	if e[0] == '-' {
		sign, e = "-", e[1:]
	}
	mantissa, exponentText, _ := strings.Cut(e, "e")
	digits := strings.Replace(mantissa, ".", "", 1)
	exponent, _ := strconv.Atoi(exponentText)
	point := exponent + 1 // digits before the decimal point
	switch {
	case point <= -4 || point > 16:
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		return fmt.Sprintf("%s%se%+03d", sign, m, exponent)
	case point <= 0:
		return sign + "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		return sign + digits + strings.Repeat("0", point-len(digits)) + ".0"
	}
	return sign + digits[:point] + "." + digits[point:]
}

// pyString is json.dumps of a str with ensure_ascii: printable ASCII as
// is, the short escapes \" \\ \n \r \t \b \f, every other code point as
// \uXXXX (lowercase hex; UTF-16 surrogate pairs above U+FFFF). A byte that
// is not UTF-8 becomes the lone surrogate \udcXX, as Python decodes such
// bytes in a command line (surrogateescape).
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\u%04x`, 0xdc00+int(s[i]))
			i++
			continue
		}
		i += size
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= ' ' && r <= '~':
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
