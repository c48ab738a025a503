/*
 * test_quant_k_x16.c - Q4_K's x16 (rows-in-lanes) copies (kernels/quant_k_x16.c):
 *   - the layout: every element of a repacked matrix, read back through
 *     the record layout quant.h / quant_k_x16.c document (d, dmin, the
 *     unpacked scales and mins, the qs dwords) with the dequantizer's float
 *     operations, equals quant_dequantize_row on the GGUF rows bit for bit
 *     (that dequantizer is checked against gguf-py's in test_gguf_ref.sh),
 *     and the copy's size is 148 bytes per row and super-block;
 *   - the portable mirror and the AVX2 and AVX-512 kernels on the copy, bit
 *     for bit against quant_dot_act_k_portable on the GGUF rows (the K-quant
 *     order, itself checked against exact sums in test_quant_k.c), over 1..20
 *     tokens (every 8 / 4 / 2 / 1 token split of AVX-512, 4 / 3 / 2 / 1 of
 *     AVX2, whose one-token pass runs two groups' halves together), 1..5
 *     groups, k of 1, 3, 22
 *     and 67 super-blocks (67: past the kernel's 64-super-block piece, with
 *     more groups than it carries at once), nothing outside written;
 *   - saturated weights and activations (nibbles 15, scales and mins 63,
 *     activations +-127 and -128) through the copy;
 *   - the dispatch (quant_matmul_act_range with the copy): odd row ranges
 *     (the rows around whole groups from the GGUF rows), odd k, and batch
 *     invariance: every output == the same row and token alone
 *     (quant_dot_act), whether its row falls in a group of the copy or in
 *     the edge rows, whatever the token count (one token on the AVX2 level:
 *     the GGUF rows). Run again with the copies off, on the AVX2 level (the
 *     AVX2 kernel on a machine with AVX-512) and on the portable level (the
 *     copy ignored).
 */
/* checks: 8 */
/* variant: VLLM_QUANT_K_X16=0 */
/* variant: VLLM_KERNELS=avx2 needs avx2 */
/* variant: VLLM_KERNELS=portable */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_k.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() & 0xffffff) / (float)0x1000000 * 2 - 1; }

static void put_f16(uint8_t *p, float v) {
    uint16_t h = f32_to_f16(v);
    memcpy(p, &h, 2);
}
static float get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

/* n rows of k: random bytes (every nibble, scale and min occurs), small
 * finite d / dmin. */
static void make_rows(uint8_t *w, int64_t n, int64_t k) {
    size_t bytes = (size_t)n * dtype_row_bytes(DTYPE_Q4_K, k);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rng_u32();
    for (size_t b = 0; b < bytes / 144; b++) {
        put_f16(w + 144 * b, 0.001f + 0.01f * (rng_uniform() + 1));
        put_f16(w + 144 * b + 2, 0.002f + 0.001f * rng_uniform());
    }
}

/* T activation rows of k, quantized (ldxq apart). */
static void make_xq(uint8_t *xq, int T, int64_t k) {
    static float x[67 * 256];
    for (int t = 0; t < T; t++) {
        for (int64_t i = 0; i < k; i++) x[i] = rng_uniform() * (float)(i % 5 + 1) * (i % 61 == 0 ? 20 : 1);
        quant_quantize_act_row(x, xq + t * quant_act_row_bytes(k), k);
    }
}

enum { KMAX = 67 * 256, RMAX = 80, TMAX = 20 };
static uint8_t w[RMAX * KMAX / 256 * 144];
static _Alignas(64) uint8_t x16_buf[RMAX * KMAX / 256 * 148 + 1];
static uint8_t *const x16 = x16_buf + 1; /* not 64-byte aligned: the kernels take any address */
static uint8_t xq[TMAX * KMAX / 32 * QUANT_ACT_BLOCK_BYTES];
static float y[TMAX * RMAX], dq[KMAX];

/* Element e of block j of row r, super-block s, read from the copy as the
 * layout says, with quant.c's dequantizer's operations. */
static float x16_value(const uint8_t *copy, int64_t nsb, int64_t r, int64_t s, int j, int e) {
    const uint8_t *o = copy + (size_t)((r / 16) * nsb + s) * QUANT_X16_Q4_K_REC;
    int rr = (int)(r % 16);
    float d = get_f16(o + 2 * rr), dmin = get_f16(o + 32 + 2 * rr);
    int sc = o[64 + 16 * j + rr], m = o[192 + 16 * j + rr];
    uint8_t byte = o[320 + 64 * (8 * (j / 2) + e / 4) + 4 * rr + e % 4];
    int q = j % 2 ? byte >> 4 : byte & 15;
    return d * (float)sc * (float)q - dmin * (float)m;
}

TEST(test_quant_k_x16_layout) {
    const int64_t ks[] = {256, 768, 22 * 256};
    CHECK(QUANT_X16_Q4_K_REC == 16 * 148 && QUANT_X16_Q4_K_REC % 64 == 0);
    CHECK(quant_x16_row_bytes(DTYPE_Q4_K, 5632) == 22 * 148 && quant_x16_row_bytes(DTYPE_Q4_0, 64) == 36);
    for (size_t kk = 0; kk < sizeof ks / sizeof ks[0]; kk++) {
        int64_t k = ks[kk], nsb = k / 256, n = 48;
        make_rows(w, n, k);
        memset(x16, 0xee, sizeof x16_buf - 1);
        quant_repack_x16(DTYPE_Q4_K, w, x16, 0, n / 16, k);
        size_t end = (size_t)n * quant_x16_row_bytes(DTYPE_Q4_K, k);
        CHECK(x16[end] == 0xee, "k=%lld: wrote past %zu bytes", (long long)k, end);
        CHECK(quant_x16_rows(x16, DTYPE_Q4_K, k, 32) == x16 + (size_t)2 * nsb * QUANT_X16_Q4_K_REC);
        int bad = 0;
        for (int64_t r = 0; r < n; r++) {
            quant_dequantize_row(DTYPE_Q4_K, w + r * dtype_row_bytes(DTYPE_Q4_K, k), dq, k);
            for (int64_t s = 0; s < nsb; s++)
                for (int j = 0; j < 8; j++)
                    for (int e = 0; e < 32; e++) {
                        float v = x16_value(x16, nsb, r, s, j, e);
                        bad += memcmp(&v, &dq[256 * s + 32 * j + e], 4) != 0;
                    }
        }
        CHECK(bad == 0, "k=%lld: %d elements of the copy differ from the GGUF rows' dequantization", (long long)k, bad);
    }
}

typedef void (*act_range_fn)(dtype, const void *, int64_t, const void *, int64_t, float *, int64_t, int64_t,
                             int64_t, int64_t, int64_t);

/* fn on the copy over groups [g0, g1) x tokens [t0, t1): every output ==
 * quant_dot_act_k_portable on the GGUF row, nothing else written. Returns
 * the number of bad outputs. */
static int check_x16_call(act_range_fn fn, int64_t k, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    const int64_t ldxq = (int64_t)quant_act_row_bytes(k), ldy = RMAX;
    const size_t stride = dtype_row_bytes(DTYPE_Q4_K, k);
    for (int i = 0; i < TMAX * RMAX; i++) y[i] = NAN;
    fn(DTYPE_Q4_K, x16, k, xq, ldxq, y, ldy, 16 * g0, 16 * g1, t0, t1);
    int bad = 0;
    for (int64_t t = 0; t < TMAX; t++)
        for (int64_t r = 0; r < RMAX; r++) {
            if (t < t0 || t >= t1 || r < 16 * g0 || r >= 16 * g1) {
                bad += !isnan(y[t * ldy + r]);
                continue;
            }
            float want = quant_dot_act_k_portable(DTYPE_Q4_K, w + r * stride, xq + t * ldxq, k);
            bad += memcmp(&want, &y[t * ldy + r], 4) != 0;
        }
    return bad;
}

static void check_x16_kernel(act_range_fn fn, const char *name, bool long_k) {
    const int64_t ks[] = {256, 768, 22 * 256, 67 * 256};
    for (size_t kk = 0; kk < (long_k ? 4u : 3u); kk++) {
        int64_t k = ks[kk];
        make_rows(w, RMAX, k);
        quant_repack_x16(DTYPE_Q4_K, w, x16, 0, RMAX / 16, k);
        make_xq(xq, TMAX, k);
        int bad = 0;
        for (int nt = 1; nt <= TMAX; nt++) bad += check_x16_call(fn, k, nt % 2, RMAX / 16 - nt % 3, TMAX - nt, TMAX);
        bad += check_x16_call(fn, k, 0, RMAX / 16, 0, TMAX); /* 5 groups: past the 4 a long k carries */
        CHECK(bad == 0, "%s k=%lld: %d outputs differ from the portable K order on the GGUF rows (or out of range)",
              name, (long long)k, bad);
    }
}

TEST(test_quant_k_x16_portable) { check_x16_kernel(quant_matmul_act_range_x16_k_portable, "portable", false); }
TEST(test_quant_k_x16_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_x16_kernel(quant_matmul_act_range_x16_k_avx2, "avx2", true);
}
TEST(test_quant_k_x16_avx512) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_x16_kernel(quant_matmul_act_range_x16_k_avx512, "avx512", true);
}

/* Saturated operands: nibbles 15 (0 in the last group), scales and mins 63,
 * d = dmin = 1; activations 127, -127, -128 (quantization gives -127 at
 * most, a hand-made row may hold -128), scale 0.5. */
TEST(test_quant_k_x16_extremes) {
    enum { K = 512, R = 48, T = 3 };
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    const int xv[T] = {127, -127, -128};
    for (int t = 0; t < T; t++)
        for (int i = 0; i < K / 32; i++) {
            uint8_t *xb = xq + t * ldxq + i * QUANT_ACT_BLOCK_BYTES;
            float dx = 0.5f;
            memcpy(xb, &dx, 4);
            memset(xb + 4, (uint8_t)(int8_t)xv[t], 32);
        }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < K / 256; b++) {
            uint8_t *blk = w + (r * K / 256 + b) * 144;
            put_f16(blk, 1.0f), put_f16(blk + 2, 1.0f);
            memset(blk + 4, 0xff, 12);
            memset(blk + 16, r >= 32 ? 0 : 0xff, 128);
        }
    quant_repack_x16(DTYPE_Q4_K, w, x16, 0, R / 16, K);
    act_range_fn fns[3] = {quant_matmul_act_range_x16_k_portable, quant_matmul_act_range_x16_k_avx2,
                           quant_matmul_act_range_x16_k_avx512};
    const char *names[3] = {"portable", "avx2", "avx512"};
    for (int f = 0; f < 3; f++) {
        if ((f == 1 && !kernels_cpu_has_avx2()) || (f == 2 && !kernels_cpu_has_avx512())) continue;
        for (int nt = 1; nt <= T; nt++) {
            for (int i = 0; i < T * R; i++) y[i] = NAN;
            fns[f](DTYPE_Q4_K, x16, K, xq, ldxq, y, R, 0, R, 0, nt);
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < R; r++) {
                    float want = quant_dot_act_k_portable(DTYPE_Q4_K, w + r * 288, xq + t * ldxq, K);
                    CHECK(memcmp(&want, &y[t * R + r], 4) == 0, "%s x=%d row %d: %.9g != %.9g", names[f], xv[t], r,
                          y[t * R + r], want);
                    /* the exact value: 16 blocks of 32 * (63 * 15 - 63) * x * 0.5, or - 63 * 32 * x * 0.5 */
                    double exact = 16.0 * 32 * (r >= 32 ? -63.0 : 63.0 * 15 - 63) * xv[t] * 0.5;
                    CHECK(fabs(want - exact) <= 1e-6 * fabs(exact), "row %d x=%d: %.9g vs exact %.9g", r, xv[t],
                          want, exact);
                }
        }
    }
}

/* The dispatch with the copy passed, rows [r0, r1) not on group bounds:
 * every output == quant_dot_act of its row and token alone (batch
 * invariance, edge rows and group rows alike), nothing else written. */
TEST(test_quant_k_x16_dispatch) {
    const int64_t ks[] = {768, 22 * 256};
    const int64_t spans[][4] = {{0, 80, 0, 20}, {3, 77, 1, 20}, {16, 32, 5, 6}, {17, 31, 0, 9},
                                {5, 64, 11, 15}, {0, 16, 19, 20}, {33, 80, 2, 19}, {1, 2, 0, 20}};
    for (size_t kk = 0; kk < 2; kk++) {
        int64_t k = ks[kk], ldxq = (int64_t)quant_act_row_bytes(k);
        size_t stride = dtype_row_bytes(DTYPE_Q4_K, k);
        make_rows(w, RMAX, k);
        quant_repack_x16(DTYPE_Q4_K, w, x16, 0, RMAX / 16, k);
        make_xq(xq, TMAX, k);
        int bad = 0;
        for (size_t sp = 0; sp < sizeof spans / sizeof spans[0]; sp++) {
            int64_t r0 = spans[sp][0], r1 = spans[sp][1], t0 = spans[sp][2], t1 = spans[sp][3];
            for (int i = 0; i < TMAX * RMAX; i++) y[i] = NAN;
            quant_matmul_act_range(DTYPE_Q4_K, w, x16, k, xq, ldxq, y, RMAX, r0, r1, t0, t1);
            for (int64_t t = 0; t < TMAX; t++)
                for (int64_t r = 0; r < RMAX; r++) {
                    if (t < t0 || t >= t1 || r < r0 || r >= r1) {
                        bad += !isnan(y[t * RMAX + r]);
                        continue;
                    }
                    float one = quant_dot_act(DTYPE_Q4_K, w + r * stride, xq + t * ldxq, k);
                    bad += memcmp(&one, &y[t * RMAX + r], 4) != 0;
                }
        }
        CHECK(bad == 0, "k=%lld: %d outputs differ from the row and token alone (or out of range)", (long long)k, bad);
    }
}

/* A matrix passed from row n0 on with quant_x16_rows, as the runner's
 * work items do: the same bits as the whole matrix's call. */
TEST(test_quant_k_x16_rows_offset) {
    enum { K = 3 * 256 };
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    static float y2[TMAX * RMAX];
    make_rows(w, RMAX, K);
    quant_repack_x16(DTYPE_Q4_K, w, x16, 0, RMAX / 16, K);
    make_xq(xq, TMAX, K);
    quant_matmul_act_range(DTYPE_Q4_K, w, x16, K, xq, ldxq, y, RMAX, 0, RMAX, 0, TMAX);
    for (int i = 0; i < TMAX * RMAX; i++) y2[i] = NAN;
    const int64_t n0 = 48;
    quant_matmul_act_range(DTYPE_Q4_K, w + n0 * dtype_row_bytes(DTYPE_Q4_K, K),
                           quant_x16_rows(x16, DTYPE_Q4_K, K, n0), K, xq, ldxq, y2 + n0, RMAX, 0, RMAX - n0, 0, TMAX);
    int bad = 0;
    for (int t = 0; t < TMAX; t++)
        for (int r = 0; r < RMAX; r++)
            bad += r < n0 ? !isnan(y2[t * RMAX + r]) : memcmp(&y[t * RMAX + r], &y2[t * RMAX + r], 4) != 0;
    CHECK(bad == 0, "%d outputs differ from the whole matrix's call", bad);
}

/* Who wants copies: Q8_0 / Q4_0 as quant_use_block() says, Q4_K on the
 * AVX2 and AVX-512 levels without AMX unless VLLM_QUANT_K_X16=0, no other type. */
TEST(test_quant_k_x16_wanted) {
    const char *env = getenv("VLLM_QUANT_K_X16");
    bool k_on = kernels_isa_get() >= KERNELS_ISA_AVX2 && !quant_use_amx() && !(env && !strcmp(env, "0"));
    CHECK(quant_k_use_x16() == k_on && quant_x16_wanted(DTYPE_Q4_K) == k_on);
    CHECK(quant_x16_wanted(DTYPE_Q4_0) == quant_use_block() && quant_x16_wanted(DTYPE_Q8_0) == quant_use_block());
    CHECK(!quant_x16_wanted(DTYPE_Q6_K) && !quant_x16_wanted(DTYPE_Q5_K) && !quant_x16_wanted(DTYPE_F16) &&
          !quant_x16_wanted(DTYPE_Q4_1));
}

int main(void) {
    RUN(test_quant_k_x16_layout);
    RUN(test_quant_k_x16_portable);
    RUN(test_quant_k_x16_avx2);
    RUN(test_quant_k_x16_avx512);
    RUN(test_quant_k_x16_extremes);
    RUN(test_quant_k_x16_dispatch);
    RUN(test_quant_k_x16_rows_offset);
    RUN(test_quant_k_x16_wanted);
    return harness_done();
}
