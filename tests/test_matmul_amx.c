/*
 * test_matmul_amx.c - the AMX-BF16 matmul (BF16 / F16 weights) against a
 * float64 reference on odd shapes, and its batch invariance: a token's
 * outputs bit-identical alone, in batches of every size 1..40, under odd row
 * and token splits, with packed activations (xq) or without.
 *
 * Tolerance, from the error bound: every product of parts is exact (see
 * matmul_amx.c), so the result is three float sums of k (BF16) or 2k (F16)
 * exact terms each, added together, plus the bias and the accumulate add:
 * fewer roundings on every term's path than one sequential sum of m = 3k
 * (6k) terms, so |sum - exact| <= m u / (1 - m u) * sum|terms| (u = 2^-24)
 * bounds it, and
 * sum|terms| <= 3 sum_i |w_i x_i| (the parts of a value add up to at most
 * its magnitude times 1 + 2^-7 + ...), so tol = 3 m u (sum|w x|) + 2 u |y|.
 * A wrong tile, a lost part (hi alone errs by ~2^-9 |w x|) or a wrong k
 * step is orders of magnitude above it for the shapes here.
 *
 * Without AMX-BF16 (or without the OS's grant of the tile state) the kernel
 * tests report themselves skipped; the dispatch test runs everywhere, and
 * again with AMX forced off or onto F16 where the CPU has it (variants).
 */
/* checks: 5 */
/* variant: VLLM_AMX=0 needs amx-bf16 */
/* variant: VLLM_AMX=f16 needs amx-bf16 */
/* variant: VLLM_KERNELS=avx2 needs amx-bf16 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "harness.h"
#include "kernels/kernels.h"

static uint64_t rng_state = 0x243f6a8885a308d3u;

static float frand(void) { /* uniform in [-1, 1), full 24-bit mantissas */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static void *rand_weights(dtype t, int64_t n) {
    uint16_t *w = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        float f = frand();
        w[i] = t == DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
        if (t == DTYPE_F16 && i % 97 == 5) w[i] = (uint16_t)((i * 7919 & 0x3ff) | (i & 1) << 15); /* subnormal */
        if (i % 89 == 7) w[i] = (uint16_t)((i & 1) << 15); /* +-0 */
    }
    return w;
}

static matmul_args make_args(dtype wt, int64_t n, int64_t k, int64_t T, bool bias, bool acc) {
    matmul_args a = {.ldy = n + 3, .ldx = k + 2, .wtype = wt, .btype = DTYPE_F32, .n = n, .k = k,
                     .accumulate = acc};
    float *x = malloc(sizeof(float) * (size_t)(T * a.ldx));
    /* a wide spread of magnitudes so every part of the split matters */
    for (int64_t i = 0; i < T * a.ldx; i++) x[i] = frand() * ldexpf(1.0f, (int)(i % 7) - 3);
    a.x = x;
    a.w = rand_weights(wt, n * k);
    if (bias) {
        float *b = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) b[i] = frand();
        a.bias = b;
    }
    a.y = malloc(sizeof(float) * (size_t)(T * a.ldy));
    return a;
}

static void free_args(matmul_args *a) {
    free((void *)a->x);
    free((void *)a->w);
    free((void *)a->bias);
    free(a->y);
    free((void *)a->xq);
}

static void fill_y(const matmul_args *a, int64_t T, float v) {
    for (int64_t i = 0; i < T * a->ldy; i++) a->y[i] = v;
}

/* Packs all T tokens of a into a->xq (blocks of 16 from token 0). */
static void pack_all(matmul_args *a, int64_t T) {
    int64_t ld = (int64_t)matmul_amx_act_bytes(a->k);
    void *xq = aligned_alloc(64, (size_t)((T + 15) / 16 * 16 * ld));
    memset(xq, 0xAB, (size_t)((T + 15) / 16 * 16 * ld)); /* garbage in unused columns */
    matmul_amx_pack_act(a->x, a->ldx, a->k, 0, T, xq, ld);
    a->xq = xq, a->ldxq = ld;
}

static const int64_t ks[] = {1, 2, 5, 31, 32, 33, 64, 100, 257, 1029};
static const int64_t ns[] = {1, 7, 16, 17, 25, 50};
static const int64_t ts[] = {1, 2, 3, 15, 16, 17, 33, 40};

static void check_vs_reference(dtype wt) {
    for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++)
        for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
            for (size_t it = 0; it < sizeof ts / sizeof *ts; it++) {
                int64_t k = ks[ik], n = ns[in], T = ts[it];
                bool bias = (ik + in) % 2, acc = (in + it) % 3 == 0, packed = (ik + it) % 2;
                matmul_args a = make_args(wt, n, k, T, bias, acc);
                if (packed) pack_all(&a, T);
                fill_y(&a, T, 0.5f);
                matmul_range_amx(&a, 0, n, 0, T);
                const double u = ldexp(1.0, -24), m = (wt == DTYPE_F16 ? 6.0 : 3.0) * (double)k;
                double worst = 0;
                for (int64_t t = 0; t < T; t++)
                    for (int64_t r = 0; r < n; r++) {
                        double s = 0, sa = 0;
                        for (int64_t i = 0; i < k; i++) {
                            double p = (double)kernels_weight_at(a.w, wt, r * k + i) * a.x[t * a.ldx + i];
                            s += p, sa += fabs(p);
                        }
                        if (a.bias) s += ((const float *)a.bias)[r];
                        if (acc) s += 0.5;
                        double tol = 3 * m * u / (1 - m * u) * sa + 4 * u * (fabs(s) + 1);
                        double e = fabs(a.y[t * a.ldy + r] - s) / tol;
                        if (e > worst) worst = e;
                    }
                free_args(&a);
                CHECK(worst <= 1.0, "%s n=%lld k=%lld T=%lld packed=%d: error %.3g x the bound", dtype_name(wt),
                      (long long)n, (long long)k, (long long)T, packed, worst);
            }
}

#define NEEDS_AMX()                                                                              \
    if (!matmul_amx_available()) SKIP("no AMX-BF16 on this CPU (or the OS did not grant the tile state)")

TEST(test_matmul_amx_bf16_vs_reference) {
    NEEDS_AMX();
    check_vs_reference(DTYPE_BF16);
}
TEST(test_matmul_amx_f16_vs_reference) {
    NEEDS_AMX();
    check_vs_reference(DTYPE_F16);
}

/* Packing neighbouring token ranges separately gives the same bytes as one
 * range (threads pack parts of one block), and a range writes no byte of
 * the tokens outside it (blocks of 4 tokens: token t owns dword columns
 * 3(t%4) .. 3(t%4)+2 of every 64-byte row of its block). */
TEST(test_matmul_amx_pack_ranges) {
    NEEDS_AMX();
    int64_t k = 70, T = 40, ld = (int64_t)matmul_amx_act_bytes(k);
    matmul_args a = make_args(DTYPE_BF16, 1, k, T, false, false);
    size_t bytes = (size_t)(T * ld);
    uint8_t *one = aligned_alloc(64, bytes), *split = aligned_alloc(64, bytes), *part = aligned_alloc(64, bytes);
    memset(one, 0, bytes), memset(split, 0, bytes), memset(part, 0, bytes);
    matmul_amx_pack_act(a.x, a.ldx, k, 0, T, one, ld);
    const int64_t cut[] = {0, 3, 16, 21, 22, 40};
    for (int i = 0; i < 5; i++) matmul_amx_pack_act(a.x, a.ldx, k, cut[i], cut[i + 1], split, ld);
    bool same = !memcmp(one, split, bytes);
    matmul_amx_pack_act(a.x, a.ldx, k, 5, 22, part, ld);
    bool inside = true, outside = true;
    for (int64_t t = 0; t < T; t++) {
        const uint8_t *blk = part + t / 4 * 4 * ld, *ref = one + t / 4 * 4 * ld;
        for (int64_t row = 0; row < 4 * ld / 64; row++)
            for (int c = 0; c < 12; c++) {
                const uint8_t *p = blk + row * 64 + 4 * (3 * (t % 4)) + c;
                if (t >= 5 && t < 22) inside &= *p == ref[p - blk];
                else outside &= *p == 0;
            }
    }
    free(one), free(split), free(part);
    free_args(&a);
    CHECK(same, "packing in pieces differs from packing at once");
    CHECK(inside, "packing tokens 5..21 alone differs from packing them with the rest");
    CHECK(outside, "packing tokens 5..21 wrote bytes of other tokens");
}

/* The whole batch vs each token alone vs every batch size vs odd splits, with
 * and without packed activations (and xq offset by 16 tokens): memcmp-equal. */
static void check_invariance(dtype wt, int64_t n, int64_t k) {
    const int64_t T = 40;
    matmul_args a = make_args(wt, n, k, T, true, false);
    size_t bytes = sizeof(float) * (size_t)(T * a.ldy);
    float *whole = malloc(bytes);
    fill_y(&a, T, 0);
    matmul_range_amx(&a, 0, n, 0, T);
    memcpy(whole, a.y, bytes);
    bool ok_alone = true, ok_sizes = true, ok_split = true, ok_packed = true, ok_offset = true;

    fill_y(&a, T, 0);
    for (int64_t t = 0; t < T; t++) matmul_range_amx(&a, 0, n, t, t + 1);
    ok_alone = !memcmp(whole, a.y, bytes);

    for (int64_t size = 1; size <= T; size++) { /* tokens 0..size-1 as a batch of their own */
        fill_y(&a, T, 0);
        matmul_range_amx(&a, 0, n, 0, size);
        ok_sizes &= !memcmp(whole, a.y, sizeof(float) * (size_t)(size * a.ldy));
    }

    const int64_t rcut[] = {0, 1, 5, 16, 17, 40, n}, tcut[] = {0, 3, 4, 19, 20, 36, T};
    fill_y(&a, T, 0);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            if (rcut[i] < rcut[i + 1]) matmul_range_amx(&a, rcut[i], rcut[i + 1], tcut[j], tcut[j + 1]);
    ok_split = !memcmp(whole, a.y, bytes);

    pack_all(&a, T);
    fill_y(&a, T, 0);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            if (rcut[i] < rcut[i + 1]) matmul_range_amx(&a, rcut[i], rcut[i + 1], tcut[j], tcut[j + 1]);
    ok_packed = !memcmp(whole, a.y, bytes);
    fill_y(&a, T, 0);
    matmul_range_amx(&a, 0, n, 0, T);
    ok_packed &= !memcmp(whole, a.y, bytes);

    /* the runner's view of a later token chunk: x, y, xq all offset by 16 tokens */
    matmul_args b = a;
    b.x += 16 * a.ldx, b.y += 16 * a.ldy, b.xq = (const uint8_t *)a.xq + 16 * a.ldxq;
    fill_y(&a, T, 0);
    matmul_range_amx(&b, 0, n, 0, T - 16);
    ok_offset = !memcmp(whole + 16 * a.ldy, a.y + 16 * a.ldy, bytes - sizeof(float) * (size_t)(16 * a.ldy));

    free(whole);
    free_args(&a);
    CHECK(ok_alone, "%s k=%lld: one token at a time differs from the whole batch", dtype_name(wt), (long long)k);
    CHECK(ok_sizes, "%s k=%lld: some batch size 1..40 differs", dtype_name(wt), (long long)k);
    CHECK(ok_split, "%s k=%lld: odd row/token splits differ", dtype_name(wt), (long long)k);
    CHECK(ok_packed, "%s k=%lld: packed activations differ", dtype_name(wt), (long long)k);
    CHECK(ok_offset, "%s k=%lld: xq offset by 16 tokens differs", dtype_name(wt), (long long)k);
}

TEST(test_matmul_amx_batch_invariance) {
    NEEDS_AMX();
    check_invariance(DTYPE_BF16, 53, 77);
    check_invariance(DTYPE_BF16, 150, 600);
    check_invariance(DTYPE_F16, 53, 77);
    check_invariance(DTYPE_F16, 150, 600);
}

/* The dispatch: BF16 weights go to the AMX kernel exactly when
 * matmul_use_amx() (VLLM_AMX=0 and VLLM_KERNELS below avx512 turn it off),
 * F16 ones only with VLLM_AMX=f16 too; F32 and quantized never. */
TEST(test_matmul_amx_dispatch) {
    const char *env = getenv("VLLM_AMX"), *isa = getenv("VLLM_KERNELS");
    bool off = (env && !strcmp(env, "0")) || (isa && strcmp(isa, "avx512"));
    CHECK(!off || !matmul_use_amx(), "VLLM_AMX=0 / VLLM_KERNELS=%s left AMX on", isa ? isa : "");
    CHECK(matmul_use_amx() == (!off && matmul_amx_available() && kernels_isa_get() >= KERNELS_ISA_AVX512));
    bool amx = matmul_use_amx(), f16 = amx && env && !strcmp(env, "f16");
    CHECK(matmul_amx_takes(DTYPE_BF16) == amx && matmul_amx_takes(DTYPE_F16) == f16);
    CHECK((matmul_kernel(DTYPE_BF16) == matmul_range_amx) == amx);
    CHECK((matmul_kernel(DTYPE_F16) == matmul_range_amx) == f16, "F16 on AMX only with VLLM_AMX=f16");
    CHECK(matmul_kernel(DTYPE_F32) != matmul_range_amx);
    CHECK(matmul_kernel(DTYPE_Q8_0) != matmul_range_amx);
}

int main(void) {
    RUN(test_matmul_amx_bf16_vs_reference);
    RUN(test_matmul_amx_f16_vs_reference);
    RUN(test_matmul_amx_pack_ranges);
    RUN(test_matmul_amx_batch_invariance);
    RUN(test_matmul_amx_dispatch);
    return harness_done();
}
