/*
 * test_stop.c - stop strings over streamed text: hand-worked cases from the
 * rules in stop.h (vLLM's stop / include_stop_str_in_output / min_tokens
 * behaviour), and random texts cut into random pieces checked against a
 * plain whole-text search written here: same output, same stop string,
 * whatever the cutting, never a retraction, never a split character.
 */
/* checks: 8 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "sample/sampler.h"
#include "sample/stop.h"

/* Feeds pieces (NULL-terminated list; can_stop true) and collects what is
 * sent into got; returns the stop index (-1 if none; then finishes). */
static int32_t run(const char *const *stops, int32_t num_stops, bool include, const char *const *pieces, char *got,
                   size_t cap) {
    stop_matcher m;
    if (stop_matcher_init(&m, stops, num_stops, include) != VLLM_OK) return -2;
    size_t len = 0;
    int32_t stop = -1;
    stop_update u;
    for (int i = 0; pieces[i] && stop < 0; i++) {
        if (stop_matcher_feed(&m, pieces[i], strlen(pieces[i]), true, &u) != VLLM_OK) { stop = -3; break; }
        if (len + u.len < cap) memcpy(got + len, u.text, u.len), len += u.len;
        stop = u.stop_index;
    }
    if (stop == -1) {
        stop_matcher_finish(&m, &u);
        if (len + u.len < cap) memcpy(got + len, u.text, u.len), len += u.len;
    }
    got[len] = 0;
    stop_matcher_deinit(&m);
    return stop;
}

#define STOPS(...) ((const char *const[]){__VA_ARGS__}), (int32_t)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *))
#define PIECES(...) ((const char *const[]){__VA_ARGS__, NULL})

TEST(test_stop_spanning_pieces) {
    char got[256];
    int32_t s = run(STOPS("STOP"), false, PIECES("Hello S", "T", "OP world"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "Hello "), "stop %d, text \"%s\"", s, got);
    s = run(STOPS("STOP"), true, PIECES("Hello S", "T", "OP world"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "Hello STOP"), "include: stop %d, text \"%s\"", s, got);
    s = run(STOPS("STOP"), false, PIECES("Hello S", "T", "O", "P"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "Hello "), "byte by byte: stop %d, text \"%s\"", s, got);
}

TEST(test_stop_hold_back_and_release) {
    stop_matcher m;
    stop_update u;
    CHECK(stop_matcher_init(&m, STOPS("END", "</s>"), false) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(stop_matcher_feed(&m, "abc E", 5, true, &u) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(u.len == 4 && !memcmp(u.text, "abc ", 4) && u.stop_index == -1, "sent %.*s", (int)u.len, u.text);
    CHECK(stop_matcher_feed(&m, "N", 1, true, &u) == VLLM_OK && u.len == 0, "\"EN\" must stay held: %.*s",
          (int)u.len, u.text);
    CHECK(stop_matcher_feed(&m, "x <", 3, true, &u) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(u.len == 4 && !memcmp(u.text, "ENx ", 4), "diverged: sent \"%.*s\"", (int)u.len, u.text);
    stop_matcher_finish(&m, &u); /* finished for another reason: the held "<" goes out */
    CHECK(u.len == 1 && u.text[0] == '<' && u.stop_index == -1, "finish sent \"%.*s\"", (int)u.len, u.text);
    stop_matcher_deinit(&m);
    /* include_stop_str_in_output holds nothing back: the stop string is sent anyway */
    CHECK(stop_matcher_init(&m, STOPS("END"), true) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(stop_matcher_feed(&m, "abc EN", 6, true, &u) == VLLM_OK && u.len == 6, "include sent %zu", u.len);
    CHECK(stop_matcher_feed(&m, "Dx", 2, true, &u) == VLLM_OK && u.len == 1 && u.text[0] == 'D' && u.stop_index == 0,
          "include stop: \"%.*s\" %d", (int)u.len, u.text, u.stop_index);
    stop_matcher_deinit(&m);
}

TEST(test_stop_earliest_of_several) {
    char got[256];
    /* "lo w" completes (byte 10) before "world" (byte 11) */
    int32_t s = run(STOPS("world", "lo w"), false, PIECES("Hello world"), got, sizeof got);
    CHECK(s == 1 && !strcmp(got, "Hel"), "stop %d, \"%s\"", s, got);
    /* completing at the same byte: the one listed first */
    s = run(STOPS("abc", "bc"), false, PIECES("xabcd"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "x"), "stop %d, \"%s\"", s, got);
    s = run(STOPS("bc", "abc"), false, PIECES("xabcd"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "xa"), "stop %d, \"%s\"", s, got);
    s = run(STOPS("bc", "abc"), true, PIECES("xab", "cd"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "xabc"), "include: stop %d, \"%s\"", s, got);
    /* no stop at all: everything comes out */
    s = run(STOPS("zz"), false, PIECES("a", "bz", "c"), got, sizeof got);
    CHECK(s == -1 && !strcmp(got, "abzc"), "stop %d, \"%s\"", s, got);
    s = run(NULL, 0, false, PIECES("free ", "text"), got, sizeof got);
    CHECK(s == -1 && !strcmp(got, "free text"), "no stops: %d \"%s\"", s, got);
}

TEST(test_stop_at_the_very_start) {
    char got[256];
    int32_t s = run(STOPS("\n\n"), false, PIECES("\n\nrest"), got, sizeof got);
    CHECK(s == 0 && got[0] == 0, "stop %d, \"%s\"", s, got);
    s = run(STOPS("\n\n"), true, PIECES("\n", "\nrest"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "\n\n"), "include: stop %d, \"%s\"", s, got);
}

TEST(test_stop_utf8) {
    char got[256];
    /* the stop "é!" arrives split inside the é */
    int32_t s = run(STOPS("\xc3\xa9!"), false, PIECES("caf\xc3", "\xa9", "!!"), got, sizeof got);
    CHECK(s == 0 && !strcmp(got, "caf"), "stop %d, \"%s\"", s, got);
    /* an é that is not followed by '!' comes out whole */
    stop_matcher m;
    stop_update u;
    CHECK(stop_matcher_init(&m, STOPS("\xc3\xa9!"), false) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(stop_matcher_feed(&m, "caf\xc3", 4, true, &u) == VLLM_OK && u.len == 3, "sent %zu", u.len);
    CHECK(stop_matcher_feed(&m, "\xa9", 1, true, &u) == VLLM_OK && u.len == 0, "sent %zu", u.len);
    CHECK(stop_matcher_feed(&m, " ok", 3, true, &u) == VLLM_OK && u.len == 5 && !memcmp(u.text, "\xc3\xa9 ok", 5),
          "sent \"%.*s\"", (int)u.len, u.text);
    stop_matcher_deinit(&m);
    /* a 3-byte character cut by the detokenizer is never sent in halves, stops or not */
    CHECK(stop_matcher_init(&m, NULL, 0, false) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(stop_matcher_feed(&m, "x\xe4\xbd", 3, true, &u) == VLLM_OK && u.len == 1, "sent %zu", u.len);
    CHECK(stop_matcher_feed(&m, "\xa0y", 2, true, &u) == VLLM_OK && u.len == 4 && !memcmp(u.text, "\xe4\xbd\xa0y", 4),
          "sent \"%.*s\"", (int)u.len, u.text);
    stop_matcher_deinit(&m);
    /* a multibyte stop string in CJK text */
    s = run(STOPS("\xe3\x80\x82"), false, PIECES("\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80", "\x82\xe5\x86\x8d"), got,
            sizeof got);
    CHECK(s == 0 && !strcmp(got, "\xe4\xbd\xa0\xe5\xa5\xbd"), "CJK stop %d \"%s\"", s, got);
}

TEST(test_stop_min_tokens_protection) {
    stop_matcher m;
    stop_update u;
    char got[64];
    size_t len = 0;
    /* text fed before min_tokens is reached cannot stop ... */
    CHECK(stop_matcher_init(&m, STOPS("ab"), false) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(stop_matcher_feed(&m, "xab", 3, false, &u) == VLLM_OK && u.stop_index == -1, "stopped early");
    memcpy(got + len, u.text, u.len), len += u.len;
    CHECK(stop_matcher_feed(&m, "c", 1, true, &u) == VLLM_OK && u.stop_index == -1, "old match counted");
    memcpy(got + len, u.text, u.len), len += u.len;
    /* ... but a stop string completed afterwards does */
    CHECK(stop_matcher_feed(&m, "ab", 2, true, &u) == VLLM_OK && u.stop_index == 0, "no stop");
    memcpy(got + len, u.text, u.len), len += u.len;
    got[len] = 0;
    CHECK(!strcmp(got, "xabc"), "text \"%s\"", got);
    stop_matcher_deinit(&m);
    /* a stop string begun in protected text and completed after it stops, cut before its start */
    CHECK(stop_matcher_init(&m, STOPS("ab"), false) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(stop_matcher_feed(&m, "xa", 2, false, &u) == VLLM_OK && u.len == 1, "sent %zu", u.len);
    CHECK(stop_matcher_feed(&m, "b", 1, true, &u) == VLLM_OK && u.stop_index == 0 && u.len == 0, "stop %d len %zu",
          u.stop_index, u.len);
    /* and the matcher refuses more text */
    CHECK(stop_matcher_feed(&m, "z", 1, true, &u) == VLLM_ERR_INVALID, "fed after stop");
    stop_matcher_deinit(&m);
}

TEST(test_stop_validation) {
    stop_matcher m;
    CHECK(stop_matcher_init(&m, STOPS("ok", ""), false) == VLLM_ERR_INVALID, "empty stop accepted");
    CHECK(!strcmp(vllm_errmsg(), "stop cannot contain an empty string."), "%s", vllm_errmsg());
    stop_matcher_deinit(&m); /* safe after a failed init */
}

/* ---- random texts against a whole-text search ------------------------------- */

static uint32_t next_rand(sampler_rng *g, uint32_t n) { return (uint32_t)(sampler_rng_next(g) % n); }

/* Appends one random character from a small alphabet (1-3 bytes), so stop strings recur. */
static size_t rand_char(sampler_rng *g, char *dst) {
    static const char *alphabet[] = {"a", "b", "c", " ", "\xc3\xa9", "\xe2\x82\xac"};
    const char *c = alphabet[next_rand(g, 6)];
    memcpy(dst, c, strlen(c));
    return strlen(c);
}

/* Oracle: the earliest completion after byte `protect` over the whole text,
 * ties to the first listed. */
static int32_t oracle(char *const *stops, int32_t n, bool include, const char *text, size_t len, size_t protect,
                      size_t *out_len) {
    size_t best_end = (size_t)-1, best_start = 0;
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++) {
        size_t sl = strlen(stops[i]);
        for (size_t st = 0; st + sl <= len; st++)
            if (st + sl > protect && !memcmp(text + st, stops[i], sl)) {
                if (st + sl < best_end) best_end = st + sl, best_start = st, best = i;
                break;
            }
    }
    *out_len = best < 0 ? len : include ? best_end : best_start;
    return best;
}

static bool utf8_whole(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        size_t need = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
        if (!need || i + need > n) return false;
        for (size_t k = 1; k < need; k++)
            if (((unsigned char)s[i + k] & 0xc0) != 0x80) return false;
        i += need;
    }
    return true;
}

TEST(test_stop_random_against_whole_text_search) {
    sampler_rng g;
    sampler_rng_seed(&g, 2024);
    int stopped = 0;
    for (int trial = 0; trial < 3000; trial++) {
        char text[200], stop_buf[4][16], *stops[4], sent[256];
        size_t len = 0, max_stop = 0;
        int32_t n = (int32_t)next_rand(&g, 4); /* 0..3 stop strings of 1..3 characters */
        for (int32_t i = 0; i < n; i++) {
            size_t sl = 0;
            for (uint32_t k = 0, chars = 1 + next_rand(&g, 3); k < chars; k++) sl += rand_char(&g, stop_buf[i] + sl);
            stop_buf[i][sl] = 0;
            stops[i] = stop_buf[i];
            max_stop = sl > max_stop ? sl : max_stop;
        }
        for (uint32_t k = 0, chars = next_rand(&g, 40); k < chars; k++) len += rand_char(&g, text + len);
        bool include = next_rand(&g, 2);
        int protected_pieces = next_rand(&g, 3) ? 0 : 1 + (int)next_rand(&g, 3); /* min_tokens not reached yet */

        stop_matcher m;
        CHECK(stop_matcher_init(&m, (const char *const *)stops, n, include) == VLLM_OK, "%s", vllm_errmsg());
        size_t fed = 0, got = 0, protect = 0;
        int32_t stop = -1;
        stop_update u;
        for (int pieces = 0; fed < len && stop < 0; pieces++) { /* 0..6 bytes, cutting characters anywhere */
            size_t piece = next_rand(&g, 7);
            if (piece > len - fed) piece = len - fed;
            bool can_stop = pieces >= protected_pieces;
            CHECK(stop_matcher_feed(&m, text + fed, piece, can_stop, &u) == VLLM_OK, "%s", vllm_errmsg());
            fed += piece;
            if (!can_stop) protect = fed;
            CHECK(utf8_whole(u.text, u.len), "trial %d: sent a split character", trial);
            memcpy(sent + got, u.text, u.len), got += u.len;
            stop = u.stop_index;
            /* never more held back than vLLM's bound plus an unfinished character */
            if (stop < 0 && !include) CHECK(fed - got <= (max_stop ? max_stop - 1 : 0) + 3, "trial %d: %zu held", trial, fed - got);
        }
        if (stop < 0) {
            stop_matcher_finish(&m, &u);
            memcpy(sent + got, u.text, u.len), got += u.len;
        }
        stop_matcher_deinit(&m);
        size_t want_len;
        int32_t want = oracle(stops, n, include, text, len, protect, &want_len);
        CHECK(stop == want, "trial %d: stop %d, expected %d", trial, stop, want);
        CHECK(got == want_len && !memcmp(sent, text, got), "trial %d: sent %zu bytes \"%.*s\", expected %zu of \"%.*s\"",
              trial, got, (int)got, sent, want_len, (int)len, text);
        stopped += stop >= 0;
    }
    CHECK(stopped > 500 && stopped < 2500, "%d of 3000 random texts stopped: the test is not exercising both", stopped);
}

int main(void) {
    RUN(test_stop_spanning_pieces);
    RUN(test_stop_hold_back_and_release);
    RUN(test_stop_earliest_of_several);
    RUN(test_stop_at_the_very_start);
    RUN(test_stop_utf8);
    RUN(test_stop_min_tokens_protection);
    RUN(test_stop_validation);
    RUN(test_stop_random_against_whole_text_search);
    return harness_done();
}
