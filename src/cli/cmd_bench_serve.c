/*
 * cmd_bench_serve.c - `vllmc bench serve`: vLLM's serving benchmark, a load
 * generator against any OpenAI-compatible server (ours, llama-server, vLLM).
 *
 * Requests come from the random dataset (bench_dataset.h). Request i is due
 * at the sum of i inter-arrival gaps drawn from Gamma(shape = burstiness,
 * scale = 1 / (rate * burstiness)) (burstiness 1 = Poisson; --request-rate
 * inf = all at time 0); a due request starts as soon as fewer than
 * --max-concurrency are in flight, in order. Every request streams (SSE); at
 * each chunk that carries choices the time is taken: the first gives TTFT,
 * the gaps between later ones are the ITLs, the last ends the request
 * (E2EL). Output length is the server's usage.completion_tokens, else the
 * streamed text re-tokenized (as vLLM). The report and its arithmetic are
 * vLLM's calculate_metrics / print: TPOT per request = (E2EL - TTFT) /
 * (output_len - 1) for output_len > 1, ITLs of all requests pooled, goodput =
 * requests meeting every --goodput SLO / duration, peaks from 1-second bins.
 *
 * One thread: libcurl's multi interface runs every transfer; jansson builds
 * the bodies and reads the chunks. Prompts go to /v1/completions as token id
 * lists (exact lengths, no client/server tokenizer mismatch); openai-chat
 * sends the ids decoded to text.
 */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/bench_dataset.h"
#include "cli/bench_rng.h"
#include "cli/bench_stats.h"
#include "cli/cli.h"
#include "cli/cmd_bench.h"
#include "cli/engine_args.h"
#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

#define CMD "bench serve"
#define MAX_PERCENTILES 16

typedef struct serve_opts {
    const char *backend, *base_url, *host, *endpoint, *model, *tokenizer, *dataset;
    int32_t port, num_prompts, max_concurrency; /* 0 = unbounded */
    bench_random_config data;
    double request_rate, burstiness;
    bool ignore_eos, save_result;
    bool has_temperature, has_top_p, has_top_k;
    double temperature, top_p;
    int32_t top_k;
    double slo_ttft, slo_tpot, slo_e2el; /* ms; < 0 = none */
    bool goodput;
    bool metric_on[4];                   /* ttft, tpot, itl, e2el */
    double percentiles[MAX_PERCENTILES];
    int32_t num_percentiles;
    uint64_t seed;
    const char *result_dir, *result_filename;
    int32_t ready_timeout;               /* seconds */
} serve_opts;

/* One request's transfer and what it measured (vLLM's RequestFuncOutput). */
typedef struct serve_req {
    int32_t index;
    CURL *h;
    char *body;
    char *line;                          /* partial SSE line */
    size_t line_len, line_cap;
    char *text;                          /* generated text */
    size_t text_len, text_cap;
    double start, ttft, latency, last;   /* seconds; start since the benchmark began */
    double *itl;
    int32_t num_itl, cap_itl;
    int64_t usage_tokens;                /* -1 = none reported */
    int32_t output_len;
    bool got_chunk, success, bad_chunk;
    char error[256];
} serve_req;

typedef struct serve_ctx {
    const serve_opts *o;
    const tokenizer *tok;
    bench_request *data;
    serve_req *reqs;
    bool chat;
    char url[1024];
    struct curl_slist *headers;
    double t0;                           /* monotonic time at benchmark start */
} serve_ctx;

static double now(void) { return vllm_monotonic_time(); }

/* ---- SSE chunks --------------------------------------------------------- */

static bool buf_append(char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *t = realloc(*buf, c);
        if (!t) return false;
        *buf = t;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

/* One `data:` payload received at time t (seconds since the request began). */
static void handle_event(serve_ctx *c, serve_req *r, const char *payload, size_t n, double t) {
    if (n == 6 && !memcmp(payload, "[DONE]", 6)) return;
    json_error_t err;
    /* NUL is valid JSON text ("\u0000": a byte token of a small model, as
     * llama-server streams it); jansson refuses it unless asked */
    json_t *o = json_loadb(payload, n, JSON_ALLOW_NUL, &err);
    if (!o) {
        r->bad_chunk = true;
        snprintf(r->error, sizeof r->error, "malformed SSE chunk: %s", err.text);
        return;
    }
    json_t *choices = json_object_get(o, "choices"), *usage = json_object_get(o, "usage");
    if (json_is_array(choices) && json_array_size(choices) > 0) {
        json_t *ch = json_array_get(choices, 0);
        json_t *txt = c->chat ? json_object_get(json_object_get(ch, "delta"), "content") : json_object_get(ch, "text");
        if (!r->got_chunk) {
            r->got_chunk = true;
            r->ttft = t;
        } else {
            if (r->num_itl == r->cap_itl) {
                int32_t cap = r->cap_itl ? r->cap_itl * 2 : 64;
                double *p = realloc(r->itl, (size_t)cap * sizeof *p);
                if (p) {
                    r->itl = p;
                    r->cap_itl = cap;
                }
            }
            if (r->num_itl < r->cap_itl) r->itl[r->num_itl++] = t - r->last;
        }
        r->last = t;
        if (json_is_string(txt))
            buf_append(&r->text, &r->text_len, &r->text_cap, json_string_value(txt), json_string_length(txt));
    }
    /* Usage may come alone in a last chunk (vLLM) or beside the last choice
     * (llama-server): read it wherever it is. */
    if (json_is_object(usage)) {
        json_t *ct = json_object_get(usage, "completion_tokens");
        if (json_is_integer(ct)) r->usage_tokens = json_integer_value(ct);
    }
    json_decref(o);
}

typedef struct write_arg { serve_ctx *c; serve_req *r; } write_arg;

static size_t on_write(char *p, size_t size, size_t nmemb, void *userdata) {
    write_arg *w = userdata;
    serve_req *r = w->r;
    size_t n = size * nmemb;
    double t = now() - w->c->t0 - r->start;
    long code = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) { /* keep the start of an error body for the report */
        size_t have = strlen(r->error), room = sizeof r->error - 1 - have;
        if (!have) have = (size_t)snprintf(r->error, sizeof r->error, "HTTP %ld: ", code), room = sizeof r->error - 1 - have;
        size_t k = n < room ? n : room;
        memcpy(r->error + have, p, k);
        r->error[have + k] = 0;
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            if (!buf_append(&r->line, &r->line_len, &r->line_cap, p + i, 1)) return 0;
            continue;
        }
        size_t len = r->line_len;
        if (len && r->line[len - 1] == '\r') len--;
        if (len >= 5 && !memcmp(r->line, "data:", 5)) {
            size_t off = 5 + (len > 5 && r->line[5] == ' ');
            handle_event(w->c, r, r->line + off, len - off, t);
        }
        r->line_len = 0;
    }
    return n;
}

/* ---- requests ----------------------------------------------------------- */

static char *make_body(serve_ctx *c, const bench_request *q) {
    const serve_opts *o = c->o;
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(o->model));
    if (c->chat) {
        char *text = NULL;
        size_t len = 0;
        if (tokenizer_decode(c->tok, q->prompt, q->prompt_len, true, &text, &len) != VLLM_OK) {
            json_decref(b);
            return NULL;
        }
        json_t *msg = json_pack("{s:s,s:s%}", "role", "user", "content", text, len);
        free(text);
        json_object_set_new(b, "messages", json_pack("[o]", msg));
        json_object_set_new(b, "max_completion_tokens", json_integer(q->output_len));
    } else {
        json_t *ids = json_array();
        for (int32_t j = 0; j < q->prompt_len; j++) json_array_append_new(ids, json_integer(q->prompt[j]));
        json_object_set_new(b, "prompt", ids);
        json_object_set_new(b, "max_tokens", json_integer(q->output_len));
    }
    /* vLLM's bench defaults to greedy unless a temperature is given */
    json_object_set_new(b, "temperature", json_real(o->has_temperature ? o->temperature : 0.0));
    if (o->has_top_p) json_object_set_new(b, "top_p", json_real(o->top_p));
    if (o->has_top_k) json_object_set_new(b, "top_k", json_integer(o->top_k));
    if (o->ignore_eos) json_object_set_new(b, "ignore_eos", json_true());
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

static void req_reset(serve_req *r) {
    r->line_len = r->text_len = 0;
    if (r->text) r->text[0] = 0;
    r->num_itl = 0;
    r->ttft = r->latency = r->last = 0;
    r->usage_tokens = -1;
    r->output_len = 0;
    r->got_chunk = r->success = r->bad_chunk = false;
    r->error[0] = 0;
}

static bool req_start(serve_ctx *c, CURLM *m, serve_req *r, write_arg *w) {
    req_reset(r);
    if (!r->body && !(r->body = make_body(c, &c->data[r->index]))) {
        snprintf(r->error, sizeof r->error, "cannot build the request body");
        return false;
    }
    if (!r->h && !(r->h = curl_easy_init())) return false;
    curl_easy_reset(r->h);
    w->c = c;
    w->r = r;
    curl_easy_setopt(r->h, CURLOPT_URL, c->url);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(r->h, CURLOPT_TIMEOUT, 6L * 3600); /* vLLM's aiohttp timeout */
    r->start = now() - c->t0;
    return curl_multi_add_handle(m, r->h) == CURLM_OK;
}

/* A finished transfer: success if it was 200 and at least one chunk came. */
static void req_finish(serve_ctx *c, serve_req *r, CURLcode res) {
    long code = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &code);
    if (res != CURLE_OK) {
        snprintf(r->error, sizeof r->error, "%s", curl_easy_strerror(res));
    } else if (code == 200 && !r->bad_chunk) {
        if (r->got_chunk) {
            r->success = true;
            r->latency = r->last;
        } else {
            snprintf(r->error, sizeof r->error, "Never received a valid chunk to calculate TTFT.");
        }
    }
    if (!r->success) return;
    if (r->usage_tokens > 0) {
        r->output_len = (int32_t)r->usage_tokens;
    } else if (c->tok) {
        int32_t *ids = NULL, n = 0;
        if (tokenizer_encode(c->tok, r->text ? r->text : "", r->text_len, false, &ids, &n) == VLLM_OK)
            r->output_len = n;
        free(ids);
    } else {
        r->output_len = r->num_itl + 1;
    }
}

/* Runs requests [first, first + count) with the arrival times given (seconds
 * from the start). Returns false only on a client-side failure. */
static bool run_requests(serve_ctx *c, int32_t first, int32_t count, const double *arrival) {
    CURLM *m = curl_multi_init();
    write_arg *w = calloc((size_t)count, sizeof *w);
    bool ok = m && w;
    int32_t next = 0, active = 0, done = 0;
    int32_t maxc = c->o->max_concurrency;
    c->t0 = now();
    while (ok && done < count) {
        double t = now() - c->t0;
        while (next < count && arrival[next] <= t && (maxc <= 0 || active < maxc)) {
            serve_req *r = &c->reqs[first + next];
            if (!req_start(c, m, r, &w[next])) {
                if (!r->error[0]) snprintf(r->error, sizeof r->error, "cannot start the transfer");
                done++;
            } else {
                active++;
            }
            next++;
        }
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            serve_req *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            CURLcode res = msg->data.result;
            curl_multi_remove_handle(m, msg->easy_handle);
            req_finish(c, r, res);
            active--;
            done++;
        }
        if (done == count) break;
        int timeout_ms = 1000;
        if (next < count && (maxc <= 0 || active < maxc)) {
            double wait = arrival[next] - (now() - c->t0);
            timeout_ms = wait <= 0 ? 0 : wait > 1 ? 1000 : (int)ceil(wait * 1000);
        }
        if (timeout_ms > 0 && curl_multi_poll(m, NULL, 0, timeout_ms, NULL) != CURLM_OK) ok = false;
    }
    curl_multi_cleanup(m);
    free(w);
    return ok;
}

/* ---- metrics (vLLM's calculate_metrics) --------------------------------- */

typedef struct metric_summary {
    double mean, median, std;
    double pct[MAX_PERCENTILES];
} metric_summary;

static void summarize(const serve_opts *o, double *x, size_t n, metric_summary *s) {
    s->mean = bench_stats_mean(x, n) * 1000;
    s->std = bench_stats_std(x, n) * 1000;
    bench_stats_sort(x, n);
    s->median = bench_stats_median(x, n) * 1000;
    for (int32_t k = 0; k < o->num_percentiles; k++) s->pct[k] = bench_stats_percentile(x, n, o->percentiles[k]) * 1000;
}

static const char *const metric_keys[4] = {"ttft", "tpot", "itl", "e2el"};
static const char *const metric_names[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
static const char *const metric_headers[4] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                                              "Inter-token Latency", "End-to-end Latency"};

/* Python's "{s:{c}^{n}}".format: centred, the odd pad character on the right. */
static void print_centered(const char *s, char fill, int width) {
    int len = (int)strlen(s), pad = width > len ? width - len : 0;
    for (int i = 0; i < pad / 2; i++) putchar(fill);
    fputs(s, stdout);
    for (int i = 0; i < pad - pad / 2; i++) putchar(fill);
    putchar('\n');
}

static void percent_word(char *buf, size_t cap, double p) {
    if (p == floor(p)) snprintf(buf, cap, "%d", (int)p);
    else bench_format_float(buf, cap, p);
}

static void print_row_f(const char *label, double v) { printf("%-40s %-10.2f\n", label, v); }
static void print_row_i(const char *label, long long v) { printf("%-40s %-10lld\n", label, v); }

static json_t *jreal_array(const double *x, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_real(x[i]));
    return a;
}

/* Computes, prints and (optionally) saves the report. */
static bool report(serve_ctx *c, double duration) {
    const serve_opts *o = c->o;
    int32_t n = o->num_prompts, completed = 0, good = 0;
    int64_t total_in = 0, total_out = 0;
    size_t num_itl = 0;
    for (int32_t i = 0; i < n; i++) num_itl += c->reqs[i].success ? (size_t)c->reqs[i].num_itl : 0;
    double *vals[4], *all_tpots = calloc((size_t)n + 1, sizeof(double));
    size_t cnt[4] = {0};
    vals[0] = calloc((size_t)n + 1, sizeof(double));
    vals[1] = calloc((size_t)n + 1, sizeof(double));
    vals[2] = calloc(num_itl + 1, sizeof(double));
    vals[3] = calloc((size_t)n + 1, sizeof(double));
    bool ok = all_tpots && vals[0] && vals[1] && vals[2] && vals[3];
    double min_start = INFINITY, max_end = -INFINITY;
    for (int32_t i = 0; ok && i < n; i++) {
        const serve_req *r = &c->reqs[i];
        if (!r->success) continue;
        int32_t L = r->output_len;
        total_out += L;
        total_in += c->data[i].prompt_len;
        double tpot = 0;
        if (L > 1) {
            tpot = (r->latency - r->ttft) / (L - 1);
            vals[1][cnt[1]++] = tpot;
        }
        all_tpots[completed] = tpot;
        for (int32_t k = 0; k < r->num_itl; k++) vals[2][cnt[2]++] = r->itl[k];
        vals[0][cnt[0]++] = r->ttft;
        vals[3][cnt[3]++] = r->latency;
        if (o->goodput) {
            bool g = (o->slo_ttft < 0 || o->slo_ttft / 1000 >= r->ttft) &&
                     (o->slo_tpot < 0 || o->slo_tpot / 1000 >= tpot) &&
                     (o->slo_e2el < 0 || o->slo_e2el / 1000 >= r->latency);
            good += g;
        }
        if (r->start < min_start) min_start = r->start;
        if (r->start + r->latency > max_end) max_end = r->start + r->latency;
        completed++;
    }
    /* peaks: tokens and live requests per 1-second bin from the first start */
    double peak_tok = 0, peak_conc = 0;
    if (ok && completed > 0) {
        int32_t bins = (int32_t)ceil(max_end - min_start) + 1;
        double *tok = calloc((size_t)bins, sizeof *tok), *conc = calloc((size_t)bins, sizeof *conc);
        if (!tok || !conc) ok = false;
        for (int32_t i = 0; ok && i < n; i++) {
            const serve_req *r = &c->reqs[i];
            if (!r->success) continue;
            double t = r->start + r->ttft;
            for (int32_t k = -1; k < r->num_itl; k++) {
                if (k >= 0) t += r->itl[k];
                int32_t b = (int32_t)(t - min_start);
                if (b >= 0 && b < bins) tok[b]++;
            }
            int32_t s = (int32_t)(r->start - min_start), e = (int32_t)(r->start + r->latency - min_start);
            for (int32_t b = s; b <= e && b < bins; b++) conc[b]++;
        }
        for (int32_t b = 0; ok && b < bins; b++) {
            if (tok[b] > peak_tok) peak_tok = tok[b];
            if (conc[b] > peak_conc) peak_conc = conc[b];
        }
        free(tok);
        free(conc);
    }
    json_t *res = NULL;
    if (!ok) goto out;
    if (completed == 0) fprintf(stderr, "vllmc " CMD ": all requests failed (first error: %s)\n", c->reqs[0].error);
    else if (completed < n)
        for (int32_t i = 0; i < n; i++)
            if (!c->reqs[i].success) {
                fprintf(stderr, "vllmc " CMD ": %d of %d requests failed (first: request %d: %s)\n", n - completed, n,
                        i, c->reqs[i].error[0] ? c->reqs[i].error : "no error text");
                break;
            }

    json_t *itls_json = json_array(), *ttfts = json_array(), *in_lens = json_array(), *out_lens = json_array(),
           *texts = json_array(), *errors = json_array();
    for (int32_t i = 0; i < n; i++) {
        const serve_req *r = &c->reqs[i];
        json_array_append_new(in_lens, json_integer(c->data[i].prompt_len));
        json_array_append_new(out_lens, json_integer(r->success ? r->output_len : 0));
        json_array_append_new(ttfts, json_real(r->success ? r->ttft : 0));
        json_array_append_new(itls_json, r->success ? jreal_array(r->itl, (size_t)r->num_itl) : json_array());
        json_t *t = json_stringn(r->text ? r->text : "", r->text_len);
        json_array_append_new(texts, t ? t : json_string(""));
        json_array_append_new(errors, json_string(r->error));
    }
    metric_summary ms[4];
    for (int k = 0; k < 4; k++) summarize(o, vals[k], cnt[k], &ms[k]);

    print_centered(" Serving Benchmark Result ", '=', 50);
    print_row_i("Successful requests:", completed);
    if (o->max_concurrency > 0) print_row_i("Maximum request concurrency:", o->max_concurrency);
    if (isfinite(o->request_rate)) print_row_f("Request rate configured (RPS):", o->request_rate);
    print_row_f("Benchmark duration (s):", duration);
    print_row_i("Total input tokens:", (long long)total_in);
    print_row_i("Total generated tokens:", (long long)total_out);
    print_row_f("Request throughput (req/s):", completed / duration);
    if (o->goodput) print_row_f("Request goodput (req/s):", good / duration);
    print_row_f("Output token throughput (tok/s):", (double)total_out / duration);
    print_row_f("Peak output token throughput (tok/s):", peak_tok);
    print_row_f("Peak concurrent requests:", peak_conc);
    print_row_f("Total Token throughput (tok/s):", (double)(total_in + total_out) / duration);
    for (int k = 0; k < 4; k++) {
        if (!o->metric_on[k]) continue;
        char label[96], pw[32];
        print_centered(metric_headers[k], '-', 50);
        snprintf(label, sizeof label, "Mean %s (ms):", metric_names[k]);
        print_row_f(label, ms[k].mean);
        snprintf(label, sizeof label, "Median %s (ms):", metric_names[k]);
        print_row_f(label, ms[k].median);
        for (int32_t q = 0; q < o->num_percentiles; q++) {
            percent_word(pw, sizeof pw, o->percentiles[q]);
            snprintf(label, sizeof label, "P%s %s (ms):", pw, metric_names[k]);
            print_row_f(label, ms[k].pct[q]);
        }
    }
    for (int i = 0; i < 50; i++) putchar('=');
    putchar('\n');
    fflush(stdout);

    if (o->save_result) {
        char date[32], rate[32], path[2048], file[1024];
        time_t tt = time(NULL);
        struct tm tmv;
        localtime_r(&tt, &tmv);
        strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tmv);
        bench_format_float(rate, sizeof rate, o->request_rate);
        res = json_object();
        json_object_set_new(res, "date", json_string(date));
        json_object_set_new(res, "endpoint_type", json_string(o->backend));
        json_object_set_new(res, "label", json_null());
        json_object_set_new(res, "model_id", json_string(o->model));
        json_object_set_new(res, "tokenizer_id", json_string(o->tokenizer ? o->tokenizer : ""));
        json_object_set_new(res, "num_prompts", json_integer(n));
        json_object_set_new(res, "request_rate", isfinite(o->request_rate) ? json_real(o->request_rate) : json_string("inf"));
        json_object_set_new(res, "burstiness", json_real(o->burstiness));
        json_object_set_new(res, "max_concurrency", o->max_concurrency > 0 ? json_integer(o->max_concurrency) : json_null());
        json_object_set_new(res, "duration", json_real(duration));
        json_object_set_new(res, "completed", json_integer(completed));
        json_object_set_new(res, "total_input_tokens", json_integer(total_in));
        json_object_set_new(res, "total_output_tokens", json_integer(total_out));
        json_object_set_new(res, "request_throughput", json_real(completed / duration));
        json_object_set_new(res, "request_goodput", o->goodput ? json_real(good / duration) : json_null());
        json_object_set_new(res, "output_throughput", json_real((double)total_out / duration));
        json_object_set_new(res, "total_token_throughput", json_real((double)(total_in + total_out) / duration));
        json_object_set_new(res, "max_output_tokens_per_s", json_real(peak_tok));
        json_object_set_new(res, "max_concurrent_requests", json_integer((json_int_t)peak_conc));
        json_object_set(res, "input_lens", in_lens);
        json_object_set(res, "output_lens", out_lens);
        json_object_set(res, "ttfts", ttfts);
        json_object_set(res, "itls", itls_json);
        json_object_set(res, "generated_texts", texts);
        json_object_set(res, "errors", errors);
        for (int k = 0; k < 4; k++) {
            if (!o->metric_on[k]) continue;
            char key[64], pw[32];
            snprintf(key, sizeof key, "mean_%s_ms", metric_keys[k]);
            json_object_set_new(res, key, json_real(ms[k].mean));
            snprintf(key, sizeof key, "median_%s_ms", metric_keys[k]);
            json_object_set_new(res, key, json_real(ms[k].median));
            snprintf(key, sizeof key, "std_%s_ms", metric_keys[k]);
            json_object_set_new(res, key, json_real(ms[k].std));
            for (int32_t q = 0; q < o->num_percentiles; q++) {
                percent_word(pw, sizeof pw, o->percentiles[q]);
                snprintf(key, sizeof key, "p%s_%s_ms", pw, metric_keys[k]);
                json_object_set_new(res, key, json_real(ms[k].pct[q]));
            }
        }
        if (o->result_filename) {
            snprintf(file, sizeof file, "%s", o->result_filename);
        } else {
            const char *base = strrchr(o->model, '/');
            base = base ? base + 1 : o->model;
            char conc[32] = "";
            if (o->max_concurrency > 0) snprintf(conc, sizeof conc, "-concurrency%d", o->max_concurrency);
            snprintf(file, sizeof file, "%s-%sqps%s-%s-%s.json", o->backend, rate, conc, base, date);
        }
        if (o->result_dir) {
            mkdir(o->result_dir, 0777);
            snprintf(path, sizeof path, "%s/%s", o->result_dir, file);
        } else {
            snprintf(path, sizeof path, "%s", file);
        }
        if (json_dump_file(res, path, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) != 0) {
            fprintf(stderr, "vllmc " CMD ": cannot write %s: %s\n", path, strerror(errno));
            ok = false;
        }
    }
    json_decref(itls_json);
    json_decref(ttfts);
    json_decref(in_lens);
    json_decref(out_lens);
    json_decref(texts);
    json_decref(errors);
    ok = ok && completed > 0;
out:
    json_decref(res);
    free(all_tpots);
    for (int k = 0; k < 4; k++) free(vals[k]);
    return ok;
}

/* ---- set-up ------------------------------------------------------------- */

static size_t collect(char *p, size_t size, size_t nmemb, void *userdata) {
    char **buf = userdata;
    size_t n = size * nmemb, old = *buf ? strlen(*buf) : 0;
    if (old + n > (1u << 20)) return 0;
    char *t = realloc(*buf, old + n + 1);
    if (!t) return 0;
    memcpy(t + old, p, n);
    t[old + n] = 0;
    *buf = t;
    return n;
}

/* GET {base}/v1/models and return the first model id (malloc'ed), or NULL. */
static char *first_model(const char *base) {
    char url[1100], *body = NULL, *id = NULL;
    snprintf(url, sizeof url, "%s/v1/models", base);
    CURL *h = curl_easy_init();
    if (!h) return NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    if (curl_easy_perform(h) == CURLE_OK && body) {
        json_t *o = json_loads(body, 0, NULL);
        json_t *v = json_object_get(json_array_get(json_object_get(o, "data"), 0), "id");
        if (json_is_string(v)) id = strdup(json_string_value(v));
        json_decref(o);
    }
    free(body);
    curl_easy_cleanup(h);
    return id;
}

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc bench serve [options]\n"
            "Load-test an OpenAI-compatible server with streamed requests (vllm bench serve).\n"
            "  --backend openai|vllm|openai-chat   (openai; vllm = openai)\n"
            "  --base-url URL | --host H --port P  (http://127.0.0.1:8000)\n"
            "  --endpoint PATH                     (/v1/completions; chat: /v1/chat/completions)\n"
            "  --model NAME                        served model (default: the first of /v1/models)\n"
            "  --tokenizer DIR                     for chat prompts and output counting without usage\n"
            "                                      (default: --model if a directory, else the bundled model)\n"
            "  --dataset-name random               (the only one)\n"
            "  --num-prompts N (1000) --random-input-len N (1024) --random-output-len N (128)\n"
            "  --random-range-ratio R (0.0) --random-prefix-len N (0) --seed N (0)\n"
            "  --request-rate inf|R (inf) --burstiness B (1.0 = Poisson) --max-concurrency N\n"
            "  --ignore-eos --temperature T (0) --top-p P --top-k K\n"
            "  --goodput ttft:MS tpot:MS e2el:MS   SLOs for the goodput figure\n"
            "  --percentile-metrics ttft,tpot,itl[,e2el]  --metric-percentiles 99[,50,...]\n"
            "  --save-result --result-dir DIR --result-filename FILE\n"
            "  --ready-check-timeout-sec S         retry the first request this long (600; 0 = once)\n");
}

static bool parse_goodput(serve_opts *o, const char *kv) {
    const char *colon = strchr(kv, ':');
    double v;
    if (!colon || !bench_parse_f64(CMD, "--goodput", colon + 1, 0, false, &v)) {
        fprintf(stderr, "vllmc " CMD ": argument --goodput: '%s' is not KEY:MS\n", kv);
        return false;
    }
    size_t k = (size_t)(colon - kv);
    if (k == 4 && !strncmp(kv, "ttft", 4)) o->slo_ttft = v;
    else if (k == 4 && !strncmp(kv, "tpot", 4)) o->slo_tpot = v;
    else if (k == 4 && !strncmp(kv, "e2el", 4)) o->slo_e2el = v;
    else {
        fprintf(stderr, "vllmc " CMD ": argument --goodput: '%.*s' is not ttft, tpot or e2el\n", (int)k, kv);
        return false;
    }
    o->goodput = true;
    return true;
}

static bool parse_list(serve_opts *o, const char *flag, const char *v) {
    char *copy = strdup(v), *save = NULL;
    if (!copy) return false;
    bool ok = true;
    if (!strcmp(flag, "--percentile-metrics")) memset(o->metric_on, 0, sizeof o->metric_on);
    else o->num_percentiles = 0;
    for (char *t = strtok_r(copy, ",", &save); ok && t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(flag, "--percentile-metrics")) {
            int k = 0;
            while (k < 4 && strcmp(t, metric_keys[k])) k++;
            if (k == 4) {
                fprintf(stderr, "vllmc " CMD ": argument %s: '%s' is not ttft, tpot, itl or e2el\n", flag, t);
                ok = false;
            } else {
                o->metric_on[k] = true;
            }
        } else if (o->num_percentiles == MAX_PERCENTILES) {
            fprintf(stderr, "vllmc " CMD ": argument %s: at most %d percentiles\n", flag, MAX_PERCENTILES);
            ok = false;
        } else {
            double p;
            ok = bench_parse_f64(CMD, flag, t, 0, false, &p);
            if (ok && (p <= 0 || p >= 100)) {
                fprintf(stderr, "vllmc " CMD ": argument %s: %s is not in (0, 100)\n", flag, t);
                ok = false;
            }
            if (ok) o->percentiles[o->num_percentiles++] = p;
        }
    }
    free(copy);
    return ok;
}

/* Returns 0 ok, 1 --help, 2 error. */
static int parse_args(serve_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc;) {
        char name[64];
        const char *iv = engine_args_flag_name(argv[i], name, sizeof name), *v = NULL;
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) return 1;
        if (!strcmp(name, "--ignore-eos")) {
            o->ignore_eos = true;
            i++;
            continue;
        }
        if (!strcmp(name, "--save-result")) {
            o->save_result = true;
            i++;
            continue;
        }
        if (!strcmp(name, "--goodput")) { /* nargs="+" */
            int start = i;
            if (iv && !parse_goodput(o, iv)) return 2;
            for (i++; i < argc && strncmp(argv[i], "--", 2); i++)
                if (!parse_goodput(o, argv[i])) return 2;
            if (!iv && i == start + 1) {
                fprintf(stderr, "vllmc " CMD ": argument --goodput: expected at least one KEY:MS\n");
                return 2;
            }
            continue;
        }
        const bench_int_flag ints[] = {
            {"--port", &o->port, 0}, {"--num-prompts", &o->num_prompts, 1},
            {"--random-input-len", &o->data.input_len, 0}, {"--random-output-len", &o->data.output_len, 1},
            {"--random-prefix-len", &o->data.prefix_len, 0}, {"--max-concurrency", &o->max_concurrency, 1},
            {"--top-k", &o->top_k, -1}, {"--ready-check-timeout-sec", &o->ready_timeout, 0}};
        int got = bench_parse_int_flag(CMD, ints, sizeof ints / sizeof *ints, name, iv, argc, argv, &i);
        if (got < 0) return 2;
        if (got > 0) {
            if (!strcmp(name, "--top-k")) o->has_top_k = true;
            continue;
        }
        static const char *const str_flags[] = {"--backend", "--base-url", "--host", "--endpoint", "--model",
                                                "--served-model-name", "--tokenizer", "--dataset-name",
                                                "--result-dir", "--result-filename", "--request-rate",
                                                "--burstiness", "--random-range-ratio", "--temperature",
                                                "--top-p", "--seed", "--percentile-metrics",
                                                "--metric-percentiles", NULL};
        const char *const *f = str_flags;
        while (*f && strcmp(name, *f)) f++;
        if (!*f) {
            fprintf(stderr, "vllmc " CMD ": unknown option '%s'\n", argv[i]);
            serve_usage(stderr);
            return 2;
        }
        if (!(v = bench_flag_value(CMD, name, iv, argc, argv, &i))) return 2;
        bool ok = true;
        if (!strcmp(name, "--backend")) o->backend = v;
        else if (!strcmp(name, "--base-url")) o->base_url = v;
        else if (!strcmp(name, "--host")) o->host = v;
        else if (!strcmp(name, "--endpoint")) o->endpoint = v;
        else if (!strcmp(name, "--model") || !strcmp(name, "--served-model-name")) o->model = v;
        else if (!strcmp(name, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(name, "--dataset-name")) o->dataset = v;
        else if (!strcmp(name, "--result-dir")) o->result_dir = v;
        else if (!strcmp(name, "--result-filename")) o->result_filename = v;
        else if (!strcmp(name, "--request-rate")) {
            ok = bench_parse_f64(CMD, name, v, 0, true, &o->request_rate);
            if (ok && o->request_rate <= 0) {
                fprintf(stderr, "vllmc " CMD ": argument --request-rate: must be > 0 or inf\n");
                ok = false;
            }
        } else if (!strcmp(name, "--burstiness")) {
            ok = bench_parse_f64(CMD, name, v, 0, false, &o->burstiness);
            if (ok && o->burstiness <= 0) {
                fprintf(stderr, "vllmc " CMD ": argument --burstiness: must be > 0\n");
                ok = false;
            }
        } else if (!strcmp(name, "--random-range-ratio")) ok = bench_parse_f64(CMD, name, v, 0, false, &o->data.range_ratio);
        else if (!strcmp(name, "--temperature")) ok = o->has_temperature = bench_parse_f64(CMD, name, v, 0, false, &o->temperature);
        else if (!strcmp(name, "--top-p")) ok = o->has_top_p = bench_parse_f64(CMD, name, v, 0, false, &o->top_p);
        else if (!strcmp(name, "--seed")) ok = bench_parse_u64(CMD, name, v, &o->seed);
        else ok = parse_list(o, name, v);
        if (!ok) return 2;
    }
    return 0;
}

int cmd_bench_serve(int argc, char **argv) {
    serve_opts o = {.backend = "openai", .host = "127.0.0.1", .port = 8000, .endpoint = "/v1/completions",
                    .dataset = "random", .num_prompts = 1000, .request_rate = INFINITY, .burstiness = 1.0,
                    .slo_ttft = -1, .slo_tpot = -1, .slo_e2el = -1, .metric_on = {true, true, true, false},
                    .percentiles = {99}, .num_percentiles = 1, .ready_timeout = 600,
                    .data = {.input_len = 1024, .output_len = 128}};
    int r = parse_args(&o, argc, argv);
    if (r == 1) {
        serve_usage(stdout);
        return 0;
    }
    if (r) return 2;
    bool chat = !strcmp(o.backend, "openai-chat");
    if (!chat && strcmp(o.backend, "openai") && strcmp(o.backend, "vllm")) {
        fprintf(stderr, "vllmc " CMD ": argument --backend: '%s' is not openai, vllm or openai-chat\n", o.backend);
        return 2;
    }
    if (chat && (strlen(o.endpoint) < 16 || strcmp(o.endpoint + strlen(o.endpoint) - 16, "chat/completions"))) {
        fprintf(stderr, "vllmc " CMD ": the openai-chat backend needs an endpoint ending in chat/completions "
                        "(got '%s'; use --endpoint /v1/chat/completions)\n", o.endpoint);
        return 2;
    }
    if (strcmp(o.dataset, "random")) {
        fprintf(stderr, "vllmc " CMD ": argument --dataset-name: '%s' is not supported (only 'random')\n", o.dataset);
        return 2;
    }
    o.data.num_prompts = o.num_prompts;

    int status = 1;
    serve_ctx c = {.o = &o, .chat = chat};
    tokenizer *tok = NULL;
    char *model_owned = NULL, base[1024];
    int32_t *allowed = NULL, num_allowed = 0;
    double *arrival = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "vllmc " CMD ": libcurl initialisation failed\n");
        return 1;
    }
    if (o.base_url) snprintf(base, sizeof base, "%s", o.base_url);
    else snprintf(base, sizeof base, "http://%s:%d", o.host, o.port);
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/') base[--bl] = 0;
    snprintf(c.url, sizeof c.url, "%s%s", base, o.endpoint);

    /* the tokenizer: --tokenizer, else --model if it is a directory, else the bundled one */
    struct stat st;
    const char *tdir = o.tokenizer ? o.tokenizer
                       : (o.model && stat(o.model, &st) == 0 && S_ISDIR(st.st_mode)) ? o.model
                                                                                    : cli_default_model_dir();
    if (tokenizer_load(tdir, &tok) != VLLM_OK) {
        fprintf(stderr, "vllmc " CMD ": tokenizer: %s\n", vllm_errmsg());
        goto done;
    }
    o.tokenizer = tdir;
    c.tok = tok;
    if (!o.model) {
        if (!(model_owned = first_model(base))) {
            fprintf(stderr, "vllmc " CMD ": no --model given and %s/v1/models did not name one\n", base);
            goto done;
        }
        o.model = model_owned;
    }
    int32_t V = tokenizer_vocab_size(tok);
    if (!(allowed = malloc((size_t)(V > 0 ? V : 1) * sizeof *allowed))) goto nomem;
    for (int32_t t = 0; t < V; t++)
        if (!tokenizer_is_special(tok, t)) allowed[num_allowed++] = t;
    bench_rng rng;
    bench_rng_seed(&rng, o.seed);
    if (bench_dataset_random(&rng, &o.data, allowed, num_allowed, &c.data) != VLLM_OK) {
        fprintf(stderr, "vllmc " CMD ": %s\n", vllm_errmsg());
        goto done;
    }
    /* arrivals: request 0 at 0, then Gamma(b, 1/(rate b)) gaps (vLLM's get_request) */
    if (!(arrival = calloc((size_t)o.num_prompts, sizeof *arrival))) goto nomem;
    for (int32_t i = 1; i < o.num_prompts; i++)
        arrival[i] = arrival[i - 1] + (isfinite(o.request_rate)
                                           ? bench_rng_gamma(&rng, o.burstiness, 1.0 / (o.request_rate * o.burstiness))
                                           : 0);
    if (!(c.reqs = calloc((size_t)o.num_prompts, sizeof *c.reqs))) goto nomem;
    for (int32_t i = 0; i < o.num_prompts; i++) c.reqs[i].index = i;
    c.headers = curl_slist_append(NULL, "Content-Type: application/json");
    const char *key = getenv("OPENAI_API_KEY");
    char auth[512];
    if (key && *key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        c.headers = curl_slist_append(c.headers, auth);
    }
    if (!c.headers) goto nomem;

    /* readiness: the first prompt alone until it succeeds (vLLM's initial test run) */
    printf("Starting initial single prompt test run...\n");
    fflush(stdout);
    double ready_deadline = now() + o.ready_timeout;
    double zero = 0;
    for (;;) {
        if (!run_requests(&c, 0, 1, &zero)) goto nomem;
        if (c.reqs[0].success) break;
        if (now() >= ready_deadline) {
            fprintf(stderr, "vllmc " CMD ": initial test run failed: %s (%s)\n", c.reqs[0].error, c.url);
            goto done;
        }
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    printf("Initial test run completed. Starting main benchmark run...\n");
    char rate[32];
    bench_format_float(rate, sizeof rate, o.request_rate);
    printf("Traffic request rate: %s\n", rate);
    bench_format_float(rate, sizeof rate, o.burstiness);
    printf("Burstiness factor: %s (%s)\n", rate, o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
    if (o.max_concurrency > 0) printf("Maximum request concurrency: %d\n", o.max_concurrency);
    else printf("Maximum request concurrency: None\n");
    fflush(stdout);

    double t0 = now();
    if (!run_requests(&c, 0, o.num_prompts, arrival)) goto nomem;
    double duration = now() - t0;
    if (report(&c, duration)) status = 0;
    goto done;
nomem:
    fprintf(stderr, "vllmc " CMD ": out of memory or libcurl failure\n");
done:
    if (c.reqs)
        for (int32_t i = 0; i < o.num_prompts; i++) {
            serve_req *q = &c.reqs[i];
            if (q->h) curl_easy_cleanup(q->h);
            free(q->body);
            free(q->line);
            free(q->text);
            free(q->itl);
        }
    free(c.reqs);
    curl_slist_free_all(c.headers);
    bench_dataset_free(c.data, o.num_prompts);
    free(arrival);
    free(allowed);
    free(model_owned);
    tokenizer_free(tok);
    curl_global_cleanup();
    return status;
}
