/*
 * quant_k.c - K-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) x 8-bit
 * activations (integer dots), the K-quant half of quant_matmul_act_range.
 *
 * The activations are the same per-32 blocks the Q8_0/Q4_0 kernels use
 * (quant_quantize_act_row: float dx; int8 xq[32]). A K super-block of 256
 * weights meets 8 activation blocks; block j (elements 32j..32j+31) is
 *     Q4_K: sub-block j, scale sc_j and min m_j (6 bits), nibbles u in 0..15:
 *           value = d*sc_j*u - dmin*m_j
 *     Q5_K: the same with 5-bit u in 0..31
 *     Q6_K: sub-blocks 2j and 2j+1 (16 each), int8 scales s_2j, s_2j+1,
 *           signed values w = q6 - 32 in -32..31: value = d*s*w
 *     Q3_K: the same with 6-bit scales s - 32 and w = u - 4 in -4..3
 *     Q2_K: sub-blocks 2j and 2j+1, 4-bit scales sc and mins m, u in 0..3:
 *           value = d*sc*u - dmin*m
 * (Q2_K / Q3_K's block j = 4h + r holds bits 2r..2r+1 of qs[32h + l], and
 * Q3_K's third bit is bit j of hmask[l]: quant.h.) Integers, exact (|.| <
 * 2^24, so the conversions to float are exact too):
 *     Q4_K, Q5_K: iq_j = sc_j * sum u*xq,   ix_j = m_j * sum xq      (32 terms)
 *     Q6_K, Q3_K: iq_j = s_2j * sum_{l<16} w*xq + s_2j+1 * sum_{l>=16} w*xq
 *     Q2_K:       iq_j = sc_2j * sum_{l<16} u*xq + sc_2j+1 * sum_{l>=16} u*xq,
 *                 ix_j = m_2j * sum_{l<16} xq + m_2j+1 * sum_{l>=16} xq
 * Float order (one order for K-quants on every path and every ISA; the
 * Q8_0/Q4_0 order choice of quant_act_order() does not apply to them): eight
 * accumulators per output, lane j fed by activation block j of each
 * super-block, super-blocks in order:
 *     with a min (Q2_K, Q4_K, Q5_K): acc[j] = fma((float)iq_j, d*dx_j, acc[j]);
 *                                    acc[j] = fma((float)ix_j, -(dmin*dx_j), acc[j])
 *     without (Q3_K, Q6_K):          acc[j] = fma((float)iq_j, d*dx_j, acc[j])
 *     result = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))
 * The portable C below, the AVX2 kernel, the AVX-512 one (quant_k_avx512.c)
 * and the AMX-INT8 one (quant_k_amx.c: Q4_K and Q6_K only) compute exactly
 * this, so every path, every token/row split and every batch agree bit for
 * bit. Dispatch (quant_matmul_act_range_k): below AVX2 portable; with AMX
 * (quant_use_amx()) groups of 4+ tokens of Q4_K / Q6_K go to the tiles; the
 * rest (and every Q2_K / Q3_K / Q5_K token) to the AVX-512 VNNI kernel on
 * the AVX-512 level, the AVX2 kernel on the AVX2 one. Q4_K weights with an
 * x16 copy (AVX-512 without AMX) go to quant_k_x16.c first, which sends
 * the whole 16-row groups to its rows-in-lanes kernel and the rest here.
 *
 * AVX2: one weight row x up to 4 tokens at a time (single tokens: four rows
 * far apart in turn, four memory streams); the row's super-block is decoded
 * once into 8 registers of 32 unsigned bytes (Q4_K nibbles, Q5_K q5 0..31,
 * Q6_K q6 0..63, Q3_K u 0..7, Q2_K u 0..3) and used for every token. Per
 * activation block, maddubs then madd by ones give 8 int32 partial sums;
 * int16 pack/madd steps (every partial fits int16: test_quant_k_extremes)
 * bring the 8 blocks together, block j's integer in lane j, the scales
 * applied by madd (Q4_K), by mullo on the block sums (Q5_K, whose half
 * sums outgrow int16, so its last step adds in int32) or on the 16 half
 * sums (Q6_K, Q3_K, Q2_K; the -32 / -4 offsets come off as 32 / 4 * the
 * scales against the half sums of xq, Q2_K's mins the same way). The
 * activation scales dx, the block sums of xq (Q4_K, Q5_K) or its half sums
 * (the others) are gathered once per token group into stack arrays (k up to
 * QK_MAX_BLOCKS * 32; longer rows use portable C).
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

/* Q2_K / Q3_K: element l of activation block j (j = 4h + r, quant.h's
 * e = 128h + 32r + l) has its 2 low bits at qs[32h + l] >> 2r, Q3_K its
 * third in bit j of hmask[l]: the unsigned u = q + 4 (0..7). */
static inline int q2k_q(const uint8_t *qs, int j, int l) { return (qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3; }
static inline int q3k_u(const uint8_t *b, int j, int l) { return q2k_q(b + 32, j, l) | ((b[l] >> j) & 1) << 2; }

/* Q3_K's scale of sub-block j, minus 32 (quant.c's q3_k_scale). */
static inline int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

void quant_k_dot_acc(dtype t, const uint8_t *w, const uint8_t *xq, int64_t nsb, float acc[8]) {
    for (int64_t s = 0; s < nsb; s++, xq += 8 * QUANT_ACT_BLOCK_BYTES) {
        const uint8_t *b = w + s * dtype_block_bytes(t);
        for (int j = 0; j < 8; j++) {
            const uint8_t *xb = xq + j * QUANT_ACT_BLOCK_BYTES;
            const int8_t *x = (const int8_t *)(xb + 4);
            float dx;
            memcpy(&dx, xb, 4);
            if (t == DTYPE_Q4_K || t == DTYPE_Q5_K) {
                float d = f16_to_f32(ld16(b)), dmin = f16_to_f32(ld16(b + 2));
                int sc, m;
                q4k_scale_min(j, b + 4, &sc, &m);
                const uint8_t *q = b + (t == DTYPE_Q4_K ? 16 : 48) + 32 * (j / 2);
                int32_t iq = 0, ix = 0;
                for (int l = 0; l < 32; l++) {
                    int u = (q[l] >> (4 * (j & 1))) & 15;
                    if (t == DTYPE_Q5_K) u |= ((b[16 + l] >> j) & 1) << 4;
                    iq += u * x[l];
                    ix += x[l];
                }
                acc[j] = fmaf((float)(sc * iq), d * dx, acc[j]);
                acc[j] = fmaf((float)(m * ix), -(dmin * dx), acc[j]);
            } else if (t == DTYPE_Q2_K) {
                float d = f16_to_f32(ld16(b + 80)), dmin = f16_to_f32(ld16(b + 82));
                int32_t iq = 0, ix = 0;
                for (int hf = 0; hf < 2; hf++) { /* sub-block 2j + hf: elements 16hf.. */
                    int sc = b[2 * j + hf] & 15, m = b[2 * j + hf] >> 4;
                    int32_t sq = 0, sx = 0;
                    for (int l = 16 * hf; l < 16 * hf + 16; l++) sq += q2k_q(b + 16, j, l) * x[l], sx += x[l];
                    iq += sc * sq, ix += m * sx;
                }
                acc[j] = fmaf((float)iq, d * dx, acc[j]);
                acc[j] = fmaf((float)ix, -(dmin * dx), acc[j]);
            } else if (t == DTYPE_Q3_K) {
                float d = f16_to_f32(ld16(b + 108));
                int32_t iq = 0;
                for (int hf = 0; hf < 2; hf++) {
                    int32_t sq = 0;
                    for (int l = 16 * hf; l < 16 * hf + 16; l++) sq += (q3k_u(b, j, l) - 4) * x[l];
                    iq += q3k_scale(b + 96, 2 * j + hf) * sq;
                }
                acc[j] = fmaf((float)iq, d * dx, acc[j]);
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

enum {
    QK_MAX_BLOCKS = 1024, /* activation blocks per row (k up to 32768; longer rows: portable C) */
    QK_TOKENS = 4,        /* tokens per pass over the rows */
    QK_STREAMS = 4,       /* single-token rows read in turn, far apart */
    QK_AHEAD = 4,         /* super-blocks of prefetch distance within a stream */
};

/* What the kernel needs of the tokens' activation rows besides xq, super-
 * block by super-block with the tokens side by side (so one row's pass over
 * a super-block reads them from a few adjacent lines): the block scales dx,
 * Q4_K's block sums of xq, Q6_K's 16-element half sums. */
typedef struct qk_acts {
    _Alignas(32) float dx[QK_MAX_BLOCKS / 8][QK_TOKENS][8];
    _Alignas(32) int32_t xs[QK_MAX_BLOCKS / 8][QK_TOKENS][8];
    _Alignas(32) int16_t hx[QK_MAX_BLOCKS / 8][QK_TOKENS][16];
} qk_acts;

/* p[j] = the unsigned weights u[j] of block j against activation block j at
 * x (xq rows, scales between blocks): maddubs, then madd by ones, so 8 int32
 * lanes of 4-element sums (lanes 0..3: elements 0..15, 4..7: 16..31). */
AVX2 INLINE void block_pairs8(const __m256i u[8], const uint8_t *x, __m256i p[8]) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        p[j] = _mm256_madd_epi16(
            _mm256_maddubs_epi16(u[j], _mm256_loadu_si256((const __m256i *)(x + j * QUANT_ACT_BLOCK_BYTES + 4))),
            ones);
}

/* Eight vectors of 32-byte blocks' pair sums -> one vector of int16, lane
 * (128-bit half h, word j) = the sum of block j's half h (16 elements).
 * Each step packs two int32 vectors to int16 and pair-adds them back to
 * int32 (madd by ones); exact while every partial fits in int16, as it does
 * for Q4_K (16 products of 15 * 128 at most: 30720). */
AVX2 INLINE __m256i pack_pair(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_packs_epi32(a, b), _mm256_set1_epi16(1));
}

AVX2 INLINE __m256i q4k_tree(const __m256i p[8]) {
    __m256i a0 = pack_pair(p[0], p[1]), a1 = pack_pair(p[2], p[3]);
    __m256i a2 = pack_pair(p[4], p[5]), a3 = pack_pair(p[6], p[7]);
    return _mm256_packs_epi32(pack_pair(a0, a1), pack_pair(a2, a3));
}

/* One Q4_K super-block b against T tokens (activation blocks at xb, ldxq
 * apart; super-block s of a), into acc[0..T). The block sums come out of
 * q4k_tree as two int16 halves per block; a permute and a byte shuffle put
 * block j's halves side by side, and madd by (sc_j, sc_j) gives
 * iq_j = sc_j * (sum of the block) in int32 lane j. */
AVX2 INLINE void sb_q4_k(const int T, const uint8_t *b, const uint8_t *xb, int64_t ldxq, const qk_acts *a,
                         int64_t s, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i pairs = _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128,
                                           4, -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
    const __m256i interleave = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                                                0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    uint64_t sc8, m8;
    q4_k_scales_mins(b, &sc8, &m8);
    const __m256i scp = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)sc8), pairs); /* int16 sc_j, sc_j */
    const __m256i mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
    /* -(dmin * dx) as (-dmin) * dx: the same float (IEEE negation is exact), one negation per super-block */
    const __m256 dv = _mm256_set1_ps(_cvtsh_ss(ld16(b))), ndmv = _mm256_set1_ps(-_cvtsh_ss(ld16(b + 2)));
    __m256i u[8];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) { /* blocks 2p, 2p+1: low, high nibbles of 32 bytes */
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * p));
        u[2 * p] = _mm256_and_si256(q, m4);
        u[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const uint8_t *x = xb + t * ldxq;
        __m256i p[8];
        block_pairs8(u, x, p);
        __m256i g = _mm256_permute4x64_epi64(q4k_tree(p), _MM_SHUFFLE(3, 1, 2, 0));
        __m256i iq = _mm256_madd_epi16(_mm256_shuffle_epi8(g, interleave), scp);
        /* m_j * xs_j by madd: |xs_j| < 2^15 and 0 <= m_j < 64, so the high words add nothing */
        __m256i ix = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(a->xs[s][t])), mn);
        __m256 dxv = _mm256_load_ps(a->dx[s][t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dv, dxv), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ix), _mm256_mul_ps(ndmv, dxv), acc[t]);
    }
}

/* One Q6_K super-block: the unsigned q6 (0..63) meet xq in maddubs; pair
 * sums of two (|.| <= 32256) still fit int16, so one pack step, then hadd,
 * gives the 16 half sums U_h (A: halves 0,2,4,6 | 1,3,5,7; B: 8..14 | 9..15),
 * times their int8 scales in int32; block j = its two halves added across
 * the 128-bit lanes. The q6 - 32 offset comes off as 32 * (s_2j hx_2j +
 * s_2j+1 hx_2j+1), one madd of the scales with the half sums of xq. */
AVX2 INLINE void sb_q6_k(const int T, const uint8_t *b, const uint8_t *xb, int64_t ldxq, const qk_acts *a,
                         int64_t s, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const __m128i evenodd = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
    const __m256i s16 = _mm256_cvtepi8_epi16(sc), scs = _mm256_castsi128_si256(_mm_shuffle_epi8(sc, evenodd));
    const __m256i scA = _mm256_cvtepi8_epi32(_mm256_castsi256_si128(scs));
    const __m256i scB = _mm256_cvtepi8_epi32(_mm_srli_si128(_mm256_castsi256_si128(scs), 8));
    const __m256 dv = _mm256_set1_ps(_cvtsh_ss(ld16(b + 208)));
    __m256i u[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* q6_k_unpack_half_avx2's bits, without the - 32 */
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        u[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
        u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const uint8_t *x = xb + t * ldxq;
        __m256i p[8];
        block_pairs8(u, x, p);
        __m256i A = _mm256_mullo_epi32(_mm256_hadd_epi32(pack_pair(p[0], p[1]), pack_pair(p[2], p[3])), scA);
        __m256i B = _mm256_mullo_epi32(_mm256_hadd_epi32(pack_pair(p[4], p[5]), pack_pair(p[6], p[7])), scB);
        __m256i v = _mm256_add_epi32(_mm256_permute2x128_si256(A, B, 0x20), _mm256_permute2x128_si256(A, B, 0x31));
        __m256i corr = _mm256_madd_epi16(s16, _mm256_load_si256((const __m256i *)(a->hx[s][t])));
        __m256i iq = _mm256_sub_epi32(v, _mm256_slli_epi32(corr, 5));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dv, _mm256_load_ps(a->dx[s][t])), acc[t]);
    }
}

/* One Q5_K super-block: Q4_K's nibbles with the fifth bit of qh (bit j of
 * qh[l] for block j) or'ed in at bit 4. The half-block sums reach 62992,
 * past int16, so after two pack steps (8-element sums, within int16) the
 * halves are added in int32 and the scales applied by mullo. */
AVX2 INLINE void sb_q5_k(const int T, const uint8_t *b, const uint8_t *xb, int64_t ldxq, const qk_acts *a,
                         int64_t s, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(15), bit4 = _mm256_set1_epi8(16);
    uint64_t sc8, m8;
    q4_k_scales_mins(b, &sc8, &m8);
    const __m256i scv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8));
    const __m256i mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
    const __m256 dv = _mm256_set1_ps(_cvtsh_ss(ld16(b))), ndmv = _mm256_set1_ps(-_cvtsh_ss(ld16(b + 2)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
    __m256i u[8];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * p));
        int j0 = 2 * p, j1 = 2 * p + 1; /* bit j of qh to bit 4: 16-bit shifts, exact per byte for |4 - j| <= 4 */
        __m256i h0 = j0 <= 4 ? _mm256_slli_epi16(qh, 4 - j0) : _mm256_srli_epi16(qh, j0 - 4);
        __m256i h1 = j1 <= 4 ? _mm256_slli_epi16(qh, 4 - j1) : _mm256_srli_epi16(qh, j1 - 4);
        u[j0] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(h0, bit4));
        u[j1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_and_si256(h1, bit4));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const uint8_t *x = xb + t * ldxq;
        __m256i p[8];
        block_pairs8(u, x, p);
        /* half h of blocks 0..3 (lo) and 4..7 (hi) in 128-bit lane h */
        __m256i lo = pack_pair(pack_pair(p[0], p[1]), pack_pair(p[2], p[3]));
        __m256i hi = pack_pair(pack_pair(p[4], p[5]), pack_pair(p[6], p[7]));
        __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
        __m256i iq = _mm256_mullo_epi32(sum, scv);
        __m256i ix = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(a->xs[s][t])), mn);
        __m256 dxv = _mm256_load_ps(a->dx[s][t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dv, dxv), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ix), _mm256_mul_ps(ndmv, dxv), acc[t]);
    }
}

/* The 16 half-block sums of a super-block (blocks' p from block_pairs8)
 * times 16 int32 scales, the two halves of each block added: block j's
 * sum_h s[2j + h] * (half h's sum) in lane j. scA / scB: the scales of
 * blocks 0..3 / 4..7, half h in 128-bit lane h (evenodd below). */
AVX2 INLINE __m256i half_scaled(const __m256i p[8], __m256i scA, __m256i scB) {
    __m256i A = _mm256_mullo_epi32(_mm256_hadd_epi32(pack_pair(p[0], p[1]), pack_pair(p[2], p[3])), scA);
    __m256i B = _mm256_mullo_epi32(_mm256_hadd_epi32(pack_pair(p[4], p[5]), pack_pair(p[6], p[7])), scB);
    return _mm256_add_epi32(_mm256_permute2x128_si256(A, B, 0x20), _mm256_permute2x128_si256(A, B, 0x31));
}

/* 16 int8 scales in sub-block order -> scA, scB for half_scaled. */
AVX2 INLINE void half_scales(__m128i sc, __m256i *scA, __m256i *scB) {
    const __m128i evenodd = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    __m128i scs = _mm_shuffle_epi8(sc, evenodd);
    *scA = _mm256_cvtepi8_epi32(scs);
    *scB = _mm256_cvtepi8_epi32(_mm_srli_si128(scs, 8));
}

/* Q2_K: u = the 2-bit q (block j = 4h + r: qs[32h + l] >> 2r); iq_j from
 * half_scaled with the 4-bit scales, ix_j = m_2j hx_2j + m_2j+1 hx_2j+1 by
 * one madd of the 4-bit mins with the half sums of xq. */
AVX2 INLINE void sb_q2_k(const int T, const uint8_t *b, const uint8_t *xb, int64_t ldxq, const qk_acts *a,
                         int64_t s, __m256 *acc) {
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m128i sc = _mm_loadu_si128((const __m128i *)b);
    __m256i scA, scB;
    half_scales(_mm_and_si128(sc, _mm_set1_epi8(15)), &scA, &scB);
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
    const __m256 dv = _mm256_set1_ps(_cvtsh_ss(ld16(b + 80))), ndmv = _mm256_set1_ps(-_cvtsh_ss(ld16(b + 82)));
    __m256i u[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * h));
        u[4 * h] = _mm256_and_si256(q, m2);
        u[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m2);
        u[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m2);
        u[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m2);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        __m256i p[8];
        block_pairs8(u, xb + t * ldxq, p);
        __m256i iq = half_scaled(p, scA, scB);
        __m256i ix = _mm256_madd_epi16(mn16, _mm256_load_si256((const __m256i *)(a->hx[s][t])));
        __m256 dxv = _mm256_load_ps(a->dx[s][t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dv, dxv), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ix), _mm256_mul_ps(ndmv, dxv), acc[t]);
    }
}

/* Q3_K: u = q + 4 = 2 low bits | bit j of hmask[l] << 2 (0..7); the - 4
 * comes off as 4 * (s_2j hx_2j + s_2j+1 hx_2j+1), as Q6_K's - 32. */
AVX2 INLINE void sb_q3_k(const int T, const uint8_t *b, const uint8_t *xb, int64_t ldxq, const qk_acts *a,
                         int64_t s, __m256 *acc) {
    const __m256i m2 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    int8_t sc[16];
    q3_k_scales(b + 96, sc);
    const __m128i scv = _mm_loadu_si128((const __m128i *)sc);
    __m256i scA, scB;
    half_scales(scv, &scA, &scB);
    const __m256i s16 = _mm256_cvtepi8_epi16(scv);
    const __m256 dv = _mm256_set1_ps(_cvtsh_ss(ld16(b + 108)));
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b);
    __m256i u[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* bit j of hmask to bit 2: 16-bit shifts, exact per byte */
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * (j / 4)));
        __m256i hb = j <= 2 ? _mm256_slli_epi16(hm, 2 - j) : _mm256_srli_epi16(hm, j - 2);
        u[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * (j % 4)), m2), _mm256_and_si256(hb, bit2));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        __m256i p[8];
        block_pairs8(u, xb + t * ldxq, p);
        __m256i v = half_scaled(p, scA, scB);
        __m256i corr = _mm256_madd_epi16(s16, _mm256_load_si256((const __m256i *)(a->hx[s][t])));
        __m256i iq = _mm256_sub_epi32(v, _mm256_slli_epi32(corr, 2));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dv, _mm256_load_ps(a->dx[s][t])), acc[t]);
    }
}

/* R rows x T tokens over the whole of k: row rr at row + rr * gap, its
 * outputs at y + rr * ygap. The rows' super-blocks are read in turn, so R
 * rows far apart are R sequential streams (one per thread left single-token
 * decode well short of the memory bandwidth). */
AVX2 INLINE void rows_k_avx2(const int R, const int T, const dtype type, const uint8_t *row, size_t gap, int64_t nsb,
                             const uint8_t *x, int64_t ldxq, const qk_acts *a, float *y, int64_t ldy, int64_t ygap) {
    const size_t bb = dtype_block_bytes(type);
    __m256 acc[QK_STREAMS][QK_TOKENS];
#pragma GCC unroll 4
    for (int rr = 0; rr < R; rr++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[rr][t] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *xb = x + s * 8 * QUANT_ACT_BLOCK_BYTES;
#pragma GCC unroll 4
        for (int rr = 0; rr < R; rr++) {
            const uint8_t *b = row + rr * gap + s * bb;
            for (int c = 0; c < (int)bb; c += 64) _mm_prefetch((const char *)b + QK_AHEAD * bb + c, _MM_HINT_T0);
            switch (type) {
            case DTYPE_Q4_K: sb_q4_k(T, b, xb, ldxq, a, s, acc[rr]); break;
            case DTYPE_Q5_K: sb_q5_k(T, b, xb, ldxq, a, s, acc[rr]); break;
            case DTYPE_Q2_K: sb_q2_k(T, b, xb, ldxq, a, s, acc[rr]); break;
            case DTYPE_Q3_K: sb_q3_k(T, b, xb, ldxq, a, s, acc[rr]); break;
            default: sb_q6_k(T, b, xb, ldxq, a, s, acc[rr]); break;
            }
        }
    }
#pragma GCC unroll 4
    for (int rr = 0; rr < R; rr++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) y[t * ldy + rr * ygap] = quant_k_reduce8_avx2(acc[rr][t]);
}

AVX2 static void prep_tokens(dtype type, const uint8_t *x, int64_t ldxq, int T, int64_t nb, qk_acts *a) {
    const __m256i one8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t *xb = x + t * ldxq + i * QUANT_ACT_BLOCK_BYTES;
            memcpy(&a->dx[i / 8][t][i % 8], xb, 4);
            __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)(xb + 4))), ones);
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            if (type == DTYPE_Q4_K || type == DTYPE_Q5_K) { /* block sums; the others half sums */
                h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
                a->xs[i / 8][t][i % 8] = _mm_cvtsi128_si32(h);
            } else { /* the two 16-element halves: lanes 0..3 and 4..7 of v */
                __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
                lo = _mm_hadd_epi32(lo, hi);
                lo = _mm_hadd_epi32(lo, lo); /* lane 0: first half, lane 1: second */
                a->hx[i / 8][t][2 * (i % 8)] = (int16_t)_mm_cvtsi128_si32(lo);
                a->hx[i / 8][t][2 * (i % 8) + 1] = (int16_t)_mm_extract_epi32(lo, 1);
            }
        }
}

AVX2 INLINE void range_k_avx2(const int T, const dtype type, const uint8_t *w, int64_t k, const uint8_t *x,
                              int64_t ldxq, float *y, int64_t ldy, int64_t r0, int64_t r1, qk_acts *a) {
    const size_t stride = dtype_row_bytes(type, k);
    const int64_t nsb = k / QUANT_QK_K;
    prep_tokens(type, x, ldxq, T, k / QUANT_QK, a);
    if (T > 1) { /* a row's super-block decoded once for T tokens: compute-bound, one stream is enough */
        for (int64_t r = r0; r < r1; r++) rows_k_avx2(1, T, type, w + r * stride, 0, nsb, x, ldxq, a, y + r, ldy, 0);
        return;
    }
    /* rows r, r + q, r + 2q, r + 3q in turn, then the rest one at a time */
    const int64_t q = (r1 - r0) / QK_STREAMS;
    for (int64_t r = r0; r < r0 + q; r++)
        rows_k_avx2(QK_STREAMS, 1, type, w + r * stride, (size_t)q * stride, nsb, x, ldxq, a, y + r, ldy, q);
    for (int64_t r = r0 + QK_STREAMS * q; r < r1; r++)
        rows_k_avx2(1, 1, type, w + r * stride, 0, nsb, x, ldxq, a, y + r, ldy, 0);
}

#define K_RANGE(name, type)                                                                                     \
    AVX2 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,        \
                          int64_t r0, int64_t r1, int64_t t0, int64_t t1) {                                     \
        qk_acts a; /* 48 KB */                                                                                  \
        for (int64_t t = t0; t < t1; t += QK_TOKENS) {                                                          \
            const uint8_t *x = (const uint8_t *)xq + t * ldxq;                                                  \
            float *yt = y + t * ldy;                                                                            \
            switch (t1 - t < QK_TOKENS ? t1 - t : QK_TOKENS) {                                                  \
            case 4: range_k_avx2(4, type, w, k, x, ldxq, yt, ldy, r0, r1, &a); break;                           \
            case 3: range_k_avx2(3, type, w, k, x, ldxq, yt, ldy, r0, r1, &a); break;                           \
            case 2: range_k_avx2(2, type, w, k, x, ldxq, yt, ldy, r0, r1, &a); break;                           \
            default: range_k_avx2(1, type, w, k, x, ldxq, yt, ldy, r0, r1, &a); break;                          \
            }                                                                                                   \
        }                                                                                                       \
    }
K_RANGE(matmul_q4_k_avx2, DTYPE_Q4_K)
K_RANGE(matmul_q6_k_avx2, DTYPE_Q6_K)
K_RANGE(matmul_q2_k_avx2, DTYPE_Q2_K)
K_RANGE(matmul_q3_k_avx2, DTYPE_Q3_K)
K_RANGE(matmul_q5_k_avx2, DTYPE_Q5_K)
#endif

void quant_matmul_act_range_k_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                   int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2() || !quant_is_k(type)) abort(); /* a caller bug */
#ifdef QK_HAVE_X86
    if (k / QUANT_QK > QK_MAX_BLOCKS) {
        quant_matmul_act_range_k_portable(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); /* same order */
        return;
    }
    switch (type) {
    case DTYPE_Q4_K: matmul_q4_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q6_K: matmul_q6_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q2_K: matmul_q2_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q3_K: matmul_q3_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    default: matmul_q5_k_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    }
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
    if (quant_use_amx() && quant_k_amx_takes(type) && ldxq <= INT32_MAX / 16) { /* int32 gather offsets */
        tv = t0 + (t1 - t0) / 16 * 16;
        if (t1 - tv >= QK_AMX_MIN_TOKENS) tv = t1;
    }
    if (tv > t0) quant_matmul_act_range_k_amx(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, tv);
    if (tv == t1) return;
    if (kernels_isa_get() >= KERNELS_ISA_AVX512) quant_matmul_act_range_k_avx512(type, w, k, xq, ldxq, y, ldy, r0, r1, tv, t1);
    else quant_matmul_act_range_k_avx2(type, w, k, xq, ldxq, y, ldy, r0, r1, tv, t1);
}
