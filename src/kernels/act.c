/*
 * act.c - the SwiGLU activation of Llama's MLP: silu(gate) * up, with
 * silu(g) = g * sigmoid(g) = g * 1 / (1 + exp(-g)) as torch computes it.
 *
 * Elementwise, so any path is batch invariant. The AVX2 and AVX-512 paths use
 * the vexp.h polynomial (about 1 ulp from libm's expf, which the portable
 * path calls); exp's argument is clamped to [-87.3, 88.3], where exp(-g) is
 * already 0 or near FLT_MAX, so silu is 0 * u or g * u there up to rounding.
 */
#include <math.h>

#include "kernels/kernels.h"

void act_swiglu_portable(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float sigmoid = 1.0f / (1.0f + expf(-g[i]));
        g[i] = (g[i] * sigmoid) * u[i];
    }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/vexp.h"

__attribute__((target("avx2,fma"))) void act_swiglu_avx2(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(88.3f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = vexp_avx2(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), hi));
        __m256 sigmoid = _mm256_div_ps(one, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_mul_ps(x, sigmoid), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        float gb[8] = {0}, ub[8] = {0};
        for (int64_t j = i; j < n; j++) gb[j - i] = g[j], ub[j - i] = u[j];
        act_swiglu_avx2(gb, ub, 8);
        for (int64_t j = i; j < n; j++) g[j] = gb[j - i];
    }
}

__attribute__((target("avx512f,avx2,fma"))) void act_swiglu_avx512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), hi = _mm512_set1_ps(88.3f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 e = vexp_avx512(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), hi));
        __m512 sigmoid = _mm512_div_ps(one, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sigmoid), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
#else
void act_swiglu_avx2(float *g, const float *u, int64_t n) { act_swiglu_portable(g, u, n); }
void act_swiglu_avx512(float *g, const float *u, int64_t n) { act_swiglu_portable(g, u, n); }
#endif

void act_swiglu(float *g, const float *u, int64_t n) {
    kernels_isa isa = kernels_isa_get();
    if (isa >= KERNELS_ISA_AVX512)
        act_swiglu_avx512(g, u, n);
    else if (isa >= KERNELS_ISA_AVX2)
        act_swiglu_avx2(g, u, n);
    else
        act_swiglu_portable(g, u, n);
}
