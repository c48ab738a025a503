/*
 * threadpool.h - a fixed set of worker threads that share one op at a time.
 *
 * threadpool_run(p, fn, arg, n_items, chunk) splits the items [0, n_items)
 * of an op into chunks of `chunk` items and calls fn(arg, begin, end, ith)
 * once per chunk, on whichever thread claims it first (ith is that thread's
 * index, 0 for the calling thread, for per-thread scratch). It returns when
 * every item is done, so consecutive calls act as a barrier between the
 * stages of a forward pass.
 *
 * Chunks are claimed from an atomic counter (ggml's scheme), and the caller
 * claims too. The caller waits only for chunks that are being processed,
 * never for a worker that has not shown up: on a machine with more threads
 * than free cores a descheduled worker costs nothing, the caller (or another
 * worker) simply takes its share. So an op must not assume that any
 * particular thread runs, or how many do.
 *
 * Idle workers never spin: after an op they poll for the next one for a short
 * bounded time (the next op of a forward pass usually follows within
 * microseconds), then block on a condition variable. Between engine steps the
 * pool costs 0% CPU. An op of a single chunk runs on the caller without
 * waking anyone.
 *
 * Lifetime: threadpool_create / threadpool_free; threadpool_free(NULL) is a
 * no-op. One thread at a time may call threadpool_run, and fn must not call
 * threadpool_run on the same pool.
 */
#ifndef VLLM_BASE_THREADPOOL_H
#define VLLM_BASE_THREADPOOL_H

#include <stdint.h>

#include "vllm/status.h"

typedef struct threadpool threadpool;

/* Do items [begin, end) of the op described by arg, on thread ith. */
typedef void (*threadpool_fn)(void *arg, int64_t begin, int64_t end, int ith);

/* Starts num_threads - 1 workers (the caller is thread 0). num_threads <= 0
 * means the number of online CPUs. Returns VLLM_ERR_NOMEM if a thread or an
 * allocation fails. */
vllm_status threadpool_create(int num_threads, threadpool **out);
void threadpool_free(threadpool *p);

/* Number of threads that may share an op (workers + the caller); ith < this. */
int threadpool_num_threads(const threadpool *p);

/* Runs fn over [0, n_items) in chunks of chunk items (chunk < 1 counts as
 * 1) and waits until all are done. Ops of one chunk, and ops of 2^31 items
 * or more, run on the caller alone. */
void threadpool_run(threadpool *p, threadpool_fn fn, void *arg, int64_t n_items, int64_t chunk);

#endif
