/*
 * tokenizer.c - loading tokenizer.json / tokenizer_config.json, and encode.
 *
 * The reference is transformers.js (PreTrainedTokenizer._encode_text and the
 * classes it builds from tokenizer.json); where it and the Rust `tokenizers`
 * crate differ we follow transformers.js, and where a file asks for something
 * neither we nor it can reproduce exactly we refuse to load, naming the field.
 *
 * encode(text):
 *   1. invalid UTF-8 -> U+FFFD per maximal invalid subpart (TextDecoder);
 *   2. LlamaTokenizer with legacy=false: "▁" + text with "▁" -> " " (and the
 *      normalizer/pre-tokenizer replaced by Metaspace(prepend_scheme=first));
 *   3. split out added tokens: at each position the longest added token
 *      (transformers.js DictionarySplitter), lstrip/rstrip trim the neighbours;
 *   4. each text section: normalizer (NFC/NFD/NFKC/NFKD via utf8proc, Prepend,
 *      Replace, Strip, Sequence), pre-tokenizer (Split regex via PCRE2,
 *      ByteLevel, Metaspace, Sequence), BPE per pre-token, fuse_unk;
 *   5. post-processor (TemplateProcessing / Bert / Roberta / ByteLevel /
 *      Sequence) adds special tokens when asked.
 *
 * Regexes: tokenizer.json patterns are JavaScript regexes to transformers.js;
 * jsregex.c compiles them with PCRE2 so that they match the same text.
 *
 * Not supported (load fails naming it): models other than BPE, BPE
 * end_of_word_suffix / continuing_subword_suffix, normalizers Lowercase,
 * StripAccents, BertNormalizer, Precompiled, Replace with a Regex pattern;
 * pre-tokenizers other than Split/ByteLevel/Metaspace/Sequence, Split
 * behaviours other than Isolated/Removed; post-processors other than the
 * listed; decoders other than ByteLevel, Metaspace and a Sequence of
 * Replace(String)/ByteFallback/Fuse/Strip in that order (see detokenizer.c);
 * tokenizer_config remove_space / do_lowercase_and_remove_accent.
 * Like transformers.js, added tokens' normalized and single_word flags are
 * ignored, Metaspace's "split" is ignored (the section stays one word), and
 * add_bos_token / add_eos_token do not change encode: the post-processor in
 * tokenizer.json decides. Split behaviours MergedWithPrevious/Next and
 * Contiguous are refused although transformers.js quietly treats them as
 * Isolated (that would differ from the Rust tokenizers the files come from).
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/strbuf.h"
#include "tokenizer/jsregex.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

/* A list of pieces (byte ranges of one strbuf). */
typedef struct piece_list {
    strbuf text;
    size_t *off, *len;
    size_t n, cap;
} piece_list;

static vllm_status pl_add(piece_list *pl, const char *s, size_t n) {
    if (pl->n == pl->cap) { /* both arrays grow together, as buf_grow gives both the same capacity */
        size_t c = pl->cap, d = pl->cap;
        vllm_status rc;
        if ((rc = buf_grow((void **)&pl->off, &c, pl->n + 1, sizeof *pl->off)) != VLLM_OK ||
            (rc = buf_grow((void **)&pl->len, &d, pl->n + 1, sizeof *pl->len)) != VLLM_OK)
            return rc;
        pl->cap = c;
    }
    pl->off[pl->n] = pl->text.len;
    pl->len[pl->n] = n;
    pl->n++;
    return sb_add(&pl->text, s, n);
}

static void pl_clear(piece_list *pl) {
    pl->n = 0;
    pl->text.len = 0;
}

static void pl_free(piece_list *pl) {
    free(pl->text.s);
    free(pl->off);
    free(pl->len);
}

/* Byte length of the leading JS whitespace of s[0..n) (valid UTF-8). */
static size_t js_space_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int l = utf8_len((uint8_t)s[i]);
        if (!jsregex_is_space(utf8_get(s + i))) break;
        i += (size_t)l;
    }
    return i;
}

/* Byte length of s[0..n) without its trailing JS whitespace. */
static size_t js_space_trim_end(const char *s, size_t n) {
    size_t keep = 0;
    for (size_t i = 0; i < n;) {
        int l = utf8_len((uint8_t)s[i]);
        if (!jsregex_is_space(utf8_get(s + i))) keep = i + (size_t)l;
        i += (size_t)l;
    }
    return keep;
}

/* --------------------------------------------------------- JSON helpers */

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *key, bool dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static vllm_status jdup(json_t *v, const char *field, char **s, size_t *n) {
    if (!json_is_string(v)) return vllm_error(VLLM_ERR_FORMAT, "%s: expected a string", field);
    *n = json_string_length(v);
    *s = malloc(*n + 1);
    if (!*s) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(*s, json_string_value(v), *n + 1);
    return VLLM_OK;
}

/* A config token field: "<s>" or {"content": "<s>", "__type": "AddedToken"}. */
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The real id of a token string, or -1. */
static int32_t token_id(const tokenizer *t, const char *s, size_t n) {
    int32_t id = strmap_get(&t->model.syms, s, n);
    return id >= 0 && id < t->model.n_real ? id : -1;
}

/* --------------------------------------------------------- loading: model */

static vllm_status load_model(tokenizer *t, json_t *model, json_t *added) {
    const char *type = jstr(model, "type");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (type && strcmp(type, "BPE") != 0)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: model.type \"%s\" (only BPE)", type);
    if (!json_is_object(vocab) || !json_is_array(merges))
        return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: model.vocab/model.merges missing (BPE expected)");
    const char *eow = jstr(model, "end_of_word_suffix");
    if (eow && *eow)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: model.end_of_word_suffix \"%s\"", eow);
    const char *csuf = jstr(model, "continuing_subword_suffix");
    if (csuf && *csuf)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: model.continuing_subword_suffix");

    bpe *b = &t->model;
    vllm_status rc = strmap_init(&b->syms, (uint32_t)(json_object_size(vocab) + json_array_size(merges) / 4 + 64));
    if (rc) return rc;
    int64_t max_id = -1;
    const int64_t id_limit = 1 << 26;
    for (void *it = json_object_iter(vocab); it; it = json_object_iter_next(vocab, it)) {
        json_t *v = json_object_iter_value(it);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= id_limit)
            return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: model.vocab[\"%s\"]: bad id",
                              json_object_iter_key(it));
        if (id > max_id) max_id = id;
        if ((rc = strmap_put(&b->syms, json_object_iter_key(it), json_object_iter_key_len(it), (int32_t)id)))
            return rc;
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *idv = json_object_get(a, "id"), *cv = json_object_get(a, "content");
        json_int_t id = json_is_integer(idv) ? json_integer_value(idv) : -1;
        if (id < 0 || id >= id_limit || !json_is_string(cv))
            return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: added_tokens[%zu]: bad id or content", i);
        if (id > max_id) max_id = id;
        if ((rc = strmap_put(&b->syms, json_string_value(cv), json_string_length(cv), (int32_t)id)))
            return rc;
    }
    if (max_id < 0) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: empty vocabulary");
    b->n_real = b->n_syms = (int32_t)(max_id + 1);
    t->vocab_size = b->n_real;

    if ((rc = bpe_init_merges(b, json_array_size(merges)))) return rc;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *l, *r;
        size_t ll, rl;
        if (json_is_string(m)) {
            /* transformers.js: "a b".split(' ', 2) */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: model.merges[%zu] \"%s\": no space", i, s);
            const char *sp2 = strchr(sp + 1, ' ');
            l = s, ll = (size_t)(sp - s), r = sp + 1;
            rl = sp2 ? (size_t)(sp2 - r) : strlen(r);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            l = json_string_value(json_array_get(m, 0)), ll = json_string_length(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1)), rl = json_string_length(json_array_get(m, 1));
        } else {
            return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: model.merges[%zu]: not \"a b\" or [a, b]", i);
        }
        if ((rc = bpe_add_merge(b, l, ll, r, rl, (uint32_t)i))) return rc;
    }

    b->ignore_merges = jbool(model, "ignore_merges", false);
    b->byte_fallback = jbool(model, "byte_fallback", false);
    b->fuse_unk = jbool(model, "fuse_unk", false);
    const char *unk = jstr(model, "unk_token");
    b->unk_id = unk ? token_id(t, unk, strlen(unk)) : -1;
    for (int k = 0; k < 256; k++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", k);
        b->byte_id[k] = token_id(t, name, 6);
    }
    return VLLM_OK;
}

/* id -> piece strings: vocab, then added tokens over them. */
static vllm_status load_pieces(tokenizer *t, json_t *vocab, json_t *added) {
    t->piece = calloc((size_t)t->vocab_size, sizeof *t->piece);
    t->piece_len = calloc((size_t)t->vocab_size, sizeof *t->piece_len);
    t->id_flags = calloc((size_t)t->vocab_size, 1);
    if (!t->piece || !t->piece_len || !t->id_flags)
        return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory for %d pieces", t->vocab_size);
    for (void *it = json_object_iter(vocab); it; it = json_object_iter_next(vocab, it)) {
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
        size_t n = json_object_iter_key_len(it);
        char *s = malloc(n + 1);
        if (!s) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(s, json_object_iter_key(it), n + 1);
        free(t->piece[id]);
        t->piece[id] = s;
        t->piece_len[id] = (uint32_t)n;
    }
    size_t i;
    json_t *a;
    t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
    if (!t->added) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    json_array_foreach(added, i, a) {
        added_token *at = &t->added[t->n_added];
        vllm_status rc = jdup(json_object_get(a, "content"), "tokenizer.json: added_tokens[].content",
                              &at->content, &at->len);
        if (rc) return rc;
        t->n_added++;
        at->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        at->lstrip = jbool(a, "lstrip", false);
        at->rstrip = jbool(a, "rstrip", false);
        at->special = jbool(a, "special", false);
        char *s = malloc(at->len + 1);
        if (!s) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(s, at->content, at->len + 1);
        free(t->piece[at->id]);
        t->piece[at->id] = s;
        t->piece_len[at->id] = (uint32_t)at->len;
    }
    /* splitter index: added tokens by first byte (empty contents never match) */
    int count[256] = {0};
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].len) count[(uint8_t)t->added[k].content[0]]++;
    for (int c = 0; c < 256; c++) {
        if (!count[c]) continue;
        t->added_by_byte[c] = malloc(((size_t)count[c] + 1) * sizeof(int32_t));
        if (!t->added_by_byte[c]) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
        int n = 0;
        for (int k = 0; k < t->n_added; k++)
            if (t->added[k].len && (uint8_t)t->added[k].content[0] == c) t->added_by_byte[c][n++] = k;
        t->added_by_byte[c][n] = -1;
    }
    return VLLM_OK;
}

/* ID_SPECIAL / ID_ADDED_STR by string, as transformers.js compares strings. */
static vllm_status load_flags(tokenizer *t, json_t *cfg) {
    strmap special = {0}, addedm = {0};
    vllm_status rc;
    if ((rc = strmap_init(&special, 64)) || (rc = strmap_init(&addedm, 64))) goto done;
    for (int k = 0; k < t->n_added; k++) {
        added_token *at = &t->added[k];
        if ((rc = strmap_put(&addedm, at->content, at->len, 1))) goto done;
        if (at->special && (rc = strmap_put(&special, at->content, at->len, 1))) goto done;
    }
    json_t *extra = json_object_get(cfg, "additional_special_tokens"), *v;
    size_t i;
    json_array_foreach(extra, i, v) {
        if (json_is_string(v) && (rc = strmap_put(&special, json_string_value(v), json_string_length(v), 1)))
            goto done;
    }
    for (int32_t id = 0; id < t->vocab_size; id++) {
        if (!t->piece[id]) continue;
        if (strmap_get(&special, t->piece[id], t->piece_len[id]) >= 0) t->id_flags[id] |= ID_SPECIAL;
        if (strmap_get(&addedm, t->piece[id], t->piece_len[id]) >= 0) t->id_flags[id] |= ID_ADDED_STR;
    }
done:
    strmap_deinit(&special);
    strmap_deinit(&addedm);
    return rc;
}

/* ---------------------------------------------- loading: pipeline stages */

static vllm_status load_normalizer(tokenizer *t, json_t *n, const char *field) {
    if (json_is_null(n) || !n) return VLLM_OK;
    const char *type = jstr(n, "type");
    if (!type) return vllm_error(VLLM_ERR_FORMAT, "%s: no type", field);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers"), *x;
        size_t i;
        json_array_foreach(list, i, x) {
            vllm_status rc = load_normalizer(t, x, field);
            if (rc) return rc;
        }
        return VLLM_OK;
    }
    norm_step st = {0};
    vllm_status rc = VLLM_OK;
    if (!strcmp(type, "NFC")) st.kind = NORM_NFC;
    else if (!strcmp(type, "NFD")) st.kind = NORM_NFD;
    else if (!strcmp(type, "NFKC")) st.kind = NORM_NFKC;
    else if (!strcmp(type, "NFKD")) st.kind = NORM_NFKD;
    else if (!strcmp(type, "Prepend")) {
        st.kind = NORM_PREPEND;
        rc = jdup(json_object_get(n, "prepend"), "tokenizer.json: normalizer Prepend.prepend", &st.a, &st.a_len);
    } else if (!strcmp(type, "Replace")) {
        st.kind = NORM_REPLACE;
        json_t *pat = json_object_get(n, "pattern");
        if (!json_object_get(pat, "String"))
            return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace with a Regex pattern");
        if ((rc = jdup(json_object_get(pat, "String"), "tokenizer.json: normalizer Replace.pattern", &st.a, &st.a_len)) ||
            (rc = jdup(json_object_get(n, "content"), "tokenizer.json: normalizer Replace.content", &st.b, &st.b_len)))
            goto fail;
    } else if (!strcmp(type, "Strip")) {
        st.kind = NORM_STRIP;
        st.left = jbool(n, "strip_left", false);
        st.right = jbool(n, "strip_right", false);
    } else {
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: normalizer type \"%s\"", type);
    }
    if (rc) goto fail;
    norm_step *ns = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *ns);
    if (!ns) {
        rc = vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    t->norm = ns;
    t->norm[t->n_norm++] = st;
    return VLLM_OK;
fail:
    free(st.a);
    free(st.b);
    return rc;
}

static vllm_status add_pretok(tokenizer *t, pretok_step st) {
    pretok_step *ps = realloc(t->pretok, (size_t)(t->n_pretok + 1) * sizeof *ps);
    if (!ps) {
        if (st.re) pcre2_code_free(st.re);
        free(st.repl);
        return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->pretok = ps;
    t->pretok[t->n_pretok++] = st;
    return VLLM_OK;
}

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static vllm_status add_metaspace(tokenizer *t, const char *repl, size_t rl, const char *scheme) {
    pretok_step st = {.kind = PRETOK_METASPACE, .scheme = PREPEND_ALWAYS};
    if (scheme && !strcmp(scheme, "first")) st.scheme = PREPEND_FIRST;
    else if (scheme && !strcmp(scheme, "never")) st.scheme = PREPEND_NEVER;
    else if (scheme && strcmp(scheme, "always"))
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: Metaspace prepend_scheme \"%s\"", scheme);
    st.repl = malloc(rl + 1);
    if (!st.repl) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(st.repl, repl, rl + 1);
    st.repl_len = rl;
    return add_pretok(t, st);
}

static vllm_status load_pretokenizer(tokenizer *t, json_t *p) {
    if (!p || json_is_null(p)) return VLLM_OK;
    const char *type = jstr(p, "type");
    if (!type) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: pre_tokenizer without type");
    vllm_status rc;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers"), *x;
        size_t i;
        json_array_foreach(list, i, x) {
            if ((rc = load_pretokenizer(t, x))) return rc;
        }
        return VLLM_OK;
    }
    if (!strcmp(type, "Split")) {
        pretok_step st = {.kind = PRETOK_SPLIT};
        json_t *pat = json_object_get(p, "pattern");
        json_t *rx = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        const char *beh = jstr(p, "behavior");
        st.invert = jbool(p, "invert", false);
        if (!st.invert) {
            if (beh && !strcasecmp(beh, "Removed")) st.removed = true;
            else if (!beh || strcasecmp(beh, "Isolated"))
                return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: Split behavior \"%s\"", beh ? beh : "(none)");
        }
        if (json_is_string(rx))
            rc = jsregex_compile(json_string_value(rx), json_string_length(rx), false,
                               "tokenizer.json: pre_tokenizer Split.pattern.Regex", &st.re);
        else if (json_is_string(lit))
            rc = jsregex_compile(json_string_value(lit), json_string_length(lit), true,
                               "tokenizer.json: pre_tokenizer Split.pattern.String", &st.re);
        else
            return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: Split.pattern needs Regex or String");
        if (rc) return rc;
        if (st.removed && json_is_string(rx)) {
            uint32_t groups = 0;
            pcre2_pattern_info(st.re, PCRE2_INFO_CAPTURECOUNT, &groups);
            if (groups) {
                pcre2_code_free(st.re);
                return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: Split behavior Removed with capture groups");
            }
        }
        return add_pretok(t, st);
    }
    if (!strcmp(type, "ByteLevel")) {
        pretok_step st = {.kind = PRETOK_BYTELEVEL};
        st.add_prefix_space = jbool(p, "add_prefix_space", false);
        if (jbool(p, "use_regex", true) &&
            (rc = jsregex_compile(gpt2_pattern, sizeof gpt2_pattern - 1, false, "ByteLevel regex", &st.re)))
            return rc;
        return add_pretok(t, st);
    }
    if (!strcmp(type, "Metaspace")) {
        json_t *r = json_object_get(p, "replacement");
        if (!json_is_string(r)) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: Metaspace.replacement");
        json_t *sr = json_object_get(p, "str_rep");
        json_t *use = json_is_string(sr) && json_string_length(sr) ? sr : r;
        if (strcmp(json_string_value(use), json_string_value(r)))
            return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: Metaspace.str_rep differs from replacement");
        return add_metaspace(t, json_string_value(r), json_string_length(r), jstr(p, "prepend_scheme"));
    }
    return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer type \"%s\"", type);
}

static vllm_status tmpl_add(tokenizer *t, int32_t id) {
    if (t->n_tmpl == TEMPLATE_MAX)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: post_processor template over %d items", TEMPLATE_MAX);
    t->tmpl[t->n_tmpl++] = id;
    return VLLM_OK;
}

/* A post-processor token string -> its id (transformers.js converts the
 * string with tokens_to_ids, unknown strings becoming unk). */
static vllm_status tmpl_token(tokenizer *t, const char *s, const char *field) {
    int32_t id = s ? token_id(t, s, strlen(s)) : -1;
    if (id < 0) id = t->model.unk_id;
    if (id < 0) return vllm_error(VLLM_ERR_FORMAT, "%s: token \"%s\" not in the vocabulary", field, s ? s : "?");
    return tmpl_add(t, id);
}

/* Sets t->tmpl for one post-processor; *has_template tells whether it added
 * any structure (ByteLevel only passes the text through). */
static vllm_status load_postprocessor(tokenizer *t, json_t *p, bool *has_template) {
    if (!p || json_is_null(p)) return VLLM_OK;
    const char *type = jstr(p, "type");
    if (!type) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: post_processor without type");
    vllm_status rc;
    if (!strcmp(type, "ByteLevel")) return VLLM_OK;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "processors"), *x;
        size_t i;
        json_array_foreach(list, i, x) {
            if ((rc = load_postprocessor(t, x, has_template))) return rc;
        }
        return VLLM_OK;
    }
    if (*has_template)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: two templating post_processors");
    t->n_tmpl = 0;
    if (!strcmp(type, "TemplateProcessing")) {
        json_t *single = json_object_get(p, "single"), *item;
        size_t i;
        if (!json_is_array(single)) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: TemplateProcessing.single");
        json_array_foreach(single, i, item) {
            json_t *sp = json_object_get(item, "SpecialToken"), *sq = json_object_get(item, "Sequence");
            if (sp) rc = tmpl_token(t, jstr(sp, "id"), "tokenizer.json: TemplateProcessing.single");
            else if (sq && jstr(sq, "id") && !strcmp(jstr(sq, "id"), "A")) rc = tmpl_add(t, TEMPLATE_SEQ_A);
            else if (sq) rc = VLLM_OK; /* sequence B: absent for a single text */
            else rc = vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: TemplateProcessing.single[%zu]", i);
            if (rc) return rc;
        }
    } else if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        if ((rc = tmpl_token(t, json_string_value(json_array_get(cls, 0)), "tokenizer.json: post_processor.cls")) ||
            (rc = tmpl_add(t, TEMPLATE_SEQ_A)) ||
            (rc = tmpl_token(t, json_string_value(json_array_get(sep, 0)), "tokenizer.json: post_processor.sep")))
            return rc;
    } else {
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: post_processor type \"%s\"", type);
    }
    *has_template = true;
    return VLLM_OK;
}

static vllm_status dec_replace_add(dec_replace *arr, int *n, json_t *d) {
    json_t *pat = json_object_get(d, "pattern");
    json_t *s = json_object_get(pat, "String");
    if (!json_is_string(s))
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: decoder Replace with a Regex pattern");
    if (*n == DEC_MAX_REPLACE) return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: too many decoder Replace steps");
    dec_replace *r = &arr[*n];
    vllm_status rc = jdup(s, "tokenizer.json: decoder Replace.pattern", &r->pat, &r->pat_len);
    if (rc) return rc;
    if ((rc = jdup(json_object_get(d, "content"), "tokenizer.json: decoder Replace.content", &r->content,
                   &r->content_len))) {
        free(r->pat);
        return rc;
    }
    if (strchr(r->content, '$')) {
        free(r->pat);
        free(r->content);
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: decoder Replace.content with '$'");
    }
    (*n)++;
    return VLLM_OK;
}

static vllm_status load_decoder(tokenizer *t, json_t *d) {
    decoder_cfg *c = &t->dec;
    if (!d || json_is_null(d)) {
        c->kind = DEC_NONE;
        return VLLM_OK;
    }
    const char *type = jstr(d, "type");
    if (!type) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: decoder without type");
    if (!strcmp(type, "ByteLevel")) {
        c->kind = DEC_BYTELEVEL;
        return VLLM_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        c->kind = DEC_METASPACE;
        return jdup(json_object_get(d, "replacement"), "tokenizer.json: decoder Metaspace.replacement", &c->repl,
                    &c->repl_len);
    }
    if (strcmp(type, "Sequence") != 0)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: decoder type \"%s\"", type);
    c->kind = DEC_CHAIN;
    json_t *list = json_object_get(d, "decoders"), *x;
    size_t i;
    bool fused = false;
    json_array_foreach(list, i, x) {
        const char *ty = jstr(x, "type");
        vllm_status rc = VLLM_OK;
        if (!ty) return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: decoder.decoders[%zu] without type", i);
        if (!strcmp(ty, "Replace") && !fused) {
            if (!c->byte_fallback) {
                rc = dec_replace_add(c->pre, &c->n_pre, x);
            } else {
                rc = dec_replace_add(c->post, &c->n_post, x);
                if (!rc && (c->post[c->n_post - 1].pat_len == 0 ||
                            (size_t)utf8_len((uint8_t)c->post[c->n_post - 1].pat[0]) != c->post[c->n_post - 1].pat_len))
                    return vllm_error(VLLM_ERR_UNSUPPORTED,
                                      "tokenizer.json: decoder Replace after ByteFallback with a multi-character pattern");
            }
        } else if (!strcmp(ty, "ByteFallback") && !fused && !c->byte_fallback) {
            c->byte_fallback = true;
        } else if (!strcmp(ty, "Fuse") && !fused) {
            fused = true;
        } else if (!strcmp(ty, "Strip") && fused && !c->strip) {
            json_t *content = json_object_get(x, "content");
            if (!json_is_string(content) || json_string_length(content) == 0 ||
                utf8_get(json_string_value(content)) > 0xFFFF ||
                (size_t)utf8_len((uint8_t)json_string_value(content)[0]) != json_string_length(content))
                return vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer.json: decoder Strip.content must be one BMP character");
            c->strip = true;
            c->strip_char = utf8_get(json_string_value(content));
            c->strip_start = (int)json_integer_value(json_object_get(x, "start"));
            c->strip_stop = (int)json_integer_value(json_object_get(x, "stop"));
            if (c->strip_start < 0 || c->strip_stop < 0)
                return vllm_error(VLLM_ERR_FORMAT, "tokenizer.json: decoder Strip start/stop");
        } else {
            return vllm_error(VLLM_ERR_UNSUPPORTED,
                              "tokenizer.json: decoder \"%s\" at position %zu of the Sequence "
                              "(supported: Replace*, ByteFallback, Replace*, Fuse, Strip)", ty, i);
        }
        if (rc) return rc;
    }
    return VLLM_OK;
}

static void init_byte_level(tokenizer *t) {
    /* GPT-2 bytes_to_unicode: printable bytes map to themselves, the others to 256 + n */
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_to_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        t->cp_to_byte[t->byte_to_cp[b]] = (uint16_t)(b + 1);
    }
}

/* flags: tokenizer_config.json needs JSON_DECODE_INT_AS_REAL (Llama 3 has a
 * model_max_length of 1e30 written as an integer). */
static vllm_status read_json(const char *path, size_t flags, json_t **out) {
    json_error_t err;
    *out = json_load_file(path, JSON_ALLOW_NUL | flags, &err);
    if (*out) return VLLM_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return vllm_error(VLLM_ERR_IO, "%s: %s", path, strerror(errno));
    fclose(f);
    return vllm_error(VLLM_ERR_FORMAT, "%s:%d:%d: %s", path, err.line, err.column, err.text);
}

vllm_status tokenizer_load_files(const char *tokenizer_json_path, const char *config_path, tokenizer **out) {
    *out = NULL;
    json_t *root = NULL, *cfg = NULL;
    vllm_status rc;
    if ((rc = read_json(tokenizer_json_path, 0, &root))) {
        vllm_error_prefix("%s", tokenizer_json_path);
        return rc;
    }
    if (config_path && (rc = read_json(config_path, JSON_DECODE_INT_AS_REAL, &cfg))) {
        vllm_error_prefix("%s", tokenizer_json_path);
        json_decref(root);
        return rc;
    }
    return tokenizer_load_json(root, cfg, tokenizer_json_path, out);
}

vllm_status tokenizer_load_json(json_t *root, json_t *cfg, const char *tokenizer_json_path, tokenizer **out) {
    *out = NULL;
    vllm_status rc;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        json_decref(cfg);
        return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    }
    if (!cfg) cfg = json_object();
    if (!json_is_object(root) || !json_is_object(cfg)) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: not a JSON object", tokenizer_json_path);
        goto fail;
    }
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    if (!json_is_object(model)) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: no \"model\" object", tokenizer_json_path);
        goto fail;
    }
    if (!json_is_array(added)) added = NULL;
    json_t *empty = json_array();
    if (!added) added = empty;
    rc = load_model(t, model, added);
    if (!rc) rc = load_pieces(t, json_object_get(model, "vocab"), added);
    json_decref(empty);
    if (rc || (rc = load_flags(t, cfg))) goto fail;

    if (jbool(cfg, "remove_space", false)) {
        rc = vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer_config.json: remove_space=true");
        goto fail;
    }
    if (jbool(cfg, "do_lowercase_and_remove_accent", false)) {
        rc = vllm_error(VLLM_ERR_UNSUPPORTED, "tokenizer_config.json: do_lowercase_and_remove_accent=true");
        goto fail;
    }
    const char *cls = jstr(cfg, "tokenizer_class");
    bool llama = cls && (!strcmp(cls, "LlamaTokenizer") || !strcmp(cls, "LlamaTokenizerFast"));
    t->llama_legacy_off = llama && !jbool(cfg, "legacy", true);
    if (t->llama_legacy_off) {
        /* transformers.js LlamaTokenizer: normalizer = null, Metaspace(first) */
        if ((rc = add_metaspace(t, "\xe2\x96\x81", 3, "first"))) goto fail;
    } else {
        if ((rc = load_normalizer(t, json_object_get(root, "normalizer"), "tokenizer.json: normalizer")) ||
            (rc = load_pretokenizer(t, json_object_get(root, "pre_tokenizer"))))
            goto fail;
    }
    bool has_template = false;
    if ((rc = load_postprocessor(t, json_object_get(root, "post_processor"), &has_template)) ||
        (rc = load_decoder(t, json_object_get(root, "decoder"))))
        goto fail;
    if (!has_template) t->n_tmpl = 0;

    json_t *cu = json_object_get(cfg, "clean_up_tokenization_spaces");
    t->cleanup_spaces = json_is_boolean(cu) ? json_is_true(cu) : true;
    const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
    t->bos_id = bos ? token_id(t, bos, strlen(bos)) : -1;
    t->eos_id = eos ? token_id(t, eos, strlen(eos)) : -1;
    init_byte_level(t);
    json_decref(root);
    json_decref(cfg);
    *out = t;
    return VLLM_OK;
fail:
    vllm_error_prefix("%s", tokenizer_json_path);
    json_decref(root);
    json_decref(cfg);
    tokenizer_free(t);
    return rc;
}

vllm_status tokenizer_load_config(const char *dir, json_t **out) {
    *out = NULL;
    char path[PATH_MAX], *gguf = NULL;
    vllm_status rc = tokenizer_gguf_path(dir, &gguf);
    if (rc) return rc;
    if (gguf) {
        rc = tokenizer_gguf_config(gguf, out);
        free(gguf);
        return rc;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= sizeof path)
        return vllm_error(VLLM_ERR_INVALID, "%s: path too long", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return VLLM_OK;
    fclose(f);
    return read_json(path, JSON_DECODE_INT_AS_REAL, out);
}

vllm_status tokenizer_load(const char *dir, tokenizer **out) {
    char tj[PATH_MAX], tc[PATH_MAX], *gguf = NULL;
    vllm_status rc = tokenizer_gguf_path(dir, &gguf);
    if (rc) return rc;
    if (gguf) {
        rc = tokenizer_load_gguf(gguf, out);
        free(gguf);
        return rc;
    }
    if ((size_t)snprintf(tj, sizeof tj, "%s/tokenizer.json", dir) >= sizeof tj ||
        (size_t)snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir) >= sizeof tc)
        return vllm_error(VLLM_ERR_INVALID, "%s: path too long", dir);
    FILE *f = fopen(tj, "rb");
    if (!f) return vllm_error(VLLM_ERR_IO, "%s: %s (no tokenizer.json in the model directory)", tj, strerror(errno));
    fclose(f);
    f = fopen(tc, "rb");
    if (f) fclose(f);
    return tokenizer_load_files(tj, f ? tc : NULL, out);
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    bpe_deinit(&t->model);
    if (t->piece)
        for (int32_t i = 0; i < t->vocab_size; i++) free(t->piece[i]);
    free(t->piece);
    free(t->piece_len);
    free(t->id_flags);
    for (int k = 0; k < t->n_added; k++) free(t->added[k].content);
    free(t->added);
    for (int c = 0; c < 256; c++) free(t->added_by_byte[c]);
    for (int k = 0; k < t->n_norm; k++) {
        free(t->norm[k].a);
        free(t->norm[k].b);
    }
    free(t->norm);
    for (int k = 0; k < t->n_pretok; k++) {
        if (t->pretok[k].re) pcre2_code_free(t->pretok[k].re);
        free(t->pretok[k].repl);
    }
    free(t->pretok);
    free(t->dec.repl);
    for (int k = 0; k < t->dec.n_pre; k++) {
        free(t->dec.pre[k].pat);
        free(t->dec.pre[k].content);
    }
    for (int k = 0; k < t->dec.n_post; k++) {
        free(t->dec.post[k].pat);
        free(t->dec.post[k].content);
    }
    free(t);
}

/* ---------------------------------------------------------- accessors */

int32_t tokenizer_vocab_size(const tokenizer *t) { return t->vocab_size; }
int32_t tokenizer_bos_id(const tokenizer *t) { return t->bos_id; }
int32_t tokenizer_eos_id(const tokenizer *t) { return t->eos_id; }

bool tokenizer_is_special(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab_size && (t->id_flags[id] & ID_SPECIAL);
}

const char *tokenizer_id_to_piece(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab_size ? t->piece[id] : NULL;
}

int32_t tokenizer_piece_to_id(const tokenizer *t, const char *piece) {
    return token_id(t, piece, strlen(piece));
}

/* ---------------------------------------------------------------- encode */

typedef struct encoder {
    const tokenizer *t;
    strbuf text, norm, tmp;
    piece_list pa, pb;
    bpe_scratch scratch;
    pcre2_match_data *md;
    bpe_ids ids;
} encoder;

/* text -> valid UTF-8 in e->text (maximal invalid subparts -> U+FFFD). */
static vllm_status sanitize(encoder *e, const char *s, size_t n) {
    size_t good = utf8_valid_prefix(s, n);
    vllm_status rc = sb_set(&e->text, s, good);
    if (rc || good == n) return rc;
    utf8_decoder d;
    utf8_decoder_init(&d);
    for (size_t i = good; i <= n; i++) {
        uint32_t cps[2];
        int k = 0;
        if (i < n) k = utf8_decoder_push(&d, (uint8_t)s[i], cps);
        else k = utf8_decoder_finish(&d, cps) ? 1 : 0;
        for (int j = 0; j < k; j++) {
            char u[4];
            if ((rc = sb_add(&e->text, u, (size_t)utf8_encode(cps[j], u)))) return rc;
        }
    }
    return VLLM_OK;
}

static vllm_status normalize(encoder *e, const char *s, size_t n) {
    const tokenizer *t = e->t;
    vllm_status rc = sb_set(&e->norm, s, n);
    for (int k = 0; !rc && k < t->n_norm; k++) {
        const norm_step *st = &t->norm[k];
        strbuf *b = &e->norm;
        switch (st->kind) {
        case NORM_NFC: case NORM_NFD: case NORM_NFKC: case NORM_NFKD: {
            bool ascii = true;
            for (size_t i = 0; i < b->len && ascii; i++) ascii = (uint8_t)b->s[i] < 0x80;
            if (ascii) break; /* every normalization form leaves ASCII alone */
            int opt = UTF8PROC_STABLE | (st->kind == NORM_NFC || st->kind == NORM_NFKC ? UTF8PROC_COMPOSE
                                                                                        : UTF8PROC_DECOMPOSE);
            if (st->kind == NORM_NFKC || st->kind == NORM_NFKD) opt |= UTF8PROC_COMPAT;
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)b->s, (utf8proc_ssize_t)b->len, &dst,
                                              (utf8proc_option_t)opt);
            if (m < 0) return vllm_error(VLLM_ERR_INVALID, "tokenizer: normalization failed: %s", utf8proc_errmsg(m));
            rc = sb_set(b, (const char *)dst, (size_t)m);
            free(dst);
            break;
        }
        case NORM_PREPEND:
            if ((rc = sb_set(&e->tmp, st->a, st->a_len)) || (rc = sb_add(&e->tmp, b->s, b->len))) break;
            rc = sb_set(b, e->tmp.s, e->tmp.len);
            break;
        case NORM_REPLACE:
            if ((rc = sb_replace_all(&e->tmp, b->s, b->len, st->a, st->a_len, st->b, st->b_len))) break;
            rc = sb_set(b, e->tmp.s, e->tmp.len);
            break;
        case NORM_STRIP: {
            size_t lo = st->left ? js_space_prefix(b->s, b->len) : 0;
            size_t hi = st->right ? lo + js_space_trim_end(b->s + lo, b->len - lo) : b->len;
            memmove(b->s, b->s + lo, hi - lo);
            b->len = hi - lo;
            b->s[b->len] = 0;
            break;
        }
        }
    }
    return rc;
}

/* Appends the regex split of s[0..n) to out: matches and the gaps between
 * them (Isolated), only the gaps (removed), or only the matches (only_matches). */
static vllm_status regex_split(encoder *e, const pcre2_code *re, const char *s, size_t n, bool keep_matches,
                               bool keep_gaps, piece_list *out) {
    size_t prev = 0, pos = 0;
    vllm_status rc;
    while (pos <= n) {
        int r = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(r, msg, sizeof msg);
            return vllm_error(VLLM_ERR_INVALID, "tokenizer: regex match failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (keep_gaps && prev < ms && (rc = pl_add(out, s + prev, ms - prev))) return rc;
        if (keep_matches && me > ms && (rc = pl_add(out, s + ms, me - ms))) return rc;
        prev = me;
        if (me == ms) {
            if (me >= n) break;
            pos = me + (size_t)utf8_len((uint8_t)s[me]);
        } else {
            pos = me;
        }
    }
    if (keep_gaps && prev < n && (rc = pl_add(out, s + prev, n - prev))) return rc;
    return VLLM_OK;
}

/* One pre-tokenizer step over every piece of in, appending to out. */
static vllm_status pretok_apply(encoder *e, const pretok_step *st, int section_index, piece_list *in,
                                piece_list *out) {
    const tokenizer *t = e->t;
    vllm_status rc = VLLM_OK;
    for (size_t p = 0; p < in->n && !rc; p++) {
        const char *s = in->text.s + in->off[p];
        size_t n = in->len[p];
        switch (st->kind) {
        case PRETOK_SPLIT:
            /* Isolated: matches and gaps; invert: text.match (matches only);
             * Removed: text.split(pattern).filter(x => x) (gaps only) */
            rc = regex_split(e, st->re, s, n, !st->removed, !st->invert, out);
            break;
        case PRETOK_BYTELEVEL: {
            strbuf *w = &e->tmp;
            w->len = 0;
            if (st->add_prefix_space && (n == 0 || s[0] != ' ') && (rc = sb_add(w, " ", 1))) break;
            if ((rc = sb_add(w, s, n))) break;
            size_t first = out->n;
            if (st->re) rc = regex_split(e, st->re, w->s, w->len, true, false, out);
            else rc = pl_add(out, w->s, w->len);
            if (rc) break;
            /* map bytes of the new pieces to byte-level chars, in place at the end of out */
            for (size_t q = first; q < out->n; q++) {
                size_t off = out->off[q], len = out->len[q];
                if ((rc = sb_set(&e->norm, out->text.s + off, len))) break;
                out->off[q] = out->text.len;
                size_t newlen = 0;
                for (size_t i = 0; i < len; i++) {
                    char u[4];
                    int l = utf8_encode(t->byte_to_cp[(uint8_t)e->norm.s[i]], u);
                    if ((rc = sb_add(&out->text, u, (size_t)l))) break;
                    newlen += (size_t)l;
                }
                out->len[q] = newlen;
            }
            break;
        }
        case PRETOK_METASPACE: {
            strbuf *w = &e->tmp;
            if ((rc = sb_replace_all(w, s, n, " ", 1, st->repl, st->repl_len))) break;
            bool starts = w->len >= st->repl_len && memcmp(w->s, st->repl, st->repl_len) == 0;
            bool prepend = !starts && (st->scheme == PREPEND_ALWAYS ||
                                       (st->scheme == PREPEND_FIRST && section_index == 0));
            strbuf *o = &e->norm;
            o->len = 0;
            if (prepend && (rc = sb_add(o, st->repl, st->repl_len))) break;
            if ((rc = sb_add(o, w->s, w->len))) break;
            rc = pl_add(out, o->s, o->len);
            break;
        }
        }
    }
    return rc;
}

/* Encodes one text section (no added tokens inside) into e->ids. */
static vllm_status encode_section(encoder *e, const char *s, size_t n, int section_index) {
    const tokenizer *t = e->t;
    vllm_status rc = normalize(e, s, n);
    if (rc || e->norm.len == 0) return rc;
    piece_list *cur = &e->pa, *nxt = &e->pb;
    pl_clear(cur);
    if ((rc = pl_add(cur, e->norm.s, e->norm.len))) return rc;
    for (int k = 0; k < t->n_pretok; k++) {
        pl_clear(nxt);
        if ((rc = pretok_apply(e, &t->pretok[k], section_index, cur, nxt))) return rc;
        piece_list *x = cur;
        cur = nxt;
        nxt = x;
    }
    size_t first = e->ids.n;
    for (size_t p = 0; p < cur->n; p++)
        if ((rc = bpe_encode_word(&t->model, &e->scratch, cur->text.s + cur->off[p], cur->len[p], &e->ids)))
            return rc;
    if (t->model.fuse_unk && t->model.unk_id >= 0) { /* collapse runs of unk within the section */
        size_t w = first;
        for (size_t r = first; r < e->ids.n; r++)
            if (!(e->ids.v[r] == t->model.unk_id && w > first && e->ids.v[w - 1] == t->model.unk_id))
                e->ids.v[w++] = e->ids.v[r];
        e->ids.n = w;
    }
    return VLLM_OK;
}

/* The longest added token at s[0..n), or -1 (transformers.js DictionarySplitter). */
static int match_added(const tokenizer *t, const char *s, size_t n) {
    const int32_t *cand = t->added_by_byte[(uint8_t)s[0]];
    int best = -1;
    if (!cand) return -1;
    for (; *cand >= 0; cand++) {
        const added_token *a = &t->added[*cand];
        if (a->len <= n && (best < 0 || a->len > t->added[best].len) && memcmp(a->content, s, a->len) == 0)
            best = *cand;
    }
    return best;
}

typedef struct section {
    size_t off, len;
    int added; /* index into t->added, or -1 */
} section;

static vllm_status encode_text(encoder *e, const char *s, size_t n) {
    const tokenizer *t = e->t;
    section *sec = NULL;
    size_t nsec = 0, cap = 0;
    vllm_status rc = VLLM_OK;
    size_t start = 0;
    for (size_t i = 0; i <= n;) {
        int a = i < n ? match_added(t, s + i, n - i) : -1;
        if (i < n && a < 0) {
            i += (size_t)utf8_len((uint8_t)s[i]);
            continue;
        }
        for (int k = 0; k < 2; k++) {
            size_t off = k == 0 ? start : i, len = k == 0 ? i - start : (a >= 0 ? t->added[a].len : 0);
            if (len == 0) continue;
            if (buf_grow((void **)&sec, &cap, nsec + 1, sizeof *sec) != VLLM_OK) {
                free(sec);
                return VLLM_ERR_NOMEM;
            }
            sec[nsec++] = (section){off, len, k == 0 ? -1 : a};
        }
        if (i == n) break;
        i += t->added[a].len;
        start = i;
    }
    /* lstrip / rstrip trim the neighbouring sections (JS trimEnd / trimStart);
     * a trimmed added token is text from then on, as in transformers.js */
    for (size_t i = 0; i < nsec; i++) {
        if (sec[i].added < 0) continue;
        const added_token *a = &t->added[sec[i].added];
        if (a->lstrip && i > 0) {
            size_t keep = js_space_trim_end(s + sec[i - 1].off, sec[i - 1].len);
            if (keep != sec[i - 1].len) sec[i - 1].added = -1;
            sec[i - 1].len = keep;
        }
        if (a->rstrip && i + 1 < nsec) {
            size_t cut = js_space_prefix(s + sec[i + 1].off, sec[i + 1].len);
            if (cut) sec[i + 1].added = -1;
            sec[i + 1].off += cut;
            sec[i + 1].len -= cut;
        }
    }
    for (size_t i = 0; i < nsec && !rc; i++) {
        if (sec[i].len == 0) continue;
        if (sec[i].added >= 0)
            rc = bpe_ids_push(&e->ids, token_id(t, s + sec[i].off, sec[i].len));
        else
            rc = encode_section(e, s + sec[i].off, sec[i].len, (int)i);
    }
    free(sec);
    return rc;
}

vllm_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special_tokens,
                             int32_t **ids, int32_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    encoder e = {.t = t};
    vllm_status rc = VLLM_OK;
    if (!text && len) return vllm_error(VLLM_ERR_INVALID, "tokenizer_encode: NULL text");
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) return vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory");
    if ((rc = sanitize(&e, text ? text : "", len))) goto done;
    if (t->llama_legacy_off && e.text.len > 0) {
        /* transformers.js LlamaTokenizer._encode_text with legacy=false */
        strbuf w = {0};
        if ((rc = sb_add(&w, "\xe2\x96\x81", 3)) ||
            (rc = sb_replace_all(&e.tmp, e.text.s, e.text.len, "\xe2\x96\x81", 3, " ", 1)) ||
            (rc = sb_add(&w, e.tmp.s, e.tmp.len))) {
            free(w.s);
            goto done;
        }
        free(e.text.s);
        e.text = w;
    }
    if ((rc = encode_text(&e, e.text.s, e.text.len))) goto done;
    if (t->llama_legacy_off && e.ids.n > 1 && e.ids.v[0] == token_id(t, "\xe2\x96\x81", 3) &&
        tokenizer_is_special(t, e.ids.v[1])) {
        memmove(e.ids.v, e.ids.v + 1, (e.ids.n - 1) * sizeof *e.ids.v);
        e.ids.n--;
    }
    size_t total = e.ids.n;
    if (add_special_tokens && t->n_tmpl) {
        total = 0;
        for (int k = 0; k < t->n_tmpl; k++) total += t->tmpl[k] == TEMPLATE_SEQ_A ? e.ids.n : 1;
    }
    if (total > INT32_MAX) {
        rc = vllm_error(VLLM_ERR_INVALID, "tokenizer_encode: %zu tokens", total);
        goto done;
    }
    int32_t *out = malloc((total ? total : 1) * sizeof *out);
    if (!out) {
        rc = vllm_error(VLLM_ERR_NOMEM, "tokenizer: out of memory for %zu ids", total);
        goto done;
    }
    if (add_special_tokens && t->n_tmpl) {
        size_t w = 0;
        for (int k = 0; k < t->n_tmpl; k++) {
            if (t->tmpl[k] == TEMPLATE_SEQ_A) {
                if (e.ids.n) memcpy(out + w, e.ids.v, e.ids.n * sizeof *out);
                w += e.ids.n;
            } else {
                out[w++] = t->tmpl[k];
            }
        }
        total = w;
    } else if (e.ids.n) {
        memcpy(out, e.ids.v, e.ids.n * sizeof *out);
    }
    *ids = out;
    *n_ids = (int32_t)total;
done:
    free(e.text.s);
    free(e.norm.s);
    free(e.tmp.s);
    pl_free(&e.pa);
    pl_free(&e.pb);
    bpe_scratch_deinit(&e.scratch);
    pcre2_match_data_free(e.md);
    free(e.ids.v);
    return rc;
}
