/*
 * norm.c - RMSNorm, from HF LlamaRMSNorm in F32:  w * (x * rsqrt(mean(x^2) + eps)),
 * and Gemma's variant (Gemma3RMSNorm), which scales by (1 + w) computed in F32:
 * w_offset 1.
 *
 * The sum of squares runs in a fixed 8-lane order (lane l takes elements
 * i = l mod 8, then (l0+l4, l1+l5, l2+l6, l3+l7) -> pairs -> one), like
 * matmul's dot products, so it depends only on the row itself. Plain C that the
 * compiler vectorizes without reassociating (we never build with -ffast-math).
 */
#include <math.h>

#include "kernels/kernels.h"

void norm_rms(float *out, const float *x, const void *w, dtype wtype, int64_t n, float eps, float w_offset) {
    float acc[8] = {0};
    int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * x[i + l];
    for (int64_t i = n8; i < n; i++) acc[i - n8] += x[i] * x[i];
    float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6], a3 = acc[3] + acc[7];
    float ss = (a0 + a2) + (a1 + a3);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    if (w_offset == 0.0f) /* Llama's norm, without the (w + 0) */
        for (int64_t i = 0; i < n; i++) out[i] = kernels_weight_at(w, wtype, i) * (x[i] * scale);
    else
        for (int64_t i = 0; i < n; i++) out[i] = (kernels_weight_at(w, wtype, i) + w_offset) * (x[i] * scale);
}

void norm_rms_naive(float *out, const float *x, const void *w, dtype wtype, int64_t n, float eps, float w_offset) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)(((double)kernels_weight_at(w, wtype, i) + w_offset) * (x[i] * scale));
}
