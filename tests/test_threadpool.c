/* test_threadpool.c - every part of every op runs exactly once; idle workers sleep. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "harness.h"

typedef struct count_op {
    atomic_int calls[8];
    atomic_int nth_seen;
    atomic_long sum;
} count_op;

static void count_fn(void *arg, int ith, int nth) {
    count_op *op = arg;
    atomic_fetch_add(&op->calls[ith], 1);
    atomic_store(&op->nth_seen, nth);
    long s = 0;
    for (long i = ith; i < 100000; i += nth) s += i;
    atomic_fetch_add(&op->sum, s);
}

TEST(test_threadpool_runs_each_part_once) {
    for (int n = 1; n <= 4; n++) {
        threadpool *p;
        CHECK(threadpool_create(n, &p) == VLLM_OK, "create %d threads", n);
        CHECK(threadpool_num_threads(p) == n, "got %d", threadpool_num_threads(p));
        for (int rep = 0; rep < 300; rep++) {
            count_op op;
            memset(&op, 0, sizeof op);
            threadpool_run(p, count_fn, &op);
            for (int i = 0; i < 8; i++)
                CHECK(atomic_load(&op.calls[i]) == (i < n), "n=%d rep %d: part %d ran %d times", n, rep, i,
                      atomic_load(&op.calls[i]));
            CHECK(atomic_load(&op.nth_seen) == n, "nth %d", atomic_load(&op.nth_seen));
            CHECK(atomic_load(&op.sum) == 100000L * 99999 / 2, "sum %ld", atomic_load(&op.sum));
            if (rep % 100 == 99) {
                struct timespec ts = {0, 2000000}; /* let workers fall asleep, then wake them */
                nanosleep(&ts, NULL);
            }
        }
        threadpool_free(p);
    }
    threadpool_free(NULL);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nop_fn(void *arg, int ith, int nth) {}

TEST(test_threadpool_idle_workers_sleep) {
    threadpool *p;
    CHECK(threadpool_create(3, &p) == VLLM_OK, "create");
    threadpool_run(p, nop_fn, NULL);
    double c0 = cpu_seconds();
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    double used = cpu_seconds() - c0;
    threadpool_free(p);
    /* Spinning workers would burn ~0.6 s of CPU here; polling is bounded to 50 us. */
    CHECK(used < 0.03, "idle pool used %.3f s of CPU in 0.3 s", used);
}

int main(void) {
    RUN(test_threadpool_runs_each_part_once);
    RUN(test_threadpool_idle_workers_sleep);
    return harness_done();
}
