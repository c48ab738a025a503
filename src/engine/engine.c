/*
 * engine.c - the engine core: scheduler, executor and sampler behind the
 * public vllm_engine_* API (include/vllm/vllm.h).
 *
 * One step:
 *   1. free the requests whose finish the previous step reported (outputs
 *      borrowed their ids and token arrays until now);
 *   2. scheduler_schedule: which sequences run, how many tokens each (their
 *      drafts included), which rows to score, which blocks to copy;
 *   3. the step batch: each scheduled sequence flattened by the step builder
 *      (model/step_batch.h), then executor_execute: block copies, one forward,
 *      the logits of the scored rows;
 *   4. one sampler_sample_batch (or a speculative verifier) over every
 *      sequence that samples: its rows, generator, history and drafts give
 *      its committed tokens (an n > 1 request's first tokens all come from
 *      seq 0's one row);
 *   5. scheduler_update: commit the tokens, computed counts, prefix caching,
 *      stops, rejected drafts' blocks back;
 *   6. drafts for the next step, if a proposer is set (spec/spec.h);
 *   7. the step output: every sequence with news, plus scheduler stats.
 *
 * Memory: everything a step touches (the step builder, logits, sampler
 * scratch, committed-token and logprob slots) is sized at create time from
 * max_num_batched_tokens, max_num_seqs, max_model_len and the number of
 * speculative tokens. The output arrays grow (buf_grow) only when more
 * sequences have news in one step than ever before.
 *
 * KV pool size: --num-gpu-blocks-override, else --kv-cache-memory-bytes,
 * else 40% of MemAvailable capped at what max_num_seqs sequences of
 * max_model_len tokens could ever use (logged); a block's bytes depend on
 * --kv-cache-dtype (kernels/kv_dtype.h; "auto" resolved from the model by
 * engine_kv_cache_dtype_auto below), so a 2-byte type fits twice the blocks of
 * F32 in the same budget and FP8 four times. It must hold at least one
 * sequence of max_model_len tokens, as vLLM requires. A model with
 * sliding-window layers (Gemma 3) has several KV cache groups
 * (model/kv_layout.h): a block then holds fewer layers, and a sequence
 * holds, per sliding group, only the blocks of its window and one step's
 * tokens (kv_layout_blocks_per_seq).
 *
 * Threading: not thread-safe; one thread drives an engine (the server runs
 * it on its engine thread). The executor's worker threads, idle between
 * forwards, also sample a large batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/map.h"
#include "base/overlap.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "engine/grammar_cache.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/kv_connector.h"
#include "engine/scheduler.h"
#include "model/kv_layout.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/step_batch.h"
#include "sample/sampler.h"
#include "spec/draft_model.h"
#include "spec/ngram.h"
#include "spec/spec.h"
#include "vllm/vllm.h"

#define DEFAULT_MAX_NUM_SEQS 256
#define DEFAULT_MAX_NUM_BATCHED_TOKENS 4096 /* vLLM's CPU default for offline use */
#define DEFAULT_KV_SHARE 0.40               /* of MemAvailable when nothing is given */
#define DEFAULT_COMPILE_TIMEOUT 5.0         /* seconds: structured_outputs_compile_timeout */
#define FSM_IDLE_WAIT 0.05                  /* seconds a step waits when only grammars are pending */

/* One scored entry's grammar masks: rows for its token and each draft. */
typedef struct mask_job {
    st_matcher *m;
    uint32_t *rows;                  /* (num_drafts + 1, mask_words) */
    const int32_t *drafts;
    int32_t num_drafts;
} mask_job;

/* Pipeline parallelism: one batch in flight (see step_pipelined). */
typedef struct flight {
    scheduler_output so;             /* a copy of its schedule (seqs, copies: arrays of its own) */
    int32_t *scored_start;           /* (max_num_seqs + 1) its entries' first scored rows */
} flight;

struct vllm_engine {
    vllm_engine_args args;           /* strings owned (copies); kv_cache_dtype static */
    vllm_engine_info info;
    kv_dtype kv_type;                /* what the KV pool stores (args.kv_cache_dtype resolved) */
    model *model;
    executor *exec;
    kv_cache_manager *kv;
    scheduler *sched;
    sampler *sampler;
    step_builder *builder;
    bool dead;
    int32_t vocab;
    int32_t max_blocks_per_seq;
    generation_defaults gen;
    uint64_t next_serial;
    spec_config spec;                /* num_speculative_tokens 0: off */
    ngram *ngram;                    /* the proposer of args.speculative_config "ngram", or NULL */
    draft_model *draft;              /* the proposer of "draft_model", or NULL */
    lora_table *loras;               /* args.enable_lora: the adapters (model/lora.h), else NULL */
    kv_connector *conn;              /* args.kv_transfer_config / kv_offloading_size, or NULL */
    bool conn_layerwise;             /* the executor runs its layer hooks (loads overlap the forward) */
    list_node kv_waiting;            /* requests WAITING_FOR_REMOTE_KVS, by request.node */
    int32_t num_kv_waiting;

    map requests;                    /* id -> unfinished request (request.by_id) */
    list_node reported;              /* finished requests reported by the last step */
    vllm_kv_cache_report kv_report;  /* accumulated by build_output */
    kv_layout *layout;               /* the model's KV cache groups (owned) */

    /* structured outputs (see "Structured outputs" above vllm_engine_add_request) */
    grammar_cache *grammars;         /* NULL until the first constrained request */
    list_node fsm_waiting;           /* requests WAITING_FOR_FSM, by request.node */
    int32_t num_fsm_waiting;
    int32_t mask_words;              /* (vocab + 31) / 32: the sampler's mask row */
    uint32_t *masks;                 /* (max_scored, mask_words), allocated with the grammar cache */
    uint32_t *mask_tmp;              /* (num_threads + 1, st words) when the tokenizer's mask is wider */
    int32_t mask_tmp_words;
    int32_t *prior_tokens;           /* (max_num_seqs) each sampled seq's num_tokens before the update */
    int32_t num_sampled;             /* sampled seqs this step (e->sampled_seqs) */
    struct mask_job *mask_jobs;      /* (max_num_seqs) this step's grammar masks to fill */
    overlap *mask_side;              /* fills them while the forward runs (NULL: after it) */

    /* step scratch (sized at create, or by engine_set_spec) */
    int32_t max_scored;              /* rows of logits per step for sampling */
    int32_t max_prompt_rows;         /* rows of prompt logprobs per step (engine_max_prompt_rows) */
    float *logits;                   /* (max_scored + max_prompt_rows, vocab) */
    vllm_token_logprobs *plps;       /* (max_prompt_rows) this step's prompt logprobs */
    int32_t *prompt_top_ids;         /* (max_prompt_rows, VLLM_MAX_LOGPROBS) */
    float *prompt_top_lps;
    sample_logprob *prompt_top;      /* (VLLM_MAX_LOGPROBS) scratch */
    int32_t max_out;                 /* committed-token slots per step */
    int32_t *committed;              /* (max_out) the scheduler's out slots */
    int32_t *num_committed;          /* (max_num_seqs) per entry */
    sample_seq *samples;             /* (max_num_seqs) */
    seq **sampled_seqs;              /* (max_num_seqs) whose each sample_seq is */
    sample_result *results;          /* (max_out) */
    sample_logprob *tops;            /* (max_out, VLLM_MAX_LOGPROBS) the sampler's top lists */
    vllm_token_logprobs *lps;        /* (max_out) the same, as the public API has them */
    int32_t *top_ids;                /* (max_out, VLLM_MAX_LOGPROBS) */
    float *top_lps;
    int32_t *drafts;                 /* (max_num_seqs, num_speculative_tokens) the proposer's answers */
    spec_request *spec_reqs;         /* (max_num_seqs) this step's asks */
    int32_t *spec_per_pos;           /* (num_speculative_tokens) this step's accepted drafts by position */
    int32_t spec_num_drafts, spec_num_draft_tokens, spec_num_accepted; /* this step */

    /* pipeline parallelism: batches in flight, a ring oldest at flight_head */
    flight *flights;                 /* (max_flights) when the executor takes more than one */
    int32_t max_flights, flight_head, num_flights;
    list_node deferred;              /* finished requests a batch in flight still names (by request.node) */

    /* step output */
    vllm_step_output out;
    vllm_seq_output *outs;
    vllm_event *events;
    size_t cap_outs, cap_events;
};

double vllm_monotonic_time(void) { return clock_now(); }

void vllm_engine_args_init(vllm_engine_args *a) {
    memset(a, 0, sizeof *a);
    a->block_size = 16;
    a->enable_prefix_caching = true;
    a->max_num_seqs = DEFAULT_MAX_NUM_SEQS;
    a->scheduling_policy = VLLM_SCHEDULING_FCFS;
    a->generation_config = "auto";
    a->kv_cache_dtype = "auto";
    a->dtype = "auto";
    a->max_loras = 1;
    a->max_lora_rank = 16;
}

/* The --kv-cache-dtype values, as static strings (vllm_engine_info keeps one). */
static const char *const kv_cache_dtype_values[] = {"auto",     "bfloat16", "float16", "float32",
                                                    "fp8",      "fp8_e4m3", "fp8_e5m2"};

static const char *kv_cache_dtype_value(const char *name) {
    if (!name) return kv_cache_dtype_values[0];
    for (size_t i = 0; i < sizeof kv_cache_dtype_values / sizeof *kv_cache_dtype_values; i++)
        if (!strcmp(name, kv_cache_dtype_values[i])) return kv_cache_dtype_values[i];
    return NULL;
}

/* --dtype: 1 when BF16 weights take the BF16 compute path (activations
 * rounded to BF16), 0 when activations stay FP32, -1 for an unknown name.
 * auto: the model's own dtype (torch_dtype; a GGUF file's is its q_proj
 * weights' type), so only a BF16 model computes in BF16. */
int engine_dtype_bf16(const char *name, dtype model_dtype) {
    if (!name || !strcmp(name, "auto")) return model_dtype == DTYPE_BF16;
    if (!strcmp(name, "bfloat16")) return 1;
    if (!strcmp(name, "float32") || !strcmp(name, "float") || !strcmp(name, "float16") || !strcmp(name, "half"))
        return 0;
    return -1;
}

/* What "auto" stores: vLLM's model dtype on a CPU (ModelConfig's
 * _resolve_auto_dtype: a float32 checkpoint is downcast to the platform's
 * first dtype, bfloat16 on x86; bfloat16 and float16 ones keep theirs);
 * for a GGUF file, whose weights say nothing about an activation dtype,
 * llama.cpp's default cache type, float16; Gemma 3 never float16 (vLLM
 * refuses it for the gemma3 model types: numerical instability). Nothing
 * vLLM-like picks float32 or an FP8 type by itself. */
kv_dtype engine_kv_cache_dtype_auto(const model_config *c, bool gguf) {
    if (c->arch == MODEL_ARCH_GEMMA3) return KV_DTYPE_BF16;
    if (gguf) return KV_DTYPE_F16;
    return c->torch_dtype == DTYPE_F16 ? KV_DTYPE_F16 : KV_DTYPE_BF16;
}

static request *find_request(const vllm_engine *e, const char *id) {
    map_node *n = map_find(&e->requests, id);
    return n ? map_entry(n, request, by_id) : NULL;
}

static void forget_request(vllm_engine *e, request *r) {
    if (!r->in_map) return;
    map_remove(&e->requests, &r->by_id);
    r->in_map = false;
    if (e->spec.proposer.release)
        for (int32_t i = 0; i < r->n; i++) e->spec.proposer.release(e->spec.proposer.ud, r->id, i);
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

/* vLLM's SpeculativeConfig checks and defaults (ngram: prompt_lookup_min
 * and _max default to each other, or both to 5); out gets the result. */
static vllm_status resolve_spec_config(const vllm_speculative_config *in, vllm_speculative_config *out) {
    *out = (vllm_speculative_config){0};
    if (in->method == VLLM_SPEC_METHOD_NONE) return VLLM_OK;
    if (in->method != VLLM_SPEC_METHOD_NGRAM && in->method != VLLM_SPEC_METHOD_DRAFT_MODEL)
        return vllm_error(VLLM_ERR_INVALID, "speculative_config: method %d is not supported (only 'ngram' "
                          "and 'draft_model')", (int)in->method);
    vllm_speculative_config c = *in;
    if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > VLLM_MAX_SPEC_TOKENS)
        return vllm_error(VLLM_ERR_INVALID, "speculative_config: num_speculative_tokens=%d must be in 1..%d",
                          c.num_speculative_tokens, VLLM_MAX_SPEC_TOKENS);
    if (c.method == VLLM_SPEC_METHOD_DRAFT_MODEL) {
        if (!c.model[0]) return vllm_error(VLLM_ERR_INVALID, "speculative_config: method 'draft_model' needs a model");
        if (c.disable_by_batch_size < 0 || c.disable_by_batch_size == 1)
            return vllm_error(VLLM_ERR_INVALID, "speculative_config: disable_by_batch_size=%d: expect the batch "
                              "size threshold of disabling speculative decoding to be > 1", c.disable_by_batch_size);
        c.prompt_lookup_min = c.prompt_lookup_max = 0;
        *out = c;
        return VLLM_OK;
    }
    if (c.prompt_lookup_min < 0 || c.prompt_lookup_max < 0)
        return vllm_error(VLLM_ERR_INVALID, "speculative_config: prompt_lookup_min=%d and prompt_lookup_max=%d "
                          "must be > 0", c.prompt_lookup_min, c.prompt_lookup_max);
    if (!c.prompt_lookup_min && !c.prompt_lookup_max) c.prompt_lookup_min = c.prompt_lookup_max = 5;
    else if (!c.prompt_lookup_min) c.prompt_lookup_min = c.prompt_lookup_max;
    else if (!c.prompt_lookup_max) c.prompt_lookup_max = c.prompt_lookup_min;
    if (c.prompt_lookup_min > c.prompt_lookup_max)
        return vllm_error(VLLM_ERR_INVALID, "speculative_config: prompt_lookup_min=%d must be <= "
                          "prompt_lookup_max=%d", c.prompt_lookup_min, c.prompt_lookup_max);
    if (c.disable_by_batch_size < 0 || c.disable_by_batch_size == 1)
        return vllm_error(VLLM_ERR_INVALID, "speculative_config: disable_by_batch_size=%d: expect the batch "
                          "size threshold of disabling speculative decoding to be > 1", c.disable_by_batch_size);
    *out = c;
    return VLLM_OK;
}

/* Says where an FP8 cache's scales come from, or that the checkpoint's
 * scales go unused (vLLM applies them only to an FP8 cache). */
static void log_kv_scales(const model *m, kv_dtype t) {
    int32_t n = 0, L = m->config.num_hidden_layers;
    for (int32_t l = 0; l < L; l++) n += m->w.layers[l].k_scale > 0 || m->w.layers[l].v_scale > 0;
    if (kv_dtype_is_fp8(t))
        log_info("KV cache %s: %s", kv_dtype_name(t),
                 n ? "k_scale/v_scale from the checkpoint (1.0 where a layer has none)"
                   : "scaling factors 1.0 (the checkpoint has no k_scale/v_scale)");
    else if (n)
        log_info("the checkpoint's k_scale/v_scale (%d layers) apply only to an fp8 KV cache; unused", n);
}

static engine_executor_factory executor_factory; /* engine_set_executor_factory */
static void *executor_factory_ctx;

void engine_set_executor_factory(engine_executor_factory fn, void *ctx) {
    executor_factory = fn;
    executor_factory_ctx = ctx;
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
    if (a->enable_lora && (a->max_loras < 1 || a->max_lora_rank < 1 || a->max_lora_rank > 1024 ||
                           a->max_cpu_loras < 0 || (a->max_cpu_loras > 0 && a->max_cpu_loras < a->max_loras)))
        return vllm_error(VLLM_ERR_INVALID,
                          "LoRA: max_loras %d must be >= 1, max_lora_rank %d in 1..1024, max_cpu_loras %d "
                          "0 or >= max_loras", a->max_loras, a->max_lora_rank, a->max_cpu_loras);
    if (a->tensor_parallel_size < 0 || a->pipeline_parallel_size < 0)
        return vllm_error(VLLM_ERR_INVALID, "tensor_parallel_size %d and pipeline_parallel_size %d must be >= 1",
                          a->tensor_parallel_size, a->pipeline_parallel_size);
    if ((a->tensor_parallel_size > 1 || a->pipeline_parallel_size > 1) && !executor_factory)
        return vllm_error(VLLM_ERR_UNSUPPORTED,
                          "tensor_parallel_size %d x pipeline_parallel_size %d needs the MPI executor of "
                          "`vllmc serve` (this process has none)",
                          a->tensor_parallel_size, a->pipeline_parallel_size);
    if (a->enable_lora && (a->tensor_parallel_size > 1 || a->pipeline_parallel_size > 1))
        return vllm_error(VLLM_ERR_UNSUPPORTED, "LoRA with tensor_parallel_size %d x pipeline_parallel_size %d: "
                          "adapters are not sharded yet; use one rank", a->tensor_parallel_size,
                          a->pipeline_parallel_size);
    vllm_speculative_config spc;
    vllm_status rc = resolve_spec_config(&a->speculative_config, &spc);
    if (rc != VLLM_OK) return rc;
    if (!kv_cache_dtype_value(a->kv_cache_dtype))
        return vllm_error(VLLM_ERR_INVALID, "kv_cache_dtype '%s': invalid choice (choose from %s)",
                          a->kv_cache_dtype, KV_DTYPE_CHOICES);
    if (engine_dtype_bf16(a->dtype, DTYPE_F32) < 0)
        return vllm_error(VLLM_ERR_INVALID, "dtype '%s': invalid choice (choose from %s)", a->dtype,
                          ENGINE_DTYPE_CHOICES);
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
    size_t per_block = runner_kv_bytes_per_block(&e->model->config, bs, e->kv_type);
    int64_t blocks_per_seq = kv_layout_blocks_per_seq(e->layout, bs, L, e->info.max_num_batched_tokens);
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
                          "that can be stored in KV cache (%lld blocks of %d tokens, %lld needed). Try increasing "
                          "kv_cache_memory_bytes / num_gpu_blocks_override or decreasing "
                          "max_model_len.",
                          L, (long long)n, bs, (long long)blocks_per_seq);
    *num_blocks = (int32_t)n;
    e->info.kv_cache_memory_bytes = n * (int64_t)per_block;
    return VLLM_OK;
}

static void fsm_remove(vllm_engine *e, request *r);
static vllm_status create_flights(vllm_engine *e);

static void *alloc_array(size_t n, size_t size, vllm_status *rc) {
    void *p = calloc(n ? n : 1, size);
    if (!p && *rc == VLLM_OK) *rc = vllm_error(VLLM_ERR_NOMEM, "engine: out of memory");
    return p;
}

static void free_step_scratch(vllm_engine *e) {
    step_builder_free(e->builder);
    e->builder = NULL;
    free(e->logits);
    free(e->committed);
    free(e->num_committed);
    free(e->samples);
    free(e->sampled_seqs);
    free(e->results);
    free(e->tops);
    free(e->lps);
    free(e->top_ids);
    free(e->top_lps);
    free(e->drafts);
    free(e->spec_reqs);
    free(e->spec_per_pos);
    free(e->masks);
    free(e->mask_jobs);
    free(e->prior_tokens);
    e->masks = NULL;
    e->mask_jobs = NULL;
    e->prior_tokens = NULL;
    free(e->plps);
    free(e->prompt_top_ids);
    free(e->prompt_top_lps);
    free(e->prompt_top);
    e->plps = NULL, e->prompt_top_ids = NULL, e->prompt_top_lps = NULL, e->prompt_top = NULL;
    e->logits = NULL, e->committed = e->num_committed = e->top_ids = e->drafts = e->spec_per_pos = NULL;
    e->spec_reqs = NULL;
    e->samples = NULL, e->sampled_seqs = NULL, e->results = NULL, e->tops = NULL, e->lps = NULL, e->top_lps = NULL;
}

/* Rows of prompt logprobs a step may compute (the scheduler cuts prompt
 * chunks of prompt_logprobs requests to fit): what 64 MiB of logits hold,
 * at least 16, at most a step's tokens. The logits buffer is calloc'ed, so
 * pages that no such request ever touches cost no memory.
 * VLLMC_DEBUG_PROMPT_ROWS=N sets it (tests: chunks cut at odd places). */
static int32_t engine_max_prompt_rows(int32_t max_num_batched_tokens, int32_t vocab) {
    int64_t rows = ((int64_t)64 << 20) / ((int64_t)vocab * (int64_t)sizeof(float));
    if (rows < 16) rows = 16;
    const char *dbg = getenv("VLLMC_DEBUG_PROMPT_ROWS");
    if (dbg && atoi(dbg) > 0) rows = atoi(dbg);
    return rows > max_num_batched_tokens ? max_num_batched_tokens : (int32_t)rows;
}

/* The step's arrays for the current speculative setting: k + 1 scored rows
 * per sequence at most (within the token budget), and committed-token slots
 * for those rows plus one per sibling of a fork. */
static vllm_status alloc_step_scratch(vllm_engine *e) {
    free_step_scratch(e);
    const vllm_engine_info *info = &e->info;
    int64_t S = info->max_num_seqs, rows = S * (1 + (int64_t)e->spec.num_speculative_tokens);
    if (rows > info->max_num_batched_tokens) rows = info->max_num_batched_tokens;
    if (rows < S) rows = S;
    e->max_scored = (int32_t)rows;
    e->max_out = (int32_t)(rows + S);
    e->max_prompt_rows = engine_max_prompt_rows(info->max_num_batched_tokens, e->vocab);
    size_t P = (size_t)e->max_prompt_rows;
    step_builder_config bc = {.max_tokens = info->max_num_batched_tokens,
                              .max_seqs = info->max_num_seqs,
                              .max_scored = e->max_scored + e->max_prompt_rows,
                              .max_copies = info->max_num_seqs * e->layout->num_groups,
                              .max_blocks_per_seq = e->max_blocks_per_seq,
                              .block_size = info->block_size,
                              .num_kv_groups = e->layout->num_groups};
    vllm_status rc = step_builder_create(&bc, &e->builder);
    size_t O = (size_t)e->max_out;
    e->logits = alloc_array(((size_t)e->max_scored + P) * (size_t)e->vocab, sizeof(float), &rc);
    e->plps = alloc_array(P, sizeof *e->plps, &rc);
    e->prompt_top_ids = alloc_array(P * VLLM_MAX_LOGPROBS, sizeof(int32_t), &rc);
    e->prompt_top_lps = alloc_array(P * VLLM_MAX_LOGPROBS, sizeof(float), &rc);
    e->prompt_top = alloc_array(VLLM_MAX_LOGPROBS, sizeof *e->prompt_top, &rc);
    e->committed = alloc_array(O, sizeof(int32_t), &rc);
    e->num_committed = alloc_array((size_t)S, sizeof(int32_t), &rc);
    e->samples = alloc_array((size_t)S, sizeof *e->samples, &rc);
    e->sampled_seqs = alloc_array((size_t)S, sizeof *e->sampled_seqs, &rc);
    e->results = alloc_array(O, sizeof *e->results, &rc);
    e->tops = alloc_array(O * VLLM_MAX_LOGPROBS, sizeof *e->tops, &rc);
    e->lps = alloc_array(O, sizeof *e->lps, &rc);
    e->top_ids = alloc_array(O * VLLM_MAX_LOGPROBS, sizeof(int32_t), &rc);
    e->top_lps = alloc_array(O * VLLM_MAX_LOGPROBS, sizeof(float), &rc);
    e->drafts = alloc_array((size_t)S * (size_t)e->spec.num_speculative_tokens, sizeof(int32_t), &rc);
    e->spec_reqs = alloc_array((size_t)S, sizeof *e->spec_reqs, &rc);
    e->spec_per_pos = alloc_array((size_t)e->spec.num_speculative_tokens, sizeof(int32_t), &rc);
    e->prior_tokens = alloc_array((size_t)S, sizeof(int32_t), &rc);
    if (e->grammars) {
        e->masks = alloc_array((size_t)(e->max_scored + e->max_prompt_rows) * (size_t)e->mask_words, sizeof(uint32_t), &rc);
        e->mask_jobs = alloc_array((size_t)S, sizeof *e->mask_jobs, &rc);
    }
    return rc;
}

/* The KV connector the args ask for (none: e->conn stays NULL). Its blocks
 * are tagged with the model's shape and the pool's layout, so a block file
 * written for another model or KV dtype is never loaded. */
static vllm_status create_kv_connector(vllm_engine *e) {
    kv_connector_config cfg;
    bool enabled;
    vllm_status rc = kv_connector_config_parse(e->args.kv_transfer_config, e->args.kv_offloading_size, &cfg, &enabled);
    if (rc != VLLM_OK || !enabled) return rc;
    const model_config *mc = &e->model->config;
    int64_t shape[] = {mc->num_hidden_layers, mc->num_key_value_heads, mc->head_dim, mc->vocab_size,
                       mc->hidden_size, e->kv_type, e->args.block_size, (int64_t)executor_kv_block_bytes(e->exec)};
    uint64_t tag = XXH3_64bits_withSeed(shape, sizeof shape, XXH3_64bits(mc->architecture, strlen(mc->architecture)));
    if ((rc = kv_connector_create(&cfg, e->exec, e->kv, tag, &e->conn)) != VLLM_OK) return rc;
    scheduler_set_kv_connector(e->sched, e->conn);
    runner_layer_hooks hooks;
    kv_connector_layer_hooks(e->conn, &hooks);
    e->conn_layerwise = executor_set_layer_hooks(e->exec, &hooks);
    return VLLM_OK;
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
    e->args.kv_transfer_config = dup_or_null(args->kv_transfer_config, &rc);
    e->args.kv_cache_dtype = kv_cache_dtype_value(args->kv_cache_dtype); /* static */
    e->args.dtype = NULL; /* read at create only (engine_dtype_bf16) */
    if (e->args.structured_outputs_compile_timeout <= 0)
        e->args.structured_outputs_compile_timeout = DEFAULT_COMPILE_TIMEOUT;
    list_init(&e->reported);
    list_init(&e->deferred);
    list_init(&e->fsm_waiting);
    list_init(&e->kv_waiting);
    if (rc != VLLM_OK) goto fail;
    if ((rc = model_load(args->model, &e->model)) != VLLM_OK) goto fail;
    /* --dtype bfloat16 on F16 / F32 weights: BF16 copies, before the KV pool takes its share of memory */
    if (engine_dtype_bf16(args->dtype, e->model->config.torch_dtype) == 1 &&
        (rc = model_convert_bf16(e->model, NULL)) != VLLM_OK)
        goto fail;

    const model_config *mc = &e->model->config;
    vllm_engine_info *info = &e->info;
    e->vocab = mc->vocab_size;
    e->mask_words = (e->vocab + 31) / 32;
    e->gen = e->model->gen;
    int32_t L = args->max_model_len ? args->max_model_len : mc->max_position_embeddings;
    if (L > mc->max_position_embeddings) {
        rc = vllm_error(VLLM_ERR_INVALID,
                        "max_model_len %d is greater than the model's max_position_embeddings %d",
                        L, mc->max_position_embeddings);
        goto fail;
    }
    /* Gemma 3 computes sliding-window attention; a Mistral or Qwen window is
     * not implemented: within it full attention is the same computation */
    if (mc->sliding_window > 0 && !model_has_sliding_layers(mc) && L > mc->sliding_window) {
        if (args->max_model_len) {
            rc = vllm_error(VLLM_ERR_UNSUPPORTED,
                            "max_model_len %d exceeds the sliding_window %d of %s, whose sliding-window attention "
                            "is not implemented (vllm.c attends to the whole context): use max_model_len <= %d",
                            L, mc->sliding_window, mc->architecture, mc->sliding_window);
            goto fail;
        }
        log_warn("max_model_len %d capped to the model's sliding_window %d (sliding-window "
                 "attention is not implemented for %s)", L, mc->sliding_window, mc->architecture);
        L = mc->sliding_window;
    }
    if (!(e->layout = malloc(sizeof *e->layout))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    kv_layout_init(e->layout, mc);
    info->max_model_len = L;
    info->block_size = args->block_size;
    info->kv_cache_dtype = kv_cache_dtype_value(args->kv_cache_dtype);
    if (!strcmp(info->kv_cache_dtype, "auto")) e->kv_type = engine_kv_cache_dtype_auto(mc, e->model->gguf != NULL);
    else kv_dtype_from_name(info->kv_cache_dtype, &e->kv_type);
    info->kv_cache_storage_dtype = kv_dtype_name(e->kv_type);
    info->kv_cache_bytes_per_token = (int64_t)2 * mc->num_hidden_layers * mc->num_key_value_heads *
                                     mc->head_dim * (int64_t)kv_dtype_size(e->kv_type);
    log_kv_scales(e->model, e->kv_type);
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
                          .num_threads = args->num_threads,
                          .kv_cache_dtype = e->kv_type,
                          .bf16_compute = engine_dtype_bf16(args->dtype, mc->torch_dtype) == 1};
    log_info("dtype %s: %s", args->dtype ? args->dtype : "auto",
             rcfg.bf16_compute ? "BF16 weights compute with BF16 activations" : "FP32 activations");
    if (args->enable_lora) {
        if ((rc = lora_table_create(args->max_cpu_loras, &e->loras)) != VLLM_OK) goto fail;
        rcfg.lora = e->loras;
        rcfg.max_lora_rank = args->max_lora_rank;
    }
    if (executor_factory) {
        if ((rc = executor_factory(executor_factory_ctx, args, e->model, &rcfg, &e->exec)) != VLLM_OK) goto fail;
        if (rcfg.num_blocks < num_blocks) { /* the ranks agreed on a smaller pool */
            e->info.kv_cache_memory_bytes = e->info.kv_cache_memory_bytes / num_blocks * rcfg.num_blocks;
            num_blocks = info->num_gpu_blocks = rcfg.num_blocks;
        }
    } else if ((rc = executor_create_local(e->model, &rcfg, &e->exec)) != VLLM_OK) {
        goto fail;
    }
    info->num_threads = args->num_threads > 0 ? args->num_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    if ((rc = kv_cache_manager_create_groups(num_blocks, args->block_size, args->enable_prefix_caching,
                                             e->layout->window, e->layout->num_groups, &e->kv)) != VLLM_OK)
        goto fail;
    scheduler_config sc = {.max_num_seqs = info->max_num_seqs,
                           .max_num_batched_tokens = info->max_num_batched_tokens,
                           .long_prefill_token_threshold = info->long_prefill_token_threshold,
                           .policy = args->scheduling_policy,
                           .max_model_len = L,
                           .num_eos = mc->num_eos_token_ids,
                           .max_prompt_rows = engine_max_prompt_rows(info->max_num_batched_tokens, e->vocab),
                           .max_loras = args->enable_lora ? args->max_loras : 0};
    memcpy(sc.eos_ids, mc->eos_token_ids, sizeof sc.eos_ids);
    if ((rc = scheduler_create(&sc, e->kv, &e->sched)) != VLLM_OK) goto fail;
    if ((rc = create_kv_connector(e)) != VLLM_OK) goto fail;
    if ((rc = sampler_create(e->vocab, mc->eos_token_ids, mc->num_eos_token_ids, executor_threadpool(e->exec),
                             &e->sampler)) != VLLM_OK)
        goto fail;
    map_init(&e->requests);
    if ((rc = alloc_step_scratch(e)) != VLLM_OK) goto fail;
    if ((rc = create_flights(e)) != VLLM_OK) goto fail;
    if ((rc = resolve_spec_config(&args->speculative_config, &info->speculative_config)) != VLLM_OK) goto fail;
    const vllm_speculative_config *spc = &info->speculative_config;
    if (spc->method == VLLM_SPEC_METHOD_NGRAM) {
        if ((rc = ngram_create(spc->prompt_lookup_min, spc->prompt_lookup_max, &e->ngram)) != VLLM_OK) goto fail;
        spec_config cfg = {.num_speculative_tokens = spc->num_speculative_tokens,
                           .disable_by_batch_size = spc->disable_by_batch_size,
                           .adaptive = spc->adaptive,
                           .proposer = ngram_as_proposer(e->ngram)};
        if ((rc = engine_set_spec(e, &cfg)) != VLLM_OK) goto fail;
        log_info("speculative decoding: ngram, num_speculative_tokens %d, prompt_lookup_min %d, "
                 "prompt_lookup_max %d, disable_by_batch_size %d, adaptive %s", spc->num_speculative_tokens,
                 spc->prompt_lookup_min, spc->prompt_lookup_max, spc->disable_by_batch_size,
                 spc->adaptive ? "true" : "false");
    } else if (spc->method == VLLM_SPEC_METHOD_DRAFT_MODEL) {
        /* the draft's pool holds as many tokens as the target's (its blocks are smaller) */
        draft_model_config dc = {.path = spc->model,
                                 .vocab_size = e->vocab,
                                 .max_model_len = info->max_model_len,
                                 .block_size = args->block_size,
                                 .num_blocks = info->num_gpu_blocks,
                                 .kv_cache_dtype = e->kv_type,
                                 .num_threads = args->num_threads,
                                 .pool = executor_threadpool(e->exec),
                                 .sample = !spc->exact_acceptance};
        if ((rc = draft_model_create(&dc, &e->draft)) != VLLM_OK) goto fail;
        spec_config cfg = {.num_speculative_tokens = spc->num_speculative_tokens,
                           .disable_by_batch_size = spc->disable_by_batch_size,
                           .adaptive = spc->adaptive,
                           .proposer = draft_model_as_proposer(e->draft),
                           .cost = spec_policy_cost_of(e->model, draft_model_model(e->draft))};
        if ((rc = engine_set_spec(e, &cfg)) != VLLM_OK) goto fail;
        log_info("speculative decoding: draft_model %s, num_speculative_tokens %d, disable_by_batch_size %d, "
                 "adaptive %s, draft_token_acceptance_method %s", spc->model, spc->num_speculative_tokens,
                 spc->disable_by_batch_size, spc->adaptive ? "true" : "false",
                 spc->exact_acceptance ? "exact" : "rejection_sampler");
    }

    int64_t per_seq = kv_layout_blocks_per_seq(e->layout, args->block_size, L, info->max_num_batched_tokens);
    if (e->layout->num_groups > 1) {
        int32_t sliding = 0;
        for (int32_t g = 0; g < e->layout->num_groups; g++) sliding += e->layout->window[g] > 0;
        log_info("KV cache groups: %d full-attention + %d sliding-window (window %d) of %d layers each; a "
                 "%d-token request holds at most %lld blocks (%lld with every block kept)",
                 e->layout->num_groups - sliding, sliding, mc->sliding_window, e->layout->group_size, L,
                 (long long)per_seq, (long long)e->layout->num_groups * ((L + args->block_size - 1) / args->block_size));
    }
    log_info("KV cache: %d blocks of %d tokens = %lld tokens (%.2f GiB, %s: %lld bytes per token; "
             "--kv-cache-dtype %s); maximum concurrency for %d tokens per request: %.2fx",
             num_blocks, args->block_size, (long long)num_blocks * args->block_size,
             (double)info->kv_cache_memory_bytes / 1073741824.0, info->kv_cache_storage_dtype,
             (long long)info->kv_cache_bytes_per_token, info->kv_cache_dtype, L,
             e->layout->num_groups > 1 ? (double)num_blocks / (double)per_seq
                                       : (double)num_blocks * args->block_size / L);
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

static void free_flights(vllm_engine *e) {
    for (int32_t i = 0; e->flights && i < e->max_flights; i++) {
        free(e->flights[i].so.seqs);
        free(e->flights[i].so.copies);
        free(e->flights[i].scored_start);
    }
    free(e->flights);
    e->flights = NULL;
}

/* The batches the executor can keep in flight (pipeline parallel), each a
 * schedule's copy; 1 needs none. */
static vllm_status create_flights(vllm_engine *e) {
    e->max_flights = executor_max_in_flight(e->exec);
    if (e->max_flights <= 1) return VLLM_OK;
    vllm_status rc = VLLM_OK;
    size_t S = (size_t)e->info.max_num_seqs;
    e->flights = alloc_array((size_t)e->max_flights, sizeof *e->flights, &rc);
    for (int32_t i = 0; rc == VLLM_OK && i < e->max_flights; i++) {
        e->flights[i].so.seqs = alloc_array(S, sizeof(scheduled_seq), &rc);
        e->flights[i].so.copies = alloc_array(S * (size_t)e->layout->num_groups, sizeof(block_copy), &rc);
        e->flights[i].scored_start = alloc_array(S + 1, sizeof(int32_t), &rc);
    }
    return rc;
}

/* A finished request whose sequence is in a batch in flight. */
static bool request_in_flight(const request *r) {
    for (int32_t i = 0; i < r->n; i++)
        if (r->seqs[i].in_flight) return true;
    return false;
}

/* Frees the requests on head, except those a batch in flight still names:
 * they go to deferred (freed by a later step). */
static void free_requests_done(list_node *head, list_node *deferred) {
    for (list_node *n = head->next, *next; n != head; n = next) {
        next = n->next;
        request *r = list_entry(n, request, node);
        list_remove(n);
        if (request_in_flight(r)) list_push_back(deferred, n);
        else request_free(r);
    }
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
    /* every unfinished request is in the map; finished ones are on lists */
    for (map_node *n = map_first(&e->requests), *next; n; n = next) {
        next = map_next(&e->requests, n);
        request *r = map_entry(n, request, by_id);
        forget_request(e, r);
        fsm_remove(e, r);
        if (e->sched) {
            scheduler_abort_request(e->sched, r);
            scheduler_take_news(e->sched); /* its seqs are on the news list: the next abort would write into them */
        }
        list_remove(&r->node);
        request_free(r);
    }
    if (e->sched)
        for (request *r; (r = scheduler_pop_finished(e->sched));)
            if (!r->in_map) request_free(r);
    free_requests_in(&e->reported);
    free_requests_in(&e->deferred);
    map_deinit(&e->requests);
    free_flights(e);
    free_step_scratch(e);
    free(e->mask_tmp);
    overlap_free(e->mask_side);
    grammar_cache_free(e->grammars); /* after the requests: they held references */
    ngram_free(e->ngram);
    draft_model_free(e->draft);
    sampler_free(e->sampler);
    scheduler_free(e->sched);
    kv_connector_free(e->conn);
    kv_cache_manager_free(e->kv);
    executor_free(e->exec);
    lora_table_free(e->loras); /* after the requests and the runner: both used it */
    model_free(e->model);
    free(e->layout);
    free((char *)e->args.model);
    free((char *)e->args.tokenizer);
    free((char *)e->args.generation_config);
    free((char *)e->args.kv_transfer_config);
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

void vllm_engine_reset_prefix_cache(vllm_engine *e) { kv_cache_manager_reset_prefix_cache(e->kv); }

executor *engine_executor(vllm_engine *e) { return e->exec; }

const kv_cache_manager *engine_kv_cache_manager(const vllm_engine *e) { return e->kv; }

const model *engine_model(const vllm_engine *e) { return e->model; }

vllm_status engine_set_spec(vllm_engine *e, const spec_config *cfg) {
    if (vllm_engine_has_unfinished(e))
        return vllm_error(VLLM_ERR_INVALID, "speculative decoding can only change while no request is running");
    spec_config off = {0};
    if (!cfg || cfg->num_speculative_tokens <= 0 || !cfg->proposer.propose) cfg = &off;
    if (cfg->num_speculative_tokens > e->info.max_model_len || cfg->num_speculative_tokens > VLLM_MAX_SPEC_TOKENS)
        return vllm_error(VLLM_ERR_INVALID, "num_speculative_tokens %d exceeds max_model_len %d or %d",
                          cfg->num_speculative_tokens, e->info.max_model_len, VLLM_MAX_SPEC_TOKENS);
    e->spec = *cfg;
    if (e->spec.cost.weight_rows <= 0.0 && e->model) e->spec.cost = spec_policy_cost_of(e->model, NULL);
    vllm_status rc = alloc_step_scratch(e);
    if (rc != VLLM_OK) {
        e->spec = off;
        e->dead = alloc_step_scratch(e) != VLLM_OK;
    }
    return rc;
}

/* ---- structured outputs ------------------------------------------------- */

/* A constrained request (vllm_request_opts.structured_outputs) takes a
 * reference on its grammar's cache entry when it is added. Compiling runs on
 * the cache's thread (grammar_cache.h); until the entry is READY the
 * request's seq 0 is WAITING_FOR_FSM on e->fsm_waiting, in no scheduler
 * queue, so the scheduler skips it and the others run. Each step first
 * promotes the ready ones into the scheduler (QUEUED is recorded then) and
 * finishes with ERROR the ones whose compile failed or whose deadline
 * (structured_outputs_compile_timeout after the add) has passed. A step
 * with nothing but pending grammars waits for a compile, at most
 * FSM_IDLE_WAIT, so a caller stepping in a loop does not spin.
 *
 * Every sequence has its matcher (n > 1: forked from seq 0's before any
 * output), which follows the committed output only:
 *   - each scored entry's mask rows are filled while the forward runs, on
 *     the mask helper thread (e->mask_side, base/overlap.h: the matchers
 *     are the engine thread's, but it only runs the forward until the
 *     join), and the join before sampling does the entries the helper has
 *     not claimed on the runner's pool (the pipelined path fills them all
 *     there after collecting): row 0 from the matcher,
 *     then, with drafts, the matcher advanced through them one row at a
 *     time and rolled back at the end, so each draft position is masked as
 *     if the drafts before it had been committed (a draft the grammar
 *     rejects cannot be accepted: its row's token differs from it); an
 *     n > 1 fork samples its n first tokens from seq 0's one masked row;
 *   - after scheduler_update the tokens each sequence committed are
 *     accepted; a matcher that accepted EOS (terminated) finishes its
 *     sequence with STOP (with ignore_eos too);
 *   - preemption frees KV only: the committed output and its matcher
 *     survive, and the recomputed sequence is masked from the same state.
 * A masked row with no token left (the grammar must end here but min_tokens
 * hides EOS, or a grammar with a dead end) finishes that sequence, with STOP
 * where the grammar can end and ERROR otherwise, instead of failing the step.
 * Masks depend on nothing but the sequence's own output: batch invariance
 * holds. */

grammar_cache *engine_grammar_cache(vllm_engine *e) {
    if (e->grammars) return e->grammars;
    grammar_cache_config cfg = {.tokenizer = e->args.tokenizer ? e->args.tokenizer : e->args.model,
                                .num_eos = e->info.num_eos_token_ids,
                                .num_threads = 1};
    if (cfg.num_eos > GRAMMAR_CACHE_MAX_EOS) cfg.num_eos = GRAMMAR_CACHE_MAX_EOS;
    memcpy(cfg.eos_ids, e->info.eos_token_ids, (size_t)cfg.num_eos * sizeof *cfg.eos_ids);
    grammar_cache *c;
    if (grammar_cache_create(&cfg, &c) != VLLM_OK) return NULL;
    vllm_status rc = VLLM_OK;
    size_t W = (size_t)e->mask_words;
    e->masks = alloc_array((size_t)(e->max_scored + e->max_prompt_rows) * W, sizeof(uint32_t), &rc); /* indexed by logits row */
    e->mask_jobs = alloc_array((size_t)e->info.max_num_seqs, sizeof *e->mask_jobs, &rc);
    if (rc != VLLM_OK) {
        free(e->masks);
        free(e->mask_jobs);
        e->masks = NULL;
        e->mask_jobs = NULL;
        grammar_cache_free(c);
        return NULL;
    }
    /* the helper's masks use mask_tmp's last row (ith num_threads); without
     * it they are filled after the forward (VLLMC_DEBUG_SYNC_MASKS=1 too) */
    const char *sync = getenv("VLLMC_DEBUG_SYNC_MASKS");
    if (!(sync && sync[0] == '1') && overlap_create(e->info.num_threads, &e->mask_side) != VLLM_OK) e->mask_side = NULL;
    e->grammars = c;
    return c;
}

const char *engine_kv_server(const vllm_engine *e, int32_t *port) {
    *port = 0;
    return e->conn ? kv_connector_server(e->conn, port) : NULL;
}

bool engine_kv_connector_enabled(const vllm_engine *e) { return e->conn != NULL; }

const char *engine_kv_engine_id(const vllm_engine *e) {
    if (!e->conn) return NULL;
    const kv_connector_config *c = kv_connector_get_config(e->conn);
    return c->role & KV_CONNECTOR_PRODUCER ? c->engine_id : NULL;
}

double engine_compile_timeout(const vllm_engine *e) { return e->args.structured_outputs_compile_timeout; }

/* The scratch a mask row needs when the tokenizer's mask is wider than the
 * model's (a tokenizer with more ids than the model's vocab_size): one row
 * per pool thread. Set once the vocabulary exists. */
static vllm_status ensure_mask_tmp(vllm_engine *e) {
    const st_vocab *v = grammar_cache_vocab(e->grammars);
    if (!v || e->mask_tmp || st_mask_words(v) <= e->mask_words) return VLLM_OK;
    vllm_status rc = VLLM_OK;
    e->mask_tmp = alloc_array((size_t)(e->info.num_threads + 1) * (size_t)st_mask_words(v), sizeof(uint32_t), &rc);
    e->mask_tmp_words = st_mask_words(v);
    return rc;
}

/* Takes r off the FSM list; its status stays WAITING_FOR_FSM (in no
 * scheduler queue) until scheduler_add_request or a finish. */
static void fsm_remove(vllm_engine *e, request *r) {
    if (r->seqs[0].status == SEQ_STATUS_WAITING_FOR_REMOTE_KVS) { /* the other engine-held wait */
        if (list_empty(&r->node)) return;
        list_remove(&r->node);
        list_init(&r->node);
        e->num_kv_waiting--;
        kv_connector_fetch_release(r->kv_fetch);
        r->kv_fetch = NULL;
        return;
    }
    if (r->seqs[0].status != SEQ_STATUS_WAITING_FOR_FSM || list_empty(&r->node)) return;
    list_remove(&r->node);
    list_init(&r->node);
    e->num_fsm_waiting--;
}

/* WAITING_FOR_REMOTE_KVS (TcpConnector): a request whose prompt's blocks are
 * being fetched waits outside the scheduler; when the fetch ends (whatever
 * it got) it is queued, and admission finds the fetched blocks in the
 * connector's store. */
static void promote_kv(vllm_engine *e, double now) {
    for (list_node *n = e->kv_waiting.next, *next; n != &e->kv_waiting; n = next) {
        next = n->next;
        request *r = list_entry(n, request, node);
        if (!kv_connector_fetch_done(r->kv_fetch)) continue;
        fsm_remove(e, r);
        scheduler_add_request(e->sched, r, now);
    }
}

/* Starts r's fetch from the producer named by opts; false (r to be queued
 * now) when there is nothing to fetch or the fetch cannot start. */
static bool start_kv_fetch(vllm_engine *e, request *r, const vllm_request_opts *o) {
    if (!e->conn || !o->kv_remote_host || !kv_connector_fetches(e->conn)) return false;
    seq *q = &r->seqs[0];
    int32_t n = (q->num_tokens - 1) / e->info.block_size;
    block_hash *hs = n > 0 ? malloc((size_t)n * sizeof *hs) : NULL;
    if (!hs) return false;
    for (int32_t i = 0; i < n; i++) kv_cache_manager_block_hash(e->kv, q, i, &hs[i]);
    vllm_status rc = kv_connector_start_fetch(e->conn, o->kv_remote_host, o->kv_remote_port, hs, n, &r->kv_fetch);
    free(hs);
    if (rc != VLLM_OK) {
        log_warn("request '%s': %s; computing its prompt here", r->id, vllm_errmsg());
        return false;
    }
    q->status = SEQ_STATUS_WAITING_FOR_REMOTE_KVS;
    list_push_back(&e->kv_waiting, &r->node);
    e->num_kv_waiting++;
    return true;
}

/* Finishes every unfinished sequence of r with ERROR and msg (the first
 * message a request gets is the one it keeps). */
static void fail_request(vllm_engine *e, request *r, const char *msg) {
    fsm_remove(e, r);
    if (!r->error) r->error = strdup(msg);
    for (int32_t i = 0; i < r->n; i++) scheduler_finish_seq(e->sched, &r->seqs[i], VLLM_FINISH_ERROR);
}

static void fail_seq(vllm_engine *e, seq *q, const char *msg) {
    if (!q->req->error) q->req->error = strdup(msg);
    scheduler_finish_seq(e->sched, q, VLLM_FINISH_ERROR);
}

/* Moves the requests whose grammar is ready into the scheduler; fails those
 * whose compile failed or took too long. */
static void promote_fsm(vllm_engine *e, double now) {
    for (list_node *n = e->fsm_waiting.next, *next; n != &e->fsm_waiting; n = next) {
        next = n->next;
        request *r = list_entry(n, request, node);
        grammar_state st = grammar_cache_entry_state(r->grammar);
        char msg[1200];
        if (st == GRAMMAR_READY) {
            if (ensure_mask_tmp(e) != VLLM_OK || request_attach_matchers(r) != VLLM_OK) {
                fail_request(e, r, vllm_errmsg());
                continue;
            }
            fsm_remove(e, r);
            scheduler_add_request(e->sched, r, now);
        } else if (st == GRAMMAR_FAILED) {
            fail_request(e, r, grammar_cache_entry_error(r->grammar));
        } else if (now >= r->fsm_deadline) {
            snprintf(msg, sizeof msg,
                     "structured outputs: the grammar did not compile within %g s "
                     "(structured_outputs_compile_timeout)", e->args.structured_outputs_compile_timeout);
            fail_request(e, r, msg);
        }
    }
}

/* A step with nothing to run but grammars compiling: wait for one (or the
 * nearest deadline, at most FSM_IDLE_WAIT), then promote. */
static void wait_fsm(vllm_engine *e) {
    double now = vllm_monotonic_time(), until = now + FSM_IDLE_WAIT;
    for (list_node *n = e->fsm_waiting.next; n != &e->fsm_waiting; n = n->next) {
        const request *r = list_entry(n, request, node);
        if (grammar_cache_entry_state(r->grammar) != GRAMMAR_PENDING) return; /* promote at once */
        if (r->fsm_deadline < until) until = r->fsm_deadline;
    }
    grammar_cache_wait_any(e->grammars, until);
}

/* Row `row` of the sampler's masks from m: the tokenizer's mask cut or
 * padded to the model's vocabulary (ids past either are never allowed). */
static void fill_row(vllm_engine *e, st_matcher *m, uint32_t *row, int ith) {
    const st_vocab *v = grammar_cache_vocab(e->grammars);
    int32_t W = e->mask_words, Ws = st_mask_words(v);
    int32_t limit = st_vocab_size(v) < e->vocab ? st_vocab_size(v) : e->vocab;
    uint32_t *dst = Ws <= W ? row : e->mask_tmp + (size_t)ith * (size_t)Ws;
    st_matcher_fill_mask(m, dst);
    if (dst != row) memcpy(row, dst, (size_t)W * sizeof *row);
    int32_t w = limit / 32;
    if (limit % 32) row[w++] &= (1u << (limit % 32)) - 1u;
    if (w < W) memset(row + w, 0, (size_t)(W - w) * sizeof *row);
}

static void run_mask_job(vllm_engine *e, mask_job *j, int ith) {
    size_t W = (size_t)e->mask_words;
    int32_t acc = 0;
    for (int32_t k = 0; k <= j->num_drafts; k++) {
        uint32_t *row = j->rows + (size_t)k * W;
        if (k > acc) { /* after a draft the grammar rejects: the sampler stops before this row */
            memset(row, 0xff, W * sizeof *row);
            continue;
        }
        fill_row(e, j->m, row, ith);
        if (k < j->num_drafts && st_matcher_accept_token(j->m, j->drafts[k])) acc++;
    }
    if (acc > 0) st_matcher_rollback(j->m, acc);
}

typedef struct mask_batch { vllm_engine *e; mask_job *jobs; } mask_batch;

static void stage_masks(void *arg, int64_t lo, int64_t hi, int ith) {
    mask_batch *b = arg;
    for (int64_t i = lo; i < hi; i++) run_mask_job(b->e, &b->jobs[i], ith);
}

static void fill_masks(vllm_engine *e, int32_t num_jobs) {
    mask_batch b = {e, e->mask_jobs};
    if (num_jobs > 1) threadpool_run(executor_threadpool(e->exec), stage_masks, &b, num_jobs, 1);
    else if (num_jobs == 1) stage_masks(&b, 0, 1, 0);
}

/* The step's mask jobs into e->mask_jobs, one per entry that samples with a
 * matcher (a fork's n samples share seq 0's rows); their rows are indexed by
 * logits row. Returns how many. */
static int32_t plan_masks(vllm_engine *e, const scheduler_output *so, const step_batch *b) {
    int32_t n = 0;
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        if (en->num_scored == 0 || en->seq->status == SEQ_STATUS_FINISHED || !en->seq->matcher) continue;
        int32_t row0 = b->scored_start[i] + en->num_prompt_rows;
        e->mask_jobs[n++] = (mask_job){.m = en->seq->matcher,
                                       .rows = e->masks + (size_t)row0 * (size_t)e->mask_words,
                                       .drafts = en->seq->tokens + en->seq->num_tokens,
                                       .num_drafts = en->num_drafts};
    }
    return n;
}

/* After scheduler_update: each sampled sequence's matcher accepts the
 * tokens it committed this step. */
static void accept_committed(vllm_engine *e) {
    for (int32_t i = 0; i < e->num_sampled; i++) {
        seq *q = e->sampled_seqs[i];
        if (!q->matcher) continue;
        for (int32_t t = e->prior_tokens[i]; t < q->num_tokens; t++)
            if (!st_matcher_accept_token(q->matcher, q->tokens[t])) {
                char msg[160];
                snprintf(msg, sizeof msg, "structured outputs: the grammar rejected token %d, which its mask allowed",
                         q->tokens[t]);
                log_error("request '%s': %s", q->req->id, msg);
                fail_seq(e, q, msg);
                break;
            }
        if (q->status == SEQ_STATUS_RUNNING && st_matcher_is_terminated(q->matcher))
            scheduler_finish_seq(e->sched, q, VLLM_FINISH_STOP);
    }
}

/* ---- requests ----------------------------------------------------------- */

vllm_status vllm_engine_add_request(vllm_engine *e, const char *request_id,
                                    const int32_t *prompt_ids, int32_t num_prompt_ids,
                                    const vllm_sampling_params *sp, const vllm_request_opts *opts) {
    if (e->dead) return vllm_error(VLLM_ERR_INVALID, "engine is dead after a failed step");
    if (!request_id || !request_id[0])
        return vllm_error(VLLM_ERR_INVALID, "request_id must be a non-empty string");
    if (find_request(e, request_id))
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
    grammar_cache_entry *g = NULL;
    if (o.structured_outputs.kind != VLLM_STRUCTURED_NONE) {
        st_spec spec;
        if ((rc = grammar_cache_spec(&o.structured_outputs, &spec)) != VLLM_OK) {
            vllm_error_prefix("request '%s'", request_id);
            return rc;
        }
        grammar_cache *c = engine_grammar_cache(e);
        if (!c || (rc = grammar_cache_get(c, &spec, &g)) != VLLM_OK) {
            vllm_error_prefix("request '%s'", request_id);
            return c ? rc : VLLM_ERR_NOMEM;
        }
        if (grammar_cache_entry_state(g) == GRAMMAR_FAILED) { /* known to fail: say so now */
            rc = vllm_error(VLLM_ERR_INVALID, "request '%s': %s", request_id, grammar_cache_entry_error(g));
            grammar_cache_entry_unref(c, g);
            return rc;
        }
    }
    lora_adapter *lora = NULL;
    if (o.lora_name && o.lora_name[0]) {
        if (!e->loras)
            return vllm_error(VLLM_ERR_INVALID, "request '%s': LoRA adapter '%s' requested, but LoRA is not "
                              "enabled (--enable-lora)", request_id, o.lora_name);
        if (!(lora = lora_table_acquire(e->loras, o.lora_name)))
            return vllm_error(VLLM_ERR_NOT_FOUND, "request '%s': LoRA adapter '%s' is not loaded", request_id,
                              o.lora_name);
    }
    request *r;
    if ((rc = request_create(request_id, prompt_ids, num_prompt_ids, sp, &o, L, e->info.block_size,
                             e->layout->num_groups, e->args.seed, e->next_serial, &r)) != VLLM_OK) {
        if (g) grammar_cache_entry_unref(e->grammars, g);
        if (lora) lora_table_release(e->loras, lora);
        return rc;
    }
    if (lora) {
        r->lora = lora;
        r->loras = e->loras;
        r->lora_id = lora->id;
    }
    r->grammar = g;
    r->grammars = g ? e->grammars : NULL;
    r->fsm_deadline = now + e->args.structured_outputs_compile_timeout;
    bool ready = !g || grammar_cache_entry_state(g) == GRAMMAR_READY;
    if (g && ready && ((rc = ensure_mask_tmp(e)) != VLLM_OK || (rc = request_attach_matchers(r)) != VLLM_OK)) {
        request_free(r);
        return rc;
    }
    if ((rc = map_insert(&e->requests, &r->by_id, r->id)) != VLLM_OK) {
        request_free(r);
        return rc;
    }
    r->in_map = true;
    e->next_serial++;
    if (ready) {
        if (!start_kv_fetch(e, r, &o)) scheduler_add_request(e->sched, r, now);
    } else {
        r->seqs[0].status = SEQ_STATUS_WAITING_FOR_FSM;
        list_push_back(&e->fsm_waiting, &r->node);
        e->num_fsm_waiting++;
    }
    return VLLM_OK;
}

vllm_status vllm_engine_abort_request(vllm_engine *e, const char *request_id) {
    request *r = request_id ? find_request(e, request_id) : NULL;
    if (!r) return vllm_error(VLLM_ERR_NOT_FOUND, "request '%s' is unknown or finished",
                              request_id ? request_id : "(null)");
    forget_request(e, r);
    fsm_remove(e, r);
    scheduler_abort_request(e->sched, r);
    return VLLM_OK;
}

vllm_status vllm_engine_stop_sequence(vllm_engine *e, const char *request_id, int32_t index) {
    request *r = request_id ? find_request(e, request_id) : NULL;
    if (!r) return vllm_error(VLLM_ERR_NOT_FOUND, "request '%s' is unknown or finished",
                              request_id ? request_id : "(null)");
    if (index < 0 || index >= r->n)
        return vllm_error(VLLM_ERR_INVALID, "request '%s': sequence index %d outside 0..%d",
                          request_id, index, r->n - 1);
    if (index == 0) fsm_remove(e, r);
    scheduler_finish_seq(e->sched, &r->seqs[index], VLLM_FINISH_STOP);
    return VLLM_OK;
}

bool vllm_engine_has_unfinished(const vllm_engine *e) {
    return scheduler_has_unfinished(e->sched) || scheduler_has_news(e->sched) || e->num_fsm_waiting > 0 ||
           e->num_flights > 0 ||
           e->num_kv_waiting > 0;
}

/* ---- one step ----------------------------------------------------------- */

/* A constrained sequence can be left with no token (see "Structured
 * outputs"): such sequences finish here, before scheduler_update (which
 * then skips them), instead of failing the step. False if a failure is
 * anything else. */
static bool finish_masked_out(vllm_engine *e, int32_t ns) {
    for (int32_t i = 0; i < ns; i++)
        if (e->samples[i].rc != VLLM_OK && (e->samples[i].rc != VLLM_ERR_INVALID || !e->samples[i].allowed))
            return false;
    for (int32_t i = 0; i < ns; i++) {
        sample_seq *x = &e->samples[i];
        if (x->rc == VLLM_OK) continue;
        x->rc = VLLM_OK;
        x->num_out = 0;
        seq *q = e->sampled_seqs[i];
        if (q->req->forked == false) q = &q->req->seqs[0]; /* a fork's first sample: all end with seq 0 */
        if (q->status == SEQ_STATUS_FINISHED) continue;
        if (st_matcher_can_end(q->matcher)) scheduler_finish_seq(e->sched, q, VLLM_FINISH_STOP);
        else fail_seq(e, q, "structured outputs: no token can continue the grammar here");
    }
    return true;
}

/* Prompt logprobs of the entries that scored prompt rows (raw log-softmax
 * of each row, the logprob of the prompt token after its position, and the
 * top-N), into the step's prompt slots; seq 0 reports them in this step's
 * output. Each row depends only on its own logits: batch invariant. */
static void prompt_logprobs(vllm_engine *e, const scheduler_output *so, const step_batch *b) {
    int32_t slot = 0;
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        if (en->num_prompt_rows == 0) continue;
        seq *q = en->seq;
        int32_t num_top = q->req->params.prompt_logprobs;
        q->step_prompt_lps = slot;
        q->step_prompt_lps_start = en->first_prompt_row + 1;
        q->step_num_prompt_lps = en->num_prompt_rows;
        for (int32_t j = 0; j < en->num_prompt_rows; j++, slot++) {
            const float *row = e->logits + (size_t)(b->scored_start[i] + j) * (size_t)e->vocab;
            sample_result res = {.top = e->prompt_top};
            sampler_logprobs(row, e->vocab, q->tokens[en->first_prompt_row + j + 1], num_top, &res);
            int32_t *ids = e->prompt_top_ids + (size_t)slot * VLLM_MAX_LOGPROBS;
            float *lps = e->prompt_top_lps + (size_t)slot * VLLM_MAX_LOGPROBS;
            for (int32_t t = 0; t < res.num_top; t++) {
                ids[t] = res.top[t].token_id;
                lps[t] = res.top[t].logprob;
            }
            e->plps[slot] = (vllm_token_logprobs){.token_id = res.token_id,
                                                  .logprob = res.logprob,
                                                  .rank = res.rank,
                                                  .num_top = res.num_top,
                                                  .top_ids = ids,
                                                  .top_logprobs = lps};
        }
        q->prompt_lps_done = en->first_prompt_row + en->num_prompt_rows;
    }
}

/* Step 4: one sample_seq per sequence that samples, over its entry's rows
 * (after its prompt rows, if any); then each entry's committed count and
 * the public form of the logprobs. masks_ready: execute filled the masks
 * while the forward ran. */
static vllm_status sample(vllm_engine *e, const scheduler_output *so, const step_batch *b, bool masks_ready) {
    int32_t ns = 0;
    prompt_logprobs(e, so, b);
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        if (en->num_scored == 0 || en->seq->status == SEQ_STATUS_FINISHED) continue; /* finished in flight */
        int32_t row0 = b->scored_start[i] + en->num_prompt_rows; /* the first sampling row */
        float *rows = e->logits + (size_t)row0 * (size_t)e->vocab;
        const uint32_t *allowed = en->seq->matcher ? e->masks + (size_t)row0 * (size_t)e->mask_words : NULL;
        for (int32_t k = 0; k < en->num_samples; k++) {
            seq *q = scheduler_entry_seq(en, k);
            const request *r = q->req;
            int32_t slot = en->out_offset + (en->num_samples > 1 ? k : 0);
            bool want_lps = r->params.logprobs >= 0;
            for (int32_t j = 0; want_lps && j <= en->num_drafts; j++)
                e->results[slot + j].top = e->tops + (size_t)(slot + j) * VLLM_MAX_LOGPROBS;
            q->step_slot = slot;
            e->prior_tokens[ns] = q->num_tokens;
            e->sampled_seqs[ns] = q;
            e->samples[ns++] = (sample_seq){
                .params = &r->params,
                .rng = &q->rng,
                .tokens = q->tokens,
                .num_prompt = r->num_prompt_tokens,
                .num_tokens = q->num_tokens,
                .num_drafts = en->num_drafts,
                .logits = rows,
                .shared_logits = en->num_samples > 1,
                .allowed = allowed,
                .draft_probs = en->num_drafts > 0 && e->spec.proposer.draft_probs
                                   ? e->spec.proposer.draft_probs(e->spec.proposer.ud, r->id, q->index,
                                                                  q->tokens + q->num_tokens, en->num_drafts)
                                   : NULL,
                .out_tokens = e->committed + slot,
                .out_results = want_lps ? e->results + slot : NULL,
            };
        }
    }
    e->num_sampled = ns;
    if (e->grammars && !masks_ready) fill_masks(e, plan_masks(e, so, b));
    vllm_status rc = e->spec.verify ? e->spec.verify(e->spec.verify_ud, e->samples, ns)
                                    : sampler_sample_batch(e->sampler, e->samples, ns);
    if (rc == VLLM_ERR_INVALID && finish_masked_out(e, ns)) rc = VLLM_OK;
    if (rc != VLLM_OK) {
        for (int32_t i = 0; i < ns; i++)
            if (e->samples[i].rc != VLLM_OK) {
                vllm_error_prefix("request '%s'", e->sampled_seqs[i]->req->id);
                break;
            }
        return rc;
    }
    ns = 0;
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        e->num_committed[i] = 0;
        int32_t num_samples = en->num_scored && en->seq->status != SEQ_STATUS_FINISHED ? en->num_samples : 0;
        for (int32_t k = 0; k < num_samples; k++, ns++) {
            const sample_seq *x = &e->samples[ns];
            e->num_committed[i] += x->num_out;
            if (x->num_drafts > 0) { /* vLLM counts before stop checks: the verifier's accepted drafts */
                int32_t acc = x->num_out - 1 < x->num_drafts ? x->num_out - 1 : x->num_drafts;
                e->spec_num_drafts++;
                e->spec_num_draft_tokens += x->num_drafts;
                e->spec_num_accepted += acc;
                for (int32_t j = 0; j < acc; j++) e->spec_per_pos[j]++;
                spec_policy_update(&e->sampled_seqs[ns]->spec, x->num_drafts, acc);
            }
            for (int32_t j = 0; x->out_results && j < x->num_out; j++) {
                const sample_result *res = &x->out_results[j];
                size_t slot = (size_t)(x->out_results - e->results) + (size_t)j;
                int32_t *ids = e->top_ids + slot * VLLM_MAX_LOGPROBS;
                float *lps = e->top_lps + slot * VLLM_MAX_LOGPROBS;
                for (int32_t t = 0; t < res->num_top; t++) {
                    ids[t] = res->top[t].token_id;
                    lps[t] = res->top[t].logprob;
                }
                e->lps[slot] = (vllm_token_logprobs){.token_id = res->token_id,
                                                     .logprob = res->logprob,
                                                     .rank = res->rank,
                                                     .num_top = res->num_top,
                                                     .top_ids = ids,
                                                     .top_logprobs = lps};
            }
        }
    }
    return VLLM_OK;
}

/* Step 3's batch: so's sequences flattened into e->builder. */
static vllm_status build_batch(vllm_engine *e, const scheduler_output *so) {
    step_builder *b = e->builder;
    step_builder_reset(b);
    vllm_status rc;
    for (int32_t c = 0; c < so->num_copies; c++)
        if ((rc = step_builder_add_copy(b, so->copies[c].src, so->copies[c].dst)) != VLLM_OK) return rc;
    for (int32_t i = 0; i < so->num_seqs; i++) {
        const scheduled_seq *en = &so->seqs[i];
        const seq *q = en->seq;
        if ((rc = step_builder_add_seq(b, q->tokens + en->num_computed, en->num_new_tokens, en->num_computed,
                                       q->block_ids, q->max_blocks, q->num_blocks,
                                       en->num_scored + en->num_prompt_rows,
                                       q->req->lora_id)) != VLLM_OK)
            return rc;
    }
    return VLLM_OK;
}

/* Steps 3 and 4: the step batch, the forward, the sampling. */
static vllm_status execute(vllm_engine *e, const scheduler_output *so) {
    vllm_status rc = build_batch(e, so);
    if (rc != VLLM_OK) return rc;
    const step_batch *batch = step_builder_batch(e->builder);
    /* the masks depend only on the matchers (the committed output), not on
     * the logits: fill them while the forward runs, joined before sampling */
    bool side = e->grammars && e->mask_side;
    mask_batch mb = {e, e->mask_jobs};
    if (side) overlap_start(e->mask_side, stage_masks, &mb, plan_masks(e, so, batch));
    rc = executor_execute(e->exec, batch, e->logits);
    if (side) {
        threadpool *pool = executor_threadpool(e->exec);
        overlap_join(e->mask_side, pool && threadpool_num_threads(pool) <= e->info.num_threads ? pool : NULL);
    }
    if (rc != VLLM_OK) return rc;
    return sample(e, so, batch, side);
}

/* Steps 2 to 5 with pipeline parallelism (vLLM's batch queue,
 * max_concurrent_batches = pp): schedules and submits batches while fewer
 * than max_flights are in flight, each capped at its share of the
 * sequences so they spread over the stages; a sequence in flight is not
 * scheduled again (its next token is not known yet). Then collects the
 * oldest batch and samples and updates it as a plain step would: the
 * executor runs batches in order, each stage's KV only ever touched by its
 * batches in that order, so tokens are a plain step's. *done: the collected
 * schedule, or NULL if nothing was in flight. */
static vllm_status step_pipelined(vllm_engine *e, double now, const scheduler_output **done) {
    *done = NULL;
    vllm_status rc;
    while (e->num_flights < e->max_flights && scheduler_has_unfinished(e->sched)) {
        int32_t active = scheduler_num_running(e->sched) + scheduler_num_waiting(e->sched);
        scheduler_set_batch_cap(e->sched, (active + e->max_flights - 1) / e->max_flights);
        const scheduler_output *so = scheduler_schedule(e->sched, now);
        scheduler_set_batch_cap(e->sched, 0);
        if (so->num_seqs == 0) break;
        flight *f = &e->flights[(e->flight_head + e->num_flights) % e->max_flights];
        scheduled_seq *seqs = f->so.seqs;
        block_copy *copies = f->so.copies;
        f->so = *so;
        f->so.seqs = memcpy(seqs, so->seqs, (size_t)so->num_seqs * sizeof *seqs);
        f->so.copies = so->num_copies ? memcpy(copies, so->copies, (size_t)so->num_copies * sizeof *copies) : copies;
        if ((rc = build_batch(e, &f->so)) != VLLM_OK) return rc;
        const step_batch *b = step_builder_batch(e->builder);
        memcpy(f->scored_start, b->scored_start, (size_t)(so->num_seqs + 1) * sizeof *f->scored_start);
        if ((rc = executor_submit(e->exec, b)) != VLLM_OK) return rc;
        for (int32_t i = 0; i < f->so.num_seqs; i++) f->so.seqs[i].seq->in_flight = true;
        e->num_flights++;
    }
    if (e->num_flights == 0) return VLLM_OK;
    flight *f = &e->flights[e->flight_head];
    e->flight_head = (e->flight_head + 1) % e->max_flights;
    e->num_flights--;
    for (int32_t i = 0; i < f->so.num_seqs; i++) f->so.seqs[i].seq->in_flight = false;
    if ((rc = executor_collect(e->exec, e->logits)) != VLLM_OK) return rc;
    step_batch sb = {.num_seqs = f->so.num_seqs, .scored_start = f->scored_start};
    if ((rc = sample(e, &f->so, &sb, false)) != VLLM_OK) return rc;
    if ((rc = scheduler_update_output(e->sched, &f->so, e->committed, e->num_committed, now)) != VLLM_OK) return rc;
    if (e->grammars) accept_committed(e);
    *done = &f->so;
    return VLLM_OK;
}

/* Step 6: drafts for every running sequence that decodes, to be scored in
 * the next step. At most k, and never past max_tokens or max_model_len:
 * every draft could be committed, plus one token. A proposer's id outside
 * the vocabulary ends its drafts there. */
static void propose(vllm_engine *e) {
    const list_node *running = scheduler_running(e->sched);
    int32_t num = 0, K = e->spec.num_speculative_tokens;
    int32_t num_running = scheduler_num_running(e->sched);
    if (e->spec.disable_by_batch_size > 0 && num_running >= e->spec.disable_by_batch_size) return;
    spec_policy_batch pb;
    spec_policy_batch_init(&pb, K);
    for (const list_node *n = running->next; n != running && num < e->info.max_num_seqs; n = n->next) {
        seq *q = list_entry(n, seq, node);
        const request *r = q->req;
        if (!r->forked || q->num_drafts || q->num_computed_tokens != q->num_tokens - 1) continue;
        int32_t m = K;
        if (e->spec.adaptive && (m = spec_policy_num_drafts(&q->spec, m, seq_num_output_tokens(q))) <= 0) continue;
        int32_t room_out = r->max_tokens - seq_num_output_tokens(q) - 1;
        int32_t room_len = e->info.max_model_len - q->num_tokens - 1;
        if (m > room_out) m = room_out;
        if (m > room_len) m = room_len;
        if (m <= 0) continue;
        if (e->spec.adaptive) spec_policy_batch_add(&pb, &q->spec, m, q->num_tokens, room_out + 1);
        e->spec_reqs[num] = (spec_request){.view = {.request_id = r->id,
                                                    .index = q->index,
                                                    .tokens = q->tokens,
                                                    .num_tokens = q->num_tokens,
                                                    .num_prompt = r->num_prompt_tokens,
                                                    .params = &r->params,
                                                    .rng = &q->rng},
                                           .max_drafts = m,
                                           .drafts = e->drafts + (size_t)num * (size_t)K,
                                           .owner = q};
        num++;
    }
    if (num > 0 && e->spec.adaptive) { /* the batch's K: the step's cost model (spec/spec_policy.h) */
        int32_t waiting = scheduler_num_waiting(e->sched), decoding = num_running + waiting;
        if (decoding > e->info.max_num_seqs) decoding = e->info.max_num_seqs;
        int32_t bk = spec_policy_batch_k(&pb, &e->spec.cost, decoding);
        for (int32_t i = 0; i < num; i++)
            if (e->spec_reqs[i].max_drafts > bk) e->spec_reqs[i].max_drafts = bk;
        if (bk <= 0) num = 0;
    }
    if (num == 0) return;
    if (e->spec.proposer.propose_batch) {
        e->spec.proposer.propose_batch(e->spec.proposer.ud, e->spec_reqs, num);
    } else {
        for (int32_t i = 0; i < num; i++) {
            spec_request *x = &e->spec_reqs[i];
            x->num_drafts = e->spec.proposer.propose(e->spec.proposer.ud, &x->view, x->max_drafts, x->drafts);
        }
    }
    for (int32_t i = 0; i < num; i++) {
        spec_request *x = &e->spec_reqs[i];
        seq *q = x->owner;
        int32_t got = x->num_drafts > x->max_drafts ? x->max_drafts : x->num_drafts, ok = 0;
        while (ok < got && x->drafts[ok] >= 0 && x->drafts[ok] < e->vocab) ok++;
        q->spec.proposed_at = q->num_tokens;
        if (ok <= 0 || seq_reserve(q, q->num_tokens + ok) != VLLM_OK) continue;
        memcpy(q->tokens + q->num_tokens, x->drafts, (size_t)ok * sizeof *x->drafts);
        q->num_drafts = ok;
    }
}

/* Turns the scheduler's news into the step output and hands finished
 * requests to the reported list. */
/* The adapters of the sequences on list head (scheduler_running/waiting),
 * comma-joined into buf. */
static void lora_names(vllm_engine *e, const list_node *head, char *buf, size_t cap) {
    int32_t seen[64], n = 0;
    size_t len = 0;
    buf[0] = 0;
    for (const list_node *it = head->next; it != head; it = it->next) {
        int32_t id = list_entry(it, seq, node)->req->lora_id;
        bool dup = id == 0;
        for (int32_t i = 0; i < n && !dup; i++) dup = seen[i] == id;
        if (dup || n == 64) continue;
        seen[n++] = id;
        char name[256];
        if (!lora_table_name(e->loras, id, name, sizeof name)) continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? "," : "", name);
        if (w < 0 || (size_t)w >= cap - len) { /* cut: keep whole names only */
            buf[len] = 0;
            break;
        }
        len += (size_t)w;
    }
}

static vllm_status build_output(vllm_engine *e, const scheduler_output *so) {
    size_t nouts = 0, nevents = 0;
    seq *news = scheduler_take_news(e->sched);
    for (seq *q = news; q; q = q->news_next) {
        nouts++;
        nevents += (size_t)q->num_events;
    }
    vllm_status rc;
    if ((rc = buf_grow((void **)&e->outs, &e->cap_outs, nouts, sizeof *e->outs)) != VLLM_OK ||
        (rc = buf_grow((void **)&e->events, &e->cap_events, nevents, sizeof *e->events)) != VLLM_OK) {
        for (seq *q = news, *next; q; q = next) { /* drop the news rather than keep stale pointers */
            next = q->news_next;
            q->step_slot = -1;
            q->step_prompt_lps = -1;
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
        if (q->num_events) /* e->events is NULL until some step has one */
            memcpy(e->events + ev, q->events, (size_t)q->num_events * sizeof *q->events);
        *o = (vllm_seq_output){
            .request_id = r->id,
            .index = q->index,
            .num_new_tokens = nnew,
            .new_token_ids = q->tokens + q->num_tokens - nnew,
            .new_logprobs = nnew > 0 && r->params.logprobs >= 0 && q->step_slot >= 0 ? &e->lps[q->step_slot] : NULL,
            .finish_reason = q->status == SEQ_STATUS_FINISHED ? q->finish_reason : VLLM_FINISH_NONE,
            .stop_token_id = q->stop_token_id,
            .num_prompt_tokens = r->num_prompt_tokens,
            .num_cached_tokens = q->num_cached_tokens,
            .num_events = q->num_events,
            .events = q->num_events ? e->events + ev : NULL,
            .error = q->status == SEQ_STATUS_FINISHED && q->finish_reason == VLLM_FINISH_ERROR ? r->error : NULL,
        };
        if (q->step_prompt_lps >= 0) {
            o->prompt_logprobs_start = q->step_prompt_lps_start;
            o->num_prompt_logprobs = q->step_num_prompt_lps;
            o->prompt_logprobs = &e->plps[q->step_prompt_lps];
        }
        ev += q->num_events;
        q->step_slot = -1;
        q->step_prompt_lps = -1;
        seq_clear_news(q);
    }
    for (request *r; (r = scheduler_pop_finished(e->sched));) {
        forget_request(e, r);
        list_push_back(&e->reported, &r->node);
    }
    vllm_step_output *out = &e->out;
    out->timestamp = vllm_monotonic_time();
    out->num_outputs = (int32_t)nouts;
    out->outputs = e->outs;
    const block_pool *pool = kv_cache_manager_pool(e->kv);
    int32_t total = block_pool_num_blocks(pool), free_blocks = block_pool_num_free(pool);
    out->stats = (vllm_scheduler_stats){
        .num_running = scheduler_num_running(e->sched),
        .num_waiting = scheduler_num_waiting(e->sched) + e->num_fsm_waiting + e->num_kv_waiting,
        .kv_cache_usage = block_pool_usage(pool),
        .prefix_cache_queries = so ? so->prefix_cache_queries : 0,
        .prefix_cache_hits = so ? so->prefix_cache_hits : 0,
        .num_preemptions = so ? so->num_preemptions : 0,
        .num_scheduled_tokens = so ? so->num_tokens : 0,
        .num_scheduled_seqs = so ? so->num_seqs : 0,
        .num_blocks_total = total,
        .num_blocks_free = free_blocks,
        .num_kv_slots_empty = scheduler_num_empty_slots(e->sched),
        .num_spec_tokens = e->spec.num_speculative_tokens,
        .spec_num_drafts = e->spec_num_drafts,
        .spec_num_draft_tokens = e->spec_num_draft_tokens,
        .spec_num_accepted_tokens = e->spec_num_accepted,
        .external_prefix_cache_queries = so ? so->external_prefix_cache_queries : 0,
        .external_prefix_cache_hits = so ? so->external_prefix_cache_hits : 0,
    };
    if (e->loras) {
        lora_names(e, scheduler_running(e->sched), out->stats.running_lora_adapters,
                   sizeof out->stats.running_lora_adapters);
        lora_names(e, scheduler_waiting(e->sched), out->stats.waiting_lora_adapters,
                   sizeof out->stats.waiting_lora_adapters);
    }
    if (e->spec.num_speculative_tokens > 0)
        memcpy(out->stats.spec_num_accepted_tokens_per_pos, e->spec_per_pos,
               (size_t)e->spec.num_speculative_tokens * sizeof *e->spec_per_pos);
    int32_t used_blocks = total - free_blocks;
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

/* The step's transfers start before the forward: the worker reads the
 * loads while it runs, the runner's hooks wait for each layer's and copy out
 * each layer's saves (kv_connector.h). Without hooks, every layer's load
 * goes in first. */
static vllm_status connector_load(vllm_engine *e, const scheduler_output *so, const kv_connector_meta **meta) {
    vllm_status rc = kv_connector_build_connector_meta(e->conn, so, meta);
    if (rc != VLLM_OK || (rc = kv_connector_start_load_kv(e->conn, *meta)) != VLLM_OK) return rc;
    for (int32_t l = 0; !e->conn_layerwise && l < executor_num_layers(e->exec); l++)
        if ((rc = kv_connector_wait_for_layer_load(e->conn, l)) != VLLM_OK) return rc;
    return VLLM_OK;
}

/* After the forward (before scheduler_update frees finished sequences'
 * blocks): the saves stored, and the sequences whose loads failed their
 * check sent back to be recomputed, their step void. */
static vllm_status connector_finish(vllm_engine *e, const kv_connector_meta *meta, double now) {
    vllm_status rc;
    for (int32_t l = 0; !e->conn_layerwise && meta->num_saves > 0 && l < executor_num_layers(e->exec); l++)
        if ((rc = kv_connector_save_kv_layer(e->conn, meta, l)) != VLLM_OK) return rc;
    if ((rc = kv_connector_wait_for_save(e->conn, meta)) != VLLM_OK) return rc;
    seq *const *bad;
    int32_t n = kv_connector_get_seqs_with_load_errors(e->conn, &bad);
    for (int32_t i = 0; i < n; i++) {
        log_warn("request '%s': a loaded KV block failed its check; the step is recomputed", bad[i]->req->id);
        scheduler_recompute_seq(e->sched, bad[i], now);
    }
    return VLLM_OK;
}

static vllm_status step_failed(vllm_engine *e, vllm_status rc) {
    e->dead = true;
    log_error("engine step failed: %s", vllm_errmsg());
    return rc;
}

vllm_status vllm_engine_step(vllm_engine *e, const vllm_step_output **out) {
    *out = NULL;
    if (e->dead) return vllm_error(VLLM_ERR_INVALID, "engine is dead after a failed step");
    for (list_node *n = e->deferred.next, *next; n != &e->deferred; n = next) { /* their batches are back */
        next = n->next;
        request *r = list_entry(n, request, node);
        if (!request_in_flight(r)) {
            list_remove(n);
            request_free(r);
        }
    }
    free_requests_done(&e->reported, &e->deferred);
    if (e->loras) { /* unloaded adapters: their cached prefix blocks go */
        int32_t ids[16], n;
        while ((n = lora_table_take_removed(e->loras, ids, 16)) > 0)
            for (int32_t i = 0; i < n; i++) kv_cache_manager_drop_lora(e->kv, ids[i]);
    }
    e->spec_num_drafts = e->spec_num_draft_tokens = e->spec_num_accepted = 0;
    if (e->spec_per_pos) memset(e->spec_per_pos, 0, (size_t)e->spec.num_speculative_tokens * sizeof *e->spec_per_pos);
    const scheduler_output *so = NULL;
    if (e->num_fsm_waiting > 0) {
        promote_fsm(e, vllm_monotonic_time());
        if (e->num_fsm_waiting > 0 && !scheduler_has_unfinished(e->sched) && !scheduler_has_news(e->sched)) {
            wait_fsm(e);
            promote_fsm(e, vllm_monotonic_time());
        }
    }
    if (e->num_kv_waiting > 0) {
        promote_kv(e, vllm_monotonic_time());
        if (e->num_kv_waiting > 0 && !scheduler_has_unfinished(e->sched) && !scheduler_has_news(e->sched)) {
            usleep(1000); /* only fetches pending: poll them, do not spin */
            promote_kv(e, vllm_monotonic_time());
        }
    }
    e->num_sampled = 0;
    if (e->max_flights > 1 && e->spec.num_speculative_tokens == 0 && !e->conn) {
        vllm_status rc = step_pipelined(e, vllm_monotonic_time(), &so);
        if (rc != VLLM_OK) return step_failed(e, rc);
    } else if (scheduler_has_unfinished(e->sched)) {
        double now = vllm_monotonic_time();
        so = scheduler_schedule(e->sched, now);
        vllm_status rc;
        const kv_connector_meta *meta = NULL;
        if (e->conn && so->num_seqs > 0 && (rc = connector_load(e, so, &meta)) != VLLM_OK)
            return step_failed(e, rc);
        if (so->num_seqs > 0 && (rc = execute(e, so)) != VLLM_OK) return step_failed(e, rc);
        if (meta && (rc = connector_finish(e, meta, now)) != VLLM_OK) return step_failed(e, rc);
        if ((rc = scheduler_update(e->sched, e->committed, e->num_committed, now)) != VLLM_OK)
            return step_failed(e, rc);
        if (e->grammars && so->num_seqs > 0) accept_committed(e);
        if (e->spec.num_speculative_tokens > 0) propose(e);
    }
    vllm_status rc = build_output(e, so);
    if (rc != VLLM_OK) return rc;
    *out = &e->out;
    return VLLM_OK;
}

/* ---- LoRA adapters ------------------------------------------------------- */

vllm_status vllm_engine_load_lora(vllm_engine *e, const char *name, const char *path) {
    if (!e->loras) return vllm_error(VLLM_ERR_INVALID, "LoRA is not enabled (--enable-lora)");
    if (!name || !name[0] || !path || !path[0])
        return vllm_error(VLLM_ERR_INVALID, "LoRA: an adapter needs a name and a path");
    if (lora_table_has(e->loras, name))
        return vllm_error(VLLM_ERR_INVALID, "The lora adapter '%s' has already been loaded.", name);
    lora_adapter *a;
    vllm_status rc = lora_adapter_load(e->model, name, path, e->args.max_lora_rank, &a);
    if (rc == VLLM_OK) rc = lora_table_add(e->loras, a); /* takes a, also on failure */
    if (rc == VLLM_OK) log_info("LoRA adapter '%s' loaded from %s (rank %d, scale %g)", name, path, a->rank, a->scale);
    return rc;
}

vllm_status vllm_engine_unload_lora(vllm_engine *e, const char *name) {
    if (!e->loras) return vllm_error(VLLM_ERR_INVALID, "LoRA is not enabled (--enable-lora)");
    vllm_status rc = lora_table_remove(e->loras, name ? name : "", NULL);
    if (rc == VLLM_OK) log_info("LoRA adapter '%s' unloaded", name);
    return rc;
}

bool vllm_engine_has_lora(vllm_engine *e, const char *name) {
    return e->loras && name && lora_table_has(e->loras, name);
}

int32_t vllm_engine_list_loras(vllm_engine *e, vllm_lora_info *out, int32_t cap) {
    if (!e->loras) return 0;
    lora_info tmp[64];
    int32_t n = lora_table_list(e->loras, tmp, 64);
    for (int32_t i = 0; i < n && i < cap && i < 64; i++) {
        memcpy(out[i].name, tmp[i].name, sizeof out[i].name);
        memcpy(out[i].path, tmp[i].path, sizeof out[i].path);
        out[i].id = tmp[i].id;
        out[i].rank = tmp[i].rank;
    }
    return n;
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
