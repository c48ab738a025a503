/*
 * overlap.c - a helper thread for a batch of items, joined by the caller
 * (overlap.h says what for).
 *
 * One 64-bit atomic `state` holds (generation << 32) | next unclaimed item,
 * as in threadpool.c: start closes the previous batch (a new generation with
 * next = UINT32_MAX), writes fn / arg / n, then publishes the batch's
 * generation with next = 0; a claim is a compare-and-swap that advances
 * next only if the generation is still the one the claimer read the fields
 * under, so a stale claimer fails instead of running an item with another
 * batch's fn. `done` counts finished items; the join returns when it
 * reaches n.
 *
 * The helper sleeps on a condvar between batches (never spins idle): it
 * re-checks the generation under the mutex before waiting, and start changes
 * the generation before taking the mutex to signal, so no wake-up is lost.
 * The join's wait for the helper's last item works the same way in the
 * other direction (done_cond), after a short bounded poll: an item takes
 * microseconds to milliseconds, a sleep and wake-up about ten microseconds.
 */
#include "base/overlap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "base/error.h"

enum { JOIN_SPIN_NS = 20 * 1000 };

struct overlap {
    int ith;                       /* the helper's index for fn */
    pthread_t thread;
    bool started;
    uint32_t gen;                  /* the caller's copy of the current generation */
    int64_t n;                     /* the caller's copy of the current batch size */

    pthread_mutex_t mu;
    pthread_cond_t wake;           /* the helper waits here for a new generation */
    pthread_cond_t done_cond;      /* the join waits here for done == n */

    _Atomic(threadpool_fn) fn;
    _Atomic(void *) arg;
    atomic_int_fast64_t n_items;
    atomic_uint_fast64_t state;    /* (generation << 32) | next unclaimed item */
    atomic_int_fast64_t done;      /* items finished in the current batch */
    atomic_int_fast64_t helper_items;
    atomic_bool stop;
};

static inline uint32_t state_gen(uint64_t s) { return (uint32_t)(s >> 32); }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Claims and runs items of generation gen until none are left or the
 * generation moves on. */
static void run_items(overlap *o, uint32_t gen, int ith, bool helper) {
    threadpool_fn fn = atomic_load(&o->fn);
    void *arg = atomic_load(&o->arg);
    int64_t n = atomic_load(&o->n_items);
    uint64_t s = atomic_load(&o->state);
    for (;;) {
        if (state_gen(s) != gen || (int64_t)(uint32_t)s >= n) return;
        if (!atomic_compare_exchange_weak(&o->state, &s, s + 1)) continue;
        int64_t i = (int64_t)(uint32_t)s;
        fn(arg, i, i + 1, ith);
        if (helper) atomic_fetch_add(&o->helper_items, 1);
        if (atomic_fetch_add(&o->done, 1) + 1 == n) {
            pthread_mutex_lock(&o->mu);
            pthread_cond_signal(&o->done_cond);
            pthread_mutex_unlock(&o->mu);
        }
        s = atomic_load(&o->state);
    }
}

static void *helper_main(void *opaque) {
    overlap *o = opaque;
    uint32_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&o->mu);
        while (state_gen(atomic_load(&o->state)) == seen && !atomic_load(&o->stop)) pthread_cond_wait(&o->wake, &o->mu);
        pthread_mutex_unlock(&o->mu);
        if (atomic_load(&o->stop)) break;
        seen = state_gen(atomic_load(&o->state));
        run_items(o, seen, o->ith, true);
    }
    return NULL;
}

vllm_status overlap_create(int ith, overlap **out) {
    *out = NULL;
    overlap *o = calloc(1, sizeof *o);
    if (!o) return vllm_error(VLLM_ERR_NOMEM, "overlap: out of memory");
    o->ith = ith;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->wake, NULL);
    pthread_cond_init(&o->done_cond, NULL);
    if (pthread_create(&o->thread, NULL, helper_main, o) != 0) {
        overlap_free(o);
        return vllm_error(VLLM_ERR_NOMEM, "overlap: cannot start the helper thread");
    }
    o->started = true;
    *out = o;
    return VLLM_OK;
}

void overlap_free(overlap *o) {
    if (!o) return;
    overlap_join(o, NULL);
    pthread_mutex_lock(&o->mu);
    atomic_store(&o->stop, true);
    pthread_cond_broadcast(&o->wake);
    pthread_mutex_unlock(&o->mu);
    if (o->started) pthread_join(o->thread, NULL);
    pthread_cond_destroy(&o->done_cond);
    pthread_cond_destroy(&o->wake);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

void overlap_start(overlap *o, threadpool_fn fn, void *arg, int64_t n) {
    o->n = n > 0 && n <= INT32_MAX ? n : 0;
    if (o->n == 0) return;
    o->gen++; /* close the previous batch before rewriting its fields (see the top) */
    atomic_store(&o->state, (uint64_t)o->gen << 32 | UINT32_MAX);
    atomic_store(&o->fn, fn);
    atomic_store(&o->arg, arg);
    atomic_store(&o->n_items, o->n);
    atomic_store(&o->done, 0);
    atomic_store(&o->helper_items, 0);
    o->gen++;
    atomic_store(&o->state, (uint64_t)o->gen << 32);
    pthread_mutex_lock(&o->mu);
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
}

typedef struct steal_arg { overlap *o; } steal_arg;

static void steal(void *arg, int64_t begin, int64_t end, int ith) {
    (void)begin, (void)end;
    overlap *o = ((steal_arg *)arg)->o;
    run_items(o, o->gen, ith, false);
}

void overlap_join(overlap *o, threadpool *pool) {
    if (o->n == 0) return;
    steal_arg a = {o};
    if (pool && threadpool_num_threads(pool) > 1 && o->n - (int64_t)(uint32_t)atomic_load(&o->state) > 1)
        threadpool_run(pool, steal, &a, threadpool_num_threads(pool), 1);
    else
        run_items(o, o->gen, 0, false);
    uint64_t start = now_ns();
    for (int i = 1; atomic_load(&o->done) < o->n; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if ((i & 63) == 0 && now_ns() - start > JOIN_SPIN_NS) {
            pthread_mutex_lock(&o->mu);
            while (atomic_load(&o->done) < o->n) pthread_cond_wait(&o->done_cond, &o->mu);
            pthread_mutex_unlock(&o->mu);
            break;
        }
    }
    o->n = 0;
}

int64_t overlap_helper_items(const overlap *o) { return atomic_load(&o->helper_items); }
