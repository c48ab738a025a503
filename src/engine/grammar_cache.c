/*
 * grammar_cache.c - see grammar_cache.h.
 *
 * One mutex guards the map, the queue and the reference counts; the
 * compile itself (and the vocabulary's construction) runs unlocked. Entries
 * live in the map from creation until they are dropped; unreferenced
 * entries also sit on an LRU list (oldest first), which is what is trimmed
 * to max_entries. Map keys are the spec flattened to one string: kind,
 * flags, whitespace pattern and text, with NUL and backslash escaped so two
 * specs never share a key.
 */
#include "engine/grammar_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/strbuf.h"
#include "tokenizer/tokenizer.h"

#define DEFAULT_MAX_ENTRIES 256
#define MAX_THREADS 8

struct grammar_cache_entry {
    map_node by_key;
    list_node node;                  /* on the queue (PENDING, not started) or the LRU (refs 0) */
    char *key;
    st_spec spec;                    /* text and whitespace_pattern point into spec_buf */
    char *spec_buf;
    int32_t refs;                    /* under mu */
    atomic_int state;                /* grammar_state; published with release */
    st_grammar *grammar;
    char *error;
};

struct grammar_cache {
    grammar_cache_config cfg;
    char *tokenizer_path;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    map entries;
    list_node queue, lru;
    int32_t num_lru;
    bool stop;
    int32_t num_started;
    pthread_t threads[MAX_THREADS];
    /* the vocabulary, built once by the first compile (vocab_tried under mu) */
    bool vocab_tried;
    st_vocab *vocab;
    _Atomic(st_vocab *) vocab_pub;
    char *vocab_error;
    void (*notify)(void *);
    void *notify_ud;
    long debug_delay_ms;             /* VLLMC_DEBUG_COMPILE_DELAY_MS: each compile sleeps first */
};

vllm_status grammar_cache_create(const grammar_cache_config *cfg, grammar_cache **out) {
    *out = NULL;
    if (!cfg->tokenizer) return vllm_error(VLLM_ERR_INVALID, "grammar cache: no tokenizer path");
    grammar_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->tokenizer_path = strdup(cfg->tokenizer))) {
        free(c);
        return vllm_error(VLLM_ERR_NOMEM, "grammar cache: out of memory");
    }
    c->cfg = *cfg;
    c->cfg.tokenizer = c->tokenizer_path;
    if (c->cfg.num_threads <= 0) c->cfg.num_threads = 1;
    if (c->cfg.num_threads > MAX_THREADS) c->cfg.num_threads = MAX_THREADS;
    if (c->cfg.max_entries <= 0) c->cfg.max_entries = DEFAULT_MAX_ENTRIES;
    if (c->cfg.num_eos > GRAMMAR_CACHE_MAX_EOS) c->cfg.num_eos = GRAMMAR_CACHE_MAX_EOS;
    const char *delay = getenv("VLLMC_DEBUG_COMPILE_DELAY_MS");
    c->debug_delay_ms = delay ? strtol(delay, NULL, 10) : 0;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    map_init(&c->entries);
    list_init(&c->queue);
    list_init(&c->lru);
    atomic_init(&c->vocab_pub, NULL);
    *out = c;
    return VLLM_OK;
}

static void entry_free(grammar_cache_entry *e) {
    if (!e) return;
    st_grammar_unref(e->grammar);
    free(e->error);
    free(e->spec_buf);
    free(e->key);
    free(e);
}

void grammar_cache_free(grammar_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
    for (int32_t i = 0; i < c->num_started; i++) pthread_join(c->threads[i], NULL);
    for (map_node *n = map_first(&c->entries), *next; n; n = next) {
        next = map_next(&c->entries, n);
        grammar_cache_entry *e = map_entry(n, grammar_cache_entry, by_key);
        map_remove(&c->entries, n);
        entry_free(e);
    }
    map_deinit(&c->entries);
    st_vocab_free(c->vocab);
    free(c->vocab_error);
    pthread_cond_destroy(&c->work_cv);
    pthread_cond_destroy(&c->done_cv);
    pthread_mutex_destroy(&c->mu);
    free(c->tokenizer_path);
    free(c);
}

void grammar_cache_set_notify(grammar_cache *c, void (*fn)(void *ud), void *ud) {
    pthread_mutex_lock(&c->mu);
    c->notify = fn;
    c->notify_ud = ud;
    pthread_mutex_unlock(&c->mu);
}

const st_vocab *grammar_cache_vocab(grammar_cache *c) {
    return atomic_load_explicit(&c->vocab_pub, memory_order_acquire);
}

grammar_state grammar_cache_entry_state(const grammar_cache_entry *e) {
    return (grammar_state)atomic_load_explicit(&((grammar_cache_entry *)e)->state, memory_order_acquire);
}

st_grammar *grammar_cache_entry_grammar(const grammar_cache_entry *e) {
    return grammar_cache_entry_state(e) == GRAMMAR_READY ? e->grammar : NULL;
}

const char *grammar_cache_entry_error(const grammar_cache_entry *e) {
    return grammar_cache_entry_state(e) == GRAMMAR_FAILED ? e->error : NULL;
}

/* The vocabulary, built by the first caller (on a compile thread); NULL
 * with *err set when the tokenizer cannot be loaded. */
static const st_vocab *get_vocab(grammar_cache *c, const char **err) {
    pthread_mutex_lock(&c->mu);
    while (!c->vocab_tried) {
        c->vocab_tried = true;
        pthread_mutex_unlock(&c->mu);
        tokenizer *t = NULL;
        st_vocab *v = NULL;
        vllm_status rc = tokenizer_load(c->tokenizer_path, &t);
        if (rc == VLLM_OK) rc = st_vocab_new(t, c->cfg.eos_ids, c->cfg.num_eos, &v);
        char *msg = rc == VLLM_OK ? NULL : strdup(vllm_errmsg());
        tokenizer_free(t);
        pthread_mutex_lock(&c->mu);
        c->vocab = v;
        c->vocab_error = msg;
        atomic_store_explicit(&c->vocab_pub, v, memory_order_release);
        if (v) log_info("structured outputs: vocabulary of %d tokens from %s", st_vocab_size(v), c->tokenizer_path);
        pthread_cond_broadcast(&c->done_cv);
    }
    /* another thread may be building it: vocab_tried is set first, so wait for the result */
    while (!c->vocab && !c->vocab_error) pthread_cond_wait(&c->done_cv, &c->mu);
    const st_vocab *v = c->vocab;
    *err = c->vocab_error ? c->vocab_error : "the tokenizer could not be loaded";
    pthread_mutex_unlock(&c->mu);
    return v;
}

/* Drops unreferenced entries beyond max_entries, oldest first. Under mu. */
static void trim(grammar_cache *c) {
    while (c->num_lru > c->cfg.max_entries) {
        grammar_cache_entry *e = list_entry(c->lru.next, grammar_cache_entry, node);
        list_remove(&e->node);
        c->num_lru--;
        map_remove(&c->entries, &e->by_key);
        entry_free(e);
    }
}

static void *compile_main(void *arg) {
    grammar_cache *c = arg;
    pthread_setname_np(pthread_self(), "vllm-grammar");
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && list_empty(&c->queue)) pthread_cond_wait(&c->work_cv, &c->mu);
        if (c->stop) break;
        grammar_cache_entry *e = list_entry(c->queue.next, grammar_cache_entry, node);
        list_remove(&e->node);
        list_init(&e->node); /* the queue's reference is ours now */
        pthread_mutex_unlock(&c->mu);

        double t0 = clock_now();
        if (c->debug_delay_ms > 0) {
            struct timespec ts = {c->debug_delay_ms / 1000, (c->debug_delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        const char *verr = NULL;
        const st_vocab *v = get_vocab(c, &verr);
        st_grammar *g = NULL;
        char *err = NULL;
        if (!v) {
            size_t n = strlen(verr) + 64;
            if ((err = malloc(n))) snprintf(err, n, "structured outputs need the tokenizer: %s", verr);
        } else if (st_compile(&e->spec, v, &g) != VLLM_OK) {
            err = strdup(vllm_errmsg());
            g = NULL;
        }
        double dt = clock_now() - t0;
        if (g) log_debug("structured outputs: grammar compiled in %.3f s", dt);
        else log_info("structured outputs: compile failed after %.3f s: %s", dt, err ? err : "out of memory");

        pthread_mutex_lock(&c->mu);
        e->grammar = g;
        e->error = g ? NULL : (err ? err : strdup("structured outputs: out of memory"));
        atomic_store_explicit(&e->state, g ? GRAMMAR_READY : GRAMMAR_FAILED, memory_order_release);
        void (*notify)(void *) = c->notify;
        void *ud = c->notify_ud;
        pthread_cond_broadcast(&c->done_cv);
        pthread_mutex_unlock(&c->mu);
        grammar_cache_entry_unref(c, e);
        if (notify) notify(ud);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The cache key of a spec (see the file comment); malloc'ed. */
static char *spec_key(const st_spec *s) {
    strbuf b = {0};
    char head[64];
    int n = snprintf(head, sizeof head, "%d|%d|", (int)s->kind, (int)s->disable_any_whitespace);
    vllm_status rc = sb_add(&b, head, (size_t)n);
    const char *parts[2] = {s->whitespace_pattern ? s->whitespace_pattern : "", s->text ? s->text : ""};
    size_t lens[2] = {strlen(parts[0]), s->text ? s->len : 0};
    for (int p = 0; p < 2 && rc == VLLM_OK; p++) {
        if (p == 1) rc = sb_add(&b, s->whitespace_pattern ? "|w|" : "|-|", 3);
        for (size_t i = 0; i < lens[p] && rc == VLLM_OK; i++) {
            char ch = parts[p][i];
            if (ch == '\0') rc = sb_add(&b, "\\0", 2);
            else if (ch == '\\') rc = sb_add(&b, "\\\\", 2);
            else rc = sb_add(&b, &ch, 1);
        }
    }
    if (rc != VLLM_OK) {
        free(b.s);
        return NULL;
    }
    return b.s ? b.s : strdup("");
}

vllm_status grammar_cache_get(grammar_cache *c, const st_spec *spec, grammar_cache_entry **out) {
    *out = NULL;
    if (spec->kind < ST_JSON_SCHEMA || spec->kind > ST_STRUCTURAL_TAG)
        return vllm_error(VLLM_ERR_INVALID, "structured outputs: unknown constraint kind %d", (int)spec->kind);
    char *key = spec_key(spec);
    if (!key) return vllm_error(VLLM_ERR_NOMEM, "grammar cache: out of memory");
    pthread_mutex_lock(&c->mu);
    map_node *n = map_find(&c->entries, key);
    if (n) {
        grammar_cache_entry *e = map_entry(n, grammar_cache_entry, by_key);
        if (e->refs++ == 0 && grammar_cache_entry_state(e) != GRAMMAR_PENDING) {
            list_remove(&e->node);
            list_init(&e->node);
            c->num_lru--;
        }
        pthread_mutex_unlock(&c->mu);
        free(key);
        *out = e;
        return VLLM_OK;
    }
    vllm_status rc = VLLM_OK;
    grammar_cache_entry *e = calloc(1, sizeof *e);
    size_t tl = spec->text ? spec->len : 0;
    size_t wl = spec->whitespace_pattern ? strlen(spec->whitespace_pattern) : 0;
    if (!e || !(e->spec_buf = malloc(tl + wl + 2))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "grammar cache: out of memory");
        goto fail;
    }
    e->key = key;
    key = NULL;
    e->spec = *spec;
    if (tl) memcpy(e->spec_buf, spec->text, tl);
    e->spec_buf[tl] = 0;
    e->spec.text = e->spec_buf;
    e->spec.len = tl;
    if (spec->whitespace_pattern) {
        memcpy(e->spec_buf + tl + 1, spec->whitespace_pattern, wl + 1);
        e->spec.whitespace_pattern = e->spec_buf + tl + 1;
    }
    e->refs = 2; /* the caller's and the queue's (then the compiling thread's) */
    atomic_init(&e->state, GRAMMAR_PENDING);
    if ((rc = map_insert(&c->entries, &e->by_key, e->key)) != VLLM_OK) goto fail;
    /* threads start with the compiles, up to num_threads */
    if (c->num_started < c->cfg.num_threads &&
        pthread_create(&c->threads[c->num_started], NULL, compile_main, c) == 0)
        c->num_started++;
    if (c->num_started == 0) {
        map_remove(&c->entries, &e->by_key);
        rc = vllm_error(VLLM_ERR_NOMEM, "grammar cache: cannot start a compile thread");
        goto fail;
    }
    list_push_back(&c->queue, &e->node);
    pthread_cond_signal(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
    *out = e;
    return VLLM_OK;
fail:
    pthread_mutex_unlock(&c->mu);
    free(key);
    entry_free(e);
    return rc;
}

void grammar_cache_entry_unref(grammar_cache *c, grammar_cache_entry *e) {
    if (!e) return;
    pthread_mutex_lock(&c->mu);
    if (--e->refs == 0) {
        /* not PENDING: the queue, then the compiling thread, hold a reference */
        list_push_back(&c->lru, &e->node);
        c->num_lru++;
        trim(c);
    }
    pthread_mutex_unlock(&c->mu);
}

grammar_state grammar_cache_entry_wait(grammar_cache *c, const grammar_cache_entry *e, double deadline) {
    grammar_state s;
    pthread_mutex_lock(&c->mu);
    while ((s = grammar_cache_entry_state(e)) == GRAMMAR_PENDING) {
        double left = deadline - clock_now();
        if (left <= 0) break;
        struct timespec dl = clock_deadline(left);
        pthread_cond_timedwait(&c->done_cv, &c->mu, &dl);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

void grammar_cache_wait_any(grammar_cache *c, double deadline) {
    double left = deadline - clock_now();
    if (left <= 0) return;
    pthread_mutex_lock(&c->mu);
    struct timespec dl = clock_deadline(left);
    pthread_cond_timedwait(&c->done_cv, &c->mu, &dl);
    pthread_mutex_unlock(&c->mu);
}

vllm_status grammar_cache_spec(const vllm_structured_outputs *so, st_spec *out) {
    *out = (st_spec){0};
    static const st_kind kinds[] = {
        [VLLM_STRUCTURED_JSON] = ST_JSON_SCHEMA, [VLLM_STRUCTURED_JSON_OBJECT] = ST_JSON_OBJECT,
        [VLLM_STRUCTURED_REGEX] = ST_REGEX,      [VLLM_STRUCTURED_CHOICE] = ST_CHOICE,
        [VLLM_STRUCTURED_GRAMMAR] = ST_GRAMMAR,  [VLLM_STRUCTURED_STRUCTURAL_TAG] = ST_STRUCTURAL_TAG,
    };
    if ((int)so->kind <= VLLM_STRUCTURED_NONE || (int)so->kind > VLLM_STRUCTURED_STRUCTURAL_TAG)
        return vllm_error(VLLM_ERR_INVALID, "structured_outputs: unknown kind %d", (int)so->kind);
    size_t len = so->len ? so->len : so->text ? strlen(so->text) : 0;
    if (so->kind != VLLM_STRUCTURED_JSON_OBJECT && (!so->text || !len))
        return vllm_error(VLLM_ERR_INVALID, "structured_outputs: the constraint's text is empty");
    out->kind = kinds[so->kind];
    out->text = so->kind == VLLM_STRUCTURED_JSON_OBJECT ? NULL : so->text;
    out->len = so->kind == VLLM_STRUCTURED_JSON_OBJECT ? 0 : len;
    out->disable_any_whitespace = so->disable_any_whitespace;
    out->whitespace_pattern = so->whitespace_pattern;
    return VLLM_OK;
}
