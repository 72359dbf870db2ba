package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// The corpus the Go tokenizer is compared on with the oracle
// (oracle_test.go): every kind of text the pattern and the merges treat
// differently. Each generator is deterministic.

var prose = []string{
	`The capital of France is Paris. It sits on the Seine, and about two million people live within its old city walls.`,
	`When the kernel author changed the tile size from 64 to 128, the prefill got faster, but decode didn't move at all; she wasn't surprised.`,
	`"Are you sure?" he asked. "Yes," she said, "I've checked it twice, and I'll check it again tomorrow."`,
	`A benchmark that reuses a prompt's prefix measures the cache, not the kernel. That's why every iteration draws new tokens.`,
	`In 1969, Apollo 11 landed on the Moon; Neil Armstrong's first words were heard by some 600 million people.`,
	`Mix 250 g of flour, 3 eggs and 0.5 l of milk. Let it rest for 30 minutes before you heat the pan to 180 °C.`,
	`The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!`,
	`We'd like to thank everyone who's contributed: they're the reason it's still alive. You'll find their names in AUTHORS.`,
	`Memory bandwidth, not compute, bounds a decode step at batch one: every weight is read once per token.`,
	`Self-attention costs O(n²) in the sequence length; flash-attention keeps that cost but never writes the n×n matrix to memory.`,
	`Dr. Smith (née Jones) arrived at 9:45 a.m., e-mailed the team, and left—without a word—at noon.`,
	`Is it "tokenizer" or 'tokeniser'? Both spellings appear; the library doesn't care, and neither should you...`,
	`Price: $1,299.99 (was $1,499.00); save 13%! Offer ends 2024-12-31, 23:59 UTC+01:00.`,
	`Ünïcödé têxt wïth àccents: café, naïve, façade, jalapeño, smörgåsbord, Øresund, Łódź, İstanbul.`,
	`Γειά σου κόσμε! Привет, мир! Здравствуйте, как дела? Ελληνικά και Русский рядом.`,
	`She said: “It’s fine” — but it wasn’t; the quotes are curly, and the apostrophe isn’t ASCII.`,
}

var code = []string{
	"func main() {\n\tfmt.Println(\"hello, world\")\n}\n",
	"for i := 0; i < n; i++ {\n\t\tsum += a[i] * b[i] // dot product\n\t}",
	"def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
	"import numpy as np\nx = np.arange(10, dtype=np.float32).reshape(2, 5)\nprint(x @ x.T)",
	"const add = (a, b) => a + b;\nconsole.log(`sum: ${add(2, 3)}`);",
	"#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
	"__global__ void axpy(float a, const float* x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] += a * x[i];\n}",
	"SELECT name, COUNT(*) AS n FROM users WHERE age >= 18 GROUP BY name ORDER BY n DESC LIMIT 10;",
	"{\"model\": \"llama-3-8b\", \"batch\": [1, 2, 4], \"ok\": true, \"eps\": 1e-05}",
	"<div class=\"note\"><p>Hello&nbsp;<b>world</b></p></div>",
	"#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.go; do gofmt -l \"$f\"; done",
	"x += 1; y -= 2; z *= 3; w /= 4; a <<= 1; b >>= 2; c &&= d; e ||= f; g ??= h;",
	"if (a != b && c == d || !e) { return -1; } else if (x >= 0x7fffffff) { throw new Error('overflow'); }",
	"    \n    \n        return nil\n    }\n\n\n",
	"matrix[i][j] = (matrix[i-1][j] + matrix[i][j-1]) % 1000000007",
	"// TODO(alice): remove after v2.0.0-rc.1 ships\n/* block\n * comment\n */",
	"$ go test ./... -run 'Test(Oracle|Encode)' -count=1 -v 2>&1 | tee log.txt",
	"key: value\nlist:\n  - one\n  - two\nnested:\n  deep: [1, 2, 3]\n",
	"a=1&b=two&c=%20three%21 https://example.com/path/to/page?q=llama+3&lang=en#section-2",
	"regex: ^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@(?:[a-z0-9-]+\\.)+[a-z]{2,}$",
}

var scripts = []string{
	"镇", "我们今天去公园散步，天气很好。", "東京は日本の首都です。ひらがなとカタカナ、そして漢字。",
	"안녕하세요, 세계! 한국어 텍스트입니다.", "مرحبا بالعالم، هذه جملة عربية.", "שלום עולם, זה משפט בעברית.",
	"नमस्ते दुनिया, यह हिंदी है।", "สวัสดีชาวโลก นี่คือภาษาไทย", "Xin chào thế giới, đây là tiếng Việt.",
	"Բարեւ աշխարհ", "გამარჯობა მსოფლიო", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉",
	"中文English混合mixed文本text123数字", "日本語とEnglishの混在テキスト、全角ＡＢＣ１２３。",
	"العربية123 and English معًا", "Ꙋ", "ʻŌlelo Hawaiʻi", "Ǆemal ǅemal ǆemal",
}

var emoji = []string{
	"🦙", "🦙Ꙋ", "Ꙋ🦙", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵🇺🇸", "1️⃣2️⃣3️⃣", "❤️", "☕ coffee", "I ❤️ NY",
	"🙂🙃😉", "🏳️‍🌈", "🧑🏿‍💻 writes code", "emoji at the end 🚀", "🚀 emoji at the start", "a🦙b🦙c",
	"😀😃😄😁😆😅😂🤣", "✂️📎🖇️", "⭐⭐⭐⭐⭐ (5/5)",
}

var combining = []string{
	"e\u0301", "cafe\u0301", "a\u0308o\u0308u\u0308", "n\u0303", "Z\u0351\u0364\u036b\u0346a\u0310\u0364l\u0350g\u0304o\u0301",
	"\u0301 leading mark", "x\u20d7 vector", "q\u0323\u0307", "ﬁnance ﬂow", "Å vs A\u030a", "\u0915\u094d\u0937",
	"ห\u0e34\u0e49", "a\u200db", "a\u200cb", "zero\u200bwidth", "\u0640\u064b\u064c",
}

// specialNames are Llama-3.1's special tokens as llama3-tokenizer-js lists them.
func specialNames() []string {
	names := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
		"<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
		"<|eom_id|>", "<|eot_id|>", "<|python_tag|>"}
	for i := 3; i <= 247; i++ {
		names = append(names, fmt.Sprintf("<|reserved_special_token_%d|>", i))
	}
	return names
}

func specialCorpus() []string {
	var out []string
	names := specialNames()
	for i, n := range names {
		out = append(out, n)
		if i%8 == 0 {
			out = append(out, "text before "+n+" and after", n+n, " "+n+" ", n+"\n\n")
		}
	}
	out = append(out,
		"<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"<|eot_id", "eot_id|>", "<|EOT_ID|>", "<| eot_id |>", "<|reserved_special_token_248|>", "<|reserved_special_token_00|>",
		"<|<|eot_id|>|>", "<<|eot_id|>>", "<|begin_of_text|><|begin_of_text|>Hello", "<|>", "<||>", "<|unknown|>")
	return out
}

func numberCorpus() []string {
	var out []string
	digits := "31415926535897932384626433832795028841971693993751"
	for n := 1; n <= 40; n++ {
		out = append(out, digits[:n], " "+digits[:n], "x"+digits[:n]+"y", strings.Repeat("9", n), strings.Repeat("0", n)+"1")
	}
	out = append(out, "1,000,000", "1.000.000,50", "-42", "+3.14159", "6.022e23", "1e-5", "0x1F", "0b1011", "v1.2.3",
		"2024-01-15T10:30:00Z", "(555) 123-4567", "192.168.0.1", "3/4", "50%", "#1", "1st 2nd 3rd 4th", "12:30pm",
		"１２３４５", "٠١٢٣٤٥٦٧٨٩", "१२३", "x² + y³ = z⁴", "½ ¾ ⅓", "Ⅻ ⅻ", "①②③", "𝟙𝟚𝟛", "123abc456def7890")
	return out
}

func contractionCorpus() []string {
	var out []string
	for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
		for _, form := range []string{c, strings.ToUpper(c), strings.ToUpper(c[:1]) + c[1:]} {
			out = append(out, "it'"+form, "IT'"+form, "it'"+form+" here", "'"+form, "x'"+form+"y", "’"+form)
			if len(form) > 1 {
				out = append(out, "it'"+strings.ToLower(form[:1])+strings.ToUpper(form[1:]))
			}
		}
	}
	out = append(out, "I'M", "We'Re", "DON'T", "don't", "Don'T", "rock'n'roll", "'tis", "''s", "'''", "O'Neil", "the 90's",
		"y'all'd've", "it's'", "'", "l'école", "'hello'", "s'", "'S'", "can't won't shan't")
	return out
}

func whitespaceCorpus() []string {
	var out []string
	for n := 1; n <= 12; n++ {
		sp := strings.Repeat(" ", n)
		out = append(out, sp, sp+"word", "word"+sp, "a"+sp+"b", sp+"\n", "\n"+sp, sp+"123", sp+"!", sp+"\n"+sp+"x",
			strings.Repeat("\t", n), strings.Repeat("\n", n), strings.Repeat("\r\n", n), "x"+strings.Repeat("\t", n)+"y")
	}
	out = append(out, "\r", "\r\r\n", " \t \n \t ", "line one\nline two\r\nline three\rend", "trailing space ",
		"trailing tab\t", "trailing newline\n", "\n\nleading newlines", "a \n b", "a\t\nb", "word\n\n\n\nword",
		"\u00a0nbsp\u00a0", "em\u2003space", "ideographic\u3000space", "\u2028line sep\u2029para sep", "\u000bvt\u000cff",
		"  \u00a0  mixed", "x \u3000 y", "\t\tindented\n\t\t\tmore", " ", "")
	return out
}

// invalidCorpus holds byte strings that are not UTF-8: the oracle reads them
// with TextDecoder (one U+FFFD per maximal subpart), the Go tokenizer must
// give the same ids.
func invalidCorpus() []string {
	return []string{"\xff", "\xfe\xff", "abc\x80def", "\xc3", "\xc3(", "\xe2\x82", "\xe2\x82(", "\xe2\x82\xac\xe2",
		"\xf0\x9f\xa6", "\xf0\x9f\xa6 llama", "\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
		"ok \xe9t\xe9", "\x80\x80\x80", "mid\xcedle", "\xef\xbf\xbd already replaced", "a\xffb\xfec",
		"<|eot_id|>\xff<|eot_id|>", "\xe6\x97\xa5\xe6\x9c", "1\xa02", "\xc2\xa0\xc2", "tail\xf0\x9f"}
}

// randomCorpus draws n strings from a pool of characters of every class,
// lengths 1..60, seeded.
func randomCorpus(n int) []string {
	pool := []string{"a", "b", "Z", "é", "ß", "Ж", "λ", "中", "日", "한", "ع", "א", "ก", "0", "7", "٣", "²", "½", " ", " ", " ",
		"\t", "\n", "\r", "\u3000", "\u00a0", "'", "'s", "'LL", "’", "!", "?", ".", ",", "-", "_", "(", ")", "\"", "<|", "|>",
		"🦙", "👍🏽", "\u0301", "\u200d", "$", "#", "@", "\\", "/", "{", "}", "<|eot_id|>", "the", " the", "ing", "123"}
	rng := rand.New(rand.NewPCG(18, 2024))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for k := 1 + rng.IntN(60); k > 0; k-- {
			b.WriteString(pool[rng.IntN(len(pool))])
		}
		out[i] = b.String()
	}
	return out
}

// corpus is every string of the comparison.
func corpus() []string {
	var out []string
	for _, p := range prose {
		out = append(out, p, " "+p, strings.ToUpper(p), strings.ToLower(p))
		out = append(out, strings.SplitAfter(p, " ")...)
	}
	for _, c := range code {
		out = append(out, c)
		out = append(out, strings.Split(c, "\n")...)
	}
	out = append(out, strings.Join(prose, "\n\n"), strings.Join(code, "\n"))
	out = append(out, scripts...)
	out = append(out, emoji...)
	out = append(out, combining...)
	out = append(out, numberCorpus()...)
	out = append(out, contractionCorpus()...)
	out = append(out, whitespaceCorpus()...)
	out = append(out, specialCorpus()...)
	out = append(out, invalidCorpus()...)
	return append(out, randomCorpus(800)...)
}
