/*
 * vllm.h - the public C API of vllm.c: offline inference, the analogue of
 * vLLM's `LLM` class and `SamplingParams`.
 *
 *     vllm_engine_args args;
 *     vllm_engine_args_init(&args);
 *     args.model = "models/stories260K";
 *     vllm_engine *e;
 *     if (vllm_engine_create(&args, &e) != VLLM_OK) die(vllm_errmsg());
 *     vllm_sampling_params sp;
 *     vllm_sampling_params_init(&sp);          // vLLM's defaults
 *     vllm_engine_add_request(e, "req-0", prompt_ids, n, &sp, 0, NULL);
 *     while (vllm_engine_has_unfinished(e)) {
 *         const vllm_step_output *out;
 *         vllm_engine_step(e, &out);           // borrowed until the next step
 *         ...
 *     }
 *     vllm_engine_free(e);
 *
 * Everything here is token ids: text, chat templates and stop strings belong to
 * the front end (the CLI's generate, the server, the Python package), which
 * does them with vllm/text.h (tokenizer, chat template, output processor).
 */
#ifndef VLLM_VLLM_H
#define VLLM_VLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

#pragma GCC visibility push(default) /* libvllm.a exports only what include/vllm/ declares */

#define VLLM_MAX_STOP_TOKEN_IDS 32
#define VLLM_MAX_LOGIT_BIAS 64
#define VLLM_MAX_LOGPROBS 20         /* vLLM's --max-logprobs default */

/* SamplingParams with vLLM's defaults (vllm_sampling_params_init). */
typedef struct vllm_sampling_params {
    int32_t n;                       /* 1 */
    float temperature;               /* 1.0; < 1e-5 = greedy */
    float top_p;                     /* 1.0, in (0, 1] */
    int32_t top_k;                   /* 0 (or -1) = off */
    float min_p;                     /* 0.0 */
    float presence_penalty;          /* 0.0, [-2, 2] */
    float frequency_penalty;         /* 0.0, [-2, 2] */
    float repetition_penalty;        /* 1.0, > 0 */
    bool has_seed;
    uint64_t seed;
    int32_t max_tokens;              /* 16; -1 = up to max_model_len */
    int32_t min_tokens;              /* 0 */
    bool ignore_eos;                 /* false */
    int32_t stop_token_ids[VLLM_MAX_STOP_TOKEN_IDS];
    int32_t num_stop_token_ids;
    int32_t logprobs;                /* -1 = none, else top-N (0 = sampled only) */
    int32_t prompt_logprobs;         /* -1 = none, else top-N per prompt position (vLLM's
                                        prompt_logprobs; such a request skips prefix-cache hits) */
    int32_t num_logit_bias;
    int32_t logit_bias_ids[VLLM_MAX_LOGIT_BIAS];
    float logit_bias_values[VLLM_MAX_LOGIT_BIAS];
    /* allowed_token_ids: only these may be sampled (the others get -inf,
     * after the raw logprobs are taken, as vLLM); NULL / 0 = all. */
    const int32_t *allowed_token_ids;
    int32_t num_allowed_token_ids;
    /* bad_words as token sequences (vLLM's _bad_words_token_ids, which a
     * front end makes from the words): num_bad_words sequences back to back
     * in bad_words_ids, the i-th bad_words_lens[i] >= 1 long. A sequence's
     * last token gets -inf when the output so far ends with its others.
     * vllm_engine_add_request copies both lists; NULL / 0 = none. */
    const int32_t *bad_words_ids;
    const int32_t *bad_words_lens;
    int32_t num_bad_words;
} vllm_sampling_params;

void vllm_sampling_params_init(vllm_sampling_params *p);
/* Checks ranges as vLLM does; the message names the field and the value. */
vllm_status vllm_sampling_params_validate(const vllm_sampling_params *p);

/* ---- engine ---------------------------------------------------------- */

typedef enum vllm_scheduling_policy {
    VLLM_SCHEDULING_FCFS = 0,
    VLLM_SCHEDULING_PRIORITY,        /* lower value first, ties by arrival */
} vllm_scheduling_policy;

/* --speculative-config (vLLM's SpeculativeConfig): method "ngram" (prompt
 * lookup, no draft model) or "draft_model" (a smaller model, greedy drafts). Drafts are verified exactly:
 * the committed tokens are the ones decoding without drafts gives, greedy
 * and seeded alike (sampler.h), a stronger promise than vLLM's rejection
 * sampler, which is equal only in distribution. */
typedef enum vllm_spec_method {
    VLLM_SPEC_METHOD_NONE = 0,       /* speculative decoding off */
    VLLM_SPEC_METHOD_NGRAM,
    VLLM_SPEC_METHOD_DRAFT_MODEL,    /* a smaller model with the same vocabulary (spec/draft_model.h) */
} vllm_spec_method;

#define VLLM_MAX_SPEC_TOKENS 128     /* vLLM's rejection sampler's MAX_SPEC_LEN */

typedef struct vllm_speculative_config {
    vllm_spec_method method;
    int32_t num_speculative_tokens;  /* k, 1..VLLM_MAX_SPEC_TOKENS: drafts per sequence per step at most */
    int32_t prompt_lookup_min;       /* 0 = prompt_lookup_max, or 5 if both 0 (vLLM's defaults) */
    int32_t prompt_lookup_max;       /* 0 = prompt_lookup_min, or 5 if both 0 */
    int32_t disable_by_batch_size;   /* 0 = never; else (>= 2) no drafts while this many sequences run */
    char model[1024];                /* draft_model: the draft model's path */
    bool adaptive;                   /* vllm.c only: fewer drafts for a sequence that keeps missing
                                        and in a big batch (spec/spec_policy.h); false: always
                                        num_speculative_tokens. The CLI's "adaptive" key, default true */
    bool exact_acceptance;           /* draft_model, "draft_token_acceptance_method": "exact": greedy
                                        drafts, committed tokens those of one-token decoding; false
                                        ("rejection_sampler", vLLM's): sampled requests' drafts drawn
                                        from the draft's q, accepted by min(1, p/q) */
} vllm_speculative_config;

/* EngineArgs with vLLM's flag names (vllm_engine_args_init sets defaults). */
typedef struct vllm_engine_args {
    const char *model;               /* HF model directory */
    const char *tokenizer;           /* NULL = model */
    int32_t max_model_len;           /* 0 = max_position_embeddings */
    int32_t block_size;              /* 16 */
    int64_t kv_cache_memory_bytes;   /* 0 = a share of free RAM (logged) */
    int32_t num_gpu_blocks_override; /* 0 = none */
    bool enable_prefix_caching;      /* true */
    int32_t max_num_seqs;            /* 256 */
    int32_t max_num_batched_tokens;  /* 0 = default (4096 offline) */
    int32_t long_prefill_token_threshold; /* 0 = off */
    vllm_scheduling_policy scheduling_policy; /* fcfs */
    uint64_t seed;                   /* 0: seeds requests that give none */
    int32_t num_threads;             /* 0 = online CPUs */
    const char *generation_config;   /* "auto" (model dir), "vllm" (ignore), or a dir */
    vllm_speculative_config speculative_config; /* method NONE: off */
    /* KV cache element type (vLLM's --kv-cache-dtype): "auto" (NULL too) =
     * the model's dtype as vLLM picks it on CPU (bfloat16 for a float32 or
     * bfloat16 checkpoint, float16 for a float16 one; float16 for a GGUF
     * file, llama.cpp's default cache type; bfloat16 for Gemma 3, which
     * vLLM never runs in float16), "bfloat16", "float16", "fp8" (=
     * "fp8_e4m3"), "fp8_e4m3", "fp8_e5m2" (scaled by the checkpoint's
     * k_scale/v_scale, else 1.0), or vllm.c's "float32" (exact; what
     * earlier versions always stored). See docs/kv_cache_dtype.md. */
    const char *kv_cache_dtype;
    /* Compute dtype (vLLM's --dtype): "auto" (NULL too) = the model's own:
     * a BF16 model (torch_dtype, or a GGUF file's BF16 weights) computes
     * its BF16 matmuls with activations rounded to BF16 (vdpbf16ps where
     * the CPU has AVX512-BF16, an exact emulation elsewhere), everything
     * else FP32; "bfloat16" the same for BF16 weights; "float32" / "float"
     * FP32 activations for every weight type (vllm.c before this option);
     * "float16" / "half": FP32 activations (no F16 arithmetic on CPUs).
     * F16/F32 weights stay on the FP32 path under every choice (not
     * converted to BF16 yet). See docs/dtype.md. */
    const char *dtype;
    /* Structured outputs: a request whose grammar has not compiled this many
     * seconds after it was added finishes with VLLM_FINISH_ERROR (the
     * compile goes on and its result is cached). 0 = 5 s. */
    double structured_outputs_compile_timeout;
    /* LoRA (vLLM's --enable-lora ...; docs/lora.md): adapters in PEFT's
     * layout, loaded with vllm_engine_load_lora and named by a request's
     * vllm_request_opts.lora_name. max_loras: distinct adapters in one step
     * (1); max_lora_rank: the largest rank accepted (16); max_cpu_loras:
     * adapters kept loaded at once (0 = no limit beyond memory). */
    bool enable_lora;
    int32_t max_loras;
    int32_t max_lora_rank;
    int32_t max_cpu_loras;
    /* KV connector (docs/disagg.md): vLLM's --kv-transfer-config JSON
     * (kv_connector SharedStorageConnector | OffloadingConnector, kv_role,
     * kv_connector_extra_config), NULL = none; and --kv-offloading-size, GiB
     * of host RAM for evicted prefix blocks (0 = off). */
    const char *kv_transfer_config;
    double kv_offloading_size;
    /* Tensor / pipeline parallel ranks (vLLM's -tp / -pp); 0 or 1 = one. More
     * than one needs the MPI executor that `vllmc serve` installs (dist/);
     * vllm_engine_create refuses it otherwise. */
    int32_t tensor_parallel_size;
    int32_t pipeline_parallel_size;
} vllm_engine_args;

void vllm_engine_args_init(vllm_engine_args *a);

typedef struct vllm_engine vllm_engine;

vllm_status vllm_engine_create(const vllm_engine_args *args, vllm_engine **out);
void vllm_engine_free(vllm_engine *e);

/* Structured outputs (vLLM's StructuredOutputsParams): one kind of
 * constraint that every sampled token must keep the output inside. The
 * tokens are matched by their bytes against a grammar compiled from the
 * constraint (src/structured/structured.h); EOS is allowed exactly where the
 * grammar can end, and a sequence whose grammar has ended finishes with
 * STOP. The engine compiles off its thread and caches by constraint: until
 * the grammar is ready the request waits (vLLM's WAITING_FOR_FSM) while the
 * others run; a constraint that does not compile, or not within
 * structured_outputs_compile_timeout, finishes the request with
 * VLLM_FINISH_ERROR and the compiler's message in vllm_seq_output.error (or
 * fails vllm_engine_add_request at once when that spec is known to fail).
 * Tokens stay batch invariant: a mask depends on the sequence's own output. */
typedef enum vllm_structured_kind {
    VLLM_STRUCTURED_NONE = 0,        /* unconstrained */
    VLLM_STRUCTURED_JSON,            /* text: a JSON schema */
    VLLM_STRUCTURED_JSON_OBJECT,     /* any JSON object; text unused */
    VLLM_STRUCTURED_REGEX,           /* text: a regular expression, matched whole */
    VLLM_STRUCTURED_CHOICE,          /* text: a JSON array of strings; the output is one of them */
    VLLM_STRUCTURED_GRAMMAR,         /* text: a GBNF grammar (start rule `root`) */
    VLLM_STRUCTURED_STRUCTURAL_TAG,  /* text: vLLM's structural_tag JSON */
} vllm_structured_kind;

typedef struct vllm_structured_outputs {
    vllm_structured_kind kind;
    const char *text;                /* copied; need not be NUL-terminated when len > 0 */
    size_t len;                      /* 0 = strlen(text) */
    bool disable_any_whitespace;     /* JSON kinds: no whitespace between tokens */
    const char *whitespace_pattern;  /* JSON kinds: a regex for whitespace; NULL = JSON's */
} vllm_structured_outputs;

/* Per-request options beyond sampling; NULL = defaults. */
typedef struct vllm_request_opts {
    int32_t priority;                /* 0; used by the priority policy */
    double arrival_time;             /* monotonic seconds; 0 = now */
    const char *cache_salt;          /* NULL = none; part of every block hash */
    vllm_structured_outputs structured_outputs; /* kind NONE (zeroed) = unconstrained */
    const char *lora_name;           /* NULL = the base model; else a loaded adapter's name */
    /* kv_transfer_params do_remote_prefill (docs/disagg.md): the producer's
     * KV server; with a TcpConnector consumer the request waits
     * (WAITING_FOR_REMOTE_KVS) while its prompt's blocks are fetched from
     * there. NULL = none. */
    const char *kv_remote_host;
    int32_t kv_remote_port;
} vllm_request_opts;

/* Adds a request (n sequences per sp->n). request_id is copied and must be
 * unique among unfinished requests. Validates params and length against
 * max_model_len; the error names what is wrong. */
vllm_status vllm_engine_add_request(vllm_engine *e, const char *request_id,
                                    const int32_t *prompt_ids, int32_t num_prompt_ids,
                                    const vllm_sampling_params *sp, const vllm_request_opts *opts);
/* Aborts every sequence of a request at once, freeing its blocks; its last
 * output carries finish_reason ABORT. VLLM_ERR_NOT_FOUND if unknown/finished. */
vllm_status vllm_engine_abort_request(vllm_engine *e, const char *request_id);
/* Finishes one sequence with reason STOP (the front end matched a stop string). */
vllm_status vllm_engine_stop_sequence(vllm_engine *e, const char *request_id, int32_t index);

/* True while a request is unfinished or a finish (e.g. an abort between
 * steps) has not yet been reported in a step output: keep stepping until false. */
bool vllm_engine_has_unfinished(const vllm_engine *e);

typedef enum vllm_finish_reason {
    VLLM_FINISH_NONE = 0,            /* still running */
    VLLM_FINISH_STOP,                /* EOS, stop token id, stop string */
    VLLM_FINISH_LENGTH,              /* max_tokens or max_model_len */
    VLLM_FINISH_ABORT,
    VLLM_FINISH_ERROR,               /* the request could not run: vllm_seq_output.error says why */
} vllm_finish_reason;

/* vLLM's finish_reason names: "stop", "length", "abort", "error"; NULL for NONE. */
const char *vllm_finish_reason_str(vllm_finish_reason r);

typedef enum vllm_event_type {
    VLLM_EVENT_QUEUED = 1,
    VLLM_EVENT_SCHEDULED,
    VLLM_EVENT_PREEMPTED,
} vllm_event_type;

typedef struct vllm_event { vllm_event_type type; double timestamp; } vllm_event;

/* Logprobs of one generated token: the sampled one and the top-N. */
typedef struct vllm_token_logprobs {
    int32_t token_id;
    float logprob;
    int32_t rank;                    /* 1-based */
    int32_t num_top;
    const int32_t *top_ids;          /* (num_top) */
    const float *top_logprobs;       /* (num_top) */
} vllm_token_logprobs;

/* What one sequence produced this step. Pointers are borrowed until the next step. */
typedef struct vllm_seq_output {
    const char *request_id;
    int32_t index;                   /* 0..n-1 */
    int32_t num_new_tokens;
    const int32_t *new_token_ids;
    const vllm_token_logprobs *new_logprobs; /* (num_new_tokens) or NULL */
    vllm_finish_reason finish_reason;
    int32_t stop_token_id;           /* the stop_token_ids/EOS id that stopped it, else -1 */
    int32_t num_prompt_tokens;
    int32_t num_cached_tokens;       /* prompt tokens served by the prefix cache */
    int32_t num_events;
    const vllm_event *events;        /* QUEUED/SCHEDULED/PREEMPTED since the last output */
    const char *error;               /* finish_reason ERROR: the message; else NULL */
    /* prompt_logprobs: the prompt tokens at positions prompt_logprobs_start ..
     * + num_prompt_logprobs - 1 (>= 1; each scored by the logits of the
     * position before it, raw log-softmax), computed this step; top ids are
     * the top-N by rank. Sequence 0 only, before any output token, in order
     * over the steps of its prefill; each position once (not again after a
     * preemption). */
    int32_t prompt_logprobs_start;
    int32_t num_prompt_logprobs;
    const vllm_token_logprobs *prompt_logprobs; /* (num_prompt_logprobs) or NULL */
} vllm_seq_output;

/* Scheduler stats of one step (what the metrics and the stats log line are built from). */
typedef struct vllm_scheduler_stats {
    int32_t num_running, num_waiting;
    float kv_cache_usage;            /* used blocks / total blocks */
    int64_t prefix_cache_queries, prefix_cache_hits; /* tokens, this step */
    int32_t num_preemptions;         /* this step */
    int32_t num_scheduled_tokens;    /* tokens in this step's forward */
    int32_t num_scheduled_seqs;
    int32_t num_blocks_total, num_blocks_free;
    /* KV slots after this step (a slot holds one token's K/V in one block):
     * used = (num_blocks_total - num_blocks_free) * block_size, the slots of
     * every block a sequence holds; empty = those of them with no computed
     * token yet: the unfilled tail of each running sequence's last block
     * (a partially filled block shared by n > 1 siblings before copy-on-write
     * counts once per sibling, so this can only overstate). */
    int64_t num_kv_slots_used, num_kv_slots_empty;
    /* Speculative decoding in this step (vLLM's SpecDecodingStats), all 0
     * when it is off: sequences whose drafts were scored, their drafts, the
     * drafts accepted (before stop checks), and per draft position j how
     * many sequences accepted the draft at j. */
    int32_t num_spec_tokens;         /* k; the per-position entries in use */
    int32_t spec_num_drafts, spec_num_draft_tokens, spec_num_accepted_tokens;
    /* by value, like every field here, so the stats can be copied across threads */
    int32_t spec_num_accepted_tokens_per_pos[VLLM_MAX_SPEC_TOKENS];
    /* KV connector lookups this step (tokens): asked, and supplied from
     * outside the pool (vLLM 0.11.1's external prefix cache); 0 without one */
    int64_t external_prefix_cache_queries, external_prefix_cache_hits;
    /* LoRA (args.enable_lora; else ""): the adapters of the running and of
     * the waiting sequences after this step, names comma-joined in order of
     * first appearance (vllm:lora_requests_info's labels); cut at 255 bytes */
    char running_lora_adapters[256];
    char waiting_lora_adapters[256];
} vllm_scheduler_stats;

typedef struct vllm_step_output {
    double timestamp;                /* monotonic; the NEW_TOKENS time of this step */
    int32_t num_outputs;
    const vllm_seq_output *outputs;  /* sequences with news (tokens, events or finish) */
    vllm_scheduler_stats stats;
} vllm_step_output;

/* Runs one engine step (schedule, forward, sample, update). *out is borrowed
 * until the next call. A step with nothing to do returns an empty output.
 * After a failed forward the engine is dead: every later step fails too. */
vllm_status vllm_engine_step(vllm_engine *e, const vllm_step_output **out);

/* ---- beam search (vLLM's BeamSearchParams, LLM.beam_search) --------------- */

typedef struct vllm_beam_search_params {
    int32_t beam_width;              /* 1..VLLM_MAX_LOGPROBS / 2 (each step asks for 2 x width logprobs) */
    int32_t max_tokens;              /* >= 1 */
    bool ignore_eos;                 /* false */
    float temperature;               /* 0.0: each step's sampled token is the top one */
    float length_penalty;            /* 1.0: score = cumulative_logprob / len ** length_penalty */
} vllm_beam_search_params;

void vllm_beam_search_params_init(vllm_beam_search_params *p); /* width 1, 16 tokens, vLLM's defaults */

typedef struct vllm_beam {
    int32_t *token_ids;              /* the generated tokens, EOS included when it ended there */
    int32_t num_tokens;
    double cumulative_logprob;
    double score;                    /* what the beams are ranked by (vllm/beam_search.py) */
    vllm_finish_reason finish_reason; /* STOP (an EOS) or LENGTH */
    int32_t stop_token_id;           /* the EOS id, else -1 */
} vllm_beam;

/* Beam search over this engine (engine/beam_search.h says how): one-token
 * requests "<request_id>-<step>-<beam>" stepped here until they finish, so
 * the engine must have no other unfinished requests (VLLM_ERR_INVALID). The
 * best beams first into *out (num_out <= beam_width), freed with
 * vllm_beams_free. */
vllm_status vllm_engine_beam_search(vllm_engine *e, const char *request_id, const int32_t *prompt_ids,
                                    int32_t num_prompt_ids, const vllm_beam_search_params *p,
                                    vllm_beam **out, int32_t *num_out);
void vllm_beams_free(vllm_beam *beams, int32_t n);

/* ---- what the engine was built with, its KV pool, LLM.generate ----------- */

/* What the engine was built with (for /v1/models, cache_config_info, logs). */
typedef struct vllm_engine_info {
    int32_t max_model_len;
    int32_t block_size;
    int32_t num_gpu_blocks;          /* KV pool size in blocks */
    int64_t kv_cache_memory_bytes;   /* bytes of that pool */
    const char *kv_cache_dtype;      /* as configured: "auto", "fp8", ... (cache_config_info's
                                      * cache_dtype); a static string */
    const char *kv_cache_storage_dtype; /* what the pool holds: "float32", "bfloat16", "float16",
                                      * "fp8_e4m3" or "fp8_e5m2"; a static string */
    int64_t kv_cache_bytes_per_token; /* K and V of every layer for one token in that type */
    bool enable_prefix_caching;
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    int32_t long_prefill_token_threshold;
    vllm_scheduling_policy scheduling_policy;
    int32_t vocab_size;
    int32_t bos_token_id;            /* -1 if none */
    int32_t num_eos_token_ids;
    int32_t eos_token_ids[8];        /* config.json + generation_config.json */
    int32_t num_threads;
    vllm_speculative_config speculative_config; /* with defaults applied; method NONE: off */
} vllm_engine_info;

void vllm_engine_get_info(const vllm_engine *e, vllm_engine_info *info);

/* vLLM's defaults overridden by the model's generation_config.json
 * (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens as
 * max_tokens) unless args.generation_config is "vllm": the analogue of
 * LLM.get_default_sampling_params() with --generation-config auto. */
void vllm_engine_default_sampling_params(const vllm_engine *e, vllm_sampling_params *sp);

/* KV pool occupancy over the steps since create or the last reset (for
 * `vllmc bench throughput`'s KV line): from each step's
 * vllm_scheduler_stats, the step with the most blocks in use and the sums of
 * used and empty slots over all steps (empty / used = the share of allocated
 * slots that held nothing, averaged over steps weighted by allocation). */
typedef struct vllm_kv_cache_report {
    int32_t num_blocks, block_size;
    int64_t num_steps;
    int32_t peak_used_blocks;        /* at the end of the step with the most in use */
    int64_t peak_empty_slots;        /* empty slots at that step */
    int64_t sum_used_slots, sum_empty_slots;
} vllm_kv_cache_report;

void vllm_engine_get_kv_cache_report(const vllm_engine *e, vllm_kv_cache_report *report);
void vllm_engine_reset_kv_cache_report(vllm_engine *e);

/* ---- LoRA adapters (args.enable_lora) --------------------------------------
 * Safe from any thread, concurrently with vllm_engine_step on another: the
 * adapter table has its own lock. A request holds its adapter until it
 * finishes, so unloading never disturbs running requests; new requests can
 * no longer name it, and its cached prefix blocks are dropped at the next
 * step. Errors: VLLM_ERR_INVALID (LoRA off, name taken: vLLM's "The lora
 * adapter '<name>' has already been loaded."), VLLM_ERR_NOT_FOUND (unload of
 * an unknown name: "The lora adapter '<name>' cannot be found."), or the
 * loader's message naming the file and the problem. */
vllm_status vllm_engine_load_lora(vllm_engine *e, const char *name, const char *path);
vllm_status vllm_engine_unload_lora(vllm_engine *e, const char *name);

typedef struct vllm_lora_info {
    char name[256];
    char path[1024];
    int32_t id;                      /* > 0; never reused */
    int32_t rank;
} vllm_lora_info;

/* True if an adapter called name is loaded (false with LoRA off). */
bool vllm_engine_has_lora(vllm_engine *e, const char *name);

/* The loaded adapters in load order: fills up to cap, returns how many there are. */
int32_t vllm_engine_list_loras(vllm_engine *e, vllm_lora_info *out, int32_t cap);

/* Drops every cached prefix block (vLLM's reset_prefix_cache). */
void vllm_engine_reset_prefix_cache(vllm_engine *e);

/* One sequence of a finished request (vllm_engine_generate). */
typedef struct vllm_sequence_result {
    int32_t num_tokens;
    int32_t *token_ids;              /* (num_tokens) */
    float *logprobs;                 /* (num_tokens) sampled tokens' logprobs, or NULL (logprobs < 0) */
    vllm_finish_reason finish_reason;
    int32_t stop_token_id;
} vllm_sequence_result;

typedef struct vllm_request_result {
    int32_t num_prompt_tokens;
    int32_t num_cached_tokens;
    int32_t n;
    vllm_sequence_result *seqs;      /* (n) */
} vllm_request_result;

/* LLM.generate over token ids: adds num_prompts requests at once (ids
 * "gen-<i>"), steps until all finish, and returns one result per prompt in
 * input order. sp and opts are arrays of num_prompts (opts may be NULL).
 * The engine must have no other unfinished requests. On failure nothing is
 * left in the engine. Free with vllm_request_results_free. */
vllm_status vllm_engine_generate(vllm_engine *e, int32_t num_prompts,
                                 const int32_t *const *prompt_ids, const int32_t *num_prompt_ids,
                                 const vllm_sampling_params *sp, const vllm_request_opts *opts,
                                 vllm_request_result **results);
void vllm_request_results_free(vllm_request_result *results, int32_t num_prompts);

/* Monotonic clock the engine stamps events with (seconds). */
double vllm_monotonic_time(void);

#pragma GCC visibility pop
#endif
