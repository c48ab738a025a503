/*
 * harness.h - the smallest test harness that reads well.
 *
 *     TEST(test_bpe_merges) {
 *         CHECK(n == 3, "got %d ids", n);
 *     }
 *     int main(void) { RUN(test_bpe_merges); return harness_done(); }
 *
 * Each test prints "ok NAME", "FAIL NAME: file:line: cond: message" or, when
 * this machine cannot run it (no AMX, no AVX-512, ...), "skip NAME: why";
 * tests/run.sh counts those lines across every test binary and script and
 * checks the count against the "checks: N" line the source declares (see
 * tests/run.sh). CHECK returns from the test on failure; SKIP from a test
 * that cannot run here (before any CHECK: a skip is never a partial pass).
 */
#ifndef VLLM_TESTS_HARNESS_H
#define VLLM_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdio.h>

/* CHECK(cond) with no message expands to the format "" */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

#define TEST(name) static void name(void)
#define RUN(name) harness_run(#name, name)
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            harness_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__);                  \
            return;                                                                   \
        }                                                                             \
    } while (0)
/* SKIP("why", ...): the test ends as "skip NAME: why", counted apart from the
 * passes. For what the machine lacks (an instruction set, the OS's grant),
 * never for a failure. */
#define SKIP(...)                                                                     \
    do {                                                                              \
        harness_skip("" __VA_ARGS__);                                                 \
        return;                                                                       \
    } while (0)
/* For helpers that return a value: record the failure, return ret. */
#define CHECK_OR(ret, cond, ...)                                                      \
    do {                                                                              \
        if (!(cond)) {                                                                \
            harness_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__);                  \
            return ret;                                                               \
        }                                                                             \
    } while (0)

void harness_run(const char *name, void (*fn)(void));
void harness_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void harness_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool harness_failed(void); /* has the current test failed so far? */
int harness_done(void);    /* exit status: 0 if every test passed */

#endif
