/*
 * test_server_http.c - the HTTP layer (src/server/http.c) on its own, driven
 * by curl (an independent client): immediate and deferred responses, bodies,
 * the 413 limit, streams produced by another thread with suspend/resume, 32
 * concurrent streams, and the close callback when a client walks away.
 */
/* checks: 9 */
/* tags: tsan */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "server/http.h"

static http_server *srv;
static int port;
static atomic_int closes_ok, closes_gone, forever_writes_failed;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct job { http_request *r; int n, ms; bool forever, fast; } job;

static void *producer(void *arg) {
    job *j = arg;
    sleep_ms(j->ms);
    if (j->n < 0) {
        http_request_finish(j->r, 201, "text/plain", "late", 4);
    } else {
        http_request_start_stream(j->r, 200, "text/event-stream");
        for (int i = 0; j->forever || i < j->n; i++) {
            char line[64];
            int len = snprintf(line, sizeof line, "data: %d\n\n", i);
            if (!http_request_write(j->r, line, (size_t)len)) {
                atomic_fetch_add(&forever_writes_failed, 1);
                break;
            }
            if (!j->fast || i % 64 == 0) sleep_ms(j->forever ? 10 : j->fast ? 0 : 1);
            if (j->forever && i > 3000) break; /* 30 s: the test has failed anyway */
        }
        http_request_end_stream(j->r);
    }
    http_request_release(j->r);
    free(j);
    return NULL;
}

static void on_close(void *arg, bool completed) {
    atomic_fetch_add(completed ? &closes_ok : &closes_gone, 1);
}

static void spawn(http_request *r, int n, int ms, bool forever) {
    job *j = calloc(1, sizeof *j);
    j->fast = http_request_query(r, "fast") != NULL;
    j->r = r;
    j->n = n;
    j->ms = ms;
    j->forever = forever;
    http_request_retain(r);
    http_request_defer(r);
    pthread_t t;
    pthread_create(&t, NULL, producer, j);
    pthread_detach(t);
}

static void handler(void *ud, http_request *r) {
    const char *path = http_request_path(r);
    http_request_on_close(r, on_close, NULL);
    if (!strcmp(path, "/hello")) {
        http_respond(r, 200, "text/plain", "hi", 2);
    } else if (!strcmp(path, "/echo")) {
        size_t n;
        const char *b = http_request_body(r, &n);
        http_respond(r, 200, "application/octet-stream", b, n);
    } else if (!strcmp(path, "/defer")) {
        spawn(r, -1, 30, false);
    } else if (!strcmp(path, "/defer_now")) {
        spawn(r, -1, 0, false); /* races the handler's own suspend */
    } else if (!strcmp(path, "/stream")) {
        const char *n = http_request_query(r, "n");
        spawn(r, n ? atoi(n) : 10, 0, false);
    } else if (!strcmp(path, "/forever")) {
        spawn(r, 0, 0, true);
    } else {
        http_respond(r, 404, "text/plain", "nope", 4);
    }
}

/* Runs a shell command, returns its stdout (malloc'ed). */
static char *run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *run(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    if (!p) return strdup("");
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t n;
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (len + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[len] = 0;
    pclose(p);
    return out;
}

static char *expected_stream(int n) {
    char *s = malloc((size_t)n * 16 + 1), *p = s;
    for (int i = 0; i < n; i++) p += sprintf(p, "data: %d\n\n", i);
    *p = 0;
    return s;
}

TEST(test_immediate_and_status) {
    char *out = run("curl -s -w ' %%{http_code}' http://127.0.0.1:%d/hello", port);
    CHECK(!strcmp(out, "hi 200"), "got '%s'", out);
    free(out);
    out = run("curl -s -w ' %%{http_code}' http://127.0.0.1:%d/missing", port);
    CHECK(!strcmp(out, "nope 404"), "got '%s'", out);
    free(out);
}

TEST(test_body_roundtrip) {
    char *out = run("head -c 3000 /dev/zero | tr '\\0' 'x' | curl -s --data-binary @- "
                    "http://127.0.0.1:%d/echo | wc -c",
                    port);
    CHECK(atoi(out) == 3000, "echoed %s bytes", out);
    free(out);
}

TEST(test_body_limit_413) {
    char *out = run("head -c 5000 /dev/zero | tr '\\0' 'x' | curl -s -w ' %%{http_code}' "
                    "--data-binary @- http://127.0.0.1:%d/echo",
                    port);
    CHECK(strstr(out, " 413") && strstr(out, "\"code\":413"), "got '%s'", out);
    free(out);
    /* chunked upload: no Content-Length, the limit is found while reading */
    out = run("head -c 5000 /dev/zero | tr '\\0' 'x' | curl -s -w ' %%{http_code}' "
              "-H 'Transfer-Encoding: chunked' --data-binary @- http://127.0.0.1:%d/echo",
              port);
    CHECK(strstr(out, " 413"), "got '%s'", out);
    free(out);
}

TEST(test_deferred) {
    char *out = run("curl -s -w ' %%{http_code}' http://127.0.0.1:%d/defer", port);
    CHECK(!strcmp(out, "late 201"), "got '%s'", out);
    free(out);
    for (int i = 0; i < 20; i++) {
        out = run("curl -s -w ' %%{http_code}' http://127.0.0.1:%d/defer_now", port);
        CHECK(!strcmp(out, "late 201"), "round %d: got '%s'", i, out);
        free(out);
    }
}

TEST(test_stream) {
    char *out = run("curl -sN http://127.0.0.1:%d/stream?n=200", port);
    char *want = expected_stream(200);
    CHECK(!strcmp(out, want), "stream differs: got %zu bytes, want %zu", strlen(out),
          strlen(want));
    free(out);
    free(want);
}

TEST(test_32_concurrent_streams) {
    char *out = run("cd /tmp && for i in $(seq 32); do curl -sN "
                    "http://127.0.0.1:%d/stream?n=100 | md5sum & done; wait",
                    port);
    char *want = expected_stream(100);
    char *sum = run("printf '%%s' '%s' | md5sum", want);
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        CHECK(!strncmp(line, sum, 32), "stream %d differs: %s vs %s", lines, line, sum);
        lines++;
    }
    CHECK(lines == 32, "%d streams", lines);
    free(out);
    free(want);
    free(sum);
}

/* Writers with no pause race the reader's suspend against their resume. */
TEST(test_fast_streams_race_suspend) {
    char *out = run("cd /tmp && for i in $(seq 16); do curl -sN "
                    "'http://127.0.0.1:%d/stream?n=5000&fast=1' | md5sum & done; wait",
                    port);
    char *want = expected_stream(5000);
    char path[] = "/tmp/vllmc_http_want.XXXXXX"; /* a name of its own: other passes run this too */
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f, "mkstemp %s", path);
    fputs(want, f);
    fclose(f);
    char *sum = run("md5sum < %s; rm -f %s", path, path);
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        CHECK(!strncmp(line, sum, 32), "stream %d differs", lines);
        lines++;
    }
    CHECK(lines == 16, "%d streams", lines);
    free(out);
    free(want);
    free(sum);
}

TEST(test_disconnect_calls_close) {
    int gone = atomic_load(&closes_gone), failed = atomic_load(&forever_writes_failed);
    char *out = run("curl -sN --max-time 0.3 http://127.0.0.1:%d/forever | head -c 7", port);
    CHECK(!strcmp(out, "data: 0"), "got '%s'", out);
    free(out);
    for (int i = 0; i < 200 && atomic_load(&forever_writes_failed) == failed; i++) sleep_ms(10);
    CHECK(atomic_load(&closes_gone) == gone + 1, "close callback: %d -> %d", gone,
          atomic_load(&closes_gone));
    CHECK(atomic_load(&forever_writes_failed) == failed + 1, "producer was not told");
}

TEST(test_active_count_returns_to_zero) {
    for (int i = 0; i < 100 && http_server_num_active(srv) > 0; i++) sleep_ms(10);
    CHECK(http_server_num_active(srv) == 0, "%d exchanges left", http_server_num_active(srv));
    CHECK(atomic_load(&closes_ok) > 30, "only %d completed closes", atomic_load(&closes_ok));
}

int main(void) {
    http_server_config cfg = {.host = "127.0.0.1", .port = 0, .max_body_bytes = 4096,
                              .num_threads = 2, .timeout_s = 10, .handler = handler};
    if (http_server_start(&cfg, &srv) != VLLM_OK) {
        printf("FAIL test_server_http: cannot start\n");
        return 1;
    }
    port = http_server_port(srv);
    RUN(test_immediate_and_status);
    RUN(test_body_roundtrip);
    RUN(test_body_limit_413);
    RUN(test_deferred);
    RUN(test_stream);
    RUN(test_32_concurrent_streams);
    RUN(test_fast_streams_race_suspend);
    RUN(test_disconnect_calls_close);
    RUN(test_active_count_returns_to_zero);
    http_server_stop(srv, 2.0);
    return harness_done();
}
