// The tokenizer oracle: llama3-tokenizer-js (1.2.0, an independent
// JavaScript implementation of Llama-3's tokenizer with Meta's vocabulary
// and merges baked in), used two ways by tokenizer/oracle_test.go:
//
//   node oracle.mjs build DIR          write DIR/tokenizer.json in Hugging Face's layout from the
//                                      package's vocabulary and merges ("a b" merges), and
//                                      DIR/tokenizer-pairs.json (the same, merges as pairs)
//   node oracle.mjs encode IN OUT      for every JSON line of IN: {"b64": text} -> {"ids": [...]}
//                                      (encoded without BOS/EOS; the bytes are read as UTF-8 by
//                                      TextDecoder, U+FFFD for ill-formed sequences), and
//                                      {"decode": [ids]} -> {"b64": the decoded text's UTF-8}
//
// Nothing of the vocabulary is kept in the repository: it is written at
// test time into a build directory.
import fs from 'node:fs';
import path from 'node:path';
import llama3Tokenizer from 'llama3-tokenizer-js';

// Llama-3's pre-tokenizer pattern, as in Meta's tokenizer.json.
const PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const SPECIALS = 256; // the package appends Llama-3.1's 256 special tokens after the BPE vocabulary

function tokenizerJSON(pairs) {
    const t = llama3Tokenizer;
    const nVocab = t.vocabById.length - SPECIALS;
    if (t.vocabById[nVocab] !== '<|begin_of_text|>') {
        throw new Error(`unexpected layout: id ${nVocab} is ${t.vocabById[nVocab]}`);
    }
    const vocab = {};
    for (let id = 0; id < nVocab; id++) {
        vocab[t.vocabById[id]] = id;
    }
    // The package keys merges "a b" -> 2*rank+1.
    const merges = [];
    for (const [key, prio] of t.merges) {
        const rank = (prio - 1) / 2;
        merges[rank] = pairs ? key.split(' ') : key;
    }
    for (let i = 0; i < merges.length; i++) {
        if (merges[i] === undefined) throw new Error(`no merge of rank ${i}`);
    }
    const added = [];
    for (let id = nVocab; id < t.vocabById.length; id++) {
        added.push({id, content: t.vocabById[id], single_word: false, lstrip: false, rstrip: false, normalized: false, special: true});
    }
    const bos = '<|begin_of_text|>';
    return {
        version: '1.0',
        truncation: null,
        padding: null,
        added_tokens: added,
        normalizer: null,
        pre_tokenizer: {type: 'Sequence', pretokenizers: [
            {type: 'Split', pattern: {Regex: PATTERN}, behavior: 'Isolated', invert: false},
            {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false},
        ]},
        post_processor: {type: 'Sequence', processors: [
            {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
            {type: 'TemplateProcessing',
             single: [{SpecialToken: {id: bos, type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
             pair: [{SpecialToken: {id: bos, type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
                    {SpecialToken: {id: bos, type_id: 1}}, {Sequence: {id: 'B', type_id: 1}}],
             special_tokens: {[bos]: {id: bos, ids: [t.vocabByString.get(bos)], tokens: [bos]}}},
        ]},
        decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
        model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
                end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
                vocab, merges},
    };
}

function build(dir) {
    fs.mkdirSync(dir, {recursive: true});
    for (const [name, pairs] of [['tokenizer.json', false], ['tokenizer-pairs.json', true]]) {
        const file = path.join(dir, name);
        fs.writeFileSync(file + '.tmp', JSON.stringify(tokenizerJSON(pairs), null, 2));
        fs.renameSync(file + '.tmp', file);
    }
}

function encode(input, output) {
    const decoder = new TextDecoder('utf-8'); // not fatal: U+FFFD per maximal subpart
    const out = [];
    for (const line of fs.readFileSync(input, 'utf8').split('\n')) {
        if (line === '') continue;
        const req = JSON.parse(line);
        if (req.decode !== undefined) {
            const text = llama3Tokenizer.decode(req.decode);
            out.push(JSON.stringify({b64: Buffer.from(text, 'utf8').toString('base64')}));
        } else {
            const text = decoder.decode(Buffer.from(req.b64, 'base64'));
            out.push(JSON.stringify({ids: llama3Tokenizer.encode(text, {bos: false, eos: false})}));
        }
    }
    fs.writeFileSync(output, out.join('\n') + '\n');
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'build' && args.length === 1) {
    build(args[0]);
} else if (mode === 'encode' && args.length === 2) {
    encode(args[0], args[1]);
} else {
    console.error('usage: node oracle.mjs build DIR | encode IN.jsonl OUT.jsonl');
    process.exit(2);
}
