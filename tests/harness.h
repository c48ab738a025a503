/*
 * harness.h - the smallest test harness that reads well.
 *
 *     TEST(test_bpe_merges) {
 *         CHECK(n == 3, "got %d ids", n);
 *     }
 *     int main(void) { RUN(test_bpe_merges); return harness_done(); }
 *
 * Each test prints "ok NAME" or "FAIL NAME: file:line: cond: message";
 * tests/run.sh counts those lines across every test binary and script.
 * CHECK returns from the test on failure. ASSET(path) finds a file relative
 * to the repository root (tests run from there).
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
bool harness_failed(void); /* has the current test failed so far? */
int harness_done(void);    /* exit status: 0 if every test passed */

#endif
