/*
 * test_kv_dtype.c - the KV cache element types (kernels/kv_dtype.h) and the
 * attention kernel reading each of them.
 *
 * Seven results without arguments (tests/run.sh); with --torch-ref DIR, the
 * five of tests/test_kv_dtype_ref.sh.
 *
 * Without arguments:
 *  - names: every --kv-cache-dtype name, "fp8" = fp8_e4m3, unknown ones refused;
 *  - vector loads (AVX2, AVX-512): every code of every type converted by the
 *    path's vector loads, whole vectors and every partial length at every
 *    alignment, bit-identical to the scalar reference (kv_dtype_load; NaN
 *    codes: NaN); buffers of the exact size, so an over-read is a sanitizer
 *    error;
 *  - stores: every value of a type stores as its own code (but FP8
 *    saturates: e5m2's infinities, and anything beyond the largest finite
 *    value, store as it), float16 overflows to infinity, NaN stays NaN;
 *  - attention per path (portable, AVX2, AVX-512) per type: K/V stored
 *    through attention_store_kv in a shuffled pool whose unused slots are NaN
 *    in every type, against (a) the same path on an F32 pool holding the
 *    decoded values (bit-identical), (b) the double-precision reference over
 *    the decoded values (2e-6), (c) with FP8 k_scale/v_scale, the reference
 *    over decoded values times the scales (1e-5); AVX-512 bit-identical to
 *    AVX2 in every type; sliding windows too.
 *
 * With --torch-ref DIR (tests/ref/kv_dtype_ref.py's files; the expected
 * values come from torch's casts, not from this code base):
 *  - torch_decode: every code of bfloat16, float16, float8_e4m3fn,
 *    float8_e5m2, scalar and each vector path, equal to torch's .float();
 *  - torch_encode: ~700k values (random, every exact tie, neighbours of
 *    ties, extremes, subnormals, infinities, NaN) stored as torch's codes
 *    (FP8 saturating, see kv_dtype.h);
 *  - torch_attention_<path>: K/V stored with their scales hold exactly torch's
 *    (x / scale).to(type), and attention over them is within 1e-5 of
 *    torch-rounded K/V's float64 softmax.
 */
/* checks: 7 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "kernels/kv_dtype.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static bool same_float(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

static int64_t num_codes(kv_dtype t) { return t == KV_DTYPE_F32 ? 0 : (int64_t)1 << (8 * kv_dtype_size(t)); }

/* Every code of t, in order, in a buffer of exactly that size (caller frees). */
static void *all_codes(kv_dtype t) {
    int64_t n = num_codes(t);
    uint8_t *b = malloc((size_t)n * kv_dtype_size(t));
    for (int64_t c = 0; c < n; c++) {
        if (kv_dtype_size(t) == 2) {
            uint16_t h = (uint16_t)c;
            memcpy(b + 2 * c, &h, 2);
        } else {
            b[c] = (uint8_t)c;
        }
    }
    return b;
}

typedef void (*to_f32_fn)(kv_dtype, const void *, float *, int64_t);

/* ---- names, loads, stores ------------------------------------------------- */

TEST(test_kv_dtype_names) {
    const char *names[] = {"float32", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2"};
    const size_t sizes[] = {4, 2, 2, 1, 1};
    for (int t = 0; t < KV_DTYPE_COUNT; t++) {
        kv_dtype got;
        CHECK(!strcmp(kv_dtype_name((kv_dtype)t), names[t]), "%d: %s", t, kv_dtype_name((kv_dtype)t));
        CHECK(kv_dtype_from_name(names[t], &got) && got == (kv_dtype)t, "%s", names[t]);
        CHECK(kv_dtype_size((kv_dtype)t) == sizes[t], "%s: %zu bytes", names[t], kv_dtype_size((kv_dtype)t));
    }
    kv_dtype got;
    CHECK(kv_dtype_from_name("fp8", &got) && got == KV_DTYPE_FP8_E4M3, "fp8 is fp8_e4m3 (vLLM's meaning)");
    const char *bad[] = {"auto", "fp16", "half", "float", "bf16", "fp8_e4m3fn", "FP8", "int8", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(!kv_dtype_from_name(bad[i], &got), "'%s' accepted", bad[i]);
    CHECK(!kv_dtype_from_name(NULL, &got));
}

/* fn over every code (whole buffer, then every length 1..40 at offsets 0..17)
 * against the scalar loads. */
static void check_vector_loads(to_f32_fn fn, const char *path) {
    for (int t = KV_DTYPE_BF16; t < KV_DTYPE_COUNT; t++) {
        int64_t n = num_codes((kv_dtype)t);
        void *codes = all_codes((kv_dtype)t);
        float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
        kv_dtype_to_f32_portable((kv_dtype)t, codes, want, n);
        fn((kv_dtype)t, codes, got, n);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (!same_float(want[i], got[i])) bad = i;
        for (int64_t off = 0; off < 18 && bad < 0; off++)
            for (int64_t len = 1; len <= 40 && bad < 0; len++) {
                /* the last len codes of a copy of exactly len elements */
                size_t es = kv_dtype_size((kv_dtype)t);
                uint8_t *part = malloc((size_t)len * es);
                int64_t first = (off * 977 + len * 131) % (n - len);
                memcpy(part, (uint8_t *)codes + (size_t)first * es, (size_t)len * es);
                float tail[40];
                fn((kv_dtype)t, part, tail, len);
                for (int64_t i = 0; i < len; i++)
                    if (!same_float(tail[i], want[first + i])) bad = first + i;
                free(part);
            }
        free(codes), free(want), free(got);
        CHECK(bad < 0, "%s %s: code 0x%llx converts differently from the scalar reference", path,
              kv_dtype_name((kv_dtype)t), (unsigned long long)bad);
    }
}

TEST(test_kv_dtype_vector_loads_avx2) { check_vector_loads(kv_dtype_to_f32_avx2, "avx2"); }
TEST(test_kv_dtype_vector_loads_avx512) { check_vector_loads(kv_dtype_to_f32_avx512, "avx512"); }

TEST(test_kv_dtype_stores) {
    for (int t = KV_DTYPE_BF16; t < KV_DTYPE_COUNT; t++) {
        kv_dtype T = (kv_dtype)t;
        int64_t n = num_codes(T);
        void *codes = all_codes(T);
        uint8_t back[2];
        float maxf = 0;
        for (int64_t c = 0; c < n; c++) {
            float v = kv_dtype_load(codes, T, c);
            kv_dtype_store(back, T, 0, v);
            if (isnan(v)) {
                CHECK(isnan(kv_dtype_load(back, T, 0)), "%s: NaN stored as a number", kv_dtype_name(T));
                continue;
            }
            if (isinf(v) && kv_dtype_is_fp8(T)) continue; /* e5m2's infinities saturate: below */
            CHECK(!memcmp(back, (uint8_t *)codes + (size_t)c * kv_dtype_size(T), kv_dtype_size(T)),
                  "%s: %g (code 0x%llx) does not store as itself", kv_dtype_name(T), v, (unsigned long long)c);
            if (isfinite(v) && v > maxf) maxf = v;
        }
        free(codes);
        const float big[] = {INFINITY, 1e30f, 3.4e38f};
        for (int i = 0; i < 3; i++)
            for (int sgn = -1; sgn <= 1; sgn += 2) {
                kv_dtype_store(back, T, 0, sgn * big[i]);
                float got = kv_dtype_load(back, T, 0);
                if (kv_dtype_is_fp8(T))
                    CHECK(got == sgn * maxf, "%s: %g stores as %g, not the saturated %g", kv_dtype_name(T),
                          sgn * big[i], got, sgn * maxf);
                else if (T == KV_DTYPE_F16)
                    CHECK(got == sgn * INFINITY, "float16: %g stores as %g, not infinity", sgn * big[i], got);
            }
        CHECK(maxf == (T == KV_DTYPE_FP8_E4M3 ? 448.0f : T == KV_DTYPE_FP8_E5M2 ? 57344.0f
                       : T == KV_DTYPE_F16      ? 65504.0f : 0x1.fep127f),
              "%s: largest finite %g", kv_dtype_name(T), maxf);
    }
}

/* ---- attention per type ------------------------------------------------------ */

typedef void (*attention_fn)(const attention_args *, float *, const float *, int32_t, int32_t, const int32_t *,
                             int32_t, float *);

/* An F32 pool holding the values of a pool of type a->cache_dtype. */
static float *decode_pool(const attention_args *a, const void *pool, size_t elems) {
    float *f = malloc(sizeof(float) * elems);
    for (size_t i = 0; i < elems; i++) f[i] = kv_dtype_load(pool, a->cache_dtype, (int64_t)i);
    return f;
}

/* fn on each type (see the top); same_bits: the path fn must match bit for bit. */
static void check_attention_types(attention_fn fn, const char *name, attention_fn same_bits) {
    const int32_t block_sizes[] = {3, 16, 32}, head_dims[] = {8, 20, 24, 64, 80}, groups[] = {1, 2, 3, 4, 5, 8};
    for (int t = KV_DTYPE_BF16; t < KV_DTYPE_COUNT; t++)
        for (int ib = 0; ib < 3; ib++)
            for (int ih = 0; ih < 5; ih++)
                for (int ig = 0; ig < 6; ig++) {
                    kv_dtype T = (kv_dtype)t;
                    const int32_t bs = block_sizes[ib], hd = head_dims[ih], group = groups[ig], kv_heads = 2,
                                  n_max = 41, kvh = 1;
                    const int32_t nblocks = (n_max + bs - 1) / bs + 3;
                    const size_t elems = (size_t)nblocks * kv_heads * bs * hd, es = kv_dtype_size(T);
                    uint8_t *kc = malloc(elems * es), *vc = malloc(elems * es);
                    memset(kc, 0xff, elems * es), memset(vc, 0xff, elems * es); /* NaN in every type */
                    int32_t *table = malloc(sizeof(int32_t) * (size_t)nblocks);
                    for (int32_t i = 0; i < nblocks; i++) table[i] = i;
                    for (int32_t i = nblocks - 1; i > 0; i--) {
                        int32_t j = (int32_t)((frand() + 1) * 0.5 * (i + 1)) % (i + 1), x = table[i];
                        table[i] = table[j], table[j] = x;
                    }
                    attention_args a = {.k_cache = kc, .v_cache = vc, .kv_heads = kv_heads, .head_dim = hd,
                                        .block_size = bs, .scale = 1.0f / sqrtf((float)hd), .cache_dtype = T};
                    float *kk = malloc(sizeof(float) * (size_t)(n_max * kv_heads * hd)),
                          *vv = malloc(sizeof(float) * (size_t)(n_max * kv_heads * hd));
                    for (int i = 0; i < n_max * kv_heads * hd; i++) kk[i] = 2 * frand(), vv[i] = frand();
                    for (int32_t p = 0; p < n_max; p++)
                        attention_store_kv(&a, kc, vc, (int64_t)table[p / bs] * bs + p % bs, kk + p * kv_heads * hd,
                                           vv + p * kv_heads * hd);
                    /* the same values in an F32 pool (its unused slots NaN too) */
                    float *kf = decode_pool(&a, kc, elems), *vf = decode_pool(&a, vc, elems);
                    attention_args af = a;
                    af.k_cache = kf, af.v_cache = vf, af.cache_dtype = KV_DTYPE_F32;
                    /* the decoded rows of KV head 1, contiguous, for the reference */
                    float *kh = malloc(sizeof(float) * (size_t)(n_max * hd)), *vh = malloc(sizeof(float) * (size_t)(n_max * hd));
                    for (int32_t p = 0; p < n_max; p++)
                        for (int32_t i = 0; i < hd; i++) {
                            int64_t base = ((int64_t)table[p / bs] * kv_heads + kvh) * bs * hd;
                            kh[p * hd + i] = kf[base + (int64_t)i * bs + p % bs];
                            vh[p * hd + i] = vf[base + (int64_t)(p % bs) * hd + i];
                        }
                    float *q = malloc(sizeof(float) * (size_t)(group * hd)), *out = malloc(sizeof(float) * (size_t)(group * hd));
                    float *out_f = malloc(sizeof(float) * (size_t)(group * hd)), *out2 = malloc(sizeof(float) * (size_t)(group * hd));
                    float *ref = malloc(sizeof(float) * (size_t)hd);
                    float *scratch = malloc(sizeof(float) * (size_t)attention_scratch_floats(group, bs, hd));
                    for (int i = 0; i < group * hd; i++) q[i] = frand();
                    bool same_f32 = true, same = true;
                    double worst = 0;
                    const int32_t windows[] = {0, 5};
                    for (int iw = 0; iw < 2; iw++) {
                        a.window = af.window = windows[iw];
                        for (int32_t n_ctx = 1; n_ctx <= n_max; n_ctx += 4) {
                            int32_t start = a.window && n_ctx > a.window ? n_ctx - a.window : 0;
                            fn(&a, out, q, group, kvh, table, n_ctx, scratch);
                            fn(&af, out_f, q, group, kvh, table, n_ctx, scratch);
                            same_f32 = same_f32 && !memcmp(out, out_f, sizeof(float) * (size_t)(group * hd));
                            if (same_bits) {
                                same_bits(&a, out2, q, group, kvh, table, n_ctx, scratch);
                                same = same && !memcmp(out, out2, sizeof(float) * (size_t)(group * hd));
                            }
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
                    /* FP8 scales: the kernel folds them; the reference multiplies the decoded values */
                    double worst_scaled = 0;
                    if (kv_dtype_is_fp8(T)) {
                        a.k_scale = 0.37f, a.v_scale = 2.5f, a.window = 0;
                        for (int32_t p = 0; p < n_max; p++)
                            attention_store_kv(&a, kc, vc, (int64_t)table[p / bs] * bs + p % bs,
                                               kk + p * kv_heads * hd, vv + p * kv_heads * hd);
                        free(kf), free(vf);
                        kf = decode_pool(&a, kc, elems), vf = decode_pool(&a, vc, elems);
                        for (int32_t p = 0; p < n_max; p++)
                            for (int32_t i = 0; i < hd; i++) {
                                int64_t base = ((int64_t)table[p / bs] * kv_heads + kvh) * bs * hd;
                                kh[p * hd + i] = kf[base + (int64_t)i * bs + p % bs] * a.k_scale;
                                vh[p * hd + i] = vf[base + (int64_t)(p % bs) * hd + i] * a.v_scale;
                            }
                        for (int32_t n_ctx = 1; n_ctx <= n_max; n_ctx += 5) {
                            fn(&a, out, q, group, kvh, table, n_ctx, scratch);
                            if (same_bits) {
                                same_bits(&a, out2, q, group, kvh, table, n_ctx, scratch);
                                same = same && !memcmp(out, out2, sizeof(float) * (size_t)(group * hd));
                            }
                            for (int g = 0; g < group; g++) {
                                attention_naive(ref, q + g * hd, kh, vh, n_ctx, hd, a.scale);
                                for (int i = 0; i < hd; i++) {
                                    double e = fabs((double)out[g * hd + i] - ref[i]) / (1 + fabs(ref[i]));
                                    worst_scaled = isnan(e) ? INFINITY : fmax(worst_scaled, e);
                                }
                            }
                        }
                    }
                    free(kc), free(vc), free(kf), free(vf), free(table), free(kk), free(vv), free(kh), free(vh);
                    free(q), free(out), free(out_f), free(out2), free(ref), free(scratch);
                    CHECK(same_f32, "%s %s: block_size %d head_dim %d group %d: bits differ from the F32 pool of the "
                          "same values", name, kv_dtype_name(T), bs, hd, group);
                    CHECK(worst < 2e-6, "%s %s: block_size %d head_dim %d group %d: max error %g", name,
                          kv_dtype_name(T), bs, hd, group, worst);
                    CHECK(worst_scaled < 1e-5, "%s %s with k/v scales: block_size %d head_dim %d group %d: max "
                          "relative error %g", name, kv_dtype_name(T), bs, hd, group, worst_scaled);
                    CHECK(same, "%s %s: block_size %d head_dim %d group %d: bits differ from avx2", name,
                          kv_dtype_name(T), bs, hd, group);
                }
}

TEST(test_attention_kv_dtypes_portable) { check_attention_types(attention_paged_portable, "portable", NULL); }
TEST(test_attention_kv_dtypes_avx2) { check_attention_types(attention_paged_avx2, "avx2", NULL); }
TEST(test_attention_kv_dtypes_avx512) {
    check_attention_types(attention_paged_avx512, "avx512", attention_paged_avx2);
}

/* ---- against torch (--torch-ref DIR) ---------------------------------------- */

static const char *ref_dir;

/* The whole file DIR/name (caller frees); *n = its size in bytes. */
static void *read_ref(const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ref_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(size > 0 ? (size_t)size : 1);
    *n = fread(b, 1, (size_t)size, f);
    fclose(f);
    return b;
}

TEST(torch_decode) {
    for (int t = KV_DTYPE_BF16; t < KV_DTYPE_COUNT; t++) {
        kv_dtype T = (kv_dtype)t;
        char name[64];
        snprintf(name, sizeof name, "decode_%s.bin", kv_dtype_name(T));
        size_t bytes;
        float *want = read_ref(name, &bytes);
        int64_t n = num_codes(T);
        CHECK(want && bytes == sizeof(float) * (size_t)n, "%s: missing or %zu bytes", name, want ? bytes : 0);
        void *codes = all_codes(T);
        float *got = malloc(sizeof(float) * (size_t)n);
        to_f32_fn fns[3] = {kv_dtype_to_f32_portable, NULL, NULL};
        const char *names[3] = {"scalar", "avx2", "avx512"};
        if (kernels_cpu_has_avx2()) fns[1] = kv_dtype_to_f32_avx2;
        if (kernels_cpu_has_avx512()) fns[2] = kv_dtype_to_f32_avx512;
        int64_t bad = -1;
        int path = 0;
        for (; path < 3 && bad < 0; path++) {
            if (!fns[path]) continue;
            fns[path](T, codes, got, n);
            for (int64_t c = 0; c < n && bad < 0; c++)
                if (!same_float(got[c], want[c])) bad = c;
        }
        float g = bad >= 0 ? got[bad] : 0, w = bad >= 0 ? want[bad] : 0;
        free(want), free(codes), free(got);
        CHECK(bad < 0, "%s (%s): code 0x%llx is %a, torch says %a", kv_dtype_name(T), names[path - 1],
              (unsigned long long)bad, g, w);
    }
}

TEST(torch_encode) {
    size_t bytes;
    float *x = read_ref("encode_in.bin", &bytes);
    CHECK(x && bytes % 4 == 0, "encode_in.bin");
    size_t n = bytes / 4;
    for (int t = KV_DTYPE_BF16; t < KV_DTYPE_COUNT; t++) {
        kv_dtype T = (kv_dtype)t;
        char name[64];
        snprintf(name, sizeof name, "encode_%s.bin", kv_dtype_name(T));
        size_t es = kv_dtype_size(T), got_bytes;
        uint8_t *want = read_ref(name, &got_bytes), *got = malloc(n * es);
        CHECK(want && got_bytes == n * es, "%s", name);
        size_t bad = n;
        for (size_t i = 0; i < n; i++) {
            kv_dtype_store(got, T, (int64_t)i, x[i]);
            bool ok = isnan(x[i]) ? isnan(kv_dtype_load(got, T, (int64_t)i)) && isnan(kv_dtype_load(want, T, (int64_t)i))
                                  : !memcmp(got + i * es, want + i * es, es);
            if (!ok && bad == n) bad = i;
        }
        float xb = bad < n ? x[bad] : 0, gb = bad < n ? kv_dtype_load(got, T, (int64_t)bad) : 0,
              wb = bad < n ? kv_dtype_load(want, T, (int64_t)bad) : 0;
        free(want), free(got);
        if (bad < n) free(x);
        CHECK(bad == n, "%s: %a stores as %a, torch as %a", kv_dtype_name(T), xb, gb, wb);
    }
    free(x);
}

/* One case of attention.bin (see kv_dtype_ref.py): the arrays copied out of
 * the file (whose float64s need not be 8-byte aligned); caller frees q. */
typedef struct attn_case {
    int32_t type, hd, group, n_ctx, window;
    float scale, k_scale, v_scale;
    float *q, *k, *v, *k_stored, *v_stored; /* one allocation, from q */
    double *out;
} attn_case;

static void check_torch_attention(attention_fn fn, const char *name) {
    size_t bytes;
    uint8_t *file = read_ref("attention.bin", &bytes);
    CHECK(file && bytes >= 4, "attention.bin");
    int32_t count;
    memcpy(&count, file, 4);
    const uint8_t *p = file + 4, *end = file + bytes;
    int32_t cases_by_type[KV_DTYPE_COUNT] = {0};
    for (int32_t c = 0; c < count; c++) {
        attn_case k;
        CHECK(end - p >= 32, "attention.bin: truncated");
        memcpy(&k.type, p, 4), memcpy(&k.hd, p + 4, 4), memcpy(&k.group, p + 8, 4), memcpy(&k.n_ctx, p + 12, 4);
        memcpy(&k.window, p + 16, 4), memcpy(&k.scale, p + 20, 4), memcpy(&k.k_scale, p + 24, 4);
        memcpy(&k.v_scale, p + 28, 4);
        p += 32;
        size_t qn = (size_t)k.group * k.hd, kvn = (size_t)k.n_ctx * k.hd;
        CHECK(k.type >= 0 && k.type < KV_DTYPE_COUNT && (size_t)(end - p) >= 4 * (qn + 4 * kvn) + 8 * qn,
              "attention.bin: case %d", c);
        k.out = malloc(sizeof(double) * qn);
        k.q = malloc(sizeof(float) * (qn + 4 * kvn));
        memcpy(k.q, p, 4 * (qn + 4 * kvn));
        memcpy(k.out, p + 4 * (qn + 4 * kvn), 8 * qn);
        k.k = k.q + qn, k.v = k.k + kvn, k.k_stored = k.v + kvn, k.v_stored = k.k_stored + kvn;
        p += 4 * (qn + 4 * kvn) + 8 * qn;

        kv_dtype T = (kv_dtype)k.type;
        const int32_t bs = 16, kv_heads = 2, kvh = 1, nblocks = (k.n_ctx + bs - 1) / bs + 2;
        const size_t elems = (size_t)nblocks * kv_heads * bs * k.hd, es = kv_dtype_size(T);
        uint8_t *kc = malloc(elems * es), *vc = malloc(elems * es);
        memset(kc, 0xff, elems * es), memset(vc, 0xff, elems * es);
        int32_t *table = malloc(sizeof(int32_t) * (size_t)nblocks);
        for (int32_t i = 0; i < nblocks; i++) table[i] = nblocks - 1 - i; /* blocks in reverse order */
        attention_args a = {.k_cache = kc, .v_cache = vc, .kv_heads = kv_heads, .head_dim = k.hd, .block_size = bs,
                            .scale = k.scale, .window = k.window, .cache_dtype = T, .k_scale = k.k_scale,
                            .v_scale = k.v_scale};
        float *rowk = malloc(sizeof(float) * (size_t)(kv_heads * k.hd)), *rowv = malloc(sizeof(float) * (size_t)(kv_heads * k.hd));
        for (int32_t pos = 0; pos < k.n_ctx; pos++) {
            for (int32_t i = 0; i < k.hd; i++) rowk[i] = frand(), rowv[i] = frand(); /* KV head 0: other data */
            memcpy(rowk + k.hd, k.k + (size_t)pos * k.hd, sizeof(float) * (size_t)k.hd);
            memcpy(rowv + k.hd, k.v + (size_t)pos * k.hd, sizeof(float) * (size_t)k.hd);
            attention_store_kv(&a, kc, vc, (int64_t)table[pos / bs] * bs + pos % bs, rowk, rowv);
        }
        /* what the pool holds is torch's (x / scale).to(type) */
        int64_t bad = -1;
        for (int32_t pos = 0; pos < k.n_ctx && bad < 0; pos++)
            for (int32_t i = 0; i < k.hd; i++) {
                int64_t base = ((int64_t)table[pos / bs] * kv_heads + kvh) * bs * k.hd;
                float ks = kv_dtype_load(kc, T, base + (int64_t)i * bs + pos % bs);
                float vs = kv_dtype_load(vc, T, base + (int64_t)(pos % bs) * k.hd + i);
                if (!same_float(ks, k.k_stored[(size_t)pos * k.hd + i]) || !same_float(vs, k.v_stored[(size_t)pos * k.hd + i]))
                    bad = (int64_t)pos * k.hd + i;
            }
        float *out = malloc(sizeof(float) * qn), *scratch = malloc(sizeof(float) * (size_t)attention_scratch_floats(k.group, bs, k.hd));
        fn(&a, out, k.q, k.group, kvh, table, k.n_ctx, scratch);
        double worst = 0;
        for (size_t i = 0; i < qn; i++) {
            double e = fabs((double)out[i] - k.out[i]) / (1 + fabs(k.out[i]));
            worst = isnan(e) ? INFINITY : fmax(worst, e);
        }
        free(kc), free(vc), free(table), free(rowk), free(rowv), free(out), free(scratch), free(k.q), free(k.out);
        cases_by_type[T]++;
        if (bad >= 0 || worst >= 1e-5) free(file);
        CHECK(bad < 0, "%s case %d (%s, scales %g/%g): stored element %lld is not torch's", name, c, kv_dtype_name(T),
              k.k_scale, k.v_scale, (long long)bad);
        CHECK(worst < 1e-5, "%s case %d (%s, head_dim %d, group %d, n_ctx %d, window %d, scales %g/%g): max relative "
              "error %g against torch-rounded K/V in float64", name, c, kv_dtype_name(T), k.hd, k.group, k.n_ctx,
              k.window, k.k_scale, k.v_scale, worst);
    }
    free(file);
    for (int t = 0; t < KV_DTYPE_COUNT; t++) CHECK(cases_by_type[t] > 0, "no %s cases", kv_dtype_name((kv_dtype)t));
}

TEST(torch_attention_portable) { check_torch_attention(attention_paged_portable, "portable"); }
TEST(torch_attention_avx2) { check_torch_attention(attention_paged_avx2, "avx2"); }
TEST(torch_attention_avx512) { check_torch_attention(attention_paged_avx512, "avx512"); }

/* A test needing an instruction set this CPU lacks prints one skip line. */
#define RUN_IF(cond, name, why)                            \
    do {                                                   \
        if (cond) RUN(name);                               \
        else printf("skip %s: %s\n", #name, why);          \
    } while (0)

int main(int argc, char **argv) {
    printf("# kernels: %s\n", kernels_isa_name(kernels_isa_get()));
    bool avx2 = kernels_cpu_has_avx2(), avx512 = kernels_cpu_has_avx512();
    if (argc == 3 && !strcmp(argv[1], "--torch-ref")) {
        ref_dir = argv[2];
        RUN(torch_decode);
        RUN(torch_encode);
        RUN(torch_attention_portable);
        RUN_IF(avx2, torch_attention_avx2, "no AVX2/FMA/F16C on this CPU");
        RUN_IF(avx512, torch_attention_avx512, "no AVX-512 on this CPU");
        return harness_done();
    }
    RUN(test_kv_dtype_names);
    RUN_IF(avx2, test_kv_dtype_vector_loads_avx2, "no AVX2/FMA/F16C on this CPU");
    RUN_IF(avx512, test_kv_dtype_vector_loads_avx512, "no AVX-512 on this CPU");
    RUN(test_kv_dtype_stores);
    RUN(test_attention_kv_dtypes_portable);
    RUN_IF(avx2, test_attention_kv_dtypes_avx2, "no AVX2/FMA/F16C on this CPU");
    RUN_IF(avx512, test_attention_kv_dtypes_avx512, "no AVX-512 on this CPU");
    return harness_done();
}
