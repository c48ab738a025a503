/*
 * tracing.c - see tracing.h.
 *
 * Two structures under one mutex: the live requests (a map from engine
 * request id to a pending entry made on the HTTP thread) and the ring of
 * finished records waiting for export. A record is the pending entry's
 * trace context and parameters plus a copy of the metrics' stats_finished:
 * everything the spans need, in fixed-size fields, so queueing one is a
 * memcpy. The exporter owns the records [head, head + k) while it encodes
 * them (count still covers them, so the producer never writes there), then
 * gives them back and POSTs without the lock.
 *
 * Span and trace ids come from getrandom(2) on the exporter thread, drawn
 * per batch; an id of all zeros is invalid in OTLP and is redrawn.
 */
#include "metrics/tracing.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/map.h"
#include "metrics/otlp.h"
#include "metrics/stats.h"

#define TRACESTATE_MAX 512           /* W3C: vendors may drop longer lists */
#define ID_MAX 160                   /* engine request ids (serving.c makes them < 160) */
#define WARN_INTERVAL_S 60.0
#define SCOPE_NAME "vllm.llm_engine" /* vLLM's init_tracer("vllm.llm_engine", ...) */

/* What the front end knew at arrival. */
typedef struct trace_req {
    uint8_t trace_id[16], parent_span_id[8];
    bool has_parent;                 /* a valid, sampled traceparent came with the request */
    uint8_t trace_flags;
    char trace_state[TRACESTATE_MAX + 1];
    char request_id[ID_MAX];
    char response_id[ID_MAX];
    const char *model, *operation;
    double temperature, top_p;
    int32_t max_tokens, n;
} trace_req;

typedef struct pending {
    map_node by_id;                  /* key: req.request_id */
    int32_t left;                    /* sequences not finished yet */
    trace_req req;
} pending;

typedef struct record {
    trace_req req;
    stats_finished f;                /* request_id cleared (it was borrowed) */
} record;

struct tracing {
    char *url;
    char *service_name;
    struct curl_slist *headers;
    int32_t cap, batch;
    double delay, timeout;
    int64_t wall_offset_ns;          /* Unix time - monotonic time */

    pthread_mutex_t mu;
    pthread_cond_t cv;               /* the exporter waits here */
    map live;                        /* pending by request id */
    record *ring;                    /* (cap) */
    int32_t head, count;
    bool stop;
    tracing_counters counters;

    /* exporter thread only */
    pthread_t thread;
    bool thread_started;
    CURL *curl;
    otlp_buf body;
    uint8_t *ids;                    /* random bytes for one batch */
    double last_warn;
    bool warned;
    int64_t warned_dropped;
};

/* ---- configuration ------------------------------------------------------ */

static vllm_status env_number(const char *name, double def, double min, double *out) {
    *out = def;
    const char *s = getenv(name);
    if (!s || !*s) return VLLM_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end == ' ') end++;
    if (end == s || *end || errno || !isfinite(v) || v < min)
        return vllm_error(VLLM_ERR_INVALID, "%s: '%s' is not a number >= %g", name, s, min);
    *out = v;
    return VLLM_OK;
}

static const char *env_first(const char *a, const char *b) {
    const char *s = getenv(a);
    if (s && *s) return s;
    s = getenv(b);
    return s && *s ? s : NULL;
}

vllm_status tracing_config_from_env(tracing_config *c, const char *endpoint) {
    memset(c, 0, sizeof *c);
    if (!endpoint || !*endpoint)
        return vllm_error(VLLM_ERR_INVALID, "--otlp-traces-endpoint: an empty URL");
    c->endpoint = endpoint;
    const char *proto = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
    if (proto && *proto && strcmp(proto, "http/protobuf")) {
        if (!strcmp(proto, "grpc"))
            return vllm_error(VLLM_ERR_INVALID,
                              "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc: vllm.c exports traces over "
                              "OTLP/HTTP only; set http/protobuf and the collector's HTTP endpoint "
                              "(port 4318)");
        return vllm_error(VLLM_ERR_INVALID,
                          "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Unsupported OTLP protocol '%s' is "
                          "configured (http/protobuf is)", proto);
    }
    const char *svc = getenv("OTEL_SERVICE_NAME");
    c->service_name = svc && *svc ? svc : "vllm";
    c->headers = env_first("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS");
    double v;
    vllm_status rc;
    if ((rc = env_number("OTEL_BSP_SCHEDULE_DELAY", 5000, 0, &v)) != VLLM_OK) return rc;
    c->schedule_delay = v / 1000;
    if ((rc = env_number("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, &v)) != VLLM_OK) return rc;
    c->max_queue_size = v > 1 << 20 ? 1 << 20 : (int32_t)v;
    if ((rc = env_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, &v)) != VLLM_OK) return rc;
    c->max_export_batch_size = v > c->max_queue_size ? c->max_queue_size : (int32_t)v;
    const char *tname = getenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") && *getenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                            ? "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT" : "OTEL_EXPORTER_OTLP_TIMEOUT";
    if ((rc = env_number(tname, 10, 0.001, &c->export_timeout)) != VLLM_OK) return rc;
    return VLLM_OK;
}

/* http://HOST:PORT -> http://HOST:PORT/v1/traces; HOST:PORT -> http://HOST:PORT/v1/traces. */
static char *endpoint_url(const char *e) {
    const char *scheme = strstr(e, "://");
    const char *host = scheme ? scheme + 3 : e;
    bool has_path = strchr(host, '/') != NULL;
    size_t n = strlen(e) + sizeof "http://" + sizeof "/v1/traces";
    char *url = malloc(n);
    if (url) snprintf(url, n, "%s%s%s", scheme ? "" : "http://", e, has_path ? "" : "/v1/traces");
    return url;
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* "k=v,k2=v2" (values URL-encoded, as the OTLP exporters read them) -> headers. */
static vllm_status parse_headers(const char *s, struct curl_slist **out) {
    for (const char *p = s; p && *p;) {
        const char *end = strchr(p, ',');
        const char *stop = end ? end : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *kb = p, *ke = eq ? eq : stop, *vb = eq ? eq + 1 : stop, *ve = stop;
        while (kb < ke && *kb == ' ') kb++;
        while (ke > kb && ke[-1] == ' ') ke--;
        while (vb < ve && *vb == ' ') vb++;
        while (ve > vb && ve[-1] == ' ') ve--;
        if (!eq || ke == kb)
            return vllm_error(VLLM_ERR_INVALID, "OTEL_EXPORTER_OTLP_HEADERS: '%.*s' is not key=value",
                              (int)(stop - p), p);
        char *line = malloc((size_t)(stop - p) + 3);
        if (!line) return vllm_error(VLLM_ERR_NOMEM, "tracing: headers");
        size_t k = (size_t)(ke - kb);
        memcpy(line, kb, k);
        line[k++] = ':';
        line[k++] = ' ';
        for (const char *v = vb; v < ve; v++) {
            if (*v == '%' && v + 2 < ve && hexval(v[1]) >= 0 && hexval(v[2]) >= 0) {
                line[k++] = (char)(hexval(v[1]) * 16 + hexval(v[2]));
                v += 2;
            } else {
                line[k++] = *v;
            }
        }
        line[k] = 0;
        struct curl_slist *l = curl_slist_append(*out, line);
        free(line);
        if (!l) return vllm_error(VLLM_ERR_NOMEM, "tracing: headers");
        *out = l;
        p = end ? end + 1 : NULL;
    }
    return VLLM_OK;
}

/* ---- W3C trace context ----------------------------------------------------- */

static bool parse_hex(const char *s, int n, uint8_t *out) {
    for (int i = 0; i < n; i++) {
        int hi = s[2 * i], lo = s[2 * i + 1];
        bool ok = ((hi >= '0' && hi <= '9') || (hi >= 'a' && hi <= 'f')) &&
                  ((lo >= '0' && lo <= '9') || (lo >= 'a' && lo <= 'f'));
        if (!ok) return false;
        out[i] = (uint8_t)(hexval(hi) * 16 + hexval(lo));
    }
    return true;
}

static bool all_zero(const uint8_t *p, int n) {
    for (int i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

bool tracing_parse_traceparent(const char *s, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags) {
    if (!s) return false;
    while (*s == ' ' || *s == '\t') s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    uint8_t version;
    if (len < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-') return false;
    if (!parse_hex(s, 1, &version) || !parse_hex(s + 3, 16, trace_id) || !parse_hex(s + 36, 8, span_id) ||
        !parse_hex(s + 53, 1, flags))
        return false;
    if (version == 0xff) return false;
    if (len > 55 && (version == 0 || s[55] != '-')) return false;
    return !all_zero(trace_id, 16) && !all_zero(span_id, 8);
}

/* A tracestate worth passing on: printable ASCII, at most TRACESTATE_MAX. */
static bool copy_tracestate(const char *s, char *out) {
    out[0] = 0;
    if (!s) return false;
    while (*s == ' ' || *s == '\t') s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    if (len > TRACESTATE_MAX) return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e) return false;
    memcpy(out, s, len);
    out[len] = 0;
    return true;
}

/* ---- requests (HTTP and output threads) ------------------------------------ */

static atomic_bool warned_disabled;

void tracing_request_arrived(tracing *t, const tracing_request *r) {
    if (!t) {
        if ((r->traceparent || r->tracestate) && !atomic_exchange(&warned_disabled, true))
            log_warn("Received a request with trace context but tracing is disabled");
        return;
    }
    if (!r->request_id || strlen(r->request_id) >= ID_MAX) return;
    pending *p = calloc(1, sizeof *p);
    if (!p) {
        log_warn("tracing: out of memory; request %s is not traced", r->request_id);
        return;
    }
    trace_req *q = &p->req;
    q->has_parent = tracing_parse_traceparent(r->traceparent, q->trace_id, q->parent_span_id, &q->trace_flags);
    if (q->has_parent && !(q->trace_flags & 1)) { /* the caller did not sample it: no span */
        free(p);
        return;
    }
    if (q->has_parent) copy_tracestate(r->tracestate, q->trace_state);
    else q->trace_flags = 1;
    snprintf(q->request_id, sizeof q->request_id, "%s", r->request_id);
    snprintf(q->response_id, sizeof q->response_id, "%s", r->response_id ? r->response_id : "");
    q->model = r->model ? r->model : "";
    q->operation = r->operation ? r->operation : "";
    q->temperature = r->temperature;
    q->top_p = r->top_p;
    q->max_tokens = r->max_tokens;
    q->n = r->n < 1 ? 1 : r->n;
    p->left = q->n;
    pthread_mutex_lock(&t->mu);
    vllm_status rc = map_find(&t->live, q->request_id) ? VLLM_ERR_INVALID
                                                        : map_insert(&t->live, &p->by_id, q->request_id);
    pthread_mutex_unlock(&t->mu);
    if (rc != VLLM_OK) {
        log_warn("tracing: request %s is not traced (%s)", r->request_id,
                 rc == VLLM_ERR_NOMEM ? "out of memory" : "its id is live already");
        free(p);
    }
}

void tracing_sequence_finished(void *ud, const stats_finished *f) {
    tracing *t = ud;
    if (!t || !f->request_id) return;
    pending *done = NULL;
    pthread_mutex_lock(&t->mu);
    map_node *node = map_find(&t->live, f->request_id);
    if (node) {
        pending *p = map_entry(node, pending, by_id);
        if (t->count == t->cap) {
            t->counters.dropped_full++;
        } else {
            record *rec = &t->ring[(t->head + t->count) % t->cap];
            rec->req = p->req;
            rec->f = *f;
            rec->f.request_id = NULL;
            if (++t->count >= t->batch) pthread_cond_signal(&t->cv);
        }
        if (--p->left <= 0) {
            map_remove(&t->live, node);
            done = p;
        }
    }
    pthread_mutex_unlock(&t->mu);
    free(done);
}

void tracing_request_released(void *ud, const char *request_id) {
    tracing *t = ud;
    if (!t || !request_id) return;
    pending *p = NULL;
    pthread_mutex_lock(&t->mu);
    map_node *node = map_find(&t->live, request_id);
    if (node) {
        map_remove(&t->live, node);
        p = map_entry(node, pending, by_id);
    }
    pthread_mutex_unlock(&t->mu);
    free(p);
}

void tracing_get_counters(tracing *t, tracing_counters *out) {
    pthread_mutex_lock(&t->mu);
    *out = t->counters;
    pthread_mutex_unlock(&t->mu);
}

/* ---- encoding (exporter thread) -------------------------------------------- */

static bool random_bytes(uint8_t *p, size_t n) {
    while (n) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += got;
        n -= (size_t)got;
    }
    return true;
}

/* An id from the pool, never all zeros (redrawn, or 1 if randomness failed). */
static void take_id(uint8_t **pool, uint8_t *out, int n) {
    memcpy(out, *pool, (size_t)n);
    *pool += n;
    while (all_zero(out, n))
        if (!random_bytes(out, (size_t)n)) out[n - 1] = 1;
}

static uint64_t unix_ns(const tracing *t, double mono) {
    int64_t ns = (int64_t)(mono * 1e9) + t->wall_offset_ns;
    return ns > 0 ? (uint64_t)ns : 0;
}

static const char *finish_name(vllm_finish_reason r) {
    switch (r) {
    case VLLM_FINISH_STOP: return "stop";
    case VLLM_FINISH_LENGTH: return "length";
    case VLLM_FINISH_ABORT: return "abort";
    default: return "none";
    }
}

#define MAX_ATTRS 24

static void put_child(tracing *t, const record *rec, const otlp_span *parent, uint8_t **pool,
                      const char *name, double start, double seconds) {
    uint64_t s = unix_ns(t, start);
    uint64_t e = unix_ns(t, start + seconds);
    otlp_span c = {.has_parent = true, .name = name, .kind = OTLP_SPAN_KIND_INTERNAL,
                   .flags = (rec->req.trace_flags & 0xffu) | OTLP_SPAN_FLAGS_HAS_IS_REMOTE,
                   .trace_state = rec->req.trace_state, .start_ns = s, .end_ns = e < s ? s : e};
    memcpy(c.trace_id, parent->trace_id, 16);
    memcpy(c.parent_span_id, parent->span_id, 8);
    take_id(pool, c.span_id, 8);
    otlp_put_span(&t->body, OTLP_SCOPE_SPANS_SPANS, &c);
}

/* The spans of one record: llm_request and its phases. */
static void put_record(tracing *t, const record *rec, uint8_t **pool) {
    const trace_req *q = &rec->req;
    const stats_finished *f = &rec->f;
    otlp_attr a[MAX_ATTRS];
    int32_t n = 0;
#define ATTR_S(k, v) a[n++] = (otlp_attr){.key = (k), .type = OTLP_STRING, .s = (v)}
#define ATTR_I(k, v) a[n++] = (otlp_attr){.key = (k), .type = OTLP_INT, .i = (v)}
#define ATTR_D(k, v) a[n++] = (otlp_attr){.key = (k), .type = OTLP_DOUBLE, .d = (v)}
    /* vLLM 0.11's, in do_tracing's order */
    ATTR_S("gen_ai.response.model", q->model);
    ATTR_S("gen_ai.request.id", q->request_id);
    if (q->top_p != 0) ATTR_D("gen_ai.request.top_p", q->top_p);
    if (q->max_tokens > 0) ATTR_I("gen_ai.request.max_tokens", q->max_tokens);
    if (q->temperature != 0) ATTR_D("gen_ai.request.temperature", q->temperature);
    ATTR_I("gen_ai.request.n", q->n);
    ATTR_I("gen_ai.usage.prompt_tokens", f->num_prompt_tokens);
    ATTR_I("gen_ai.usage.completion_tokens", f->num_generation_tokens);
    ATTR_D("gen_ai.latency.time_in_queue", f->queue);
    ATTR_D("gen_ai.latency.time_to_first_token", f->ttft < 0 ? 0.0 : f->ttft);
    ATTR_D("gen_ai.latency.e2e", f->e2e);
    ATTR_D("gen_ai.latency.time_in_model_prefill", f->prefill);
    ATTR_D("gen_ai.latency.time_in_model_decode", f->decode);
    ATTR_D("gen_ai.latency.time_in_model_inference", f->inference);
    /* the current semantic conventions */
    ATTR_I("gen_ai.usage.input_tokens", f->num_prompt_tokens);
    ATTR_I("gen_ai.usage.output_tokens", f->num_generation_tokens);
    ATTR_S("gen_ai.operation.name", q->operation);
    ATTR_S("gen_ai.request.model", q->model);
    ATTR_S("gen_ai.response.id", q->response_id);
    const char *reasons[1] = {finish_name(f->reason)};
    a[n++] = (otlp_attr){.key = "gen_ai.response.finish_reasons", .type = OTLP_STRING_ARRAY,
                         .strs = reasons, .num_strs = 1};
    ATTR_I("vllm.request.index", f->index); /* the sequence among the request's n */
#undef ATTR_S
#undef ATTR_I
#undef ATTR_D

    otlp_span s = {.has_parent = q->has_parent, .name = "llm_request", .kind = OTLP_SPAN_KIND_SERVER,
                   .trace_state = q->trace_state, .attrs = a, .num_attrs = n,
                   .flags = (q->trace_flags & 0xffu) | OTLP_SPAN_FLAGS_HAS_IS_REMOTE |
                            (q->has_parent ? OTLP_SPAN_FLAGS_IS_REMOTE : 0)};
    if (q->has_parent) {
        memcpy(s.trace_id, q->trace_id, 16);
        memcpy(s.parent_span_id, q->parent_span_id, 8);
        *pool += 16;
    } else {
        take_id(pool, s.trace_id, 16);
    }
    take_id(pool, s.span_id, 8);
    s.start_ns = unix_ns(t, f->arrival);
    s.end_ns = unix_ns(t, f->arrival + f->e2e);
    if (s.end_ns < s.start_ns) s.end_ns = s.start_ns;
    otlp_put_span(&t->body, OTLP_SCOPE_SPANS_SPANS, &s);
    if (f->has_queued) put_child(t, rec, &s, pool, "queue", f->queued_ts, f->queue);
    else *pool += 8;
    if (f->has_scheduled) put_child(t, rec, &s, pool, "prefill", f->scheduled_ts, f->prefill);
    else *pool += 8;
    if (f->has_first_token) put_child(t, rec, &s, pool, "decode", f->first_token_ts, f->decode);
    else *pool += 8;
}

#define IDS_PER_RECORD (16 + 4 * 8)

/* Encodes ring[head .. head + k) into t->body as one ExportTraceServiceRequest. */
static void encode_batch(tracing *t, int32_t head, int32_t k) {
    otlp_buf_reset(&t->body);
    uint8_t *pool = t->ids;
    if (!random_bytes(pool, (size_t)k * IDS_PER_RECORD)) memset(pool, 0, (size_t)k * IDS_PER_RECORD);
    size_t rs = otlp_begin(&t->body, OTLP_REQUEST_RESOURCE_SPANS);
    size_t res = otlp_begin(&t->body, OTLP_RESOURCE_SPANS_RESOURCE);
    const otlp_attr res_attrs[] = {
        {.key = "service.name", .type = OTLP_STRING, .s = t->service_name},
        {.key = "telemetry.sdk.name", .type = OTLP_STRING, .s = "vllm.c"},
        {.key = "telemetry.sdk.language", .type = OTLP_STRING, .s = "c"},
    };
    for (size_t i = 0; i < sizeof res_attrs / sizeof res_attrs[0]; i++)
        otlp_put_attr(&t->body, OTLP_RESOURCE_ATTRIBUTES, &res_attrs[i]);
    otlp_end(&t->body, res);
    size_t ss = otlp_begin(&t->body, OTLP_RESOURCE_SPANS_SCOPE_SPANS);
    size_t scope = otlp_begin(&t->body, OTLP_SCOPE_SPANS_SCOPE);
    otlp_put_string_field(&t->body, OTLP_SCOPE_NAME, SCOPE_NAME);
    otlp_end(&t->body, scope);
    for (int32_t i = 0; i < k; i++) put_record(t, &t->ring[(head + i) % t->cap], &pool);
    otlp_end(&t->body, ss);
    otlp_end(&t->body, rs);
}

/* ---- export (exporter thread) ---------------------------------------------- */

typedef struct reply { char text[256]; size_t len; } reply;

static size_t on_reply(char *p, size_t size, size_t nmemb, void *ud) {
    reply *r = ud;
    size_t n = size * nmemb, room = sizeof r->text - 1 - r->len;
    size_t take = n < room ? n : room;
    memcpy(r->text + r->len, p, take);
    r->len += take;
    r->text[r->len] = 0;
    return n;
}

/* POSTs t->body; false with why. */
static bool post(tracing *t, double timeout, char *why, size_t cap) {
    if (t->body.failed) {
        snprintf(why, cap, "out of memory encoding the spans");
        return false;
    }
    reply r = {.len = 0};
    r.text[0] = 0;
    CURL *h = t->curl;
    curl_easy_setopt(h, CURLOPT_URL, t->url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->body.len);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)t->body.data);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "vllm.c OTLP exporter");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_reply);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        snprintf(why, cap, "%s", curl_easy_strerror(cc));
        return false;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) {
        for (size_t i = 0; i < r.len; i++)
            if ((unsigned char)r.text[i] < 0x20 || (unsigned char)r.text[i] > 0x7e) r.text[i] = ' ';
        snprintf(why, cap, "HTTP %ld %.120s", status, r.text);
        return false;
    }
    return true;
}

/* At most one warning a minute, with what was lost since the last one. */
static void maybe_warn(tracing *t, const char *why) {
    double now = clock_now();
    if (t->warned && now - t->last_warn < WARN_INTERVAL_S) return;
    tracing_counters c;
    tracing_get_counters(t, &c);
    log_warn("OTLP trace export to %s failed: %s (spans of %lld requests dropped so far; "
             "this warning repeats at most once a minute)",
             t->url, why, (long long)(c.dropped_failed + c.dropped_full));
    t->warned = true;
    t->last_warn = now;
    t->warned_dropped = c.dropped_full;
}

static void *exporter_main(void *arg) {
    tracing *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        struct timespec deadline = clock_deadline(t->delay);
        while (!t->stop && t->count < t->batch)
            if (pthread_cond_timedwait(&t->cv, &t->mu, &deadline) == ETIMEDOUT) break;
        bool stopping = t->stop;
        if (t->count == 0) {
            if (stopping) break;
            continue;
        }
        int32_t k = t->count < t->batch ? t->count : t->batch, head = t->head;
        pthread_mutex_unlock(&t->mu);
        encode_batch(t, head, k);
        pthread_mutex_lock(&t->mu);
        t->head = (t->head + k) % t->cap;
        t->count -= k;
        pthread_mutex_unlock(&t->mu);

        char why[200];
        /* at shutdown, one short try: a dead collector must not hold up the exit */
        bool ok = post(t, stopping && t->timeout > 2 ? 2 : t->timeout, why, sizeof why);
        pthread_mutex_lock(&t->mu);
        if (ok) {
            t->counters.exported += k;
        } else {
            t->counters.failed_exports++;
            t->counters.dropped_failed += k;
            if (stopping) { /* the rest would fail the same way */
                t->counters.dropped_failed += t->count;
                t->head = (t->head + t->count) % t->cap;
                t->count = 0;
            }
        }
        bool newly_full = t->counters.dropped_full > t->warned_dropped;
        pthread_mutex_unlock(&t->mu);
        if (!ok) maybe_warn(t, why);
        else if (newly_full) maybe_warn(t, "the span queue was full");
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- lifetime ---------------------------------------------------------------- */

vllm_status tracing_create(const tracing_config *c, tracing **out) {
    *out = NULL;
    if (!c->endpoint || !*c->endpoint)
        return vllm_error(VLLM_ERR_INVALID, "--otlp-traces-endpoint: an empty URL");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return vllm_error(VLLM_ERR_IO, "tracing: libcurl failed to initialize");
    tracing *t = calloc(1, sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "tracing: create");
    vllm_status rc = VLLM_ERR_NOMEM;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    map_init(&t->live);
    t->cap = c->max_queue_size > 0 ? c->max_queue_size : 2048;
    t->batch = c->max_export_batch_size > 0 && c->max_export_batch_size <= t->cap ? c->max_export_batch_size
                                                                                   : t->cap;
    t->delay = c->schedule_delay > 0 ? c->schedule_delay : 0.001;
    t->timeout = c->export_timeout > 0 ? c->export_timeout : 10;
    t->url = endpoint_url(c->endpoint);
    t->service_name = strdup(c->service_name ? c->service_name : "vllm");
    t->ring = calloc((size_t)t->cap, sizeof *t->ring);
    t->ids = malloc((size_t)t->batch * IDS_PER_RECORD);
    t->curl = curl_easy_init();
    if (!t->url || !t->service_name || !t->ring || !t->ids || !t->curl) {
        vllm_error(VLLM_ERR_NOMEM, "tracing: %d queued requests", t->cap);
        goto fail;
    }
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/x-protobuf");
    if (h) t->headers = h;
    if (h) h = curl_slist_append(t->headers, "Expect:"); /* no 100-continue round trip */
    if (!h) {
        vllm_error(VLLM_ERR_NOMEM, "tracing: headers");
        goto fail;
    }
    t->headers = h;
    if (c->headers && (rc = parse_headers(c->headers, &t->headers)) != VLLM_OK) goto fail;

    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    t->wall_offset_ns = ((int64_t)rt.tv_sec - (int64_t)mono.tv_sec) * 1000000000 +
                        ((int64_t)rt.tv_nsec - (int64_t)mono.tv_nsec);
    if (pthread_create(&t->thread, NULL, exporter_main, t) != 0) {
        rc = vllm_error(VLLM_ERR_IO, "tracing: cannot start the exporter thread");
        goto fail;
    }
    t->thread_started = true;
    log_info("Tracing: OTLP/HTTP spans to %s (service.name %s, a batch every %g s)", t->url,
             t->service_name, t->delay);
    *out = t;
    return VLLM_OK;
fail:
    tracing_free(t);
    return rc;
}

void tracing_free(tracing *t) {
    if (!t) return;
    if (t->thread_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        if (t->counters.dropped_full || t->counters.dropped_failed)
            log_warn("Tracing: spans of %lld requests were dropped (%lld: queue full, %lld: export failed)",
                     (long long)(t->counters.dropped_full + t->counters.dropped_failed),
                     (long long)t->counters.dropped_full, (long long)t->counters.dropped_failed);
    }
    for (map_node *n = map_first(&t->live), *next; n; n = next) {
        next = map_next(&t->live, n);
        map_remove(&t->live, n);
        free(map_entry(n, pending, by_id));
    }
    map_deinit(&t->live);
    if (t->curl) curl_easy_cleanup(t->curl);
    curl_slist_free_all(t->headers);
    otlp_buf_free(&t->body);
    free(t->ids);
    free(t->ring);
    free(t->service_name);
    free(t->url);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
    curl_global_cleanup();
}
