/*
 * test_quant_k.c - K-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) integer dots
 * (kernels/quant_k.c) against 8-bit activations:
 *   - the Q2_K / Q3_K / Q5_K layouts on hand-built super-blocks (values
 *     worked out from ggml's definitions; ggml's own Python dequantizer is
 *     tests/test_gguf_types.sh), block sizes;
 *   - the dot vs a double sum over the dequantized operands
 *     (quant_dequantize_row, itself checked against numpy in test_gguf_ref.sh,
 *     and the activation blocks' d * q), tight; and vs quant_dot_naive with
 *     F32 activations (loose: the activation quantization error), also as
 *     the NMSE of a whole matmul's outputs;
 *   - every path the CPU has (portable, AVX2 called directly, and the
 *     dispatching entry) bit for bit against the portable mirror, over row /
 *     token spans with every tile remainder, and k beyond the AVX2 kernel's
 *     stack cache (its portable fallback);
 *     the AMX tile kernel too (when the CPU has it; Q4_K / Q6_K, the types it
 *     takes), also over 1..40 tokens and row spans crossing its 16-row
 *     groups and 64-row chunks;
 *   - saturated weights and activations (the int16 partial sums' bounds),
 *     every path against the portable mirror and an exact sum;
 *   - batch invariance: quant_matmul_act_range over any token count (1..40:
 *     the dispatch puts 4+ tokens on AMX tiles, fewer on AVX2) and row range,
 *     and quant_matmul_act_f32_range, == the single dot.
 * A kernel the CPU lacks reports itself skipped; the dispatched checks run
 * again on the AVX2 and portable levels and with AMX off (variants).
 */
/* checks: 13 */
/* variant: VLLM_KERNELS=avx2 needs avx2 */
/* variant: VLLM_KERNELS=portable */
/* variant: VLLM_AMX=0 needs amx-int8 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_k.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() & 0xffffff) / (float)0x1000000 * 2 - 1; }

static const dtype KT[] = {DTYPE_Q4_K, DTYPE_Q6_K, DTYPE_Q2_K, DTYPE_Q3_K, DTYPE_Q5_K};
enum { NKT = sizeof KT / sizeof KT[0] };

/* Where a super-block keeps its f16 d and dmin (-1: none). */
static int d_at(dtype t) { return t == DTYPE_Q6_K ? 208 : t == DTYPE_Q2_K ? 80 : t == DTYPE_Q3_K ? 108 : 0; }
static int dmin_at(dtype t) { return t == DTYPE_Q6_K || t == DTYPE_Q3_K ? -1 : d_at(t) + 2; }

static void put_f16(uint8_t *p, float v) {
    uint16_t h = f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Random K row: random bytes (every quant, scale and min value occurs),
 * small finite f16 d / dmin. */
static void make_row(dtype t, uint8_t *row, int64_t n) {
    size_t bytes = dtype_row_bytes(t, n);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)rng_u32();
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t *blk = row + b * dtype_block_bytes(t);
        put_f16(blk + d_at(t), 0.001f + 0.01f * (rng_uniform() + 1));
        if (dmin_at(t) >= 0) put_f16(blk + dmin_at(t), 0.002f + 0.001f * rng_uniform());
    }
}

static void make_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * (float)(i % 5 + 1) * (i % 61 == 0 ? 20 : 1);
}

TEST(test_quant_k_sizes) {
    const size_t bytes[NKT] = {144, 210, 84, 110, 176};
    for (int i = 0; i < NKT; i++) {
        CHECK(dtype_block_elems(KT[i]) == 256 && dtype_block_bytes(KT[i]) == bytes[i], "%s", dtype_name(KT[i]));
        CHECK(quant_is_k(KT[i]) && !quant_is_wide(KT[i]) && quant_has_act_kernel(KT[i]));
    }
    CHECK(!strcmp(dtype_name(DTYPE_Q2_K), "Q2_K") && !strcmp(dtype_name(DTYPE_Q3_K), "Q3_K") &&
          !strcmp(dtype_name(DTYPE_Q5_K), "Q5_K"));
    CHECK(quant_k_amx_takes(DTYPE_Q4_K) && quant_k_amx_takes(DTYPE_Q6_K) && !quant_k_amx_takes(DTYPE_Q5_K));
}

/* Hand-built super-blocks, d = 0.5, dmin = 0.25; each expected value from
 * the layout in quant.h, element e = 128h + 32r + l for Q2_K / Q3_K. */
TEST(test_quant_k_layouts) {
    float y[256];
    uint8_t b2[84] = {0};
    put_f16(b2 + 80, 0.5f), put_f16(b2 + 82, 0.25f);
    b2[13] = 0x7 << 4 | 0x9;       /* sub-block 13 = 8*1 + 2*2 + 1: scale 9, min 7 */
    b2[16 + 32 + 20] = 0x2 << 4;   /* h = 1, r = 2 (bits 4-5), l = 20: q = 2 */
    quant_dequantize_row(DTYPE_Q2_K, b2, y, 256);
    CHECK(y[128 + 64 + 20] == 0.5f * 9 * 2 - 0.25f * 7, "q2_k[212] = %g", y[212]);
    CHECK(y[128 + 64 + 21] == -0.25f * 7 && y[0] == 0.0f, "q2_k[213] = %g, [0] = %g", y[213], y[0]);

    uint8_t b3[110] = {0};
    put_f16(b3 + 108, 0.5f);
    /* sub-block 13: low nibble in byte 13 - 8 = 5 (high nibble), top bits at bits 6-7 of byte 8 + 13 % 4 = 9 */
    b3[96 + 5] = 0x5 << 4, b3[96 + 9] = 0x2 << 6; /* scale 0x25 = 37: 37 - 32 = 5 */
    b3[32 + 32 + 20] = 0x3 << 4;                  /* h = 1, r = 2, l = 20: 2 low bits 3 */
    b3[20] = 1 << 6;                              /* hmask[20] bit 4h + r = 6: no - 4 */
    b3[21] = 0;                                   /* element 213: q = 0 - 4 */
    quant_dequantize_row(DTYPE_Q3_K, b3, y, 256);
    CHECK(y[212] == 0.5f * 5 * 3, "q3_k[212] = %g", y[212]);
    CHECK(y[213] == 0.5f * 5 * -4 && y[0] == 0.5f * -32 * -4, "q3_k[213] = %g, [0] = %g", y[213], y[0]);

    uint8_t b5[176] = {0};
    put_f16(b5, 0.5f), put_f16(b5 + 2, 0.25f);
    b5[4 + 1] = 3, b5[4 + 5] = 7;  /* sub-block 1: scale 3, min 7 */
    b5[48 + 9] = 0xb << 4;         /* sub-block 1 = pair 0's high nibbles, l = 9: 11 */
    b5[16 + 9] = 1 << 1;           /* qh[9] bit 1: + 16 */
    quant_dequantize_row(DTYPE_Q5_K, b5, y, 256);
    CHECK(y[32 + 9] == 0.5f * 3 * 27 - 0.25f * 7, "q5_k[41] = %g", y[41]);
    CHECK(y[32 + 10] == -0.25f * 7 && y[9] == 0.0f, "q5_k[42] = %g, [9] = %g", y[42], y[9]);
}

TEST(test_quant_k_dot_vs_reference) {
    enum { N = 5632 };
    static float x[N], w[N];
    static uint8_t row[N], xq[N / 32 * QUANT_ACT_BLOCK_BYTES];
    const int64_t ns[] = {256, 512, 2048 + 256, N};
    for (int k = 0; k < NKT; k++)
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            dtype t = KT[k];
            int64_t n = ns[m];
            CHECK(quant_has_act_kernel(t));
            make_row(t, row, n);
            make_x(x, n);
            quant_quantize_act_row(x, xq, n);
            float fast = quant_dot_act(t, row, xq, n);
            float port = quant_dot_act_k_portable(t, row, xq, n);
            CHECK(memcmp(&fast, &port, 4) == 0, "%s n=%lld: %.9g != portable %.9g", dtype_name(t), (long long)n,
                  fast, port);
            quant_dequantize_row(t, row, w, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                float dx;
                memcpy(&dx, xq + i / 32 * QUANT_ACT_BLOCK_BYTES, 4);
                double xv = (double)dx * (int8_t)xq[i / 32 * QUANT_ACT_BLOCK_BYTES + 4 + i % 32];
                exact += (double)w[i] * xv, mag += fabs((double)w[i] * x[i]);
            }
            CHECK(fabs(fast - exact) <= 2e-6 * mag, "%s n=%lld: %.9g vs exact %.9g (sum|.| %g)", dtype_name(t),
                  (long long)n, fast, exact, mag);
            double naive = quant_dot_naive(t, row, x, n);
            CHECK(fabs(fast - naive) <= 1e-2 * mag && fast != naive, "%s n=%lld: %.9g vs F32 activations %.9g",
                  dtype_name(t), (long long)n, fast, naive);
        }
}

/* A whole matmul (32 rows x 8 tokens, k 2048) against F32 activations over
 * the dequantized weights: NMSE of the outputs (the 8-bit activations). */
TEST(test_quant_k_nmse) {
    enum { K = 2048, R = 32, T = 8 };
    static uint8_t w[R * K], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[T * K], y[T * R], wf[K];
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    for (int m = 0; m < NKT; m++) {
        dtype t = KT[m];
        size_t stride = dtype_row_bytes(t, K);
        for (int r = 0; r < R; r++) make_row(t, w + r * stride, K);
        for (int i = 0; i < T * K; i++) x[i] = rng_uniform();
        for (int tt = 0; tt < T; tt++) quant_quantize_act_row(x + tt * K, xq + tt * ldxq, K);
        quant_matmul_act_range(t, w, NULL, K, xq, ldxq, y, R, 0, R, 0, T);
        double err = 0, ref = 0;
        for (int r = 0; r < R; r++) {
            quant_dequantize_row(t, w + r * stride, wf, K);
            for (int tt = 0; tt < T; tt++) {
                double s = 0;
                for (int i = 0; i < K; i++) s += (double)wf[i] * x[tt * K + i];
                err += (y[tt * R + r] - s) * (y[tt * R + r] - s), ref += s * s;
            }
        }
        CHECK(err / ref < 1e-4, "%s: NMSE %g vs F32 activations", dtype_name(t), err / ref);
    }
}

typedef void (*act_range_fn)(dtype, const void *, int64_t, const void *, int64_t, float *, int64_t, int64_t,
                             int64_t, int64_t, int64_t);

/* quant_matmul_act_range, which K types take without an x16 copy. */
static void dispatch(dtype t, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                     int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    quant_matmul_act_range(t, w, NULL, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

/* fn over row / token spans for the first ntypes of KT, every output
 * against the portable mirror bit for bit, nothing outside written. */
static void check_path(act_range_fn fn, const char *name, int ntypes) {
    enum { KMAX = 33024, R = 13, T = 9 }; /* KMAX: past the AVX2 kernel's 32768 */
    static uint8_t w[R * KMAX / 256 * 210], xq[T * KMAX / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[KMAX], y[T * R];
    const int64_t ks[] = {256, 768, 4096 + 256, 8192 + 768, KMAX}; /* 8192 + 768: past the AVX-512 kernel's piece */
    for (int m = 0; m < ntypes; m++)
        for (size_t kk = 0; kk < sizeof ks / sizeof ks[0]; kk++) {
            dtype t = KT[m];
            int64_t k = ks[kk], ldxq = (int64_t)quant_act_row_bytes(k);
            size_t stride = dtype_row_bytes(t, k);
            for (int r = 0; r < R; r++) make_row(t, w + r * stride, k);
            for (int tt = 0; tt < T; tt++) {
                make_x(x, k);
                quant_quantize_act_row(x, xq + tt * ldxq, k);
            }
            const int64_t spans[][4] = {{0, R, 0, T}, {3, R - 2, 1, 2}, {5, 6, 4, 7}, {1, 12, 2, 5}, {0, 4, 0, 1}};
            int bad = 0;
            for (int sp = 0; sp < 5; sp++) {
                int64_t r0 = spans[sp][0], r1 = spans[sp][1], t0 = spans[sp][2], t1 = spans[sp][3];
                for (int i = 0; i < T * R; i++) y[i] = NAN;
                fn(t, w, k, xq, ldxq, y, R, r0, r1, t0, t1);
                for (int tt = 0; tt < T; tt++)
                    for (int r = 0; r < R; r++) {
                        if (!(tt >= t0 && tt < t1 && r >= r0 && r < r1)) {
                            bad += !isnan(y[tt * R + r]);
                            continue;
                        }
                        float want = quant_dot_act_k_portable(t, w + r * stride, xq + tt * ldxq, k);
                        bad += memcmp(&want, &y[tt * R + r], 4) != 0;
                    }
            }
            CHECK(bad == 0, "%s %s k=%lld: %d outputs differ from the portable mirror (or out of range)", name,
                  dtype_name(t), (long long)k, bad);
        }
}

#define NEEDS(cond, why)                                                                         \
    if (!(cond)) SKIP(why)
#define NO_AVX2 "no AVX2 on this CPU"
#define NO_AVX512 "no AVX-512 on this CPU"
#define NO_AMX "no AMX-INT8 on this CPU (or the OS did not grant the tile state)"

TEST(test_quant_k_paths) {
    check_path(quant_matmul_act_range_portable, "portable", NKT);
    check_path(dispatch, "dispatch", NKT);
}
TEST(test_quant_k_paths_avx2) {
    NEEDS(kernels_cpu_has_avx2(), NO_AVX2);
    check_path(quant_matmul_act_range_avx2, "avx2", NKT);
}
TEST(test_quant_k_paths_avx512) {
    NEEDS(kernels_cpu_has_avx512(), NO_AVX512);
    check_path(quant_matmul_act_range_k_avx512, "avx512", NKT);
}
TEST(test_quant_k_paths_amx) {
    NEEDS(quant_amx_available(), NO_AMX);
    check_path(quant_matmul_act_range_k_amx, "amx", 2); /* KT[0..1]: Q4_K, Q6_K */
}

/* Saturated operands, where the kernels' int16 partial sums are closest to
 * their bounds: every Q4_K nibble 15, every Q6_K q6 at 63 (and at 0, the
 * most negative q6 - 32), Q5_K q5 31, Q2_K q 3, Q3_K q 3 and -4, largest
 * (and most negative) scales and mins, activations of +127, -127 and -128
 * (quantization gives -127 at most, a hand-made row may hold -128).
 * Every path bit for bit against the portable mirror, and the mirror
 * against an exact double sum. */
static void check_extremes(act_range_fn fn, const char *name) {
    enum { K = 512, R = 5, T = 3 };
    static uint8_t w[R * K], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float y[T * R], dq[K];
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    const int xv[T] = {127, -127, -128};
    for (int tt = 0; tt < T; tt++)
        for (int i = 0; i < K / 32; i++) {
            uint8_t *xb = xq + tt * ldxq + i * QUANT_ACT_BLOCK_BYTES;
            float dx = 0.5f;
            memcpy(xb, &dx, 4);
            memset(xb + 4, (uint8_t)(int8_t)xv[tt], 32);
        }
    for (int m = 0; m < NKT; m++) {
        dtype t = KT[m];
        size_t stride = dtype_row_bytes(t, K), bb = dtype_block_bytes(t);
        uint16_t one = f32_to_f16(1.0f);
        for (int r = 0; r < R; r++)
            for (int b = 0; b < K / 256; b++) {
                uint8_t *blk = w + r * stride + b * bb;
                const uint8_t q = r < 3 ? 0xff : 0; /* every quant bit set in rows 0..2, clear in 3, 4 */
                switch (t) {
                case DTYPE_Q4_K: /* scales and mins 63, nibbles 15 (or 0 in row 4) */
                    memcpy(blk, &one, 2), memcpy(blk + 2, &one, 2);
                    memset(blk + 4, 0xff, 12);
                    memset(blk + 16, r == 4 ? 0 : 0xff, 128);
                    break;
                case DTYPE_Q5_K: /* scales and mins 63, q5 31 or 0 */
                    memset(blk + 4, 0xff, 12);
                    memset(blk + 16, q, 160);
                    memcpy(blk, &one, 2), memcpy(blk + 2, &one, 2);
                    break;
                case DTYPE_Q2_K: /* scales and mins 15, q 3 or 0 */
                    memset(blk, 0xff, 16);
                    memset(blk + 16, q, 64);
                    memcpy(blk + 80, &one, 2), memcpy(blk + 82, &one, 2);
                    break;
                case DTYPE_Q3_K: /* q 3 or -4, scales 31 or -32 */
                    memset(blk, q, 96);
                    memset(blk + 96, r % 2 ? 0x00 : 0xff, 12);
                    memcpy(blk + 108, &one, 2);
                    break;
                default: /* Q6_K: q6 63 (rows 0..2) or 0 (rows 3, 4), scales 127 or -128 */
                    memset(blk, q, 192);
                    memset(blk + 192, r % 2 ? 0x80 : 0x7f, 16);
                    memcpy(blk + 208, &one, 2);
                    break;
                }
            }
        for (int ntok = 1; ntok <= T; ntok++) {
            for (int i = 0; i < T * R; i++) y[i] = NAN;
            fn(t, w, K, xq, ldxq, y, R, 0, R, 0, ntok);
            for (int tt = 0; tt < ntok; tt++)
                for (int r = 0; r < R; r++) {
                    float want = quant_dot_act_k_portable(t, w + r * stride, xq + tt * ldxq, K);
                    CHECK(memcmp(&want, &y[tt * R + r], 4) == 0, "%s %s x=%d row %d (%d tokens): %.9g != %.9g", name,
                          dtype_name(t), xv[tt], r, ntok, y[tt * R + r], want);
                    quant_dequantize_row(t, w + r * stride, dq, K);
                    double exact = 0;
                    for (int i = 0; i < K; i++) exact += (double)dq[i] * 0.5 * xv[tt];
                    CHECK(fabs(want - exact) <= 1e-6 * fabs(exact) + 1e-3, "%s x=%d row %d: %.9g vs exact %.9g",
                          dtype_name(t), xv[tt], r, want, exact);
                }
        }
    }
}

TEST(test_quant_k_extremes) { check_extremes(dispatch, "dispatch"); }
TEST(test_quant_k_extremes_avx2) {
    NEEDS(kernels_cpu_has_avx2(), NO_AVX2);
    check_extremes(quant_matmul_act_range_avx2, "avx2");
}
TEST(test_quant_k_extremes_avx512) {
    NEEDS(kernels_cpu_has_avx512(), NO_AVX512);
    check_extremes(quant_matmul_act_range_k_avx512, "avx512");
}

/* The AMX kernel over 1..40 tokens (partial and several 16-token groups),
 * 70 rows (two row chunks, a partial 16-row group) and k = 5 super-blocks
 * (a partial k piece), bit for bit against the portable mirror. */
TEST(test_quant_k_amx_tokens) {
    enum { K = 5 * 256, R = 70, T = 40 };
    static uint8_t w[R * K], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[K], y[T * R];
    NEEDS(quant_amx_available(), NO_AMX);
    int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    for (int m = 0; m < 2; m++) {
        dtype t = KT[m];
        size_t stride = dtype_row_bytes(t, K);
        for (int r = 0; r < R; r++) make_row(t, w + r * stride, K);
        for (int tt = 0; tt < T; tt++) {
            make_x(x, K);
            quant_quantize_act_row(x, xq + tt * ldxq, K);
        }
        int bad = 0;
        for (int ntok = 1; ntok <= T; ntok++) {
            int r0 = ntok % 3, r1 = R - ntok % 5; /* odd row spans too */
            for (int i = 0; i < T * R; i++) y[i] = NAN;
            quant_matmul_act_range_k_amx(t, w, K, xq, ldxq, y, R, r0, r1, T - ntok, T);
            for (int tt = 0; tt < T; tt++)
                for (int r = 0; r < R; r++) {
                    if (tt < T - ntok || r < r0 || r >= r1) {
                        bad += !isnan(y[tt * R + r]);
                        continue;
                    }
                    float want = quant_dot_act_k_portable(t, w + r * stride, xq + tt * ldxq, K);
                    bad += memcmp(&want, &y[tt * R + r], 4) != 0;
                }
        }
        CHECK(bad == 0, "amx %s: %d outputs differ from the portable mirror (or out of range)", dtype_name(t), bad);
    }
}

/* Every output of a batched call == the same token alone; the F32-input
 * variant gives the same bytes. */
TEST(test_quant_k_batch_invariance) {
    enum { K = 2048 + 512, R = 7, T = 40 }; /* 4+ tokens: AMX tiles when the process uses them */
    static uint8_t w[R * K], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[T * K], y[T * R], y2[T * R];
    size_t ldxq = quant_act_row_bytes(K);
    for (int k = 0; k < NKT; k++) {
        dtype t = KT[k];
        size_t stride = dtype_row_bytes(t, K);
        for (int r = 0; r < R; r++) make_row(t, w + r * stride, K);
        make_x(x, T * K);
        for (int tt = 0; tt < T; tt++) quant_quantize_act_row(x + tt * K, xq + tt * ldxq, K);
        for (int ntok = 1; ntok <= T; ntok++) {
            for (int i = 0; i < T * R; i++) y[i] = y2[i] = NAN;
            quant_matmul_act_range(t, w, NULL, K, xq, (int64_t)ldxq, y, R, 1, R, T - ntok, T);
            quant_matmul_act_f32_range(t, w, K, x, K, y2, R, 1, R, T - ntok, T);
            for (int tt = T - ntok; tt < T; tt++)
                for (int r = 1; r < R; r++) {
                    float one = quant_dot_act(t, w + r * stride, xq + tt * ldxq, K);
                    CHECK(memcmp(&one, &y[tt * R + r], 4) == 0, "%s ntok=%d t=%d r=%d: %.9g vs alone %.9g",
                          dtype_name(t), ntok, tt, r, y[tt * R + r], one);
                    CHECK(memcmp(&one, &y2[tt * R + r], 4) == 0, "%s ntok=%d t=%d r=%d: f32 x %.9g vs %.9g",
                          dtype_name(t), ntok, tt, r, y2[tt * R + r], one);
                }
            for (int tt = 0; tt < T; tt++) CHECK(isnan(y[tt * R]) && isnan(y2[tt * R]), "row 0 was written");
        }
    }
}

int main(void) {
    RUN(test_quant_k_sizes);
    RUN(test_quant_k_layouts);
    RUN(test_quant_k_dot_vs_reference);
    RUN(test_quant_k_nmse);
    RUN(test_quant_k_paths);
    RUN(test_quant_k_paths_avx2);
    RUN(test_quant_k_paths_avx512);
    RUN(test_quant_k_paths_amx);
    RUN(test_quant_k_extremes);
    RUN(test_quant_k_extremes_avx2);
    RUN(test_quant_k_extremes_avx512);
    RUN(test_quant_k_amx_tokens);
    RUN(test_quant_k_batch_invariance);
    return harness_done();
}
