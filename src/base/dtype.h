/*
 * dtype.h - element types of weights and KV, and scalar conversions.
 *
 * F32/F16/BF16 are scalar types. The block-quantized types are ggml's (GGUF
 * files): a row of n elements (n a multiple of dtype_block_elems) is n /
 * dtype_block_elems blocks of dtype_block_bytes bytes; kernels/quant.h has
 * every layout byte by byte.
 */
#ifndef VLLM_BASE_DTYPE_H
#define VLLM_BASE_DTYPE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16,
    DTYPE_BF16,
    DTYPE_Q8_0, /* 32 elements: f16 scale d, int8 q[32]; x = d * q */
    DTYPE_Q4_0, /* 32 elements: f16 scale d, 16 bytes of nibbles; x = d * (q - 8) */
    DTYPE_Q4_K, /* 256 elements, 144 bytes: 8 sub-blocks of 32 with 6-bit scales/mins */
    DTYPE_Q6_K, /* 256 elements, 210 bytes: 16 sub-blocks of 16 with int8 scales */
    DTYPE_Q4_1, /* 32 elements, 20 bytes: f16 d, f16 m, nibbles; x = d * q + m */
    DTYPE_Q5_0, /* 32 elements, 22 bytes: f16 d, 32 high bits, nibbles; x = d * (q - 16) */
    DTYPE_Q5_1, /* 32 elements, 24 bytes: f16 d, f16 m, 32 high bits, nibbles; x = d * q + m */
    DTYPE_IQ4_NL, /* 32 elements, 18 bytes: f16 d, nibbles indexing a 16-value table; x = d * kv[q] */
    DTYPE_Q2_K, /* 256 elements, 84 bytes: 16 sub-blocks of 16 with 4-bit scales/mins, 2-bit q */
    DTYPE_Q3_K, /* 256 elements, 110 bytes: 16 sub-blocks of 16 with 6-bit scales, 3-bit q */
    DTYPE_Q5_K, /* 256 elements, 176 bytes: Q4_K's scales/mins, 5-bit q */
    DTYPE_COUNT
} dtype;

/* Bytes per element of a scalar type; 0 for block-quantized types (use
 * dtype_row_bytes for those). */
static inline size_t dtype_size(dtype t) {
    return t == DTYPE_F32 ? 4 : t == DTYPE_F16 || t == DTYPE_BF16 ? 2 : 0;
}
static inline bool dtype_is_quantized(dtype t) { return t >= DTYPE_Q8_0 && t < DTYPE_COUNT; }
/* Elements per block: 1 for scalar types. */
static inline int64_t dtype_block_elems(dtype t) {
    switch (t) {
    case DTYPE_Q8_0: case DTYPE_Q4_0: case DTYPE_Q4_1: case DTYPE_Q5_0: case DTYPE_Q5_1: case DTYPE_IQ4_NL: return 32;
    case DTYPE_Q4_K: case DTYPE_Q6_K: case DTYPE_Q2_K: case DTYPE_Q3_K: case DTYPE_Q5_K: return 256;
    default: return 1;
    }
}
/* Bytes per block (= dtype_size for scalar types). */
static inline size_t dtype_block_bytes(dtype t) {
    switch (t) {
    case DTYPE_Q8_0: return 34;
    case DTYPE_Q4_0: return 18;
    case DTYPE_Q4_K: return 144;
    case DTYPE_Q6_K: return 210;
    case DTYPE_Q4_1: return 20;
    case DTYPE_Q5_0: return 22;
    case DTYPE_Q5_1: return 24;
    case DTYPE_IQ4_NL: return 18;
    case DTYPE_Q2_K: return 84;
    case DTYPE_Q3_K: return 110;
    case DTYPE_Q5_K: return 176;
    default: return dtype_size(t);
    }
}
/* Bytes of a row of n elements; n must be a multiple of dtype_block_elems. */
static inline size_t dtype_row_bytes(dtype t, int64_t n) {
    return (size_t)(n / dtype_block_elems(t)) * dtype_block_bytes(t);
}
static inline const char *dtype_name(dtype t) {
    static const char *const names[] = {"F32",  "F16",  "BF16",   "Q8_0", "Q4_0", "Q4_K", "Q6_K",
                                        "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K", "Q5_K"};
    _Static_assert(sizeof names / sizeof names[0] == DTYPE_COUNT, "a name per dtype");
    return (unsigned)t < DTYPE_COUNT ? names[t] : "?";
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
