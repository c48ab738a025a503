/*
 * soak.c - a bounded load generator for `vllmc serve` (tests/test_soak.sh,
 * `make soak`): N requests from C concurrent clients (libcurl multi, one
 * thread), loopback only, stopped after a time limit whatever happens.
 *
 *   build/tools/soak URL REQUESTS CLIENTS SECONDS
 *
 * Request i is, by i mod 12:
 *   0, 6    malformed (cycling: invalid JSON, wrong type, unknown model,
 *           n beyond the queue limit, negative max_tokens, bad content type)
 *   1,4,7,10  streamed, and the client hangs up after its first chunk
 *   2, 8    non-streamed completion       5, 11  non-streamed chat
 *   3, 9    streamed completion
 * so a third of the requests disconnect mid-stream and one in six is bad.
 * Every response that completes is checked: 200 non-stream = JSON with
 * choices[0] and usage; 200 stream = every "data:" event JSON, "[DONE]"
 * last; malformed = 4xx with vLLM's {"error":{message,type,code}}; 503 (the
 * admission limit) = same shape and a Retry-After header.
 * Prints one summary line per kind and exits 1 if any response was
 * ill-formed, the time limit was hit, or a transfer failed other than by
 * our own hang-up.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum kind { K_BAD, K_HANGUP, K_PLAIN, K_CHAT, K_STREAM, K_COUNT };
static const char *const kind_names[K_COUNT] = {"malformed", "hangup", "completion", "chat", "stream"};

typedef struct xfer {
    CURL *h;
    struct curl_slist *hdrs;
    enum kind kind;
    char *buf;
    size_t len, cap;
    bool hung_up, retry_after;
} xfer;

typedef struct tally {
    long ok, bad_shape, overloaded, transport, hung_up;
} tally;

static const char *const bad_bodies[] = {
    "{\"prompt\": \"x\", ",
    "{\"prompt\": 5}",
    "{\"prompt\": \"x\", \"model\": \"no-such-model\"}",
    "{\"prompt\": \"x\", \"n\": 1000000, \"temperature\": 1}",
    "{\"prompt\": \"x\", \"max_tokens\": -1}",
    "{\"prompt\": \"x\"}", /* sent as text/plain */
};
#define NUM_BAD (sizeof bad_bodies / sizeof bad_bodies[0])

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    xfer *x = ud;
    size_t len = sz * n;
    if (x->len + len + 1 > x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 4096;
        while (cap < x->len + len + 1) cap *= 2;
        char *nb = realloc(x->buf, cap);
        if (!nb) return 0;
        x->buf = nb;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, len);
    x->len += len;
    x->buf[x->len] = 0;
    if (x->kind == K_HANGUP && strstr(x->buf, "data: ")) {
        x->hung_up = true;
        return 0; /* hang up mid-stream */
    }
    return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    xfer *x = ud;
    if (sz * n >= 12 && !strncasecmp(p, "Retry-After:", 12)) x->retry_after = true;
    return sz * n;
}

static bool error_shape(const char *body, long want) {
    json_t *j = json_loads(body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    bool ok = json_is_object(e) && json_is_string(json_object_get(e, "message")) &&
              json_is_string(json_object_get(e, "type")) && json_integer_value(json_object_get(e, "code")) == want;
    json_decref(j);
    return ok;
}

static bool response_shape(const char *body) {
    json_t *j = json_loads(body, 0, NULL);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    bool ok = json_is_object(c0) && json_is_string(json_object_get(c0, "finish_reason")) &&
              json_is_object(json_object_get(j, "usage"));
    json_decref(j);
    return ok;
}

static bool stream_shape(const char *body) {
    const char *p = body, *last = NULL;
    int events = 0;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end) return false;
        last = p;
        if (strncmp(p, "[DONE]", 6)) {
            json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
            bool ok = json_is_array(json_object_get(j, "choices"));
            json_decref(j);
            if (!ok) return false;
        }
        events++;
        p = end + 2;
    }
    return events >= 2 && last && !strncmp(last, "[DONE]\n\n", 8);
}

static void start(CURLM *m, xfer *x, const char *url, long i) {
    static const enum kind plan[12] = {K_BAD, K_HANGUP, K_PLAIN, K_STREAM, K_HANGUP, K_CHAT,
                                       K_BAD, K_HANGUP, K_PLAIN, K_STREAM, K_HANGUP, K_CHAT};
    char target[512], body[512];
    x->kind = plan[i % 12];
    x->len = 0;
    x->hung_up = x->retry_after = false;
    const char *ctype = "Content-Type: application/json";
    int max_tokens = 8 + (int)(i % 25);
    switch (x->kind) {
    case K_BAD: {
        size_t b = (size_t)(i / 6) % NUM_BAD;
        snprintf(body, sizeof body, "%s", bad_bodies[b]);
        if (b == NUM_BAD - 1) ctype = "Content-Type: text/plain";
        snprintf(target, sizeof target, "%s/v1/completions", url);
        break;
    }
    case K_CHAT:
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story %ld\"}], \"max_tokens\": %d}",
                 i, max_tokens);
        snprintf(target, sizeof target, "%s/v1/chat/completions", url);
        break;
    default:
        snprintf(body, sizeof body,
                 "{\"prompt\": \"Once upon a time %ld\", \"max_tokens\": %d, \"stream\": %s, \"logprobs\": %d}", i,
                 max_tokens, x->kind == K_PLAIN ? "false" : "true", (int)(i % 3));
        snprintf(target, sizeof target, "%s/v1/completions", url);
    }
    curl_easy_reset(x->h);
    curl_slist_free_all(x->hdrs);
    x->hdrs = curl_slist_append(NULL, ctype);
    curl_easy_setopt(x->h, CURLOPT_URL, target);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_multi_add_handle(m, x->h);
}

static void finish(xfer *x, CURLcode rc, tally *t) {
    tally *k = &t[x->kind];
    long status = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    const char *body = x->buf ? x->buf : "";
    if (x->hung_up) {
        k->hung_up++;
    } else if (rc != CURLE_OK) {
        k->transport++;
        fprintf(stderr, "soak: %s: transfer failed: %s\n", kind_names[x->kind], curl_easy_strerror(rc));
    } else if (status == 503 && x->kind != K_BAD) {
        if (error_shape(body, 503) && x->retry_after) k->overloaded++;
        else k->bad_shape++;
    } else if (x->kind == K_BAD) {
        if (status >= 400 && status < 500 && error_shape(body, status)) k->ok++;
        else {
            k->bad_shape++;
            fprintf(stderr, "soak: malformed request got %ld: %.200s\n", status, body);
        }
    } else if (status != 200) {
        k->bad_shape++;
        fprintf(stderr, "soak: %s got %ld: %.200s\n", kind_names[x->kind], status, body);
    } else if (x->kind == K_PLAIN || x->kind == K_CHAT ? response_shape(body) : stream_shape(body)) {
        k->ok++;
    } else {
        k->bad_shape++;
        fprintf(stderr, "soak: ill-formed %s response: %.300s\n", kind_names[x->kind], body);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: soak URL REQUESTS CLIENTS SECONDS\n");
        return 2;
    }
    const char *url = argv[1];
    long total = atol(argv[2]), clients = atol(argv[3]);
    double limit = atof(argv[4]);
    if (strncmp(url, "http://127.0.0.1:", 17) && strncmp(url, "http://localhost:", 17)) {
        fprintf(stderr, "soak: loopback URLs only\n");
        return 2;
    }
    if (clients < 1 || total < 1) return 2;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *m = curl_multi_init();
    xfer *xs = calloc((size_t)clients, sizeof *xs);
    tally t[K_COUNT] = {{0}};
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long next = 0, done = 0;
    for (long c = 0; c < clients && next < total; c++) {
        xs[c].h = curl_easy_init();
        start(m, &xs[c], url, next++);
    }
    bool timed_out = false;
    while (done < total) {
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE) continue;
            xfer *x;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            finish(x, msg->data.result, t);
            curl_multi_remove_handle(m, x->h);
            done++;
            if (next < total) start(m, x, url, next++);
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
        if (el > limit) {
            timed_out = true;
            break;
        }
        if (done < total) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    long bad = 0, transport = 0;
    printf("soak: %ld/%ld requests done in %.1f s with %ld clients%s\n", done, total, el, clients,
           timed_out ? " (TIME LIMIT HIT)" : "");
    for (int k = 0; k < K_COUNT; k++) {
        printf("soak: %-10s ok %-6ld hung_up %-6ld overloaded(503) %-6ld ill_formed %-4ld transport_errors %ld\n",
               kind_names[k], t[k].ok, t[k].hung_up, t[k].overloaded, t[k].bad_shape, t[k].transport);
        bad += t[k].bad_shape;
        transport += t[k].transport;
    }
    for (long c = 0; c < clients; c++) {
        if (!xs[c].h) continue;
        curl_multi_remove_handle(m, xs[c].h);
        curl_easy_cleanup(xs[c].h);
        curl_slist_free_all(xs[c].hdrs);
        free(xs[c].buf);
    }
    free(xs);
    curl_multi_cleanup(m);
    curl_global_cleanup();
    return bad || transport || timed_out ? 1 : 0;
}
