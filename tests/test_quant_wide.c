/*
 * test_quant_wide.c - Q4_1 / Q5_0 / Q5_1 / IQ4_NL: layouts and integer dots
 * (the wide order on every path, kernels/quant.h):
 *   - block sizes, and each layout on a hand-built block (values worked out
 *     from ggml's definitions; the byte-for-byte check against ggml's own
 *     Python dequantizer is tests/test_gguf_types.sh);
 *   - the dot vs a double sum over the dequantized operands (tight), and vs
 *     F32 activations over dequantized weights: per dot (loose) and as the
 *     NMSE of a whole matmul's outputs;
 *   - every path the CPU has (portable, AVX2, AVX-512 called directly, and
 *     the dispatching entry under the process's level) bit for bit against
 *     the portable mirror, over row / token spans with every tile remainder,
 *     odd block counts (the wide order's lone last block) and k beyond each
 *     kernel's piece (accumulators carried across pieces);
 *   - saturated weights and activations, every path against the mirror and
 *     an exact sum;
 *   - batch invariance: any token count (1..40) and row range == the single
 *     dot, and quant_matmul_act_f32_range gives the same bytes.
 */
/* checks: 9 */
/* variant: VLLM_KERNELS=avx2 needs avx2 */
/* variant: VLLM_KERNELS=portable */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

static uint64_t rng_state = 0x5851f42d4c957f2dull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() & 0xffffff) / (float)0x1000000 * 2 - 1; }

static const dtype WT[] = {DTYPE_Q4_1, DTYPE_Q5_0, DTYPE_Q5_1, DTYPE_IQ4_NL};
enum { NWT = sizeof WT / sizeof WT[0] };

static void put_f16(uint8_t *p, float v) {
    uint16_t h = f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Random row: random bytes (every nibble and fifth bit occurs), small
 * finite scales, minimums of either sign for Q4_1 / Q5_1. */
static void make_row(dtype t, uint8_t *row, int64_t n) {
    size_t bb = dtype_block_bytes(t);
    for (size_t i = 0; i < dtype_row_bytes(t, n); i++) row[i] = (uint8_t)rng_u32();
    for (int64_t b = 0; b < n / 32; b++) {
        put_f16(row + b * bb, 0.001f + 0.01f * (rng_uniform() + 1));
        if (quant_has_min(t)) put_f16(row + b * bb + 2, 0.05f * rng_uniform());
    }
}

static void make_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * (float)(i % 5 + 1) * (i % 61 == 0 ? 20 : 1);
}

TEST(test_quant_wide_sizes) {
    const size_t bytes[NWT] = {20, 22, 24, 18};
    const char *names[NWT] = {"Q4_1", "Q5_0", "Q5_1", "IQ4_NL"};
    for (int i = 0; i < NWT; i++) {
        CHECK(dtype_block_elems(WT[i]) == 32 && dtype_block_bytes(WT[i]) == bytes[i], "%s", names[i]);
        CHECK(!strcmp(dtype_name(WT[i]), names[i]) && dtype_is_quantized(WT[i]) && quant_has_act_kernel(WT[i]));
        CHECK(quant_is_wide(WT[i]) && !quant_is_k(WT[i]));
    }
    CHECK(dtype_row_bytes(DTYPE_Q5_1, 576) == 18 * 24);
}

/* Hand-built blocks: d = 0.5 (f16 0x3800), m = -2 (0xc000). */
TEST(test_quant_wide_layouts) {
    float y[32];
    uint8_t b41[20] = {0x00, 0x38, 0x00, 0xc0};
    b41[4 + 3] = 0xa7; /* element 3: 7, element 19: 10 */
    quant_dequantize_row(DTYPE_Q4_1, b41, y, 32);
    CHECK(y[3] == 0.5f * 7 - 2 && y[19] == 0.5f * 10 - 2 && y[0] == -2.0f, "q4_1 %g %g %g", y[3], y[19], y[0]);

    uint8_t b50[22] = {0x00, 0x38};
    b50[2 + 2] = 0x02;  /* qh bit 17: element 17's fifth bit */
    b50[6 + 1] = 0x30;  /* element 1: nibble 0, element 17: nibble 3 */
    b50[6 + 5] = 0x09;  /* element 5: nibble 9, no fifth bit */
    quant_dequantize_row(DTYPE_Q5_0, b50, y, 32);
    CHECK(y[17] == 0.5f * (16 + 3 - 16) && y[5] == 0.5f * (9 - 16) && y[1] == 0.5f * -16, "q5_0 %g %g %g", y[17],
          y[5], y[1]);

    uint8_t b51[24] = {0x00, 0x38, 0x00, 0xc0};
    b51[4 + 0] = 0x01;  /* qh bit 0 */
    b51[4 + 3] = 0x80;  /* qh bit 31 */
    b51[8 + 0] = 0xf2;  /* element 0: 2, element 16: 15 */
    b51[8 + 15] = 0x40; /* element 31: 4 */
    quant_dequantize_row(DTYPE_Q5_1, b51, y, 32);
    CHECK(y[0] == 0.5f * 18 - 2 && y[16] == 0.5f * 15 - 2 && y[31] == 0.5f * 20 - 2, "q5_1 %g %g %g", y[0], y[16],
          y[31]);

    uint8_t bnl[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) bnl[2 + j] = (uint8_t)(j | (15 - j) << 4);
    quant_dequantize_row(DTYPE_IQ4_NL, bnl, y, 32);
    CHECK(y[0] == 0.5f * -127 && y[15] == 0.5f * 113 && y[16] == 0.5f * 113 && y[8] == 0.5f * 1, "iq4_nl %g %g %g",
          y[0], y[15], y[8]);
    CHECK(quant_iq4nl_values[7] == -10 && quant_iq4nl_values[12] == 53);
}

/* The dot vs the exact sum over the dequantized operands; vs F32
 * activations (loose: the 8-bit activation error, which is not zero). */
TEST(test_quant_wide_dot_vs_reference) {
    enum { N = 4096 + 96 };
    static float x[N], w[N];
    static uint8_t row[N], xq[N / 32 * QUANT_ACT_BLOCK_BYTES];
    const int64_t ns[] = {32, 96, 576, 1536, N};
    for (int k = 0; k < NWT; k++)
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            dtype t = WT[k];
            int64_t n = ns[m];
            make_row(t, row, n);
            make_x(x, n);
            quant_quantize_act_row(x, xq, n);
            float fast = quant_dot_act(t, row, xq, n);
            float port = quant_dot_act_portable(t, row, xq, n);
            CHECK(memcmp(&fast, &port, 4) == 0, "%s n=%lld: %.9g != portable %.9g", dtype_name(t), (long long)n,
                  fast, port);
            float wide = quant_dot_act_wide_portable(t, row, xq, n), block = quant_dot_act_block_portable(t, row, xq, n);
            CHECK(!memcmp(&wide, &port, 4) && !memcmp(&block, &port, 4), "%s: one order whichever mirror is asked",
                  dtype_name(t));
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

/* A whole matmul (64 rows x 8 tokens, k 2048) against F32 activations over
 * the dequantized weights: NMSE of the outputs, the cost of quantizing
 * the activations to 8 bits (~1e-5 here). */
TEST(test_quant_wide_nmse) {
    enum { K = 2048, R = 64, T = 8 };
    static uint8_t w[R * K], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[T * K], y[T * R], wf[K];
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    for (int m = 0; m < NWT; m++) {
        dtype t = WT[m];
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

static void dispatch(dtype t, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                     int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    quant_matmul_act_range(t, w, NULL, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

/* fn over row / token spans of R rows x T tokens, every output against the
 * portable mirror bit for bit, nothing outside the span written. */
static void check_path(act_range_fn fn, const char *name) {
    enum { KMAX = 8192 + 3 * 32, R = 70, T = 9 }; /* KMAX: past the AVX2 kernel's 256-block piece */
    static uint8_t w[R * KMAX / 32 * 24], xq[T * KMAX / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[KMAX], y[T * R];
    const int64_t ks[] = {32, 96, 576, 2048 + 32, KMAX};
    for (int m = 0; m < NWT; m++)
        for (size_t kk = 0; kk < sizeof ks / sizeof ks[0]; kk++) {
            dtype t = WT[m];
            int64_t k = ks[kk], ldxq = (int64_t)quant_act_row_bytes(k);
            size_t stride = dtype_row_bytes(t, k);
            for (int r = 0; r < R; r++) make_row(t, w + r * stride, k);
            for (int tt = 0; tt < T; tt++) {
                make_x(x, k);
                quant_quantize_act_row(x, xq + tt * ldxq, k);
            }
            const int64_t spans[][4] = {{0, R, 0, T}, {3, R - 2, 1, 2}, {5, 6, 4, 7}, {1, 66, 2, 5},
                                        {0, 4, 0, 1},  {0, 67, 3, 4},    {2, 9, 0, 3}};
            int bad = 0;
            for (size_t sp = 0; sp < sizeof spans / sizeof spans[0]; sp++) {
                int64_t r0 = spans[sp][0], r1 = spans[sp][1], t0 = spans[sp][2], t1 = spans[sp][3];
                for (int i = 0; i < T * R; i++) y[i] = NAN;
                fn(t, w, k, xq, ldxq, y, R, r0, r1, t0, t1);
                for (int tt = 0; tt < T; tt++)
                    for (int r = 0; r < R; r++) {
                        if (!(tt >= t0 && tt < t1 && r >= r0 && r < r1)) {
                            bad += !isnan(y[tt * R + r]);
                            continue;
                        }
                        float want = quant_dot_act_wide_portable(t, w + r * stride, xq + tt * ldxq, k);
                        bad += memcmp(&want, &y[tt * R + r], 4) != 0;
                    }
            }
            CHECK(bad == 0, "%s %s k=%lld: %d outputs differ from the portable mirror (or out of range)", name,
                  dtype_name(t), (long long)k, bad);
        }
}

TEST(test_quant_wide_paths) {
    check_path(quant_matmul_act_range_portable, "portable");
    check_path(dispatch, "dispatch");
}
TEST(test_quant_wide_paths_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_path(quant_matmul_act_range_avx2, "avx2");
    check_path(quant_matmul_act_range_wide_avx2, "avx2 (wide entry)");
}
TEST(test_quant_wide_paths_avx512) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 VNNI on this CPU");
    check_path(quant_matmul_act_range_avx512, "avx512");
}

/* Saturated blocks: every nibble 15 with every fifth bit (Q5: 31, Q5_0 +15),
 * none (Q5_0 -16, IQ4_NL -127), activations of +127, -127 and, for the
 * unsigned types, -128 (a hand-made row; quantization gives -127 at most,
 * and the signed types' AVX2 |w| x sign(x, w) needs that: -(-128) wraps). */
TEST(test_quant_wide_extremes) {
    enum { K = 320, R = 5, T = 3 };
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
    act_range_fn fns[] = {dispatch, quant_matmul_act_range_wide_avx2, quant_matmul_act_range_avx512};
    const char *names[] = {"dispatch", "avx2", "avx512"};
    for (int m = 0; m < NWT; m++) {
        dtype t = WT[m];
        size_t stride = dtype_row_bytes(t, K), bb = dtype_block_bytes(t);
        for (int r = 0; r < R; r++)
            for (int b = 0; b < K / 32; b++) {
                uint8_t *blk = w + r * stride + b * bb;
                memset(blk, r % 2 ? 0x00 : 0xff, bb); /* rows 0, 2, 4: all bits set; 1, 3: none */
                put_f16(blk, 1.0f);
                if (quant_has_min(t)) put_f16(blk + 2, r < 2 ? 1.0f : -1.0f);
            }
        for (int f = 0; f < 3; f++) {
            if ((f == 1 && !kernels_cpu_has_avx2()) || (f == 2 && !kernels_cpu_has_avx512())) continue;
            for (int ntok = 1; ntok <= T; ntok++) {
                if (ntok == T && !quant_has_min(t)) continue; /* -128: see above */
                for (int i = 0; i < T * R; i++) y[i] = NAN;
                fns[f](t, w, K, xq, ldxq, y, R, 0, R, 0, ntok);
                for (int tt = 0; tt < ntok; tt++)
                    for (int r = 0; r < R; r++) {
                        float want = quant_dot_act_wide_portable(t, w + r * stride, xq + tt * ldxq, K);
                        CHECK(memcmp(&want, &y[tt * R + r], 4) == 0, "%s %s x=%d row %d (%d tokens): %.9g != %.9g",
                              names[f], dtype_name(t), xv[tt], r, ntok, y[tt * R + r], want);
                        quant_dequantize_row(t, w + r * stride, dq, K);
                        double exact = 0;
                        for (int i = 0; i < K; i++) exact += (double)dq[i] * 0.5 * xv[tt];
                        CHECK(fabs(want - exact) <= 1e-6 * fabs(exact) + 1e-3, "%s x=%d row %d: %.9g vs exact %.9g",
                              dtype_name(t), xv[tt], r, want, exact);
                    }
            }
        }
    }
}

/* Every output of a batched call == the same token alone; the F32-input
 * variant gives the same bytes. */
TEST(test_quant_wide_batch_invariance) {
    enum { K = 2048 + 96, R = 7, T = 40 };
    static uint8_t w[R * K], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[T * K], y[T * R], y2[T * R];
    size_t ldxq = quant_act_row_bytes(K);
    for (int m = 0; m < NWT; m++) {
        dtype t = WT[m];
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
    RUN(test_quant_wide_sizes);
    RUN(test_quant_wide_layouts);
    RUN(test_quant_wide_dot_vs_reference);
    RUN(test_quant_wide_nmse);
    RUN(test_quant_wide_paths);
    RUN(test_quant_wide_paths_avx2);
    RUN(test_quant_wide_paths_avx512);
    RUN(test_quant_wide_extremes);
    RUN(test_quant_wide_batch_invariance);
    return harness_done();
}
