/* dtype.h - element types of weights and KV, and scalar conversions. */
#ifndef VLLM_BASE_DTYPE_H
#define VLLM_BASE_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16,
    DTYPE_BF16,
    DTYPE_COUNT
} dtype;

static inline size_t dtype_size(dtype t) { return t == DTYPE_F32 ? 4 : 2; }
static inline const char *dtype_name(dtype t) {
    return t == DTYPE_F32 ? "F32" : t == DTYPE_F16 ? "F16" : "BF16";
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static inline uint16_t f32_to_f16(float f) {
    _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}

#endif
