/*
 * dp_wire.c - see dp_wire.h.
 *
 * The OUTPUT decoder copies every array into one arena (so they are
 * aligned) and first stores arena offsets in the pointer fields, turning
 * them into pointers once the arena has stopped growing. Strings point into
 * the message itself, which the caller keeps until it is done with the
 * output.
 */
#include "dist/dp_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/error.h"

void dp_wire_reset(dp_wire_writer *w) {
    w->len = 0;
    w->oom = false;
}

void dp_wire_free(dp_wire_writer *w) {
    free(w->data);
    memset(w, 0, sizeof *w);
}

void dp_wire_put(dp_wire_writer *w, const void *src, size_t n) {
    if (w->oom || n == 0) return;
    if (buf_grow((void **)&w->data, &w->cap, w->len + n, 1) != VLLM_OK) {
        w->oom = true;
        return;
    }
    memcpy(w->data + w->len, src, n);
    w->len += n;
}

void dp_wire_i32(dp_wire_writer *w, int32_t v) { dp_wire_put(w, &v, sizeof v); }

static void put_u8(dp_wire_writer *w, uint8_t v) { dp_wire_put(w, &v, 1); }

void dp_wire_str(dp_wire_writer *w, const char *s) {
    if (!s) {
        dp_wire_i32(w, -1);
        return;
    }
    size_t n = strlen(s) + 1;
    dp_wire_i32(w, (int32_t)n);
    dp_wire_put(w, s, n);
}

static void put_array(dp_wire_writer *w, const void *a, size_t size, int32_t n) {
    if (!a || n < 0) n = 0;
    dp_wire_i32(w, n);
    dp_wire_put(w, a, size * (size_t)n);
}

bool dp_wire_get(dp_wire_reader *r, void *dst, size_t n, const char *what) {
    if (r->bad) return false;
    if (n > r->left) {
        r->bad = what;
        return false;
    }
    if (n) memcpy(dst, r->p, n);
    r->p += n;
    r->left -= n;
    return true;
}

int32_t dp_wire_get_i32(dp_wire_reader *r, const char *what) {
    int32_t v = 0;
    dp_wire_get(r, &v, sizeof v, what);
    return v;
}

static uint8_t get_u8(dp_wire_reader *r, const char *what) {
    uint8_t v = 0;
    dp_wire_get(r, &v, 1, what);
    return v;
}

const char *dp_wire_get_str(dp_wire_reader *r, const char *what) {
    int32_t n = dp_wire_get_i32(r, what);
    if (r->bad || n == -1) return NULL;
    if (n < 1 || (size_t)n > r->left || r->p[n - 1] != 0) {
        r->bad = what;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += n;
    r->left -= (size_t)n;
    return s;
}

const void *dp_wire_get_array(dp_wire_reader *r, size_t size, int32_t *n, const char *what) {
    *n = dp_wire_get_i32(r, what);
    if (r->bad) return NULL;
    if (*n < 0 || (size_t)*n > r->left / (size ? size : 1)) {
        r->bad = what;
        *n = 0;
        return NULL;
    }
    const void *a = r->p;
    r->p += size * (size_t)*n;
    r->left -= size * (size_t)*n;
    return a;
}

static vllm_status read_done(const dp_wire_reader *r, const char *msg) {
    if (r->bad) return vllm_error(VLLM_ERR_INVALID, "dp: malformed %s message: field %s is cut short", msg, r->bad);
    return VLLM_OK;
}

/* ---- HELLO --------------------------------------------------------------------- */

typedef struct hello_head {
    int32_t version, engine_index, pid;
    int32_t size_info, size_sp, size_stats, size_seq_output;
} hello_head;

void dp_wire_hello(dp_wire_writer *w, int32_t engine_index, const vllm_engine_info *info,
                   const vllm_sampling_params *defaults) {
    hello_head h = {DP_WIRE_VERSION, engine_index, 0, (int32_t)sizeof *info, (int32_t)sizeof *defaults,
                    (int32_t)sizeof(vllm_scheduler_stats), (int32_t)sizeof(vllm_seq_output)};
    h.pid = (int32_t)getpid();
    put_u8(w, DP_MSG_HELLO);
    dp_wire_put(w, &h, sizeof h);
    vllm_engine_info i = *info;
    i.kv_cache_dtype = i.kv_cache_storage_dtype = NULL;
    dp_wire_put(w, &i, sizeof i);
    vllm_sampling_params sp = *defaults;
    sp.allowed_token_ids = sp.bad_words_ids = sp.bad_words_lens = NULL;
    dp_wire_put(w, &sp, sizeof sp);
    dp_wire_str(w, info->kv_cache_dtype ? info->kv_cache_dtype : "auto");
    dp_wire_str(w, info->kv_cache_storage_dtype ? info->kv_cache_storage_dtype : "float32");
}

vllm_status dp_wire_read_hello(const void *msg, size_t len, dp_hello *out) {
    memset(out, 0, sizeof *out);
    dp_wire_reader r = {msg, len, NULL};
    if (get_u8(&r, "type") != DP_MSG_HELLO) return vllm_error(VLLM_ERR_INVALID, "dp: expected a HELLO message");
    hello_head h;
    if (!dp_wire_get(&r, &h, sizeof h, "header")) return read_done(&r, "HELLO");
    if (h.version != DP_WIRE_VERSION || h.size_info != (int32_t)sizeof out->info ||
        h.size_sp != (int32_t)sizeof out->defaults || h.size_stats != (int32_t)sizeof(vllm_scheduler_stats) ||
        h.size_seq_output != (int32_t)sizeof(vllm_seq_output))
        return vllm_error(VLLM_ERR_INVALID,
                          "dp: engine %d speaks wire version %d with struct sizes %d/%d/%d/%d; this front end "
                          "speaks version %d with %zu/%zu/%zu/%zu: run the same vllmc build on every node",
                          h.engine_index, h.version, h.size_info, h.size_sp, h.size_stats, h.size_seq_output,
                          DP_WIRE_VERSION, sizeof out->info, sizeof out->defaults, sizeof(vllm_scheduler_stats),
                          sizeof(vllm_seq_output));
    out->engine_index = h.engine_index;
    out->pid = h.pid;
    dp_wire_get(&r, &out->info, sizeof out->info, "engine info");
    dp_wire_get(&r, &out->defaults, sizeof out->defaults, "default sampling params");
    const char *a = dp_wire_get_str(&r, "kv_cache_dtype"), *b = dp_wire_get_str(&r, "kv_cache_storage_dtype");
    if (r.bad) return read_done(&r, "HELLO");
    snprintf(out->kv_cache_dtype, sizeof out->kv_cache_dtype, "%s", a ? a : "auto");
    snprintf(out->kv_cache_storage_dtype, sizeof out->kv_cache_storage_dtype, "%s", b ? b : "float32");
    out->info.kv_cache_dtype = out->kv_cache_dtype;
    out->info.kv_cache_storage_dtype = out->kv_cache_storage_dtype;
    out->defaults.allowed_token_ids = out->defaults.bad_words_ids = out->defaults.bad_words_lens = NULL;
    return VLLM_OK;
}

/* ---- ADD ------------------------------------------------------------------------- */

void dp_wire_add(dp_wire_writer *w, const dp_add *a) {
    put_u8(w, DP_MSG_ADD);
    dp_wire_str(w, a->request_id);
    put_array(w, a->prompt_ids, sizeof(int32_t), a->num_prompt_ids);
    vllm_sampling_params sp = *a->sp;
    sp.allowed_token_ids = sp.bad_words_ids = sp.bad_words_lens = NULL;
    dp_wire_put(w, &sp, sizeof sp);
    put_array(w, a->sp->allowed_token_ids, sizeof(int32_t), a->sp->num_allowed_token_ids);
    int32_t nbw = a->sp->bad_words_lens ? a->sp->num_bad_words : 0, total = 0;
    for (int32_t i = 0; i < nbw; i++) total += a->sp->bad_words_lens[i];
    put_array(w, a->sp->bad_words_lens, sizeof(int32_t), nbw);
    put_array(w, a->sp->bad_words_ids, sizeof(int32_t), total);
    dp_wire_i32(w, a->opts.priority);
    dp_wire_put(w, &a->opts.arrival_time, sizeof a->opts.arrival_time);
    dp_wire_str(w, a->opts.cache_salt);
    const vllm_structured_outputs *so = &a->opts.structured_outputs;
    dp_wire_i32(w, (int32_t)so->kind);
    if (so->kind != VLLM_STRUCTURED_NONE) {
        size_t n = so->text ? (so->len ? so->len : strlen(so->text)) : 0;
        dp_wire_i32(w, so->text ? (int32_t)(n + 1) : -1);
        if (so->text) {
            dp_wire_put(w, so->text, n);
            put_u8(w, 0);
        }
        put_u8(w, so->disable_any_whitespace);
        dp_wire_str(w, so->whitespace_pattern);
    }
    dp_wire_str(w, a->opts.lora_name);
    dp_wire_str(w, a->opts.kv_remote_host);
    dp_wire_i32(w, a->opts.kv_remote_port);
}

vllm_status dp_wire_read_add(const void *msg, size_t len, dp_add_scratch *s, dp_add *out) {
    memset(out, 0, sizeof *out);
    dp_wire_reader r = {msg, len, NULL};
    if (get_u8(&r, "type") != DP_MSG_ADD) return vllm_error(VLLM_ERR_INVALID, "dp: expected an ADD message");
    out->request_id = dp_wire_get_str(&r, "request_id");
    int32_t np = 0, na = 0, nbl = 0, nbi = 0;
    const void *prompt = dp_wire_get_array(&r, sizeof(int32_t), &np, "prompt_ids");
    dp_wire_get(&r, &s->sp, sizeof s->sp, "sampling params");
    const void *allowed = dp_wire_get_array(&r, sizeof(int32_t), &na, "allowed_token_ids");
    const void *bl = dp_wire_get_array(&r, sizeof(int32_t), &nbl, "bad_words_lens");
    const void *bi = dp_wire_get_array(&r, sizeof(int32_t), &nbi, "bad_words_ids");
    out->opts.priority = dp_wire_get_i32(&r, "priority");
    dp_wire_get(&r, &out->opts.arrival_time, sizeof out->opts.arrival_time, "arrival_time");
    out->opts.cache_salt = dp_wire_get_str(&r, "cache_salt");
    vllm_structured_outputs *so = &out->opts.structured_outputs;
    so->kind = (vllm_structured_kind)dp_wire_get_i32(&r, "structured kind");
    if (so->kind != VLLM_STRUCTURED_NONE) {
        so->text = dp_wire_get_str(&r, "structured text");
        so->len = so->text ? strlen(so->text) : 0;
        so->disable_any_whitespace = get_u8(&r, "disable_any_whitespace") != 0;
        so->whitespace_pattern = dp_wire_get_str(&r, "whitespace_pattern");
    }
    out->opts.lora_name = dp_wire_get_str(&r, "lora_name");
    out->opts.kv_remote_host = dp_wire_get_str(&r, "kv_remote_host");
    out->opts.kv_remote_port = dp_wire_get_i32(&r, "kv_remote_port");
    if (r.bad || !out->request_id) {
        if (!r.bad) r.bad = "request_id";
        return read_done(&r, "ADD");
    }
    size_t need = (size_t)np + (size_t)na + (size_t)nbl + (size_t)nbi;
    if (buf_grow((void **)&s->ints, &s->cap_ints, need + 1, sizeof(int32_t)) != VLLM_OK) return VLLM_ERR_NOMEM;
    int32_t *p = s->ints;
    memcpy(p, prompt, (size_t)np * sizeof(int32_t));
    memcpy(p + np, allowed, (size_t)na * sizeof(int32_t));
    memcpy(p + np + na, bl, (size_t)nbl * sizeof(int32_t));
    memcpy(p + np + na + nbl, bi, (size_t)nbi * sizeof(int32_t));
    out->prompt_ids = p;
    out->num_prompt_ids = np;
    s->sp.allowed_token_ids = na ? p + np : NULL;
    s->sp.num_allowed_token_ids = na;
    s->sp.bad_words_lens = nbl ? p + np + na : NULL;
    s->sp.bad_words_ids = nbl ? p + np + na + nbl : NULL;
    s->sp.num_bad_words = nbl;
    out->sp = &s->sp;
    return VLLM_OK;
}

/* ---- LORA / REPLY ------------------------------------------------------------------- */

void dp_wire_lora(dp_wire_writer *w, uint64_t seq, bool load, const char *name, const char *path) {
    put_u8(w, DP_MSG_LORA);
    dp_wire_put(w, &seq, sizeof seq);
    put_u8(w, load);
    dp_wire_str(w, name);
    dp_wire_str(w, path);
}

vllm_status dp_wire_read_lora(const void *msg, size_t len, uint64_t *seq, bool *load, const char **name,
                              const char **path) {
    dp_wire_reader r = {msg, len, NULL};
    get_u8(&r, "type");
    dp_wire_get(&r, seq, sizeof *seq, "seq");
    *load = get_u8(&r, "load") != 0;
    *name = dp_wire_get_str(&r, "name");
    *path = dp_wire_get_str(&r, "path");
    if (!r.bad && !*name) r.bad = "name";
    return read_done(&r, "LORA");
}

void dp_wire_reply(dp_wire_writer *w, uint64_t seq, vllm_status status, const char *error) {
    put_u8(w, DP_MSG_REPLY);
    dp_wire_put(w, &seq, sizeof seq);
    dp_wire_i32(w, (int32_t)status);
    dp_wire_str(w, error);
}

vllm_status dp_wire_read_reply(const void *msg, size_t len, uint64_t *seq, vllm_status *status, const char **error) {
    dp_wire_reader r = {msg, len, NULL};
    get_u8(&r, "type");
    dp_wire_get(&r, seq, sizeof *seq, "seq");
    *status = (vllm_status)dp_wire_get_i32(&r, "status");
    *error = dp_wire_get_str(&r, "error");
    return read_done(&r, "REPLY");
}

/* ---- ABORT / STOP / PING --------------------------------------------------------- */

void dp_wire_id(dp_wire_writer *w, dp_msg_type type, const char *request_id, int32_t index) {
    put_u8(w, (uint8_t)type);
    dp_wire_str(w, request_id);
    dp_wire_i32(w, index);
}

vllm_status dp_wire_read_id(const void *msg, size_t len, const char **request_id, int32_t *index) {
    dp_wire_reader r = {msg, len, NULL};
    get_u8(&r, "type");
    *request_id = dp_wire_get_str(&r, "request_id");
    *index = dp_wire_get_i32(&r, "index");
    if (!r.bad && !*request_id) r.bad = "request_id";
    return read_done(&r, "ABORT/STOP");
}

/* ---- OUTPUT ---------------------------------------------------------------------- */

static void put_logprobs(dp_wire_writer *w, const vllm_token_logprobs *lp, int32_t n) {
    put_u8(w, lp != NULL);
    if (!lp) return;
    for (int32_t t = 0; t < n; t++) {
        dp_wire_i32(w, lp[t].token_id);
        dp_wire_put(w, &lp[t].logprob, sizeof lp[t].logprob);
        dp_wire_i32(w, lp[t].rank);
        put_array(w, lp[t].top_ids, sizeof(int32_t), lp[t].num_top);
        put_array(w, lp[t].top_logprobs, sizeof(float), lp[t].num_top);
    }
}

void dp_wire_output(dp_wire_writer *w, int64_t num_adds, bool stepped, const vllm_step_output *out) {
    put_u8(w, DP_MSG_OUTPUT);
    dp_wire_put(w, &num_adds, sizeof num_adds);
    put_u8(w, stepped);
    dp_wire_put(w, &out->timestamp, sizeof out->timestamp);
    dp_wire_put(w, &out->stats, sizeof out->stats);
    dp_wire_i32(w, out->num_outputs);
    for (int32_t i = 0; i < out->num_outputs; i++) {
        const vllm_seq_output *o = &out->outputs[i];
        dp_wire_str(w, o->request_id);
        int32_t f[6] = {o->index, (int32_t)o->finish_reason, o->stop_token_id, o->num_prompt_tokens,
                        o->num_cached_tokens, o->prompt_logprobs_start};
        dp_wire_put(w, f, sizeof f);
        put_array(w, o->new_token_ids, sizeof(int32_t), o->num_new_tokens);
        put_logprobs(w, o->new_logprobs, o->num_new_tokens);
        put_array(w, o->events, sizeof(vllm_event), o->num_events);
        dp_wire_str(w, o->error);
        dp_wire_i32(w, o->num_prompt_logprobs);
        put_logprobs(w, o->prompt_logprobs, o->num_prompt_logprobs);
    }
}

/* Arena offsets live in pointer fields until the fix-up: offset + 1 (0 = NULL). */
#define OFF(p) ((size_t)(uintptr_t)(p))

static bool arena_copy(dp_output_decoder *d, size_t *used, const void *src, size_t n, size_t *off) {
    size_t start = (*used + 7) & ~(size_t)7;
    if (buf_grow((void **)&d->bytes, &d->cap_bytes, start + n + 8, 1) != VLLM_OK) return false;
    if (n && src) memcpy(d->bytes + start, src, n);
    *used = start + n;
    *off = start + 1;
    return true;
}

static bool get_logprobs(dp_wire_reader *r, dp_output_decoder *d, size_t *used, int32_t n, size_t *off) {
    *off = 0;
    if (!get_u8(r, "has logprobs")) return !r->bad;
    size_t recs;
    if (n < 0 || !arena_copy(d, used, NULL, (size_t)n * sizeof(vllm_token_logprobs), &recs)) return false;
    for (int32_t t = 0; t < n; t++) {
        vllm_token_logprobs lp = {0};
        lp.token_id = dp_wire_get_i32(r, "logprob token");
        dp_wire_get(r, &lp.logprob, sizeof lp.logprob, "logprob");
        lp.rank = dp_wire_get_i32(r, "rank");
        int32_t ni = 0, nl = 0;
        const void *ids = dp_wire_get_array(r, sizeof(int32_t), &ni, "top ids");
        const void *lps = dp_wire_get_array(r, sizeof(float), &nl, "top logprobs");
        if (r->bad) return false;
        if (ni != nl) {
            r->bad = "top logprobs";
            return false;
        }
        size_t oi, ol;
        if (!arena_copy(d, used, ids, (size_t)ni * sizeof(int32_t), &oi) ||
            !arena_copy(d, used, lps, (size_t)nl * sizeof(float), &ol))
            return false;
        lp.num_top = ni;
        lp.top_ids = (const int32_t *)(uintptr_t)oi;
        lp.top_logprobs = (const float *)(uintptr_t)ol;
        memcpy(d->bytes + recs - 1 + (size_t)t * sizeof lp, &lp, sizeof lp);
    }
    *off = recs;
    return true;
}

static void *fix(dp_output_decoder *d, const void *p) { return OFF(p) ? d->bytes + OFF(p) - 1 : NULL; }

static void fix_logprobs(dp_output_decoder *d, const vllm_token_logprobs *lp, int32_t n) {
    vllm_token_logprobs *v = (vllm_token_logprobs *)lp;
    for (int32_t t = 0; v && t < n; t++) {
        v[t].top_ids = fix(d, v[t].top_ids);
        v[t].top_logprobs = fix(d, v[t].top_logprobs);
    }
}

vllm_status dp_wire_read_output(const void *msg, size_t len, dp_output_decoder *d) {
    dp_wire_reader r = {msg, len, NULL};
    memset(&d->out, 0, sizeof d->out);
    if (get_u8(&r, "type") != DP_MSG_OUTPUT) return vllm_error(VLLM_ERR_INVALID, "dp: expected an OUTPUT message");
    dp_wire_get(&r, &d->num_adds, sizeof d->num_adds, "num_adds");
    d->stepped = get_u8(&r, "stepped") != 0;
    dp_wire_get(&r, &d->out.timestamp, sizeof d->out.timestamp, "timestamp");
    dp_wire_get(&r, &d->out.stats, sizeof d->out.stats, "stats");
    int32_t n = dp_wire_get_i32(&r, "num_outputs");
    if (r.bad) return read_done(&r, "OUTPUT");
    if (n < 0 || (size_t)n > len) return vllm_error(VLLM_ERR_INVALID, "dp: malformed OUTPUT: %d outputs", n);
    if (buf_grow((void **)&d->seqs, &d->cap_seqs, (size_t)n + 1, sizeof *d->seqs) != VLLM_OK) return VLLM_ERR_NOMEM;
    size_t used = 0;
    for (int32_t i = 0; i < n; i++) {
        vllm_seq_output *o = &d->seqs[i];
        memset(o, 0, sizeof *o);
        o->request_id = dp_wire_get_str(&r, "request_id");
        int32_t f[6] = {0};
        dp_wire_get(&r, f, sizeof f, "sequence fields");
        o->index = f[0];
        o->finish_reason = (vllm_finish_reason)f[1];
        o->stop_token_id = f[2];
        o->num_prompt_tokens = f[3];
        o->num_cached_tokens = f[4];
        o->prompt_logprobs_start = f[5];
        int32_t nt = 0, ne = 0;
        const void *toks = dp_wire_get_array(&r, sizeof(int32_t), &nt, "new_token_ids");
        size_t off;
        if (r.bad) break;
        if (!arena_copy(d, &used, toks, (size_t)nt * sizeof(int32_t), &off)) return VLLM_ERR_NOMEM;
        o->num_new_tokens = nt;
        o->new_token_ids = (const int32_t *)(uintptr_t)off;
        if (!get_logprobs(&r, d, &used, nt, &off)) {
            if (r.bad) break;
            return VLLM_ERR_NOMEM;
        }
        o->new_logprobs = (const vllm_token_logprobs *)(uintptr_t)off;
        const void *evs = dp_wire_get_array(&r, sizeof(vllm_event), &ne, "events");
        if (r.bad) break;
        if (!arena_copy(d, &used, evs, (size_t)ne * sizeof(vllm_event), &off)) return VLLM_ERR_NOMEM;
        o->num_events = ne;
        o->events = (const vllm_event *)(uintptr_t)off;
        o->error = dp_wire_get_str(&r, "error");
        o->num_prompt_logprobs = dp_wire_get_i32(&r, "num_prompt_logprobs");
        if (r.bad) break;
        if (!get_logprobs(&r, d, &used, o->num_prompt_logprobs, &off)) {
            if (r.bad) break;
            return VLLM_ERR_NOMEM;
        }
        o->prompt_logprobs = (const vllm_token_logprobs *)(uintptr_t)off;
        if (!o->request_id) r.bad = "request_id";
    }
    if (r.bad) return read_done(&r, "OUTPUT");
    for (int32_t i = 0; i < n; i++) { /* the arena has stopped moving: offsets into pointers */
        vllm_seq_output *o = &d->seqs[i];
        o->new_token_ids = fix(d, o->new_token_ids);
        o->new_logprobs = fix(d, o->new_logprobs);
        fix_logprobs(d, o->new_logprobs, o->num_new_tokens);
        o->events = fix(d, o->events);
        o->prompt_logprobs = fix(d, o->prompt_logprobs);
        fix_logprobs(d, o->prompt_logprobs, o->num_prompt_logprobs);
    }
    d->out.num_outputs = n;
    d->out.outputs = d->seqs;
    return VLLM_OK;
}

void dp_wire_output_decoder_free(dp_output_decoder *d) {
    free(d->seqs);
    free(d->bytes);
    memset(d, 0, sizeof *d);
}
