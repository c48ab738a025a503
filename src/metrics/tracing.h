/*
 * tracing.h - OpenTelemetry request tracing (vLLM's --otlp-traces-endpoint):
 * one `llm_request` span per finished sequence, exported over OTLP/HTTP
 * (protobuf) to a collector.
 *
 * What a trace holds (vLLM 0.11's OutputProcessor.do_tracing, plus more):
 *   llm_request (SERVER)   arrival -> the front end handling the finish; a
 *                          child of the request's W3C `traceparent` (its
 *                          trace id, parent span id and `tracestate`), else
 *                          the root of a new trace. Attributes: vLLM's
 *                          gen_ai.request.{id,temperature,top_p,max_tokens,n}
 *                          (temperature and top_p only when non-zero, as
 *                          vLLM), gen_ai.response.model, gen_ai.usage.
 *                          {prompt,completion}_tokens, gen_ai.latency.
 *                          {time_in_queue,time_to_first_token,e2e,
 *                          time_in_model_prefill,time_in_model_decode,
 *                          time_in_model_inference} (seconds); and the
 *                          current semantic conventions' gen_ai.usage.
 *                          {input,output}_tokens, gen_ai.operation.name,
 *                          gen_ai.request.model, gen_ai.response.id and
 *                          gen_ai.response.finish_reasons beside them.
 *     queue   (INTERNAL)   QUEUED -> first SCHEDULED       } children vLLM
 *     prefill (INTERNAL)   first SCHEDULED -> first token  } lacks; each only
 *     decode  (INTERNAL)   first token -> last token       } if it began
 * The intervals are the metrics' own records (stats.h, through the metrics
 * observer), so a trace and /metrics agree to the nanosecond; the monotonic
 * clock is turned into Unix time with one offset taken at start-up.
 *
 * A traceparent whose sampled flag is 0 makes no span (OpenTelemetry's
 * default ParentBased sampler, which vLLM uses); an invalid one is ignored
 * (a new trace), as the W3C propagator does. With tracing off, a request
 * that carries trace headers logs vLLM's warning once.
 *
 * Threads and memory: the HTTP thread registers the request (a small
 * allocation: ids, trace context, parameters); the output thread, when a
 * sequence finishes, copies one fixed-size record into a bounded ring under
 * a mutex (no allocation, no I/O, no encoding); when the ring is full the
 * record is dropped and counted. The exporter thread takes up to a batch of
 * records every schedule delay (or as soon as a batch is full), draws the
 * span ids from getrandom(2), encodes them (otlp.h) and POSTs them with
 * libcurl. A failed export drops its batch and logs at most one warning a
 * minute (with the counts); the engine and output threads never wait for
 * it. At shutdown what is queued is sent once more, best effort.
 *
 * Configuration, as the OpenTelemetry SDK vLLM uses reads it:
 *   OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  http/protobuf (the only one here; vLLM's
 *                                       default is grpc, which is refused with
 *                                       a message, as vLLM refuses unknown ones)
 *   OTEL_SERVICE_NAME                   resource service.name (default "vllm")
 *   OTEL_EXPORTER_OTLP_TRACES_HEADERS, OTEL_EXPORTER_OTLP_HEADERS  k=v,k2=v2
 *   OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT  seconds (10)
 *   OTEL_BSP_SCHEDULE_DELAY (ms, 5000), OTEL_BSP_MAX_QUEUE_SIZE (2048),
 *   OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512); the queue and the batch count
 *   requests (each up to four spans)
 * The endpoint is a URL; without a scheme it is http://, without a path
 * OTLP/HTTP's /v1/traces is added (vLLM posts to the URL as given, so a
 * full URL behaves the same).
 */
#ifndef VLLM_METRICS_TRACING_H
#define VLLM_METRICS_TRACING_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm/vllm.h"

typedef struct tracing tracing;
typedef struct stats_finished stats_finished; /* metrics/stats.h */

typedef struct tracing_config {
    const char *endpoint;            /* --otlp-traces-endpoint, as given */
    const char *service_name;
    const char *headers;             /* extra HTTP headers, "k=v,k2=v2" (URL-encoded values); NULL: none */
    int32_t max_queue_size;          /* requests waiting for export */
    int32_t max_export_batch_size;   /* requests per POST */
    double schedule_delay;           /* seconds between exports of a partial batch */
    double export_timeout;           /* seconds per POST */
} tracing_config;

/* The configuration from the environment (above) for this endpoint;
 * VLLM_ERR_INVALID naming the variable when one is wrong (an unsupported
 * protocol, a value that is not a number). Strings are borrowed. */
vllm_status tracing_config_from_env(tracing_config *c, const char *endpoint);

/* Starts the exporter thread. The endpoint is not contacted until there is
 * something to send. */
vllm_status tracing_create(const tracing_config *c, tracing **out);
/* Sends what is queued (one try), stops the thread, frees everything.
 * NULL: no-op. Nothing may call into t any more. */
void tracing_free(tracing *t);

/* What the front end knows of a request when it arrives. */
typedef struct tracing_request {
    const char *request_id;          /* the engine request's id (gen_ai.request.id); copied */
    const char *response_id;         /* the API response's id (cmpl-..., chatcmpl-...); copied */
    const char *model;               /* served name; borrowed, must outlive t */
    const char *operation;           /* "chat" or "text_completion"; borrowed (static) */
    const char *traceparent;         /* the request's headers, NULL when absent */
    const char *tracestate;
    double temperature, top_p;
    int32_t max_tokens, n;
} tracing_request;

/* HTTP thread, before the engine can finish the request: registers it (until
 * its n sequences finished or it is released). t NULL (tracing off): only
 * vLLM's one-time warning if the request carries trace headers. */
void tracing_request_arrived(tracing *t, const tracing_request *r);

/* The metrics observer's two calls (metrics.h): a sequence finished (its
 * span is queued), a request released (forgotten). Unknown ids are ignored. */
void tracing_sequence_finished(void *t, const stats_finished *f);
void tracing_request_released(void *t, const char *request_id);

/* A W3C traceparent ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>")
 * as OpenTelemetry's propagator reads it: lowercase hex, version ff and
 * all-zero ids invalid, a version-00 header with more fields invalid, later
 * versions' extra fields ignored. False: not a valid one. */
bool tracing_parse_traceparent(const char *s, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags);

typedef struct tracing_counters {
    int64_t exported;                /* requests (span groups) the collector accepted */
    int64_t dropped_full;            /* dropped: the queue was full */
    int64_t dropped_failed;          /* dropped: their export failed */
    int64_t failed_exports;          /* POSTs that failed */
} tracing_counters;
void tracing_get_counters(tracing *t, tracing_counters *out);

#endif
