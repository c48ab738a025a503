/*
 * scheduler.c - one step's plan and its bookkeeping; see scheduler.h.
 *
 * Queues are intrusive lists of sequences. Under FCFS the waiting queue is in
 * arrival order with preempted sequences pushed to its front; under the
 * priority policy it is kept sorted by (priority, arrival, serial, index), a
 * preempted sequence going back to its place. The running queue is in order
 * of admission (forked siblings join at its tail).
 *
 * All per-step arrays (entries, copies) are sized at create time from
 * max_num_seqs and the KV cache groups; scheduling allocates nothing (a
 * prefix-cache lookup leaves its hits in the sequence's own tables).
 * (Appending committed tokens may grow a sequence's token array, and only
 * when a caller asked for more than its max_tokens' room: seq_reserve.)
 */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/kv_connector.h"

struct scheduler {
    scheduler_config cfg;
    kv_cache_manager *kv;
    list_node waiting, running;
    int32_t num_waiting, num_running; /* sequences in each queue */
    int32_t running_seats;            /* max_num_seqs seats taken (n for unforked seq 0) */
    list_node finished;               /* requests whose sequences all finished */
    seq *news_head, **news_tail;
    scheduler_output out;
    seq **copy_owner;                 /* (max_copies) which sequence each copy belongs to */
    kv_connector *conn;               /* NULL = none */
    int32_t batch_cap;                /* entries per schedule (scheduler_set_batch_cap), 0 = no cap */
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
    /* at most one copy-on-write per sequence and group in a step */
    size_t max_copies = (size_t)cfg->max_num_seqs * (size_t)kv_cache_manager_num_groups(kv);
    s->out.seqs = calloc((size_t)cfg->max_num_seqs, sizeof *s->out.seqs);
    s->out.copies = calloc(max_copies, sizeof *s->out.copies);
    s->copy_owner = calloc(max_copies, sizeof *s->copy_owner);
    if (!s->out.seqs || !s->out.copies || !s->copy_owner) {
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
    free(s);
}

int32_t scheduler_num_running(const scheduler *s) { return s->num_running; }
int32_t scheduler_num_waiting(const scheduler *s) { return s->num_waiting; }
bool scheduler_has_unfinished(const scheduler *s) { return s->num_running + s->num_waiting > 0; }
bool scheduler_has_news(const scheduler *s) { return s->news_head || !list_empty(&s->finished); }
const list_node *scheduler_running(const scheduler *s) { return &s->running; }

int64_t scheduler_num_empty_slots(const scheduler *s) {
    int64_t empty = 0;
    for (const list_node *n = s->running.next; n != &s->running; n = n->next)
        empty += kv_cache_manager_empty_slots(s->kv, list_entry(n, seq, node));
    return empty;
}
const list_node *scheduler_waiting(const scheduler *s) { return &s->waiting; }
void scheduler_set_kv_connector(scheduler *s, kv_connector *c) { s->conn = c; }

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

/* True if q (seq 0 of a prompt_logprobs request) is still owed prompt
 * logprobs: positions prompt_lps_done .. num_prompt - 2 score the prompt
 * token after them. */
static bool wants_prompt_rows(const seq *q) {
    const request *r = q->req;
    return r->params.prompt_logprobs >= 0 && q->index == 0 && q->prompt_lps_done < r->num_prompt_tokens - 1;
}

/* Caps num_new for a sequence owed prompt logprobs so that its prompt rows
 * fit what is left of this step's max_prompt_rows (0: it cannot run now). */
static int32_t cap_prompt_rows(const scheduler *s, const seq *q, int32_t num_new) {
    if (!wants_prompt_rows(q)) return num_new;
    int32_t left = s->cfg.max_prompt_rows - s->out.num_prompt_rows;
    int32_t first = q->num_computed_tokens > q->prompt_lps_done ? q->num_computed_tokens : q->prompt_lps_done;
    /* rows are positions [first, min(end, num_prompt - 1)): end <= first + left keeps them within left */
    int32_t max_end = first + (left > 0 ? left : 0);
    int32_t end = q->num_computed_tokens + num_new;
    if (end > max_end) num_new = max_end - q->num_computed_tokens;
    return num_new > 0 ? num_new : 0;
}

/* Schedules num_new tokens of q: its committed ones not yet computed, then
 * as many of its drafts as fit (the rest are dropped). */
static void add_entry(scheduler *s, seq *q, int32_t num_new) {
    scheduler_output *o = &s->out;
    scheduled_seq *e = &o->seqs[o->num_seqs++];
    int32_t end = q->num_computed_tokens + num_new;
    q->num_drafts = end > q->num_tokens ? end - q->num_tokens : 0;
    bool scored = end >= q->num_tokens;
    *e = (scheduled_seq){
        .seq = q,
        .num_computed = q->num_computed_tokens,
        .num_new_tokens = num_new,
        .num_drafts = q->num_drafts,
        .num_scored = scored ? q->num_drafts + 1 : 0,
        .num_samples = scored ? seq_num_seats(q) : 0,
    };
    if (wants_prompt_rows(q)) {
        int32_t first = q->num_computed_tokens > q->prompt_lps_done ? q->num_computed_tokens : q->prompt_lps_done;
        int32_t last = end < q->req->num_prompt_tokens - 1 ? end : q->req->num_prompt_tokens - 1;
        if (last > first) {
            e->first_prompt_row = first;
            e->num_prompt_rows = last - first;
            o->num_prompt_rows += e->num_prompt_rows;
            add_news(s, q);
        }
    }
    o->num_tokens += num_new;
}

/* Takes q's entry and copies (if any) back out of this step's output. */
static void unschedule(scheduler *s, seq *q, int32_t *budget) {
    scheduler_output *o = &s->out;
    for (int32_t i = 0; i < o->num_seqs; i++)
        if (o->seqs[i].seq == q) {
            *budget += o->seqs[i].num_new_tokens;
            o->num_tokens -= o->seqs[i].num_new_tokens;
            o->num_prompt_rows -= o->seqs[i].num_prompt_rows;
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

/* The running sequence to preempt, or NULL if every one is in flight. */
static seq *pick_victim(scheduler *s) {
    seq *victim = NULL;
    for (list_node *n = s->running.prev; n != &s->running; n = n->prev) {
        seq *q = list_entry(n, seq, node);
        if (q->in_flight) continue;
        if (!victim) victim = q;
        if (!use_priority(s)) break;
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
    q->num_drafts = 0;
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
    vllm_status rc = kv_cache_manager_allocate_slots(s->kv, q, num_new, num_hits, o->copies, &o->num_copies);
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
    int32_t bs = kv_cache_manager_block_size(s->kv);
    block_hash h;
    if (!kv_cache_manager_caching_enabled(s->kv) || o->num_seqs == 0 ||
        !kv_cache_manager_block_hash(s->kv, q, num_hits, &h))
        return false;
    for (int32_t i = 0; i < o->num_seqs; i++) {
        const scheduled_seq *e = &o->seqs[i];
        block_hash g;
        /* e fills block num_hits with committed tokens this step, so it is
         * cached after the step (equal 128-bit hashes are taken as equal
         * blocks here: a collision would only delay q by a step, the lookup
         * itself is exact) */
        if ((e->num_computed + e->num_new_tokens - e->num_drafts) / bs > num_hits && e->num_computed / bs <= num_hits &&
            kv_cache_manager_block_hash(s->kv, e->seq, num_hits, &g) && g.lo == h.lo && g.hi == h.hi)
            return true;
    }
    return false;
}

/* max_loras: true if a sequence of adapter id may join the running ones. */
static bool lora_fits(const scheduler *s, int32_t id) {
    if (id == 0 || s->cfg.max_loras <= 0) return true;
    int32_t seen[64], n = 0;
    for (const list_node *it = s->running.next; it != &s->running; it = it->next) {
        int32_t other = list_entry(it, seq, node)->req->lora_id;
        if (other == 0) continue;
        if (other == id) return true;
        bool dup = false;
        for (int32_t i = 0; i < n && !dup; i++) dup = seen[i] == other;
        if (!dup && n < 64) seen[n++] = other;
    }
    return n < s->cfg.max_loras;
}

const scheduler_output *scheduler_schedule(scheduler *s, double now) {
    scheduler_output *o = &s->out;
    o->num_seqs = o->num_tokens = o->num_scored = o->num_out = o->num_prompt_rows = 0;
    o->num_copies = o->num_preemptions = 0;
    o->prefix_cache_queries = o->prefix_cache_hits = 0;
    o->external_prefix_cache_queries = o->external_prefix_cache_hits = 0;
    int32_t budget = s->cfg.max_num_batched_tokens;

    /* 1. running sequences: decodes (with their drafts) and partial prefills */
    list_node *n = s->running.next;
    while (n != &s->running && budget > 0 && (s->batch_cap == 0 || o->num_seqs < s->batch_cap)) {
        seq *q = list_entry(n, seq, node);
        if (q->in_flight) { /* its next token is not known yet */
            n = n->next;
            continue;
        }
        int32_t num_new = cap_new_tokens(s, q->num_tokens + q->num_drafts - q->num_computed_tokens, budget);
        num_new = cap_prompt_rows(s, q, num_new);
        if (num_new <= 0) {
            n = n->next;
            continue;
        }
        bool preempted_self = false;
        while (allocate(s, q, num_new, 0) != VLLM_OK) {
            int32_t without_drafts = q->num_tokens - q->num_computed_tokens;
            if (num_new > without_drafts) { /* give up the drafts before anyone's blocks */
                num_new = without_drafts;
                continue;
            }
            seq *victim = pick_victim(s);
            if (!victim) { /* the others are in flight: q waits for a later batch */
                preempted_self = true;
                break;
            }
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
    /* a sequence whose adapter would exceed max_loras lets only base-model
     * sequences after it pass (cursor), so its adapter gets a turn once a
     * running one drains */
    bool lora_blocked = false;
    for (list_node *cur = s->waiting.next, *next; o->num_preemptions == 0 && cur != &s->waiting && budget > 0;
         cur = next) {
        next = cur->next;
        seq *q = list_entry(cur, seq, node);
        if (lora_blocked && q->req->lora_id != 0) continue;
        int32_t seats = seq_num_seats(q);
        if (s->running_seats + seats > s->cfg.max_num_seqs) break;
        if (s->batch_cap > 0 && o->num_seqs >= s->batch_cap) break;
        if (!lora_fits(s, q->req->lora_id)) {
            lora_blocked = true;
            continue;
        }
        bool prompt_rows = wants_prompt_rows(q);
        int32_t num_hits = prompt_rows ? 0 : kv_cache_manager_find_longest_cache_hit(s->kv, q);
        if (!prompt_rows && prefix_in_flight(s, q, num_hits)) break;
        int32_t computed = kv_cache_manager_hit_tokens(s->kv, q, num_hits);
        /* the connector's blocks follow the hits: allocated with the new tokens, counted as computed */
        int32_t external = s->conn && !prompt_rows ? kv_connector_get_num_new_matched_tokens(s->conn, q, num_hits) : 0;
        int32_t num_new = cap_new_tokens(s, q->num_tokens - computed - external, budget);
        if (prompt_rows) { /* no hits: computed and num_computed_tokens are 0 */
            num_new = cap_prompt_rows(s, q, num_new);
            if (num_new <= 0) break;
        }
        if (allocate(s, q, external + num_new, num_hits) != VLLM_OK) break;
        if (external > 0 && kv_connector_update_state_after_alloc(s->conn, q, num_hits,
                                                                  external / kv_cache_manager_block_size(s->kv)) !=
                                VLLM_OK) {
            kv_cache_manager_free_blocks(s->kv, q); /* out of memory: admit it later */
            break;
        }
        /* a lookup counts once, when its sequence is admitted */
        if (kv_cache_manager_caching_enabled(s->kv)) {
            o->prefix_cache_queries += q->num_tokens;
            o->prefix_cache_hits += computed;
        }
        if (s->conn && !prompt_rows) {
            o->external_prefix_cache_queries += q->num_tokens;
            o->external_prefix_cache_hits += external;
        }
        computed += external;
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
        scheduled_seq *e = &o->seqs[i];
        e->out_offset = o->num_out;
        e->num_out = e->num_samples > 1 ? e->num_samples : e->num_scored;
        o->num_out += e->num_out;
        o->num_scored += e->num_scored;
    }
    return o;
}

seq *scheduler_entry_seq(const scheduled_seq *e, int32_t k) {
    return e->num_samples > 1 ? &e->seq->req->seqs[k] : e->seq;
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
    q->num_drafts = 0;
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

void scheduler_recompute_seq(scheduler *s, seq *q, double now) {
    if (q->status != SEQ_STATUS_RUNNING) return;
    list_remove(&q->node);
    s->num_running--;
    s->running_seats -= seq_num_seats(q);
    kv_cache_manager_free_blocks(s->kv, q);
    q->num_computed_tokens = 0;
    q->num_drafts = 0;
    if (q->num_tokens == q->req->num_prompt_tokens) { /* nothing reported yet counted the void step's hits */
        q->scheduled_once = false;
        q->num_cached_tokens = 0;
    }
    q->status = SEQ_STATUS_PREEMPTED;
    if (use_priority(s)) waiting_insert_sorted(s, q);
    else list_push_front(&s->waiting, &q->node);
    s->num_waiting++;
    add_event(s, q, VLLM_EVENT_PREEMPTED, now);
}

/* Appends one committed token; *why = the stop rule it triggers (NONE to go on). */
static vllm_status append_and_check(scheduler *s, seq *q, int32_t token, vllm_finish_reason *why) {
    vllm_status rc = seq_append_token(q, token);
    if (rc != VLLM_OK) return rc;
    add_news(s, q);
    *why = seq_check_stop(q, s->cfg.max_model_len, s->cfg.eos_ids, s->cfg.num_eos, &q->stop_token_id);
    return VLLM_OK;
}

/* Seq 0 of an n > 1 request sampled its first n tokens: split off the rest. */
static vllm_status fork_siblings(scheduler *s, seq *q0, const int32_t *tokens) {
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
        vllm_finish_reason why;
        vllm_status rc = append_and_check(s, c, tokens[k], &why);
        if (rc != VLLM_OK) return rc;
        if (why != VLLM_FINISH_NONE) scheduler_finish_seq(s, c, why);
    }
    return VLLM_OK;
}

/* Commits n tokens of an entry: appends them while no stop rule fires, then
 * sets what is computed. Of the positions fed this step, those holding
 * committed tokens have valid K/V: every committed token but the last is
 * the token that was fed at its position (the prompt, or an accepted
 * draft), and the last one was sampled, not fed. Blocks past the committed
 * tokens held only rejected drafts and go back to the pool. */
static vllm_status commit(scheduler *s, const scheduled_seq *e, const int32_t *tokens, int32_t n) {
    seq *q = e->seq;
    int32_t fed_end = e->num_computed + e->num_new_tokens, bs = kv_cache_manager_block_size(s->kv);
    vllm_finish_reason why = VLLM_FINISH_NONE;
    for (int32_t j = 0; j < n && why == VLLM_FINISH_NONE; j++) {
        vllm_status rc = append_and_check(s, q, tokens[j], &why);
        if (rc != VLLM_OK) return rc;
    }
    int32_t valid = e->num_scored > 0 ? q->num_tokens - 1 : fed_end;
    q->num_computed_tokens = fed_end < valid ? fed_end : valid;
    q->num_drafts = 0;
    kv_cache_manager_cache_blocks(s->kv, q);
    kv_cache_manager_trim(s->kv, q, (q->num_tokens + bs - 1) / bs);
    if (why != VLLM_FINISH_NONE) scheduler_finish_seq(s, q, why);
    return VLLM_OK;
}

void scheduler_set_batch_cap(scheduler *s, int32_t cap) { s->batch_cap = cap > 0 ? cap : 0; }

vllm_status scheduler_update(scheduler *s, const int32_t *committed, const int32_t *num_committed, double now) {
    return scheduler_update_output(s, &s->out, committed, num_committed, now);
}

vllm_status scheduler_update_output(scheduler *s, const scheduler_output *o, const int32_t *committed,
                                    const int32_t *num_committed, double now) {
    (void)now;
    vllm_status rc = VLLM_OK;
    for (int32_t i = 0; i < o->num_seqs && rc == VLLM_OK; i++) {
        const scheduled_seq *e = &o->seqs[i];
        seq *q = e->seq;
        if (q->status != SEQ_STATUS_RUNNING) continue;
        const int32_t *tok = committed + e->out_offset;
        int32_t n = e->num_out > 0 ? num_committed[i] : 0;
        if (n > e->num_out) n = e->num_out;
        if (e->num_samples > 1) { /* fork: one token each for seq 0 and its siblings */
            q->num_computed_tokens += e->num_new_tokens;
            kv_cache_manager_cache_blocks(s->kv, q);
            add_news(s, q); /* seq 0's output goes before its siblings' */
            if ((rc = fork_siblings(s, q, tok)) != VLLM_OK) break;
            vllm_finish_reason why;
            if ((rc = append_and_check(s, q, tok[0], &why)) != VLLM_OK) break;
            if (why != VLLM_FINISH_NONE) scheduler_finish_seq(s, q, why);
            continue;
        }
        rc = commit(s, e, tok, n);
    }
    return rc;
}
