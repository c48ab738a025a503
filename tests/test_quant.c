/*
 * test_quant.c - ggml block formats: layouts checked on hand-built blocks
 * (values worked out from the format's definition), quantizer error bounds,
 * fast dot vs the naive double-precision reference, the AVX2 path vs the
 * portable path (bit-exact), and batch invariance of quant_matmul_range.
 * The integer path (Q8_0/Q4_0 weights x 8-bit activations): the activation
 * quantizer on hand-worked blocks, AVX2 vs portable bytes and dots
 * (bit-exact), the dot vs a double sum over the dequantized operands, vs the
 * F32-activation path above (the naive reference, loose: it measures the
 * activation quantization error), and batch invariance; then every integer
 * kernel the CPU has (portable, AVX2, AVX-512 VNNI wide and block order, AMX)
 * called directly against the portable C of its order, bit for bit; the
 * x16 layout byte by byte, the x16 kernels against the block order's mirror,
 * and the x16 copy a caller passes (quant_matmul_act_range, matmul_args)
 * being the one read, with the rows' bits. The byte-for-byte comparison
 * with an independent (numpy) quantizer and dequantizer is
 * tests/test_gguf_ref.sh.
 *
 * A kernel the CPU lacks reports itself skipped. The dispatched checks (the
 * order of quant_dot_act and quant_matmul_act_range, the x16 copy passed)
 * run once per process setting through the variants: the order each should
 * use is worked out here from the environment and the CPU (expected_order),
 * not taken from quant_act_order().
 */
/* checks: 23 */
/* variant: VLLM_KERNELS=avx2 needs avx2 */
/* variant: VLLM_KERNELS=avx2 VLLM_QUANT_ORDER=narrow needs avx2 */
/* variant: VLLM_QUANT_ORDER=wide needs avx512 */
/* variant: VLLM_KERNELS=portable */
/* variant: VLLM_AMX=0 needs amx-int8 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() & 0xffffff) / (float)0x1000000 * 2 - 1; }

static const dtype ALL[] = {DTYPE_F32,  DTYPE_F16,  DTYPE_BF16,   DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_Q6_K,
                            DTYPE_Q4_1, DTYPE_Q5_0, DTYPE_Q5_1, DTYPE_IQ4_NL, DTYPE_Q2_K, DTYPE_Q3_K, DTYPE_Q5_K};

/* Offsets of a block's f16 scale(s) (-1: none), for the random-byte types. */
static void scale_offsets(dtype t, int *d, int *dmin) {
    switch (t) {
    case DTYPE_Q6_K: *d = 208, *dmin = -1; break;
    case DTYPE_Q2_K: *d = 80, *dmin = 82; break;
    case DTYPE_Q3_K: *d = 108, *dmin = -1; break;
    case DTYPE_Q4_K: case DTYPE_Q5_K: case DTYPE_Q4_1: case DTYPE_Q5_1: *d = 0, *dmin = 2; break;
    default: *d = 0, *dmin = -1; break;
    }
}

/* Random row of type t with n elements: quantized from uniform floats for
 * scalar/Q8_0/Q4_0; random bytes with small finite f16 scales for the others. */
static void make_row(dtype t, uint8_t *row, int64_t n, float *tmp) {
    for (int64_t i = 0; i < n; i++) tmp[i] = rng_uniform();
    size_t bytes = dtype_row_bytes(t, n);
    switch (t) {
    case DTYPE_F32: memcpy(row, tmp, bytes); break;
    case DTYPE_F16:
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = t == DTYPE_F16 ? f32_to_f16(tmp[i]) : f32_to_bf16(tmp[i]);
            memcpy(row + 2 * i, &h, 2);
        }
        break;
    case DTYPE_Q8_0: quant_quantize_row_q8_0(tmp, row, n); break;
    case DTYPE_Q4_0: quant_quantize_row_q4_0(tmp, row, n); break;
    default:
        for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)rng_u32();
        for (int64_t b = 0; b < n / dtype_block_elems(t); b++) {
            uint16_t d = f32_to_f16(0.001f + 0.01f * (rng_uniform() + 1)), dmin = f32_to_f16(0.002f);
            uint8_t *blk = row + b * dtype_block_bytes(t);
            int od, om;
            scale_offsets(t, &od, &om);
            memcpy(blk + od, &d, 2);
            if (om >= 0) memcpy(blk + om, &dmin, 2);
        }
    }
}

TEST(test_quant_sizes) {
    CHECK(dtype_block_elems(DTYPE_Q8_0) == 32 && dtype_block_bytes(DTYPE_Q8_0) == 34);
    CHECK(dtype_block_elems(DTYPE_Q4_0) == 32 && dtype_block_bytes(DTYPE_Q4_0) == 18);
    CHECK(dtype_block_elems(DTYPE_Q4_K) == 256 && dtype_block_bytes(DTYPE_Q4_K) == 2 + 2 + 12 + 128);
    CHECK(dtype_block_elems(DTYPE_Q6_K) == 256 && dtype_block_bytes(DTYPE_Q6_K) == 128 + 64 + 16 + 2);
    CHECK(dtype_row_bytes(DTYPE_Q8_0, 2048) == 64 * 34);
    CHECK(dtype_row_bytes(DTYPE_F16, 10) == 20 && dtype_size(DTYPE_Q4_0) == 0);
    CHECK(!strcmp(dtype_name(DTYPE_Q6_K), "Q6_K") && dtype_is_quantized(DTYPE_Q4_0) && !dtype_is_quantized(DTYPE_BF16));
}

/* Hand-built blocks: d = 0.5 (f16 0x3800). */
TEST(test_quant_layout_q8_0_q4_0) {
    uint8_t b8[34] = {0x00, 0x38};
    for (int j = 0; j < 32; j++) b8[2 + j] = (uint8_t)(int8_t)(j - 16);
    float y[32];
    quant_dequantize_row(DTYPE_Q8_0, b8, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.5f * (float)(j - 16), "q8_0[%d] = %g", j, y[j]);

    uint8_t b4[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) b4[2 + j] = (uint8_t)((j & 15) | (((15 - j) & 15) << 4));
    quant_dequantize_row(DTYPE_Q4_0, b4, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == 0.5f * (float)(j - 8), "q4_0[%d] = %g", j, y[j]);           /* low nibble */
        CHECK(y[j + 16] == 0.5f * (float)(7 - j), "q4_0[%d] = %g", j + 16, y[j + 16]); /* high nibble */
    }
}

/* Q4_K: sub-blocks 5 (the j >= 4 scale packing) and 1; Q6_K element 212 --
 * expected values worked out by hand from the layouts in quant.h. */
TEST(test_quant_layout_k) {
    uint8_t b[144] = {0};
    uint16_t one = 0x3c00, half = 0x3800; /* 1.0, 0.5 */
    memcpy(b, &one, 2), memcpy(b + 2, &half, 2);
    uint8_t *s = b + 4, *qs = b + 16;
    s[1] = 3 | (1 << 6); /* sc[1] = 3; top bits of sc[5] = 1 */
    s[5] = 7 | (2 << 6); /* m[1] = 7; top bits of m[5] = 2 */
    s[9] = 0x4a;         /* sc[5] low = 0xa, m[5] low = 0x4 */
    qs[32 * 2 + 3] = 0x9 << 4; /* sub-block 5 = pair 2, high nibble, element 3 */
    qs[0 + 7] = 0x6 << 4;      /* sub-block 1 = pair 0, high nibble, element 7 */
    float y[256];
    quant_dequantize_row(DTYPE_Q4_K, b, y, 256);
    float sc5 = 0xa | (1 << 4), m5 = 0x4 | (2 << 4);
    CHECK(y[5 * 32 + 3] == 1.0f * sc5 * 9 - 0.5f * m5, "q4_k[163] = %g", y[163]);
    CHECK(y[5 * 32 + 4] == -0.5f * m5, "q4_k[164] = %g", y[164]);
    CHECK(y[1 * 32 + 7] == 3.0f * 6 - 0.5f * 7, "q4_k[39] = %g", y[39]);
    CHECK(y[0] == 0.0f, "q4_k[0] = %g (sc[0] = m[0] = 0)", y[0]);

    uint8_t c[210] = {0};
    memcpy(c + 208, &half, 2);
    int8_t *sc = (int8_t *)(c + 192);
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)(j - 8);
    /* element 128 + 64 + 20: second half, r = 2 (high nibble of ql[20]), qh bits 4-5 */
    c[64 + 20] = 0x5 << 4;        /* ql of the second half starts at 64 */
    c[128 + 32 + 20] = 0x3 << 4;  /* qh of the second half starts at 128 + 32 */
    quant_dequantize_row(DTYPE_Q6_K, c, y, 256);
    int q6 = (0x5 | (0x3 << 4)) - 32, scale = sc[8 + 20 / 16 + 4];
    CHECK(y[212] == 0.5f * (float)scale * (float)q6, "q6_k[212] = %g want %g", y[212], 0.5 * scale * q6);
    CHECK(y[0] == 0.5f * (float)sc[0] * -32, "q6_k[0] = %g", y[0]);
}

TEST(test_quant_quantize_error) {
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    for (int i = 0; i < N; i++) x[i] = rng_uniform() * (i % 7 + 1);
    const dtype ts[] = {DTYPE_Q8_0, DTYPE_Q4_0};
    const double max_nmse[] = {1e-4, 2e-2};
    for (int k = 0; k < 2; k++) {
        if (ts[k] == DTYPE_Q8_0) quant_quantize_row_q8_0(x, q, N);
        else quant_quantize_row_q4_0(x, q, N);
        quant_dequantize_row(ts[k], q, y, N);
        double err = 0, ref = 0;
        for (int i = 0; i < N; i++) err += (double)(x[i] - y[i]) * (x[i] - y[i]), ref += (double)x[i] * x[i];
        CHECK(err / ref < max_nmse[k], "%s NMSE %g", dtype_name(ts[k]), err / ref);
    }
    /* Q4_0 maps the largest-magnitude element to nibble 0 (d = max / -8). */
    float blk[32] = {0.1f, -3.0f, 2.0f};
    quant_quantize_row_q4_0(blk, q, 32);
    quant_dequantize_row(DTYPE_Q4_0, q, y, 32);
    CHECK((q[3] & 15) == 0 && fabsf(y[1] + 3.0f) < 1e-3f, "nibble %d value %g", q[3] & 15, y[1]);
    /* An all-zero block has d = 0 and dequantizes to zeros (no NaN). */
    memset(blk, 0, sizeof blk);
    quant_quantize_row_q8_0(blk, q, 32);
    quant_dequantize_row(DTYPE_Q8_0, q, y, 32);
    for (int i = 0; i < 32; i++) CHECK(y[i] == 0.0f);
}

TEST(test_quant_dot_vs_naive) {
    enum { N = 1536 }; /* N + 32 is not a multiple of 256: a partial decode chunk */
    static float x[N + 32], tmp[N + 32];
    static uint8_t row[(N + 32) * 4];
    const int64_t ns[] = {32, 96, 256, 1536, N + 32};
    for (size_t k = 0; k < sizeof ALL / sizeof ALL[0]; k++) {
        dtype t = ALL[k];
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            int64_t n = ns[m];
            if (n % dtype_block_elems(t)) continue;
            make_row(t, row, n, tmp);
            for (int64_t i = 0; i < n; i++) x[i] = rng_uniform();
            float fast = quant_dot(t, row, x, n), port = quant_dot_portable(t, row, x, n);
            double naive = quant_dot_naive(t, row, x, n), mag = 0;
            quant_dequantize_row(t, row, tmp, n);
            for (int64_t i = 0; i < n; i++) mag += fabs((double)tmp[i] * x[i]);
            CHECK(fabs(fast - naive) <= 1e-5 * mag + 1e-30, "%s n=%lld fast %.9g naive %.9g (sum|.| %g)",
                  dtype_name(t), (long long)n, fast, naive, mag);
            CHECK(memcmp(&fast, &port, 4) == 0, "%s n=%lld: %s %.9g != portable %.9g", dtype_name(t),
                  (long long)n, quant_use_avx2() ? "avx2" : "portable", fast, port);
        }
    }
}

/* Every (token, row) output is bit-identical to quant_dot alone, whatever
 * the token count and row range. */
TEST(test_quant_batch_invariance) {
    enum { K = 512, R = 7, T = 11 };
    static uint8_t w[R * K * 4];
    static float x[T * K], y[T * R], tmp[K];
    for (size_t k = 0; k < sizeof ALL / sizeof ALL[0]; k++) {
        dtype t = ALL[k];
        size_t stride = dtype_row_bytes(t, K);
        for (int r = 0; r < R; r++) make_row(t, w + r * stride, K, tmp);
        for (int i = 0; i < T * K; i++) x[i] = rng_uniform();
        for (int ntok = 1; ntok <= T; ntok++) {
            for (int i = 0; i < T * R; i++) y[i] = NAN;
            quant_matmul_range(t, w, K, x, K, y, R, 1, R, T - ntok, T);
            for (int tt = T - ntok; tt < T; tt++)
                for (int r = 1; r < R; r++) {
                    float one = quant_dot(t, w + r * stride, x + tt * K, K);
                    CHECK(memcmp(&one, &y[tt * R + r], 4) == 0, "%s ntok=%d t=%d r=%d: %.9g vs alone %.9g",
                          dtype_name(t), ntok, tt, r, y[tt * R + r], one);
                }
            for (int tt = 0; tt < T; tt++) CHECK(isnan(y[tt * R]), "row 0 outside the range was written");
        }
    }
}

/* Activation quantizer, worked by hand: amax 127 gives d = 1, id = 1, so q
 * is x rounded half to even; amax 16 gives id = 127/16 = 7.9375 (exact). */
TEST(test_quant_act_quantize) {
    float x[64] = {0};
    x[0] = 127, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.5f, x[5] = 1.49f, x[6] = -127;
    for (int j = 0; j < 32; j++) x[32 + j] = (float)(j - 16) * 0.5f; /* amax 8: id 127/8 = 15.875 */
    uint8_t q[2 * QUANT_ACT_BLOCK_BYTES], p[2 * QUANT_ACT_BLOCK_BYTES];
    quant_quantize_act_row(x, q, 64);
    quant_quantize_act_row_portable(x, p, 64);
    CHECK(memcmp(q, p, sizeof q) == 0, "avx2 and portable activation bytes differ");
    float d0, d1;
    memcpy(&d0, q, 4), memcpy(&d1, q + QUANT_ACT_BLOCK_BYTES, 4);
    const int8_t *q0 = (const int8_t *)(q + 4), *q1 = (const int8_t *)(q + QUANT_ACT_BLOCK_BYTES + 4);
    CHECK(d0 == 1.0f && d1 == 8.0f / 127, "d %g %g", d0, d1);
    const int want0[] = {127, 2, 4, -2, 0, 1, -127, 0};
    for (int j = 0; j < 8; j++) CHECK(q0[j] == want0[j], "q[%d] = %d want %d", j, q0[j], want0[j]);
    for (int j = 0; j < 32; j++) {
        int want = (int)rint((double)((float)(j - 16) * 0.5f * (127.0f / 8)));
        CHECK(q1[j] == want, "block 1 q[%d] = %d want %d", j, q1[j], want);
    }
    CHECK(q1[0] == -127 && q1[1] == -119, "q1 %d %d", q1[0], q1[1]); /* -7.5*15.875 = -119.06 */
    /* a zero block: d = 0, q = 0 */
    memset(x, 0, sizeof x);
    quant_quantize_act_row(x, q, 32);
    memcpy(&d0, q, 4);
    CHECK(d0 == 0.0f);
    for (int j = 0; j < 32; j++) CHECK(q[4 + j] == 0);
    /* random rows: AVX2 and portable bytes agree */
    enum { N = 4096 };
    static float r[N];
    static uint8_t a[N / 32 * QUANT_ACT_BLOCK_BYTES], b[N / 32 * QUANT_ACT_BLOCK_BYTES];
    for (int i = 0; i < N; i++) r[i] = rng_uniform() * (float)(i % 5 + 1) * (i % 97 == 0 ? 50 : 1);
    quant_quantize_act_row(r, a, N);
    quant_quantize_act_row_portable(r, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0, "avx2 and portable activation bytes differ on a random row");
}

typedef float (*act_dot_fn)(dtype, const void *, const void *, int64_t);

static bool env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

/* The order this process must use (quant.h), from the environment and the
 * CPU: the level is the CPU's best capped by VLLM_KERNELS; AMX tiles at the
 * AVX-512 level unless VLLM_AMX or VLLM_QUANT_AMX is 0; the block order with
 * AMX, else on AVX2 and AVX-512 unless VLLM_QUANT_ORDER is wide or narrow;
 * otherwise the level's row order. */
static quant_order expected_order(void) {
    int level = kernels_cpu_has_avx512() ? 2 : kernels_cpu_has_avx2() ? 1 : 0;
    if (env_is("VLLM_KERNELS", "portable")) level = 0;
    if (env_is("VLLM_KERNELS", "avx2") && level > 1) level = 1;
    bool amx = level == 2 && !env_is("VLLM_AMX", "0") && !env_is("VLLM_QUANT_AMX", "0") && quant_amx_available();
    bool rows = env_is("VLLM_QUANT_ORDER", "wide") || env_is("VLLM_QUANT_ORDER", "narrow");
    if (amx || (level >= 1 && !rows)) return QUANT_ORDER_BLOCK;
    return level == 2 ? QUANT_ORDER_WIDE : QUANT_ORDER_NARROW;
}

TEST(test_quant_dispatch_order) {
    static const char *names[] = {"narrow", "wide", "block"};
    CHECK(quant_act_order() == expected_order(), "quant_act_order() %s, the environment and CPU say %s",
          names[quant_act_order()], names[expected_order()]);
    CHECK(quant_use_block() == (expected_order() == QUANT_ORDER_BLOCK));
}

/* The portable dot in this process's order (expected_order). */
static act_dot_fn act_dot_mirror(void) {
    switch (expected_order()) {
    case QUANT_ORDER_BLOCK: return quant_dot_act_block_portable;
    case QUANT_ORDER_WIDE: return quant_dot_act_wide_portable;
    default: return quant_dot_act_portable;
    }
}

/* Integer dots: fast == portable bit for bit; == a double sum over the
 * dequantized operands to 1e-5; near the F32-activation naive dot (the
 * activation quantization costs < 1% of sum |w x|). */
TEST(test_quant_dot_act) {
    enum { N = 4096 };
    static float x[N], tmp[N];
    static uint8_t row[N * 2], xq[N / 32 * QUANT_ACT_BLOCK_BYTES];
    const dtype ts[] = {DTYPE_Q8_0, DTYPE_Q4_0};
    const int64_t ns[] = {32, 64, 96, 2048, N};
    for (int k = 0; k < 2; k++)
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            dtype t = ts[k];
            int64_t n = ns[m];
            make_row(t, row, n, tmp);
            for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * (float)(i % 3 + 1);
            quant_quantize_act_row(x, xq, n);
            float fast = quant_dot_act(t, row, xq, n);
            float port = act_dot_mirror()(t, row, xq, n);
            CHECK(memcmp(&fast, &port, 4) == 0, "%s n=%lld: %.9g != portable %.9g", dtype_name(t), (long long)n,
                  fast, port);
            quant_dequantize_row(t, row, tmp, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                float dx;
                memcpy(&dx, xq + i / 32 * QUANT_ACT_BLOCK_BYTES, 4);
                double xv = (double)dx * (int8_t)xq[i / 32 * QUANT_ACT_BLOCK_BYTES + 4 + i % 32];
                exact += (double)tmp[i] * xv, mag += fabs((double)tmp[i] * x[i]);
            }
            CHECK(fabs(fast - exact) <= 1e-5 * mag, "%s n=%lld: %.9g vs exact %.9g", dtype_name(t), (long long)n,
                  fast, exact);
            double naive = quant_dot_naive(t, row, x, n);
            CHECK(fabs(fast - naive) <= 1e-2 * mag, "%s n=%lld: %.9g vs F32 activations %.9g (sum|.| %g)",
                  dtype_name(t), (long long)n, fast, naive, mag);
            CHECK(fabs(fast - naive) > 0 || n <= 32, "%s n=%lld: identical to F32 activations?", dtype_name(t),
                  (long long)n);
        }
}

/* quant_matmul_act_range: every output == quant_dot_act alone, whatever the
 * token count and row range (odd rows: the 2-row tile's single-row tail);
 * quant_matmul_act_f32_range gives the same bytes from F32 x. */
TEST(test_quant_act_batch_invariance) {
    enum { K = 2048 + 512, R = 7, T = 11 };
    static uint8_t w[R * K * 2], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[T * K], y[T * R], y2[T * R], tmp[K];
    const dtype ts[] = {DTYPE_Q8_0, DTYPE_Q4_0};
    size_t ldxq = quant_act_row_bytes(K);
    for (int k = 0; k < 2; k++) {
        dtype t = ts[k];
        size_t stride = dtype_row_bytes(t, K);
        for (int r = 0; r < R; r++) make_row(t, w + r * stride, K, tmp);
        for (int i = 0; i < T * K; i++) x[i] = rng_uniform();
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

/* Each integer path called directly against its portable mirror, bit for
 * bit: the AVX2 kernel vs quant_dot_act_portable, the AVX-512 kernel vs
 * quant_dot_act_wide_portable, over odd block counts, several k pieces (the
 * AVX-512 kernel takes k 2048 at a time), more rows than its 64-row chunk and
 * every tile remainder; the AMX kernel vs quant_dot_act_block_portable
 * likewise; and each is batch invariant by construction of that
 * comparison (every output equals a single-row, single-token dot). The two
 * orders agree to rounding (checked loosely). */
typedef void (*act_range_fn)(dtype, const void *, int64_t, const void *, int64_t, float *, int64_t, int64_t,
                             int64_t, int64_t, int64_t);
static void check_act_path(act_range_fn fn, act_dot_fn dot, const char *name) {
    enum { KMAX = 4096 + 3 * 32, R = 140, T = 40 };
    static uint8_t w[R * KMAX / 32 * 34], xq[T * KMAX / 32 * QUANT_ACT_BLOCK_BYTES];
    static float x[KMAX], y[T * R], tmp[KMAX];
    const dtype ts[] = {DTYPE_Q8_0, DTYPE_Q4_0};
    const int64_t ks[] = {32, 96, 2048, 2048 + 32, 4096, KMAX};
    for (int m = 0; m < 2; m++)
        for (size_t kk = 0; kk < sizeof ks / sizeof ks[0]; kk++) {
            dtype t = ts[m];
            int64_t k = ks[kk], ldxq = (int64_t)quant_act_row_bytes(k);
            size_t stride = dtype_row_bytes(t, k);
            for (int r = 0; r < R; r++) make_row(t, w + r * stride, k, tmp);
            for (int tt = 0; tt < T; tt++) {
                for (int64_t i = 0; i < k; i++) x[i] = rng_uniform() * (float)(i % 7 + 1);
                quant_quantize_act_row(x, xq + tt * ldxq, k);
            }
            const int64_t spans[][4] = {{0, R, 0, T},   {3, R - 2, 1, 2}, {5, 6, 4, 7},  {1, 66, 2, 5},
                                        {0, 16, 0, 1},  {0, 48, 0, 8},    {16, 64, 17, T}, {2, 35, 3, 22},
                                        {0, 128, 0, 1}, {16, 128, 5, 8},  {1, 139, 0, 3}};
            const int nspans = sizeof spans / sizeof spans[0];
            int bad = 0;
            float maxabs = 0, maxdiff = 0;
            for (int sp = 0; sp < nspans; sp++) {
                int64_t r0 = spans[sp][0], r1 = spans[sp][1], t0 = spans[sp][2], t1 = spans[sp][3];
                for (int i = 0; i < T * R; i++) y[i] = NAN;
                fn(t, w, k, xq, ldxq, y, R, r0, r1, t0, t1);
                for (int tt = 0; tt < T; tt++)
                    for (int r = 0; r < R; r++) {
                        bool in = tt >= t0 && tt < t1 && r >= r0 && r < r1;
                        if (!in) {
                            bad += !isnan(y[tt * R + r]);
                            continue;
                        }
                        float want = dot(t, w + r * stride, xq + tt * ldxq, k);
                        float other = (dot == quant_dot_act_portable ? quant_dot_act_block_portable
                                                                       : quant_dot_act_portable)(
                            t, w + r * stride, xq + tt * ldxq, k);
                        bad += memcmp(&want, &y[tt * R + r], 4) != 0;
                        maxabs = fmaxf(maxabs, fabsf(want)), maxdiff = fmaxf(maxdiff, fabsf(want - other));
                    }
            }
            CHECK(bad == 0, "%s %s k=%lld: %d outputs differ from the portable mirror (or out of range)", name,
                  dtype_name(t), (long long)k, bad);
            CHECK(maxdiff <= 1e-5f * maxabs, "%s %s k=%lld: orders differ by %g (outputs up to %g)", name,
                  dtype_name(t), (long long)k, maxdiff, maxabs);
        }
}

/* The x16 kernels through act_range_fn: rows [0, X16_ROWS) of w repacked (the
 * 16-row groups inside [r0, r1) from the copy, the rest on the block-order
 * row kernel, as quant_matmul_act_range splits them). */
enum { X16_ROWS = 128 }; /* 8 groups: more than one pass of X16_GROUPS */
static uint8_t x16_buf[X16_ROWS * (4096 + 3 * 32) / 32 * 34];
static void x16_split(act_range_fn x16fn, act_range_fn rowfn, dtype t, const void *w, int64_t k, const void *xq,
                      int64_t ldxq, float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    quant_repack_x16(t, w, x16_buf, 0, X16_ROWS / 16, k);
    int64_t m0 = (r0 + 15) / 16 * 16, m1 = r1 / 16 * 16 < X16_ROWS ? r1 / 16 * 16 : X16_ROWS;
    if (m0 >= m1) m0 = m1 = r1;
    if (r0 < m0) rowfn(t, w, k, xq, ldxq, y, ldy, r0, m0, t0, t1);
    if (m0 < m1)
        x16fn(t, x16_buf + m0 / 16 * 16 * dtype_row_bytes(t, k), k, xq, ldxq, y + m0, ldy, 0, m1 - m0, t0, t1);
    if (m1 < r1) rowfn(t, w, k, xq, ldxq, y, ldy, m1, r1, t0, t1);
}
static void x16_avx512(dtype t, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                       int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    x16_split(quant_matmul_act_range_x16_avx512, quant_matmul_act_range_avx512_block, t, w, k, xq, ldxq, y, ldy, r0,
              r1, t0, t1);
}
static void x16_amx(dtype t, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                    int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    x16_split(quant_matmul_act_range_x16_amx, quant_matmul_act_range_avx512_block, t, w, k, xq, ldxq, y, ldy, r0, r1,
              t0, t1);
}
static void x16_avx2(dtype t, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                     int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    x16_split(quant_matmul_act_range_x16_avx2, quant_matmul_act_range_avx2_block, t, w, k, xq, ldxq, y, ldy, r0, r1,
              t0, t1);
}
/* quant_matmul_act_range with rows [0, X16_ROWS) of w repacked and passed as
 * its x16 copy (the row range split is quant.c's own). */
static void x16_dispatch(dtype t, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                         int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    quant_repack_x16(t, w, x16_buf, 0, X16_ROWS / 16, k);
    quant_matmul_act_range(t, w, x16_buf, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

#define NEEDS(cond, why)                                                                         \
    if (!(cond)) SKIP(why)
#define NO_AVX2 "no AVX2 on this CPU"
#define NO_AVX512 "no AVX-512 VNNI on this CPU"
#define NO_AMX "no AMX-INT8 on this CPU (or the OS did not grant the tile state)"

TEST(test_quant_act_paths) { check_act_path(quant_matmul_act_range_portable, quant_dot_act_portable, "portable"); }
TEST(test_quant_act_paths_avx2) {
    NEEDS(kernels_cpu_has_avx2(), NO_AVX2);
    check_act_path(quant_matmul_act_range_avx2, quant_dot_act_portable, "avx2");
}
TEST(test_quant_act_paths_avx2_block) {
    NEEDS(kernels_cpu_has_avx2(), NO_AVX2);
    check_act_path(quant_matmul_act_range_avx2_block, quant_dot_act_block_portable, "avx2 block");
}
TEST(test_quant_act_paths_x16_avx2) {
    NEEDS(kernels_cpu_has_avx2(), NO_AVX2);
    check_act_path(x16_avx2, quant_dot_act_block_portable, "x16 avx2");
}
TEST(test_quant_act_paths_avx512) {
    NEEDS(kernels_cpu_has_avx512(), NO_AVX512);
    check_act_path(quant_matmul_act_range_avx512, quant_dot_act_wide_portable, "avx512");
}
TEST(test_quant_act_paths_avx512_block) {
    NEEDS(kernels_cpu_has_avx512(), NO_AVX512);
    check_act_path(quant_matmul_act_range_avx512_block, quant_dot_act_block_portable, "avx512 block");
}
TEST(test_quant_act_paths_x16_avx512) {
    NEEDS(kernels_cpu_has_avx512(), NO_AVX512);
    check_act_path(x16_avx512, quant_dot_act_block_portable, "x16 avx512");
}
TEST(test_quant_act_paths_amx) {
    NEEDS(quant_amx_available(), NO_AMX);
    check_act_path(quant_matmul_act_range_amx, quant_dot_act_block_portable, "amx");
}
TEST(test_quant_act_paths_x16_amx) {
    NEEDS(quant_amx_available(), NO_AMX);
    check_act_path(x16_amx, quant_dot_act_block_portable, "x16 amx");
}
/* The dispatch with an x16 copy passed: the block order reads the copy; a
 * row-order process ignores it (one order per process); either way the bits
 * of the order this process must use. */
TEST(test_quant_act_paths_x16) { check_act_path(x16_dispatch, act_dot_mirror(), "x16 dispatch"); }

/* k beyond the x16 kernels' 512-block prep piece (accumulators carried
 * across pieces), 1..5 tokens, vs the block order's portable mirror; on
 * the AVX-512 and the AVX2 kernel. */
TEST(test_quant_x16_long_k) {
    enum { R = 160, K = 512 * 32 + 3 * 32, T = 5 }; /* 10 groups: more than a chunk of either kernel */
    static uint8_t w[R * K / 32 * 34], p[R * K / 32 * 34], xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float tmp[K], y[T * R];
    const dtype ts[] = {DTYPE_Q8_0, DTYPE_Q4_0};
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    NEEDS(kernels_cpu_has_avx2(), NO_AVX2);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < K; i++) tmp[i] = rng_uniform();
        quant_quantize_act_row(tmp, xq + t * ldxq, K);
    }
    for (int m = 0; m < 2; m++) {
        dtype ty = ts[m];
        size_t stride = dtype_row_bytes(ty, K);
        for (int r = 0; r < R; r++) make_row(ty, w + r * stride, K, tmp);
        quant_repack_x16(ty, w, p, 0, R / 16, K);
        for (int path = 0; path < 2; path++)
            for (int nt = 1; nt <= T; nt++) {
                if (path == 0 && !kernels_cpu_has_avx512()) continue;
                (path == 0 ? quant_matmul_act_range_x16_avx512 : quant_matmul_act_range_x16_avx2)(ty, p, K, xq, ldxq, y,
                                                                                                   R, 0, R, 0, nt);
                int bad = 0;
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < R; r++) {
                        float want = quant_dot_act_block_portable(ty, w + r * stride, xq + t * ldxq, K);
                        bad += memcmp(&want, &y[t * R + r], 4) != 0;
                    }
                CHECK(bad == 0, "%s %s %d tokens: %d outputs differ from the block mirror", path ? "avx2" : "avx512",
                      dtype_name(ty), nt, bad);
            }
    }
}

/* The x16 layout against its definition (quant.h), byte by byte. */
TEST(test_quant_x16_layout) {
    enum { R = 48, K = 96 };
    static uint8_t w[R * K / 32 * 34], p[R * K / 32 * 34];
    float tmp[K];
    const dtype ts[] = {DTYPE_Q8_0, DTYPE_Q4_0};
    for (int m = 0; m < 2; m++) {
        dtype t = ts[m];
        size_t stride = dtype_row_bytes(t, K), bb = dtype_block_bytes(t), qb = bb - 2;
        for (int r = 0; r < R; r++) make_row(t, w + r * stride, K, tmp);
        memset(p, 0xAA, sizeof p);
        quant_repack_x16(t, w, p, 1, R / 16, K); /* groups 1 and 2 only */
        int bad = 0;
        for (int r = 0; r < R; r++)
            for (int b = 0; b < K / 32; b++) {
                const uint8_t *rec = p + ((r / 16) * (K / 32) + b) * 16 * bb, *src = w + r * stride + b * bb;
                if (r < 16) { /* group 0 untouched */
                    bad += rec[2 * (r % 16)] != 0xAA;
                    continue;
                }
                bad += memcmp(rec + 2 * (r % 16), src, 2) != 0; /* scale */
                for (size_t i = 0; i < qb; i++) /* byte i of the quants: dword i/4, byte i%4 */
                    bad += rec[32 + 64 * (i / 4) + 4 * (r % 16) + i % 4] != src[2 + i];
            }
        CHECK(bad == 0, "%s: %d bytes not where the x16 layout puts them", dtype_name(t), bad);
    }
}

/* The copy passed is the one read: a wrong copy (every quant changed, scales
 * kept) changes the outputs of the whole 16-row groups it covers; the right
 * one gives the bits of no copy. Through quant_matmul_act_range, through
 * matmul_range_quant (matmul_args.x16) on row ranges that start and end
 * inside groups, and on the matrix passed from row 32 on with
 * quant_x16_rows (as the runner passes the up projection's rows). A
 * row-order process (VLLM_QUANT_ORDER, portable) reads no copy at all: the
 * wrong one changes nothing there. */
TEST(test_quant_x16_passed) {
    enum { R = 80, K = 64, T = 3 };
    const bool block = expected_order() == QUANT_ORDER_BLOCK;
    const dtype t = DTYPE_Q8_0;
    const int64_t ldxq = (int64_t)quant_act_row_bytes(K);
    const size_t stride = dtype_row_bytes(t, K);
    static uint8_t w[R * K / 32 * 34], good[R * K / 32 * 34], junk[R * K / 32 * 34];
    static uint8_t xq[T * K / 32 * QUANT_ACT_BLOCK_BYTES];
    static float tmp[K], x[T * K], y0[T * R], y1[T * R];
    for (int r = 0; r < R; r++) make_row(t, w + r * stride, K, tmp);
    for (int i = 0; i < T * K; i++) x[i] = rng_uniform();
    for (int tt = 0; tt < T; tt++) quant_quantize_act_row(x + tt * K, xq + tt * ldxq, K);
    quant_repack_x16(t, w, good, 0, R / 16, K);
    memcpy(junk, good, sizeof junk);
    for (size_t i = 0; i < sizeof junk; i++)
        if (i % (16 * 34) >= 32) junk[i] ^= 0x55;

    quant_matmul_act_range(t, w, NULL, K, xq, ldxq, y0, R, 0, R, 0, T);
    quant_matmul_act_range(t, w, junk, K, xq, ldxq, y1, R, 0, R, 0, T);
    int changed = 0;
    for (int i = 0; i < T * R; i++) changed += y0[i] != y1[i];
    CHECK(block ? changed > T * R / 2 : changed == 0, "%s order: %d of %d outputs changed with a wrong copy",
          block ? "block" : "row", changed, T * R);
    quant_matmul_act_range(t, w, good, K, xq, ldxq, y1, R, 0, R, 0, T);
    CHECK(memcmp(y0, y1, sizeof y0) == 0, "quant_matmul_act_range: the x16 copy gives other bits than the rows");

    matmul_args a = {.y = y1, .ldy = R, .x = x, .ldx = K, .w = w, .wtype = t, .n = R, .k = K, .xq = xq, .ldxq = ldxq};
    const int64_t spans[][2] = {{0, R}, {5, 75}, {17, 40}, {33, 47}, {16, 64}, {79, 80}};
    for (size_t sp = 0; sp < sizeof spans / sizeof spans[0]; sp++) {
        int64_t n0 = spans[sp][0], n1 = spans[sp][1];
        bool group_inside = (n0 + 15) / 16 < n1 / 16;
        for (int pass = 0; pass < 2; pass++) {
            a.x16 = pass ? junk : good;
            for (int i = 0; i < T * R; i++) y1[i] = NAN;
            matmul_range_quant(&a, n0, n1, 0, T);
            int bad = 0, diff = 0;
            for (int tt = 0; tt < T; tt++)
                for (int r = 0; r < R; r++) {
                    float got = y1[tt * R + r], want = y0[tt * R + r];
                    if (r < n0 || r >= n1) bad += !isnan(got);
                    else if (memcmp(&got, &want, 4) && pass) diff++;
                    else if (memcmp(&got, &want, 4)) bad++;
                }
            CHECK(bad == 0, "matmul_range_quant rows [%lld, %lld) with the %s copy: %d outputs wrong", (long long)n0,
                  (long long)n1, pass ? "wrong" : "right", bad);
            if (pass) CHECK((diff > 0) == (block && group_inside), "rows [%lld, %lld): %d outputs read the wrong copy",
                            (long long)n0, (long long)n1, diff);
        }
    }

    CHECK(quant_x16_rows(good, t, K, 8) == NULL && quant_x16_rows(NULL, t, K, 32) == NULL,
          "quant_x16_rows gave a copy where no group starts");
    matmul_args b = a;
    b.w = w + 32 * stride, b.x16 = quant_x16_rows(good, t, K, 32), b.n = R - 32, b.y = y1 + 32;
    for (int i = 0; i < T * R; i++) y1[i] = NAN;
    matmul_range_quant(&b, 0, R - 32, 0, T);
    int bad = 0;
    for (int tt = 0; tt < T; tt++) bad += memcmp(y1 + tt * R + 32, y0 + tt * R + 32, (R - 32) * sizeof(float)) != 0;
    CHECK(bad == 0, "rows [32, %d) passed with quant_x16_rows: %d tokens differ", R, bad);
}

int main(void) {
    RUN(test_quant_sizes);
    RUN(test_quant_layout_q8_0_q4_0);
    RUN(test_quant_layout_k);
    RUN(test_quant_quantize_error);
    RUN(test_quant_dot_vs_naive);
    RUN(test_quant_batch_invariance);
    RUN(test_quant_act_quantize);
    RUN(test_quant_dot_act);
    RUN(test_quant_act_batch_invariance);
    RUN(test_quant_dispatch_order);
    RUN(test_quant_act_paths);
    RUN(test_quant_act_paths_avx2);
    RUN(test_quant_act_paths_avx2_block);
    RUN(test_quant_act_paths_x16_avx2);
    RUN(test_quant_act_paths_avx512);
    RUN(test_quant_act_paths_avx512_block);
    RUN(test_quant_act_paths_x16_avx512);
    RUN(test_quant_act_paths_amx);
    RUN(test_quant_act_paths_x16_amx);
    RUN(test_quant_act_paths_x16);
    RUN(test_quant_x16_layout);
    RUN(test_quant_x16_long_k);
    RUN(test_quant_x16_passed);
    return harness_done();
}
