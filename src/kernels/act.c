/*
 * act.c - the SwiGLU activation of Llama's MLP: silu(gate) * up, with
 * silu(g) = g * sigmoid(g) = g * 1 / (1 + exp(-g)) as torch computes it.
 */
#include <math.h>

#include "kernels/kernels.h"

void act_swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float sigmoid = 1.0f / (1.0f + expf(-g[i]));
        g[i] = (g[i] * sigmoid) * u[i];
    }
}
