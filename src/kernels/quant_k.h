/*
 * quant_k.h - the K-quant (Q4_K / Q6_K) integer matmul paths beyond quant.h's
 * portable and AVX2 ones: the dispatching entry quant.c calls, and the
 * AMX-INT8 kernel (quant_k_amx.c). Every path computes the one reduction
 * order documented in quant_k.c, bit for bit.
 */
#ifndef VLLM_KERNELS_QUANT_K_H
#define VLLM_KERNELS_QUANT_K_H

#include "kernels/quant.h"

/* quant_matmul_act_range for a K type on this process's path: AMX tiles for
 * groups of 4+ tokens when quant_use_amx(), the AVX2 kernel for the rest (and
 * on the AVX2 / AVX-512 levels), portable C below AVX2. */
void quant_matmul_act_range_k(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* The AMX kernel on its own, any token count (for tests and benchmarks).
 * Aborts unless quant_amx_available() and quant_is_k(type). */
void quant_matmul_act_range_k_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                  int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

#if defined(__x86_64__)
#include <immintrin.h>

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
