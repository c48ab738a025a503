/*
 * threadpool.h - a fixed set of worker threads that run one op at a time.
 *
 * threadpool_run(p, fn, arg) calls fn(arg, ith, nth) once for every ith in
 * [0, nth) -- ith 0 on the calling thread, the rest on the workers -- and
 * returns when all of them have returned. The op splits its own work by
 * (ith, nth), statically or by pulling chunks from an atomic counter in arg
 * (ggml's scheme). Ops are run one after another, so consecutive calls act as
 * a barrier between the stages of a forward pass.
 *
 * Idle workers never spin: after an op they poll for the next one for a short
 * bounded time (the next op of a forward pass usually follows within
 * microseconds), then block on a condition variable. Between engine steps the
 * pool therefore costs 0% CPU.
 *
 * Lifetime: threadpool_create / threadpool_free; threadpool_free(NULL) is a
 * no-op. One thread at a time may call threadpool_run (the pool is not
 * reentrant: fn must not call threadpool_run on the same pool).
 */
#ifndef VLLM_BASE_THREADPOOL_H
#define VLLM_BASE_THREADPOOL_H

#include "vllm/status.h"

typedef struct threadpool threadpool;

/* fn(arg, ith, nth): do part ith of nth of the op described by arg. */
typedef void (*threadpool_fn)(void *arg, int ith, int nth);

/* Starts num_threads - 1 workers (the caller is thread 0). num_threads <= 0
 * means the number of online CPUs. Returns VLLM_ERR_NOMEM if a thread or an
 * allocation fails. */
vllm_status threadpool_create(int num_threads, threadpool **out);
void threadpool_free(threadpool *p);

/* Number of threads an op is split into (workers + the caller). */
int threadpool_num_threads(const threadpool *p);

/* Runs fn(arg, ith, nth) for ith in [0, nth) and waits for all of them. */
void threadpool_run(threadpool *p, threadpool_fn fn, void *arg);

#endif
