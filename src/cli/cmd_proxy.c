/*
 * cmd_proxy.c - `vllmc proxy --prefill URL... --decode URL...`: an
 * OpenAI-compatible front for disaggregated prefill/decode (vLLM's
 * disagg_proxy examples; docs/disagg.md).
 *
 * Each POST /v1/completions or /v1/chat/completions:
 *   1. goes to a prefill instance (round robin) as it came, but with
 *      max_tokens 1 (chat: max_completion_tokens too), stream off, and
 *      kv_transfer_params {"do_remote_decode": true}; the prefill instance
 *      computes the prompt's KV and its connector saves it;
 *   2. then to a decode instance (round robin) with the kv_transfer_params
 *      the prefill response returned; its response (a stream or one JSON
 *      body) is relayed to the client as it arrives, status and content
 *      type included.
 * If the prefill call fails (connection refused, timeout, a non-200 status)
 * the request still goes to the decode instance, without kv_transfer_params:
 * it then computes the prompt itself (logged). A client that goes away
 * makes the relay fail, which aborts the decode call, which the decode
 * instance sees as a disconnect and aborts its request.
 * Any other route is forwarded to the first decode instance.
 *
 * Threads: the HTTP server's polling threads run the handler, which defers
 * the exchange to one thread per request (blocking libcurl calls; a proxy
 * in front of CPU instances has few requests in flight). The threads are
 * joinable, on a list: the handler joins the finished ones before starting
 * another, and shutdown (SIGINT/SIGTERM) refuses new requests, makes every
 * transfer in flight abort (libcurl's progress callback, within a second),
 * and joins them all before the HTTP server stops.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"
#include "server/http.h"

#define PROXY_MAX_URLS 16

typedef struct relay_thread {
    pthread_t t;
    bool done;                       /* under proxy.mu */
    struct relay_thread *next;
} relay_thread;

typedef struct proxy {
    const char *prefill[PROXY_MAX_URLS], *decode[PROXY_MAX_URLS];
    int num_prefill, num_decode;
    atomic_uint next_prefill, next_decode;
    double timeout_s;
    pthread_mutex_t mu;              /* threads, stopping */
    relay_thread *threads;           /* running or finished, not yet joined */
    atomic_bool stopping;            /* shutdown: transfers abort, new requests get 503 */
} proxy;

typedef struct relay {
    proxy *p;
    relay_thread *self;
    http_request *http;
    char *method, *path, *body;
    size_t body_len;
    /* the decode response */
    bool started, client_gone;
    char content_type[128];
} relay;

static void relay_free(relay *r) {
    free(r->method);
    free(r->path);
    free(r->body);
    free(r);
}

typedef struct buf_out {
    char *data;
    size_t len;
} buf_out;

static size_t collect(char *ptr, size_t size, size_t n, void *ud) {
    buf_out *b = ud;
    size_t k = size * n;
    char *d = realloc(b->data, b->len + k + 1);
    if (!d) return 0;
    memcpy(d + b->len, ptr, k);
    b->len += k;
    d[b->len] = 0;
    b->data = d;
    return k;
}

/* POSTs body to url; the response body in *out (caller frees), the status returned (0: no response). */
/* libcurl's progress callback: non-zero aborts the transfer (shutdown). */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load((atomic_bool *)ud) ? 1 : 0;
}

static void abort_on_stop(CURL *h, proxy *p) {
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &p->stopping);
}

static long post_json(proxy *p, const char *url, const char *body, double timeout_s, char **out) {
    *out = NULL;
    CURL *h = curl_easy_init();
    if (!h) return 0;
    buf_out b = {0};
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    abort_on_stop(h, p);
    long status = 0;
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    else log_warn("proxy: POST %s: %s", url, curl_easy_strerror(rc));
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    *out = b.data;
    return status;
}

static size_t on_header(char *ptr, size_t size, size_t n, void *ud) {
    relay *r = ud;
    size_t k = size * n;
    if (k > 13 && !strncasecmp(ptr, "content-type:", 13)) {
        const char *v = ptr + 13;
        while (*v == ' ') v++;
        size_t len = (size_t)(ptr + k - v);
        while (len && (v[len - 1] == '\r' || v[len - 1] == '\n')) len--;
        if (len >= sizeof r->content_type) len = sizeof r->content_type - 1;
        memcpy(r->content_type, v, len);
        r->content_type[len] = 0;
    }
    return k;
}

typedef struct stream_ctx {
    relay *r;
    CURL *h;
} stream_ctx;

/* The decode response's bytes, straight to the client (status and content
 * type with the first ones); 0 (abort the call) once the client is gone. */
static size_t on_body(char *ptr, size_t size, size_t n, void *ud) {
    stream_ctx *s = ud;
    relay *r = s->r;
    size_t k = size * n;
    if (!r->started) {
        long status = 0;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
        http_request_start_stream(r->http, (int)status, r->content_type[0] ? r->content_type : "application/json");
        r->started = true;
    }
    if (!http_request_write(r->http, ptr, k)) {
        r->client_gone = true;
        return 0;
    }
    return k;
}

/* Sends method/path/body to base and relays the answer. False if nothing came back. */
static bool relay_to(relay *r, const char *base, const char *body) {
    char url[2048];
    snprintf(url, sizeof url, "%s%s", base, r->path);
    CURL *h = curl_easy_init();
    if (!h) return false;
    stream_ctx sc = {r, h};
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    if (body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sc);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(r->p->timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    abort_on_stop(h, r->p);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    if (r->started) {
        if (rc != CURLE_OK && !r->client_gone) log_warn("proxy: %s: %s", url, curl_easy_strerror(rc));
        http_request_end_stream(r->http);
        return true;
    }
    if (rc == CURLE_OK) { /* an empty body */
        http_request_finish(r->http, (int)status, r->content_type[0] ? r->content_type : "application/json", "", 0);
        return true;
    }
    log_warn("proxy: %s: %s", url, curl_easy_strerror(rc));
    return false;
}

static void fail(relay *r, int status, const char *msg) {
    json_t *e = json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", "BadGateway", "code", status);
    char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
    http_request_finish(r->http, status, "application/json", s ? s : "", s ? strlen(s) : 0);
    free(s);
    json_decref(e);
}

/* Step 1: the prefill call; the kv_transfer_params it returned (new reference) or NULL. */
static json_t *prefill(relay *r, json_t *req, bool chat) {
    json_t *pre = json_deep_copy(req);
    if (!pre) return NULL;
    json_object_set_new(pre, "max_tokens", json_integer(1));
    if (chat && json_object_get(pre, "max_completion_tokens"))
        json_object_set_new(pre, "max_completion_tokens", json_integer(1));
    json_object_set_new(pre, "stream", json_false());
    json_object_del(pre, "stream_options");
    json_object_set_new(pre, "kv_transfer_params", json_pack("{s:b,s:b}", "do_remote_decode", 1, "do_remote_prefill", 0));
    char *body = json_dumps(pre, JSON_COMPACT);
    json_decref(pre);
    if (!body) return NULL;
    proxy *p = r->p;
    const char *base = p->prefill[atomic_fetch_add(&p->next_prefill, 1) % (unsigned)p->num_prefill];
    char url[2048], *resp = NULL;
    snprintf(url, sizeof url, "%s%s", base, r->path);
    long status = post_json(p, url, body, p->timeout_s, &resp);
    free(body);
    json_t *out = NULL;
    if (status == 200) {
        json_t *j = resp ? json_loads(resp, 0, NULL) : NULL;
        json_t *kv = json_object_get(j, "kv_transfer_params");
        if (kv && json_is_object(kv)) out = json_incref(kv);
        json_decref(j);
    } else {
        log_warn("proxy: prefill on %s failed (status %ld); the decode instance computes the prompt", base, status);
    }
    free(resp);
    return out;
}

static void *relay_main(void *arg) {
    relay *r = arg;
    proxy *p = r->p;
    bool chat = !strcmp(r->path, "/v1/chat/completions");
    bool pd = !strcmp(r->method, "POST") && (chat || !strcmp(r->path, "/v1/completions"));
    char *body = NULL;
    if (pd) {
        json_t *req = json_loadb(r->body, r->body_len, 0, NULL);
        if (!req || !json_is_object(req)) {
            json_decref(req);
            fail(r, 400, "the request body is not a JSON object");
            goto done;
        }
        json_t *kv = prefill(r, req, chat);
        if (kv) json_object_set_new(req, "kv_transfer_params", kv);
        body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
    }
    const char *base = pd ? p->decode[atomic_fetch_add(&p->next_decode, 1) % (unsigned)p->num_decode] : p->decode[0];
    if (!relay_to(r, base, pd ? body : (r->body_len ? r->body : NULL))) fail(r, 502, "the decode instance did not answer");
done:
    free(body);
    http_request_release(r->http);
    relay_thread *self = r->self;
    relay_free(r);
    pthread_mutex_lock(&p->mu);
    self->done = true;
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Joins the relay threads that finished; p->mu held. */
static void join_finished(proxy *p) {
    for (relay_thread **pp = &p->threads; *pp;) {
        relay_thread *t = *pp;
        if (!t->done) {
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        pthread_join(t->t, NULL);
        free(t);
    }
}

static void handler(void *ud, http_request *http) {
    proxy *p = ud;
    if (!strcmp(http_request_path(http), "/health") || !strcmp(http_request_path(http), "/ping")) {
        http_respond(http, 200, "application/json", "", 0);
        return;
    }
    relay *r = calloc(1, sizeof *r);
    size_t len = 0;
    const char *b = http_request_body(http, &len);
    if (r) {
        r->p = p;
        r->http = http;
        r->method = strdup(http_request_method(http));
        r->path = strdup(http_request_path(http));
        r->body = malloc(len + 1);
        r->body_len = len;
    }
    if (!r || !r->method || !r->path || !r->body) {
        if (r) relay_free(r);
        http_respond(http, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 38);
        return;
    }
    memcpy(r->body, b, len);
    r->body[len] = 0;
    relay_thread *t = calloc(1, sizeof *t);
    pthread_mutex_lock(&p->mu);
    join_finished(p);
    if (!t || atomic_load(&p->stopping)) {
        pthread_mutex_unlock(&p->mu);
        free(t);
        relay_free(r);
        http_respond(http, 503, "application/json", "{\"error\":{\"message\":\"the proxy is shutting down\"}}", 50);
        return;
    }
    r->self = t;
    http_request_retain(http);
    http_request_defer(http);
    if (pthread_create(&t->t, NULL, relay_main, r) != 0) {
        pthread_mutex_unlock(&p->mu);
        free(t);
        http_request_finish(http, 503, "application/json", "{\"error\":{\"message\":\"no thread\"}}", 34);
        http_request_release(http);
        relay_free(r);
        return;
    }
    t->next = p->threads;
    p->threads = t;
    pthread_mutex_unlock(&p->mu);
}

static void usage(FILE *f) {
    fprintf(f, "usage: vllmc proxy --prefill URL [URL...] --decode URL [URL...] [--host H] [--port N]\n"
               "                   [--timeout S]\n"
               "An OpenAI-compatible front for disaggregated prefill/decode (docs/disagg.md): each\n"
               "completion goes to a prefill instance with max_tokens 1 and kv_transfer_params\n"
               "{\"do_remote_decode\": true}, then to a decode instance with the returned params;\n"
               "URLs are http://host:port; instances run `vllmc serve --kv-transfer-config ...`.\n");
}

int cmd_proxy(int argc, char **argv) {
    proxy p = {.timeout_s = 600};
    pthread_mutex_init(&p.mu, NULL);
    const char *host = "127.0.0.1";
    int port = 8000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--prefill") || !strcmp(a, "--decode")) {
            const char **list = a[2] == 'p' ? p.prefill : p.decode;
            int *n = a[2] == 'p' ? &p.num_prefill : &p.num_decode;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                if (*n == PROXY_MAX_URLS) {
                    fprintf(stderr, "vllmc proxy: %s: at most %d URLs\n", a, PROXY_MAX_URLS);
                    return 2;
                }
                list[(*n)++] = argv[++i];
            }
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "vllmc proxy: unknown argument or missing value: %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--host")) host = argv[++i];
        else if (!strcmp(a, "--port")) port = atoi(argv[++i]);
        else if (!strcmp(a, "--timeout")) p.timeout_s = atof(argv[++i]);
        else {
            fprintf(stderr, "vllmc proxy: unknown argument: %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (p.num_prefill == 0 || p.num_decode == 0 || port < 0 || port > 65535 || !(p.timeout_s > 0)) {
        fprintf(stderr, "vllmc proxy: needs --prefill URL... and --decode URL... (and a port 0..65535, a timeout > 0)\n");
        return 2;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "vllmc proxy: libcurl did not initialize\n");
        return 1;
    }
    http_server_config hc = {.host = host,
                             .port = port,
                             .max_body_bytes = (size_t)64 << 20,
                             .num_threads = 2,
                             .timeout_s = 0,
                             .handler = handler,
                             .handler_ud = &p};
    http_server *srv = NULL;
    if (http_server_start(&hc, &srv) != VLLM_OK) {
        fprintf(stderr, "vllmc proxy: %s\n", vllm_errmsg());
        curl_global_cleanup();
        return 1;
    }
    for (int i = 0; i < p.num_prefill; i++) log_info("proxy: prefill instance %s", p.prefill[i]);
    for (int i = 0; i < p.num_decode; i++) log_info("proxy: decode instance %s", p.decode[i]);
    log_info("Starting vllmc proxy on http://%s:%d", host, http_server_port(srv));
    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("proxy: shutting down");
    pthread_mutex_lock(&p.mu);
    atomic_store(&p.stopping, true);
    relay_thread *running = p.threads;
    p.threads = NULL;
    pthread_mutex_unlock(&p.mu);
    for (relay_thread *t = running, *next; t; t = next) { /* their transfers abort within a second */
        next = t->next;
        pthread_join(t->t, NULL);
        free(t);
    }
    http_server_stop(srv, 5.0);
    pthread_mutex_destroy(&p.mu);
    curl_global_cleanup();
    return 0;
}
