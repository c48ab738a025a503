/* test_overlap.c - the helper thread of base/overlap.h: every item of every
 * batch runs exactly once, on the helper or a joining thread with a valid
 * index; the helper really works while the caller is busy; the join waits
 * for an item in progress on the helper; batches of 0 items and free. */
/* checks: 4 */
/* tags: tsan */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "base/overlap.h"
#include "harness.h"

enum { MAX_ITEMS = 300, HELPER_ITH = 7 };

typedef struct op {
    atomic_int hits[MAX_ITEMS];
    atomic_int bad;
    int nth;              /* the joining pool's threads: ith < nth, or HELPER_ITH */
    int sleep_us;         /* per item */
} op;

static void sleep_us(int us) {
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void count_fn(void *arg, int64_t begin, int64_t end, int ith) {
    op *o = arg;
    if (end != begin + 1 || begin < 0 || begin >= MAX_ITEMS || (ith != HELPER_ITH && (ith < 0 || ith >= o->nth)))
        atomic_fetch_add(&o->bad, 1);
    else
        atomic_fetch_add(&o->hits[begin], 1);
    if (o->sleep_us) sleep_us(o->sleep_us);
}

TEST(test_overlap_runs_each_item_once) {
    static op o;
    const int64_t sizes[] = {0, 1, 2, 3, 16, 64, MAX_ITEMS};
    for (int nth = 0; nth <= 3; nth++) { /* 0: join on the caller alone */
        threadpool *pool = NULL;
        if (nth > 0) CHECK(threadpool_create(nth, &pool) == VLLM_OK);
        overlap *ov;
        CHECK(overlap_create(HELPER_ITH, &ov) == VLLM_OK);
        for (int rep = 0; rep < 60; rep++)
            for (size_t is = 0; is < sizeof sizes / sizeof *sizes; is++) {
                memset(&o, 0, sizeof o);
                o.nth = nth > 0 ? nth : 1;
                overlap_start(ov, count_fn, &o, sizes[is]);
                if (rep % 3 == 1) sleep_us(50); /* the caller's "forward": sometimes none at all */
                overlap_join(ov, pool);
                for (int64_t i = 0; i < sizes[is]; i++)
                    CHECK(atomic_load(&o.hits[i]) == 1, "pool %d, %lld items: item %lld ran %d times", nth,
                          (long long)sizes[is], (long long)i, atomic_load(&o.hits[i]));
                for (int64_t i = sizes[is]; i < MAX_ITEMS; i++) CHECK(atomic_load(&o.hits[i]) == 0);
                CHECK(atomic_load(&o.bad) == 0, "an item ran with a bad range or thread index");
            }
        overlap_free(ov);
        threadpool_free(pool);
    }
}

/* The caller sleeps 30 ms between start and join: the helper alone runs
 * the 8 items of 1 ms each (a helper that is never woken fails this). */
TEST(test_overlap_helper_works_meanwhile) {
    static op o;
    memset(&o, 0, sizeof o);
    o.nth = 1;
    o.sleep_us = 1000;
    overlap *ov;
    CHECK(overlap_create(HELPER_ITH, &ov) == VLLM_OK);
    int64_t best = 0;
    for (int attempt = 0; attempt < 5 && best < 8; attempt++) { /* a loaded machine may starve the helper */
        memset(o.hits, 0, sizeof o.hits);
        overlap_start(ov, count_fn, &o, 8);
        sleep_us(30000 * (attempt + 1));
        overlap_join(ov, NULL);
        if (overlap_helper_items(ov) > best) best = overlap_helper_items(ov);
        for (int i = 0; i < 8; i++) CHECK(atomic_load(&o.hits[i]) == 1, "item %d ran %d times", i, atomic_load(&o.hits[i]));
    }
    CHECK(best == 8, "the helper ran %lld of 8 items while the caller slept", (long long)best);
    overlap_free(ov);
}

/* One long item: the helper claims it at once; a join right after must
 * wait for it (the items' effects are visible after the join). */
typedef struct slow_op {
    atomic_int started;
    int done; /* written by the item, read after the join: TSan checks the join orders them */
} slow_op;

static void slow_fn(void *arg, int64_t begin, int64_t end, int ith) {
    (void)begin, (void)end, (void)ith;
    slow_op *s = arg;
    atomic_store(&s->started, 1);
    sleep_us(20000);
    s->done = 1;
}

TEST(test_overlap_join_waits_for_the_helper) {
    overlap *ov;
    CHECK(overlap_create(HELPER_ITH, &ov) == VLLM_OK);
    for (int rep = 0; rep < 5; rep++) {
        slow_op s = {0};
        overlap_start(ov, slow_fn, &s, 1);
        for (int i = 0; i < 2000 && !atomic_load(&s.started); i++) sleep_us(100);
        overlap_join(ov, NULL);
        CHECK(s.done == 1, "the join returned before the helper's item finished (rep %d)", rep);
    }
    overlap_free(ov);
}

TEST(test_overlap_empty_and_free) {
    overlap *ov;
    CHECK(overlap_create(0, &ov) == VLLM_OK);
    overlap_join(ov, NULL); /* a join without a start */
    overlap_start(ov, count_fn, NULL, 0);
    overlap_join(ov, NULL);
    static op o;
    memset(&o, 0, sizeof o);
    o.nth = 1;
    overlap_start(ov, count_fn, &o, 5);
    overlap_free(ov); /* joins the batch first */
    for (int i = 0; i < 5; i++) CHECK(atomic_load(&o.hits[i]) == 1, "item %d ran %d times before free", i, atomic_load(&o.hits[i]));
    overlap_free(NULL);
}

int main(void) {
    RUN(test_overlap_runs_each_item_once);
    RUN(test_overlap_helper_works_meanwhile);
    RUN(test_overlap_join_waits_for_the_helper);
    RUN(test_overlap_empty_and_free);
    return harness_done();
}
