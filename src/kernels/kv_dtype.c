/* kv_dtype.c - see kv_dtype.h. */
#include "kernels/kv_dtype.h"

#include "kernels/kv_dtype_x86.h"

const char *kv_dtype_name(kv_dtype t) {
    static const char *const names[] = {"float32", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2"};
    return (unsigned)t < KV_DTYPE_COUNT ? names[t] : "?";
}

bool kv_dtype_from_name(const char *name, kv_dtype *out) {
    if (!name) return false;
    if (!strcmp(name, "fp8")) {
        *out = KV_DTYPE_FP8_E4M3;
        return true;
    }
    for (int t = 0; t < KV_DTYPE_COUNT; t++)
        if (!strcmp(name, kv_dtype_name((kv_dtype)t))) {
            *out = (kv_dtype)t;
            return true;
        }
    return false;
}

void kv_dtype_to_f32_portable(kv_dtype t, const void *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = kv_dtype_load(src, t, i);
}

#if defined(__x86_64__) || defined(__i386__)
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
to_f32_avx2(const kv_dtype T, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 lo, hi;
        kv_load16_avx2(T, p + i * kv_dtype_size(T), &lo, &hi);
        _mm256_storeu_ps(dst + i, lo), _mm256_storeu_ps(dst + i + 8, hi);
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, kv_load8_avx2(T, p + i * kv_dtype_size(T)));
    if (i < n) {
        float tail[8];
        _mm256_storeu_ps(tail, kv_load8_partial_avx2(T, p + i * kv_dtype_size(T), (int32_t)(n - i)));
        memcpy(dst + i, tail, sizeof(float) * (size_t)(n - i));
    }
}

__attribute__((target("avx2,fma,f16c"))) void kv_dtype_to_f32_avx2(kv_dtype t, const void *src, float *dst,
                                                                   int64_t n) {
    switch (t) {
    case KV_DTYPE_BF16: to_f32_avx2(KV_DTYPE_BF16, src, dst, n); break;
    case KV_DTYPE_F16: to_f32_avx2(KV_DTYPE_F16, src, dst, n); break;
    case KV_DTYPE_FP8_E4M3: to_f32_avx2(KV_DTYPE_FP8_E4M3, src, dst, n); break;
    case KV_DTYPE_FP8_E5M2: to_f32_avx2(KV_DTYPE_FP8_E5M2, src, dst, n); break;
    default: to_f32_avx2(KV_DTYPE_F32, src, dst, n); break;
    }
}

static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void
to_f32_avx512(const kv_dtype T, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, kv_load16_avx512(T, p + i * kv_dtype_size(T)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, kv_load16_mask_avx512(T, p + i * kv_dtype_size(T), m));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void
kv_dtype_to_f32_avx512(kv_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case KV_DTYPE_BF16: to_f32_avx512(KV_DTYPE_BF16, src, dst, n); break;
    case KV_DTYPE_F16: to_f32_avx512(KV_DTYPE_F16, src, dst, n); break;
    case KV_DTYPE_FP8_E4M3: to_f32_avx512(KV_DTYPE_FP8_E4M3, src, dst, n); break;
    case KV_DTYPE_FP8_E5M2: to_f32_avx512(KV_DTYPE_FP8_E5M2, src, dst, n); break;
    default: to_f32_avx512(KV_DTYPE_F32, src, dst, n); break;
    }
}
#else
void kv_dtype_to_f32_avx2(kv_dtype t, const void *src, float *dst, int64_t n) {
    kv_dtype_to_f32_portable(t, src, dst, n);
}
void kv_dtype_to_f32_avx512(kv_dtype t, const void *src, float *dst, int64_t n) {
    kv_dtype_to_f32_portable(t, src, dst, n);
}
#endif
