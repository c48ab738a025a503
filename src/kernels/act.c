/*
 * act.c - the gated activations of the MLP:
 *   SwiGLU (Llama):  silu(gate) * up, silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
 *                    as torch computes it;
 *   GeGLU (Gemma):   gelu_tanh(gate) * up, torch's gelu(approximate="tanh"):
 *                    0.5 g (1 + tanh(y)), y = sqrt(2/pi) (g + 0.044715 g^3).
 *
 * Elementwise, so any path is batch invariant. The AVX2 and AVX-512 paths use
 * the vexp.h polynomial (about 1 ulp from libm's expf, which the portable
 * path calls); exp's argument is clamped to [-87.3, 88.3], where exp(-g) is
 * already 0 or near FLT_MAX, so silu is 0 * u or g * u there up to rounding.
 * GeGLU's vector paths write 0.5 (1 + tanh(y)) as the logistic 1 / (1 +
 * exp(-2y)) (the same function, one exp instead of a tanh) with the same
 * clamp; the portable path keeps torch's formula with libm's tanhf. A
 * reference in double (act_geglu_naive) is what tests compare them with.
 */
#include <math.h>

#include "kernels/kernels.h"

void act_swiglu_portable(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float sigmoid = 1.0f / (1.0f + expf(-g[i]));
        g[i] = (g[i] * sigmoid) * u[i];
    }
}

/* sqrt(2/pi), as torch's kBeta = M_SQRT2 * M_2_SQRTPI * 0.5 */
#define GELU_BETA 0.7978845608028654
#define GELU_KAPPA 0.044715

void act_geglu_portable(float *g, const float *u, int64_t n) {
    const float beta = (float)GELU_BETA, kappa = (float)GELU_KAPPA;
    for (int64_t i = 0; i < n; i++) {
        float x = g[i], inner = beta * (x + kappa * (x * x * x));
        g[i] = (0.5f * x * (1.0f + tanhf(inner))) * u[i];
    }
}

void act_geglu_naive(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double x = g[i];
        g[i] = (float)(0.5 * x * (1.0 + tanh(GELU_BETA * (x + GELU_KAPPA * x * x * x))) * u[i]);
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
/* x / (1 + exp(-2y)) * u with y = beta (x + kappa x^3): gelu_tanh(x) * u. */
__attribute__((target("avx2,fma"))) void act_geglu_avx2(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(88.3f);
    const __m256 m2beta = _mm256_set1_ps((float)(-2 * GELU_BETA)), kappa = _mm256_set1_ps((float)GELU_KAPPA);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 arg = _mm256_mul_ps(m2beta, _mm256_fmadd_ps(kappa, x3, x)); /* -2y */
        __m256 e = vexp_avx2(_mm256_min_ps(arg, hi));
        __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_mul_ps(x, s), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        float gb[8] = {0}, ub[8] = {0};
        for (int64_t j = i; j < n; j++) gb[j - i] = g[j], ub[j - i] = u[j];
        act_geglu_avx2(gb, ub, 8);
        for (int64_t j = i; j < n; j++) g[j] = gb[j - i];
    }
}

__attribute__((target("avx512f,avx2,fma"))) void act_geglu_avx512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), hi = _mm512_set1_ps(88.3f);
    const __m512 m2beta = _mm512_set1_ps((float)(-2 * GELU_BETA)), kappa = _mm512_set1_ps((float)GELU_KAPPA);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 arg = _mm512_mul_ps(m2beta, _mm512_fmadd_ps(kappa, x3, x));
        __m512 e = vexp_avx512(_mm512_min_ps(arg, hi));
        __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_mul_ps(x, s), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
#else
void act_swiglu_avx2(float *g, const float *u, int64_t n) { act_swiglu_portable(g, u, n); }
void act_swiglu_avx512(float *g, const float *u, int64_t n) { act_swiglu_portable(g, u, n); }
void act_geglu_avx2(float *g, const float *u, int64_t n) { act_geglu_portable(g, u, n); }
void act_geglu_avx512(float *g, const float *u, int64_t n) { act_geglu_portable(g, u, n); }
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

void act_geglu(float *g, const float *u, int64_t n) {
    kernels_isa isa = kernels_isa_get();
    if (isa >= KERNELS_ISA_AVX512)
        act_geglu_avx512(g, u, n);
    else if (isa >= KERNELS_ISA_AVX2)
        act_geglu_avx2(g, u, n);
    else
        act_geglu_portable(g, u, n);
}
