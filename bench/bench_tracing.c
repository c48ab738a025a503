/*
 * bench_tracing.c - the CPU cost of tracing one request, measured directly
 * (a serving benchmark on a shared machine cannot resolve it; see
 * bench/tracing_overhead.sh).
 *
 *   build/bench/bench_tracing [--requests N] [--traceparent]
 *
 * Drives the tracing module as vllmc serve does: per request,
 * tracing_request_arrived (the HTTP thread's share) and
 * tracing_sequence_finished (the output thread's), against a real exporter
 * thread that encodes and POSTs every batch to an in-process HTTP sink on
 * loopback. Reports CPU time per request of the calling thread (what the
 * request path pays), of the exporter (process CPU minus the caller and the
 * sink), and of the sink; the producer waits (sleeping, not spinning) when
 * the queue is nearly full, so nothing is dropped.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "metrics/stats.h"
#include "metrics/tracing.h"

static int listen_fd;
static double sink_cpu;
static long sink_posts, sink_bytes;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double process_cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           (double)u.ru_stime.tv_usec * 1e-6;
}

/* One keep-alive connection at a time: read a request (headers, then
 * Content-Length bytes), answer 200 with no body. */
static void *sink_main(void *arg) {
    (void)arg;
    static char buf[1 << 16];
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) break;
        size_t have = 0;
        for (;;) {
            char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
            if (!end) {
                if (have == sizeof buf) break;
                ssize_t n = read(fd, buf + have, sizeof buf - have);
                if (n <= 0) break;
                have += (size_t)n;
                continue;
            }
            size_t head = (size_t)(end - buf) + 4;
            char *cl = memmem(buf, head, "Content-Length: ", 16);
            long body = cl ? strtol(cl + 16, NULL, 10) : 0;
            long left = body - (long)(have - head);
            have = 0;
            while (left > 0) {
                ssize_t n = read(fd, buf, left < (long)sizeof buf ? (size_t)left : sizeof buf);
                if (n <= 0) break;
                left -= n;
            }
            sink_posts++;
            sink_bytes += body;
            static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
            if (write(fd, ok, sizeof ok - 1) < 0) break;
            sink_cpu = thread_cpu();
        }
        close(fd);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = 200000;
    bool traceparent = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--traceparent")) traceparent = true;
        else {
            fprintf(stderr, "usage: bench_tracing [--requests N] [--traceparent]\n");
            return 2;
        }
    }
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) || listen(listen_fd, 4) ||
        getsockname(listen_fd, (struct sockaddr *)&a, &len)) {
        perror("bench_tracing: sink");
        return 1;
    }
    pthread_t sink;
    pthread_create(&sink, NULL, sink_main, NULL);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    tracing_config c = {.endpoint = url, .service_name = "bench", .max_queue_size = 2048,
                        .max_export_batch_size = 512, .schedule_delay = 0.05, .export_timeout = 10};
    tracing *t;
    if (tracing_create(&c, &t) != VLLM_OK) return 1;

    double cpu0 = process_cpu(), me0 = thread_cpu(), wall0 = clock_now();
    char id[64];
    for (long i = 0; i < n; i++) {
        snprintf(id, sizeof id, "cmpl-0123456789abcdef0123456789abcdef-%ld", i);
        tracing_request r = {.request_id = id, .response_id = id, .model = "stories", .operation = "text_completion",
                             .traceparent = traceparent ? "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                                                        : NULL,
                             .tracestate = traceparent ? "congo=t61rcWkgMzE" : NULL,
                             .temperature = 0.7, .top_p = 0.9, .max_tokens = 32, .n = 1};
        tracing_request_arrived(t, &r);
        double now = clock_now();
        stats_finished f = {.request_id = id, .reason = VLLM_FINISH_LENGTH, .ttft = 0.01, .e2e = 0.05,
                            .queue = 0.001, .prefill = 0.01, .decode = 0.03, .inference = 0.04,
                            .num_prompt_tokens = 32, .num_generation_tokens = 32, .max_tokens = 32,
                            .arrival = now - 0.05, .queued_ts = now - 0.049, .scheduled_ts = now - 0.048,
                            .first_token_ts = now - 0.038, .has_queued = true, .has_scheduled = true,
                            .has_first_token = true};
        tracing_sequence_finished(t, &f);
        if (i % 256 == 255) {
            tracing_counters k;
            for (;;) {
                tracing_get_counters(t, &k);
                if (i + 1 - (k.exported + k.dropped_full + k.dropped_failed) < 1500) break;
                usleep(200);
            }
        }
    }
    double me = thread_cpu() - me0;
    tracing_free(t); /* flushes the rest */
    double total = process_cpu() - cpu0, wall = clock_now() - wall0;
    shutdown(listen_fd, SHUT_RDWR);
    close(listen_fd);
    pthread_join(sink, NULL);
    double us = 1e6 / (double)n;
    printf("requests %ld%s, %.2f s wall, %ld POSTs, %.1f MB (%.0f bytes a request)\n", n,
           traceparent ? " (with traceparent + tracestate)" : "", wall, sink_posts, (double)sink_bytes / 1e6,
           (double)sink_bytes / (double)n);
    printf("CPU per request: request path (arrived + finished) %.2f us, exporter (encode + POST) %.2f us, "
           "sink %.2f us\n", me * us, (total - me - sink_cpu) * us, sink_cpu * us);
    return 0;
}
