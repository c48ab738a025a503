/*
 * kv_dtype.h - the element type of the paged KV cache (--kv-cache-dtype) and
 * its conversions to and from F32.
 *
 *   float32   4 bytes   what vllm.c always stored before (an extension: vLLM
 *                       has no float32 value; here it is the exact choice)
 *   bfloat16  2 bytes   the upper half of an F32 (8-bit exponent, 7-bit mantissa)
 *   float16   2 bytes   IEEE binary16
 *   fp8_e4m3  1 byte    OCP FP8 E4M3 ("e4m3fn": no infinities, S.1111.111 is
 *                       NaN, largest finite 448, smallest subnormal 2^-9)
 *   fp8_e5m2  1 byte    OCP FP8 E5M2 (binary16's upper byte: infinities and
 *                       NaNs as IEEE, largest finite 57344, smallest 2^-16)
 *
 * Stores round to nearest, ties to even, from F32, as torch's casts
 * (x.to(torch.bfloat16), ...) do. bfloat16 and float16 overflow to infinity
 * as torch's casts do. Both FP8 types saturate: a finite value beyond the
 * largest finite one, and an infinity, store as that largest value with the
 * sign kept (what vLLM's CUDA cache writes do with __NV_SATFINITE, and what
 * torch's float8_e4m3fn cast does; torch's float8_e5m2 cast overflows to
 * infinity instead, so the tests clamp before casting for e5m2). NaN stores
 * as a NaN (the payload is not kept; tests compare NaN-ness only).
 *
 * Loads are exact: every value of each type is an F32. The scalar
 * functions here are the reference; the vector loads the attention kernel
 * uses (kv_dtype_x86.h) give the same bits, which kv_dtype_to_f32_* let the
 * tests check over every code.
 *
 * FP8 scales (vLLM's per-tensor k_scale / v_scale, one pair per layer,
 * default 1.0 or from the checkpoint): stored = fp8(x / scale), read =
 * stored * scale. The attention kernel folds k_scale into the score scale
 * and v_scale into the final division (kernels.h, attention_args). Other
 * types ignore scales, as vLLM does when the cache is not FP8.
 */
#ifndef VLLM_KERNELS_KV_DTYPE_H
#define VLLM_KERNELS_KV_DTYPE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"

typedef enum kv_dtype {
    KV_DTYPE_F32 = 0, /* the zero value: a zeroed config keeps the F32 pool */
    KV_DTYPE_BF16,
    KV_DTYPE_F16,
    KV_DTYPE_FP8_E4M3,
    KV_DTYPE_FP8_E5M2,
    KV_DTYPE_COUNT
} kv_dtype;

/* The --kv-cache-dtype values the engine accepts, for messages. */
#define KV_DTYPE_CHOICES "'auto', 'bfloat16', 'float16', 'float32', 'fp8', 'fp8_e4m3', 'fp8_e5m2'"

static inline size_t kv_dtype_size(kv_dtype t) {
    return t == KV_DTYPE_F32 ? 4 : t == KV_DTYPE_BF16 || t == KV_DTYPE_F16 ? 2 : 1;
}
static inline bool kv_dtype_is_fp8(kv_dtype t) { return t == KV_DTYPE_FP8_E4M3 || t == KV_DTYPE_FP8_E5M2; }

/* vLLM's spelling of each type ("float32", "bfloat16", "float16",
 * "fp8_e4m3", "fp8_e5m2"). */
const char *kv_dtype_name(kv_dtype t);

/* A --kv-cache-dtype value other than "auto" to its type: the names above,
 * and "fp8" = fp8_e4m3 (vLLM's meaning on CUDA and in OCP). False if the
 * name is none of them (the caller names KV_DTYPE_CHOICES). */
bool kv_dtype_from_name(const char *name, kv_dtype *out);

/* ---- scalar conversions: the reference ----------------------------------- */

static inline float fp8_e4m3_to_f32(uint8_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float v = e == 15 && m == 7 ? NAN : e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
    return c & 0x80 ? -v : v;
}

static inline float fp8_e5m2_to_f32(uint8_t c) {
    int e = (c >> 2) & 31, m = c & 3;
    float v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexpf((float)(4 + m), e - 17) : ldexpf((float)m, -16);
    return c & 0x80 ? -v : v;
}

/* F32 to an FP8 type with mbits mantissa bits and exponent bias `bias`:
 * saturating at max (see the top), round to nearest even. Subnormals
 * (below 2^(1 - bias)) are the integer nearest to x * 2^(bias - 1 + mbits),
 * which is exact to form and rounds ties to even (nearbyintf in the default
 * rounding mode); normals round the F32 mantissa at bit 23 - mbits, a carry
 * moving into the exponent. */
static inline uint8_t fp8_from_f32(float x, int mbits, int bias, float max, uint8_t nan) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    float a = fabsf(x);
    if (isnan(a)) return (uint8_t)(sign | nan);
    if (a > max) a = max;
    if (a < ldexpf(1.0f, 1 - bias)) return (uint8_t)(sign | (uint8_t)nearbyintf(ldexpf(a, bias - 1 + mbits)));
    memcpy(&u, &a, 4);
    int shift = 23 - mbits;
    u += ((1u << shift) >> 1) - 1 + ((u >> shift) & 1);
    int e = (int)(u >> 23) - 127 + bias;
    return (uint8_t)(sign | (uint8_t)(e << mbits) | (uint8_t)((u >> shift) & ((1u << mbits) - 1)));
}

static inline uint8_t f32_to_fp8_e4m3(float x) { return fp8_from_f32(x, 3, 7, 448.0f, 0x7f); }
static inline uint8_t f32_to_fp8_e5m2(float x) { return fp8_from_f32(x, 2, 15, 57344.0f, 0x7f); }

/* Element i of an array of type t, as F32. */
static inline float kv_dtype_load(const void *p, kv_dtype t, int64_t i) {
    switch (t) {
    case KV_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case KV_DTYPE_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case KV_DTYPE_FP8_E4M3: return fp8_e4m3_to_f32(((const uint8_t *)p)[i]);
    case KV_DTYPE_FP8_E5M2: return fp8_e5m2_to_f32(((const uint8_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Stores x as element i of an array of type t (rounded as the top says). */
static inline void kv_dtype_store(void *p, kv_dtype t, int64_t i, float x) {
    switch (t) {
    case KV_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16(x); break;
    case KV_DTYPE_F16: ((uint16_t *)p)[i] = f32_to_f16(x); break;
    case KV_DTYPE_FP8_E4M3: ((uint8_t *)p)[i] = f32_to_fp8_e4m3(x); break;
    case KV_DTYPE_FP8_E5M2: ((uint8_t *)p)[i] = f32_to_fp8_e5m2(x); break;
    default: ((float *)p)[i] = x; break;
    }
}

/* ---- bulk loads, per instruction set (for tests) ---------------------------- */

/* dst[i] = element i of src (type t) for i < n, with the vector loads of
 * one path (avx2 needs kernels_cpu_has_avx2(), avx512
 * kernels_cpu_has_avx512()), whole vectors then a masked or padded partial
 * one, as the attention kernel reads them; portable = kv_dtype_load. */
void kv_dtype_to_f32_portable(kv_dtype t, const void *src, float *dst, int64_t n);
void kv_dtype_to_f32_avx2(kv_dtype t, const void *src, float *dst, int64_t n);
void kv_dtype_to_f32_avx512(kv_dtype t, const void *src, float *dst, int64_t n);

#endif
