/*
 * rope.c - rotary position embedding in Hugging Face's rotate_half layout:
 *     x * cos + rotate_half(x) * sin,  rotate_half(x1, x2) = (-x2, x1)
 * where x1, x2 are the two halves of a head and element i of each half turns
 * by angle pos * inv_freq[i] (an F32 product, as HF computes it). inv_freq,
 * with its rope_scaling, is the runner's business.
 * rope_apply_interleaved is the same rotation on adjacent pairs (2i, 2i+1),
 * for GGUF q/k rows in llama.cpp's order.
 */
#include <math.h>

#include "kernels/kernels.h"

void rope_cos_sin(float *cos, float *sin, const float *inv_freq, int32_t half, int32_t pos) {
    for (int32_t i = 0; i < half; i++) {
        float angle = (float)pos * inv_freq[i];
        cos[i] = cosf(angle);
        sin[i] = sinf(angle);
    }
}

void rope_apply(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin) {
    int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * cos[i] - x2 * sin[i];
            xh[i + half] = x2 * cos[i] + x1 * sin[i];
        }
    }
}

void rope_apply_interleaved(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin) {
    int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            float x1 = xh[2 * i], x2 = xh[2 * i + 1];
            xh[2 * i] = x1 * cos[i] - x2 * sin[i];
            xh[2 * i + 1] = x2 * cos[i] + x1 * sin[i];
        }
    }
}
