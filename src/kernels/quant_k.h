/*
 * quant_k.h - the K-quant (Q2_K .. Q6_K) integer matmul paths beyond
 * quant.h's portable and AVX2 ones: the dispatching entry quant.c calls, the
 * AVX-512 kernel, the AMX-INT8 kernel (quant_k_amx.c, Q4_K / Q6_K), and the
 * scale unpacking they share. Every path computes the one reduction order
 * documented in quant_k.c, bit for bit.
 */
#ifndef VLLM_KERNELS_QUANT_K_H
#define VLLM_KERNELS_QUANT_K_H

#include "kernels/quant.h"

#include <string.h>

/* quant_matmul_act_range for a K type on this process's path: AMX tiles for
 * groups of 4+ tokens when quant_use_amx(), the AVX2 kernel for the rest (and
 * on the AVX2 / AVX-512 levels), portable C below AVX2. */
void quant_matmul_act_range_k(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* True for the K types the AMX kernel takes (Q4_K, Q6_K); the others stay
 * on the AVX-512 / AVX2 kernels for every token count. */
static inline bool quant_k_amx_takes(dtype t) { return t == DTYPE_Q4_K || t == DTYPE_Q6_K; }

/* The AMX kernel on its own, any token count (for tests and benchmarks).
 * Aborts unless quant_amx_available() and quant_k_amx_takes(type). */
void quant_matmul_act_range_k_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                  int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* The AVX-512 VNNI kernel on its own (quant_k_avx512.c), any token count.
 * Aborts unless kernels_cpu_has_avx512() and quant_is_k(type). */
void quant_matmul_act_range_k_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* ---- Q4_K's x16 copies (quant_k_x16.c; layout: quant.h, QUANT_X16_Q4_K_REC) ---- */

/* True when Q4_K calls read x16 copies: the AVX2 and AVX-512 levels
 * without AMX tiles (quant_use_amx(): they keep the AMX kernel), unless
 * VLLM_QUANT_K_X16=0. Decided once per process. On the AVX2 level a
 * single-token call still reads the GGUF rows (quant_k_x16.c). */
bool quant_k_use_x16(void);
/* Groups [g0, g1) of the n-row Q4_K matrix src (rows of k elements) into
 * their records at dst (quant_repack_x16 calls it for Q4_K). */
void quant_repack_x16_q4_k(const void *src, void *dst, int64_t g0, int64_t g1, int64_t k);
/* quant_matmul_act_range for a K type with an x16 copy (or NULL): the
 * whole 16-row groups inside [r0, r1) from the copy when the type has one
 * (Q4_K) and quant_k_use_x16(), the rest (and everything otherwise) on
 * quant_matmul_act_range_k; the same bits either way. */
void quant_matmul_act_range_k_x16(dtype type, const void *w, const void *x16, int64_t k, const void *xq,
                                  int64_t ldxq, float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0,
                                  int64_t t1);
/* The x16 kernels on their own: w the copy's start, rows [r0, r1)
 * multiples of 16, type Q4_K (abort otherwise); the AVX-512 one aborts
 * unless kernels_cpu_has_avx512(), the AVX2 one unless
 * kernels_cpu_has_avx2(). The portable one is the mirror in C. */
void quant_matmul_act_range_x16_k_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                         float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_x16_k_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                       float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_x16_k_portable(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                           float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* A Q4_K super-block's eight 6-bit scales (sc8) and mins (m8), one per byte,
 * block j in byte j: the 12 scale bytes at b + 4 read as three words
 * (scales 0..3 = u0 & 63, 4..7 = (u2 & 15) | (u0 >> 6) << 4; mins 0..3 =
 * u1 & 63, 4..7 = (u2 >> 4 & 15) | (u1 >> 6) << 4: quant_k.c's q4k_scale_min). */
static inline void q4_k_scales_mins(const uint8_t *b, uint64_t *sc8, uint64_t *m8) {
    uint32_t u[3];
    memcpy(u, b + 4, 12);
    const uint32_t k63 = 0x3f3f3f3f, k15 = 0x0f0f0f0f, k3 = 0x03030303;
    *sc8 = (u[0] & k63) | (uint64_t)((u[2] & k15) | (((u[0] >> 6) & k3) << 4)) << 32;
    *m8 = (u[1] & k63) | (uint64_t)(((u[2] >> 4) & k15) | (((u[1] >> 6) & k3) << 4)) << 32;
}

/* Q3_K's sixteen scales minus 32 (-32..31), sub-block j in out[j], from
 * the 12 bytes at s (ggml's unpacking: four 32-bit words of low nibbles
 * and 2-bit high parts). */
static inline void q3_k_scales(const uint8_t *s, int8_t out[16]) {
    const uint32_t k15 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t a[3], r[4];
    memcpy(a, s, 12);
    r[0] = (a[0] & k15) | ((a[2] >> 0) & k3) << 4;
    r[1] = (a[1] & k15) | ((a[2] >> 2) & k3) << 4;
    r[2] = ((a[0] >> 4) & k15) | ((a[2] >> 4) & k3) << 4;
    r[3] = ((a[1] >> 4) & k15) | ((a[2] >> 6) & k3) << 4;
    uint8_t u[16];
    memcpy(u, r, 16);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(u[j] - 32);
}

#if defined(__x86_64__)
#include <immintrin.h>

/* The documented final sum of the eight accumulators:
 * ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)). */
static inline __attribute__((always_inline, target("avx2"))) float quant_k_reduce8_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* s[l] = v[l] + v[l+4] */
    __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));                                 /* s0+s2, s1+s3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/* Half h (0/1) of a Q6_K super-block b as signed values q6 - 32 (-32..31):
 * w[i] = the 32 weights of activation block 4h + i (quant_k.c's layout). */
static inline __attribute__((always_inline, target("avx2"))) void q6_k_unpack_half_avx2(const uint8_t *b, int h,
                                                                                         __m256i w[4]) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
    w[0] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)), k32);
    w[1] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)), k32);
    w[2] = _mm256_sub_epi8(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30)), k32);
    w[3] = _mm256_sub_epi8(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
        k32);
}
#endif

#endif
