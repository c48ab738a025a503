/*
 * tokenizer_gguf.c - a tokenizer, and a tokenizer_config, from the metadata
 * embedded in a GGUF file.
 *
 * Rather than a second tokenizer implementation, the GGUF vocabulary is
 * rewritten as the tokenizer.json that transformers builds when it loads the
 * same file (AutoTokenizer.from_pretrained(dir, gguf_file=...), see
 * transformers/integrations/gguf/gguf_tokenizer_mapping.py), and handed to
 * the one loader (tokenizer_load_json), so encode, decode and the detokenizer
 * are the code the Hugging Face path already tests. Only the metadata is read
 * (gguf_open_metadata): the tokenizer of a file whose tensor types we cannot
 * compute in still loads.
 *
 * tokenizer.ggml.model "gpt2" (byte-level BPE: Llama 3, Qwen2/3, SmolLM, ...):
 *   tokens and tokenizer.ggml.merges as they are; a token written outside
 *   the GPT-2 byte alphabet (a user-defined "  " say) is respelled as its
 *   UTF-8 bytes in that alphabet, as transformers does. The split before
 *   the byte-level step comes from tokenizer.ggml.pre through pre_types[]
 *   below: the regexes llama.cpp's llama-vocab applies for each name, in the
 *   tokenizer.json form of the models those names stand for (GPT-2's
 *   ByteLevel regex; Llama 3's; Qwen2's with NFC; digits one by one then
 *   GPT-2's, for StarCoder and SmolLM; Tekken's; GPT-4o's). A name not in
 *   the table is VLLM_ERR_UNSUPPORTED naming it (llama.cpp would quietly
 *   fall back to its default split). "smollm" is one transformers does not
 *   know (it falls back to the plain GPT-2 regex); SmolLM's own
 *   tokenizer.json and llama.cpp split digits first, and so do we.
 *   ignore_merges (a pre-token that is a token is taken whole) and BOS by
 *   default follow llama.cpp for the Llama 3 and Tekken names. Decoder
 *   ByteLevel.
 *
 * "llama" (SentencePiece-style BPE with byte fallback):
 *   - Gemma (general.architecture gemma, gemma2, gemma3), as transformers'
 *     gemma_tokenizer: a token made only of whitespace that holds a space is
 *     respelled as that many "▁" (the file keeps Gemma's "  " tokens as
 *     spaces, the model meets them as "▁▁"); merges from the file order (the
 *     pairs every token splits into, earlier tokens first, and within a
 *     token the longer left part first), not from the scores; normalizer
 *     Replace(" ", "▁") without a prefix; decoder Replace("▁", " "),
 *     ByteFallback, Fuse, with ByteFallback's rule for byte runs that are
 *     not UTF-8 as Rust's tokenizers has it (one U+FFFD per byte, a BOM
 *     kept; decoder_cfg.byte_fallback_per_byte).
 *     (The other SentencePiece files keep transformers.js's rule, that of
 *     their tokenizer.json form, so that the two forms decode alike.)
 *   - others (Llama 2, TinyLlama, Mistral, stories260K): merges derived from
 *     the scores as transformers' SentencePieceExtractor does: every split
 *     l + r of a normal token p with l and r in the vocabulary is a merge
 *     ranked by score(p) (highest first; ties in token id order, then by the
 *     ids of l and r). Ranking pairs by the score of the merged piece is
 *     exactly SentencePiece's (and llama.cpp's) BPE rule, so the two agree.
 *     Normalizer Prepend("▁") (unless tokenizer.ggml.add_space_prefix is
 *     false) + Replace(" ", "▁"); decoder Replace("▁", " "), ByteFallback,
 *     Fuse, Strip(1 leading space). (These match Hugging Face's own
 *     tokenizer.json for such models; transformers' GGUF loader builds a
 *     Metaspace-based LlamaTokenizer instead.)
 *
 * Both: token type 3 (control) and the bos/eos/unk/pad tokens become special
 * added tokens, type 4 (user-defined) non-special added tokens (when its
 * spelling was kept: transformers adds a respelled one as the vocabulary
 * token it now is), so they are matched whole in the text; a token string
 * that appears twice keeps its last id (as transformers and llama.cpp).
 * BOS/EOS are added by a TemplateProcessing post-processor when
 * tokenizer.ggml.add_bos_token / add_eos_token say so (defaults: BOS for
 * llama, for the Llama 3 and Tekken pre-tokenizers, nothing otherwise, as
 * llama.cpp). clean_up_tokenization_spaces is false (transformers and
 * llama.cpp do no clean-up for these).
 *
 * The tokenizer_config (tokenizer_load_config): bos/eos/unk/pad_token as the
 * strings of their ids, add_bos_token/add_eos_token, and the chat template:
 * tokenizer.chat_template, or, when the file also has named ones
 * (tokenizer.chat_template.NAME, e.g. tool_use), the list form of
 * tokenizer_config.json with the unnamed one as "default".
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER = 4, TOKEN_BYTE = 6 };

/* ------------------------------------------------- byte-level pre-tokenizers */

static const char LLAMA3_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char DIGITS_SPLIT[] = "\\p{N}";
/* Tekken and GPT-4o: a word is an optional non-letter, then upper-case-like
 * letters followed by lower-case-like ones (or the reverse); GPT-4o lets an
 * English contraction end the word. */
#define UPPERISH "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWERISH "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define CONTRACTION "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
static const char TEKKEN_SPLIT[] =
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "*" LOWERISH "+|[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "+" LOWERISH "*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT4O_SPLIT[] =
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "*" LOWERISH "+" CONTRACTION "?|[^\\r\\n\\p{L}\\p{N}]?" UPPERISH "+" LOWERISH
    "*" CONTRACTION "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* What a tokenizer.ggml.pre name means: a Split regex before the ByteLevel
 * step (NULL: ByteLevel's own GPT-2 regex alone), or the digits split before
 * GPT-2's; whether a whole-token pre-token skips the merges; whether BOS is
 * added when the file has no add_bos_token. */
typedef struct pre_type {
    const char *name;
    const char *split;
    bool gpt2_regex; /* ByteLevel use_regex after the split */
    bool nfc, ignore_merges, bos;
} pre_type;

static const pre_type pre_types[] = {
    {"default", NULL, true, false, false, false},
    {"gpt2", NULL, true, false, false, false},
    {"gpt-2", NULL, true, false, false, false},
    {"phi-2", NULL, true, false, false, false},
    {"mpt", NULL, true, false, false, false},
    {"olmo", NULL, true, false, false, false},
    {"jais", NULL, true, false, false, false},
    {"llama3", LLAMA3_SPLIT, false, false, true, true},
    {"llama-v3", LLAMA3_SPLIT, false, false, true, true},
    {"llama-bpe", LLAMA3_SPLIT, false, false, true, true},
    {"falcon3", LLAMA3_SPLIT, false, false, true, true},
    {"falcon-h1", LLAMA3_SPLIT, false, false, true, true},
    {"pixtral", LLAMA3_SPLIT, false, false, true, true},
    {"dbrx", LLAMA3_SPLIT, false, false, false, false},
    {"smaug-bpe", LLAMA3_SPLIT, false, false, false, false},
    {"qwen2", QWEN2_SPLIT, false, true, false, false},
    {"deepseek-r1-qwen", QWEN2_SPLIT, false, false, false, false},
    {"megrez", QWEN2_SPLIT, false, false, false, false},
    {"stablelm2", QWEN2_SPLIT, false, false, false, false},
    {"smollm", DIGITS_SPLIT, true, false, false, false},
    {"starcoder", DIGITS_SPLIT, true, false, false, false},
    {"refact", DIGITS_SPLIT, true, false, false, false},
    {"command-r", DIGITS_SPLIT, true, false, false, false},
    {"codeshell", DIGITS_SPLIT, true, false, false, false},
    {"exaone", DIGITS_SPLIT, true, false, false, false},
    {"minerva-7b", DIGITS_SPLIT, true, false, false, false},
    {"tekken", TEKKEN_SPLIT, false, false, true, true},
    {"gpt-4o", GPT4O_SPLIT, false, false, false, false},
    {"llama4", GPT4O_SPLIT, false, false, false, false},
};

/* ------------------------------------------------------------------ helpers */

static bool gstr_eq(gguf_str s, const char *lit) { return s.len == strlen(lit) && !memcmp(s.s, lit, s.len); }

static json_t *jstrn(gguf_str s) { return json_stringn(s.s, (size_t)s.len); }

/* {"type": "Replace", "pattern": {"String": pat}, "content": content} */
static json_t *replace_step(const char *pat, const char *content) {
    return json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", pat, "content", content);
}

/* Looks up len bytes of s in vocab (a JSON object piece -> id); -1 if absent. */
static int32_t vocab_id(json_t *vocab, const char *s, size_t len) {
    json_t *v = json_object_getn(vocab, s, len);
    return v ? (int32_t)json_integer_value(v) : -1;
}

/* Python's str.isspace(), which transformers' Gemma respelling tests. */
static bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest
 * for 256 + n in byte order. */
static void byte_alphabet(uint16_t byte_to_cp[256], bool in_alphabet[324]) {
    int n = 0;
    memset(in_alphabet, 0, 324);
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        in_alphabet[byte_to_cp[b]] = true;
    }
}

/* The vocabulary spelling of every token, as transformers builds it: tokens
 * are borrowed from the file except the respelled ones, which point into
 * *store (caller frees). respelled[i] says which. */
static vllm_status respell_tokens(const gguf_tokenizer *g, bool byte_level, bool gemma, gguf_str *out,
                                  bool *respelled, char **store) {
    uint16_t byte_to_cp[256];
    bool in_alphabet[324];
    byte_alphabet(byte_to_cp, in_alphabet);
    size_t need = 0;
    for (int64_t i = 0; i < g->num_tokens; i++) {
        gguf_str s = g->tokens[i];
        out[i] = s;
        respelled[i] = false;
        bool has_space = false, all_space = true, all_alphabet = true;
        for (uint64_t k = 0; k < s.len; k += (uint64_t)utf8_len((uint8_t)s.s[k])) {
            uint32_t c = utf8_get(s.s + k);
            has_space |= c == ' ';
            all_space &= py_isspace(c);
            all_alphabet &= c < 324 && in_alphabet[c];
        }
        if (byte_level && !all_alphabet) respelled[i] = true, need += 2 * s.len;
        if (gemma && has_space && all_space) respelled[i] = true, need += 3 * s.len;
    }
    *store = NULL;
    if (!need) return VLLM_OK;
    char *p = *store = malloc(need);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    for (int64_t i = 0; i < g->num_tokens; i++) {
        if (!respelled[i]) continue;
        gguf_str s = g->tokens[i];
        char *start = p;
        if (byte_level) {
            for (uint64_t k = 0; k < s.len; k++) p += utf8_encode(byte_to_cp[(uint8_t)s.s[k]], p);
        } else {
            for (uint64_t k = 0; k < s.len; k += (uint64_t)utf8_len((uint8_t)s.s[k])) p += utf8_encode(0x2581, p);
        }
        out[i] = (gguf_str){start, (uint64_t)(p - start)};
    }
    return VLLM_OK;
}

/* ------------------------------------------------------------------ merges */

typedef struct spm_merge {
    float score;
    int32_t piece, left, right;
} spm_merge;

static int spm_merge_cmp(const void *pa, const void *pb) {
    const spm_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->piece != b->piece) return a->piece < b->piece ? -1 : 1;
    if (a->left != b->left) return a->left < b->left ? -1 : 1;
    return (a->right > b->right) - (a->right < b->right);
}

static vllm_status add_merge(json_t *merges, gguf_str l, gguf_str r) {
    json_t *pair = json_pack("[o, o]", jstrn(l), jstrn(r));
    if (!pair || json_array_append_new(merges, pair)) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    return VLLM_OK;
}

/* The SentencePiece merges ranked by score (see the top), as [l, r] pairs. */
static vllm_status spm_merges(const gguf_tokenizer *g, const gguf_str *tok, json_t *vocab, json_t *merges) {
    size_t cap = 1024, n = 0;
    spm_merge *list = malloc(cap * sizeof *list);
    if (!list) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    for (int64_t p = 0; p < g->num_tokens; p++) {
        if (g->token_types && g->token_types[p] != TOKEN_NORMAL) continue;
        gguf_str s = tok[p];
        for (uint64_t cut = s.len ? (uint64_t)utf8_len((uint8_t)s.s[0]) : 0; cut < s.len;
             cut += (uint64_t)utf8_len((uint8_t)s.s[cut])) {
            int32_t l = vocab_id(vocab, s.s, cut), r = vocab_id(vocab, s.s + cut, s.len - cut);
            if (l < 0 || r < 0) continue;
            if (buf_grow((void **)&list, &cap, n + 1, sizeof *list) != VLLM_OK) {
                free(list);
                return VLLM_ERR_NOMEM;
            }
            list[n++] = (spm_merge){g->scores ? g->scores[p] : -(float)p, (int32_t)p, l, r};
        }
    }
    qsort(list, n, sizeof *list, spm_merge_cmp);
    vllm_status rc = VLLM_OK;
    for (size_t i = 0; i < n && !rc; i++) rc = add_merge(merges, tok[list[i].left], tok[list[i].right]);
    free(list);
    return rc;
}

/* Gemma's merges in file order (see the top): for each token in id order,
 * every split l + r with both parts in the vocabulary, the longest l first. */
static vllm_status gemma_merges(const gguf_tokenizer *g, const gguf_str *tok, json_t *vocab, json_t *merges) {
    vllm_status rc = VLLM_OK;
    for (int64_t p = 0; p < g->num_tokens && !rc; p++) {
        gguf_str s = tok[p];
        for (uint64_t cut = s.len; cut > 0 && !rc;) {
            do cut--; while (cut > 0 && ((uint8_t)s.s[cut] & 0xC0) == 0x80); /* previous code point boundary */
            if (cut == 0) break;
            if (vocab_id(vocab, s.s, cut) >= 0 && vocab_id(vocab, s.s + cut, s.len - cut) >= 0)
                rc = add_merge(merges, (gguf_str){s.s, cut}, (gguf_str){s.s + cut, s.len - cut});
        }
    }
    return rc;
}

/* ------------------------------------------------------------ tokenizer.json */

/* TemplateProcessing single = [bos] A [eos] as the flags ask, or null. */
static json_t *template_for(const gguf_tokenizer *g, const gguf_str *tok, bool bos, bool eos) {
    if (!(bos && g->bos_id >= 0) && !(eos && g->eos_id >= 0)) return json_null();
    json_t *single = json_array(), *special = json_object();
    int32_t ids[2] = {bos ? g->bos_id : -1, eos ? g->eos_id : -1};
    for (int i = 0; i < 2; i++) {
        if (i == 1) json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A", "type_id", 0));
        if (ids[i] < 0) continue;
        json_t *name = jstrn(tok[ids[i]]);
        json_array_append_new(single, json_pack("{s:{s:O, s:i}}", "SpecialToken", "id", name, "type_id", 0));
        json_object_set_new(special, json_string_value(name),
                            json_pack("{s:O, s:[i], s:[O]}", "id", name, "ids", ids[i], "tokens", name));
        json_decref(name);
    }
    return json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single, "pair", json_array(),
                     "special_tokens", special);
}

/* The pre-tokenizer type a byte-level file names, or an error naming it. */
static vllm_status find_pre_type(const gguf_tokenizer *g, const pre_type **out) {
    if (g->pre.len == 0) {
        *out = &pre_types[0];
        return VLLM_OK;
    }
    for (size_t i = 0; i < sizeof pre_types / sizeof *pre_types; i++)
        if (gstr_eq(g->pre, pre_types[i].name)) {
            *out = &pre_types[i];
            return VLLM_OK;
        }
    return vllm_error(VLLM_ERR_UNSUPPORTED,
                      "tokenizer.ggml.pre '%.*s' is not a pre-tokenizer we know (supported: default, gpt2, "
                      "llama-bpe, qwen2, smollm, starcoder, tekken, gpt-4o and their aliases)",
                      (int)(g->pre.len < 64 ? g->pre.len : 64), g->pre.s);
}

static bool is_gemma(const gguf_file *f) {
    gguf_str arch = {0};
    gguf_get_string(f, "general.architecture", &arch);
    return gstr_eq(arch, "gemma") || gstr_eq(arch, "gemma2") || gstr_eq(arch, "gemma3");
}

/* Every token is valid UTF-8 (JSON strings must be, and so must the text we
 * match them against). */
static vllm_status check_tokens(const gguf_tokenizer *g) {
    for (int64_t i = 0; i < g->num_tokens; i++)
        if (utf8_valid_prefix(g->tokens[i].s, (size_t)g->tokens[i].len) != g->tokens[i].len)
            return vllm_error(VLLM_ERR_FORMAT, "tokenizer.ggml.tokens[%lld] is not valid UTF-8", (long long)i);
    for (int64_t i = 0; i < g->num_merges; i++)
        if (utf8_valid_prefix(g->merges[i].s, (size_t)g->merges[i].len) != g->merges[i].len)
            return vllm_error(VLLM_ERR_FORMAT, "tokenizer.ggml.merges[%lld] is not valid UTF-8", (long long)i);
    return VLLM_OK;
}

/* The tokenizer.json root for g (see the top). */
static vllm_status build_json(const gguf_file *f, const gguf_tokenizer *g, json_t **root_out) {
    *root_out = NULL;
    bool spm = gstr_eq(g->model, "llama"), byte_level = gstr_eq(g->model, "gpt2");
    if (!spm && !byte_level)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (llama and gpt2 are)",
                          (int)(g->model.len < 64 ? g->model.len : 64), g->model.s);
    const pre_type *pre = NULL;
    vllm_status rc;
    if (byte_level) {
        if ((rc = find_pre_type(g, &pre))) return rc;
        if (!g->merges) return vllm_error(VLLM_ERR_FORMAT, "gpt2 tokenizer without tokenizer.ggml.merges");
    }
    bool gemma = spm && is_gemma(f);
    gguf_str *tok = malloc((size_t)g->num_tokens * sizeof *tok);
    bool *respelled = malloc((size_t)g->num_tokens);
    char *store = NULL;
    if (!tok || !respelled) {
        free(tok);
        free(respelled);
        return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    if ((rc = respell_tokens(g, byte_level, gemma, tok, respelled, &store))) goto done;

    json_t *vocab = json_object(), *added = json_array(), *merges = json_array();
    json_t *root = json_object(), *mdl = json_object();
    json_object_set_new(root, "model", mdl);
    json_object_set_new(mdl, "vocab", vocab);
    json_object_set_new(mdl, "merges", merges);
    json_object_set_new(root, "added_tokens", added);
    *root_out = root;

    for (int64_t i = 0; i < g->num_tokens; i++) {
        if (json_object_setn_new(vocab, tok[i].s, (size_t)tok[i].len, json_integer(i))) {
            rc = vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
    }
    for (int64_t i = 0; i < g->num_tokens; i++) {
        int32_t type = g->token_types ? g->token_types[i] : TOKEN_NORMAL;
        bool named = i == g->bos_id || i == g->eos_id || i == g->unk_id || i == g->pad_id;
        bool special = named || type == TOKEN_CONTROL || (type == TOKEN_UNKNOWN && !byte_level);
        if (special && byte_level && respelled[i] && !named) continue; /* transformers skips these */
        if (!special && !(type == TOKEN_USER && !respelled[i])) continue;
        if (vocab_id(vocab, tok[i].s, (size_t)tok[i].len) != i) continue; /* a later duplicate has it */
        json_array_append_new(added, json_pack("{s:I, s:o, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content",
                                               jstrn(tok[i]), "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "special", special));
    }
    json_object_set_new(mdl, "type", json_string("BPE"));
    if (spm) {
        if ((rc = gemma ? gemma_merges(g, tok, vocab, merges) : spm_merges(g, tok, vocab, merges))) goto done;
        json_object_set_new(mdl, "byte_fallback", json_true());
        json_object_set_new(mdl, "fuse_unk", json_true());
        if (g->unk_id >= 0) json_object_set_new(mdl, "unk_token", jstrn(tok[g->unk_id]));
        bool prefix = !gemma;
        if (!gemma) gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &prefix);
        json_t *norms = json_array();
        if (prefix) json_array_append_new(norms, json_pack("{s:s, s:s}", "type", "Prepend", "prepend", "\xe2\x96\x81"));
        json_array_append_new(norms, replace_step(" ", "\xe2\x96\x81"));
        json_object_set_new(root, "normalizer", json_pack("{s:s, s:o}", "type", "Sequence", "normalizers", norms));
        json_t *decoders = json_pack("[o, {s:s}, {s:s}]", replace_step("\xe2\x96\x81", " "), "type", "ByteFallback",
                                     "type", "Fuse");
        if (!gemma)
            json_array_append_new(decoders, json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip", "content", " ",
                                                      "start", 1, "stop", 0));
        json_object_set_new(root, "decoder", json_pack("{s:s, s:o}", "type", "Sequence", "decoders", decoders));
    } else {
        for (int64_t i = 0; i < g->num_merges; i++) json_array_append_new(merges, jstrn(g->merges[i]));
        json_object_set_new(mdl, "ignore_merges", json_boolean(pre->ignore_merges));
        json_t *bl = json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex",
                               pre->gpt2_regex);
        json_object_set_new(root, "pre_tokenizer",
                            pre->split ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence",
                                                   "pretokenizers", "type", "Split", "pattern", "Regex", pre->split,
                                                   "behavior", "Isolated", "invert", 0, bl)
                                       : bl);
        if (pre->nfc) json_object_set_new(root, "normalizer", json_pack("{s:s}", "type", "NFC"));
        json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
    }
    bool add_bos = g->add_bos >= 0 ? g->add_bos == 1 : spm || pre->bos, add_eos = g->add_eos == 1;
    json_object_set_new(root, "post_processor", template_for(g, tok, add_bos, add_eos));
done:
    free(store);
    free(tok);
    free(respelled);
    return rc;
}

/* ---------------------------------------------------------- tokenizer_config */

/* The chat template(s): a string, or the list of {name, template} when the
 * file also has tokenizer.chat_template.NAME keys. NULL when there is none. */
static json_t *chat_templates(const gguf_file *f, const gguf_tokenizer *g) {
    static const char prefix[] = "tokenizer.chat_template.";
    json_t *list = json_array();
    if (g->chat_template.len)
        json_array_append_new(list, json_pack("{s:s, s:o}", "name", "default", "template", jstrn(g->chat_template)));
    for (int64_t i = 0; i < f->num_kvs; i++) {
        const gguf_kv *kv = &f->kvs[i];
        size_t pl = sizeof prefix - 1;
        if (kv->key.len <= pl || memcmp(kv->key.s, prefix, pl) || kv->type != GGUF_TYPE_STRING) continue;
        gguf_str name = {kv->key.s + pl, kv->key.len - pl}, text;
        char key[256];
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.s, kv->key.len);
        key[kv->key.len] = 0;
        if (gguf_get_string(f, key, &text) != VLLM_OK) continue;
        json_array_append_new(list, json_pack("{s:o, s:o}", "name", jstrn(name), "template", jstrn(text)));
    }
    if (json_array_size(list) == 1 && g->chat_template.len) {
        json_t *one = jstrn(g->chat_template);
        json_decref(list);
        return one;
    }
    if (json_array_size(list) == 0) {
        json_decref(list);
        return NULL;
    }
    return list;
}

static vllm_status build_config(const gguf_file *f, const gguf_tokenizer *g, json_t **out) {
    json_t *cfg = json_object();
    const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const int32_t ids[] = {g->bos_id, g->eos_id, g->unk_id, g->pad_id};
    for (int i = 0; i < 4; i++)
        if (ids[i] >= 0) json_object_set_new(cfg, keys[i], jstrn(g->tokens[ids[i]]));
    if (g->add_bos >= 0) json_object_set_new(cfg, "add_bos_token", json_boolean(g->add_bos));
    if (g->add_eos >= 0) json_object_set_new(cfg, "add_eos_token", json_boolean(g->add_eos));
    json_t *tmpl = chat_templates(f, g);
    if (tmpl) json_object_set_new(cfg, "chat_template", tmpl);
    json_object_set_new(cfg, "clean_up_tokenization_spaces", json_false());
    *out = cfg;
    return VLLM_OK;
}

/* Opens path's metadata and extracts the tokenizer; on failure f and g are
 * released and the message names the file. */
static vllm_status open_tokenizer(const char *path, gguf_file *f, gguf_tokenizer *g) {
    vllm_status rc = gguf_open_metadata(path, f);
    if (!rc && (rc = gguf_tokenizer_extract(f, g))) gguf_deinit(f);
    return rc;
}

vllm_status tokenizer_load_gguf(const char *path, tokenizer **out) {
    *out = NULL;
    gguf_file f = {0};
    gguf_tokenizer g = {0};
    json_t *root = NULL, *cfg = NULL;
    vllm_status rc = open_tokenizer(path, &f, &g);
    if (rc) return rc;
    bool gemma = gstr_eq(g.model, "llama") && is_gemma(&f);
    if (!(rc = check_tokens(&g))) rc = build_json(&f, &g, &root);
    if (!rc) rc = build_config(&f, &g, &cfg);
    if (rc) {
        vllm_error_prefix("%s", path);
        json_decref(root);
        json_decref(cfg);
    } else {
        rc = tokenizer_load_json(root, cfg, path, out); /* takes root and cfg */
        if (!rc && gemma) (*out)->dec.byte_fallback_per_byte = true; /* as transformers, the reference here */
    }
    gguf_tokenizer_deinit(&g);
    gguf_deinit(&f);
    return rc;
}

vllm_status tokenizer_gguf_config(const char *path, json_t **out) {
    *out = NULL;
    gguf_file f = {0};
    gguf_tokenizer g = {0};
    vllm_status rc = open_tokenizer(path, &f, &g);
    if (rc) return rc;
    if ((rc = check_tokens(&g)) || (rc = build_config(&f, &g, out))) vllm_error_prefix("%s", path);
    gguf_tokenizer_deinit(&g);
    gguf_deinit(&f);
    return rc;
}

vllm_status tokenizer_gguf_path(const char *path, char **out) { return gguf_find_path(path, out); }
