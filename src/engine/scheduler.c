/*
 * scheduler.c - one step's plan and its bookkeeping; see scheduler.h.
 *
 * Queues are intrusive lists of sequences. Under FCFS the waiting queue is in
 * arrival order with preempted sequences pushed to its front; under the
 * priority policy it is kept sorted by (priority, arrival, serial, index), a
 * preempted sequence going back to its place. The running queue is in order
 * of admission (forked siblings join at its tail).
 *
 * All per-step arrays (entries, copies, hit scratch) are sized at create
 * time from max_num_seqs and max_model_len; scheduling allocates nothing.
 */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct scheduler {
    scheduler_config cfg;
    kv_cache_manager *kv;
    list_node waiting, running;
    int32_t num_waiting, num_running; /* sequences in each queue */
    int32_t running_seats;            /* max_num_seqs seats taken (n for unforked seq 0) */
    list_node finished;               /* requests whose sequences all finished */
    seq *news_head, **news_tail;
    scheduler_output out;
    seq **copy_owner;                 /* (max_num_seqs) which sequence each copy belongs to */
    int32_t *hits;                    /* (max_blocks_per_seq) prefix-cache hit scratch */
};

vllm_status scheduler_create(const scheduler_config *cfg, kv_cache_manager *kv, scheduler **out) {
    *out = NULL;
    if (cfg->max_num_seqs < 1)
        return vllm_error(VLLM_ERR_INVALID, "max_num_seqs %d must be >= 1", cfg->max_num_seqs);
    if (cfg->max_num_batched_tokens < cfg->max_num_seqs)
        return vllm_error(VLLM_ERR_INVALID,
                          "max_num_batched_tokens (%d) must be greater than or equal to "
                          "max_num_seqs (%d)",
                          cfg->max_num_batched_tokens, cfg->max_num_seqs);
    if (cfg->max_model_len < 1)
        return vllm_error(VLLM_ERR_INVALID, "max_model_len %d must be >= 1", cfg->max_model_len);
    if (cfg->long_prefill_token_threshold < 0)
        return vllm_error(VLLM_ERR_INVALID, "long_prefill_token_threshold %d must be >= 0",
                          cfg->long_prefill_token_threshold);
    if (cfg->num_eos < 0 || cfg->num_eos > SCHEDULER_MAX_EOS)
        return vllm_error(VLLM_ERR_INVALID, "%d EOS ids (at most %d)", cfg->num_eos,
                          SCHEDULER_MAX_EOS);
    scheduler *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "scheduler: out of memory");
    s->cfg = *cfg;
    s->kv = kv;
    list_init(&s->waiting);
    list_init(&s->running);
    list_init(&s->finished);
    s->news_tail = &s->news_head;
    int32_t max_blocks = (cfg->max_model_len + 1 + kv->block_size - 1) / kv->block_size;
    s->out.seqs = calloc((size_t)cfg->max_num_seqs, sizeof *s->out.seqs);
    s->out.copies = calloc((size_t)cfg->max_num_seqs, sizeof *s->out.copies);
    s->copy_owner = calloc((size_t)cfg->max_num_seqs, sizeof *s->copy_owner);
    s->hits = calloc((size_t)max_blocks, sizeof *s->hits);
    if (!s->out.seqs || !s->out.copies || !s->copy_owner || !s->hits) {
        scheduler_free(s);
        return vllm_error(VLLM_ERR_NOMEM, "scheduler: out of memory");
    }
    *out = s;
    return VLLM_OK;
}

void scheduler_free(scheduler *s) {
    if (!s) return;
    free(s->out.seqs);
    free(s->out.copies);
    free(s->copy_owner);
    free(s->hits);
    free(s);
}

int32_t scheduler_num_running(const scheduler *s) { return s->num_running; }
int32_t scheduler_num_waiting(const scheduler *s) { return s->num_waiting; }
bool scheduler_has_unfinished(const scheduler *s) { return s->num_running + s->num_waiting > 0; }
bool scheduler_has_news(const scheduler *s) { return s->news_head || !list_empty(&s->finished); }
const list_node *scheduler_running(const scheduler *s) { return &s->running; }

int64_t scheduler_num_empty_slots(const scheduler *s) {
    int64_t empty = 0;
    for (const list_node *n = s->running.next; n != &s->running; n = n->next) {
        const seq *q = list_entry(n, seq, node);
        int64_t slots = (int64_t)q->num_blocks * s->kv->block_size;
        if (slots > q->num_computed_tokens) empty += slots - q->num_computed_tokens;
    }
    return empty;
}
const list_node *scheduler_waiting(const scheduler *s) { return &s->waiting; }

static void add_news(scheduler *s, seq *q) {
    if (q->in_news) return;
    q->in_news = true;
    q->news_next = NULL;
    *s->news_tail = q;
    s->news_tail = &q->news_next;
}

static void add_event(scheduler *s, seq *q, vllm_event_type type, double now) {
    if (q->num_events == SEQ_MAX_EVENTS) { /* nobody took the news: keep the latest */
        memmove(q->events, q->events + 1, (SEQ_MAX_EVENTS - 1) * sizeof *q->events);
        q->num_events--;
    }
    q->events[q->num_events++] = (vllm_event){type, now};
    add_news(s, q);
}

seq *scheduler_take_news(scheduler *s) {
    seq *head = s->news_head;
    s->news_head = NULL;
    s->news_tail = &s->news_head;
    return head;
}

void seq_clear_news(seq *q) {
    q->in_news = false;
    q->news_next = NULL;
    q->num_events = 0;
    q->num_new_output = 0;
}

request *scheduler_pop_finished(scheduler *s) {
    if (list_empty(&s->finished)) return NULL;
    list_node *n = s->finished.next;
    list_remove(n);
    return list_entry(n, request, node);
}

static bool use_priority(const scheduler *s) { return s->cfg.policy == VLLM_SCHEDULING_PRIORITY; }

/* Priority policy: insert q after the last waiting sequence that goes first. */
static void waiting_insert_sorted(scheduler *s, seq *q) {
    list_node *pos = s->waiting.prev;
    while (pos != &s->waiting && seq_compare(q, list_entry(pos, seq, node), true) < 0)
        pos = pos->prev;
    list_insert_before(pos->next, &q->node);
}

void scheduler_add_request(scheduler *s, request *r, double now) {
    seq *q = &r->seqs[0];
    q->status = SEQ_STATUS_WAITING;
    if (use_priority(s)) waiting_insert_sorted(s, q);
    else list_push_back(&s->waiting, &q->node);
    s->num_waiting++;
    add_event(s, q, VLLM_EVENT_QUEUED, now);
}

/* ---- scheduling ------------------------------------------------------- */

static void add_entry(scheduler *s, seq *q, int32_t num_new) {
    scheduler_output *o = &s->out;
    scheduled_seq *e = &o->seqs[o->num_seqs++];
    bool last = q->num_computed_tokens + num_new == q->num_tokens;
    *e = (scheduled_seq){
        .seq = q,
        .num_computed = q->num_computed_tokens,
        .num_new_tokens = num_new,
        .num_logits = last ? 1 : 0,
        .num_samples = last ? seq_num_seats(q) : 0,
    };
    o->num_tokens += num_new;
}

/* Takes q's entry and copies (if any) back out of this step's output. */
static void unschedule(scheduler *s, seq *q, int32_t *budget) {
    scheduler_output *o = &s->out;
    for (int32_t i = 0; i < o->num_seqs; i++)
        if (o->seqs[i].seq == q) {
            *budget += o->seqs[i].num_new_tokens;
            o->num_tokens -= o->seqs[i].num_new_tokens;
            memmove(&o->seqs[i], &o->seqs[i + 1], (size_t)(o->num_seqs - i - 1) * sizeof *o->seqs);
            o->num_seqs--;
            break;
        }
    int32_t k = 0;
    for (int32_t i = 0; i < o->num_copies; i++)
        if (s->copy_owner[i] != q) {
            o->copies[k] = o->copies[i];
            s->copy_owner[k++] = s->copy_owner[i];
        }
    o->num_copies = k;
}

static seq *pick_victim(scheduler *s) {
    seq *victim = list_entry(s->running.prev, seq, node);
    if (use_priority(s))
        for (list_node *n = s->running.next; n != &s->running; n = n->next) {
            seq *q = list_entry(n, seq, node);
            if (seq_compare(q, victim, true) > 0) victim = q;
        }
    return victim;
}

static void preempt(scheduler *s, seq *q, int32_t *budget, double now) {
    unschedule(s, q, budget);
    list_remove(&q->node);
    s->num_running--;
    s->running_seats -= seq_num_seats(q);
    kv_cache_manager_free_blocks(s->kv, q);
    q->num_computed_tokens = 0;
    q->status = SEQ_STATUS_PREEMPTED;
    if (use_priority(s)) waiting_insert_sorted(s, q);
    else list_push_front(&s->waiting, &q->node);
    s->num_waiting++;
    s->out.num_preemptions++;
    add_event(s, q, VLLM_EVENT_PREEMPTED, now);
}

static int32_t cap_new_tokens(const scheduler *s, int32_t num_new, int32_t budget) {
    int32_t thr = s->cfg.long_prefill_token_threshold;
    if (thr > 0 && num_new > thr) num_new = thr;
    return num_new < budget ? num_new : budget;
}

/* allocate_slots, recording which sequence a copy-on-write belongs to. */
static vllm_status allocate(scheduler *s, seq *q, int32_t num_new, int32_t num_hits) {
    scheduler_output *o = &s->out;
    int32_t before = o->num_copies;
    vllm_status rc = kv_cache_manager_allocate_slots(s->kv, q, num_new, s->hits, num_hits,
                                                     o->copies, &o->num_copies);
    for (int32_t i = before; i < o->num_copies; i++) s->copy_owner[i] = q;
    return rc;
}

/* True if the block q would compute first after its num_hits cache hits is
 * one that a sequence already in this step's batch is computing (same
 * chained hash, so the same tokens from position 0): q waits a step and then
 * finds it in the prefix cache instead of computing it again. This is what
 * makes a burst of requests with one shared prompt compute that prompt once
 * (vLLM admits them together and each computes it). Like a sequence that
 * cannot get blocks, it stops the loop for this step, so FCFS order holds. */
static bool prefix_in_flight(scheduler *s, seq *q, int32_t num_hits) {
    const scheduler_output *o = &s->out;
    block_hash h;
    if (!s->kv->enable_caching || o->num_seqs == 0 || !kv_cache_manager_block_hash(s->kv, q, num_hits, &h))
        return false;
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const scheduled_seq *e = &o->seqs[i];
        block_hash g;
        /* e fills block num_hits this step, so it is cached after the step
         * (equal 128-bit hashes are taken as equal blocks here: a collision
         * would only delay q by a step, the lookup itself is exact) */
        if ((e->num_computed + e->num_new_tokens) / s->kv->block_size > num_hits &&
            e->num_computed / s->kv->block_size <= num_hits &&
            kv_cache_manager_block_hash(s->kv, e->seq, num_hits, &g) && g.lo == h.lo && g.hi == h.hi)
            return true;
    }
    return false;
}

const scheduler_output *scheduler_schedule(scheduler *s, double now) {
    scheduler_output *o = &s->out;
    o->num_seqs = o->num_tokens = o->num_logits = o->num_samples = 0;
    o->num_copies = o->num_preemptions = 0;
    int64_t queries0 = s->kv->num_queries, hits0 = s->kv->num_hits;
    int32_t budget = s->cfg.max_num_batched_tokens;

    /* 1. running sequences: decodes and partial prefills */
    list_node *n = s->running.next;
    while (n != &s->running && budget > 0) {
        seq *q = list_entry(n, seq, node);
        int32_t num_new = cap_new_tokens(s, q->num_tokens - q->num_computed_tokens, budget);
        if (num_new <= 0) {
            n = n->next;
            continue;
        }
        bool preempted_self = false;
        while (allocate(s, q, num_new, 0) != VLLM_OK) {
            seq *victim = pick_victim(s);
            preempt(s, victim, &budget, now);
            if (victim == q) {
                preempted_self = true;
                break;
            }
        }
        if (preempted_self) break;
        add_entry(s, q, num_new);
        budget -= num_new;
        n = n->next;
    }

    /* 2. waiting sequences, unless this step had to preempt */
    while (o->num_preemptions == 0 && !list_empty(&s->waiting) && budget > 0) {
        seq *q = list_entry(s->waiting.next, seq, node);
        int32_t seats = seq_num_seats(q);
        if (s->running_seats + seats > s->cfg.max_num_seqs) break;
        int64_t queries = s->kv->num_queries, hits = s->kv->num_hits;
        int32_t num_hits = kv_cache_manager_find_longest_cache_hit(s->kv, q, s->hits);
        if (prefix_in_flight(s, q, num_hits)) {
            s->kv->num_queries = queries;
            s->kv->num_hits = hits;
            break;
        }
        int32_t computed = kv_cache_manager_hit_tokens(s->kv, q, num_hits);
        int32_t num_new = cap_new_tokens(s, q->num_tokens - computed, budget);
        if (allocate(s, q, num_new, num_hits) != VLLM_OK) {
            /* count a lookup once, when the sequence is admitted */
            s->kv->num_queries = queries;
            s->kv->num_hits = hits;
            break;
        }
        list_remove(&q->node);
        s->num_waiting--;
        list_push_back(&s->running, &q->node);
        s->num_running++;
        s->running_seats += seats;
        q->status = SEQ_STATUS_RUNNING;
        q->num_computed_tokens = computed;
        if (!q->scheduled_once) {
            q->scheduled_once = true;
            q->num_cached_tokens = computed;
        }
        add_event(s, q, VLLM_EVENT_SCHEDULED, now);
        add_entry(s, q, num_new);
        budget -= num_new;
    }

    for (int32_t i = 0; i < o->num_seqs; i++) {
        o->seqs[i].sample_offset = o->num_samples;
        o->num_samples += o->seqs[i].num_samples;
        o->num_logits += o->seqs[i].num_logits;
    }
    o->prefix_cache_queries = s->kv->num_queries - queries0;
    o->prefix_cache_hits = s->kv->num_hits - hits0;
    return o;
}

/* ---- after the forward ------------------------------------------------ */

void scheduler_finish_seq(scheduler *s, seq *q, vllm_finish_reason reason) {
    if (q->status == SEQ_STATUS_FINISHED) return;
    request *r = q->req;
    switch (q->status) {
    case SEQ_STATUS_RUNNING:
        list_remove(&q->node);
        s->num_running--;
        s->running_seats -= seq_num_seats(q);
        break;
    case SEQ_STATUS_WAITING:
    case SEQ_STATUS_PREEMPTED:
        list_remove(&q->node);
        s->num_waiting--;
        break;
    default: break;
    }
    kv_cache_manager_free_blocks(s->kv, q);
    q->status = SEQ_STATUS_FINISHED;
    q->finish_reason = reason;
    add_news(s, q);
    r->num_unfinished--;
    if (q->index == 0 && !r->forked) { /* siblings that never split off end with it */
        r->forked = true;
        for (int32_t i = 1; i < r->n; i++) {
            seq *c = &r->seqs[i];
            c->status = SEQ_STATUS_FINISHED;
            c->finish_reason = reason;
            add_news(s, c);
            r->num_unfinished--;
        }
    }
    if (r->num_unfinished == 0) list_push_back(&s->finished, &r->node);
}

void scheduler_abort_request(scheduler *s, request *r) {
    for (int32_t i = 0; i < r->n; i++) scheduler_finish_seq(s, &r->seqs[i], VLLM_FINISH_ABORT);
}

static void append_and_check(scheduler *s, seq *q, int32_t token) {
    seq_append_token(q, token);
    add_news(s, q);
    int32_t stop_id;
    vllm_finish_reason why =
        seq_check_stop(q, s->cfg.max_model_len, s->cfg.eos_ids, s->cfg.num_eos, &stop_id);
    if (why != VLLM_FINISH_NONE) {
        q->stop_token_id = stop_id;
        scheduler_finish_seq(s, q, why);
    }
}

/* Seq 0 of an n > 1 request sampled its first n tokens: split off the rest. */
static void fork_siblings(scheduler *s, seq *q0, const int32_t *tokens) {
    request *r = q0->req;
    r->forked = true;
    s->running_seats -= r->n - 1; /* seq 0 keeps one seat; each sibling takes its own */
    for (int32_t k = 1; k < r->n; k++) {
        seq *c = &r->seqs[k];
        if (c->status == SEQ_STATUS_FINISHED) continue; /* stopped by the front end already */
        kv_cache_manager_fork(s->kv, q0, c);
        c->num_computed_tokens = q0->num_computed_tokens;
        c->num_cached_tokens = q0->num_cached_tokens;
        c->scheduled_once = true;
        c->status = SEQ_STATUS_RUNNING;
        list_push_back(&s->running, &c->node);
        s->num_running++;
        s->running_seats++;
        append_and_check(s, c, tokens[k]);
    }
}

void scheduler_update(scheduler *s, const int32_t *sampled, double now) {
    (void)now;
    const scheduler_output *o = &s->out;
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const scheduled_seq *e = &o->seqs[i];
        seq *q = e->seq;
        if (q->status != SEQ_STATUS_RUNNING) continue;
        q->num_computed_tokens += e->num_new_tokens;
        kv_cache_manager_cache_blocks(s->kv, q);
        if (e->num_samples == 0) continue;
        const int32_t *tok = sampled + e->sample_offset;
        if (!q->req->forked) {
            add_news(s, q); /* seq 0's output goes before its siblings' */
            fork_siblings(s, q, tok);
        }
        append_and_check(s, q, tok[0]);
    }
}
