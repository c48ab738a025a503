/*
 * test_matmul_bf16.c - the BF16 compute path (kernels/matmul_bf16.c):
 * activations rounded to BF16 (nearest even) and summed in vdpbf16ps's order.
 * The expected values are hand-derived from Intel's definition of the
 * instruction (each lane adds its odd pair's product, then its even one's,
 * rounding after each add), not taken from our output; the AVX512-BF16
 * kernel must equal the portable emulation bit for bit, stay within the
 * FP32 error bound of a double-precision dot of the rounded activations,
 * and give a token the same bits alone or in any batch, with the
 * activations rounded by the kernel or beforehand (matmul_bf16_round_act,
 * the runner's way; the AVX2 kernel takes them widened, in its own panel
 * format), and with its k-blocks (8 tokens of a long k are cut
 * into blocks whose accumulators wait in memory) adding in the same order.
 * The AVX2 kernel (FMAs where the inputs' range makes them exact, the
 * emulation elsewhere) is held to the same, plus edge values: subnormal,
 * tiny, huge, signed-zero, infinite and NaN activations and weights, each
 * to the bit of the portable path.
 */
/* checks: 17 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "harness.h"
#include "kernels/kernels.h"

typedef void (*matmul_fn)(const matmul_args *, int64_t, int64_t, int64_t, int64_t);

static uint64_t rng_state = 0x243f6a8885a308d3u;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* y (T, n + 3) = x (T, k + 2) W (n, k)^T, BF16 weights, F32 bias. */
static matmul_args make_args(int64_t n, int64_t k, int64_t T, bool bias, bool acc) {
    matmul_args a = {.ldy = n + 3, .ldx = k + 2, .wtype = DTYPE_BF16, .btype = DTYPE_F32, .n = n, .k = k,
                     .accumulate = acc};
    float *x = malloc(sizeof(float) * (size_t)(T * a.ldx));
    for (int64_t i = 0; i < T * a.ldx; i++) x[i] = frand();
    uint16_t *w = malloc(2 * (size_t)(n * k));
    for (int64_t i = 0; i < n * k; i++) w[i] = f32_to_bf16(frand());
    float *b = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) b[i] = frand();
    a.x = x;
    a.w = w;
    a.bias = bias ? b : NULL;
    if (!bias) free(b);
    a.y = calloc((size_t)(T * a.ldy), sizeof(float));
    return a;
}

static void free_args(matmul_args *a) {
    free((void *)a->x);
    free((void *)a->w);
    free((void *)a->bias);
    free(a->y);
}

static void fill_y(const matmul_args *a, int64_t T, float v) {
    for (int64_t i = 0; i < T * a->ldy; i++) a->y[i] = v;
}

/* The portable path's outputs for rows [0, n) of T tokens (y first filled
 * with v; the caller frees them), then fn's in a->y (the same start). */
static float *portable_then(matmul_fn fn, matmul_args *a, int64_t n, int64_t T, float v) {
    size_t bytes = sizeof(float) * (size_t)(T * a->ldy);
    float *port = malloc(bytes);
    fill_y(a, T, v);
    matmul_bf16_range_portable(a, 0, n, 0, T);
    memcpy(port, a->y, bytes);
    fill_y(a, T, v);
    fn(a, 0, n, 0, T);
    return port;
}

/* One output of a k-element dot with w = 1 and the given x, via fn. */
static float dot_ones(matmul_fn fn, const float *x, int64_t k) {
    uint16_t *w = malloc(2 * (size_t)k);
    for (int64_t i = 0; i < k; i++) w[i] = 0x3f80; /* 1.0 */
    float y = -1;
    matmul_args a = {.y = &y, .ldy = 1, .x = x, .ldx = k, .w = w, .wtype = DTYPE_BF16, .n = 1, .k = k};
    fn(&a, 0, 1, 0, 1);
    free(w);
    return y;
}

/* Hand-derived: rounding of the activations, and the odd-then-even order. */
static void check_hand(matmul_fn fn, const char *name) {
    /* 1 + 2^-9 is below half a BF16 ulp of 1: rounds to 1 (FP32 keeps it) */
    float x1[1] = {1.0f + 0x1p-9f};
    CHECK(dot_ones(fn, x1, 1) == 1.0f, "%s: 1 + 2^-9 gave %.9g, want 1", name, dot_ones(fn, x1, 1));
    /* 1 + 3*2^-8: a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even) -> 1 + 2^-6 */
    float x2[1] = {1.0f + 3 * 0x1p-8f};
    CHECK(dot_ones(fn, x2, 1) == 1.0f + 0x1p-6f, "%s: 1 + 3*2^-8 gave %.9g, want 1.015625", name,
          dot_ones(fn, x2, 1));
    /* k 34: lane 0 holds 1 after step 0 (pair 0, 1 = 1, 0), then step 1 adds
     * x33 = 2^-24 (a tie: stays 1), then x32 = 2^-24 (stays 1). Summing the
     * pair first, or exactly, would give 1 + 2^-23. Lanes 1..15 are 0. */
    float x3[34] = {0};
    x3[0] = 1.0f;
    x3[32] = x3[33] = 0x1p-24f;
    CHECK(dot_ones(fn, x3, 34) == 1.0f, "%s: odd-then-even order gave %.9g, want 1", name, dot_ones(fn, x3, 34));
    /* the same with x32 = 1.5 * 2^-24: odd first, 1 + 2^-24 -> 1, then
     * 1 + 1.5 * 2^-24 -> 1 + 2^-23; even first would end at 1 + 2^-22 */
    x3[32] = 3 * 0x1p-25f;
    CHECK(dot_ones(fn, x3, 34) == 1.0f + 0x1p-23f, "%s: odd-then-even order gave %.9g, want 1 + 2^-23", name,
          dot_ones(fn, x3, 34));
    /* the tree: lanes v0 = 1, v4 = v8 = v12 = 2^-24: v0 + v8 = 1 (a tie, to
     * even), v4 + v12 = 2^-23, and their sum 1 + 2^-23 is exact; summing the
     * lanes left to right would give 1 */
    float x4[32] = {0};
    x4[0] = 1.0f;
    x4[16] = x4[8] = x4[24] = 0x1p-24f; /* lanes 8, 4, 12 (element 2l) */
    CHECK(dot_ones(fn, x4, 32) == 1.0f + 0x1p-23f, "%s: the tree gave %.9g, want 1 + 2^-23", name,
          dot_ones(fn, x4, 32));
}

/* 8 tokens x 4 rows (a 3-row tile and a 1-row one) of a dot with w = 1 and
 * k = 4096: 8 tokens' 64 KiB of rounded activations are cut into k-blocks
 * (equal whole 32-steps; 3 blocks of 43 steps). Lane 0 holds 1 after step
 * 0; the pair of step 43 (element 1376, the first of block 2), 2^-24 and
 * 2^-24, adds odd then even to that same accumulator: 1 + 2^-24 is a tie
 * (stays 1), twice. A kernel that summed each block apart and added the
 * block sums (or restarted a block at zero) would give 1 + 2^-23. */
static void check_hand_blocked(matmul_fn fn, const char *name) {
    enum { K = 4096, T = 8, N = 4 };
    float *x = calloc((size_t)T * K, sizeof(float)), y[T * N];
    uint16_t *w = malloc(2 * (size_t)N * K);
    for (int64_t i = 0; i < N * K; i++) w[i] = 0x3f80;
    for (int t = 0; t < T; t++) {
        x[t * K] = 1.0f;
        x[t * K + 1376] = x[t * K + 1377] = 0x1p-24f;
    }
    for (int i = 0; i < T * N; i++) y[i] = -1;
    matmul_args a = {.y = y, .ldy = N, .x = x, .ldx = K, .w = w, .wtype = DTYPE_BF16, .n = N, .k = K};
    fn(&a, 0, N, 0, T);
    int bad = -1;
    for (int i = 0; i < T * N; i++)
        if (y[i] != 1.0f) bad = i;
    free(x);
    free(w);
    CHECK(bad < 0, "%s: k-blocked output %d (token %d, row %d) is %.9g, want 1", name, bad, bad / N, bad % N,
          bad < 0 ? 1.0 : (double)y[bad]);
}

typedef void (*prep_fn)(const float *x, int64_t k, void *xq);
static void round_row(const float *x, int64_t k, void *xq) { matmul_bf16_round_row(x, k, xq); }
static size_t row_bytes(int64_t k) { return (size_t)((k + 31) / 32 * 32) * 2; }

/* Activations prepared beforehand (a->xq in the kernel's format: BF16 rows
 * from matmul_bf16_round_row, or the AVX2 kernel's panels; rows padded to
 * their stride) give the bits of the kernel rounding them itself, and of
 * the portable emulation, over shapes that cross the row blocks (48), the
 * k-blocks and the k tail. For BF16 rows, also their zero padding. */
static void check_prerounded(matmul_fn fn, prep_fn prep, size_t (*bytes_of)(int64_t), bool rows, const char *name) {
    static const int64_t kv[] = {5, 33, 2048, 5632, 7000};
    for (int d = 0; d < 5; d++) {
        int64_t n = 101, k = kv[d], T = d == 2 ? 70 : 21; /* 70: more than a runner work item's 64 */
        matmul_args a = make_args(n, k, T, true, d % 2);
        size_t bytes = sizeof(float) * (size_t)(T * a.ldy), stride = bytes_of(k) + 64;
        float *own = malloc(bytes), *port = portable_then(fn, &a, n, T, 0.25f);
        memcpy(own, a.y, bytes);
        uint8_t *xq = malloc(stride * (size_t)T);
        memset(xq, 0x7f, stride * (size_t)T); /* garbage beyond each row's padding */
        bool pad_zero = true;
        for (int64_t t = 0; t < T; t++) {
            uint16_t *row = (uint16_t *)(xq + t * stride);
            prep(a.x + t * a.ldx, k, row);
            for (int64_t i = k; rows && i < (k + 31) / 32 * 32; i++) pad_zero &= row[i] == 0;
        }
        a.xq = xq;
        a.ldxq = (int64_t)stride;
        fill_y(&a, T, 0.25f);
        fn(&a, 0, n, 0, T);
        bool same_own = !memcmp(own, a.y, bytes), same_port = !memcmp(port, a.y, bytes);
        fill_y(&a, T, 0.25f);
        for (int64_t t = 0; t < T; t += 5) fn(&a, 0, n, t, t + 5 < T ? t + 5 : T); /* xq rows from t on */
        bool same_split = !memcmp(own, a.y, bytes);
        free(xq);
        free(own);
        free(port);
        free_args(&a);
        CHECK(pad_zero, "%s k=%lld: matmul_bf16_round_row left the padding to 32 non-zero", name, (long long)k);
        CHECK(same_own, "%s k=%lld: pre-rounded activations differ from the kernel's own rounding", name,
              (long long)k);
        CHECK(same_port, "%s k=%lld: pre-rounded activations differ from the portable emulation", name,
              (long long)k);
        CHECK(same_split, "%s k=%lld: pre-rounded, 5 tokens a call, differs from one call", name, (long long)k);
    }
}

static const int64_t ks[] = {1, 5, 31, 32, 33, 64, 100, 257, 1029, 2048};
static const int64_t ns[] = {1, 2, 7, 13, 25, 50};
static const int64_t ts[] = {1, 2, 3, 4, 5, 7, 9, 17};

/* fn vs a double-precision dot of the rounded activations (FP32 error
 * bound), and (same_bits) vs the portable emulation to the bit. */
static void check_vs_reference(matmul_fn fn, const char *name, bool same_bits) {
    for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++)
        for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
            for (size_t it = 0; it < sizeof ts / sizeof *ts; it++) {
                int64_t k = ks[ik], n = ns[in], T = ts[it];
                bool bias = (ik + in) % 2, acc = (in + it) % 3 == 0;
                matmul_args a = make_args(n, k, T, bias, acc);
                size_t bytes = sizeof(float) * (size_t)(T * a.ldy);
                float *port = portable_then(fn, &a, n, T, 0.5f);
                double worst = 0;
                for (int64_t t = 0; t < T; t++)
                    for (int64_t j = 0; j < n; j++) {
                        double s = 0;
                        for (int64_t i = 0; i < k; i++)
                            s += (double)bf16_to_f32(f32_to_bf16(a.x[t * a.ldx + i])) *
                                 bf16_to_f32(((const uint16_t *)a.w)[j * k + i]);
                        if (bias) s += ((const float *)a.bias)[j];
                        if (acc) s += 0.5;
                        double e = fabs(a.y[t * a.ldy + j] - s);
                        if (e > worst) worst = e;
                    }
                bool same = !memcmp(port, a.y, bytes);
                free(port);
                free_args(&a);
                CHECK(worst <= 1e-6 * (double)(k + 2), "%s n=%lld k=%lld T=%lld: max error %g", name, (long long)n,
                      (long long)k, (long long)T, worst);
                CHECK(!same_bits || same, "%s n=%lld k=%lld T=%lld: differs from the portable emulation", name,
                      (long long)n, (long long)k, (long long)T);
            }
}

/* All tokens at once vs one at a time vs odd sub-ranges: memcmp-identical. */
static void check_invariance(matmul_fn fn, const char *name) {
    static const int64_t kv[] = {77, 1100, 5632};
    for (int d = 0; d < 3; d++) {
        int64_t n = 53, k = kv[d], T = 19;
        matmul_args a = make_args(n, k, T, true, false);
        size_t bytes = sizeof(float) * (size_t)(T * a.ldy);
        float *whole = malloc(bytes);
        fill_y(&a, T, 0);
        fn(&a, 0, n, 0, T);
        memcpy(whole, a.y, bytes);
        fill_y(&a, T, 0);
        for (int64_t t = 0; t < T; t++) fn(&a, 0, n, t, t + 1);
        bool same_tokens = !memcmp(whole, a.y, bytes);
        fill_y(&a, T, 0);
        const int64_t rcut[] = {0, 1, 4, 11, 12, 30, 53}, tcut[] = {0, 3, 4, 9, 11, 19};
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 5; j++) fn(&a, rcut[i], rcut[i + 1], tcut[j], tcut[j + 1]);
        bool same_ranges = !memcmp(whole, a.y, bytes);
        free(whole);
        free_args(&a);
        CHECK(same_tokens, "%s k=%lld: one token at a time differs from the whole batch", name, (long long)k);
        CHECK(same_ranges, "%s k=%lld: odd sub-ranges differ from the whole batch", name, (long long)k);
    }
}

/* Values at and past the edges of the AVX2 kernel's range ([2^-50, 2^50)
 * in magnitude, and zeros), where FMAs and vdpbf16ps differ unless the
 * emulation takes over: in row 4, whose other weights are zero, so that
 * the edge decides its outputs (the other rows are random and share its
 * tiles). Four placements per value v:
 *   0  weight 37 = v, every token's activation 37 = 0.5: a subnormal
 *      weight reads as 0, v = 2^-126 makes a product that flushes to 0;
 *   1  the same with v as token 2's activation 37 and 0.5 as the weight;
 *   2  weights 1 and 33 = v (lane 0, steps 0 and 1), activations 1 and -2:
 *      v = 2^127.98 overflows the second product to -inf, where an FMA
 *      (v - 2v) stays finite;
 *   3  the same with v and -v as token 2's activations, weights 1 and 2.
 * Each output of every token, in one call and one token a call, has the
 * portable path's bits. */
static void check_edges(matmul_fn fn, const char *name) {
    static const uint16_t edge[] = {
        0x8000,                 /* -0 */
        0x0001, 0x807f,         /* subnormals: read as +0 */
        0x2680, 0xa680,         /* 2^-50: in range */
        0x267f,                 /* just below 2^-50 */
        0x0080, 0x0d00,         /* 2^-126, 2^-101 */
        0x587f, 0xd87f,         /* just below 2^50 */
        0x5880, 0x7f7f, 0xff7f, /* 2^50; the largest finite, both signs */
        0x7f80, 0xff80, 0x7fc0, /* inf, -inf, NaN */
    };
    const int ne = (int)(sizeof edge / sizeof *edge);
    int bad = 0;
    for (int c = 0; c < 4 * ne; c++) {
        const int64_t n = 9, k = 70, T = 6, row = 4;
        const uint16_t v = edge[c / 4];
        const int mode = c % 4;
        matmul_args a = make_args(n, k, T, false, false);
        uint16_t *w = (uint16_t *)a.w + row * k;
        float *x = (float *)a.x;
        memset(w, 0, 2 * (size_t)k);
        if (mode == 0 || mode == 1) {
            w[37] = mode == 0 ? v : f32_to_bf16(0.5f);
            for (int64_t t = 0; t < T; t++) x[t * a.ldx + 37] = 0.5f;
            if (mode == 1) x[2 * a.ldx + 37] = bf16_to_f32(v);
        } else {
            w[1] = mode == 2 ? v : f32_to_bf16(1.0f);
            w[33] = mode == 2 ? v : f32_to_bf16(2.0f);
            for (int64_t t = 0; t < T; t++) {
                x[t * a.ldx + 1] = 1.0f;
                x[t * a.ldx + 33] = -2.0f;
            }
            if (mode == 3) {
                x[2 * a.ldx + 1] = bf16_to_f32(v);
                x[2 * a.ldx + 33] = -bf16_to_f32(v);
            }
        }
        size_t bytes = sizeof(float) * (size_t)(T * a.ldy);
        float *port = portable_then(fn, &a, n, T, 0);
        bool same = !memcmp(port, a.y, bytes);
        fill_y(&a, T, 0);
        for (int64_t t = 0; t < T; t++) fn(&a, 0, n, t, t + 1);
        same &= !memcmp(port, a.y, bytes);
        if (!same && !bad++)
            fprintf(stderr, "%s: edge value 0x%04x, placement %d, differs from the portable path\n", name, v, mode);
        free(port);
        free_args(&a);
    }
    CHECK(!bad, "%s: %d of %d edge cases differ from the portable path (the first on stderr)", name, bad, 4 * ne);
}

TEST(test_bf16_hand_portable) { check_hand(matmul_bf16_range_portable, "portable"); }

TEST(test_bf16_hand_avx512) {
    if (!matmul_bf16_cpu_has_dot()) SKIP("no AVX512-BF16 on this CPU");
    check_hand(matmul_bf16_range_avx512, "avx512bf16");
}

TEST(test_bf16_hand_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_hand(matmul_bf16_range_avx2, "avx2");
}

TEST(test_bf16_hand_blocked_portable) { check_hand_blocked(matmul_bf16_range_portable, "portable"); }

TEST(test_bf16_hand_blocked_avx512) {
    if (!matmul_bf16_cpu_has_dot()) SKIP("no AVX512-BF16 on this CPU");
    check_hand_blocked(matmul_bf16_range_avx512, "avx512bf16");
}

TEST(test_bf16_hand_blocked_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_hand_blocked(matmul_bf16_range_avx2, "avx2");
}

TEST(test_bf16_prerounded_portable) {
    check_prerounded(matmul_bf16_range_portable, round_row, row_bytes, true, "portable");
}

TEST(test_bf16_prerounded_avx512) {
    if (!matmul_bf16_cpu_has_dot()) SKIP("no AVX512-BF16 on this CPU");
    check_prerounded(matmul_bf16_range_avx512, round_row, row_bytes, true, "avx512bf16");
}

TEST(test_bf16_prerounded_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_prerounded(matmul_bf16_range_avx2, matmul_bf16_prep_act_avx2, matmul_bf16_act_bytes_avx2, false, "avx2");
}

/* The runner's pair: matmul_bf16_round_act's rows (at matmul_bf16_act_bytes)
 * are what the dispatching matmul_bf16_range takes on this CPU. */
TEST(test_bf16_prerounded_dispatch) {
    check_prerounded(matmul_bf16_range, matmul_bf16_round_act, matmul_bf16_act_bytes, false, "dispatch");
}

TEST(test_bf16_portable_vs_double) { check_vs_reference(matmul_bf16_range_portable, "portable", false); }

TEST(test_bf16_avx512_vs_portable) {
    if (!matmul_bf16_cpu_has_dot()) SKIP("no AVX512-BF16 on this CPU");
    check_vs_reference(matmul_bf16_range_avx512, "avx512bf16", true);
}

TEST(test_bf16_avx2_vs_portable) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_vs_reference(matmul_bf16_range_avx2, "avx2", true);
}

TEST(test_bf16_edges_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_edges(matmul_bf16_range_avx2, "avx2");
}

TEST(test_bf16_invariance_portable) { check_invariance(matmul_bf16_range_portable, "portable"); }

TEST(test_bf16_invariance_avx512) {
    if (!matmul_bf16_cpu_has_dot()) SKIP("no AVX512-BF16 on this CPU");
    check_invariance(matmul_bf16_range_avx512, "avx512bf16");
}

TEST(test_bf16_invariance_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_invariance(matmul_bf16_range_avx2, "avx2");
}

int main(void) {
    RUN(test_bf16_hand_portable);
    RUN(test_bf16_hand_avx512);
    RUN(test_bf16_hand_avx2);
    RUN(test_bf16_hand_blocked_portable);
    RUN(test_bf16_hand_blocked_avx512);
    RUN(test_bf16_hand_blocked_avx2);
    RUN(test_bf16_prerounded_portable);
    RUN(test_bf16_prerounded_avx512);
    RUN(test_bf16_prerounded_avx2);
    RUN(test_bf16_prerounded_dispatch);
    RUN(test_bf16_portable_vs_double);
    RUN(test_bf16_avx512_vs_portable);
    RUN(test_bf16_avx2_vs_portable);
    RUN(test_bf16_edges_avx2);
    RUN(test_bf16_invariance_portable);
    RUN(test_bf16_invariance_avx512);
    RUN(test_bf16_invariance_avx2);
    return harness_done();
}
