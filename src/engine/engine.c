/*
 * engine.c - the engine core: scheduler + model runner + sampler behind the
 * public vllm_engine_* API (include/vllm/vllm.h).
 *
 * One step:
 *   1. free the requests whose finish the previous step reported (outputs
 *      borrowed their ids and token arrays until now);
 *   2. scheduler_schedule: which sequences run, how many tokens each;
 *   3. copy-on-write block copies, then one runner_forward over the
 *      flattened batch (token ids, positions, slot mapping, block tables),
 *      logits only for the sequences that sample;
 *   4. sampler_sample per sampled token, each sequence with its own
 *      generator (an n > 1 request's first tokens all come from one row);
 *   5. scheduler_update: computed counts, prefix caching, tokens, stops;
 *   6. the step output: every sequence with news, plus scheduler stats.
 *
 * Memory: everything a step touches (batch arrays, logits, sampler scratch,
 * logprob slots) is sized at create time from max_num_batched_tokens,
 * max_num_seqs and max_model_len. The output array grows (doubling) only
 * when more sequences have news in one step than ever before.
 *
 * KV pool size: --num-gpu-blocks-override, else --kv-cache-memory-bytes,
 * else 40% of MemAvailable capped at what max_num_seqs sequences of
 * max_model_len tokens could ever use (logged). It must hold at least one
 * sequence of max_model_len tokens, as vLLM requires.
 *
 * Threading: not thread-safe; one thread drives an engine (the server runs
 * it on its engine thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "model/runner.h"
#include "sample/sampler.h"
#include "vllm/vllm.h"

#define DEFAULT_MAX_NUM_SEQS 256
#define DEFAULT_MAX_NUM_BATCHED_TOKENS 4096 /* vLLM's CPU default for offline use */
#define DEFAULT_KV_SHARE 0.40               /* of MemAvailable when nothing is given */

struct vllm_engine {
    vllm_engine_args args;           /* strings owned (copies) */
    vllm_engine_info info;
    model *model;
    runner *runner;
    kv_cache_manager *kv;
    scheduler *sched;
    bool dead;
    int32_t vocab;
    int32_t max_blocks_per_seq;
    generation_defaults gen;
    uint64_t next_serial;

    /* request-id map: chained through request.map_next */
    request **buckets;
    size_t num_buckets, num_in_map;
    list_node reported;              /* finished requests reported by the last step */
    vllm_kv_cache_report kv_report;  /* accumulated by build_output */

    /* step scratch (sized at create) */
    int32_t *token_ids, *positions, *query_start_loc, *seq_lens, *block_tables, *logits_indices;
    int64_t *slot_mapping;
    float *logits;                   /* (max_num_seqs, vocab) */
    float *row;                      /* (vocab) a logits row copy for forks */
    void *sample_scratch;
    int32_t *sampled;                /* (max_num_seqs) */
    vllm_token_logprobs *lps;        /* (max_num_seqs) per sample slot */
    int32_t *top_ids;                /* (max_num_seqs, VLLM_MAX_LOGPROBS) */
    float *top_lps;
    sample_logprob *top_tmp;         /* (VLLM_MAX_LOGPROBS) */

    /* step output */
    vllm_step_output out;
    vllm_seq_output *outs;
    vllm_event *events;
    int32_t cap_outs, cap_events;
};

double vllm_monotonic_time(void) { return clock_now(); }

void vllm_engine_args_init(vllm_engine_args *a) {
    memset(a, 0, sizeof *a);
    a->block_size = 16;
    a->enable_prefix_caching = true;
    a->max_num_seqs = DEFAULT_MAX_NUM_SEQS;
    a->scheduling_policy = VLLM_SCHEDULING_FCFS;
    a->generation_config = "auto";
}

/* ---- request-id map ----------------------------------------------------- */

static size_t id_bucket(const vllm_engine *e, const char *id) {
    return (size_t)XXH3_64bits(id, strlen(id)) & (e->num_buckets - 1);
}

static request *map_find(const vllm_engine *e, const char *id) {
    for (request *r = e->buckets[id_bucket(e, id)]; r; r = r->map_next)
        if (!strcmp(r->id, id)) return r;
    return NULL;
}

static vllm_status map_insert(vllm_engine *e, request *r) {
    if (e->num_in_map + 1 > e->num_buckets) {
        size_t nb = e->num_buckets * 2;
        request **b = calloc(nb, sizeof *b);
        if (!b) return vllm_error(VLLM_ERR_NOMEM, "engine: out of memory for the request map");
        for (size_t i = 0; i < e->num_buckets; i++)
            for (request *x = e->buckets[i], *next; x; x = next) {
                next = x->map_next;
                size_t k = (size_t)XXH3_64bits(x->id, strlen(x->id)) & (nb - 1);
                x->map_next = b[k];
                b[k] = x;
            }
        free(e->buckets);
        e->buckets = b;
        e->num_buckets = nb;
    }
    request **head = &e->buckets[id_bucket(e, r->id)];
    r->map_next = *head;
    *head = r;
    r->in_map = true;
    e->num_in_map++;
    return VLLM_OK;
}

static void map_remove(vllm_engine *e, request *r) {
    if (!r->in_map) return;
    request **link = &e->buckets[id_bucket(e, r->id)];
    while (*link != r) link = &(*link)->map_next;
    *link = r->map_next;
    r->map_next = NULL;
    r->in_map = false;
    e->num_in_map--;
}

/* ---- create / free ------------------------------------------------------ */

static int64_t mem_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
}

static char *dup_or_null(const char *s, vllm_status *rc) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *rc = vllm_error(VLLM_ERR_NOMEM, "engine: out of memory");
    return d;
}

static vllm_status check_args(const vllm_engine_args *a) {
    if (!a->model || !a->model[0]) return vllm_error(VLLM_ERR_INVALID, "engine args: model is not set");
    if (a->block_size < 1 || a->block_size > 1024)
        return vllm_error(VLLM_ERR_INVALID, "block_size %d: must be in 1..1024", a->block_size);
    if (a->max_model_len < 0)
        return vllm_error(VLLM_ERR_INVALID, "max_model_len %d must be >= 0", a->max_model_len);
    if (a->max_num_seqs < 1)
        return vllm_error(VLLM_ERR_INVALID, "max_num_seqs %d must be >= 1", a->max_num_seqs);
    if (a->max_num_batched_tokens < 0)
        return vllm_error(VLLM_ERR_INVALID, "max_num_batched_tokens %d must be >= 0",
                          a->max_num_batched_tokens);
    if (a->long_prefill_token_threshold < 0)
        return vllm_error(VLLM_ERR_INVALID, "long_prefill_token_threshold %d must be >= 0",
                          a->long_prefill_token_threshold);
    if (a->kv_cache_memory_bytes < 0)
        return vllm_error(VLLM_ERR_INVALID, "kv_cache_memory_bytes %lld must be >= 0",
                          (long long)a->kv_cache_memory_bytes);
    if (a->num_gpu_blocks_override < 0)
        return vllm_error(VLLM_ERR_INVALID, "num_gpu_blocks_override %d must be >= 0",
                          a->num_gpu_blocks_override);
    if (a->scheduling_policy != VLLM_SCHEDULING_FCFS && a->scheduling_policy != VLLM_SCHEDULING_PRIORITY)
        return vllm_error(VLLM_ERR_INVALID, "scheduling_policy %d: must be fcfs or priority",
                          (int)a->scheduling_policy);
    if (a->num_threads < 0)
        return vllm_error(VLLM_ERR_INVALID, "num_threads %d must be >= 0", a->num_threads);
    const char *g = a->generation_config;
    if (g && strcmp(g, "auto") && strcmp(g, "vllm"))
        return vllm_error(VLLM_ERR_UNSUPPORTED,
                          "generation_config '%s': only 'auto' (the model directory) and 'vllm' "
                          "are supported",
                          g);
    return VLLM_OK;
}

/* Blocks for the KV pool (see the file comment). */
static vllm_status size_kv_pool(vllm_engine *e, int32_t *num_blocks) {
    const vllm_engine_args *a = &e->args;
    int32_t bs = a->block_size, L = e->info.max_model_len;
    size_t per_block = runner_kv_bytes_per_block(&e->model->config, bs);
    int64_t blocks_per_seq = (L + bs - 1) / bs;
    int64_t n;
    if (a->num_gpu_blocks_override > 0) {
        n = a->num_gpu_blocks_override;
    } else if (a->kv_cache_memory_bytes > 0) {
        n = a->kv_cache_memory_bytes / (int64_t)per_block;
    } else {
        int64_t avail = mem_available_bytes();
        int64_t budget = (int64_t)((double)avail * DEFAULT_KV_SHARE);
        int64_t most = (int64_t)a->max_num_seqs * blocks_per_seq * (int64_t)per_block;
        if (budget <= 0 || budget > most) budget = most;
        n = budget / (int64_t)per_block;
        log_info("KV cache budget: %.2f GiB (%.0f%% of %.2f GiB available, capped at %.2f GiB "
                 "for %d sequences of %d tokens); set --kv-cache-memory-bytes to change it",
                 (double)budget / 1073741824.0, DEFAULT_KV_SHARE * 100, (double)avail / 1073741824.0,
                 (double)most / 1073741824.0, a->max_num_seqs, L);
    }
    if (n > INT32_MAX / bs) n = INT32_MAX / bs;
    if (n < blocks_per_seq)
        return vllm_error(VLLM_ERR_INVALID,
                          "The model's max seq len (%d) is larger than the maximum number of tokens "
                          "that can be stored in KV cache (%lld). Try increasing "
                          "kv_cache_memory_bytes / num_gpu_blocks_override or decreasing "
                          "max_model_len.",
                          L, (long long)n * bs);
    *num_blocks = (int32_t)n;
    e->info.kv_cache_memory_bytes = n * (int64_t)per_block;
    return VLLM_OK;
}

static void *alloc_array(size_t n, size_t size, vllm_status *rc) {
    void *p = calloc(n ? n : 1, size);
    if (!p && *rc == VLLM_OK) *rc = vllm_error(VLLM_ERR_NOMEM, "engine: out of memory");
    return p;
}

vllm_status vllm_engine_create(const vllm_engine_args *args, vllm_engine **out) {
    *out = NULL;
    vllm_status rc = check_args(args);
    if (rc != VLLM_OK) return rc;
    vllm_engine *e = calloc(1, sizeof *e);
    if (!e) return vllm_error(VLLM_ERR_NOMEM, "engine: out of memory");
    e->args = *args;
    e->args.model = dup_or_null(args->model, &rc);
    e->args.tokenizer = dup_or_null(args->tokenizer, &rc);
    e->args.generation_config = dup_or_null(args->generation_config ? args->generation_config : "auto", &rc);
    list_init(&e->reported);
    if (rc != VLLM_OK) goto fail;
    if ((rc = model_load(args->model, &e->model)) != VLLM_OK) goto fail;

    const model_config *mc = &e->model->config;
    vllm_engine_info *info = &e->info;
    e->vocab = mc->vocab_size;
    e->gen = e->model->gen;
    int32_t L = args->max_model_len ? args->max_model_len : mc->max_position_embeddings;
    if (L > mc->max_position_embeddings) {
        rc = vllm_error(VLLM_ERR_INVALID,
                        "max_model_len %d is greater than the model's max_position_embeddings %d",
                        L, mc->max_position_embeddings);
        goto fail;
    }
    if (mc->sliding_window > 0 && L > mc->sliding_window) {
        log_warn("max_model_len %d capped to the model's sliding_window %d (sliding-window "
                 "attention is not implemented)", L, mc->sliding_window);
        L = mc->sliding_window;
    }
    info->max_model_len = L;
    info->block_size = args->block_size;
    info->enable_prefix_caching = args->enable_prefix_caching;
    info->max_num_seqs = args->max_num_seqs;
    info->max_num_batched_tokens =
        args->max_num_batched_tokens ? args->max_num_batched_tokens : DEFAULT_MAX_NUM_BATCHED_TOKENS;
    if (!args->max_num_batched_tokens && info->max_num_batched_tokens < info->max_num_seqs)
        info->max_num_batched_tokens = info->max_num_seqs;
    info->long_prefill_token_threshold = args->long_prefill_token_threshold;
    info->scheduling_policy = args->scheduling_policy;
    info->vocab_size = mc->vocab_size;
    info->bos_token_id = mc->bos_token_id;
    info->num_eos_token_ids = mc->num_eos_token_ids;
    memcpy(info->eos_token_ids, mc->eos_token_ids, sizeof info->eos_token_ids);
    e->max_blocks_per_seq = (L + 1 + args->block_size - 1) / args->block_size;

    int32_t num_blocks = 0;
    if ((rc = size_kv_pool(e, &num_blocks)) != VLLM_OK) goto fail;
    info->num_gpu_blocks = num_blocks;

    runner_config rcfg = {.num_blocks = num_blocks,
                          .block_size = args->block_size,
                          .max_num_batched_tokens = info->max_num_batched_tokens,
                          .max_num_seqs = info->max_num_seqs,
                          .num_threads = args->num_threads};
    if ((rc = runner_create(e->model, &rcfg, &e->runner)) != VLLM_OK) goto fail;
    info->num_threads = args->num_threads > 0 ? args->num_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    if ((rc = kv_cache_manager_create(num_blocks, args->block_size, args->enable_prefix_caching,
                                      &e->kv)) != VLLM_OK)
        goto fail;
    scheduler_config sc = {.max_num_seqs = info->max_num_seqs,
                           .max_num_batched_tokens = info->max_num_batched_tokens,
                           .long_prefill_token_threshold = info->long_prefill_token_threshold,
                           .policy = args->scheduling_policy,
                           .max_model_len = L,
                           .num_eos = mc->num_eos_token_ids};
    memcpy(sc.eos_ids, mc->eos_token_ids, sizeof sc.eos_ids);
    if ((rc = scheduler_create(&sc, e->kv, &e->sched)) != VLLM_OK) goto fail;

    size_t T = (size_t)info->max_num_batched_tokens, S = (size_t)info->max_num_seqs;
    e->token_ids = alloc_array(T, sizeof(int32_t), &rc);
    e->positions = alloc_array(T, sizeof(int32_t), &rc);
    e->slot_mapping = alloc_array(T, sizeof(int64_t), &rc);
    e->query_start_loc = alloc_array(S + 1, sizeof(int32_t), &rc);
    e->seq_lens = alloc_array(S, sizeof(int32_t), &rc);
    e->block_tables = alloc_array(S * (size_t)e->max_blocks_per_seq, sizeof(int32_t), &rc);
    e->logits_indices = alloc_array(S, sizeof(int32_t), &rc);
    e->logits = alloc_array(S * (size_t)e->vocab, sizeof(float), &rc);
    e->row = alloc_array((size_t)e->vocab, sizeof(float), &rc);
    e->sample_scratch = alloc_array(sampler_scratch_bytes(e->vocab), 1, &rc);
    e->sampled = alloc_array(S, sizeof(int32_t), &rc);
    e->lps = alloc_array(S, sizeof *e->lps, &rc);
    e->top_ids = alloc_array(S * VLLM_MAX_LOGPROBS, sizeof(int32_t), &rc);
    e->top_lps = alloc_array(S * VLLM_MAX_LOGPROBS, sizeof(float), &rc);
    e->top_tmp = alloc_array(VLLM_MAX_LOGPROBS, sizeof *e->top_tmp, &rc);
    e->num_buckets = 64;
    e->buckets = alloc_array(e->num_buckets, sizeof *e->buckets, &rc);
    if (rc != VLLM_OK) goto fail;

    log_info("KV cache: %d blocks of %d tokens = %lld tokens (%.2f GiB); maximum concurrency "
             "for %d tokens per request: %.2fx",
             num_blocks, args->block_size, (long long)num_blocks * args->block_size,
             (double)info->kv_cache_memory_bytes / 1073741824.0, L,
             (double)num_blocks * args->block_size / L);
    log_info("scheduler: max_num_seqs %d, max_num_batched_tokens %d, policy %s, prefix caching %s, "
             "%d threads",
             info->max_num_seqs, info->max_num_batched_tokens,
             args->scheduling_policy == VLLM_SCHEDULING_PRIORITY ? "priority" : "fcfs",
             args->enable_prefix_caching ? "on" : "off", info->num_threads);
    *out = e;
    return VLLM_OK;
fail:
    vllm_engine_free(e);
    return rc;
}

static void free_requests_in(list_node *head) {
    while (!list_empty(head)) {
        list_node *n = head->next;
        list_remove(n);
        request_free(list_entry(n, request, node));
    }
}

void vllm_engine_free(vllm_engine *e) {
    if (!e) return;
    /* every live request is in the map; finished ones are on lists */
    if (e->buckets)
        for (size_t i = 0; i < e->num_buckets; i++)
            for (request *r = e->buckets[i], *next; r; r = next) {
                next = r->map_next;
                if (e->sched) scheduler_abort_request(e->sched, r);
                list_remove(&r->node);
                request_free(r);
            }
    if (e->sched)
        for (request *r; (r = scheduler_pop_finished(e->sched));)
            if (!r->in_map) request_free(r);
    free_requests_in(&e->reported);
    scheduler_free(e->sched);
    kv_cache_manager_free(e->kv);
    runner_free(e->runner);
    model_free(e->model);
    free((char *)e->args.model);
    free((char *)e->args.tokenizer);
    free((char *)e->args.generation_config);
    free(e->token_ids);
    free(e->positions);
    free(e->slot_mapping);
    free(e->query_start_loc);
    free(e->seq_lens);
    free(e->block_tables);
    free(e->logits_indices);
    free(e->logits);
    free(e->row);
    free(e->sample_scratch);
    free(e->sampled);
    free(e->lps);
    free(e->top_ids);
    free(e->top_lps);
    free(e->top_tmp);
    free(e->buckets);
    free(e->outs);
    free(e->events);
    free(e);
}

void vllm_engine_get_info(const vllm_engine *e, vllm_engine_info *info) { *info = e->info; }

void vllm_engine_default_sampling_params(const vllm_engine *e, vllm_sampling_params *sp) {
    vllm_sampling_params_init(sp);
    if (!strcmp(e->args.generation_config, "vllm")) return;
    const generation_defaults *g = &e->gen;
    if (g->has_temperature) sp->temperature = g->temperature;
    if (g->has_top_p) sp->top_p = g->top_p;
    if (g->has_top_k) sp->top_k = g->top_k;
    if (g->has_min_p) sp->min_p = g->min_p;
    if (g->has_repetition_penalty) sp->repetition_penalty = g->repetition_penalty;
    if (g->max_new_tokens > 0) sp->max_tokens = g->max_new_tokens;
}

void vllm_engine_get_kv_cache_report(const vllm_engine *e, vllm_kv_cache_report *report) {
    *report = e->kv_report;
    report->num_blocks = e->info.num_gpu_blocks;
    report->block_size = e->info.block_size;
}

void vllm_engine_reset_kv_cache_report(vllm_engine *e) { e->kv_report = (vllm_kv_cache_report){0}; }

void vllm_engine_reset_prefix_cache(vllm_engine *e) { block_pool_reset_cache(e->kv->pool); }

/* ---- requests ----------------------------------------------------------- */

vllm_status vllm_engine_add_request(vllm_engine *e, const char *request_id,
                                    const int32_t *prompt_ids, int32_t num_prompt_ids,
                                    const vllm_sampling_params *sp, const vllm_request_opts *opts) {
    if (e->dead) return vllm_error(VLLM_ERR_INVALID, "engine is dead after a failed step");
    if (!request_id || !request_id[0])
        return vllm_error(VLLM_ERR_INVALID, "request_id must be a non-empty string");
    if (map_find(e, request_id))
        return vllm_error(VLLM_ERR_INVALID, "request_id '%s' is already in use", request_id);
    int32_t L = e->info.max_model_len;
    if (!prompt_ids || num_prompt_ids < 1)
        return vllm_error(VLLM_ERR_INVALID, "request '%s': the prompt cannot be empty", request_id);
    if (num_prompt_ids > L)
        return vllm_error(VLLM_ERR_INVALID,
                          "request '%s': the decoder prompt (length %d) is longer than the maximum "
                          "model length of %d",
                          request_id, num_prompt_ids, L);
    for (int32_t i = 0; i < num_prompt_ids; i++)
        if (prompt_ids[i] < 0 || prompt_ids[i] >= e->vocab)
            return vllm_error(VLLM_ERR_INVALID, "request '%s': token id %d (prompt position %d) is out of vocabulary (size %d)",
                              request_id, prompt_ids[i], i, e->vocab);
    vllm_status rc;
    if (!sp) return vllm_error(VLLM_ERR_INVALID, "request '%s': sampling params are NULL", request_id);
    if ((rc = vllm_sampling_params_validate(sp)) != VLLM_OK ||
        (rc = sampler_check_vocab(sp, e->vocab)) != VLLM_OK) {
        vllm_error_prefix("request '%s'", request_id);
        return rc;
    }
    if (sp->n > e->info.max_num_seqs)
        return vllm_error(VLLM_ERR_INVALID, "request '%s': n (%d) is larger than max_num_seqs (%d)",
                          request_id, sp->n, e->info.max_num_seqs);
    double now = vllm_monotonic_time();
    vllm_request_opts o = {0};
    if (opts) o = *opts;
    if (o.arrival_time == 0) o.arrival_time = now;
    request *r;
    if ((rc = request_create(request_id, prompt_ids, num_prompt_ids, sp, &o, L,
                             e->info.block_size, e->args.seed, e->next_serial, &r)) != VLLM_OK)
        return rc;
    if ((rc = map_insert(e, r)) != VLLM_OK) {
        request_free(r);
        return rc;
    }
    e->next_serial++;
    scheduler_add_request(e->sched, r, now);
    return VLLM_OK;
}

vllm_status vllm_engine_abort_request(vllm_engine *e, const char *request_id) {
    request *r = request_id ? map_find(e, request_id) : NULL;
    if (!r) return vllm_error(VLLM_ERR_NOT_FOUND, "request '%s' is unknown or finished",
                              request_id ? request_id : "(null)");
    map_remove(e, r);
    scheduler_abort_request(e->sched, r);
    return VLLM_OK;
}

vllm_status vllm_engine_stop_sequence(vllm_engine *e, const char *request_id, int32_t index) {
    request *r = request_id ? map_find(e, request_id) : NULL;
    if (!r) return vllm_error(VLLM_ERR_NOT_FOUND, "request '%s' is unknown or finished",
                              request_id ? request_id : "(null)");
    if (index < 0 || index >= r->n)
        return vllm_error(VLLM_ERR_INVALID, "request '%s': sequence index %d outside 0..%d",
                          request_id, index, r->n - 1);
    scheduler_finish_seq(e->sched, &r->seqs[index], VLLM_FINISH_STOP);
    return VLLM_OK;
}

bool vllm_engine_has_unfinished(const vllm_engine *e) {
    return scheduler_has_unfinished(e->sched) || scheduler_has_news(e->sched);
}

/* ---- one step ----------------------------------------------------------- */

/* Forward pass and sampling for a schedule; fills e->sampled and logprob slots. */
static vllm_status execute(vllm_engine *e, const scheduler_output *so) {
    vllm_status rc;
    for (int32_t i = 0; i < so->num_copies; i++)
        if ((rc = runner_copy_block(e->runner, so->copies[i].src, so->copies[i].dst)) != VLLM_OK)
            return rc;
    int32_t bs = e->info.block_size, mb = e->max_blocks_per_seq, T = 0, nl = 0;
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        const seq *q = en->seq;
        e->query_start_loc[i] = T;
        for (int32_t p = en->num_computed; p < en->num_computed + en->num_new_tokens; p++, T++) {
            e->token_ids[T] = q->tokens[p];
            e->positions[T] = p;
            e->slot_mapping[T] = (int64_t)q->block_ids[p / bs] * bs + p % bs;
        }
        e->seq_lens[i] = en->num_computed + en->num_new_tokens;
        memcpy(e->block_tables + (size_t)i * (size_t)mb, q->block_ids,
               (size_t)q->num_blocks * sizeof *q->block_ids);
        for (int32_t k = en->num_logits; k > 0; k--) e->logits_indices[nl++] = T - k;
    }
    e->query_start_loc[so->num_seqs] = T;
    runner_batch b = {.num_tokens = T,
                      .token_ids = e->token_ids,
                      .positions = e->positions,
                      .slot_mapping = e->slot_mapping,
                      .num_seqs = so->num_seqs,
                      .query_start_loc = e->query_start_loc,
                      .seq_lens = e->seq_lens,
                      .block_tables = e->block_tables,
                      .max_blocks_per_seq = mb,
                      .num_logits = nl,
                      .logits_indices = e->logits_indices};
    if ((rc = runner_forward(e->runner, &b, e->logits)) != VLLM_OK) return rc;

    const int32_t *eos = e->info.eos_token_ids;
    int32_t neos = e->info.num_eos_token_ids, row = 0;
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        if (en->num_logits == 0) continue;
        float *logits = e->logits + (size_t)row++ * (size_t)e->vocab;
        for (int32_t k = 0; k < en->num_samples; k++) {
            /* a fork samples every sibling from seq 0's one row */
            seq *q = en->num_samples > 1 ? &en->seq->req->seqs[k] : en->seq;
            const request *r = q->req;
            float *x = logits;
            if (en->num_samples > 1) {
                memcpy(e->row, logits, (size_t)e->vocab * sizeof *logits);
                x = e->row;
            }
            sample_history h = {.prompt_ids = q->tokens,
                                .num_prompt = r->num_prompt_tokens,
                                .output_ids = q->tokens + r->num_prompt_tokens,
                                .num_output = seq_num_output_tokens(q)};
            sample_result res = {.top = e->top_tmp};
            if ((rc = sampler_sample(&r->params, &h, eos, neos, x, e->vocab, &q->rng,
                                     e->sample_scratch, &res)) != VLLM_OK) {
                vllm_error_prefix("request '%s'", r->id);
                return rc;
            }
            int32_t slot = en->sample_offset + k;
            e->sampled[slot] = res.token_id;
            q->sample_slot = slot;
            int32_t *ids = e->top_ids + (size_t)slot * VLLM_MAX_LOGPROBS;
            float *lps = e->top_lps + (size_t)slot * VLLM_MAX_LOGPROBS;
            for (int32_t t = 0; t < res.num_top; t++) {
                ids[t] = res.top[t].token_id;
                lps[t] = res.top[t].logprob;
            }
            e->lps[slot] = (vllm_token_logprobs){.token_id = res.token_id,
                                                 .logprob = res.logprob,
                                                 .rank = res.rank,
                                                 .num_top = res.num_top,
                                                 .top_ids = ids,
                                                 .top_logprobs = lps};
        }
    }
    return VLLM_OK;
}

static vllm_status grow(void **p, int32_t *cap, int32_t need, size_t size) {
    if (need <= *cap) return VLLM_OK;
    int32_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q) return vllm_error(VLLM_ERR_NOMEM, "engine: out of memory for step outputs");
    *p = q;
    *cap = n;
    return VLLM_OK;
}

/* Turns the scheduler's news into the step output and hands finished
 * requests to the reported list. */
static vllm_status build_output(vllm_engine *e, const scheduler_output *so) {
    int32_t nouts = 0, nevents = 0;
    seq *news = scheduler_take_news(e->sched);
    for (seq *q = news; q; q = q->news_next) {
        nouts++;
        nevents += q->num_events;
    }
    vllm_status rc;
    if ((rc = grow((void **)&e->outs, &e->cap_outs, nouts, sizeof *e->outs)) != VLLM_OK ||
        (rc = grow((void **)&e->events, &e->cap_events, nevents, sizeof *e->events)) != VLLM_OK) {
        for (seq *q = news, *next; q; q = next) { /* drop the news rather than keep stale pointers */
            next = q->news_next;
            seq_clear_news(q);
        }
        return rc;
    }
    int32_t i = 0, ev = 0;
    for (seq *q = news, *next; q; q = next) {
        next = q->news_next;
        const request *r = q->req;
        vllm_seq_output *o = &e->outs[i++];
        int32_t nnew = q->num_new_output;
        memcpy(e->events + ev, q->events, (size_t)q->num_events * sizeof *q->events);
        *o = (vllm_seq_output){
            .request_id = r->id,
            .index = q->index,
            .num_new_tokens = nnew,
            .new_token_ids = q->tokens + q->num_tokens - nnew,
            .new_logprobs = nnew > 0 && r->params.logprobs >= 0 && q->sample_slot >= 0
                                ? &e->lps[q->sample_slot]
                                : NULL,
            .finish_reason = q->status == SEQ_STATUS_FINISHED ? q->finish_reason : VLLM_FINISH_NONE,
            .stop_token_id = q->stop_token_id,
            .num_prompt_tokens = r->num_prompt_tokens,
            .num_cached_tokens = q->num_cached_tokens,
            .num_events = q->num_events,
            .events = q->num_events ? e->events + ev : NULL,
        };
        ev += q->num_events;
        q->sample_slot = -1;
        seq_clear_news(q);
    }
    for (request *r; (r = scheduler_pop_finished(e->sched));) {
        map_remove(e, r);
        list_push_back(&e->reported, &r->node);
    }
    vllm_step_output *out = &e->out;
    out->timestamp = vllm_monotonic_time();
    out->num_outputs = nouts;
    out->outputs = e->outs;
    block_pool *pool = e->kv->pool;
    out->stats = (vllm_scheduler_stats){
        .num_running = scheduler_num_running(e->sched),
        .num_waiting = scheduler_num_waiting(e->sched),
        .kv_cache_usage = block_pool_usage(pool),
        .prefix_cache_queries = so ? so->prefix_cache_queries : 0,
        .prefix_cache_hits = so ? so->prefix_cache_hits : 0,
        .num_preemptions = so ? so->num_preemptions : 0,
        .num_scheduled_tokens = so ? so->num_tokens : 0,
        .num_scheduled_seqs = so ? so->num_seqs : 0,
        .num_blocks_total = block_pool_num_blocks(pool),
        .num_blocks_free = block_pool_num_free(pool),
        .num_kv_slots_empty = scheduler_num_empty_slots(e->sched),
    };
    int32_t used_blocks = out->stats.num_blocks_total - out->stats.num_blocks_free;
    out->stats.num_kv_slots_used = (int64_t)used_blocks * e->info.block_size;
    if (so && so->num_seqs > 0) {
        vllm_kv_cache_report *k = &e->kv_report;
        k->num_steps++;
        k->sum_used_slots += out->stats.num_kv_slots_used;
        k->sum_empty_slots += out->stats.num_kv_slots_empty;
        if (used_blocks > k->peak_used_blocks) {
            k->peak_used_blocks = used_blocks;
            k->peak_empty_slots = out->stats.num_kv_slots_empty;
        }
    }
    return VLLM_OK;
}

vllm_status vllm_engine_step(vllm_engine *e, const vllm_step_output **out) {
    *out = NULL;
    if (e->dead) return vllm_error(VLLM_ERR_INVALID, "engine is dead after a failed step");
    free_requests_in(&e->reported);
    const scheduler_output *so = NULL;
    if (scheduler_has_unfinished(e->sched)) {
        double now = vllm_monotonic_time();
        so = scheduler_schedule(e->sched, now);
        if (so->num_seqs > 0) {
            vllm_status rc = execute(e, so);
            if (rc != VLLM_OK) {
                e->dead = true;
                log_error("engine step failed: %s", vllm_errmsg());
                return rc;
            }
        }
        scheduler_update(e->sched, e->sampled, now);
    }
    vllm_status rc = build_output(e, so);
    if (rc != VLLM_OK) return rc;
    *out = &e->out;
    return VLLM_OK;
}

/* ---- LLM.generate ------------------------------------------------------- */

void vllm_request_results_free(vllm_request_result *results, int32_t num_prompts) {
    if (!results) return;
    for (int32_t i = 0; i < num_prompts; i++) {
        if (!results[i].seqs) continue;
        for (int32_t k = 0; k < results[i].n; k++) {
            free(results[i].seqs[k].token_ids);
            free(results[i].seqs[k].logprobs);
        }
        free(results[i].seqs);
    }
    free(results);
}

vllm_status vllm_engine_generate(vllm_engine *e, int32_t num_prompts,
                                 const int32_t *const *prompt_ids, const int32_t *num_prompt_ids,
                                 const vllm_sampling_params *sp, const vllm_request_opts *opts,
                                 vllm_request_result **results) {
    *results = NULL;
    if (vllm_engine_has_unfinished(e))
        return vllm_error(VLLM_ERR_INVALID, "generate: the engine has unfinished requests");
    if (num_prompts < 0) return vllm_error(VLLM_ERR_INVALID, "generate: num_prompts %d", num_prompts);
    vllm_status rc = VLLM_OK;
    vllm_request_result *res = alloc_array((size_t)num_prompts, sizeof *res, &rc);
    if (!res) return rc;
    char id[32];
    int32_t added = 0;
    for (int32_t i = 0; i < num_prompts && rc == VLLM_OK; i++) {
        vllm_request_result *x = &res[i];
        x->n = sp[i].n > 0 ? sp[i].n : 1;
        x->num_prompt_tokens = num_prompt_ids[i];
        x->seqs = alloc_array((size_t)x->n, sizeof *x->seqs, &rc);
        int32_t cap = sp[i].max_tokens > 0 ? sp[i].max_tokens : e->info.max_model_len;
        for (int32_t k = 0; k < x->n && rc == VLLM_OK; k++) {
            x->seqs[k].token_ids = alloc_array((size_t)cap, sizeof(int32_t), &rc);
            if (sp[i].logprobs >= 0) x->seqs[k].logprobs = alloc_array((size_t)cap, sizeof(float), &rc);
            x->seqs[k].stop_token_id = -1;
        }
        snprintf(id, sizeof id, "gen-%d", i);
        if (rc == VLLM_OK &&
            (rc = vllm_engine_add_request(e, id, prompt_ids[i], num_prompt_ids[i], &sp[i],
                                          opts ? &opts[i] : NULL)) == VLLM_OK)
            added++;
    }
    while (rc == VLLM_OK && vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        if ((rc = vllm_engine_step(e, &so)) != VLLM_OK) break;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            vllm_request_result *x = &res[atoi(o->request_id + 4)];
            vllm_sequence_result *s = &x->seqs[o->index];
            for (int32_t t = 0; t < o->num_new_tokens; t++) {
                s->token_ids[s->num_tokens] = o->new_token_ids[t];
                if (s->logprobs) s->logprobs[s->num_tokens] = o->new_logprobs ? o->new_logprobs[t].logprob : 0;
                s->num_tokens++;
            }
            x->num_cached_tokens = o->num_cached_tokens;
            if (o->finish_reason != VLLM_FINISH_NONE) {
                s->finish_reason = o->finish_reason;
                s->stop_token_id = o->stop_token_id;
            }
        }
    }
    if (rc != VLLM_OK) {
        for (int32_t i = 0; i < added; i++) {
            snprintf(id, sizeof id, "gen-%d", i);
            vllm_engine_abort_request(e, id);
        }
        const vllm_step_output *so; /* flush the aborts' outputs; keep the first error */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vllm_errmsg());
        while (!e->dead && vllm_engine_has_unfinished(e) && vllm_engine_step(e, &so) == VLLM_OK) {}
        vllm_error(rc, "%s", msg);
        vllm_request_results_free(res, num_prompts);
        return rc;
    }
    *results = res;
    return VLLM_OK;
}
