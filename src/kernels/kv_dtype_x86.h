/*
 * kv_dtype_x86.h - vector loads of KV cache elements as F32 (kv_dtype.h),
 * shared by the attention kernels and the conversion tests; x86 only.
 *
 * Every load is exact (each value of each type is an F32), so a kernel that
 * reads K/V through these does the same float operations on the same values
 * as one reading an F32 pool that holds them: the same bits.
 *
 *   bfloat16  the 16 bits shifted into the top of a 32-bit lane
 *   float16   F16C's vcvtph2ps
 *   fp8_e5m2  the byte shifted into the top of a 16-bit lane is the
 *             binary16 with the same value (same exponent bias, 15), then
 *             vcvtph2ps
 *   fp8_e4m3  the byte sign-extended to 16 bits and shifted left by 7 puts
 *             the sign in bit 15, a copy of it in bit 14 (cleared) and
 *             exponent and mantissa in bits 13..7: a binary16 whose value
 *             is the e4m3 value times 2^-8 (exponent bias 15 against 7;
 *             e4m3 subnormals land on binary16 subnormals, exactly). The
 *             NaN code S.1111.111 becomes 0x3F80 | sign, a finite 1.875,
 *             so its exponent bits are set to 31 first (a binary16 NaN).
 *             Then vcvtph2ps and a multiplication by 2^8, exact.
 *
 * The *_raw loads leave that last multiplication out: they give the value
 * divided by kv_raw_factor(T) (2^8 for E4M3, 1 otherwise), for a caller
 * that multiplies its other FMA operand by the factor instead. For the V
 * accumulation o = fma(e, v, o) with a softmax weight e in [0, 1], e * 2^8
 * is exact and (e * 2^8) * (v * 2^-8) is exactly e * v, so the FMA rounds
 * the same exact sum to the same bits.
 *
 * A partial vector (n < 8 or 16 elements) is read with a masked load
 * (AVX-512, and F32 on AVX2) or from a zero-padded copy (AVX2 16- and 8-bit
 * types), never past element n - 1; the lanes past n are 0.
 */
#ifndef VLLM_KERNELS_KV_DTYPE_X86_H
#define VLLM_KERNELS_KV_DTYPE_X86_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "kernels/kv_dtype.h"

#define KV_AVX2_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define KV_AVX512_FN \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

static inline float kv_raw_factor(kv_dtype T) { return T == KV_DTYPE_FP8_E4M3 ? 256.0f : 1.0f; }

/* 8 values encoded as e4m3 (one per 16-bit lane, sign-extended) to F32 / 2^8. */
KV_AVX2_FN __m256 kv_e4m3x8_raw_avx2(__m128i s) {
    __m128i h = _mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16((short)0xBFFF));
    __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x3F80)), _mm_set1_epi16(0x3F80));
    h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7C00)));
    return _mm256_cvtph_ps(h);
}

/* Elements 0..7 at p (type T, a constant in each caller) as F32, divided by
 * kv_raw_factor(T). */
KV_AVX2_FN __m256 kv_load8_raw_avx2(const kv_dtype T, const void *p) {
    switch (T) {
    case KV_DTYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    case KV_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case KV_DTYPE_FP8_E5M2:
        return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p)), 8));
    case KV_DTYPE_FP8_E4M3: return kv_e4m3x8_raw_avx2(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p)));
    default: return _mm256_loadu_ps((const float *)p);
    }
}

/* Elements 0..7 at p as F32. */
KV_AVX2_FN __m256 kv_load8_avx2(const kv_dtype T, const void *p) {
    __m256 x = kv_load8_raw_avx2(T, p);
    return T == KV_DTYPE_FP8_E4M3 ? _mm256_mul_ps(x, _mm256_set1_ps(256.0f)) : x;
}

/* Elements 0..15 at p as F32 divided by kv_raw_factor(T), into *lo (0..7)
 * and *hi (8..15): the 8-bit types widened and fixed up 16 at a time (one
 * 256-bit vector of binary16 halves), then two vcvtph2ps. */
KV_AVX2_FN void kv_load16_raw_avx2(const kv_dtype T, const void *p, __m256 *lo, __m256 *hi) {
    const uint8_t *b = p;
    __m256i h;
    switch (T) {
    case KV_DTYPE_BF16:
    case KV_DTYPE_F16:
    case KV_DTYPE_F32:
        *lo = kv_load8_raw_avx2(T, b), *hi = kv_load8_raw_avx2(T, b + 8 * kv_dtype_size(T));
        return;
    case KV_DTYPE_FP8_E5M2:
        h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)), 8);
        *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
        return;
    case KV_DTYPE_FP8_E4M3: {
        h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)), 7),
                             _mm256_set1_epi16((short)0xBFFF));
        __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x3F80)), _mm256_set1_epi16(0x3F80));
        h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7C00)));
        *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
        return;
    }
    default: return;
    }
}

/* Elements 0..15 at p as F32 into *lo (0..7) and *hi (8..15). */
KV_AVX2_FN void kv_load16_avx2(const kv_dtype T, const void *p, __m256 *lo, __m256 *hi) {
    kv_load16_raw_avx2(T, p, lo, hi);
    if (T == KV_DTYPE_FP8_E4M3)
        *lo = _mm256_mul_ps(*lo, _mm256_set1_ps(256.0f)), *hi = _mm256_mul_ps(*hi, _mm256_set1_ps(256.0f));
}

/* Elements 0..n-1 at p as F32 (any n; lanes from n on are 0). */
KV_AVX2_FN __m256 kv_load8_partial_avx2(const kv_dtype T, const void *p, int32_t n) {
    if (n >= 8) return kv_load8_avx2(T, p);
    if (T == KV_DTYPE_F32) {
        __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        return _mm256_maskload_ps((const float *)p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx));
    }
    uint8_t tmp[16] = {0};
    if (n > 0) memcpy(tmp, p, (size_t)n * kv_dtype_size(T));
    return kv_load8_avx2(T, tmp);
}

/* 16 e4m3 bytes to F32 / 2^8 (the NaN lanes found on the bytes: b | 0x80
 * is 0xFF exactly for S.1111.111). */
KV_AVX512_FN __m512 kv_e4m3x16_raw_avx512(__m128i b) {
    __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8((char)0x80)), _mm_set1_epi8((char)0xFF));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(_mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7E00)));
}

/* Elements 0..15 at p with lanes in m (the others 0, never read) as F32. */
KV_AVX512_FN __m512 kv_load16_mask_avx512(const kv_dtype T, const void *p, __mmask16 m) {
    switch (T) {
    case KV_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    case KV_DTYPE_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    case KV_DTYPE_FP8_E5M2:
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p)), 8));
    case KV_DTYPE_FP8_E4M3:
        return _mm512_mul_ps(kv_e4m3x16_raw_avx512(_mm_maskz_loadu_epi8(m, p)), _mm512_set1_ps(256.0f));
    default: return _mm512_maskz_loadu_ps(m, p);
    }
}

/* Elements 0..15 at p as F32 divided by kv_raw_factor(T). */
KV_AVX512_FN __m512 kv_load16_raw_avx512(const kv_dtype T, const void *p) {
    switch (T) {
    case KV_DTYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    case KV_DTYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    case KV_DTYPE_FP8_E5M2:
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)), 8));
    case KV_DTYPE_FP8_E4M3: return kv_e4m3x16_raw_avx512(_mm_loadu_si128((const __m128i *)p));
    default: return _mm512_loadu_ps((const float *)p);
    }
}

/* Elements 0..15 at p as F32. */
KV_AVX512_FN __m512 kv_load16_avx512(const kv_dtype T, const void *p) {
    __m512 x = kv_load16_raw_avx512(T, p);
    return T == KV_DTYPE_FP8_E4M3 ? _mm512_mul_ps(x, _mm512_set1_ps(256.0f)) : x;
}

#endif
#endif
