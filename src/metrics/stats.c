/*
 * stats.c - see stats.h.
 *
 * Requests live in a chained hash table keyed by request id; each is one
 * allocation holding the request, its n sequence states and its id, made
 * when the request arrives (on an HTTP thread) so that stats_update, which
 * runs once per engine step, never allocates except to grow the iteration's
 * arrays to a new largest step.
 *
 * Timestamps are kept with "has" flags rather than 0.0 sentinels: a
 * monotonic clock may legitimately read small values in tests.
 */
#include "metrics/stats.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"

typedef struct seq_state {
    double queued_ts, scheduled_ts, first_token_ts, last_token_ts;
    double ttft;                     /* front-end seconds from arrival to the first token */
    bool has_queued, has_scheduled, has_first_token, seen, finished;
    int32_t num_generation_tokens;
} seq_state;

typedef struct req_state {
    struct req_state *next;          /* hash chain */
    uint64_t hash;
    const char *id;                  /* points into this allocation */
    double arrival;
    int32_t num_prompt_tokens, n, max_tokens;
    int32_t num_finished, max_num_generation_tokens;
    /* sequence 0's QUEUED / first SCHEDULED, inherited by its siblings */
    double queued_ts, scheduled_ts;
    bool has_queued, has_scheduled;
    seq_state seqs[];                /* (n) */
} req_state;

struct stats {
    req_state **buckets;             /* (num_buckets), a power of two */
    uint64_t num_buckets;
    int32_t num_requests;
};

static uint64_t hash_id(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

void stats_iteration_init(stats_iteration *it) { memset(it, 0, sizeof *it); }

void stats_iteration_deinit(stats_iteration *it) {
    free(it->ttft);
    free(it->itl);
    free(it->finished);
    free(it->groups);
    memset(it, 0, sizeof *it);
}

/* The four arrays grow together (buf_grow from the same capacity gives the
 * same new one); on failure the ones already grown just stay larger. */
static vllm_status iteration_reserve(stats_iteration *it, int32_t need) {
    void **arrays[4] = {(void **)&it->ttft, (void **)&it->itl, (void **)&it->finished, (void **)&it->groups};
    const size_t sizes[4] = {sizeof *it->ttft, sizeof *it->itl, sizeof *it->finished, sizeof *it->groups};
    size_t cap = (size_t)it->cap;
    for (int i = 0; i < 4; i++) {
        cap = (size_t)it->cap;
        vllm_status rc = buf_grow(arrays[i], &cap, (size_t)need, sizes[i]);
        if (rc != VLLM_OK) {
            vllm_error_prefix("stats: iteration arrays for %d outputs", need);
            return rc;
        }
    }
    it->cap = (int32_t)cap;
    return VLLM_OK;
}

vllm_status stats_create(stats **out) {
    stats *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "stats: create");
    s->num_buckets = 64;
    s->buckets = calloc(s->num_buckets, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return vllm_error(VLLM_ERR_NOMEM, "stats: create");
    }
    *out = s;
    return VLLM_OK;
}

void stats_free(stats *s) {
    if (!s) return;
    for (uint64_t b = 0; b < s->num_buckets; b++)
        for (req_state *r = s->buckets[b], *next; r; r = next) {
            next = r->next;
            free(r);
        }
    free(s->buckets);
    free(s);
}

int32_t stats_num_requests(const stats *s) { return s->num_requests; }

static req_state **find_slot(stats *s, const char *id, uint64_t h) {
    req_state **p = &s->buckets[h & (s->num_buckets - 1)];
    while (*p && ((*p)->hash != h || strcmp((*p)->id, id))) p = &(*p)->next;
    return p;
}

static void grow_table(stats *s) {
    uint64_t nb = s->num_buckets * 2;
    req_state **b = calloc(nb, sizeof *b);
    if (!b) return; /* keep the longer chains */
    for (uint64_t i = 0; i < s->num_buckets; i++)
        for (req_state *r = s->buckets[i], *next; r; r = next) {
            next = r->next;
            r->next = b[r->hash & (nb - 1)];
            b[r->hash & (nb - 1)] = r;
        }
    free(s->buckets);
    s->buckets = b;
    s->num_buckets = nb;
}

vllm_status stats_add_request(stats *s, const char *request_id, double arrival,
                              int32_t num_prompt_tokens, int32_t n, int32_t max_tokens) {
    if (!request_id) return vllm_error(VLLM_ERR_INVALID, "stats: request_id is NULL");
    if (n < 1 || n > 1 << 16)
        return vllm_error(VLLM_ERR_INVALID, "stats: request %s: n = %d", request_id, n);
    uint64_t h = hash_id(request_id);
    if (*find_slot(s, request_id, h))
        return vllm_error(VLLM_ERR_INVALID, "stats: request %s is already live", request_id);
    size_t idlen = strlen(request_id) + 1;
    size_t size = sizeof(req_state) + (size_t)n * sizeof(seq_state);
    req_state *r = calloc(1, size + idlen);
    if (!r) return vllm_error(VLLM_ERR_NOMEM, "stats: request %s", request_id);
    memcpy((char *)r + size, request_id, idlen);
    r->id = (char *)r + size;
    r->hash = h;
    r->arrival = arrival;
    r->num_prompt_tokens = num_prompt_tokens;
    r->n = n;
    r->max_tokens = max_tokens;
    if ((uint64_t)s->num_requests >= s->num_buckets) grow_table(s);
    req_state **slot = &s->buckets[h & (s->num_buckets - 1)];
    r->next = *slot;
    *slot = r;
    s->num_requests++;
    return VLLM_OK;
}

static void unlink_request(stats *s, req_state *r) {
    req_state **p = find_slot(s, r->id, r->hash);
    if (*p == r) *p = r->next;
    s->num_requests--;
    free(r);
}

void stats_remove_request(stats *s, const char *request_id) {
    if (!request_id) return;
    req_state **p = find_slot(s, request_id, hash_id(request_id));
    if (*p) unlink_request(s, *p);
}

static double nonneg(double x) { return x > 0 ? x : 0; }

/* A sequence's first output: siblings of an n > 1 request start from
 * sequence 0's QUEUED and first SCHEDULED (they fork off it after prefill). */
static void seq_first_seen(req_state *r, seq_state *q) {
    q->seen = true;
    if (r->has_queued) {
        q->queued_ts = r->queued_ts;
        q->has_queued = true;
    }
    if (r->has_scheduled) {
        q->scheduled_ts = r->scheduled_ts;
        q->has_scheduled = true;
    }
}

static void apply_events(req_state *r, seq_state *q, const vllm_seq_output *o, stats_iteration *it) {
    for (int32_t i = 0; i < o->num_events; i++) {
        const vllm_event *e = &o->events[i];
        switch (e->type) {
        case VLLM_EVENT_QUEUED:
            if (!q->has_queued) {
                q->queued_ts = e->timestamp;
                q->has_queued = true;
            }
            if (!r->has_queued) {
                r->queued_ts = e->timestamp;
                r->has_queued = true;
            }
            break;
        case VLLM_EVENT_SCHEDULED:
            it->num_scheduled_events++;
            if (!q->has_scheduled) { /* a re-schedule after preemption restarts nothing */
                q->scheduled_ts = e->timestamp;
                q->has_scheduled = true;
            }
            if (!r->has_scheduled) {
                r->scheduled_ts = e->timestamp;
                r->has_scheduled = true;
            }
            break;
        case VLLM_EVENT_PREEMPTED: break; /* counted from the scheduler stats */
        }
    }
}

/* The sequence finished at step time t (engine clock) and front-end time now. */
static void finish_seq(req_state *r, seq_state *q, const char *id, int32_t index,
                       vllm_finish_reason reason, double t, double now, stats_iteration *it) {
    stats_finished *f = &it->finished[it->num_finished++];
    memset(f, 0, sizeof *f);
    f->request_id = id;
    f->index = index;
    f->reason = reason;
    f->ttft = q->has_first_token ? q->ttft : -1;
    f->e2e = nonneg(now - r->arrival);
    f->num_prompt_tokens = r->num_prompt_tokens;
    f->num_generation_tokens = q->num_generation_tokens;
    f->max_tokens = r->max_tokens;
    f->arrival = r->arrival;
    f->queued_ts = q->queued_ts;
    f->scheduled_ts = q->scheduled_ts;
    f->first_token_ts = q->first_token_ts;
    f->has_queued = q->has_queued;
    f->has_scheduled = q->has_scheduled;
    f->has_first_token = q->has_first_token;
    /* Each phase ends where the next begins; one that never ended ends now (t). */
    double sched_end = q->has_scheduled ? q->scheduled_ts : t;
    if (q->has_queued) f->queue = nonneg(sched_end - q->queued_ts);
    if (q->has_scheduled) {
        double first = q->has_first_token ? q->first_token_ts : t;
        double last = q->has_first_token ? q->last_token_ts : t;
        f->prefill = nonneg(first - q->scheduled_ts);
        f->inference = nonneg(last - q->scheduled_ts);
    }
    if (q->has_first_token) f->decode = nonneg(q->last_token_ts - q->first_token_ts);
    if (q->num_generation_tokens > 1)
        f->time_per_output_token = f->decode / (double)(q->num_generation_tokens - 1);

    q->finished = true;
    r->num_finished++;
    if (q->num_generation_tokens > r->max_num_generation_tokens)
        r->max_num_generation_tokens = q->num_generation_tokens;
}

static void group_done(stats *s, req_state *r, stats_iteration *it) {
    it->groups[it->num_groups++] =
        (stats_group){.n = r->n, .max_num_generation_tokens = r->max_num_generation_tokens};
    unlink_request(s, r);
}

static void iteration_reset(stats_iteration *it) {
    it->num_prompt_tokens = it->num_generation_tokens = 0;
    it->num_scheduled_events = it->num_ttft = it->num_itl = it->num_finished = it->num_groups = 0;
}

vllm_status stats_finish_sequence(stats *s, const char *request_id, int32_t index,
                                  vllm_finish_reason reason, double now, stats_iteration *it) {
    iteration_reset(it);
    if (!request_id || reason == VLLM_FINISH_NONE) return VLLM_OK;
    vllm_status rc = iteration_reserve(it, 1);
    if (rc != VLLM_OK) return rc;
    req_state *r = *find_slot(s, request_id, hash_id(request_id));
    if (!r || index < 0 || index >= r->n || r->seqs[index].finished) return VLLM_OK;
    seq_state *q = &r->seqs[index];
    if (!q->seen) seq_first_seen(r, q);
    /* the engine's last word on it: its last token, else its first schedule */
    double t = q->has_first_token ? q->last_token_ts : q->has_scheduled ? q->scheduled_ts
                                                     : q->has_queued   ? q->queued_ts : 0;
    finish_seq(r, q, request_id, index, reason, t, now, it);
    if (r->num_finished == r->n) group_done(s, r, it);
    return VLLM_OK;
}

vllm_status stats_update(stats *s, const vllm_step_output *out, double now, stats_iteration *it) {
    iteration_reset(it);
    if (!out || out->num_outputs <= 0) return VLLM_OK;
    vllm_status rc = iteration_reserve(it, out->num_outputs);
    if (rc != VLLM_OK) return rc;
    double t = out->timestamp;

    for (int32_t k = 0; k < out->num_outputs; k++) {
        const vllm_seq_output *o = &out->outputs[k];
        if (!o->request_id) continue;
        req_state **slot = find_slot(s, o->request_id, hash_id(o->request_id));
        req_state *r = *slot;
        if (!r || o->index < 0 || o->index >= r->n) continue;
        seq_state *q = &r->seqs[o->index];
        if (q->finished) continue;

        if (!q->seen) seq_first_seen(r, q);
        apply_events(r, q, o, it);

        if (o->num_new_tokens > 0) {
            it->num_generation_tokens += o->num_new_tokens;
            q->num_generation_tokens += o->num_new_tokens;
            if (!q->has_first_token) { /* prefill done: the first NEW_TOKENS */
                it->num_prompt_tokens += r->num_prompt_tokens;
                q->ttft = nonneg(now - r->arrival);
                it->ttft[it->num_ttft++] = q->ttft;
                q->first_token_ts = t;
                q->has_first_token = true;
            } else {
                it->itl[it->num_itl++] = nonneg(t - q->last_token_ts);
            }
            q->last_token_ts = t;
        }

        if (o->finish_reason != VLLM_FINISH_NONE) {
            finish_seq(r, q, o->request_id, o->index, o->finish_reason, t, now, it);
            if (r->num_finished == r->n) group_done(s, r, it);
        }
    }
    return VLLM_OK;
}
