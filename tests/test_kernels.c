/*
 * test_kernels.c - each fast kernel against its naive reference on odd shapes
 * (k not a multiple of 8, rows and tokens not multiples of the tiles), and the
 * batch-invariance property: a matmul output is bit-identical whatever range
 * of rows and tokens it is computed in. Each instruction-set path is called
 * directly where the CPU has it (a skip where it does not); the dispatched
 * kernels (rmsnorm, "dispatch" swiglu and geglu) run once per level through the
 * variants below.
 */
/* checks: 20 */
/* variant: VLLM_KERNELS=avx2 needs avx2 */
/* variant: VLLM_KERNELS=portable */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "harness.h"

/* The float weight types; quantized types have their own tests (test_quant.c). */
enum { NUM_FLOAT_DTYPES = DTYPE_BF16 + 1 };
#include "kernels/kernels.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* Random weights of n elements in dtype t (caller frees). */
static void *rand_weights(dtype t, int64_t n) {
    void *w = malloc((size_t)n * dtype_size(t));
    for (int64_t i = 0; i < n; i++) {
        float f = frand();
        if (t == DTYPE_F32) ((float *)w)[i] = f;
        else if (t == DTYPE_BF16) ((uint16_t *)w)[i] = f32_to_bf16(f);
        else ((uint16_t *)w)[i] = f32_to_f16(f);
    }
    return w;
}

typedef void (*matmul_fn)(const matmul_args *, int64_t, int64_t, int64_t, int64_t);

static const int64_t ks[] = {1, 5, 8, 13, 16, 33, 64, 100, 257, 1029};
static const int64_t ns[] = {1, 2, 7, 13, 25, 50};
static const int64_t ts[] = {1, 2, 3, 4, 5, 7, 9, 18}; /* 18: the AVX-512 16-token pass + 2 */

/* Fills args for y (T, n + 3) = x (T, k + 2) W (n, k)^T with padded strides. */
static matmul_args make_args(dtype wt, int64_t n, int64_t k, int64_t T, bool bias, bool acc) {
    matmul_args a = {.ldy = n + 3, .ldx = k + 2, .wtype = wt, .btype = DTYPE_BF16, .n = n, .k = k,
                     .accumulate = acc};
    float *x = malloc(sizeof(float) * (size_t)(T * a.ldx));
    for (int64_t i = 0; i < T * a.ldx; i++) x[i] = frand();
    a.x = x;
    a.w = rand_weights(wt, n * k);
    a.bias = bias ? rand_weights(DTYPE_BF16, n) : NULL;
    a.y = malloc(sizeof(float) * (size_t)(T * a.ldy));
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

/* fast vs naive: |fast - naive| <= 1e-6 * k * max|w x| scale, for every shape. */
static void check_matmul_vs_naive(matmul_fn fast, const char *name) {
    for (int d = 0; d < NUM_FLOAT_DTYPES; d++)
        for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++)
            for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
                for (size_t it = 0; it < sizeof ts / sizeof *ts; it++) {
                    int64_t k = ks[ik], n = ns[in], T = ts[it];
                    bool bias = (ik + in) % 2, acc = (in + it) % 3 == 0;
                    matmul_args a = make_args((dtype)d, n, k, T, bias, acc);
                    float *ref = malloc(sizeof(float) * (size_t)(T * a.ldy));
                    fill_y(&a, T, 0.5f);
                    matmul_range_naive(&a, 0, n, 0, T);
                    memcpy(ref, a.y, sizeof(float) * (size_t)(T * a.ldy));
                    fill_y(&a, T, 0.5f);
                    fast(&a, 0, n, 0, T);
                    double worst = 0;
                    for (int64_t i = 0; i < T * a.ldy; i++) {
                        double e = fabs((double)a.y[i] - ref[i]);
                        if (e > worst) worst = e;
                    }
                    free(ref);
                    free_args(&a);
                    CHECK(worst <= 1e-6 * (double)(k + 2), "%s %s n=%lld k=%lld T=%lld: max error %g", name,
                          dtype_name((dtype)d), (long long)n, (long long)k, (long long)T, worst);
                }
}

TEST(test_matmul_portable_vs_naive) { check_matmul_vs_naive(matmul_range_portable, "portable"); }

TEST(test_matmul_avx2_vs_naive) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_matmul_vs_naive(matmul_range_avx2, "avx2");
}

TEST(test_matmul_avx512_vs_naive) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_matmul_vs_naive(matmul_range_avx512, "avx512");
}

/* All tokens and rows at once vs one token / one row at a time vs odd
 * sub-ranges: memcmp-identical. */
static void check_matmul_invariance(matmul_fn fn, const char *name) {
    /* k 16433: the tiles' x rows pass BLOCK_X_BYTES (matmul.c), so the
     * cache-blocked path with partial sums between k blocks runs too; k
     * 2048, a model's shape, with 70 tokens (more than a runner work
     * item's 64) */
    static const int64_t kv[] = {77, 1100, 16433, 2048};
    for (int d = 0; d < 4 * NUM_FLOAT_DTYPES; d++) {
        /* T 21: tokens 0-15 (and 4-19 below) take the AVX-512 16-token pass */
        int64_t n = 53, k = kv[d / NUM_FLOAT_DTYPES], T = k == 2048 ? 70 : 21;
        matmul_args a = make_args((dtype)(d % NUM_FLOAT_DTYPES), n, k, T, true, false);
        size_t bytes = sizeof(float) * (size_t)(T * a.ldy);
        float *whole = malloc(bytes);
        fill_y(&a, T, 0);
        fn(&a, 0, n, 0, T);
        memcpy(whole, a.y, bytes);

        fill_y(&a, T, 0);
        for (int64_t t = 0; t < T; t++) fn(&a, 0, n, t, t + 1);
        bool same_tokens = !memcmp(whole, a.y, bytes);

        fill_y(&a, T, 0);
        /* token calls of 3, 1, 16 and the rest; at 70 tokens also 5, 6, 7
         * and 8 (AVX2's few-token tiles: 2 x 5, 2 x 6, prefetching) */
        const int64_t rcut[] = {0, 1, 4, 11, 12, 30, 53}, tcut21[] = {0, 3, 4, 20, T},
                      tcut70[] = {0, 3, 4, 20, 25, 31, 38, 46, T};
        const int64_t *tcut = T == 70 ? tcut70 : tcut21;
        const int ncut = T == 70 ? 8 : 4;
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < ncut; j++) fn(&a, rcut[i], rcut[i + 1], tcut[j], tcut[j + 1]);
        bool same_ranges = !memcmp(whole, a.y, bytes);
        free(whole);
        free_args(&a);
        CHECK(same_tokens, "%s %s k=%lld: one token at a time differs from the whole batch", name,
              dtype_name((dtype)(d % NUM_FLOAT_DTYPES)), (long long)k);
        CHECK(same_ranges, "%s %s k=%lld: odd sub-ranges differ from the whole batch", name,
              dtype_name((dtype)(d % NUM_FLOAT_DTYPES)), (long long)k);
    }
}

TEST(test_matmul_batch_invariance) { check_matmul_invariance(matmul_range_portable, "portable"); }

TEST(test_matmul_batch_invariance_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_matmul_invariance(matmul_range_avx2, "avx2");
}

TEST(test_matmul_batch_invariance_avx512) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_matmul_invariance(matmul_range_avx512, "avx512");
}

TEST(test_rmsnorm_vs_naive) {
    const int64_t sizes[] = {1, 7, 8, 9, 64, 100, 2051};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int d = 0; d < NUM_FLOAT_DTYPES; d++) {
            int64_t n = sizes[i];
            float *x = malloc(sizeof(float) * (size_t)n), *a = malloc(sizeof(float) * (size_t)n),
                  *b = malloc(sizeof(float) * (size_t)n);
            for (int64_t j = 0; j < n; j++) x[j] = 3 * frand();
            void *w = rand_weights((dtype)d, n);
            for (int off = 0; off < 2; off++) { /* Llama's w, Gemma's (1 + w) */
                norm_rms(a, x, w, (dtype)d, n, 1e-5f, (float)off);
                norm_rms_naive(b, x, w, (dtype)d, n, 1e-5f, (float)off);
                double worst = 0;
                for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs((double)a[j] - b[j]));
                float *y = malloc(sizeof(float) * (size_t)n);
                memcpy(y, x, sizeof(float) * (size_t)n);
                norm_rms(y, y, w, (dtype)d, n, 1e-5f, (float)off); /* in place */
                bool in_place = !memcmp(y, a, sizeof(float) * (size_t)n);
                free(y);
                CHECK(worst < 1e-5, "n=%lld offset %d: max error %g", (long long)n, off, worst);
                CHECK(in_place, "n=%lld offset %d: in-place result differs", (long long)n, off);
            }
            free(x), free(a), free(b), free(w);
        }
}

/* RoPE against the rotation written directly in double: for each pair
 * (x_i, x_{i+half}) rotate by angle pos * theta^(-2i/d). */
TEST(test_rope_rotate_half) {
    const int32_t hd = 12, heads = 3, half = hd / 2;
    float inv_freq[6], cs[6], sn[6], x[36], y[36];
    for (int i = 0; i < half; i++) inv_freq[i] = (float)pow(10000.0, -2.0 * i / hd);
    const int32_t positions[] = {0, 1, 17, 1000, 40000};
    for (int p = 0; p < 5; p++) {
        for (int i = 0; i < hd * heads; i++) x[i] = y[i] = frand();
        rope_cos_sin(cs, sn, inv_freq, half, positions[p]);
        rope_apply(y, heads, hd, cs, sn);
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                double ang = (double)(float)((float)positions[p] * inv_freq[i]);
                double a = x[h * hd + i], b = x[h * hd + i + half];
                double ra = a * cos(ang) - b * sin(ang), rb = b * cos(ang) + a * sin(ang);
                CHECK(fabs(ra - y[h * hd + i]) < 1e-5 && fabs(rb - y[h * hd + i + half]) < 1e-5,
                      "pos %d head %d pair %d: (%g, %g) vs (%g, %g)", positions[p], h, i, y[h * hd + i],
                      y[h * hd + i + half], ra, rb);
            }
    }
}

/* Each path against silu from the equation in double, on gates from -100 to
 * 100 (exp's clamps) and lengths that leave vector tails. */
static void check_swiglu(void (*fn)(float *, const float *, int64_t), const char *name) {
    enum { N = 77 };
    float g[N], u[N], ref[N];
    for (int len = 1; len <= N; len += 19) {
        for (int i = 0; i < N; i++) {
            g[i] = i % 9 == 8 ? (i % 2 ? 100.0f : -100.0f) * frand() : 8 * frand();
            u[i] = frand();
            ref[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        }
        float keep = g[len - 1 + (len < N)];
        fn(g, u, len);
        for (int i = 0; i < len; i++)
            CHECK(fabs(g[i] - ref[i]) < 1e-6 * (1 + fabs(ref[i])), "%s n=%d [%d]: %g vs %g", name, len, i, g[i], ref[i]);
        if (len < N) CHECK(g[len] == keep, "%s n=%d wrote past the end", name, len);
    }
}

/* Each GeGLU path against the tanh formula in double (act_geglu_naive), on
 * gates from -100 to 100 (the exp clamps of the vector paths; gelu(-100) is
 * a denormal-size 0) and lengths that leave vector tails. */
static void check_geglu(void (*fn)(float *, const float *, int64_t), const char *name) {
    enum { N = 77 };
    float g[N], u[N], ref[N];
    for (int len = 1; len <= N; len += 19) {
        for (int i = 0; i < N; i++) {
            g[i] = i % 9 == 8 ? (i % 2 ? 100.0f : -100.0f) * frand() : 6 * frand();
            u[i] = frand();
            ref[i] = g[i];
        }
        act_geglu_naive(ref, u, N);
        float keep = g[len - 1 + (len < N)];
        fn(g, u, len);
        for (int i = 0; i < len; i++)
            CHECK(fabs(g[i] - ref[i]) < 1e-6 * (1 + fabs(ref[i])), "%s n=%d [%d]: %g vs %g", name, len, i, g[i], ref[i]);
        if (len < N) CHECK(g[len] == keep, "%s n=%d wrote past the end", name, len);
    }
    /* torch.nn.functional.gelu(x, approximate="tanh") in double: 0.8411919906082768 and
     * -0.0036373920817729943 for x = 1 and -3; in float32 0.8411920070648193 and
     * -0.0036374330520629883, which the portable path (torch's formula) gives to the bit */
    float x[2] = {1.0f, -3.0f}, one[2] = {1.0f, 1.0f};
    fn(x, one, 2);
    CHECK(fabs(x[0] - 0.8411919906082768) < 1e-7 && fabs(x[1] + 0.0036373920817729943) < 1e-7, "%s: %.9g %.9g",
          name, x[0], x[1]);
    if (fn == act_geglu_portable)
        CHECK(x[0] == 0.8411920070648193f && x[1] == -0.0036374330520629883f, "portable: %.9g %.9g vs torch's float32",
              x[0], x[1]);
}

TEST(test_geglu) {
    check_geglu(act_geglu, "dispatch");
    check_geglu(act_geglu_portable, "portable");
}

TEST(test_geglu_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_geglu(act_geglu_avx2, "avx2");
}

TEST(test_geglu_avx512) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_geglu(act_geglu_avx512, "avx512");
}

TEST(test_swiglu) {
    check_swiglu(act_swiglu, "dispatch");
    check_swiglu(act_swiglu_portable, "portable");
}

TEST(test_swiglu_avx2) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_swiglu(act_swiglu_avx2, "avx2");
}

TEST(test_swiglu_avx512) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_swiglu(act_swiglu_avx512, "avx512");
}

/* Paged attention against the contiguous two-pass reference: K/V rows of a
 * sequence stored through attention_store_kv into blocks scattered in a
 * shuffled pool, the same rows kept contiguous for the reference. */
typedef void (*attention_fn)(const attention_args *, float *, const float *, int32_t, int32_t, const int32_t *,
                             int32_t, float *);

/* fn vs naive; if same_bits is given, fn's outputs must also be bit-identical
 * to it (the AVX-512 path repeats the AVX2 one's float operations). */
static void check_attention_vs_naive(attention_fn fn, const char *name, attention_fn same_bits) {
    const int32_t block_sizes[] = {1, 3, 8, 16, 32}, head_dims[] = {8, 12, 20, 24, 64, 80}, groups[] = {1, 2, 3, 4, 8};
    for (int ib = 0; ib < 5; ib++)
        for (int ih = 0; ih < 6; ih++)
            for (int ig = 0; ig < 5; ig++) {
                int32_t bs = block_sizes[ib], hd = head_dims[ih], group = groups[ig], kv_heads = 2, n_max = 41;
                int32_t nblocks = (n_max + bs - 1) / bs + 3;
                size_t pool = (size_t)nblocks * kv_heads * bs * hd;
                float *kc = malloc(sizeof(float) * pool), *vc = malloc(sizeof(float) * pool);
                for (size_t i = 0; i < pool; i++) kc[i] = NAN, vc[i] = NAN; /* unused slots must not leak in */
                int32_t *table = malloc(sizeof(int32_t) * (size_t)nblocks);
                for (int32_t i = 0; i < nblocks; i++) table[i] = i;
                for (int32_t i = nblocks - 1; i > 0; i--) { /* shuffle */
                    int32_t j = (int32_t)((frand() + 1) * 0.5 * (i + 1)) % (i + 1), t = table[i];
                    table[i] = table[j], table[j] = t;
                }
                attention_args a = {.k_cache = kc, .v_cache = vc, .kv_heads = kv_heads, .head_dim = hd,
                                    .block_size = bs, .scale = 1.0f / sqrtf((float)hd)};
                /* rows (n_max, kv_heads, hd) */
                float *kk = malloc(sizeof(float) * (size_t)(n_max * kv_heads * hd)),
                      *vv = malloc(sizeof(float) * (size_t)(n_max * kv_heads * hd));
                for (int i = 0; i < n_max * kv_heads * hd; i++) kk[i] = 2 * frand(), vv[i] = frand();
                for (int32_t p = 0; p < n_max; p++)
                    attention_store_kv(&a, kc, vc, (int64_t)table[p / bs] * bs + p % bs, kk + p * kv_heads * hd,
                                       vv + p * kv_heads * hd);
                const int32_t kvh = 1;
                float *kh = malloc(sizeof(float) * (size_t)(n_max * hd)), *vh = malloc(sizeof(float) * (size_t)(n_max * hd));
                for (int32_t p = 0; p < n_max; p++) {
                    memcpy(kh + p * hd, kk + (p * kv_heads + kvh) * hd, sizeof(float) * (size_t)hd);
                    memcpy(vh + p * hd, vv + (p * kv_heads + kvh) * hd, sizeof(float) * (size_t)hd);
                }
                float *q = malloc(sizeof(float) * (size_t)(group * hd)), *out = malloc(sizeof(float) * (size_t)(group * hd));
                float *ref = malloc(sizeof(float) * (size_t)hd), *out2 = malloc(sizeof(float) * (size_t)(group * hd));
                bool same = true;
                float *scratch = malloc(sizeof(float) * (size_t)attention_scratch_floats(group, bs, hd));
                for (int i = 0; i < group * hd; i++) q[i] = frand();
                double worst = 0;
                /* full context, then sliding windows of 1, 5 and 2 blocks + 1 (the
                 * reference sees only the window's rows: a windowed token must not
                 * read the blocks before its window, so their table entries are
                 * made -1 and their slots NaN) */
                const int32_t windows[] = {0, 1, 5, 2 * bs + 1};
                for (int iw = 0; iw < 4; iw++) {
                    a.window = windows[iw];
                    for (int32_t n_ctx = 1; n_ctx <= n_max; n_ctx += 4) {
                        int32_t start = a.window && n_ctx > a.window ? n_ctx - a.window : 0;
                        int32_t *wtable = malloc(sizeof(int32_t) * (size_t)nblocks);
                        for (int32_t j = 0; j < nblocks; j++) wtable[j] = j < start / bs ? -1 : table[j];
                        float *kc2 = malloc(sizeof(float) * pool), *vc2 = malloc(sizeof(float) * pool);
                        memcpy(kc2, kc, sizeof(float) * pool), memcpy(vc2, vc, sizeof(float) * pool);
                        float *nan_rows = malloc(sizeof(float) * (size_t)(kv_heads * hd));
                        for (int i = 0; i < kv_heads * hd; i++) nan_rows[i] = NAN;
                        attention_args a2 = a;
                        a2.k_cache = kc2, a2.v_cache = vc2;
                        for (int32_t p = 0; p < start; p++)
                            attention_store_kv(&a2, kc2, vc2, (int64_t)table[p / bs] * bs + p % bs, nan_rows, nan_rows);
                        fn(&a2, out, q, group, kvh, wtable, n_ctx, scratch);
                        if (same_bits) {
                            same_bits(&a2, out2, q, group, kvh, wtable, n_ctx, scratch);
                            same = same && !memcmp(out, out2, sizeof(float) * (size_t)(group * hd));
                        }
                        free(wtable), free(kc2), free(vc2), free(nan_rows);
                        for (int g = 0; g < group; g++) {
                            attention_naive(ref, q + g * hd, kh + start * hd, vh + start * hd, n_ctx - start, hd,
                                            a.scale);
                            for (int i = 0; i < hd; i++) {
                                double e = fabs((double)out[g * hd + i] - ref[i]);
                                worst = isnan(e) ? INFINITY : fmax(worst, e);
                            }
                        }
                    }
                }
                free(kc), free(vc), free(table), free(q), free(out), free(ref), free(kk), free(vv), free(kh), free(vh),
                    free(scratch), free(out2);
                CHECK(worst < 2e-6, "%s: block_size %d head_dim %d group %d (windows too): max error %g", name, bs, hd,
                      group, worst);
                CHECK(same, "%s: block_size %d head_dim %d group %d: bits differ from the reference path", name, bs, hd,
                      group);
            }
}

TEST(test_attention_paged_vs_naive) { check_attention_vs_naive(attention_paged_portable, "portable", NULL); }

TEST(test_attention_paged_avx2_vs_naive) {
    if (!kernels_cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    check_attention_vs_naive(attention_paged_avx2, "avx2", NULL);
}

TEST(test_attention_paged_avx512_vs_naive) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_attention_vs_naive(attention_paged_avx512, "avx512", attention_paged_avx2);
}

/* Split-K on long contexts (several 512-position partitions): the
 * dispatched attention_paged against the naive reference (full context and
 * a sliding window that starts mid-partition), and bit-identical to its
 * partitions computed one by one in reverse order (as threads might finish
 * them) then merged; same_bits (if given) and fn also bit-identical there.
 * F32 and F16 pools, block sizes 16 and 3 (partitions of 510 positions). */
static void check_attention_split(attention_fn fn, const char *name, attention_fn same_bits) {
    const int32_t hd = 64, group = 4, kv_heads = 2, n_max = 2100, kvh = 1;
    const int32_t block_sizes[] = {16, 3}, ctxs[] = {1, 511, 512, 513, 1030, 1531, 2100}, windows[] = {0, 700};
    const kv_dtype types[] = {KV_DTYPE_F32, KV_DTYPE_F16};
    float *kk = malloc(sizeof(float) * (size_t)n_max * hd), *vv = malloc(sizeof(float) * (size_t)n_max * hd);
    float *q = malloc(sizeof(float) * group * hd), *out = malloc(sizeof(float) * group * hd),
          *out2 = malloc(sizeof(float) * group * hd), *ref = malloc(sizeof(float) * hd);
    for (int i = 0; i < group * hd; i++) q[i] = 2 * frand();
    double worst = 0;
    bool same_merge = true, same_path = true;
    int32_t most_parts = 0;
    for (int it = 0; it < 2; it++)
        for (int ib = 0; ib < 2; ib++) {
            int32_t bs = block_sizes[ib], nblocks = (n_max + bs - 1) / bs + 2;
            size_t pool = (size_t)nblocks * kv_heads * bs * hd;
            void *kc = calloc(pool, 4), *vc = calloc(pool, 4);
            int32_t *table = malloc(sizeof(int32_t) * (size_t)nblocks);
            for (int32_t i = 0; i < nblocks; i++) table[i] = (int32_t)((i * 7L + 3) % nblocks); /* 7 coprime */
            attention_args a = {.k_cache = kc, .v_cache = vc, .kv_heads = kv_heads, .head_dim = hd,
                                .block_size = bs, .scale = 1.0f / sqrtf((float)hd), .cache_dtype = types[it]};
            float *rowk = malloc(sizeof(float) * kv_heads * hd), *rowv = malloc(sizeof(float) * kv_heads * hd);
            for (int32_t p = 0; p < n_max; p++) {
                for (int i = 0; i < kv_heads * hd; i++) rowk[i] = 2 * frand(), rowv[i] = frand();
                if (types[it] == KV_DTYPE_F16) /* the reference sees the stored values */
                    for (int i = 0; i < kv_heads * hd; i++)
                        rowk[i] = f16_to_f32(f32_to_f16(rowk[i])), rowv[i] = f16_to_f32(f32_to_f16(rowv[i]));
                attention_store_kv(&a, kc, vc, (int64_t)table[p / bs] * bs + p % bs, rowk, rowv);
                memcpy(kk + (size_t)p * hd, rowk + kvh * hd, sizeof(float) * hd);
                memcpy(vv + (size_t)p * hd, rowv + kvh * hd, sizeof(float) * hd);
            }
            float *scratch = malloc(sizeof(float) * (size_t)attention_scratch_floats(group, bs, hd));
            int64_t sf = attention_state_floats(group, hd);
            float *states = malloc(sizeof(float) * (size_t)(sf * (n_max / 500 + 2)));
            for (int iw = 0; iw < 2; iw++)
                for (int ic = 0; ic < 7; ic++) {
                    int32_t n_ctx = ctxs[ic];
                    a.window = windows[iw];
                    int32_t start = a.window && n_ctx > a.window ? n_ctx - a.window : 0;
                    fn(&a, out, q, group, kvh, table, n_ctx, scratch);
                    for (int g = 0; g < group; g++) {
                        attention_naive(ref, q + g * hd, kk + (size_t)start * hd, vv + (size_t)start * hd,
                                        n_ctx - start, hd, a.scale);
                        for (int i = 0; i < hd; i++) {
                            double e = fabs((double)out[g * hd + i] - ref[i]);
                            worst = isnan(e) ? INFINITY : fmax(worst, e);
                        }
                    }
                    if (same_bits) {
                        same_bits(&a, out2, q, group, kvh, table, n_ctx, scratch);
                        same_path &= !memcmp(out, out2, sizeof(float) * group * hd);
                    }
                    /* partitions in reverse order, then the merge, with the
                     * dispatched kernels */
                    attention_paged(&a, out, q, group, kvh, table, n_ctx, scratch);
                    int32_t np = attention_num_partitions(&a, n_ctx);
                    if (np > most_parts) most_parts = np;
                    for (int32_t k = np - 1; k >= 0; k--)
                        attention_paged_partition(&a, states + k * sf, q, group, kvh, table, n_ctx, k, scratch);
                    attention_merge_partitions(&a, out2, states, np, group);
                    same_merge &= !memcmp(out, out2, sizeof(float) * group * hd);
                }
            free(kc), free(vc), free(table), free(rowk), free(rowv), free(scratch), free(states);
        }
    free(kk), free(vv), free(q), free(out), free(out2), free(ref);
    CHECK(most_parts == 5, "%s: at most %d partitions, expected 5 (2100 positions of 510)", name, most_parts);
    CHECK(worst < 2e-6, "%s: long contexts: max error %g against the naive reference", name, worst);
    CHECK(same_merge, "%s: partitions computed apart and merged differ from attention_paged", name);
    CHECK(same_path, "%s: long contexts: bits differ from the reference path", name);
}

TEST(test_attention_split_long) { check_attention_split(attention_paged, "dispatched", NULL); }

TEST(test_attention_split_long_avx512) {
    if (!kernels_cpu_has_avx512()) SKIP("no AVX-512 on this CPU");
    check_attention_split(attention_paged_avx512, "avx512", attention_paged_avx2);
}

/* attention_paged_tile: each token of a tile gets the bits attention_paged
 * gives it alone, for runs of consecutive positions across partition
 * boundaries (more tokens than one pass takes), the first positions of a
 * sequence, scattered positions in any order, sliding windows (a token's
 * window starting after another token's context ends), F32 and F16 pools,
 * block sizes 16 and 3, a group of 3. */
TEST(test_attention_tile_same_bits) {
    const int32_t hd = 64, group = 3, kv_heads = 2, n_max = 2100, kvh = 1, ntok_max = 40;
    const int32_t block_sizes[] = {16, 3}, windows[] = {0, 700, 5};
    const kv_dtype types[] = {KV_DTYPE_F32, KV_DTYPE_F16};
    const int32_t scattered[] = {2099, 5, 600, 513, 0, 1023, 1024, 511};
    const int64_t stride = (int64_t)kv_heads * group * hd; /* the runner's q_dim */
    float *q = malloc(sizeof(float) * (size_t)(ntok_max * stride)), *out = malloc(sizeof(float) * (size_t)(ntok_max * stride));
    float *one = malloc(sizeof(float) * (size_t)(group * hd));
    for (int64_t i = 0; i < ntok_max * stride; i++) q[i] = 2 * frand();
    int32_t pos[40], checked = 0, differ = 0;
    for (int it = 0; it < 2; it++)
        for (int ib = 0; ib < 2; ib++) {
            int32_t bs = block_sizes[ib], nblocks = (n_max + bs - 1) / bs + 2;
            size_t pool = (size_t)nblocks * kv_heads * bs * hd;
            void *kc = calloc(pool, 4), *vc = calloc(pool, 4);
            int32_t *table = malloc(sizeof(int32_t) * (size_t)nblocks);
            for (int32_t i = 0; i < nblocks; i++) table[i] = (int32_t)((i * 7L + 3) % nblocks);
            attention_args a = {.k_cache = kc, .v_cache = vc, .kv_heads = kv_heads, .head_dim = hd,
                                .block_size = bs, .scale = 1.0f / sqrtf((float)hd), .cache_dtype = types[it]};
            float *rowk = malloc(sizeof(float) * kv_heads * hd), *rowv = malloc(sizeof(float) * kv_heads * hd);
            for (int32_t p = 0; p < n_max; p++) {
                for (int i = 0; i < kv_heads * hd; i++) rowk[i] = 2 * frand(), rowv[i] = frand();
                attention_store_kv(&a, kc, vc, (int64_t)table[p / bs] * bs + p % bs, rowk, rowv);
            }
            float *scratch = malloc(sizeof(float) * (size_t)attention_tile_scratch_floats(ATTENTION_MAX_TILE, group, bs, hd));
            for (int iw = 0; iw < 3; iw++)
                for (int run = 0; run < 3; run++) {
                    int32_t ntok;
                    if (run == 0) { /* 40 consecutive tokens across the boundary at 1020 / 1024 */
                        ntok = 40;
                        for (int32_t i = 0; i < ntok; i++) pos[i] = 1000 + i;
                    } else if (run == 1) { /* a prompt's first tokens */
                        ntok = 19;
                        for (int32_t i = 0; i < ntok; i++) pos[i] = i;
                    } else {
                        ntok = 8;
                        memcpy(pos, scattered, sizeof(scattered));
                    }
                    a.window = windows[iw];
                    attention_paged_tile(&a, out, q, stride, group, kvh, table, pos, ntok, scratch);
                    for (int32_t i = 0; i < ntok; i++) {
                        attention_paged(&a, one, q + i * stride, group, kvh, table, pos[i] + 1, scratch);
                        differ += memcmp(one, out + i * stride, sizeof(float) * (size_t)(group * hd)) != 0;
                        checked++;
                    }
                }
            free(kc), free(vc), free(table), free(rowk), free(rowv), free(scratch);
        }
    free(q), free(out), free(one);
    CHECK(checked == 2 * 2 * 3 * (40 + 19 + 8), "checked %d tokens", checked);
    CHECK(differ == 0, "%d of %d tokens: the tile's output differs from the token's alone", differ, checked);
}

int main(void) {
    printf("# kernels: %s\n", kernels_isa_name(kernels_isa_get()));
    RUN(test_matmul_portable_vs_naive);
    RUN(test_matmul_avx2_vs_naive);
    RUN(test_matmul_avx512_vs_naive);
    RUN(test_matmul_batch_invariance);
    RUN(test_matmul_batch_invariance_avx2);
    RUN(test_matmul_batch_invariance_avx512);
    RUN(test_rmsnorm_vs_naive);
    RUN(test_rope_rotate_half);
    RUN(test_swiglu);
    RUN(test_swiglu_avx2);
    RUN(test_swiglu_avx512);
    RUN(test_geglu);
    RUN(test_geglu_avx2);
    RUN(test_geglu_avx512);
    RUN(test_attention_paged_vs_naive);
    RUN(test_attention_paged_avx2_vs_naive);
    RUN(test_attention_paged_avx512_vs_naive);
    RUN(test_attention_split_long);
    RUN(test_attention_split_long_avx512);
    RUN(test_attention_tile_same_bits);
    return harness_done();
}
