/*
 * overlap.h - one helper thread that works through a batch of items while
 * the caller does something else, and the join that finishes the batch.
 *
 * The engine uses it to fill the step's grammar masks while the forward runs
 * (vLLM fills its bitmask while the GPU works): the masks depend only on the
 * matchers' state after the last accepted token, not on the logits.
 *
 *     overlap_start(o, fn, arg, n);   the helper starts claiming items
 *     ... the caller's own work (the forward, on its thread pool) ...
 *     overlap_join(o, pool);          the caller (and the pool's threads)
 *                                     claim what is left, then wait for the
 *                                     item the helper is in, if any
 *
 * Items are claimed one at a time from an atomic counter tagged with the
 * batch's generation (threadpool.c's scheme), so each runs exactly once,
 * on whichever thread claims it first, and a helper that wakes late can
 * never claim an item of a newer batch with an older batch's fn. So a join
 * costs at most one item of waiting, and a helper that gets no CPU while the
 * caller works (a loaded machine) costs nothing but the wake-up: the join
 * does the whole batch itself, as if there were no helper.
 *
 * fn(arg, i, i + 1, ith) runs item i; ith is the helper's own index (given
 * at create: one past the pool's threads, for per-thread scratch) or the
 * index of the pool thread that claimed it during the join.
 *
 * Lifetime: overlap_create / overlap_free (free(NULL) is a no-op; a batch
 * in progress is joined first). One thread at a time calls start and join,
 * in pairs; fn must not call back into the overlap.
 */
#ifndef VLLM_BASE_OVERLAP_H
#define VLLM_BASE_OVERLAP_H

#include <stdint.h>

#include "base/threadpool.h"
#include "vllm/status.h"

typedef struct overlap overlap;

/* Starts the helper thread; ith is the index it passes to fn. */
vllm_status overlap_create(int ith, overlap **out);
void overlap_free(overlap *o);

/* Hands items [0, n) to the helper and returns at once. */
void overlap_start(overlap *o, threadpool_fn fn, void *arg, int64_t n);

/* Runs the items nobody has claimed yet, on pool (its threads' ith) or, with
 * pool NULL, on the caller (ith 0), then waits until every item is done. */
void overlap_join(overlap *o, threadpool *pool);

/* Items of the last batch the helper ran (not the join): for tests and
 * measurements. */
int64_t overlap_helper_items(const overlap *o);

#endif
