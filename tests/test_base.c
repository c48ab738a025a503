/* test_base.c - error messages, dtype conversions, and the base containers:
 * buf_grow, the string map, the monotonic clock. */
/* checks: 5 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/map.h"
#include "base/strbuf.h"
#include "harness.h"
#include "vllm/vllm.h"

TEST(test_error_message_and_prefix) {
    vllm_status rc = vllm_error(VLLM_ERR_FORMAT, "header length %d exceeds file", 99);
    CHECK(rc == VLLM_ERR_FORMAT);
    vllm_error_prefix("%s", "model.safetensors");
    CHECK(!strcmp(vllm_errmsg(), "model.safetensors: header length 99 exceeds file"), "%s", vllm_errmsg());
}

TEST(test_bf16_f16_round_trip) {
    /* Values exactly representable in each format survive; bf16 rounds to nearest even. */
    CHECK(bf16_to_f32(f32_to_bf16(1.5f)) == 1.5f);
    CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "ties to even: 0x%04x", f32_to_bf16(1.0f + 1.0f / 256));
    CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
    CHECK(f32_to_f16(-2.0f) == 0xc000);
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(test_buf_grow_doubles_and_keeps_contents) {
    int32_t *v = NULL;
    size_t cap = 0;
    CHECK(buf_grow((void **)&v, &cap, 0, sizeof *v) == VLLM_OK && v == NULL && cap == 0, "need 0: nothing");
    CHECK(buf_grow((void **)&v, &cap, 1, sizeof *v) == VLLM_OK && cap == 16, "first growth: 16, got %zu", cap);
    for (int32_t i = 0; i < 16; i++) v[i] = i * 7;
    CHECK(buf_grow((void **)&v, &cap, 17, sizeof *v) == VLLM_OK && cap == 32, "doubles: got %zu", cap);
    CHECK(buf_grow((void **)&v, &cap, 100, sizeof *v) == VLLM_OK && cap == 128, "doubles past need: %zu", cap);
    int32_t *same = v;
    CHECK(buf_grow((void **)&v, &cap, 128, sizeof *v) == VLLM_OK && v == same && cap == 128, "no-op when it fits");
    bool kept = true;
    for (int32_t i = 0; i < 16; i++) kept &= v[i] == i * 7;
    CHECK(kept, "contents survive growth");
    size_t big = cap;
    CHECK(buf_grow((void **)&v, &big, SIZE_MAX / 2, 8) == VLLM_ERR_NOMEM && v == same && big == cap,
          "overflow is an error and leaves the buffer alone");
    CHECK(strstr(vllm_errmsg(), "overflow") != NULL, "%s", vllm_errmsg());
    free(v);
    strbuf b = {0};
    CHECK(sb_add(&b, "ab", 2) == VLLM_OK && sb_add(&b, "cd", 2) == VLLM_OK && b.len == 4 && !strcmp(b.s, "abcd"));
    free(b.s);
}

typedef struct item {
    map_node node;
    char key[16];
    int value;
} item;

TEST(test_map_insert_find_remove_iterate) {
    map m;
    map_init(&m);
    CHECK(map_find(&m, "x") == NULL && map_first(&m) == NULL, "an empty map finds nothing");
    enum { N = 1000 };
    item *items = calloc(N, sizeof *items);
    CHECK(items);
    for (int i = 0; i < N; i++) {
        snprintf(items[i].key, sizeof items[i].key, "req-%d", i);
        items[i].value = i;
        CHECK(map_insert(&m, &items[i].node, items[i].key) == VLLM_OK);
    }
    CHECK(map_size(&m) == N);
    bool found = true;
    for (int i = 0; i < N; i++) {
        char k[16];
        snprintf(k, sizeof k, "req-%d", i);
        map_node *n = map_find(&m, k);
        found &= n && map_entry(n, item, node)->value == i;
    }
    CHECK(found, "every key finds its own element after the map grew");
    CHECK(map_find(&m, "req-1000") == NULL && map_find(&m, "req-") == NULL);
    for (int i = 0; i < N; i += 2) map_remove(&m, &items[i].node); /* evens out */
    CHECK(map_size(&m) == N / 2 && map_find(&m, "req-10") == NULL && map_find(&m, "req-11") != NULL);
    /* iteration visits each remaining element once, and survives removing the current one */
    int seen = 0;
    long sum = 0;
    for (map_node *n = map_first(&m), *next; n; n = next) {
        next = map_next(&m, n);
        item *it = map_entry(n, item, node);
        seen++;
        sum += it->value;
        map_remove(&m, n);
    }
    CHECK(seen == N / 2 && sum == (long)(N / 2) * (N / 2), "visited %d, sum %ld", seen, sum); /* 1+3+...+999 = 500^2 */
    CHECK(map_size(&m) == 0 && map_first(&m) == NULL);
    map_deinit(&m);
    free(items);
}

TEST(test_clock_is_monotonic_seconds) {
    double a = clock_now();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double b = clock_now();
    CHECK(b - a >= 0.019 && b - a < 5.0, "20 ms sleep measured %.6f s", b - a);
    CHECK(vllm_monotonic_time() >= b, "the public clock is the same clock");
}

int main(void) {
    RUN(test_error_message_and_prefix);
    RUN(test_bf16_f16_round_trip);
    RUN(test_buf_grow_doubles_and_keeps_contents);
    RUN(test_map_insert_find_remove_iterate);
    RUN(test_clock_is_monotonic_seconds);
    return harness_done();
}
