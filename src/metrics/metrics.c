/*
 * metrics.c - see metrics.h.
 *
 * Three pieces, as in vLLM V1 (vllm/v1/metrics/loggers.py):
 *   - the Prometheus stat logger: the vllm:* families registered once at
 *     create, with their (model_name, engine) series looked up once, and a
 *     record step that adds one stats_iteration and one scheduler-stats
 *     sample to them;
 *   - the logging stat logger: prompt/generation token counts since the
 *     last log line, the latest scheduler stats, and vLLM's
 *     PrefixCachingMetrics window (per-step (lookups, queries, hits) triples,
 *     oldest dropped while the window holds more than 1000 lookups);
 *   - HTTP metrics as prometheus_fastapi_instrumentator's defaults.
 *
 * Locks: req_mu guards the request table (stats.c) and the iteration
 * scratch; the registry's value lock also guards the log state and the
 * autoscaling state. on_step takes req_mu, then the value lock; nothing
 * takes them in the other order.
 *
 * Beyond vLLM (documented in docs/metrics.md): vllm:kv_cache_capacity_tokens,
 * vllm:kv_cache_headroom_tokens and vllm:queue_delay_estimate_seconds, the
 * saturation signals an autoscaler needs and vLLM 0.11 does not export.
 */
#include "metrics/metrics.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "metrics/process.h"
#include "metrics/prom.h"
#include "metrics/stats.h"

#define PREFIX_WINDOW_REQUESTS 1000
#define PREFIX_RING 1024             /* > PREFIX_WINDOW_REQUESTS + 1 entries */
#define FINISH_WINDOW_S 60           /* completion-rate window of the queue-delay estimate */

static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                      0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,
                                     0.3,  0.4,   0.5,  0.75,  1.0,  2.5,  5.0,
                                     7.5,  10.0,  20.0, 40.0,  80.0};
static const double latency_buckets[] = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                         5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double iteration_buckets[] = {1,   8,    16,   32,   64,   128,  256,
                                           512, 1024, 2048, 4096, 8192, 16384};
static const double n_buckets[] = {1, 2, 5, 10, 20};
static const double http_highr_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
                                            0.75, 1,     1.5,  2,     2.5, 3,    3.5,
                                            4,    4.5,   5,    7.5,   10,  30,   60};
static const double http_lowr_buckets[] = {0.1, 0.5, 1};

#define COUNT(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

/* The instrumentator's excluded_handlers in vLLM's api_server (regexes
 * searched in the handler; all are plain strings). */
static const char *const http_excluded[] = {"/metrics", "/health", "/load",
                                            "/ping",    "/version", "/server_info"};

typedef struct prefix_entry { int64_t requests, queries, hits; } prefix_entry;

struct metrics {
    metrics_config cfg;
    metrics_forward fwd;             /* fwd.ud != NULL: every call goes there (metrics_create_forward) */
    char *model_name, *hidden_version, *cache_dtype, *hash_algo;
    char engine[16];
    bool show_hidden;

    prom_registry *reg;
    prom_family *lora_info;          /* vllm:lora_requests_info, or NULL (LoRA off) */
    /* scheduler state */
    prom_series *running, *waiting, *kv_usage, *prefix_queries, *prefix_hits;
    prom_series *preemptions, *prompt_tokens, *generation_tokens;
    prom_series *success[4];         /* by vllm_finish_reason (STOP, LENGTH, ABORT) */
    /* request histograms */
    prom_series *h_prompt, *h_generation, *h_iteration, *h_max_gen, *h_n, *h_max_tokens;
    prom_series *h_ttft, *h_tpot_alias, *h_itl, *h_req_tpot;
    prom_series *h_e2e, *h_queue, *h_inference, *h_prefill, *h_decode;
    /* hidden (deprecated) names, NULL unless shown */
    prom_series *gpu_cache_usage, *gpu_prefix_queries, *gpu_prefix_hits;
    prom_series *swapped, *cpu_cache_usage, *gpu_prefix_hit_rate, *h_time_in_queue;
    /* speculative decoding (num_speculative_tokens > 0) */
    prom_series *spec_drafts, *spec_draft_tokens, *spec_accepted;
    prom_series **spec_per_pos;      /* (num_speculative_tokens) position "0".."k-1" */
    /* vllm.c additions */
    prom_series *kv_capacity, *kv_headroom, *queue_delay;
    /* KV connector (vLLM 0.11.1's external prefix cache; NULL without one) */
    prom_series *ext_queries, *ext_hits;
    int64_t ext_total_queries, ext_total_hits; /* under the registry lock: the log line's rate */
    /* HTTP */
    prom_family *f_http_total, *f_http_req_size, *f_http_resp_size, *f_http_lowr;
    prom_series *http_highr;

    metrics_observer obs;            /* under req_mu */

    /* request table */
    pthread_mutex_t req_mu;
    stats *st;
    stats_iteration it;

    /* under the registry lock: log line and autoscaling state */
    int64_t log_prompt_tokens, log_generation_tokens;
    int64_t log_spec_drafts, log_spec_draft_tokens, log_spec_accepted;
    int64_t *log_spec_per_pos;       /* (num_speculative_tokens) */
    double last_log_time, last_prompt_tp, last_generation_tp;
    int32_t last_running, last_waiting;
    double last_kv_usage;
    prefix_entry prefix_ring[PREFIX_RING];
    int32_t prefix_head, prefix_len;
    int64_t window_requests, window_queries, window_hits; /* sums over the ring */
    int64_t finish_second[FINISH_WINDOW_S]; /* finished sequences per front-end second */
    int64_t finish_count[FINISH_WINDOW_S];
    double start_time, last_finish_time; /* front-end clock; start: first step or scrape */
    bool has_start, any_finish;

    /* data parallel: engines 1.. (metrics_add_engine); an engine's own points at m */
    metrics *owner;
    metrics **engines;               /* (num_engines), by add order */
    int32_t num_engines;

    /* logger thread */
    pthread_t logger;
    bool logger_running, logger_stop;
    pthread_mutex_t log_mu;
    pthread_cond_t log_cv;
};

void metrics_config_init(metrics_config *c) {
    memset(c, 0, sizeof *c);
    c->model_name = "";
    c->max_model_len = 2048;
    c->log_stats = true;
    c->log_stats_interval = 10.0;
    c->block_size = 16;
    c->gpu_memory_utilization = 0.9;
    c->swap_space = 4;
    c->cache_dtype = "auto";
    c->enable_prefix_caching = true;
    c->prefix_caching_hash_algo = "sha256";
}

vllm_status metrics_parse_hidden_version(const char *version, bool *show) {
    *show = false;
    if (!version) return VLLM_OK;
    const char *p = version;
    bool ok = *p != 0;
    while (ok && *p) {
        if (*p < '0' || *p > '9') ok = false;
        while (*p >= '0' && *p <= '9') p++;
        if (*p == '.' && p[1]) p++;
        else if (*p) ok = false;
    }
    if (!ok)
        return vllm_error(VLLM_ERR_INVALID,
                          "--show-hidden-metrics-for-version: '%s' is not a version (like 0.10)",
                          version);
    *show = !strcmp(version, "0.10"); /* vLLM 0.11: only the previous minor */
    return VLLM_OK;
}

vllm_status metrics_log_interval_from_env(double *seconds) {
    *seconds = 10.0;
    const char *s = getenv("VLLM_LOG_STATS_INTERVAL");
    if (!s || !*s) return VLLM_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end == ' ') end++;
    if (end == s || *end || errno || isnan(v))
        return vllm_error(VLLM_ERR_INVALID, "VLLM_LOG_STATS_INTERVAL: '%s' is not a number", s);
    if (v > 0) *seconds = v; /* vLLM: a non-positive value means the default */
    return VLLM_OK;
}

/* vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... <= max. */
static int32_t buckets_1_2_5(int64_t max, double *out) {
    int32_t n = 0;
    for (int64_t scale = 1; n < PROM_MAX_BUCKETS - 3; scale *= 10) {
        static const int64_t m[3] = {1, 2, 5};
        for (int k = 0; k < 3; k++) {
            if (m[k] * scale > max) return n;
            out[n++] = (double)(m[k] * scale);
        }
    }
    return n;
}

/* ---- create ------------------------------------------------------------- */

typedef struct builder {
    metrics *m;
    vllm_status rc;
} builder;

/* A family with the (model_name, engine) labels and its one series. */
static prom_series *add_std(builder *b, const char *name, const char *help, prom_type type,
                            const double *buckets, int32_t num_buckets) {
    if (b->rc != VLLM_OK) return NULL;
    static const char *const labels[] = {"model_name", "engine"};
    prom_family *f;
    prom_series *s = NULL;
    b->rc = prom_family_add(b->m->reg, name, help, type, labels, 2, buckets, num_buckets, &f);
    if (b->rc != VLLM_OK) return NULL;
    const char *values[] = {b->m->model_name, b->m->engine};
    b->rc = prom_series_get(b->m->reg, f, values, &s);
    return s;
}

static prom_family *add_family(builder *b, const char *name, const char *help, prom_type type,
                               const char *const *labels, int32_t num_labels,
                               const double *buckets, int32_t num_buckets) {
    if (b->rc != VLLM_OK) return NULL;
    prom_family *f = NULL;
    b->rc = prom_family_add(b->m->reg, name, help, type, labels, num_labels, buckets, num_buckets, &f);
    return f;
}

/* Python's str() of a float that came in as an int or a float literal. */
static void fmt_py_number(char *buf, size_t cap, double v) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, cap, "%lld", (long long)v);
    else {
        char tmp[32];
        snprintf(buf, cap, "%s", prom_format_double(tmp, v));
    }
}

static void add_cache_config_info(builder *b) {
    if (b->rc != VLLM_OK) return;
    const metrics_config *c = &b->m->cfg;
    char block_size[24], util[32], swap[32], override_[24], window[24], offload[32];
    char kv_bytes[24], swap_bytes[32], gpu_blocks[24];
    snprintf(block_size, sizeof block_size, "%d", c->block_size);
    fmt_py_number(util, sizeof util, c->gpu_memory_utilization);
    fmt_py_number(swap, sizeof swap, c->swap_space);
    fmt_py_number(offload, sizeof offload, c->cpu_offload_gb);
    fmt_py_number(swap_bytes, sizeof swap_bytes, c->swap_space * 1073741824.0);
    if (c->num_gpu_blocks_override > 0)
        snprintf(override_, sizeof override_, "%d", c->num_gpu_blocks_override);
    else snprintf(override_, sizeof override_, "None");
    if (c->sliding_window > 0) snprintf(window, sizeof window, "%d", c->sliding_window);
    else snprintf(window, sizeof window, "None");
    if (c->kv_cache_memory_bytes > 0)
        snprintf(kv_bytes, sizeof kv_bytes, "%lld", (long long)c->kv_cache_memory_bytes);
    else snprintf(kv_bytes, sizeof kv_bytes, "None");
    if (c->num_gpu_blocks > 0) snprintf(gpu_blocks, sizeof gpu_blocks, "%lld", (long long)c->num_gpu_blocks);
    else snprintf(gpu_blocks, sizeof gpu_blocks, "None");

    /* CacheConfig's fields as vLLM 0.11's metrics_info() prints them, + engine */
    const char *const names[] = {"block_size",
                                 "gpu_memory_utilization",
                                 "swap_space",
                                 "cache_dtype",
                                 "is_attention_free",
                                 "num_gpu_blocks_override",
                                 "sliding_window",
                                 "enable_prefix_caching",
                                 "prefix_caching_hash_algo",
                                 "cpu_offload_gb",
                                 "calculate_kv_scales",
                                 "kv_sharing_fast_prefill",
                                 "mamba_cache_dtype",
                                 "mamba_ssm_cache_dtype",
                                 "kv_cache_memory_bytes",
                                 "swap_space_bytes",
                                 "num_gpu_blocks",
                                 "num_cpu_blocks",
                                 "engine"};
    const char *const values[] = {block_size,
                                  util,
                                  swap,
                                  b->m->cache_dtype,
                                  "False",
                                  override_,
                                  window,
                                  c->enable_prefix_caching ? "True" : "False",
                                  b->m->hash_algo,
                                  offload,
                                  "False",
                                  "False",
                                  "auto",
                                  "auto",
                                  kv_bytes,
                                  swap_bytes,
                                  gpu_blocks,
                                  "None",
                                  b->m->engine};
    prom_family *f = add_family(b, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                PROM_GAUGE, names, COUNT(names), NULL, 0);
    if (b->rc != VLLM_OK) return;
    prom_series *s;
    b->rc = prom_series_get(b->m->reg, f, values, &s);
    if (b->rc == VLLM_OK) prom_gauge_set(s, 1.0); /* not yet shared with any thread */
}

static void add_families(builder *b) {
    metrics *m = b->m;
    double tok_buckets[PROM_MAX_BUCKETS];
    int32_t num_tok = buckets_1_2_5(m->cfg.max_model_len, tok_buckets);

    /* In vLLM 0.11's order. HELP texts are vLLM's, missing spaces included. */
    m->running = add_std(b, "vllm:num_requests_running", "Number of requests in model execution batches.",
                         PROM_GAUGE, NULL, 0);
    m->waiting = add_std(b, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                         PROM_GAUGE, NULL, 0);
    if (m->show_hidden) {
        /* Deprecated in 0.9.2; hidden in 0.11; --show-hidden-metrics-for-version=0.10 */
        m->gpu_cache_usage = add_std(b, "vllm:gpu_cache_usage_perc",
                                     "GPU KV-cache usage. 1 means 100 percent usage."
                                     "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                                     PROM_GAUGE, NULL, 0);
        m->gpu_prefix_queries = add_std(b, "vllm:gpu_prefix_cache_queries",
                                        "GPU prefix cache queries, in terms of number of queried"
                                        "tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
                                        PROM_COUNTER, NULL, 0);
        m->gpu_prefix_hits = add_std(b, "vllm:gpu_prefix_cache_hits",
                                     "GPU prefix cache hits, in terms of number of cached "
                                     "tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
                                     PROM_COUNTER, NULL, 0);
    }
    m->kv_usage = add_std(b, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                          PROM_GAUGE, NULL, 0);
    m->prefix_queries = add_std(b, "vllm:prefix_cache_queries",
                                "Prefix cache queries, in terms of number of queried tokens.",
                                PROM_COUNTER, NULL, 0);
    m->prefix_hits = add_std(b, "vllm:prefix_cache_hits",
                             "Prefix cache hits, in terms of number of cached tokens.", PROM_COUNTER,
                             NULL, 0);
    if (m->cfg.kv_connector) { /* only with a connector: without one the exposition stays vLLM 0.11.0's */
        m->ext_queries = add_std(b, "vllm:external_prefix_cache_queries",
                                 "External prefix cache queries from KV connector cross-instance cache sharing, "
                                 "in terms of number of queried tokens.", PROM_COUNTER, NULL, 0);
        m->ext_hits = add_std(b, "vllm:external_prefix_cache_hits",
                              "External prefix cache hits from KV connector cross-instance cache sharing, in "
                              "terms of number of cached tokens.", PROM_COUNTER, NULL, 0);
    }
    m->preemptions = add_std(b, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                             PROM_COUNTER, NULL, 0);
    m->prompt_tokens = add_std(b, "vllm:prompt_tokens", "Number of prefill tokens processed.",
                               PROM_COUNTER, NULL, 0);
    m->generation_tokens = add_std(b, "vllm:generation_tokens", "Number of generation tokens processed.",
                                   PROM_COUNTER, NULL, 0);
    {
        static const char *const labels[] = {"model_name", "engine", "finished_reason"};
        prom_family *f = add_family(b, "vllm:request_success", "Count of successfully processed requests.",
                                    PROM_COUNTER, labels, 3, NULL, 0);
        for (int r = VLLM_FINISH_STOP; r <= VLLM_FINISH_ABORT && b->rc == VLLM_OK; r++) {
            const char *values[] = {m->model_name, m->engine, vllm_finish_reason_str((vllm_finish_reason)r)};
            b->rc = prom_series_get(m->reg, f, values, &m->success[r]);
        }
    }
    m->h_prompt = add_std(b, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                          PROM_HISTOGRAM, tok_buckets, num_tok);
    m->h_generation = add_std(b, "vllm:request_generation_tokens", "Number of generation tokens processed.",
                              PROM_HISTOGRAM, tok_buckets, num_tok);
    m->h_iteration = add_std(b, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                             PROM_HISTOGRAM, iteration_buckets, COUNT(iteration_buckets));
    m->h_max_gen = add_std(b, "vllm:request_max_num_generation_tokens",
                           "Histogram of maximum number of requested generation tokens.", PROM_HISTOGRAM,
                           tok_buckets, num_tok);
    m->h_n = add_std(b, "vllm:request_params_n", "Histogram of the n request parameter.", PROM_HISTOGRAM,
                     n_buckets, COUNT(n_buckets));
    m->h_max_tokens = add_std(b, "vllm:request_params_max_tokens",
                              "Histogram of the max_tokens request parameter.", PROM_HISTOGRAM, tok_buckets,
                              num_tok);
    m->h_ttft = add_std(b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        PROM_HISTOGRAM, ttft_buckets, COUNT(ttft_buckets));
    /* Deprecated in 0.11 (still shown in 0.11): the same samples as inter_token_latency */
    m->h_tpot_alias = add_std(b, "vllm:time_per_output_token_seconds",
                              "Histogram of time per output token in seconds."
                              "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                              PROM_HISTOGRAM, itl_buckets, COUNT(itl_buckets));
    m->h_itl = add_std(b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                       PROM_HISTOGRAM, itl_buckets, COUNT(itl_buckets));
    m->h_req_tpot = add_std(b, "vllm:request_time_per_output_token_seconds",
                            "Histogram of time_per_output_token_seconds per request.", PROM_HISTOGRAM,
                            itl_buckets, COUNT(itl_buckets));
    m->h_e2e = add_std(b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                       PROM_HISTOGRAM, latency_buckets, COUNT(latency_buckets));
    m->h_queue = add_std(b, "vllm:request_queue_time_seconds",
                         "Histogram of time spent in WAITING phase for request.", PROM_HISTOGRAM,
                         latency_buckets, COUNT(latency_buckets));
    m->h_inference = add_std(b, "vllm:request_inference_time_seconds",
                             "Histogram of time spent in RUNNING phase for request.", PROM_HISTOGRAM,
                             latency_buckets, COUNT(latency_buckets));
    m->h_prefill = add_std(b, "vllm:request_prefill_time_seconds",
                           "Histogram of time spent in PREFILL phase for request.", PROM_HISTOGRAM,
                           latency_buckets, COUNT(latency_buckets));
    m->h_decode = add_std(b, "vllm:request_decode_time_seconds",
                          "Histogram of time spent in DECODE phase for request.", PROM_HISTOGRAM,
                          latency_buckets, COUNT(latency_buckets));
    if (m->show_hidden) {
        /* V0 names that V1 dropped; kept behind the same switch for old dashboards */
        m->swapped = add_std(b, "vllm:num_requests_swapped",
                             "Number of requests swapped to CPU. DEPRECATED: V1 preempts by "
                             "recompute and never swaps; always 0. Use vllm:num_preemptions instead.",
                             PROM_GAUGE, NULL, 0);
        m->cpu_cache_usage = add_std(b, "vllm:cpu_cache_usage_perc",
                                     "CPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: V1 "
                                     "has no CPU swap space; always 0. Use vllm:kv_cache_usage_perc instead.",
                                     PROM_GAUGE, NULL, 0);
        m->gpu_prefix_hit_rate = add_std(b, "vllm:gpu_prefix_cache_hit_rate",
                                         "GPU prefix cache block hit rate. DEPRECATED: Use "
                                         "vllm:prefix_cache_hits and vllm:prefix_cache_queries instead.",
                                         PROM_GAUGE, NULL, 0);
        m->h_time_in_queue = add_std(b, "vllm:time_in_queue_requests",
                                     "Histogram of time the request spent in the queue in seconds. "
                                     "DEPRECATED: Use vllm:request_queue_time_seconds instead.",
                                     PROM_HISTOGRAM, latency_buckets, COUNT(latency_buckets));
    }
    if (m->cfg.num_speculative_tokens > 0) { /* vLLM's SpecDecodingProm */
        m->spec_drafts = add_std(b, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                                 PROM_COUNTER, NULL, 0);
        m->spec_draft_tokens = add_std(b, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                                       PROM_COUNTER, NULL, 0);
        m->spec_accepted = add_std(b, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                   PROM_COUNTER, NULL, 0);
        static const char *const labels[] = {"model_name", "engine", "position"};
        prom_family *f = add_family(b, "vllm:spec_decode_num_accepted_tokens_per_pos",
                                    "Accepted tokens per draft position.", PROM_COUNTER, labels, 3, NULL, 0);
        for (int32_t j = 0; j < m->cfg.num_speculative_tokens && b->rc == VLLM_OK; j++) {
            char pos[16];
            snprintf(pos, sizeof pos, "%d", j);
            const char *values[] = {m->model_name, m->engine, pos};
            b->rc = prom_series_get(m->reg, f, values, &m->spec_per_pos[j]);
        }
    }
    m->kv_capacity = add_std(b, "vllm:kv_cache_capacity_tokens",
                             "KV cache capacity in tokens (blocks x block size). vllm.c extension.",
                             PROM_GAUGE, NULL, 0);
    m->kv_headroom = add_std(b, "vllm:kv_cache_headroom_tokens",
                             "KV cache tokens that can still be allocated (free blocks, prefix-cache "
                             "blocks nobody uses included, x block size). vllm.c extension.",
                             PROM_GAUGE, NULL, 0);
    m->queue_delay = add_std(b, "vllm:queue_delay_estimate_seconds",
                             "Estimated wait before a request arriving now is scheduled: waiting "
                             "requests / requests finished per second over the last 60 s. vllm.c "
                             "extension.",
                             PROM_GAUGE, NULL, 0);
    add_cache_config_info(b);
    if (m->cfg.max_loras > 0) { /* vLLM's labels, in its order; no model_name/engine */
        static const char *const lora_labels[] = {"max_lora", "waiting_lora_adapters", "running_lora_adapters"};
        m->lora_info = add_family(b, "vllm:lora_requests_info", "Running stats on lora requests.", PROM_GAUGE,
                                  lora_labels, 3, NULL, 0);
    }

    /* prometheus_fastapi_instrumentator's defaults, as vLLM's api_server mounts them */
    {
        static const char *const total_labels[] = {"method", "status", "handler"};
        static const char *const handler_label[] = {"handler"};
        static const char *const lowr_labels[] = {"method", "handler"};
        m->f_http_total = add_family(b, "http_requests_total",
                                     "Total number of requests by method, status and handler.",
                                     PROM_COUNTER, total_labels, 3, NULL, 0);
        m->f_http_req_size = add_family(b, "http_request_size_bytes",
                                        "Content length of incoming requests by handler. Only value of "
                                        "header is respected. Otherwise ignored. No percentile calculated. ",
                                        PROM_SUMMARY, handler_label, 1, NULL, 0);
        m->f_http_resp_size = add_family(b, "http_response_size_bytes",
                                         "Content length of outgoing responses by handler. Only value of "
                                         "header is respected. Otherwise ignored. No percentile calculated. ",
                                         PROM_SUMMARY, handler_label, 1, NULL, 0);
        prom_family *highr = add_family(b, "http_request_duration_highr_seconds",
                                        "Latency with many buckets but no API specific labels. Made for "
                                        "more accurate percentile calculations. ",
                                        PROM_HISTOGRAM, NULL, 0, http_highr_buckets,
                                        COUNT(http_highr_buckets));
        m->f_http_lowr = add_family(b, "http_request_duration_seconds",
                                    "Latency with only few buckets by handler. Made to be only used if "
                                    "aggregation by handler is important. ",
                                    PROM_HISTOGRAM, lowr_labels, 2, http_lowr_buckets,
                                    COUNT(http_lowr_buckets));
        if (b->rc == VLLM_OK) b->rc = prom_series_get(m->reg, highr, NULL, &m->http_highr);
    }
}

vllm_status metrics_create(const metrics_config *c, metrics **out) {
    *out = NULL;
    bool show = false;
    vllm_status rc = metrics_parse_hidden_version(c->show_hidden_metrics_for_version, &show);
    if (rc != VLLM_OK) return rc;
    if (c->log_stats && !(c->log_stats_interval > 0))
        return vllm_error(VLLM_ERR_INVALID, "metrics: log_stats_interval = %g, must be > 0",
                          c->log_stats_interval);
    if (c->num_speculative_tokens < 0 || c->num_speculative_tokens > VLLM_MAX_SPEC_TOKENS)
        return vllm_error(VLLM_ERR_INVALID, "metrics: num_speculative_tokens = %d, must be in 0..%d",
                          c->num_speculative_tokens, VLLM_MAX_SPEC_TOKENS);
    metrics *m = calloc(1, sizeof *m);
    if (!m) return vllm_error(VLLM_ERR_NOMEM, "metrics: create");
    m->cfg = *c;
    m->show_hidden = show;
    m->model_name = strdup(c->model_name ? c->model_name : "");
    m->cache_dtype = strdup(c->cache_dtype ? c->cache_dtype : "auto");
    m->hash_algo = strdup(c->prefix_caching_hash_algo ? c->prefix_caching_hash_algo : "sha256");
    m->hidden_version = c->show_hidden_metrics_for_version ? strdup(c->show_hidden_metrics_for_version) : NULL;
    m->cfg.model_name = m->model_name;
    m->cfg.cache_dtype = m->cache_dtype;
    m->cfg.prefix_caching_hash_algo = m->hash_algo;
    m->cfg.show_hidden_metrics_for_version = m->hidden_version;
    snprintf(m->engine, sizeof m->engine, "%d", c->engine_index);
    pthread_mutex_init(&m->req_mu, NULL);
    pthread_mutex_init(&m->log_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->log_cv, &ca);
    pthread_condattr_destroy(&ca);
    stats_iteration_init(&m->it);
    m->last_log_time = clock_now();
    size_t k = (size_t)c->num_speculative_tokens;
    m->spec_per_pos = calloc(k ? k : 1, sizeof *m->spec_per_pos);
    m->log_spec_per_pos = calloc(k ? k : 1, sizeof *m->log_spec_per_pos);
    if (!m->model_name || !m->cache_dtype || !m->hash_algo || !m->spec_per_pos || !m->log_spec_per_pos ||
        (c->show_hidden_metrics_for_version && !m->hidden_version)) {
        metrics_free(m);
        return vllm_error(VLLM_ERR_NOMEM, "metrics: create");
    }
    if ((rc = stats_create(&m->st)) != VLLM_OK || (rc = prom_registry_create(&m->reg)) != VLLM_OK) {
        metrics_free(m);
        return rc;
    }
    builder b = {m, VLLM_OK};
    add_families(&b);
    if (b.rc != VLLM_OK) {
        metrics_free(m);
        return b.rc;
    }
    *out = m;
    return VLLM_OK;
}

/* ---- forwarding (several API server processes, one registry) ------------- */

vllm_status metrics_create_forward(const metrics_forward *f, metrics **out) {
    *out = NULL;
    metrics *m = calloc(1, sizeof *m);
    if (!m) return vllm_error(VLLM_ERR_NOMEM, "metrics: forwarder");
    m->fwd = *f;
    *out = m;
    return VLLM_OK;
}

void metrics_free(metrics *m) {
    if (!m) return;
    if (m->fwd.ud) {
        if (m->fwd.free) m->fwd.free(m->fwd.ud);
        free(m);
        return;
    }
    for (int32_t i = 0; i < m->num_engines; i++) {
        metrics *e = m->engines[i];
        free(e->spec_per_pos);
        free(e->log_spec_per_pos);
        free(e);
    }
    free(m->engines);
    if (m->logger_running) {
        pthread_mutex_lock(&m->log_mu);
        m->logger_stop = true;
        pthread_cond_signal(&m->log_cv);
        pthread_mutex_unlock(&m->log_mu);
        pthread_join(m->logger, NULL);
    }
    stats_free(m->st);
    stats_iteration_deinit(&m->it);
    prom_registry_free(m->reg);
    pthread_mutex_destroy(&m->req_mu);
    pthread_mutex_destroy(&m->log_mu);
    pthread_cond_destroy(&m->log_cv);
    free(m->model_name);
    free(m->cache_dtype);
    free(m->hash_algo);
    free(m->hidden_version);
    free(m->spec_per_pos);
    free(m->log_spec_per_pos);
    free(m);
}

vllm_status metrics_add_engine(metrics *m, int32_t engine_index, int64_t num_gpu_blocks) {
    if (m->fwd.ud) return m->fwd.add_engine(m->fwd.ud, engine_index, num_gpu_blocks);
    if (engine_index <= 0 || m->owner)
        return vllm_error(VLLM_ERR_INVALID, "metrics: engine %d cannot be added here", engine_index);
    metrics **grown = realloc(m->engines, ((size_t)m->num_engines + 1) * sizeof *grown);
    metrics *e = calloc(1, sizeof *e);
    size_t k = (size_t)m->cfg.num_speculative_tokens;
    if (grown) m->engines = grown;
    if (!grown || !e || !(e->spec_per_pos = calloc(k ? k : 1, sizeof *e->spec_per_pos)) ||
        !(e->log_spec_per_pos = calloc(k ? k : 1, sizeof *e->log_spec_per_pos))) {
        if (e) free(e->spec_per_pos);
        free(e);
        return vllm_error(VLLM_ERR_NOMEM, "metrics: engine %d", engine_index);
    }
    /* the owner's strings, registry and request table; its own series and log state */
    e->cfg = m->cfg;
    e->cfg.engine_index = engine_index;
    e->cfg.num_gpu_blocks = num_gpu_blocks;
    e->model_name = m->model_name;
    e->hidden_version = m->hidden_version;
    e->cache_dtype = m->cache_dtype;
    e->hash_algo = m->hash_algo;
    e->show_hidden = m->show_hidden;
    snprintf(e->engine, sizeof e->engine, "%d", engine_index);
    e->reg = m->reg;
    e->owner = m;
    e->last_log_time = m->last_log_time;
    builder b = {e, VLLM_OK};
    add_families(&b);
    if (b.rc != VLLM_OK) {
        free(e->spec_per_pos);
        free(e->log_spec_per_pos);
        free(e);
        return b.rc;
    }
    m->engines[m->num_engines++] = e;
    return VLLM_OK;
}

static metrics *engine_of(metrics *m, int32_t engine_index) {
    for (int32_t i = 0; i < m->num_engines; i++)
        if (m->engines[i]->cfg.engine_index == engine_index) return m->engines[i];
    return m;
}

void metrics_log_engine_initialized(metrics *m) {
    if (m->fwd.ud) {
        m->fwd.log_engine_initialized(m->fwd.ud);
        return;
    }
    for (int32_t i = 0; i < m->num_engines; i++) metrics_log_engine_initialized(m->engines[i]);
    if (m->cfg.num_gpu_blocks > 0)
        log_info("Engine %03d: vllm cache_config_info with initialization after num_gpu_blocks is: %lld",
                 m->cfg.engine_index, (long long)m->cfg.num_gpu_blocks);
}

/* ---- requests and steps --------------------------------------------------- */

vllm_status metrics_request_arrived(metrics *m, const char *request_id, double arrival,
                                    int32_t num_prompt_tokens, int32_t n, int32_t max_tokens) {
    if (m->fwd.ud) return m->fwd.request_arrived(m->fwd.ud, request_id, arrival, num_prompt_tokens, n, max_tokens);
    pthread_mutex_lock(&m->req_mu);
    vllm_status rc = stats_add_request(m->st, request_id, arrival, num_prompt_tokens, n, max_tokens);
    pthread_mutex_unlock(&m->req_mu);
    return rc;
}

void metrics_request_released(metrics *m, const char *request_id) {
    if (m->fwd.ud) {
        m->fwd.request_released(m->fwd.ud, request_id);
        return;
    }
    pthread_mutex_lock(&m->req_mu);
    stats_remove_request(m->st, request_id);
    if (m->obs.request_released) m->obs.request_released(m->obs.ud, request_id);
    pthread_mutex_unlock(&m->req_mu);
}

void metrics_set_observer(metrics *m, const metrics_observer *o) {
    if (m->fwd.ud) return; /* the owner's registry has no observer */
    pthread_mutex_lock(&m->req_mu);
    if (o) m->obs = *o;
    else memset(&m->obs, 0, sizeof m->obs);
    pthread_mutex_unlock(&m->req_mu);
}

/* The iteration's finished sequences to the observer (req_mu held). */
static void notify_finished(metrics *m, const stats_iteration *it) {
    if (!m->obs.sequence_finished) return;
    for (int32_t i = 0; i < it->num_finished; i++) m->obs.sequence_finished(m->obs.ud, &it->finished[i]);
}

/* vLLM's PrefixCachingMetrics.observe. */
static void prefix_observe(metrics *m, int64_t requests, int64_t queries, int64_t hits) {
    if (requests == 0) return; /* an empty step would push real data out of the window */
    m->prefix_ring[(m->prefix_head + m->prefix_len) % PREFIX_RING] = (prefix_entry){requests, queries, hits};
    m->prefix_len++;
    m->window_requests += requests;
    m->window_queries += queries;
    m->window_hits += hits;
    while (m->prefix_len > 1 && m->window_requests > PREFIX_WINDOW_REQUESTS) {
        const prefix_entry *e = &m->prefix_ring[m->prefix_head];
        m->window_requests -= e->requests;
        m->window_queries -= e->queries;
        m->window_hits -= e->hits;
        m->prefix_head = (m->prefix_head + 1) % PREFIX_RING;
        m->prefix_len--;
    }
}

static double prefix_hit_rate_locked(const metrics *m) {
    return m->window_queries > 0 ? (double)m->window_hits / (double)m->window_queries : 0.0;
}

static void note_finishes(metrics *m, int32_t count, double now) {
    int64_t sec = (int64_t)floor(now);
    int32_t i = (int32_t)(((sec % FINISH_WINDOW_S) + FINISH_WINDOW_S) % FINISH_WINDOW_S);
    if (m->finish_second[i] != sec) {
        m->finish_second[i] = sec;
        m->finish_count[i] = 0;
    }
    m->finish_count[i] += count;
    m->last_finish_time = now;
    m->any_finish = true;
}

static double nonneg(double x) { return x > 0 ? x : 0; }

static void note_time(metrics *m, double now) {
    if (!m->has_start) {
        m->start_time = now;
        m->has_start = true;
    }
}

/* Little's law: waiting / completion rate; while nothing completes, the
 * time since the last completion (a lower bound that keeps growing). */
static double queue_delay_locked(const metrics *m, double now) {
    if (m->last_waiting <= 0) return 0;
    int64_t sec = (int64_t)floor(now), done = 0;
    for (int32_t i = 0; i < FINISH_WINDOW_S; i++)
        if (m->finish_second[i] > sec - FINISH_WINDOW_S && m->finish_second[i] <= sec)
            done += m->finish_count[i];
    double span = now - m->start_time;
    if (span > FINISH_WINDOW_S) span = FINISH_WINDOW_S;
    if (done > 0 && span > 0) return (double)m->last_waiting / ((double)done / span);
    return nonneg(now - (m->any_finish ? m->last_finish_time : m->start_time));
}

/* One step's scheduler stats (gauges, cache counters, preemptions). */
static void record_scheduler_locked(metrics *m, const vllm_step_output *out, const stats_iteration *it,
                                    double now) {
    const vllm_scheduler_stats *ss = &out->stats;
    note_time(m, now);
    prom_gauge_set(m->running, ss->num_running);
    prom_gauge_set(m->waiting, ss->num_waiting);
    prom_gauge_set(m->kv_usage, ss->kv_cache_usage);
    prom_counter_add(m->prefix_queries, (double)ss->prefix_cache_queries);
    prom_counter_add(m->prefix_hits, (double)ss->prefix_cache_hits);
    if (m->ext_queries) {
        prom_counter_add(m->ext_queries, (double)ss->external_prefix_cache_queries);
        prom_counter_add(m->ext_hits, (double)ss->external_prefix_cache_hits);
    }
    m->ext_total_queries += ss->external_prefix_cache_queries;
    m->ext_total_hits += ss->external_prefix_cache_hits;
    if (m->show_hidden) {
        prom_gauge_set(m->gpu_cache_usage, ss->kv_cache_usage);
        prom_counter_add(m->gpu_prefix_queries, (double)ss->prefix_cache_queries);
        prom_counter_add(m->gpu_prefix_hits, (double)ss->prefix_cache_hits);
    }
    prom_gauge_set(m->kv_capacity, (double)ss->num_blocks_total * m->cfg.block_size);
    prom_gauge_set(m->kv_headroom, (double)ss->num_blocks_free * m->cfg.block_size);
    prom_counter_add(m->preemptions, ss->num_preemptions);
    if (m->cfg.num_speculative_tokens > 0 && ss->spec_num_drafts > 0) {
        prom_counter_add(m->spec_drafts, ss->spec_num_drafts);
        prom_counter_add(m->spec_draft_tokens, ss->spec_num_draft_tokens);
        prom_counter_add(m->spec_accepted, ss->spec_num_accepted_tokens);
        m->log_spec_drafts += ss->spec_num_drafts;
        m->log_spec_draft_tokens += ss->spec_num_draft_tokens;
        m->log_spec_accepted += ss->spec_num_accepted_tokens;
        for (int32_t j = 0; j < m->cfg.num_speculative_tokens && j < ss->num_spec_tokens; j++) {
            prom_counter_add(m->spec_per_pos[j], ss->spec_num_accepted_tokens_per_pos[j]);
            m->log_spec_per_pos[j] += ss->spec_num_accepted_tokens_per_pos[j];
        }
    }
    if (out->num_outputs > 0 || ss->num_scheduled_tokens > 0)
        prom_observe(m->h_iteration, (double)(it->num_prompt_tokens + it->num_generation_tokens));

    m->last_running = ss->num_running;
    m->last_waiting = ss->num_waiting;
    m->last_kv_usage = ss->kv_cache_usage;
    prefix_observe(m, it->num_scheduled_events, ss->prefix_cache_queries, ss->prefix_cache_hits);
}

/* One stats_iteration: token counts, latency samples, finished requests. */
static void record_iteration_locked(metrics *m, const stats_iteration *it, double now) {
    prom_counter_add(m->prompt_tokens, (double)it->num_prompt_tokens);
    prom_counter_add(m->generation_tokens, (double)it->num_generation_tokens);
    for (int32_t i = 0; i < it->num_groups; i++) {
        prom_observe(m->h_max_gen, it->groups[i].max_num_generation_tokens);
        prom_observe(m->h_n, it->groups[i].n);
    }
    for (int32_t i = 0; i < it->num_ttft; i++) prom_observe(m->h_ttft, it->ttft[i]);
    for (int32_t i = 0; i < it->num_itl; i++) {
        prom_observe(m->h_itl, it->itl[i]);
        prom_observe(m->h_tpot_alias, it->itl[i]);
    }
    for (int32_t i = 0; i < it->num_finished; i++) {
        const stats_finished *f = &it->finished[i];
        if (f->reason >= VLLM_FINISH_STOP && f->reason <= VLLM_FINISH_ABORT)
            prom_counter_add(m->success[f->reason], 1);
        prom_observe(m->h_e2e, f->e2e);
        prom_observe(m->h_queue, f->queue);
        prom_observe(m->h_prefill, f->prefill);
        prom_observe(m->h_inference, f->inference);
        prom_observe(m->h_decode, f->decode);
        prom_observe(m->h_req_tpot, f->time_per_output_token);
        prom_observe(m->h_prompt, f->num_prompt_tokens);
        prom_observe(m->h_generation, f->num_generation_tokens);
        if (f->max_tokens > 0) prom_observe(m->h_max_tokens, f->max_tokens);
        if (m->h_time_in_queue) prom_observe(m->h_time_in_queue, f->queue);
    }
    if (it->num_finished) note_finishes(m, it->num_finished, now);
    m->log_prompt_tokens += it->num_prompt_tokens;
    m->log_generation_tokens += it->num_generation_tokens;
}

static void iteration_clear(stats_iteration *it) {
    it->num_prompt_tokens = it->num_generation_tokens = 0;
    it->num_scheduled_events = it->num_ttft = it->num_itl = 0;
    it->num_finished = it->num_groups = 0;
}

void metrics_on_step(metrics *m, const vllm_step_output *out, double now) {
    metrics_on_engine_step(m, 0, out, now);
}

void metrics_on_engine_step(metrics *m, int32_t engine_index, const vllm_step_output *out, double now) {
    if (!out) return;
    if (m->fwd.ud) {
        m->fwd.engine_step(m->fwd.ud, engine_index, out, now);
        return;
    }
    metrics *e = engine_index ? engine_of(m, engine_index) : m;
    prom_series *lora = NULL;
    if (m->lora_info) { /* a series per label set, each set to the wall time when seen (set_to_current_time) */
        char max_lora[24];
        snprintf(max_lora, sizeof max_lora, "%d", m->cfg.max_loras);
        const char *values[] = {max_lora, out->stats.waiting_lora_adapters, out->stats.running_lora_adapters};
        if (prom_series_get(m->reg, m->lora_info, values, &lora) != VLLM_OK) lora = NULL;
    }
    pthread_mutex_lock(&m->req_mu);
    if (stats_update(m->st, out, now, &m->it) != VLLM_OK) {
        /* out of memory for the scratch: keep the scheduler stats at least */
        log_warn("metrics: %s; step statistics dropped", vllm_errmsg());
        iteration_clear(&m->it);
    }
    prom_lock(m->reg);
    if (lora) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        prom_gauge_set(lora, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    }
    record_scheduler_locked(e, out, &m->it, now);
    record_iteration_locked(e, &m->it, now);
    prom_unlock(m->reg);
    notify_finished(m, &m->it);
    pthread_mutex_unlock(&m->req_mu);
}

void metrics_sequence_finished(metrics *m, const char *request_id, int32_t index,
                               vllm_finish_reason reason, double now) {
    if (m->fwd.ud) {
        m->fwd.sequence_finished(m->fwd.ud, request_id, index, reason, now);
        return;
    }
    pthread_mutex_lock(&m->req_mu);
    if (stats_finish_sequence(m->st, request_id, index, reason, now, &m->it) == VLLM_OK &&
        m->it.num_finished) {
        prom_lock(m->reg);
        record_iteration_locked(m, &m->it, now);
        prom_unlock(m->reg);
        notify_finished(m, &m->it);
    }
    pthread_mutex_unlock(&m->req_mu);
}

/* ---- HTTP ------------------------------------------------------------------ */

void metrics_http_observe(metrics *m, const char *handler, const char *method, int status,
                          double duration, int64_t request_bytes, int64_t response_bytes) {
    if (m->fwd.ud) {
        m->fwd.http_observe(m->fwd.ud, handler, method, status, duration, request_bytes, response_bytes);
        return;
    }
    if (!handler) handler = "none";
    for (int i = 0; i < COUNT(http_excluded); i++)
        if (strstr(handler, http_excluded[i])) return;
    char st[16];
    snprintf(st, sizeof st, "%dxx", status / 100 % 10);
    const char *total_v[] = {method ? method : "", st, handler};
    const char *handler_v[] = {handler};
    const char *lowr_v[] = {method ? method : "", handler};
    prom_series *total, *req_size, *resp_size, *lowr;
    if (prom_series_get(m->reg, m->f_http_total, total_v, &total) != VLLM_OK ||
        prom_series_get(m->reg, m->f_http_req_size, handler_v, &req_size) != VLLM_OK ||
        prom_series_get(m->reg, m->f_http_resp_size, handler_v, &resp_size) != VLLM_OK ||
        prom_series_get(m->reg, m->f_http_lowr, lowr_v, &lowr) != VLLM_OK) {
        log_warn("metrics: %s; HTTP exchange not recorded", vllm_errmsg());
        return;
    }
    if (duration < 0) duration = 0;
    prom_lock(m->reg);
    prom_counter_add(total, 1);
    prom_observe(req_size, (double)(request_bytes > 0 ? request_bytes : 0));
    prom_observe(resp_size, (double)(response_bytes > 0 ? response_bytes : 0));
    prom_observe(m->http_highr, duration);
    prom_observe(lowr, duration);
    prom_unlock(m->reg);
}

/* ---- scrape ------------------------------------------------------------------ */

vllm_status metrics_render(metrics *m, double now, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    if (m->fwd.ud) return m->fwd.render(m->fwd.ud, now, out, len);
    prom_lock(m->reg);
    for (int32_t i = -1; i < m->num_engines; i++) {
        metrics *e = i < 0 ? m : m->engines[i];
        note_time(e, now);
        prom_gauge_set(e->queue_delay, queue_delay_locked(e, now));
        if (e->gpu_prefix_hit_rate) prom_gauge_set(e->gpu_prefix_hit_rate, prefix_hit_rate_locked(e));
    }
    prom_unlock(m->reg);

    prom_buf b = {0};
    process_write_metrics(&b);
    vllm_status rc = prom_registry_write(m->reg, &b);
    if (rc == VLLM_OK && b.oom) rc = vllm_error(VLLM_ERR_NOMEM, "metrics: exposition text");
    if (rc != VLLM_OK) {
        free(b.data);
        return rc;
    }
    if (!b.data) prom_buf_append(&b, "", 0);
    *out = b.data;
    if (len) *len = b.len;
    return VLLM_OK;
}

/* ---- logging ------------------------------------------------------------------- */

double metrics_prefix_cache_hit_rate(metrics *m) {
    if (m->fwd.ud) return 0; /* the owner's */
    prom_lock(m->reg);
    double r = prefix_hit_rate_locked(m);
    prom_unlock(m->reg);
    return r;
}

void metrics_log_stats(metrics *m, double now) {
    if (m->fwd.ud) return; /* the owner logs */
    prom_lock(m->reg);
    double dt = now - m->last_log_time;
    double prompt_tp = dt > 0 ? (double)m->log_prompt_tokens / dt : 0.0;
    double gen_tp = dt > 0 ? (double)m->log_generation_tokens / dt : 0.0;
    m->log_prompt_tokens = m->log_generation_tokens = 0;
    m->last_log_time = now;
    bool active = prompt_tp != 0 || gen_tp != 0 || m->last_prompt_tp != 0 || m->last_generation_tp != 0;
    m->last_prompt_tp = prompt_tp;
    m->last_generation_tp = gen_tp;
    int32_t running = m->last_running, waiting = m->last_waiting;
    double kv = m->last_kv_usage, hit = prefix_hit_rate_locked(m);
    /* vLLM adds the external rate when a KV connector answered lookups (ours: since start) */
    char ext[64] = "";
    if (m->ext_total_queries > 0)
        snprintf(ext, sizeof ext, ", External prefix cache hit rate: %.1f%%",
                 100.0 * (double)m->ext_total_hits / (double)m->ext_total_queries);
    /* vLLM's SpecDecodingLogging: the interval's drafts, rates per position */
    int64_t drafts = m->log_spec_drafts, drafted = m->log_spec_draft_tokens, accepted = m->log_spec_accepted;
    char rates[VLLM_MAX_SPEC_TOKENS * 8 + 8];
    size_t used = 0;
    rates[0] = 0;
    for (int32_t j = 0; drafts > 0 && j < m->cfg.num_speculative_tokens && used < sizeof rates; j++)
        used += (size_t)snprintf(rates + used, sizeof rates - used, "%s%.3f", j ? ", " : "",
                                 (double)m->log_spec_per_pos[j] / (double)drafts);
    m->log_spec_drafts = m->log_spec_draft_tokens = m->log_spec_accepted = 0;
    for (int32_t j = 0; j < m->cfg.num_speculative_tokens; j++) m->log_spec_per_pos[j] = 0;
    prom_unlock(m->reg);
    log_write(active ? LOG_INFO : LOG_DEBUG, __FILE__, __LINE__,
              "Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
              "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache "
              "hit rate: %.1f%%%s",
              m->cfg.engine_index, prompt_tp, gen_tp, running, waiting, kv * 100, hit * 100, ext);
    if (drafts > 0)
        log_write(LOG_INFO, __FILE__, __LINE__,
                  "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
                  "Drafted throughput: %.2f tokens/s, Accepted: %lld tokens, Drafted: %lld tokens, "
                  "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%",
                  1.0 + (double)accepted / (double)drafts, dt > 0 ? (double)accepted / dt : 0.0,
                  dt > 0 ? (double)drafted / dt : 0.0, (long long)accepted, (long long)drafted, rates,
                  drafted > 0 ? 100.0 * (double)accepted / (double)drafted : 0.0);
}

static void *logger_main(void *arg) {
    metrics *m = arg;
    double interval = m->cfg.log_stats_interval;
    double next = clock_now() + interval;
    pthread_mutex_lock(&m->log_mu);
    while (!m->logger_stop) {
        struct timespec ts = {.tv_sec = (time_t)next,
                              .tv_nsec = (long)((next - floor(next)) * 1e9)};
        int rc = pthread_cond_timedwait(&m->log_cv, &m->log_mu, &ts);
        if (m->logger_stop) break;
        if (rc != ETIMEDOUT && clock_now() < next) continue; /* spurious wake-up */
        pthread_mutex_unlock(&m->log_mu);
        metrics_log_stats(m, clock_now());
        for (int32_t i = 0; i < m->num_engines; i++) metrics_log_stats(m->engines[i], clock_now());
        pthread_mutex_lock(&m->log_mu);
        next += interval;
        double now = clock_now();
        if (next < now) next = now + interval; /* fell behind (suspended): no burst */
    }
    pthread_mutex_unlock(&m->log_mu);
    return NULL;
}

vllm_status metrics_logger_start(metrics *m) {
    if (m->fwd.ud) return VLLM_OK; /* the owner logs */
    if (!m->cfg.log_stats || m->logger_running) return VLLM_OK;
    m->last_log_time = clock_now();
    if (pthread_create(&m->logger, NULL, logger_main, m) != 0)
        return vllm_error(VLLM_ERR_NOMEM, "metrics: cannot start the stats logger thread");
    m->logger_running = true;
    return VLLM_OK;
}
