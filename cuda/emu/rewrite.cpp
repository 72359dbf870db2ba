// rewrite.cpp — the emulated NVRTC's source transformations: __shared__
// declarations into per-block storage, the kernel scan of preprocessed text,
// the registration code, and g++ diagnostics in NVRTC's format.
#include "rewrite.h"

#include <cctype>
#include <cstring>
#include <map>

namespace emu {
namespace {

bool IsIdent(char c) { return std::isalnum((unsigned char)c) || c == '_'; }

// A token of C++ source: an identifier, a string or character literal, or
// one punctuation character; comments and whitespace are skipped.
struct Token {
    std::string text;
    size_t begin, end;  // byte range in the source
    bool ident;
};

std::vector<Token> Lex(const std::string &s, bool skip_directives) {
    std::vector<Token> out;
    size_t i = 0;
    const size_t n = s.size();
    bool line_start = true;
    while (i < n) {
        const char c = s[i];
        if (c == '\n') {
            line_start = true;
            i++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            i++;
            continue;
        }
        if (c == '\\' && i + 1 < n && s[i + 1] == '\n') {
            i += 2;
            continue;
        }
        if (skip_directives && line_start && c == '#') {
            while (i < n && s[i] != '\n') i++;
            continue;
        }
        line_start = false;
        if (c == '/' && i + 1 < n && s[i + 1] == '/') {
            while (i < n && s[i] != '\n') i++;
            continue;
        }
        if (c == '/' && i + 1 < n && s[i + 1] == '*') {
            const size_t e = s.find("*/", i + 2);
            i = e == std::string::npos ? n : e + 2;
            continue;
        }
        if (c == '"' || c == '\'') {
            size_t j = i + 1;
            while (j < n && s[j] != c) {
                if (s[j] == '\\') j++;
                j++;
            }
            j = std::min(n, j + 1);
            out.push_back({s.substr(i, j - i), i, j, false});
            i = j;
            continue;
        }
        if (IsIdent(c)) {
            size_t j = i;
            while (j < n && IsIdent(s[j])) j++;
            out.push_back({s.substr(i, j - i), i, j, !std::isdigit((unsigned char)c)});
            i = j;
            continue;
        }
        out.push_back({std::string(1, c), i, i + 1, false});
        i++;
    }
    return out;
}

// LineBreaks returns the line breaks of s ("\n" or "\\\n"), in order, so a
// one-line replacement can keep the line count (and macro continuations).
std::string LineBreaks(const std::string &s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] != '\n') continue;
        out += (i > 0 && s[i - 1] == '\\') ? "\\\n" : "\n";
    }
    return out;
}

// Attribute tokens that may sit in a declaration: dropped (storage is 16-byte aligned).
bool SkipAttribute(const std::vector<Token> &t, size_t &k, size_t end) {
    const std::string &w = t[k].text;
    if (w != "__align__" && w != "alignas" && w != "__attribute__") return false;
    size_t j = k + 1;
    if (j >= end || t[j].text != "(") return false;
    int depth = 0;
    for (; j < end; j++) {
        if (t[j].text == "(") depth++;
        if (t[j].text == ")" && --depth == 0) break;
    }
    k = j;  // at the closing parenthesis
    return true;
}

struct SharedDecl {
    bool ok = false;
    std::string type, name, dims;
};

// ParseDeclarator reads "T name[d1][d2]" from tokens [b, e).
SharedDecl ParseDeclarator(const std::string &src, const std::vector<Token> &t, size_t b, size_t e) {
    SharedDecl d;
    std::vector<size_t> kept;
    for (size_t k = b; k < e; k++) {
        if (SkipAttribute(t, k, e)) continue;
        kept.push_back(k);
    }
    size_t bracket = kept.size();
    for (size_t i = 0; i < kept.size(); i++) {
        if (t[kept[i]].text == "[") {
            bracket = i;
            break;
        }
    }
    if (bracket == 0 || !t[kept[bracket - 1]].ident) return d;
    d.name = t[kept[bracket - 1]].text;
    for (size_t i = 0; i + 1 < bracket; i++) d.type += (d.type.empty() ? "" : " ") + t[kept[i]].text;
    if (bracket < kept.size()) {
        d.dims = src.substr(t[kept[bracket]].begin, t[kept.back()].end - t[kept[bracket]].begin);
    }
    d.ok = !d.type.empty();
    return d;
}

// AtNamespaceScope reports whether token k lies outside every function body:
// every enclosing brace opens a namespace or an extern "C" block.
bool AtNamespaceScope(const std::vector<Token> &t, size_t k) {
    std::vector<bool> stack;  // true: namespace-like brace
    for (size_t i = 0; i < k; i++) {
        if (t[i].text == "{") {
            bool ns = false;
            if (i >= 1 && t[i - 1].text.size() > 1 && t[i - 1].text[0] == '"' && i >= 2 && t[i - 2].text == "extern") ns = true;
            if (i >= 1 && t[i - 1].text == "namespace") ns = true;
            if (i >= 2 && t[i - 2].text == "namespace") ns = true;
            stack.push_back(ns);
        } else if (t[i].text == "}" && !stack.empty()) {
            stack.pop_back();
        }
    }
    for (bool ns : stack) {
        if (!ns) return false;
    }
    return true;
}

void ReplaceIdent(std::string &s, size_t from, const std::string &name, const std::string &with) {
    std::vector<Token> toks = Lex(s.substr(from), false);
    std::string out = s.substr(0, from);
    size_t last = 0;
    const std::string tail = s.substr(from);
    for (const Token &tk : toks) {
        if (!tk.ident || tk.text != name) continue;
        // Keep member accesses (x.name, p->name) alone.
        size_t p = tk.begin;
        while (p > 0 && std::isspace((unsigned char)tail[p - 1])) p--;
        if (p > 0 && (tail[p - 1] == '.' || (p > 1 && tail[p - 1] == '>' && tail[p - 2] == '-'))) continue;
        out += tail.substr(last, tk.begin - last) + with;
        last = tk.end;
    }
    out += tail.substr(last);
    s = out;
}

}  // namespace

std::string RewriteShared(const std::string &input, std::string *err) {
    std::string s = input;
    // Each pass rewrites the first remaining declaration, then lexes again:
    // replacements change offsets.
    for (int guard = 0; guard < 100000; guard++) {
        const std::vector<Token> t = Lex(s, false);
        size_t k = 0;
        while (k < t.size() && !(t[k].ident && t[k].text == "__shared__")) k++;
        if (k == t.size()) return s;
        size_t first = k;  // first token of the declaration (extern/static before it)
        bool is_extern = false;
        while (first > 0 && t[first - 1].ident &&
               (t[first - 1].text == "extern" || t[first - 1].text == "static")) {
            if (t[first - 1].text == "extern") is_extern = true;
            first--;
        }
        size_t end = k + 1;
        int depth = 0;
        for (; end < t.size(); end++) {
            const std::string &w = t[end].text;
            if (w == "(" || w == "[" || w == "{") depth++;
            if (w == ")" || w == "]" || w == "}") depth--;
            if (w == ";" && depth == 0) break;
        }
        if (end == t.size()) {
            *err = "a __shared__ declaration without ';'";
            return s;
        }
        // Split declarators at top-level commas; they share the leading type.
        std::vector<std::pair<size_t, size_t>> parts;
        size_t b = k + 1;
        depth = 0;
        for (size_t j = k + 1; j <= end; j++) {
            const std::string &w = t[j].text;
            if (w == "(" || w == "[") depth++;
            if (w == ")" || w == "]") depth--;
            if ((w == "," && depth == 0) || j == end) {
                parts.push_back({b, j});
                b = j + 1;
            }
        }
        std::vector<SharedDecl> decls;
        for (size_t p = 0; p < parts.size(); p++) {
            SharedDecl d = ParseDeclarator(s, t, parts[p].first, parts[p].second);
            if (p > 0 && !decls.empty() && !d.ok) {
                // "float a[4], b[8]": later declarators have no type of their own.
                const Token &nt = t[parts[p].first];
                if (nt.ident) {
                    d.ok = true;
                    d.type = decls[0].type;
                    d.name = nt.text;
                    if (parts[p].first + 1 < parts[p].second) {
                        d.dims = s.substr(t[parts[p].first + 1].begin, t[parts[p].second - 1].end - t[parts[p].first + 1].begin);
                    }
                }
            }
            if (!d.ok) {
                *err = "cannot parse the __shared__ declaration '" + s.substr(t[first].begin, t[end].end - t[first].begin) + "'";
                return s;
            }
            decls.push_back(d);
        }
        const std::string original = s.substr(t[first].begin, t[end].end - t[first].begin);
        const bool ns_scope = AtNamespaceScope(t, first);
        std::string repl;
        std::vector<std::pair<std::string, std::string>> renames;  // name -> expression, applied after
        for (const SharedDecl &d : decls) {
            if (is_extern) {
                renames.push_back({d.name, "SBEMU_DYNAMIC_SHARED(" + d.type + ")"});
            } else if (ns_scope) {
                repl += "static thread_local sbemu_shared_var<" + d.type + " " + d.dims + "> " + d.name + "__sbemu_var; ";
                renames.push_back({d.name, "(" + d.name + "__sbemu_var.get(\"" + d.name + "\", __FILE__, __LINE__))"});
            } else {
                repl += "SBEMU_SHARED(" + d.type + ", " + d.name + ", " + d.dims + "); ";
            }
        }
        repl += LineBreaks(original);
        const size_t at = t[first].begin;
        s = s.substr(0, at) + repl + s.substr(t[end].end);
        for (const auto &r : renames) ReplaceIdent(s, at + repl.size(), r.first, r.second);
    }
    *err = "too many __shared__ declarations";
    return s;
}

bool ScanKernels(const std::string &pre, std::vector<KernelDecl> *out, std::string *err) {
    const std::vector<Token> t = Lex(pre, true);
    for (size_t i = 0; i < t.size(); i++) {
        if (!(t[i].ident && t[i].text == "__global__")) continue;
        // A template kernel: "template" since the previous ';' or '}'.
        for (size_t j = i; j-- > 0;) {
            if (t[j].text == ";" || t[j].text == "}" || t[j].text == "{") break;
            if (t[j].text == "template") {
                *err = "template __global__ functions are not supported by the emulated NVRTC: call the template "
                       "from an extern \"C\" kernel";
                return false;
            }
        }
        KernelDecl k;
        size_t j = i + 1;
        std::string prev;
        for (; j < t.size(); j++) {
            if (t[j].text == "__launch_bounds__" && j + 1 < t.size() && t[j + 1].text == "(") {
                int depth = 0;
                size_t a = j + 1;
                size_t comma = 0;
                for (j = a; j < t.size(); j++) {
                    if (t[j].text == "(") depth++;
                    if (t[j].text == "," && depth == 1 && comma == 0) comma = j;
                    if (t[j].text == ")" && --depth == 0) break;
                }
                const size_t last = comma ? comma : j;
                for (size_t q = a + 1; q < last; q++) k.bounds += t[q].text;
                continue;
            }
            if (t[j].text == "(") break;
            if (t[j].ident) prev = t[j].text;
        }
        if (j >= t.size() || prev.empty()) continue;
        k.name = prev;
        int depth = 0;
        size_t close = j;
        std::vector<std::pair<size_t, size_t>> params;
        size_t pb = j + 1;
        for (; close < t.size(); close++) {
            const std::string &w = t[close].text;
            if (w == "(" || w == "[" || w == "<") depth++;
            if (w == ")" || w == "]" || w == ">") depth--;
            if (w == "," && depth == 1) {
                params.push_back({pb, close});
                pb = close + 1;
            }
            if (depth == 0) break;
        }
        if (close >= t.size()) continue;
        if (pb < close) params.push_back({pb, close});
        size_t after = close + 1;
        if (after >= t.size() || t[after].text != "{") continue;  // a declaration, not a definition
        for (size_t p = 0; p < params.size(); p++) {
            std::string name;
            for (size_t q = params[p].first; q < params[p].second; q++) {
                if (t[q].ident) name = t[q].text;
            }
            if (name == "void" && params.size() == 1) break;
            k.params.push_back(name.empty() ? "#" + std::to_string(p) : name);
        }
        for (const KernelDecl &seen : *out) {
            if (seen.name == k.name) {
                *err = "kernel " + k.name + " is defined twice";
                return false;
            }
        }
        out->push_back(k);
    }
    return true;
}

std::string RegistrationSource(const std::vector<KernelDecl> &kernels, int arch) {
    std::string s = "\n#line 1 \"<emulator kernel registration>\"\n";
    s += "static const sbemu_kernel_desc sbemu_kernel_table[] = {\n";
    for (const KernelDecl &k : kernels) {
        std::string names;
        for (size_t i = 0; i < k.params.size(); i++) names += (i ? "," : "") + k.params[i];
        s += "    SBEMU_KERNEL(" + k.name + ", " + (k.bounds.empty() ? "0" : "(" + k.bounds + ")") + ", \"" + names + "\"),\n";
    }
    if (kernels.empty()) s += "    {0, 0, 0, 0, 0, 0, 0, 0},\n";
    s += "};\n";
    s += "static const sbemu_module_desc sbemu_module_self = {SBEMU_ABI_VERSION, " + std::to_string(arch) + ", " +
         std::to_string(kernels.size()) + ", sbemu_kernel_table};\n";
    s += "extern \"C\" __attribute__((visibility(\"default\"))) const sbemu_module_desc *sbemu_module_init(const sbemu_api *api) {\n"
         "    if (api == 0 || api->abi_version != SBEMU_ABI_VERSION) return 0;\n"
         "    sbemu_api_ptr = api;\n"
         "    return &sbemu_module_self;\n"
         "}\n";
    return s;
}

std::string GccToNvrtcLog(const std::string &log, const std::string &tmpdir) {
    std::string in = log, out;
    const std::string prefix = tmpdir + "/";
    for (size_t p; (p = in.find(prefix)) != std::string::npos;) in.erase(p, prefix.size());
    size_t start = 0;
    while (start < in.size()) {
        size_t nl = in.find('\n', start);
        if (nl == std::string::npos) nl = in.size();
        std::string line = in.substr(start, nl - start);
        start = nl + 1;
        // file:line:col: kind: message
        size_t c1 = line.find(':');
        if (c1 != std::string::npos && c1 > 0 && line[0] != ' ') {
            size_t c2 = line.find(':', c1 + 1);
            size_t c3 = c2 == std::string::npos ? c2 : line.find(':', c2 + 1);
            auto digits = [&](size_t a, size_t b) {
                if (b == std::string::npos || b <= a) return false;
                for (size_t q = a; q < b; q++) {
                    if (!std::isdigit((unsigned char)line[q])) return false;
                }
                return true;
            };
            if (digits(c1 + 1, c2) && digits(c2 + 1, c3)) {
                line = line.substr(0, c1) + "(" + line.substr(c1 + 1, c2 - c1 - 1) + "):" + line.substr(c3 + 1);
            } else if (digits(c1 + 1, c2)) {
                line = line.substr(0, c1) + "(" + line.substr(c1 + 1, c2 - c1 - 1) + "):" + line.substr(c2 + 1);
            }
        }
        out += line + "\n";
    }
    return out;
}

}  // namespace emu
