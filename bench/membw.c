/*
 * membw.c - memory read bandwidth with N threads: the denominator of the
 * decode roofline (weight bytes per token x tok/s / read bandwidth).
 *
 *   build/bench/membw [--threads 2] [--streams 8] [--mb 1024] [--repeat 5] [--prefetch 32]
 *
 * Each thread owns a contiguous 1/N slice of one --mb MiB buffer (first
 * touched by that thread), cuts it into --streams equal parts and sums them
 * a cache line from each in turn, as 64-bit words with 8 independent
 * accumulators, which the compiler vectorises, prefetching each stream
 * --prefetch lines ahead (0: none) as the decode kernels do. Several
 * streams per thread is how a matmul reads weights (a tile of rows at once)
 * and what keeps enough misses in flight. Here (2 vCPUs of a Sapphire
 * Rapids) 1 stream reads ~19 GB/s, 8 streams ~26, 8 streams with prefetch
 * ~30-31 -- and the Q4_0 decode kernel streams ~30, so anything less would
 * understate the roofline. A pass is timed from the
 * moment the threads are released to the moment the last one finishes. The buffer
 * is far larger than the last-level cache, so this is a DRAM stream, like a
 * decode step reading every weight once. Prints the best pass:
 * `read bandwidth: X GB/s (N threads, M MiB, best of R)`.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n; /* words */
    int streams, ahead;
    uint64_t sum;
    pthread_barrier_t *start, *end;
    int passes;
} worker;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The sum of p[0..n) read as `streams` interleaved streams of whole lines. */
static uint64_t sum_words(const uint64_t *p, size_t n, int streams, int ahead) {
    uint64_t a[8] = {0};
    size_t len = n / (size_t)streams & ~(size_t)7, i = 0;
    for (; i < len; i += 8)
        for (int s = 0; s < streams; s++) {
            const uint64_t *q = p + (size_t)s * len + i;
            if (ahead) __builtin_prefetch(q + 8 * ahead); /* may run past the stream: a hint, never a fault */
            for (int k = 0; k < 8; k++) a[k] += q[k];
        }
    for (i = len * (size_t)streams; i < n; i++) a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static void *worker_main(void *arg) {
    worker *w = arg;
    memset((void *)w->p, 1, w->n * sizeof *w->p); /* first touch: pages local to this thread */
    for (int r = 0; r < w->passes; r++) {
        pthread_barrier_wait(w->start);
        w->sum += sum_words(w->p, w->n, w->streams, w->ahead);
        pthread_barrier_wait(w->end);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, streams = 8, mb = 1024, repeat = 5, ahead = 32;
    for (int i = 1; i < argc; i++) {
        int *dst = !strcmp(argv[i], "--threads") ? &threads : !strcmp(argv[i], "--streams") ? &streams
                 : !strcmp(argv[i], "--mb") ? &mb : !strcmp(argv[i], "--repeat") ? &repeat
                 : !strcmp(argv[i], "--prefetch") ? &ahead : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "usage: membw [--threads 2] [--streams 8] [--mb 1024] [--repeat 5] [--prefetch 32]\n");
            return 2;
        }
        *dst = atoi(argv[++i]);
    }
    if (threads < 1 || threads > 1024 || streams < 1 || streams > 64 || mb < 1 || repeat < 1 || ahead < 0 || ahead > 4096) {
        fprintf(stderr, "membw: --threads in [1, 1024], --streams in [1, 64], --mb >= 1, --repeat >= 1, --prefetch in [0, 4096]\n");
        return 2;
    }
    size_t words = (size_t)mb << 17, per = words / (size_t)threads;
    uint64_t *buf = aligned_alloc(64, words * sizeof *buf);
    worker *ws = calloc((size_t)threads, sizeof *ws);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    if (!buf || !ws || !tids) {
        fprintf(stderr, "membw: out of memory for %d MiB\n", mb);
        return 1;
    }
    pthread_barrier_t start, end;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&end, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; t++) {
        ws[t] = (worker){.p = buf + (size_t)t * per, .n = per, .streams = streams, .ahead = ahead, .start = &start, .end = &end, .passes = repeat + 1};
        if (pthread_create(&tids[t], NULL, worker_main, &ws[t]) != 0) {
            fprintf(stderr, "membw: cannot start thread %d\n", t);
            return 1;
        }
    }
    double best = 0;
    for (int r = 0; r <= repeat; r++) { /* pass 0 is a warm-up */
        /* t0 before the start barrier: taken after it, a main thread
         * descheduled there would start the clock after the workers ran. */
        double t0 = now_s();
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&end);
        double gbs = (double)per * (size_t)threads * sizeof *buf / (now_s() - t0) / 1e9;
        if (r > 0 && gbs > best) best = gbs;
    }
    uint64_t sink = 0;
    for (int t = 0; t < threads; t++) pthread_join(tids[t], NULL), sink += ws[t].sum;
    printf("read bandwidth: %.1f GB/s (%d threads, %d streams each, %d MiB, best of %d; checksum %llu)\n", best,
           threads, streams, mb, repeat, (unsigned long long)(sink & 0xff));
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&end);
    free(buf), free(ws), free(tids);
    return 0;
}
