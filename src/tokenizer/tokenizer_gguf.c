/*
 * tokenizer_gguf.c - a tokenizer from the metadata embedded in a GGUF file.
 *
 * Rather than a second tokenizer implementation, the GGUF vocabulary is
 * rewritten as the tokenizer.json that Hugging Face's converters would write
 * for it, and handed to the one loader (tokenizer_load_json), so encode,
 * decode and the detokenizer are the code the HF path already tests.
 *
 *   tokenizer.ggml.model "llama" (SentencePiece BPE, Llama 2 / TinyLlama /
 *   Mistral / stories260K): model BPE with byte_fallback over the tokens;
 *   merges derived from the scores as transformers' SentencePieceExtractor
 *   does: every split l + r of a normal token p with l and r in the
 *   vocabulary is a merge ranked by score(p) (highest first; ties in token id
 *   order, then by the ids of l and r). Ranking pairs by the score of the
 *   merged piece is exactly SentencePiece's (and llama.cpp's) BPE rule, so the
 *   two agree. Normalizer Prepend("▁") (unless tokenizer.ggml.add_space_prefix
 *   is false) + Replace(" ", "▁"); decoder Replace("▁", " "), ByteFallback,
 *   Fuse, Strip(1 leading space).
 *
 *   "gpt2" (byte-level BPE: Llama 3, Qwen2/3, ...): tokens and
 *   tokenizer.ggml.merges as they are; the split regex chosen by
 *   tokenizer.ggml.pre ("llama-bpe"/"llama3", "qwen2", or "default"/"gpt2"
 *   for GPT-2's ByteLevel regex; anything else is VLLM_ERR_UNSUPPORTED naming
 *   it); Qwen2 adds the NFC normalizer; decoder ByteLevel.
 *
 * Both: token types 2 (unknown) and 3 (control) become special added tokens,
 * 4 (user-defined) non-special added tokens; BOS/EOS are added by a
 * TemplateProcessing post-processor when tokenizer.ggml.add_bos_token /
 * add_eos_token say so (defaults: BOS for llama, nothing for gpt2, as
 * llama.cpp); the chat template is tokenizer.chat_template;
 * clean_up_tokenization_spaces is false (llama.cpp does no clean-up).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer_internal.h"

enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER = 4, TOKEN_BYTE = 6 };

static const char LLAMA3_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool gstr_eq(gguf_str s, const char *lit) { return s.len == strlen(lit) && !memcmp(s.s, lit, s.len); }

static json_t *jstrn(gguf_str s) { return json_stringn(s.s, (size_t)s.len); }

/* {"type": "Replace", "pattern": {"String": pat}, "content": content} */
static json_t *replace_step(const char *pat, const char *content) {
    return json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", pat, "content", content);
}

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

/* Length of the UTF-8 sequence starting with byte c (1 for stray bytes). */
static size_t utf8_step(unsigned char c) { return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1; }

/* Looks up len bytes of s in vocab (a JSON object piece -> id); -1 if absent. */
static int32_t vocab_id(json_t *vocab, const char *s, size_t len) {
    json_t *v = json_object_getn(vocab, s, len);
    return v ? (int32_t)json_integer_value(v) : -1;
}

/* The SentencePiece merges of the header, as [l, r] pairs, into merges. */
static vllm_status spm_merges(const gguf_tokenizer *g, json_t *vocab, json_t *merges) {
    size_t cap = 1024, n = 0;
    spm_merge *list = malloc(cap * sizeof *list);
    if (!list) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    for (int64_t p = 0; p < g->num_tokens; p++) {
        if (g->token_types && g->token_types[p] != TOKEN_NORMAL) continue;
        gguf_str s = g->tokens[p];
        for (size_t cut = utf8_step((unsigned char)s.s[0]); cut < s.len; cut += utf8_step((unsigned char)s.s[cut])) {
            int32_t l = vocab_id(vocab, s.s, cut), r = vocab_id(vocab, s.s + cut, (size_t)s.len - cut);
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
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *pair = json_pack("[o, o]", jstrn(g->tokens[list[i].left]), jstrn(g->tokens[list[i].right]));
        if (!pair || json_array_append_new(merges, pair)) rc = vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    free(list);
    return rc;
}

/* TemplateProcessing single = [bos] A [eos] as the flags ask, or null. */
static json_t *template_for(const gguf_tokenizer *g, bool bos, bool eos) {
    if (!(bos && g->bos_id >= 0) && !(eos && g->eos_id >= 0)) return json_null();
    json_t *single = json_array(), *special = json_object();
    int32_t ids[2] = {bos ? g->bos_id : -1, eos ? g->eos_id : -1};
    for (int i = 0; i < 2; i++) {
        if (i == 1) json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A", "type_id", 0));
        if (ids[i] < 0) continue;
        json_t *name = jstrn(g->tokens[ids[i]]);
        json_array_append_new(single, json_pack("{s:{s:O, s:i}}", "SpecialToken", "id", name, "type_id", 0));
        json_object_set_new(special, json_string_value(name),
                            json_pack("{s:O, s:[i], s:[O]}", "id", name, "ids", ids[i], "tokens", name));
        json_decref(name);
    }
    return json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single, "pair", json_array(),
                     "special_tokens", special);
}

/* The tokenizer.json root and tokenizer_config for g (see the top). */
static vllm_status build_json(const gguf_file *f, const gguf_tokenizer *g, json_t **root_out, json_t **cfg_out) {
    bool spm = gstr_eq(g->model, "llama"), byte_level = gstr_eq(g->model, "gpt2");
    if (!spm && !byte_level)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.ggml.model '%.*s' (llama and gpt2 are supported)",
                          (int)(g->model.len < 64 ? g->model.len : 64), g->model.s);
    const char *split = NULL;
    bool nfc = false;
    if (byte_level) {
        if (gstr_eq(g->pre, "llama-bpe") || gstr_eq(g->pre, "llama3")) split = LLAMA3_SPLIT;
        else if (gstr_eq(g->pre, "qwen2")) split = QWEN2_SPLIT, nfc = true;
        else if (!(g->pre.len == 0 || gstr_eq(g->pre, "default") || gstr_eq(g->pre, "gpt2")))
            return vllm_error(VLLM_ERR_UNSUPPORTED,
                              "tokenizer.ggml.pre '%.*s' (llama-bpe, qwen2 and default are supported)",
                              (int)(g->pre.len < 64 ? g->pre.len : 64), g->pre.s);
        if (!g->merges) return vllm_error(VLLM_ERR_FORMAT, "gpt2 tokenizer without tokenizer.ggml.merges");
    }
    json_t *vocab = json_object(), *added = json_array(), *merges = json_array();
    json_t *root = json_object(), *cfg = json_object(), *mdl = json_object();
    json_object_set_new(root, "model", mdl);
    json_object_set_new(mdl, "vocab", vocab);
    json_object_set_new(mdl, "merges", merges);
    json_object_set_new(root, "added_tokens", added);
    *root_out = root, *cfg_out = cfg;

    for (int64_t i = 0; i < g->num_tokens; i++) {
        int32_t type = g->token_types ? g->token_types[i] : TOKEN_NORMAL;
        if (json_object_getn(vocab, g->tokens[i].s, (size_t)g->tokens[i].len)) continue; /* first id wins */
        json_object_setn_new(vocab, g->tokens[i].s, (size_t)g->tokens[i].len, json_integer(i));
        if (type == TOKEN_UNKNOWN || type == TOKEN_CONTROL || type == TOKEN_USER)
            json_array_append_new(added, json_pack("{s:I, s:o, s:b, s:b, s:b}", "id", (json_int_t)i, "content",
                                                   jstrn(g->tokens[i]), "lstrip", 0, "rstrip", 0, "special",
                                                   type != TOKEN_USER));
    }
    json_object_set_new(mdl, "type", json_string("BPE"));
    if (spm) {
        vllm_status rc = spm_merges(g, vocab, merges);
        if (rc) return rc;
        json_object_set_new(mdl, "byte_fallback", json_true());
        json_object_set_new(mdl, "fuse_unk", json_true());
        if (g->unk_id >= 0) json_object_set_new(mdl, "unk_token", jstrn(g->tokens[g->unk_id]));
        bool prefix = true;
        gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &prefix);
        json_t *norms = json_array();
        if (prefix) json_array_append_new(norms, json_pack("{s:s, s:s}", "type", "Prepend", "prepend", "\xe2\x96\x81"));
        json_array_append_new(norms, replace_step(" ", "\xe2\x96\x81"));
        json_object_set_new(root, "normalizer", json_pack("{s:s, s:o}", "type", "Sequence", "normalizers", norms));
        json_object_set_new(root, "decoder",
                            json_pack("{s:s, s:[o, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type", "Sequence",
                                      "decoders", replace_step("\xe2\x96\x81", " "), "type", "ByteFallback", "type",
                                      "Fuse", "type", "Strip", "content", " ", "start", 1, "stop", 0));
    } else {
        for (int64_t i = 0; i < g->num_merges; i++) json_array_append_new(merges, jstrn(g->merges[i]));
        json_object_set_new(mdl, "ignore_merges", json_boolean(split == LLAMA3_SPLIT));
        json_t *bl = json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", !split);
        json_object_set_new(root, "pre_tokenizer",
                            split ? json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence",
                                              "pretokenizers", "type", "Split", "pattern", "Regex", split,
                                              "behavior", "Isolated", "invert", 0, bl)
                                  : bl);
        if (nfc) json_object_set_new(root, "normalizer", json_pack("{s:s}", "type", "NFC"));
        json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
    }
    bool add_bos = g->add_bos >= 0 ? g->add_bos == 1 : spm, add_eos = g->add_eos == 1;
    json_object_set_new(root, "post_processor", template_for(g, add_bos, add_eos));
    if (g->bos_id >= 0) json_object_set_new(cfg, "bos_token", jstrn(g->tokens[g->bos_id]));
    if (g->eos_id >= 0) json_object_set_new(cfg, "eos_token", jstrn(g->tokens[g->eos_id]));
    if (g->chat_template.len) json_object_set_new(cfg, "chat_template", jstrn(g->chat_template));
    json_object_set_new(cfg, "clean_up_tokenization_spaces", json_false());
    return VLLM_OK;
}

vllm_status tokenizer_load_gguf(const char *path, tokenizer **out) {
    *out = NULL;
    gguf_file f = {0};
    gguf_tokenizer g = {0};
    json_t *root = NULL, *cfg = NULL;
    vllm_status rc = gguf_open(path, &f);
    if (!rc) rc = gguf_tokenizer_extract(&f, &g);
    if (!rc) rc = build_json(&f, &g, &root, &cfg);
    if (rc) {
        vllm_error_prefix("%s", path);
        json_decref(root);
        json_decref(cfg);
    } else {
        rc = tokenizer_load_json(root, cfg, path, out); /* takes root and cfg */
    }
    gguf_tokenizer_deinit(&g);
    gguf_deinit(&f);
    return rc;
}

vllm_status tokenizer_gguf_path(const char *path, char **out) { return gguf_find_path(path, out); }
