/* test_threadpool.c - every item of every op is done exactly once, by threads
 * with valid indices; ops of many sizes and chunkings; idle workers sleep. */
/* checks: 2 */
/* tags: tsan */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "harness.h"

enum { MAX_ITEMS = 5000 };

typedef struct count_op {
    atomic_int hits[MAX_ITEMS];
    atomic_int bad_ith, bad_range;
    int nth;
    int64_t n, chunk;
} count_op;

static void count_fn(void *arg, int64_t begin, int64_t end, int ith) {
    count_op *op = arg;
    if (ith < 0 || ith >= op->nth) atomic_fetch_add(&op->bad_ith, 1);
    if (begin < 0 || end > op->n || end <= begin || end - begin > op->chunk || begin % op->chunk)
        atomic_fetch_add(&op->bad_range, 1);
    for (int64_t i = begin; i < end && i < MAX_ITEMS; i++) atomic_fetch_add(&op->hits[i], 1);
}

TEST(test_threadpool_runs_each_item_once) {
    static count_op op;
    const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 4999};
    const int64_t chunks[] = {1, 3, 16, 5000};
    for (int n = 1; n <= 4; n++) {
        threadpool *p;
        CHECK(threadpool_create(n, &p) == VLLM_OK, "create %d threads", n);
        CHECK(threadpool_num_threads(p) == n, "got %d", threadpool_num_threads(p));
        for (int rep = 0; rep < 40; rep++)
            for (size_t is = 0; is < sizeof sizes / sizeof *sizes; is++)
                for (size_t ic = 0; ic < sizeof chunks / sizeof *chunks; ic++) {
                    memset(&op, 0, sizeof op);
                    op.nth = n, op.n = sizes[is], op.chunk = chunks[ic];
                    threadpool_run(p, count_fn, &op, op.n, op.chunk);
                    for (int64_t i = 0; i < op.n; i++)
                        CHECK(atomic_load(&op.hits[i]) == 1, "threads %d, %lld items in chunks of %lld: item %lld done %d times",
                              n, (long long)op.n, (long long)op.chunk, (long long)i, atomic_load(&op.hits[i]));
                    CHECK(!atomic_load(&op.bad_ith) && !atomic_load(&op.bad_range), "bad ith or range");
                }
        struct timespec ts = {0, 2000000}; /* let workers fall asleep, then wake them */
        nanosleep(&ts, NULL);
        memset(&op, 0, sizeof op);
        op.nth = n, op.n = 100, op.chunk = 1;
        threadpool_run(p, count_fn, &op, op.n, op.chunk);
        for (int64_t i = 0; i < op.n; i++) CHECK(atomic_load(&op.hits[i]) == 1, "after sleeping: item %lld", (long long)i);
        threadpool_free(p);
    }
    threadpool_free(NULL);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nop_fn(void *arg, int64_t begin, int64_t end, int ith) {}

TEST(test_threadpool_idle_workers_sleep) {
    threadpool *p;
    CHECK(threadpool_create(3, &p) == VLLM_OK, "create");
    threadpool_run(p, nop_fn, NULL, 10, 1);
    double c0 = cpu_seconds();
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    double used = cpu_seconds() - c0;
    threadpool_free(p);
    /* Spinning workers would burn ~0.6 s of CPU here; polling is bounded to 50 us. */
    CHECK(used < 0.03, "idle pool used %.3f s of CPU in 0.3 s", used);
}

int main(void) {
    RUN(test_threadpool_runs_each_item_once);
    RUN(test_threadpool_idle_workers_sleep);
    return harness_done();
}
