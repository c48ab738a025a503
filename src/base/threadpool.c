/*
 * threadpool.c - workers that sleep on a condvar between ops.
 *
 * Hand-off: the caller publishes (fn, arg), sets `pending` to the number of
 * workers and bumps the generation counter `gen`. A worker that sees a new
 * generation runs its share and decrements `pending`; the last one to finish
 * wakes the caller if it went to sleep.
 *
 * Sleeping without lost wake-ups (both directions use the same pattern):
 * the sleeper increments a "sleeping" counter, then re-checks the condition
 * under the mutex before cond_wait; the waker changes the condition, then
 * reads the counter and only if someone may be asleep takes the mutex and
 * broadcasts. All these atomics are sequentially consistent, so either the
 * sleeper sees the new condition or the waker sees the sleeper (Dekker).
 * When everyone is still polling, a hand-off costs no system call.
 *
 * Polling is bounded by SPIN_NS of wall time; with more threads than free
 * cores (the machine is shared), a longer spin would only steal the core
 * from the thread we are waiting for.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
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
    int nth;                  /* threads per op, caller included */
    worker *workers;          /* (nth - 1) */
    int num_started;

    pthread_mutex_t mu;
    pthread_cond_t wake;      /* workers wait here for a new generation */
    pthread_cond_t done;      /* the caller waits here for pending == 0 */

    threadpool_fn fn;         /* the current op; written before gen is bumped */
    void *arg;
    atomic_uint_fast64_t gen; /* incremented once per op */
    atomic_int pending;       /* workers that have not finished the current op */
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

/* Polls until gen differs from seen or SPIN_NS passes; true if it changed. */
static bool spin_for_generation(threadpool *p, uint64_t seen) {
    uint64_t start = now_ns();
    for (int i = 1;; i++) {
        if (atomic_load(&p->gen) != seen || atomic_load(&p->stop)) return true;
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - start > SPIN_NS) return false;
    }
}

static void *worker_main(void *opaque) {
    worker *w = opaque;
    threadpool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_for_generation(p, seen)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->workers_asleep, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->workers_asleep, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        p->fn(p->arg, w->ith, p->nth);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
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
    pthread_cond_init(&p->done, NULL);
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
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int threadpool_num_threads(const threadpool *p) { return p->nth; }

void threadpool_run(threadpool *p, threadpool_fn fn, void *arg) {
    if (p->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->nth - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->workers_asleep) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    fn(arg, 0, p->nth);

    uint64_t start = now_ns();
    for (int i = 1; atomic_load(&p->pending) > 0; i++) {
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - start > SPIN_NS) {
            pthread_mutex_lock(&p->mu);
            atomic_store(&p->caller_asleep, 1);
            while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
            atomic_store(&p->caller_asleep, 0);
            pthread_mutex_unlock(&p->mu);
            break;
        }
    }
}
