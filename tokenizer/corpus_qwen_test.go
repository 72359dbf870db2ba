package tokenizer

import (
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"

	"stepbench/tokenizer/tokenizertest"
)

// qwenCorpus is the Llama-3 corpus (corpus) and the text where Qwen's
// tokenizer differs from Llama-3's: input that NFC changes, digits (one a
// piece), CJK, long whitespace runs, Qwen's added tokens in text, and the
// characters where JavaScript's \s and Oniguruma's differ (the reference,
// @huggingface/tokenizers, translates the pattern to Oniguruma's classes).
func qwenCorpus() []string {
	out := corpus()
	out = append(out, nfcCorpus()...)
	out = append(out, qwenDigits()...)
	out = append(out, cjk...)
	out = append(out, longWhitespace()...)
	out = append(out, qwenSpecialCorpus()...)
	return append(out, "a\u0085\u0085b", "x\u0085y", "\ufeff\ufeffx", "a\ufeff b", "x'ſ", "IT'ſ", "\u0085\n\u0085")
}

// nfcCorpus is text that NFC changes: decomposed accents and Hangul,
// singletons (Å, Ω, K), marks out of canonical order, composition
// exclusions, and marks after an added token (normalized apart from it).
func nfcCorpus() []string {
	out := []string{"cafe\u0301", "e\u0301\u0301", "\u212b ngstrom", "\u2126hm", "\u212aelvin", "a\u0301\u0323", "a\u0323\u0301",
		"\u1e0b\u0323", "\u0958\u0959", "\u0915\u093c", "\u1100\u1161\u11a8", "\u1100\u1161 \u1100\u1161\u11a8\u11a8",
		"\u0041\u030a\u0301", "o\u0308\u0304", "\u00f6\u0304", "\u0344", "\u0340\u0341", "\u2000\u2001", "\u1fed",
		"<|im_start|>\u0301x", "e<|im_end|>\u0301", "\u0301<|endoftext|>\u0301", "ﬁ\u0301", "１\u0301", "1\u0301",
		// > and U+0338 compose to ≯ (U+226F), but not across the end of an
		// added token: the text between added tokens is normalized apart.
		">\u0338", "<|im_end|>\u0338", "a<think>\u0338", "=\u0338<\u0338"}
	for _, s := range append(append([]string{}, prose...), scripts...) {
		if d := norm.NFD.String(s); d != s {
			out = append(out, d, " "+d)
		}
	}
	for _, s := range combining {
		out = append(out, norm.NFD.String(s), norm.NFC.String(s))
	}
	return out
}

// qwenDigits are numbers: every digit is a piece of its own. Qwen3's
// vocabulary has only two tokens of two digits, fullwidth "１０" and "２０":
// the text that tells Qwen2Pattern from Llama-3's \p{N}{1,3} by the ids.
func qwenDigits() []string {
	out := []string{"１０", "２０", "第１０章", "１０２０３０", " ２０", "x１０y",
		"3.14159265358979", "2024年12月31日", "第1章第23节", "１２３abc４５６", "Ⅻ12ⅻ", "٣٤٥ and 345", "x1y22z333w4444",
		"1,234,567.89", "-0.000001", "1e100", "0xDEADBEEF", "192.168.100.200:8080", "$12,345.67", "12345678901234567890"}
	for n := 1; n <= 20; n++ {
		out = append(out, strings.Repeat("7", n)+" apples", fmt.Sprintf("item%d", n*n*n))
	}
	return out
}

// cjk is Chinese, Japanese and Korean text, with digits and Latin between.
var cjk = []string{
	"通义千问是阿里巴巴开发的大语言模型。", "今天的天气怎么样？我们去爬山吧！", "人工智能（AI）正在改变世界，2024年是关键的一年。",
	"吾輩は猫である。名前はまだ無い。", "東京タワーの高さは333メートルです。", "カタカナとひらがなの混じった文章。",
	"대한민국의 수도는 서울입니다.", "한글은 1443년에 만들어졌다.", "繁體中文與简体中文並存。", "你好，世界！Hello, 世界! 안녕, 世界!",
	"「引用」と『二重引用』、【括弧】。", "中文，标点。符号！？；：", "Qwen3模型有8B参数，支持128K上下文。",
}

// longWhitespace are runs of spaces, tabs and line breaks of up to 200.
func longWhitespace() []string {
	var out []string
	for _, n := range []int{16, 31, 64, 100, 200} {
		sp := strings.Repeat(" ", n)
		out = append(out, sp, sp+"x", "x"+sp, "x"+sp+"y", sp+"\n"+sp+"y", strings.Repeat("\t", n)+"y", strings.Repeat("\n", n),
			strings.Repeat(" \t", n/2)+"z", strings.Repeat("\r\n", n/4)+"w", "a"+strings.Repeat("\u3000", n/4)+"b")
	}
	return out
}

// qwenSpecialCorpus holds Qwen3's added tokens, alone and in text, a ChatML
// conversation, and strings that are almost an added token.
func qwenSpecialCorpus() []string {
	var out []string
	for _, n := range tokenizertest.QwenAdded {
		out = append(out, n, "text before "+n+" and after", n+n, " "+n+" ", n+"\n\n")
	}
	return append(out,
		ChatML("What is 2+2?"), ChatML("  spaces kept  "), ChatML("多轮对话"),
		"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>",
		"<|im_start", "im_end|>", "<|IM_START|>", "<| im_start |>", "<<|im_start|>>", "<|<|endoftext|>|>", "<think", "</think",
		"<thinking>", "<|endoftext|><|endoftext|>Hello", "<|begin_of_text|>", "<|eot_id|>")
}
