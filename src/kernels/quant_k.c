/*
 * quant_k.c - Q4_K / Q6_K weights x 8-bit activations (integer dots), the
 * K-quant half of quant_matmul_act_range.
 *
 * The activations are the same per-32 blocks the Q8_0/Q4_0 kernels use
 * (quant_quantize_act_row: float dx; int8 xq[32]). A K super-block of 256
 * weights meets 8 activation blocks; block j (elements 32j..32j+31) is
 *     Q4_K: sub-block j, scale sc_j and min m_j (6 bits), nibbles u in 0..15:
 *           value = d*sc_j*u - dmin*m_j
 *     Q6_K: sub-blocks 2j and 2j+1 (16 each), int8 scales s_2j, s_2j+1,
 *           signed values w = q6 - 32 in -32..31: value = d*s*w
 * Integers, exact (|.| < 2^24, so the conversions to float are exact too):
 *     Q4_K: iq_j = sc_j * sum u*xq,   ix_j = m_j * sum xq      (32 terms)
 *     Q6_K: iq_j = s_2j * sum_{l<16} w*xq + s_2j+1 * sum_{l>=16} w*xq
 * Float order (one order for K-quants on every path and every ISA; the
 * Q8_0/Q4_0 order choice of quant_act_order() does not apply to them): eight
 * accumulators per output, lane j fed by activation block j of each
 * super-block, super-blocks in order:
 *     Q4_K: acc[j] = fma((float)iq_j, d*dx_j, acc[j]);
 *           acc[j] = fma((float)ix_j, -(dmin*dx_j), acc[j])
 *     Q6_K: acc[j] = fma((float)iq_j, d*dx_j, acc[j])
 *     result = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))
 * The portable C below, the AVX2 kernel and the AMX-INT8 kernel
 * (quant_k_amx.c) compute exactly this, so every path, every token/row split
 * and every batch agree bit for bit. Dispatch (quant_matmul_act_range_k):
 * below AVX2 portable; with AMX (quant_use_amx()) groups of 4+ tokens go to
 * the tiles and the rest (single-sequence decode) to the AVX-512 VNNI kernel
 * (quant_k_avx512.c) on the AVX-512 level, the AVX2 kernel on the AVX2 one.
 *
 * AVX2: one weight row x up to 4 tokens at a time; the row's super-block is
 * decoded once into 8 registers of 32 bytes and used for every token. Per
 * activation block, maddubs (unsigned nibble x signed xq for Q4_K; |w| x
 * sign-adjusted xq for Q6_K) then madd (by ones, or by the two 16-element
 * scales for Q6_K) give 8 int32 partial sums; a hadd tree turns the 8 blocks'
 * vectors into one vector with block j's integer in lane j. The activation
 * scales dx and Q4_K's sums of xq are gathered once per token group into
 * stack arrays (k up to QK_MAX_BLOCKS * 32; longer rows use portable C).
 */
#include "kernels/quant_k.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define QK_HAVE_X86 1
#endif

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Q4_K's 6-bit scale and min of sub-block j (see quant.c's dequantizer). */
static inline void q4k_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q6_K's unsigned 6-bit value of element e (0..255) of a super-block. */
static inline int q6k_u(const uint8_t *b, int e) {
    int h = e / 128, r = (e % 128) / 32, l = e % 32;
    int lo = (b[64 * h + 32 * (r & 1) + l] >> (4 * (r >> 1))) & 15;
    int hi = (b[128 + 32 * h + l] >> (2 * r)) & 3;
    return lo | (hi << 4);
}

void quant_k_dot_acc(dtype t, const uint8_t *w, const uint8_t *xq, int64_t nsb, float acc[8]) {
    for (int64_t s = 0; s < nsb; s++, xq += 8 * QUANT_ACT_BLOCK_BYTES) {
        const uint8_t *b = w + s * dtype_block_bytes(t);
        for (int j = 0; j < 8; j++) {
            const uint8_t *xb = xq + j * QUANT_ACT_BLOCK_BYTES;
            const int8_t *x = (const int8_t *)(xb + 4);
            float dx;
            memcpy(&dx, xb, 4);
            if (t == DTYPE_Q4_K) {
                float d = f16_to_f32(ld16(b)), dmin = f16_to_f32(ld16(b + 2));
                int sc, m;
                q4k_scale_min(j, b + 4, &sc, &m);
                const uint8_t *q = b + 16 + 32 * (j / 2);
                int32_t iq = 0, ix = 0;
                for (int l = 0; l < 32; l++) {
                    iq += ((q[l] >> (4 * (j & 1))) & 15) * x[l];
                    ix += x[l];
                }
                acc[j] = fmaf((float)(sc * iq), d * dx, acc[j]);
                acc[j] = fmaf((float)(m * ix), -(dmin * dx), acc[j]);
            } else {
                const int8_t *sc = (const int8_t *)(b + 192);
                float d = f16_to_f32(ld16(b + 208));
                int32_t ia = 0, ib = 0;
                for (int l = 0; l < 16; l++) ia += (q6k_u(b, 32 * j + l) - 32) * x[l];
                for (int l = 16; l < 32; l++) ib += (q6k_u(b, 32 * j + l) - 32) * x[l];
                acc[j] = fmaf((float)(sc[2 * j] * ia + sc[2 * j + 1] * ib), d * dx, acc[j]);
            }
        }
    }
}

float quant_k_reduce(const float acc[8]) {
    float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6], s3 = acc[3] + acc[7];
    return (s0 + s2) + (s1 + s3);
}

float quant_dot_act_k_portable(dtype t, const void *row, const void *xq, int64_t k) {
    float acc[8] = {0};
    quant_k_dot_acc(t, row, xq, k / QUANT_QK_K, acc);
    return quant_k_reduce(acc);
}

void quant_matmul_act_range_k_portable(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                       float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    size_t stride = dtype_row_bytes(type, k);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = t0; t < t1; t++)
            y[t * ldy + r] = quant_dot_act_k_portable(type, (const uint8_t *)w + r * stride,
                                                      (const uint8_t *)xq + t * ldxq, k);
}

#ifdef QK_HAVE_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum { QK_MAX_BLOCKS = 1024, QK_TOKENS = 4 };

/* Eight vectors of 8 int32 -> one vector, lane j = sum of v[j]'s lanes. */
AVX2 INLINE __m256i hsum8x8(const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d); /* [v0..v3 lo | v0..v3 hi] */
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* One row x T tokens. dx: (T, nb) activation scales; xs: (T, nb) sums of xq
 * (Q4_K only); x: T activation rows, ldxq apart. */
AVX2 INLINE void row_k_avx2(const int T, const dtype type, const uint8_t *row, size_t stride, int64_t nsb,
                            const uint8_t *x, int64_t ldxq, const float *dx, const int32_t *xs, float *y,
                            int64_t ldy) {
    const size_t bb = type == DTYPE_Q4_K ? 144 : 210;
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256 acc[QK_TOKENS];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *b = row + s * bb;
        __m256i wv[8], sv[8], mn = _mm256_setzero_si256(), scv;
        __m256 dvec, dmvec = _mm256_setzero_ps();
        for (int c = 0; c < (int)bb; c += 64) _mm_prefetch((const char *)b + stride + c, _MM_HINT_T0);
        if (type == DTYPE_Q4_K) {
            uint64_t sc8, m8;
            q4_k_scales_mins(b, &sc8, &m8);
            scv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8));
            mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
            dvec = _mm256_set1_ps(_cvtsh_ss(ld16(b)));
            dmvec = _mm256_set1_ps(_cvtsh_ss(ld16(b + 2)));
            for (int p = 0; p < 4; p++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * p));
                wv[2 * p] = _mm256_and_si256(q, m4);
                wv[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            }
        } else {
            const int8_t *sc = (const int8_t *)(b + 192);
            scv = _mm256_setzero_si256();
            dvec = _mm256_set1_ps(_cvtsh_ss(ld16(b + 208)));
            for (int h = 0; h < 2; h++) q6_k_unpack_half_avx2(b, h, wv + 4 * h);
            /* sv[j] = [s_2j x 8 | s_2j+1 x 8] as int16: broadcast the pair, then spread it */
            __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
            const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                    2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
            for (int j = 0; j < 8; j++)
                sv[j] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(s16, _mm256_set1_epi32(j)), spread);
        }
        __m256i aw[8];
        if (type == DTYPE_Q6_K)
            for (int j = 0; j < 8; j++) aw[j] = _mm256_abs_epi8(wv[j]);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + t * ldxq + s * 8 * QUANT_ACT_BLOCK_BYTES;
            __m256i p[8];
            for (int j = 0; j < 8; j++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + j * QUANT_ACT_BLOCK_BYTES + 4));
                if (type == DTYPE_Q4_K)
                    p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(wv[j], xv), ones);
                else
                    p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(xv, wv[j])), sv[j]);
            }
            __m256i iq = hsum8x8(p);
            __m256 dxv = _mm256_loadu_ps(dx + t * QK_MAX_BLOCKS + 8 * s);
            if (type == DTYPE_Q4_K) {
                iq = _mm256_mullo_epi32(iq, scv);
                __m256i ix = _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(xs + t * QK_MAX_BLOCKS + 8 * s)), mn);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dvec, dxv), acc[t]);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ix),
                                         _mm256_xor_ps(_mm256_mul_ps(dmvec, dxv), _mm256_set1_ps(-0.0f)), acc[t]);
            } else {
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dvec, dxv), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) y[t * ldy] = quant_k_reduce8_avx2(acc[t]);
}

AVX2 static void prep_tokens(const uint8_t *x, int64_t ldxq, int T, int64_t nb, float *dx, int32_t *xs) {
    const __m256i one8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t *xb = x + t * ldxq + i * QUANT_ACT_BLOCK_BYTES;
            memcpy(&dx[t * QK_MAX_BLOCKS + i], xb, 4);
            __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)(xb + 4))), ones);
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
            xs[t * QK_MAX_BLOCKS + i] = _mm_cvtsi128_si32(h);
        }
}

#define K_RANGE(name, type)                                                                                     \
    AVX2 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,        \
                          int64_t r0, int64_t r1, int64_t t0, int64_t t1) {                                     \
        _Alignas(32) float dx[QK_TOKENS * QK_MAX_BLOCKS];                                                       \
        _Alignas(32) int32_t xs[QK_TOKENS * QK_MAX_BLOCKS];                                                     \
        size_t stride = dtype_row_bytes(type, k);                                                               \
        int64_t nb = k / QUANT_QK, nsb = k / QUANT_QK_K;                                                        \
        for (int64_t t = t0; t < t1; t += QK_TOKENS) {                                                          \
            int T = t1 - t < QK_TOKENS ? (int)(t1 - t) : QK_TOKENS;                                             \
            const uint8_t *x = (const uint8_t *)xq + t * ldxq;                                                  \
            prep_tokens(x, ldxq, T, nb, dx, xs);                                                                \
            for (int64_t r = r0; r < r1; r++) {                                                                 \
                const uint8_t *row = (const uint8_t *)w + r * stride;                                          \
                float *yr = y + t * ldy + r;                                                                    \
                switch (T) {                                                                                    \
                case 4: row_k_avx2(4, type, row, stride, nsb, x, ldxq, dx, xs, yr, ldy); break;                 \
                case 3: row_k_avx2(3, type, row, stride, nsb, x, ldxq, dx, xs, yr, ldy); break;                 \
                case 2: row_k_avx2(2, type, row, stride, nsb, x, ldxq, dx, xs, yr, ldy); break;                 \
                default: row_k_avx2(1, type, row, stride, nsb, x, ldxq, dx, xs, yr, ldy); break;                \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }
K_RANGE(matmul_q4_k_avx2, DTYPE_Q4_K)
K_RANGE(matmul_q6_k_avx2, DTYPE_Q6_K)
#endif

void quant_matmul_act_range_k_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                   int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2() || !quant_is_k(type)) abort(); /* a caller bug */
#ifdef QK_HAVE_X86
    if (k / QUANT_QK > QK_MAX_BLOCKS) {
        quant_matmul_act_range_k_portable(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); /* same order */
        return;
    }
    if (type == DTYPE_Q4_K) matmul_q4_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else matmul_q6_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)r0, (void)r1, (void)t0, (void)t1;
#endif
}

/* Fewest tokens worth AMX tiles for a K type: a tile pass costs about the
 * same for 1..16 tokens, the AVX2 kernel's cost grows with them; measured
 * (1024 x 5632 weights, one thread) the tiles win from 3-4 tokens (Q4_K) and
 * 2 (Q6_K). Single-sequence decode stays on AVX2. */
enum { QK_AMX_MIN_TOKENS = 4 };

void quant_matmul_act_range_k(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (kernels_isa_get() < KERNELS_ISA_AVX2) {
        quant_matmul_act_range_k_portable(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        return;
    }
    int64_t tv = t0; /* tokens [t0, tv) on tiles, [tv, t1) on AVX2: same bits */
    if (quant_use_amx() && ldxq <= INT32_MAX / 16) { /* the tile kernel gathers with int32 offsets */
        tv = t0 + (t1 - t0) / 16 * 16;
        if (t1 - tv >= QK_AMX_MIN_TOKENS) tv = t1;
    }
    if (tv > t0) quant_matmul_act_range_k_amx(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, tv);
    if (tv == t1) return;
    if (kernels_isa_get() >= KERNELS_ISA_AVX512) quant_matmul_act_range_k_avx512(type, w, k, xq, ldxq, y, ldy, r0, r1, tv, t1);
    else quant_matmul_act_range_k_avx2(type, w, k, xq, ldxq, y, ldy, r0, r1, tv, t1);
}
