// tokenize_ref.mjs - the independent reference for the tokenizer tests:
// transformers.js (offline) tokenizes/decodes the cases in CASES_JSON with the
// tokenizer in MODEL_DIR and prints one JSON object on stdout.
//
//   node tests/ref/tokenize_ref.mjs MODEL_DIR CASES_JSON
//
// CASES_JSON: {"texts": [str...], "bytes_hex": [hex of raw bytes...]}
// Output:
//   encode: [{text, special, plain, dec, dec_skip, dec_plain}]   ids with/without
//           add_special_tokens; decode of `special` with skip_special_tokens
//           false/true; decode of `plain`
//   bytes:  [{hex, plain, special}]   raw bytes read as TextDecoder would
//           (each invalid sequence -> U+FFFD), then encoded
//   random: [{ids, dec, dec_skip}]    decode of seeded random id sequences:
//           random vocabulary ids, and random slices of the encodings above
//           (cutting multi-byte characters at both ends)
//   info:   {bos_id, eos_id, special_ids}
import path from 'node:path';
import fs from 'node:fs';
import { env, AutoTokenizer } from '@huggingface/transformers';

const [dir, casesPath] = process.argv.slice(2);
env.allowRemoteModels = false;
env.allowLocalModels = true;
const abs = path.resolve(dir);
env.localModelPath = path.dirname(abs) + path.sep;
const tok = await AutoTokenizer.from_pretrained(path.basename(abs));
const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));

const decode = (ids, skip) => ids.length ? tok.decode(ids, { skip_special_tokens: skip }) : '';
const encode = (text, special) => tok.encode(text, { add_special_tokens: special });

const out = { encode: [], bytes: [], random: [], info: {} };
for (const text of cases.texts) {
  const special = encode(text, true), plain = encode(text, false);
  out.encode.push({ text, special, plain, dec: decode(special, false), dec_skip: decode(special, true),
                    dec_plain: decode(plain, false) });
}
for (const hex of cases.bytes_hex ?? []) {
  // ignoreBOM: a leading U+FEFF is text, not a byte order mark to drop
  const text = new TextDecoder('utf-8', { ignoreBOM: true }).decode(Buffer.from(hex, 'hex'));
  out.bytes.push({ hex, plain: encode(text, false), special: encode(text, true) });
}

// mulberry32: a small seeded PRNG so the random cases are the same every run
let seed = 12345;
const rand = () => {
  seed = (seed + 0x6D2B79F5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const valid = [];
let vocabSize = 0;
for (const [, id] of tok.model.tokens_to_ids) {
  valid.push(id);
  if (id >= vocabSize) vocabSize = id + 1;
}
const special = tok.all_special_ids;
for (let k = 0; k < 60; k++) {
  const ids = [];
  const n = 1 + Math.floor(rand() * 12);
  for (let i = 0; i < n; i++) {
    const r = rand();
    if (r < 0.1 && special.length) ids.push(special[Math.floor(rand() * special.length)]);
    else if (r < 0.5) ids.push(Math.floor(rand() * Math.min(vocabSize, 600)));   // bytes / short pieces
    else ids.push(valid[Math.floor(rand() * valid.length)]);
  }
  out.random.push({ ids, dec: decode(ids, false), dec_skip: decode(ids, true) });
}
for (const e of out.encode) {
  if (e.special.length < 2) continue;
  for (let k = 0; k < 3; k++) {
    const a = Math.floor(rand() * e.special.length);
    const b = a + 1 + Math.floor(rand() * (e.special.length - a));
    const ids = e.special.slice(a, b);
    out.random.push({ ids, dec: decode(ids, false), dec_skip: decode(ids, true) });
  }
}
out.info = { bos_id: tok.bos_token_id ?? -1, eos_id: tok.eos_token_id ?? -1, special_ids: special };
process.stdout.write(JSON.stringify(out) + '\n');
