/*
 * quant.c - ggml block formats: reference (de)quantizers and the fixed-order
 * dot kernels (see quant.h for the layouts and the reduction order).
 *
 * Two implementations of the one reduction order:
 *   - portable: decode up to 256 elements into a stack buffer, then fmaf into
 *     acc[4][8] exactly as the vector lanes would;
 *   - AVX2 (compiled with target attributes, chosen at run time): Q8_0 and
 *     Q4_0 blocks are decoded in registers (int8 -> int32 -> float, times d)
 *     and used for two tokens at a time; other dtypes go through the same
 *     stack buffer as the portable path.
 * Decoding gives the same floats as quant_dequantize_row (one multiply by d),
 * and every accumulation is a fused multiply-add in the same order, so the two
 * paths, and any split of tokens or rows, agree bit for bit.
 *
 * The integer path (Q8_0/Q4_0 weights against 8-bit activations, quant.h)
 * is what makes these types fast: a block costs a 32-byte load, abs/sign,
 * one maddubs (u8 x s8 -> pairs in int16, which cannot saturate since |w| <=
 * 128 and |xq| <= 127), one madd to int32, one convert and one FMA, instead
 * of four int8 -> float widenings and four FMAs per token. The AVX2 kernel
 * works on 2 weight rows x up to 4 tokens (4 rows x 1 token at decode) so
 * each decoded weight block is reused and the FMA chains are independent.
 * On AVX2 and AVX-512 machines quant_matmul_act_range uses the block order:
 * the x16 kernels (quant_avx512.c with VNNI, quant_block_avx2.c with AVX2
 * only) on the repacked copy the caller passes with the weight (the
 * model's, quant.h), with AMX-INT8 tiles (quant_amx.c) for 8+ tokens where
 * present; VLLM_QUANT_ORDER=wide (AVX-512) or narrow (AVX2) keeps the row
 * kernels above (quant_act_order() names the order the process uses). Rows
 * without a copy (no copy passed, or outside whole 16-row groups) take the
 * same level's block-order row kernel: one process keeps one order.
 * The K-quants' integer dots live in quant_k.c (one order of their own on
 * every path); Q4_1 / Q5_0 / Q5_1 / IQ4_NL take the wide order everywhere
 * (portable C here, quant_wide_avx2.c, quant_avx512.c); the entry points
 * here route both.
 */
#include "kernels/quant.h"

#include "kernels/kernels.h"
#include "kernels/quant_k.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define QUANT_HAVE_X86 1
#endif

static inline uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void store_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* ggml's roundf: half away from zero. */
static inline int round_away(float x) { return (int)roundf(x); }

/* ---- dequantize ---------------------------------------------------------- */

static void dequant_q8_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
        float d = f16_to_f32(load_u16(b));
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

static void dequant_q4_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        float d = f16_to_f32(load_u16(b));
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[2 + j] & 15) - 8) * d;
            y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

/* Q4_K's 12 scale bytes hold eight 6-bit scales and eight 6-bit mins: for
 * j < 4 the low 6 bits of bytes j (scale) and j+4 (min); for j >= 4 the
 * nibbles of byte j+4 as the low 4 bits and the top 2 bits of bytes j-4
 * (scale) and j (min) as the high 2 bits. */
static void q4_k_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void dequant_q4_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 144) {
        float d = f16_to_f32(load_u16(b)), dmin = f16_to_f32(load_u16(b + 2));
        const uint8_t *scales = b + 4, *q = b + 16;
        for (int p = 0; p < 4; p++, q += 32) {
            int sc0, m0, sc1, m1;
            q4_k_scale_min(2 * p, scales, &sc0, &m0);
            q4_k_scale_min(2 * p + 1, scales, &sc1, &m1);
            float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) y[l] = d0 * (float)(q[l] & 15) - mm0;
            for (int l = 0; l < 32; l++) y[32 + l] = d1 * (float)(q[l] >> 4) - mm1;
            y += 64;
        }
    }
}

/* Q6_K: each half of 128 elements uses 64 bytes of ql and 32 of qh; element
 * l + 32r (r = 0..3, l < 32) takes its low nibble from ql[l + 32(r&1)] (low
 * nibble for r < 2, high for r >= 2) and bits 2r..2r+1 of qh[l] as bits 4-5;
 * its scale is scales[l/16 + 2r] of that half's 8. */
static void dequant_q6_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 210) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16_to_f32(load_u16(b + 208));
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* The 32-element types with a minimum or a fifth bit (quant.h): element j
 * of a block takes its low four bits from qs[j % 16] (low nibble for j <
 * 16, high for j >= 16) and, for Q5, bit j of the 32-bit word qh. */
static inline int nib32(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }
static inline uint32_t load_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void dequant_q4_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
        float d = f16_to_f32(load_u16(b)), m = f16_to_f32(load_u16(b + 2));
        for (int j = 0; j < 32; j++) y[j] = (float)nib32(b + 4, j) * d + m;
    }
}

static void dequant_q5_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
        float d = f16_to_f32(load_u16(b));
        uint32_t qh = load_u32(b + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)((nib32(b + 6, j) | (int)((qh >> j) & 1) << 4) - 16) * d;
    }
}

static void dequant_q5_1(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
        float d = f16_to_f32(load_u16(b)), m = f16_to_f32(load_u16(b + 2));
        uint32_t qh = load_u32(b + 4);
        for (int j = 0; j < 32; j++) y[j] = (float)(nib32(b + 8, j) | (int)((qh >> j) & 1) << 4) * d + m;
    }
}

static void dequant_iq4_nl(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        float d = f16_to_f32(load_u16(b));
        for (int j = 0; j < 32; j++) y[j] = d * (float)quant_iq4nl_values[nib32(b + 2, j)];
    }
}

/* Q2_K and Q3_K: element e = 128h + 32r + l (h < 2, r < 4, l < 32) takes
 * bits 2r..2r+1 of qs[32h + l] and sub-block 8h + 2r + l/16's scale; Q3_K's
 * third bit is bit 4h + r of hmask[l], set meaning "no - 4". */
static void dequant_q2_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 84) {
        const uint8_t *sc = b, *qs = b + 16;
        float d = f16_to_f32(load_u16(b + 80)), dmin = f16_to_f32(load_u16(b + 82));
        for (int e = 0; e < 256; e++, y++) {
            int h = e / 128, r = e % 128 / 32, l = e % 32, s = sc[8 * h + 2 * r + l / 16];
            float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
            *y = dl * (float)((qs[32 * h + l] >> (2 * r)) & 3) - ml;
        }
    }
}

/* Q3_K's sixteen 6-bit scales (minus 32) from its 12 bytes: scale j has its
 * low nibble in byte j % 8 (low nibble for j < 8, high for j >= 8) and its
 * top two bits at bits 2 * (j / 4) of byte 8 + j % 4. */
static inline int q3_k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

static void dequant_q3_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 110) {
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float d = f16_to_f32(load_u16(b + 108));
        for (int e = 0; e < 256; e++, y++) {
            int h = e / 128, r = e % 128 / 32, l = e % 32;
            float dl = d * (float)q3_k_scale(sc, 8 * h + 2 * r + l / 16);
            int q = ((qs[32 * h + l] >> (2 * r)) & 3) - ((hm[l] >> (4 * h + r)) & 1 ? 0 : 4);
            *y = dl * (float)q;
        }
    }
}

/* Q5_K: Q4_K's scales and nibbles, plus bit j of qh[l] as bit 4 of element
 * 32j + l. */
static void dequant_q5_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 176) {
        float d = f16_to_f32(load_u16(b)), dmin = f16_to_f32(load_u16(b + 2));
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
        for (int j = 0; j < 8; j++, y += 32) {
            int sc, m;
            q4_k_scale_min(j, scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = ((qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15) | ((qh[l] >> j) & 1) << 4;
                y[l] = dl * (float)q - ml;
            }
        }
    }
}

void quant_dequantize_row(dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    switch (t) {
    case DTYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(load_u16(b + 2 * i));
        break;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(load_u16(b + 2 * i));
        break;
    case DTYPE_Q8_0: dequant_q8_0(b, dst, n / 32); break;
    case DTYPE_Q4_0: dequant_q4_0(b, dst, n / 32); break;
    case DTYPE_Q4_K: dequant_q4_k(b, dst, n / 256); break;
    case DTYPE_Q6_K: dequant_q6_k(b, dst, n / 256); break;
    case DTYPE_Q4_1: dequant_q4_1(b, dst, n / 32); break;
    case DTYPE_Q5_0: dequant_q5_0(b, dst, n / 32); break;
    case DTYPE_Q5_1: dequant_q5_1(b, dst, n / 32); break;
    case DTYPE_IQ4_NL: dequant_iq4_nl(b, dst, n / 32); break;
    case DTYPE_Q2_K: dequant_q2_k(b, dst, n / 256); break;
    case DTYPE_Q3_K: dequant_q3_k(b, dst, n / 256); break;
    case DTYPE_Q5_K: dequant_q5_k(b, dst, n / 256); break;
    default: abort(); /* not a dtype: a caller bug that would read out of bounds */
    }
}

/* ---- quantize ------------------------------------------------------------ */

void quant_quantize_row_q8_0(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127, id = d != 0 ? 1 / d : 0;
        store_u16(b, f32_to_f16(d));
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)round_away(x[j] * id);
    }
}

void quant_quantize_row_q4_0(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += 18) {
        float amax = 0, max = 0; /* max: the element of largest magnitude, signed */
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        float d = max / -8, id = d != 0 ? 1 / d : 0;
        store_u16(b, f32_to_f16(d));
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(int8_t)(x[j] * id + 8.5f), q1 = (int)(int8_t)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- the x16 layout --------------------------------------------------------- */

void quant_repack_x16(dtype type, const void *src, void *dst, int64_t g0, int64_t g1, int64_t k) {
    if (type == DTYPE_Q4_K) {
        quant_repack_x16_q4_k(src, dst, g0, g1, k);
        return;
    }
    const size_t stride = dtype_row_bytes(type, k), bb = dtype_block_bytes(type), rec = 16 * bb;
    const int64_t nb = k / QUANT_QK, nq = type == DTYPE_Q8_0 ? 8 : 4; /* dwords of quants per row block */
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (g * nb + b) * rec;
            for (int r = 0; r < 16; r++) {
                const uint8_t *i = (const uint8_t *)src + (g * 16 + r) * stride + b * bb;
                memcpy(o + 2 * r, i, 2);
                for (int j = 0; j < nq; j++) memcpy(o + 32 + 64 * j + 4 * r, i + 2 + 4 * j, 4);
            }
        }
}

/* ---- portable fixed-order dot -------------------------------------------- */

#define CHUNK 256 /* elements decoded at a time: one K block, eight 32-blocks */

static inline float reduce_acc(float acc[4][8]) {
    float v[8], s[4];
    for (int l = 0; l < 8; l++) v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    for (int l = 0; l < 4; l++) s[l] = v[l] + v[l + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

/* Decodes elements [i, i + len) of row (i, len multiples of the block size). */
static void decode_chunk(dtype t, const uint8_t *row, int64_t i, int64_t len, float *w) {
    quant_dequantize_row(t, row + dtype_row_bytes(t, i), w, len);
}

float quant_dot_portable(dtype t, const void *row, const float *x, int64_t n) {
    float w[CHUNK], acc[4][8] = {{0}};
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t len = n - i < CHUNK ? n - i : CHUNK;
        decode_chunk(t, row, i, len, w);
        for (int64_t g = 0; g < len; g += 32)
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 8; l++)
                    acc[c][l] = fmaf(w[g + 8 * c + l], x[i + g + 8 * c + l], acc[c][l]);
    }
    return reduce_acc(acc);
}

float quant_dot_naive(dtype t, const void *row, const float *x, int64_t n) {
    float w[CHUNK];
    double sum = 0;
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t len = n - i < CHUNK ? n - i : CHUNK;
        decode_chunk(t, row, i, len, w);
        for (int64_t j = 0; j < len; j++) sum += (double)w[j] * x[i + j];
    }
    return (float)sum;
}

static void matmul_portable(dtype type, const void *w, int64_t k, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    size_t stride = dtype_row_bytes(type, k);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = t0; t < t1; t++)
            y[t * ldy + r] = quant_dot_portable(type, (const uint8_t *)w + r * stride, x + t * ldx, k);
}

/* ---- quantized activations and integer dots (portable) -------------------- */

void quant_quantize_act_row_portable(const float *x, void *dst, int64_t k) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < k / QUANT_QK; i++, x += QUANT_QK, b += QUANT_ACT_BLOCK_BYTES) {
        float amax = 0;
        for (int j = 0; j < QUANT_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127, id = amax != 0 ? 127 / amax : 0;
        memcpy(b, &d, 4);
        for (int j = 0; j < QUANT_QK; j++) b[4 + j] = (uint8_t)(int8_t)rintf(x[j] * id); /* half to even */
    }
}

/* The 32 integer weights of a 32-element block (quant.h: Q8_0 q, Q4_0
 * nibble - 8, Q4_1 nibble, Q5_0 q5 - 16, Q5_1 q5, IQ4_NL the table's value),
 * its scale, and in *m its minimum (Q4_1 / Q5_1; 0 for the others). */
static inline float weights_block(dtype t, const uint8_t *b, int8_t w[32], float *m) {
    *m = 0;
    switch (t) {
    case DTYPE_Q8_0: memcpy(w, b + 2, 32); break;
    case DTYPE_Q4_0:
        for (int j = 0; j < 32; j++) w[j] = (int8_t)(nib32(b + 2, j) - 8);
        break;
    case DTYPE_Q4_1:
        for (int j = 0; j < 32; j++) w[j] = (int8_t)nib32(b + 4, j);
        *m = f16_to_f32(load_u16(b + 2));
        break;
    case DTYPE_Q5_0:
        for (int j = 0; j < 32; j++) w[j] = (int8_t)((nib32(b + 6, j) | (int)((load_u32(b + 2) >> j) & 1) << 4) - 16);
        break;
    case DTYPE_Q5_1:
        for (int j = 0; j < 32; j++) w[j] = (int8_t)(nib32(b + 8, j) | (int)((load_u32(b + 4) >> j) & 1) << 4);
        *m = f16_to_f32(load_u16(b + 2));
        break;
    case DTYPE_IQ4_NL:
        for (int j = 0; j < 32; j++) w[j] = quant_iq4nl_values[nib32(b + 2, j)];
        break;
    default: abort(); /* a caller bug: not a 32-element type */
    }
    return f16_to_f32(load_u16(b));
}

static inline float reduce8(const float acc[8]) {
    float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6], s3 = acc[3] + acc[7];
    return (s0 + s2) + (s1 + s3);
}

/* acc += the fixed-order terms of blocks [0, nb) of row against xq: in
 * acc[0..8) (narrow), in acc[8*(b&1) .. +8) for block b (wide; nb even
 * unless this is the row's last piece), or in acc[0] (block). Q4_1 / Q5_1
 * (wide only) add their minimum's term after each block's. */
static void dot_act_acc(dtype t, const uint8_t *wb, const uint8_t *xb, int64_t nb, float *acc, quant_order order) {
    if (quant_is_k(t)) { /* K-quants: their own order (quant_k.c), acc[0..8) */
        quant_k_dot_acc(t, wb, xb, nb / 8, acc);
        return;
    }
    size_t bb = dtype_block_bytes(t);
    int8_t w[32];
    for (int64_t i = 0; i < nb; i++, wb += bb, xb += QUANT_ACT_BLOCK_BYTES) {
        float dx, m, d = weights_block(t, wb, w, &m);
        memcpy(&dx, xb, 4);
        d *= dx;
        const int8_t *q = (const int8_t *)(xb + 4);
        if (order == QUANT_ORDER_BLOCK) {
            int32_t isum = 0;
            for (int j = 0; j < 32; j++) isum += (int32_t)w[j] * q[j];
            acc[0] = fmaf(d, (float)isum, acc[0]);
            continue;
        }
        float *a = acc + (order == QUANT_ORDER_WIDE && (i & 1) ? 8 : 0);
        for (int l = 0; l < 8; l++) {
            int32_t isum = 0;
            for (int j = 0; j < 4; j++) isum += (int32_t)w[4 * l + j] * q[4 * l + j];
            a[l] = fmaf(d, (float)isum, a[l]);
        }
        if (quant_has_min(t))
            for (int l = 0; l < 8; l++) {
                int32_t xs = q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3];
                a[l] = fmaf(m, dx * (float)xs, a[l]);
            }
    }
}

/* The order of a type's integer dots in this process: the K-quants' own
 * (reduced as narrow), the wide one for Q4_1 / Q5_0 / Q5_1 / IQ4_NL, the
 * process's (quant_act_order) for Q8_0 / Q4_0. */
static quant_order type_order(dtype t) {
    return quant_is_k(t) ? QUANT_ORDER_NARROW : quant_is_wide(t) ? QUANT_ORDER_WIDE : quant_act_order();
}

static inline float reduce16(const float acc[16]) {
    float v[8];
    for (int l = 0; l < 8; l++) v[l] = acc[l] + acc[l + 8];
    return reduce8(v);
}

float quant_dot_act_portable(dtype t, const void *row, const void *xq, int64_t k) {
    if (quant_is_k(t)) return quant_dot_act_k_portable(t, row, xq, k);
    if (quant_is_wide(t)) return quant_dot_act_wide_portable(t, row, xq, k);
    float acc[8] = {0};
    dot_act_acc(t, row, xq, k / QUANT_QK, acc, QUANT_ORDER_NARROW);
    return reduce8(acc);
}

float quant_dot_act_wide_portable(dtype t, const void *row, const void *xq, int64_t k) {
    if (quant_is_k(t)) return quant_dot_act_k_portable(t, row, xq, k);
    float acc[16] = {0};
    dot_act_acc(t, row, xq, k / QUANT_QK, acc, QUANT_ORDER_WIDE);
    return reduce16(acc);
}

float quant_dot_act_block_portable(dtype t, const void *row, const void *xq, int64_t k) {
    if (quant_is_k(t)) return quant_dot_act_k_portable(t, row, xq, k);
    if (quant_is_wide(t)) return quant_dot_act_wide_portable(t, row, xq, k);
    float acc = 0;
    dot_act_acc(t, row, xq, k / QUANT_QK, &acc, QUANT_ORDER_BLOCK);
    return acc;
}

/* The order's final reduction of an accumulator set. */
static float act_reduce(quant_order order, const float acc[16]) {
    return order == QUANT_ORDER_WIDE ? reduce16(acc) : order == QUANT_ORDER_BLOCK ? acc[0] : reduce8(acc);
}

enum { ACT_PIECE = 2048, ACT_ROWS = 64 }; /* ACT_PIECE: an even number of blocks (wide order) */

void quant_matmul_act_f32_range(dtype type, const void *w, int64_t k, const float *x, int64_t ldx, float *y,
                                int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    uint8_t xq[ACT_PIECE / QUANT_QK * QUANT_ACT_BLOCK_BYTES];
    float acc[ACT_ROWS][16];
    size_t stride = dtype_row_bytes(type, k);
    quant_order order = type_order(type);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t rb = r0; rb < r1; rb += ACT_ROWS) {
            int64_t nr = r1 - rb < ACT_ROWS ? r1 - rb : ACT_ROWS;
            memset(acc, 0, sizeof acc);
            for (int64_t i = 0; i < k; i += ACT_PIECE) { /* activation blocks are independent */
                int64_t len = k - i < ACT_PIECE ? k - i : ACT_PIECE;
                quant_quantize_act_row(x + t * ldx + i, xq, len);
                for (int64_t r = 0; r < nr; r++)
                    dot_act_acc(type, (const uint8_t *)w + (rb + r) * stride + dtype_row_bytes(type, i), xq,
                                len / QUANT_QK, acc[r], order);
            }
            for (int64_t r = 0; r < nr; r++) y[t * ldy + rb + r] = act_reduce(order, acc[r]);
        }
}

void quant_matmul_act_range_portable(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (quant_is_k(type)) {
        quant_matmul_act_range_k_portable(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        return;
    }
    size_t stride = dtype_row_bytes(type, k);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = t0; t < t1; t++)
            y[t * ldy + r] = quant_dot_act_portable(type, (const uint8_t *)w + r * stride,
                                                    (const uint8_t *)xq + t * ldxq, k);
}

/* ---- AVX2 ---------------------------------------------------------------- */

#ifdef QUANT_HAVE_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* s[l] = v[l] + v[l+4] */
    __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));                                 /* u0 = s0+s2, u1 = s1+s3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));                      /* u0 + u1 */
}

/* The 32 weights of a Q8_0 / Q4_0 block as four 8-float chunks, times d. */
AVX2 static inline void decode_q8_0_avx2(const uint8_t *b, __m256 w[4]) {
    __m256 d = _mm256_set1_ps(f16_to_f32(load_u16(b)));
    for (int c = 0; c < 4; c++) {
        __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + 8 * c));
        w[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
}

AVX2 static inline void decode_q4_0_avx2(const uint8_t *b, __m256 w[4]) {
    __m256 d = _mm256_set1_ps(f16_to_f32(load_u16(b)));
    __m128i qs = _mm_loadu_si128((const __m128i *)(b + 2)), m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
    __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, m), e);                      /* elements 0..15 */
    __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), m), e);   /* elements 16..31 */
    w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d);
    w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo))), d);
    w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d);
    w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi))), d);
}

/* One Q8_0/Q4_0 row against one or two tokens (x1 may be NULL). */
AVX2 static void dot_block32_avx2(dtype t, const uint8_t *row, const float *x0, const float *x1, int64_t n,
                                  float *y0, float *y1) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0, w[4];
    size_t bb = dtype_block_bytes(t);
    for (int64_t i = 0; i < n; i += 32, row += bb) {
        if (t == DTYPE_Q8_0) decode_q8_0_avx2(row, w);
        else decode_q4_0_avx2(row, w);
        a0 = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x0 + i), a0);
        a1 = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x0 + i + 8), a1);
        a2 = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x0 + i + 16), a2);
        a3 = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x0 + i + 24), a3);
        if (x1) {
            b0 = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x1 + i), b0);
            b1 = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x1 + i + 8), b1);
            b2 = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x1 + i + 16), b2);
            b3 = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x1 + i + 24), b3);
        }
    }
    *y0 = hsum_avx2(a0, a1, a2, a3);
    if (x1) *y1 = hsum_avx2(b0, b1, b2, b3);
}

/* Any other dtype: decode a chunk once into w, use it for every token. acc
 * holds 4 vectors per token, for at most QUANT_TOKENS tokens at a time. */
#define QUANT_TOKENS 8
AVX2 static void dot_generic_avx2(dtype t, const uint8_t *row, const float *x, int64_t ldx, int64_t ntok,
                                  int64_t n, float *y, int64_t ldy) {
    _Alignas(32) float w[CHUNK];
    __m256 acc[QUANT_TOKENS][4];
    for (int64_t j = 0; j < ntok; j++)
        for (int c = 0; c < 4; c++) acc[j][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t len = n - i < CHUNK ? n - i : CHUNK;
        decode_chunk(t, row, i, len, w);
        for (int64_t g = 0; g < len; g += 32)
            for (int64_t j = 0; j < ntok; j++) {
                const float *xj = x + j * ldx + i + g;
                for (int c = 0; c < 4; c++)
                    acc[j][c] = _mm256_fmadd_ps(_mm256_load_ps(w + g + 8 * c), _mm256_loadu_ps(xj + 8 * c), acc[j][c]);
            }
    }
    for (int64_t j = 0; j < ntok; j++) y[j * ldy] = hsum_avx2(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
}

AVX2 static void matmul_avx2(dtype type, const void *w, int64_t k, const float *x, int64_t ldx, float *y,
                             int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    size_t stride = dtype_row_bytes(type, k);
    bool b32 = type == DTYPE_Q8_0 || type == DTYPE_Q4_0;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + r * stride;
        if (b32) {
            int64_t t = t0;
            for (; t + 1 < t1; t += 2)
                dot_block32_avx2(type, row, x + t * ldx, x + (t + 1) * ldx, k, &y[t * ldy + r], &y[(t + 1) * ldy + r]);
            if (t < t1) dot_block32_avx2(type, row, x + t * ldx, NULL, k, &y[t * ldy + r], NULL);
        } else {
            for (int64_t t = t0; t < t1; t += QUANT_TOKENS) {
                int64_t nt = t1 - t < QUANT_TOKENS ? t1 - t : QUANT_TOKENS;
                dot_generic_avx2(type, row, x + t * ldx, ldx, nt, k, &y[t * ldy + r], ldy);
            }
        }
    }
}
/* ---- AVX2 integer dots ------------------------------------------------------ */

AVX2 static void quantize_act_avx2(const float *x, void *dst, int64_t k) {
    uint8_t *b = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < k / QUANT_QK; i++, x += QUANT_QK, b += QUANT_ACT_BLOCK_BYTES) {
        __m256 v[4], m;
        for (int c = 0; c < 4; c++) v[c] = _mm256_loadu_ps(x + 8 * c);
        m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                          _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h), d = amax / 127, id = amax != 0 ? 127 / amax : 0;
        memcpy(b, &d, 4);
        __m256 s = _mm256_set1_ps(id);
        __m256i q[4];
        for (int c = 0; c < 4; c++)
            q[c] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[c], s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* packs interleave 128-bit halves: fix the order with one permute */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(b + 4), p);
    }
}

/* int32 lane l = sum_{j<4} w[4l+j] * x[4l+j], as float (exact: |.| < 2^17). */
AVX2 static inline __m256 isum_avx2(__m256i aw, __m256i w, const uint8_t *xb) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(xb + 4));
    __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

AVX2 static inline float reduce8_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* s[l] = v[l] + v[l+4] */
    __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));                                 /* s0+s2, s1+s3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

AVX2 static inline float load_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* Software prefetch: rows are contiguous, so each load prefetches the same
 * offset R rows on (the next tile), just in time. The hardware prefetcher
 * alone left decode at a third of the memory bandwidth; a fixed 1 KB distance
 * into the row missed each tile's first KB (~25% slower than this). */

/* R (1, 2 or 4) weight rows x T (1..4) tokens over the whole of k; R, T and
 * type are constants at every call site. */
AVX2 static inline __attribute__((always_inline)) void tile_act_avx2(
    const int R, const int T, const dtype type, const uint8_t *w, size_t stride, int64_t nb, const uint8_t *xq,
    int64_t ldxq, float *y, int64_t ldy) {
    __m256 acc[4][4];
    const size_t bb = dtype_block_bytes(type);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[r][j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *xb = xq + i * QUANT_ACT_BLOCK_BYTES;
        float dx[4];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) dx[j] = load_f32(xb + j * ldxq);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *b = w + r * stride + i * bb;
            _mm_prefetch((const char *)b + R * stride, _MM_HINT_T0);
            __m256i wv = quant_weights_avx2(type, b), aw = _mm256_abs_epi8(wv);
            float dw = _cvtsh_ss(load_u16(b));
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                __m256 d = _mm256_set1_ps(dw * dx[j]);
                acc[r][j] = _mm256_fmadd_ps(d, isum_avx2(aw, wv, xb + j * ldxq), acc[r][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) y[j * ldy + r] = reduce8_avx2(acc[r][j]);
}

AVX2 static inline __attribute__((always_inline)) void rows_act_avx2(
    const int T, const dtype type, const uint8_t *w, size_t stride, int64_t k, const uint8_t *xq, int64_t ldxq,
    float *y, int64_t ldy, int64_t r0, int64_t r1) {
    int64_t r = r0, nb = k / QUANT_QK;
    if (T == 1)
        for (; r + 4 <= r1; r += 4) tile_act_avx2(4, T, type, w + r * stride, stride, nb, xq, ldxq, y + r, ldy);
    for (; r + 2 <= r1; r += 2) tile_act_avx2(2, T, type, w + r * stride, stride, nb, xq, ldxq, y + r, ldy);
    if (r < r1) tile_act_avx2(1, T, type, w + r * stride, stride, nb, xq, ldxq, y + r, ldy);
}

#define ACT_RANGE(name, type)                                                                                    \
    AVX2 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,         \
                          int64_t r0, int64_t r1, int64_t t0, int64_t t1) {                                      \
        size_t stride = dtype_row_bytes(type, k);                                                                \
        const uint8_t *x = (const uint8_t *)xq;                                                                  \
        int64_t t = t0;                                                                                          \
        for (; t + 4 <= t1; t += 4) rows_act_avx2(4, type, w, stride, k, x + t * ldxq, ldxq, y + t * ldy, ldy, r0, r1); \
        switch (t1 - t) {                                                                                        \
        case 3: rows_act_avx2(3, type, w, stride, k, x + t * ldxq, ldxq, y + t * ldy, ldy, r0, r1); break;       \
        case 2: rows_act_avx2(2, type, w, stride, k, x + t * ldxq, ldxq, y + t * ldy, ldy, r0, r1); break;       \
        case 1: rows_act_avx2(1, type, w, stride, k, x + t * ldxq, ldxq, y + t * ldy, ldy, r0, r1); break;       \
        default: break;                                                                                          \
        }                                                                                                        \
    }
ACT_RANGE(matmul_act_q8_0_avx2, DTYPE_Q8_0)
ACT_RANGE(matmul_act_q4_0_avx2, DTYPE_Q4_0)
#endif

void quant_matmul_act_range_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                 int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2() || !quant_has_act_kernel(type)) abort(); /* a caller bug */
    if (quant_is_k(type)) {
        quant_matmul_act_range_k_avx2(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        return;
    }
    if (quant_is_wide(type)) {
        quant_matmul_act_range_wide_avx2(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        return;
    }
#ifdef QUANT_HAVE_X86
    if (type == DTYPE_Q8_0) matmul_act_q8_0_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else matmul_act_q4_0_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
#endif
}

/* ---- dispatch ------------------------------------------------------------ */

bool quant_use_avx2(void) {
#ifdef QUANT_HAVE_X86
    return kernels_isa_get() >= KERNELS_ISA_AVX2;
#else
    return false;
#endif
}

bool quant_use_avx512(void) {
#ifdef QUANT_HAVE_X86
    return kernels_isa_get() >= KERNELS_ISA_AVX512;
#else
    return false;
#endif
}

/* Fewest tokens worth AMX tiles: the tile kernel's cost per weight block
 * hardly depends on the token count (16 at most per tile), the VNNI one's
 * grows with it; they are level at 8 tokens (Sapphire Rapids). */
enum { AMX_MIN_TOKENS = 8 };

bool quant_use_amx(void) {
    static atomic_int cached = -1;
    int use = atomic_load(&cached);
    if (use < 0) {
        const char *env = getenv("VLLM_QUANT_AMX");
        use = quant_use_avx512() && !(env && !strcmp(env, "0")) && kernels_amx_allowed() && quant_amx_available();
        atomic_store(&cached, use);
    }
    return use == 1;
}

bool quant_use_block(void) {
    static atomic_int cached = -1;
    int use = atomic_load(&cached);
    if (use < 0) {
        const char *env = getenv("VLLM_QUANT_ORDER");
        bool rows = env && (!strcmp(env, "wide") || !strcmp(env, "narrow")); /* the row kernels' orders */
        use = quant_use_amx() || (quant_use_avx2() && !rows);
        atomic_store(&cached, use);
    }
    return use == 1;
}

quant_order quant_act_order(void) {
    return quant_use_block() ? QUANT_ORDER_BLOCK : quant_use_avx512() ? QUANT_ORDER_WIDE : QUANT_ORDER_NARROW;
}

void quant_matmul_range(dtype type, const void *w, int64_t k, const float *x, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
#ifdef QUANT_HAVE_X86
    if (quant_use_avx2()) {
        matmul_avx2(type, w, k, x, ldx, y, ldy, r0, r1, t0, t1);
        return;
    }
#endif
    matmul_portable(type, w, k, x, ldx, y, ldy, r0, r1, t0, t1);
}

float quant_dot(dtype t, const void *row, const float *x, int64_t n) {
    float y;
    quant_matmul_range(t, row, n, x, n, &y, 1, 0, 1, 0, 1);
    return y;
}

void quant_quantize_act_row(const float *x, void *dst, int64_t k) {
#ifdef QUANT_HAVE_X86
    if (quant_use_avx2()) {
        quantize_act_avx2(x, dst, k);
        return;
    }
#endif
    quant_quantize_act_row_portable(x, dst, k);
}

/* First token of [t0, t1) for the VNNI kernel, the ones before it on AMX
 * tiles: 16 at a time, plus a rest of AMX_MIN_TOKENS or more; none without
 * AMX. */
static int64_t amx_split(int64_t t0, int64_t t1) {
    if (!quant_use_amx()) return t0;
    int64_t tv = t0 + (t1 - t0) / 16 * 16;
    return t1 - tv >= AMX_MIN_TOKENS ? t1 : tv;
}

/* The block order's kernels on GGUF rows: AMX tiles (amx_split), VNNI for
 * the rest; AVX2 below the AVX-512 level. */
static void block_range(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                        int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (r0 >= r1) return;
    if (!quant_use_avx512()) {
        quant_matmul_act_range_avx2_block(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        return;
    }
    int64_t tv = amx_split(t0, t1);
    if (tv > t0) quant_matmul_act_range_amx(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, tv);
    if (tv < t1) quant_matmul_act_range_avx512_block(type, w, k, xq, ldxq, y, ldy, r0, r1, tv, t1);
}

/* The same on rows [0, n) of an x16 copy (n a multiple of 16). */
static void block_range_x16(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                            int64_t ldy, int64_t n, int64_t t0, int64_t t1) {
    if (!quant_use_avx512()) {
        quant_matmul_act_range_x16_avx2(type, w, k, xq, ldxq, y, ldy, 0, n, t0, t1);
        return;
    }
    int64_t tv = amx_split(t0, t1);
    if (tv > t0) quant_matmul_act_range_x16_amx(type, w, k, xq, ldxq, y, ldy, 0, n, t0, tv);
    if (tv < t1) quant_matmul_act_range_x16_avx512(type, w, k, xq, ldxq, y, ldy, 0, n, tv, t1);
}

void quant_matmul_act_range(dtype type, const void *w, const void *x16, int64_t k, const void *xq, int64_t ldxq,
                            float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!quant_has_act_kernel(type)) abort(); /* a caller bug: no integer kernel for this type */
    kernels_isa isa = kernels_isa_get();
    if (quant_is_k(type)) { /* one order on every level (quant_k.c) */
        quant_matmul_act_range_k_x16(type, w, x16, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    } else if (quant_is_wide(type)) { /* the wide order on every level */
        if (isa >= KERNELS_ISA_AVX512) quant_matmul_act_range_avx512(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        else if (isa >= KERNELS_ISA_AVX2) quant_matmul_act_range_wide_avx2(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        else quant_matmul_act_range_portable(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    } else if (quant_use_block()) {
        const int64_t m0 = (r0 + 15) / 16 * 16, m1 = r1 / 16 * 16;
        if (x16 && m0 < m1) { /* whole 16-row groups from the x16 copy, the rows around them from w */
            block_range(type, w, k, xq, ldxq, y, ldy, r0, m0, t0, t1);
            block_range_x16(type, quant_x16_rows(x16, type, k, m0), k, xq, ldxq, y + m0, ldy, m1 - m0, t0, t1);
            block_range(type, w, k, xq, ldxq, y, ldy, m1, r1, t0, t1);
            return;
        }
        block_range(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    } else if (isa >= KERNELS_ISA_AVX512) quant_matmul_act_range_avx512(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else if (isa >= KERNELS_ISA_AVX2) quant_matmul_act_range_avx2(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else quant_matmul_act_range_portable(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

float quant_dot_act(dtype t, const void *row, const void *xq, int64_t k) {
    float y;
    quant_matmul_act_range(t, row, NULL, k, xq, 0, &y, 1, 0, 1, 0, 1);
    return y;
}
