/*
 * threadpool.c - workers that claim chunks of an op and sleep on a condvar
 * between ops.
 *
 * One 64-bit atomic `state` holds (generation << 32) | next unclaimed item.
 * The caller writes the op (fn, arg, n_items, chunk), resets `done`, then
 * publishes a new generation with next = 0. Any thread claims a chunk by a
 * compare-and-swap that advances `next` only if the generation is still the
 * one it read the op under, so a worker that wakes late can never run a
 * chunk of an op that has finished (it finds a newer generation, or no items
 * left). Each finished chunk adds its size to `done`; the caller returns when
 * done == n_items. It therefore waits for chunks in progress only, not for
 * workers that never showed up.
 *
 * Why the op fields are atomics (relaxed): a late worker may read them while
 * the caller is already writing the next op. Its claim then fails (the
 * generation moved on), so the values are never used, but the reads must not
 * be data races. A successful claim proves they were this op's: the caller
 * rewrites them only after every chunk, including this one, is done.
 *
 * Sleeping without lost wake-ups (both directions): the sleeper increments a
 * "sleeping" counter, then re-checks its condition under the mutex before
 * cond_wait; the waker changes the condition, then reads the counter and,
 * only if someone may be asleep, takes the mutex and signals. All these
 * atomics are sequentially consistent, so either the sleeper sees the new
 * condition or the waker sees the sleeper. While everyone is polling, a
 * hand-off costs no system call.
 *
 * Polling is bounded by SPIN_NS of wall time; with more threads than free
 * cores (a shared machine) a longer spin would only steal the core from the
 * thread we are waiting for.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"

enum { SPIN_NS = 50 * 1000 };

typedef struct worker {
    threadpool *pool;
    int ith;
    pthread_t thread;
} worker;

struct threadpool {
    int nth;                      /* threads per op, caller included */
    worker *workers;              /* (nth - 1) */
    int num_started;
    uint32_t gen;                 /* caller's copy of the current generation */

    pthread_mutex_t mu;
    pthread_cond_t wake;          /* workers wait here for a new generation */
    pthread_cond_t done_cond;     /* the caller waits here for done == n_items */

    /* the current op, written by the caller before it publishes the generation */
    _Atomic(threadpool_fn) fn;
    _Atomic(void *) arg;
    atomic_int_fast64_t n_items, chunk;

    atomic_uint_fast64_t state;   /* (generation << 32) | next unclaimed item */
    atomic_int_fast64_t done;     /* items finished in the current op */
    atomic_int workers_asleep;
    atomic_int caller_asleep;
    atomic_bool stop;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline uint32_t state_gen(uint64_t s) { return (uint32_t)(s >> 32); }

/* Claims and runs chunks of generation gen until none are left (or the
 * generation has moved on). */
static void run_chunks(threadpool *p, uint32_t gen, int ith) {
    threadpool_fn fn = atomic_load(&p->fn);
    void *arg = atomic_load(&p->arg);
    int64_t n = atomic_load(&p->n_items);
    int64_t chunk = atomic_load(&p->chunk);
    uint64_t s = atomic_load(&p->state);
    for (;;) {
        if (state_gen(s) != gen || (int64_t)(uint32_t)s >= n) return;
        if (!atomic_compare_exchange_weak(&p->state, &s, s + (uint64_t)chunk)) continue;
        int64_t begin = (int64_t)(uint32_t)s, end = begin + chunk < n ? begin + chunk : n;
        fn(arg, begin, end, ith);
        if (atomic_fetch_add(&p->done, end - begin) + (end - begin) == n && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cond);
            pthread_mutex_unlock(&p->mu);
        }
        s = atomic_load(&p->state);
    }
}

/* Polls until the generation differs from seen (or stop) or SPIN_NS passes. */
static bool spin_for_generation(threadpool *p, uint32_t seen) {
    uint64_t start = now_ns();
    for (int i = 1;; i++) {
        if (state_gen(atomic_load(&p->state)) != seen || atomic_load(&p->stop)) return true;
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - start > SPIN_NS) return false;
    }
}

static void *worker_main(void *opaque) {
    worker *w = opaque;
    threadpool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        if (!spin_for_generation(p, seen)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->workers_asleep, 1);
            while (state_gen(atomic_load(&p->state)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->workers_asleep, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = state_gen(atomic_load(&p->state));
        run_chunks(p, seen, w->ith);
    }
    return NULL;
}

vllm_status threadpool_create(int num_threads, threadpool **out) {
    *out = NULL;
    if (num_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        num_threads = n > 0 ? (int)n : 1;
    }
    if (num_threads > 1024)
        return vllm_error(VLLM_ERR_INVALID, "threadpool: %d threads is more than 1024", num_threads);
    threadpool *p = calloc(1, sizeof *p);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "threadpool: out of memory");
    p->nth = num_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cond, NULL);
    if (num_threads > 1) {
        p->workers = calloc((size_t)num_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            threadpool_free(p);
            return vllm_error(VLLM_ERR_NOMEM, "threadpool: out of memory");
        }
    }
    for (int i = 1; i < num_threads; i++) {
        worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            threadpool_free(p);
            return vllm_error(VLLM_ERR_NOMEM, "threadpool: cannot start thread %d of %d", i, num_threads);
        }
        p->num_started++;
    }
    *out = p;
    return VLLM_OK;
}

void threadpool_free(threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->num_started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->done_cond);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int threadpool_num_threads(const threadpool *p) { return p->nth; }

void threadpool_run(threadpool *p, threadpool_fn fn, void *arg, int64_t n_items, int64_t chunk) {
    if (chunk < 1) chunk = 1;
    if (n_items <= 0) return;
    if (p->nth == 1 || n_items <= chunk || n_items > INT32_MAX || chunk > INT32_MAX) {
        for (int64_t b = 0; b < n_items; b += chunk) fn(arg, b, b + chunk < n_items ? b + chunk : n_items, 0);
        return;
    }
    /* Close the previous op first: a new generation whose next item is
     * UINT32_MAX, so a late worker that reads this op's n_items / chunk
     * beside the old generation can no longer claim anything of it (it used
     * to, and ran items twice). All these accesses are sequentially
     * consistent: reading a new field implies seeing the closed state. */
    p->gen++;
    atomic_store(&p->state, (uint64_t)p->gen << 32 | UINT32_MAX);
    atomic_store(&p->fn, fn);
    atomic_store(&p->arg, arg);
    atomic_store(&p->n_items, n_items);
    atomic_store(&p->chunk, chunk);
    atomic_store(&p->done, 0);
    p->gen++;
    atomic_store(&p->state, (uint64_t)p->gen << 32);
    if (atomic_load(&p->workers_asleep) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    run_chunks(p, p->gen, 0);

    uint64_t start = now_ns();
    for (int i = 1; atomic_load(&p->done) < n_items; i++) {
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - start > SPIN_NS) {
            pthread_mutex_lock(&p->mu);
            atomic_store(&p->caller_asleep, 1);
            while (atomic_load(&p->done) < n_items) pthread_cond_wait(&p->done_cond, &p->mu);
            atomic_store(&p->caller_asleep, 0);
            pthread_mutex_unlock(&p->mu);
            break;
        }
    }
}
