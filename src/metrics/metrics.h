/*
 * metrics.h - vLLM's stat loggers for one engine: the Prometheus metrics
 * behind GET /metrics (vLLM V1's PrometheusStatLogger, plus the HTTP and
 * process metrics vLLM's server exports) and the periodic log line
 * (LoggingStatLogger):
 *
 *   INFO ... Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation
 *   throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache
 *   usage: 4.2%, Prefix cache hit rate: 37.5%
 *
 * Who calls what (the engine loop itself never calls in; metrics are built
 * in the front end from what the engine already reports):
 *
 *   HTTP thread    metrics_request_arrived()   once per request, before the
 *                                              engine can output for it
 *                  metrics_request_released()  if it never reaches the engine
 *                  metrics_http_observe()      when an exchange ends
 *                  metrics_render()            GET /metrics
 *   output thread  metrics_on_step()           every engine step output, in
 *                                              order (the one that reports a
 *                                              finish also ends the request)
 *                  metrics_sequence_finished() a stop string ended a sequence
 *   own thread     the log line every log_stats_interval seconds
 *                  (metrics_logger_start), or call metrics_log_stats()
 *
 * All functions are thread-safe. metrics_on_step holds the request table's
 * lock for the step's outputs and the value lock for a handful of additions;
 * a scrape holds the value lock only to copy the values, then formats
 * unlocked, so scraping never stalls generation.
 *
 * Names, types, labels (model_name, engine), HELP texts and buckets are vLLM
 * 0.11's; see docs/metrics.md for each metric, the interval definitions
 * (stats.h) and the vllm.c additions for autoscalers.
 */
#ifndef VLLM_METRICS_METRICS_H
#define VLLM_METRICS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/vllm.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct metrics metrics;

/* What the metrics need to know about the deployment (metrics_config_init
 * sets vLLM's defaults; strings are copied by metrics_create). */
typedef struct metrics_config {
    const char *model_name;          /* served model name (the first --served-model-name) */
    int32_t engine_index;            /* the `engine` label and "Engine 000"; 0 */
    int32_t max_model_len;           /* top of the 1-2-5 token-count buckets */
    /* --show-hidden-metrics-for-version: NULL, or "X.Y"; "0.10" (the
     * previous minor of the vLLM we mirror) shows the deprecated names */
    const char *show_hidden_metrics_for_version;
    bool log_stats;                  /* false: --disable-log-stats */
    double log_stats_interval;       /* seconds; VLLM_LOG_STATS_INTERVAL (10) */

    /* vllm:cache_config_info labels (CacheConfig, in vLLM's field order);
     * "None" where vLLM would print None */
    int32_t block_size;              /* 16 */
    double gpu_memory_utilization;   /* 0.9 */
    double swap_space;               /* 4 (GiB) */
    const char *cache_dtype;         /* "auto" */
    int32_t num_gpu_blocks_override; /* 0: None */
    int32_t sliding_window;          /* 0: None */
    bool enable_prefix_caching;      /* true */
    const char *prefix_caching_hash_algo; /* "sha256" */
    double cpu_offload_gb;           /* 0 */
    int64_t kv_cache_memory_bytes;   /* 0: None */
    int64_t num_gpu_blocks;          /* KV blocks in the pool (also the startup log line) */
    /* speculative decoding's k (vllm_engine_info.speculative_config); 0:
     * off, and no vllm:spec_decode_* families, as vLLM without the config */
    int32_t num_speculative_tokens;
    /* LoRA's --max-loras; 0: LoRA off, and no vllm:lora_requests_info */
    int32_t max_loras;
    /* a KV connector is configured: vllm:external_prefix_cache_* exist */
    bool kv_connector;
} metrics_config;

void metrics_config_init(metrics_config *c);

/* Parses a --show-hidden-metrics-for-version value: a version string of
 * dot-separated numbers ("0.10", "0.9.2"), else VLLM_ERR_INVALID naming it.
 * *show is true when it names the previous minor version (0.10). */
vllm_status metrics_parse_hidden_version(const char *version, bool *show);

/* VLLM_LOG_STATS_INTERVAL, or 10 when unset; a value that is not a positive
 * number is VLLM_ERR_INVALID. */
vllm_status metrics_log_interval_from_env(double *seconds);

vllm_status metrics_create(const metrics_config *c, metrics **out);
/* Stops the logger thread, frees everything. NULL is a no-op. */
void metrics_free(metrics *m);

/* Data parallel (dist/dp_client.h): m is engine 0 (cfg.engine_index 0);
 * this adds engine engine_index (> 0) with its pool of num_gpu_blocks, whose
 * vllm:* series carry engine="<index>" in the same families, so one
 * metrics_render serves every engine. The request table, HTTP and process
 * metrics stay m's; each engine's steps go to metrics_on_engine_step, and
 * the stats logger writes one "Engine NNN" line per engine. Call before the
 * first request; m frees the engines. */
vllm_status metrics_add_engine(metrics *m, int32_t engine_index, int64_t num_gpu_blocks);
/* metrics_on_step for the step engine_index made (0: m's own). */
void metrics_on_engine_step(metrics *m, int32_t engine_index, const vllm_step_output *out, double now);

/* vLLM's "Engine 000: vllm cache_config_info with initialization after
 * num_gpu_blocks is: N" (INFO), once at start-up. */
void metrics_log_engine_initialized(metrics *m);

/* A request the engine will output for. arrival: the front end's clock
 * (vllm_monotonic_time()) when the HTTP request came in; max_tokens <= 0
 * means none was given (not observed). */
vllm_status metrics_request_arrived(metrics *m, const char *request_id, double arrival,
                                    int32_t num_prompt_tokens, int32_t n, int32_t max_tokens);
/* Forgets a request the engine will never report on; records nothing. */
void metrics_request_released(metrics *m, const char *request_id);

/* One engine step output; now: the front end's clock when it handles it.
 * The scheduler stats must be taken after the step's update (so the step
 * that finishes the last request reports 0 running, 0 waiting). */
void metrics_on_step(metrics *m, const vllm_step_output *out, double now);

/* A sequence the front end finished itself: a stop string matched (reason
 * STOP: call it after metrics_on_step for the step that brought the
 * matching token, so that token counts), or the engine died (ABORT). The
 * engine's later outputs for it are ignored. */
void metrics_sequence_finished(metrics *m, const char *request_id, int32_t index,
                               vllm_finish_reason reason, double now);

/* Who else hears about requests (tracing, metrics/tracing.h): each request
 * metrics_request_arrived accepted ends exactly once, either released
 * (metrics_request_released) or with each of its n sequences finished, in
 * the same records the histograms take (so a trace's intervals are the
 * metrics'). Called under the metrics' request lock, from whichever thread
 * reports the step or the release: an observer only copies and queues. Set
 * it before the first request; NULL fields are skipped. */
typedef struct stats_finished stats_finished; /* metrics/stats.h */
typedef struct metrics_observer {
    void (*sequence_finished)(void *ud, const stats_finished *f);
    void (*request_released)(void *ud, const char *request_id);
    void *ud;
} metrics_observer;
void metrics_set_observer(metrics *m, const metrics_observer *o);

/* One HTTP exchange, when it ended (prometheus_fastapi_instrumentator as
 * vLLM configures it). handler: the route template ("/v1/completions"), or
 * NULL for a path no route matched ("none"); /metrics, /health, /load,
 * /ping, /version and /server_info are not recorded. status is grouped
 * ("2xx"). request_bytes: the Content-Length; response_bytes: the body
 * size (vLLM's instrumentator only sees a Content-Length, so it records 0
 * for streamed responses; we record what was sent). */
void metrics_http_observe(metrics *m, const char *handler, const char *method, int status,
                          double duration, int64_t request_bytes, int64_t response_bytes);

/* The exposition text (METRICS_CONTENT_TYPE); *out is malloc'd, the caller
 * frees it. now: the front end's clock (for the queue-delay estimate). */
vllm_status metrics_render(metrics *m, double now, char **out, size_t *len);

/* One LoggingStatLogger.log(): the throughput since the previous call. INFO
 * if this or the previous interval saw tokens, else DEBUG (quiet when idle).
 * With speculative decoding, also vLLM's "SpecDecoding metrics: ..." line
 * for the interval's drafts (none when no draft was scored). */
void metrics_log_stats(metrics *m, double now);
/* Starts a thread calling metrics_log_stats every log_stats_interval
 * seconds (no-op when log_stats is off); metrics_free stops it. */
vllm_status metrics_logger_start(metrics *m);

/* Several API server processes (--api-server-count, dist/metrics_link.h):
 * one process owns the registry and each API server's metrics object only
 * forwards its calls there. metrics_create_forward makes such an object:
 * every function above calls the matching hook instead (render asks the
 * owner for its text); metrics_log_stats, metrics_logger_start and
 * metrics_set_observer do nothing, metrics_prefix_cache_hit_rate is 0.
 * The hooks are called from the same threads as the functions. free is
 * called by metrics_free. */
typedef struct metrics_forward {
    vllm_status (*request_arrived)(void *ud, const char *request_id, double arrival, int32_t num_prompt_tokens,
                                   int32_t n, int32_t max_tokens);
    void (*request_released)(void *ud, const char *request_id);
    void (*engine_step)(void *ud, int32_t engine_index, const vllm_step_output *out, double now);
    void (*sequence_finished)(void *ud, const char *request_id, int32_t index, vllm_finish_reason reason,
                              double now);
    void (*http_observe)(void *ud, const char *handler, const char *method, int status, double duration,
                         int64_t request_bytes, int64_t response_bytes);
    vllm_status (*render)(void *ud, double now, char **out, size_t *len);
    vllm_status (*add_engine)(void *ud, int32_t engine_index, int64_t num_gpu_blocks);
    void (*log_engine_initialized)(void *ud);
    void (*free)(void *ud);
    void *ud;                        /* not NULL */
} metrics_forward;
vllm_status metrics_create_forward(const metrics_forward *f, metrics **out);

/* The prefix-cache hit rate of the log line (0..1): hits / queries over the
 * steps holding the most recent 1000 prefix-cache lookups. */
double metrics_prefix_cache_hit_rate(metrics *m);

#endif
