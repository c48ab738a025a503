/*
 * detokenizer.c - decode, whole or incremental.
 *
 * One streaming decoder serves both tokenizer_decode and the incremental
 * detokenizer, so the concatenation of the streamed pieces equals the full
 * decode by construction, and a push costs O(length of the token) no matter
 * how long the sequence is (no re-decoding of a window of earlier tokens as
 * vLLM's detokenize_incrementally does).
 *
 * transformers.js decodes in three steps; each is rewritten as a transducer
 * that holds back only what later tokens can still change:
 *
 *   1. the decoder proper (per token):
 *      - ByteLevel: token chars -> bytes -> UTF-8, added tokens verbatim; the
 *        bytes are decoded by the WHATWG state machine (utf8.h), so what is
 *        held back is at most an unfinished 2-4 byte sequence, and a sequence
 *        cut short by an added token or the end becomes U+FFFD, as in
 *        TextDecoder;
 *      - Sequence[Replace..., ByteFallback, Replace..., Fuse, Strip]: Replace
 *        per token, runs of <0xNN> tokens through the same state machine
 *        (TextDecoder's BOM rule included: a run that starts with U+FEFF loses
 *        it), or, with Rust's rule (decoder_cfg.byte_fallback_per_byte:
 *        Gemma's GGUF tokenizer), each run held whole until it ends and then either
 *        decoded or, if it is not valid UTF-8, turned into one U+FFFD per
 *        byte; Strip(c, start, stop) on the fused text: up to `start` leading
 *        c's dropped while nothing else has been seen, trailing c's held back
 *        (at most `stop`) until something else follows or the stream ends;
 *      - Metaspace: replacement -> ' ', first token's leading space dropped;
 *      - none: tokens joined by ' '.
 *   2. skip_special_tokens removes special tokens before the decoder sees them
 *      (so byte runs on either side of a skipped token join up).
 *   3. clean_up_tokenization_spaces (tokenizer_config.json, default true as in
 *      transformers.js): ten replaceAll's in order (" ." -> "." ... " 're" ->
 *      "'re"); each is a stage that holds back a suffix that could still grow
 *      into its pattern (at most 3 bytes), the stages chained in the same order.
 *
 * Nothing is emitted before it is final, so a streamed piece never contains a
 * partial UTF-8 sequence and is never retracted.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

#define N_CLEANUP 10
static const struct {
    const char *pat, *rep;
} cleanup_rules[N_CLEANUP] = {
    {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

static vllm_status sb_add_cp(strbuf *b, uint32_t cp) {
    char u[4];
    return sb_add(b, u, (size_t)utf8_encode(cp, u));
}

struct detokenizer {
    const tokenizer *t;
    bool skip_special, finished;
    utf8_decoder u;     /* bytes of the current byte-level group / byte-fallback run */
    bool run_active;    /* ByteFallback: inside a run of <0xNN> tokens */
    bool run_start;     /* ByteFallback: no code point of this run decoded yet */
    strbuf run;         /* ByteFallback per byte: the bytes of the current run */
    int64_t n_tokens;   /* tokens the decoder has seen (after skipping) */
    int strip_left;     /* Strip: leading strip chars still to drop, 0 once text seen */
    int strip_held;     /* Strip: trailing strip chars held back */
    char hold[N_CLEANUP][4];
    uint8_t n_hold[N_CLEANUP];
    strbuf stage, a, b, out; /* decoder output of this step; cleanup ping-pong; emitted text */
};

static void stream_init(detokenizer *d, const tokenizer *t, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->t = t;
    d->skip_special = skip_special;
    utf8_decoder_init(&d->u);
    d->strip_left = t->dec.kind == DEC_CHAIN && t->dec.strip ? t->dec.strip_start : 0;
}

static void stream_deinit(detokenizer *d) {
    free(d->run.s);
    free(d->stage.s);
    free(d->a.s);
    free(d->b.s);
    free(d->out.s);
}

/* Step 1 output, a code point at a time: the Strip transducer, into d->a. */
static vllm_status emit_cp(detokenizer *d, uint32_t cp) {
    const decoder_cfg *c = &d->t->dec;
    vllm_status rc;
    if (c->kind != DEC_CHAIN || !c->strip) return sb_add_cp(&d->a, cp);
    if (d->strip_left > 0 && cp == c->strip_char) {
        d->strip_left--;
        return VLLM_OK;
    }
    d->strip_left = 0;
    if (c->strip_stop > 0 && cp == c->strip_char) {
        if (++d->strip_held <= c->strip_stop) return VLLM_OK;
        d->strip_held--;
        return sb_add_cp(&d->a, cp);
    }
    for (; d->strip_held > 0; d->strip_held--)
        if ((rc = sb_add_cp(&d->a, c->strip_char))) return rc;
    return sb_add_cp(&d->a, cp);
}

static vllm_status emit_str(detokenizer *d, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l = (size_t)utf8_len((uint8_t)s[i]);
        vllm_status rc = emit_cp(d, utf8_get(s + i));
        if (rc) return rc;
        i += l;
    }
    return VLLM_OK;
}

/* A code point decoded from a ByteFallback run: BOM rule, then the Replace
 * steps that follow ByteFallback (single-character patterns). */
static vllm_status emit_run_cp(detokenizer *d, uint32_t cp) {
    const decoder_cfg *c = &d->t->dec;
    if (d->run_start) {
        d->run_start = false;
        if (cp == 0xFEFF) return VLLM_OK; /* TextDecoder without ignoreBOM */
    }
    for (int k = 0; k < c->n_post; k++)
        if (utf8_get(c->post[k].pat) == cp) return emit_str(d, c->post[k].content, c->post[k].content_len);
    return emit_cp(d, cp);
}

/* Ends a byte group / run: an unfinished sequence becomes U+FFFD. */
static vllm_status end_bytes(detokenizer *d, bool run) {
    uint32_t cp;
    if (!utf8_decoder_finish(&d->u, &cp)) return VLLM_OK;
    return run ? emit_run_cp(d, cp) : emit_cp(d, cp);
}

/* Ends a ByteFallback run, by the decoder's rule for invalid runs. */
static vllm_status end_run(detokenizer *d) {
    if (!d->t->dec.byte_fallback_per_byte) return end_bytes(d, true);
    size_t n = d->run.len;
    bool valid = utf8_valid_prefix(d->run.s, n) == n;
    vllm_status rc = VLLM_OK;
    for (size_t i = 0; i < n && !rc;) {
        if (valid) {
            rc = emit_run_cp(d, utf8_get(d->run.s + i));
            i += (size_t)utf8_len((uint8_t)d->run.s[i]);
        } else {
            rc = emit_run_cp(d, UTF8_REPLACEMENT);
            i++;
        }
    }
    d->run.len = 0;
    return rc;
}

static vllm_status push_byte(detokenizer *d, uint8_t byte, bool run) {
    uint32_t cps[2];
    int k = utf8_decoder_push(&d->u, byte, cps);
    for (int j = 0; j < k; j++) {
        vllm_status rc = run ? emit_run_cp(d, cps[j]) : emit_cp(d, cps[j]);
        if (rc) return rc;
    }
    return VLLM_OK;
}

/* transformers.js ByteFallback: a 6-unit "<0x..>" token whose two middle
 * characters parseInt(.., 16) reads as a number; Uint8Array keeps it mod 256. */
static bool byte_token(const char *s, size_t n, uint8_t *byte) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    const char *x = s + 3, *end = s + 5;
    if (*x == ' ' || *x == '\t' || *x == '\n' || *x == '\v' || *x == '\f' || *x == '\r') x++;
    int sign = 1;
    if (x < end && (*x == '-' || *x == '+')) sign = *x++ == '-' ? -1 : 1;
    int v = 0, digits = 0;
    for (; x < end; x++, digits++) {
        int h = *x >= '0' && *x <= '9' ? *x - '0' : *x >= 'a' && *x <= 'f' ? *x - 'a' + 10
              : *x >= 'A' && *x <= 'F' ? *x - 'A' + 10 : -1;
        if (h < 0) break;
        v = v * 16 + h;
    }
    if (!digits) return false;
    *byte = (uint8_t)(sign * v);
    return true;
}

/* The Replace steps before ByteFallback, on one token, into d->stage. */
static vllm_status replace_pre(detokenizer *d, const char *s, size_t n) {
    const decoder_cfg *c = &d->t->dec;
    d->stage.len = 0;
    vllm_status rc = sb_add(&d->stage, s, n);
    for (int k = 0; k < c->n_pre && !rc; k++) {
        const dec_replace *r = &c->pre[k];
        d->b.len = 0;
        for (size_t i = 0; i < d->stage.len && !rc;) {
            if (r->pat_len && i + r->pat_len <= d->stage.len && memcmp(d->stage.s + i, r->pat, r->pat_len) == 0) {
                rc = sb_add(&d->b, r->content, r->content_len);
                i += r->pat_len;
            } else {
                rc = sb_add(&d->b, d->stage.s + i++, 1);
            }
        }
        if (rc) break;
        d->stage.len = 0;
        rc = sb_add(&d->stage, d->b.s ? d->b.s : "", d->b.len);
    }
    return rc;
}

/* Step 1 for one token id (already checked and not skipped). */
static vllm_status decode_token(detokenizer *d, int32_t id) {
    const tokenizer *t = d->t;
    const decoder_cfg *c = &t->dec;
    const char *p = t->piece[id];
    size_t n = t->piece_len[id];
    vllm_status rc = VLLM_OK;
    switch (c->kind) {
    case DEC_NONE:
        if (d->n_tokens > 0 && (rc = emit_cp(d, ' '))) break;
        rc = emit_str(d, p, n);
        break;
    case DEC_BYTELEVEL:
        if (t->id_flags[id] & ID_ADDED_STR) {
            if ((rc = end_bytes(d, false))) break;
            rc = emit_str(d, p, n);
            break;
        }
        for (size_t i = 0; i < n && !rc;) {
            uint32_t cp = utf8_get(p + i);
            i += (size_t)utf8_len((uint8_t)p[i]);
            /* a char outside the byte map is undefined -> 0 in transformers.js's Uint8Array */
            uint8_t byte = cp < sizeof t->cp_to_byte / sizeof t->cp_to_byte[0] && t->cp_to_byte[cp]
                               ? (uint8_t)(t->cp_to_byte[cp] - 1) : 0;
            rc = push_byte(d, byte, false);
        }
        break;
    case DEC_METASPACE: {
        size_t i = 0;
        bool first = d->n_tokens == 0;
        while (i < n && !rc) {
            if (c->repl_len && i + c->repl_len <= n && memcmp(p + i, c->repl, c->repl_len) == 0) {
                if (!(first && i == 0)) rc = emit_cp(d, ' ');
                i += c->repl_len;
            } else {
                if (first && i == 0 && p[0] == ' ') {
                    i++;
                    continue;
                }
                size_t l = (size_t)utf8_len((uint8_t)p[i]);
                rc = emit_cp(d, utf8_get(p + i));
                i += l;
            }
        }
        break;
    }
    case DEC_CHAIN: {
        if ((rc = replace_pre(d, p, n))) break;
        uint8_t byte;
        if (c->byte_fallback && byte_token(d->stage.s, d->stage.len, &byte)) {
            if (!d->run_active) d->run_start = !c->byte_fallback_per_byte; /* TextDecoder's BOM rule */
            d->run_active = true;
            rc = c->byte_fallback_per_byte ? sb_add(&d->run, (const char *)&byte, 1) : push_byte(d, byte, true);
            break;
        }
        if (d->run_active && (rc = end_run(d))) break;
        d->run_active = false;
        for (size_t i = 0; i < d->stage.len && !rc;) {
            uint32_t cp = utf8_get(d->stage.s + i);
            i += (size_t)utf8_len((uint8_t)d->stage.s[i]);
            int k = 0;
            while (k < c->n_post && utf8_get(c->post[k].pat) != cp) k++;
            rc = k < c->n_post ? emit_str(d, c->post[k].content, c->post[k].content_len) : emit_cp(d, cp);
        }
        break;
    }
    }
    d->n_tokens++;
    return rc;
}

/* One token's bytes, context-free (tokenizer.h): decode_token's per-token
 * mapping without the stream around it (no first-token space rule, no
 * UTF-8 assembly, no clean-up). */
vllm_status tokenizer_token_bytes(const tokenizer *t, int32_t id, strbuf *out) {
    if (id < 0 || id >= t->vocab_size || !t->piece[id])
        return vllm_error(VLLM_ERR_INVALID, "token id %d is not in the vocabulary (size %d)", id, t->vocab_size);
    const decoder_cfg *c = &t->dec;
    const char *p = t->piece[id];
    size_t n = t->piece_len[id];
    if ((t->id_flags[id] & (ID_SPECIAL | ID_ADDED_STR)) || c->kind == DEC_NONE) return sb_add(out, p, n);
    vllm_status rc = sb_reserve(out, n);
    switch (c->kind) {
    case DEC_BYTELEVEL:
        for (size_t i = 0; i < n && !rc;) {
            uint32_t cp = utf8_get(p + i);
            i += (size_t)utf8_len((uint8_t)p[i]);
            char byte = cp < sizeof t->cp_to_byte / sizeof t->cp_to_byte[0] && t->cp_to_byte[cp]
                            ? (char)(t->cp_to_byte[cp] - 1) : 0;
            rc = sb_add(out, &byte, 1);
        }
        return rc;
    case DEC_METASPACE:
        for (size_t i = 0; i < n && !rc;) {
            if (c->repl_len && i + c->repl_len <= n && memcmp(p + i, c->repl, c->repl_len) == 0) {
                rc = sb_add(out, " ", 1);
                i += c->repl_len;
            } else {
                rc = sb_add(out, p + i, 1);
                i++;
            }
        }
        return rc;
    case DEC_CHAIN: {
        strbuf a = {0}, b = {0};
        rc = sb_set(&a, p, n);
        for (int k = 0; k < c->n_pre && !rc; k++) {
            const dec_replace *r = &c->pre[k];
            if (!(rc = sb_replace_all(&b, a.s, a.len, r->pat, r->pat_len, r->content, r->content_len))) {
                strbuf tmp = a;
                a = b;
                b = tmp;
            }
        }
        uint8_t byte;
        if (!rc && c->byte_fallback && byte_token(a.s, a.len, &byte)) {
            rc = sb_add(out, (const char *)&byte, 1);
        } else {
            for (size_t i = 0; i < a.len && !rc;) {
                uint32_t cp = utf8_get(a.s + i);
                size_t l = (size_t)utf8_len((uint8_t)a.s[i]);
                int k = 0;
                while (k < c->n_post && utf8_get(c->post[k].pat) != cp) k++;
                rc = k < c->n_post ? sb_add(out, c->post[k].content, c->post[k].content_len) : sb_add(out, a.s + i, l);
                i += l;
            }
        }
        free(a.s);
        free(b.s);
        return rc;
    }
    case DEC_NONE:
        break;
    }
    return rc;
}

/* Step 3: runs d->a through the cleanup stages and appends to d->out.
 * final: the stream ends, release everything held. */
static vllm_status cleanup(detokenizer *d, bool final) {
    if (!d->t->cleanup_spaces) {
        vllm_status rc = sb_add(&d->out, d->a.s ? d->a.s : "", d->a.len);
        d->a.len = 0;
        return rc;
    }
    strbuf *in = &d->a, *out = &d->b;
    for (int k = 0; k < N_CLEANUP; k++) {
        const char *pat = cleanup_rules[k].pat, *rep = cleanup_rules[k].rep;
        size_t pl = strlen(pat);
        /* input = held bytes + new bytes */
        size_t h = d->n_hold[k];
        out->len = 0;
        vllm_status rc = sb_add(out, d->hold[k], h);
        if (!rc) rc = sb_add(out, in->s ? in->s : "", in->len);
        if (rc) return rc;
        /* swap so that `in` holds the stage input, `out` collects its output */
        strbuf *x = in;
        in = out;
        out = x;
        out->len = 0;
        size_t i = 0, n = in->len;
        d->n_hold[k] = 0;
        while (i < n) {
            /* every pattern starts with ' ': copy up to the next space in one go */
            const char *sp = memchr(in->s + i, ' ', n - i);
            size_t j = sp ? (size_t)(sp - in->s) : n;
            if (j > i && (rc = sb_add(out, in->s + i, j - i))) return rc;
            i = j;
            if (i == n) break;
            size_t rem = n - i;
            if (rem >= pl && memcmp(in->s + i, pat, pl) == 0) {
                if ((rc = sb_add(out, rep, strlen(rep)))) return rc;
                i += pl;
            } else if (rem < pl && !final && memcmp(in->s + i, pat, rem) == 0) {
                memcpy(d->hold[k], in->s + i, rem);
                d->n_hold[k] = (uint8_t)rem;
                break;
            } else {
                if ((rc = sb_add(out, in->s + i, 1))) return rc;
                i++;
            }
        }
        x = in;
        in = out;
        out = x;
    }
    vllm_status rc = sb_add(&d->out, in->s ? in->s : "", in->len);
    d->a.len = d->b.len = 0;
    return rc;
}

static vllm_status stream_push(detokenizer *d, int32_t id) {
    const tokenizer *t = d->t;
    if (id < 0 || id >= t->vocab_size || !t->piece[id])
        return vllm_error(VLLM_ERR_INVALID, "token id %d is not in the vocabulary (size %d)", id, t->vocab_size);
    if (d->skip_special && (t->id_flags[id] & ID_SPECIAL)) return VLLM_OK;
    vllm_status rc = decode_token(d, id);
    return rc ? rc : cleanup(d, false);
}

static vllm_status stream_finish(detokenizer *d) {
    const decoder_cfg *c = &d->t->dec;
    vllm_status rc = c->kind == DEC_CHAIN ? end_run(d) : end_bytes(d, false);
    if (rc) return rc;
    d->strip_held = 0; /* Strip(stop): trailing strip chars are dropped */
    d->finished = true;
    return cleanup(d, true);
}

vllm_status tokenizer_decode(const tokenizer *t, const int32_t *ids, int32_t n_ids, bool skip_special_tokens,
                             char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    detokenizer d;
    stream_init(&d, t, skip_special_tokens);
    vllm_status rc = sb_add(&d.out, "", 0);
    for (int32_t i = 0; i < n_ids && !rc; i++) rc = stream_push(&d, ids[i]);
    if (!rc) rc = stream_finish(&d);
    if (rc) {
        stream_deinit(&d);
        return rc;
    }
    *text = d.out.s;
    *len = d.out.len;
    d.out.s = NULL;
    stream_deinit(&d);
    return VLLM_OK;
}

vllm_status detokenizer_create(const tokenizer *t, const int32_t *prompt_ids, int32_t n_prompt,
                               bool skip_special_tokens, detokenizer **out) {
    *out = NULL;
    detokenizer *d = malloc(sizeof *d);
    if (!d) return vllm_error(VLLM_ERR_NOMEM, "detokenizer: out of memory");
    stream_init(d, t, skip_special_tokens);
    vllm_status rc = sb_add(&d->out, "", 0);
    for (int32_t i = 0; i < n_prompt && !rc; i++) {
        rc = stream_push(d, prompt_ids[i]);
        d->out.len = 0; /* the prompt's own text is not part of the stream */
    }
    if (rc) {
        vllm_error_prefix("detokenizer_create: prompt");
        detokenizer_free(d);
        return rc;
    }
    d->out.s[0] = 0;
    *out = d;
    return VLLM_OK;
}

void detokenizer_free(detokenizer *d) {
    if (!d) return;
    stream_deinit(d);
    free(d);
}

vllm_status detokenizer_push(detokenizer *d, int32_t id, const char **piece, size_t *piece_len) {
    *piece = "";
    *piece_len = 0;
    if (d->finished) return vllm_error(VLLM_ERR_INVALID, "detokenizer_push: stream already flushed");
    d->out.len = 0;
    vllm_status rc = stream_push(d, id);
    if (rc) return rc;
    *piece = d->out.s;
    *piece_len = d->out.len;
    return VLLM_OK;
}

vllm_status detokenizer_flush(detokenizer *d, const char **piece, size_t *piece_len) {
    *piece = "";
    *piece_len = 0;
    if (d->finished) return VLLM_OK;
    d->out.len = 0;
    vllm_status rc = stream_finish(d);
    if (rc) return rc;
    *piece = d->out.s;
    *piece_len = d->out.len;
    return VLLM_OK;
}
