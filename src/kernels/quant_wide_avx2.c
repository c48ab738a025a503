/*
 * quant_wide_avx2.c - Q4_1 / Q5_0 / Q5_1 / IQ4_NL weights x 8-bit
 * activations with AVX2: the wide order of quant.h, the one these types use
 * on every path (quant_dot_act_wide_portable is its C mirror; quant_avx512.c
 * computes it two blocks per zmm).
 *
 * A block's 32 integer weights are unpacked once into one ymm, byte i =
 * element i (quant.h's w[i]):
 *     Q4_1   nibbles, unsigned (0..15)
 *     Q5_1   nibbles | fifth bit << 4, unsigned (0..31)
 *     Q5_0   the same minus 16 (-16..15): the nibble or'ed with 0xF0 where
 *            the fifth bit is clear, which is nibble - 16 as int8
 *     IQ4_NL vpshufb of the nibbles into the 16-value table (-127..113)
 * The fifth bits come from the block's 32-bit qh: broadcast, each byte i
 * shuffled to hold qh's byte i / 8, or'ed with all bits but i % 8, compared
 * with all ones. The unsigned types meet the activations in one maddubs
 * (u8 x s8 pairs: at most 2 * 31 * 127, no saturation); the signed ones as
 * |w| against sign(x, w) (2 * 127 * 127 at most). One madd by ones gives
 * isum_b[l], l < 8 (quant.h), exact in int32, then
 *     acc[b & 1] = fma((float)isum_b, dw * dx, acc[b & 1])
 *     acc[b & 1] = fma(m, sx_b, acc[b & 1])           (Q4_1 / Q5_1)
 * with two ymm accumulators per output (even and odd blocks: the wide
 * order's lanes 0..7 and 8..15), reduced as (acc0 + acc1) then quant.h's
 * 8-lane tree. sx_b[l] = dx * (float)(sum of the 4 xq of lane l) is made
 * once per token and block (the prep) and read by every row.
 *
 * Tiles: 4 rows x 1 token (decode: four adjacent rows, each load prefetching
 * the next tile's row, as quant.c's narrow kernel), 2 rows x 2 tokens, 1 row
 * x 3-4 tokens: 8 accumulators at most. k is taken WA_PIECE blocks at a time
 * (the prep stays in L1/L2); rows WA_ROWS at a time carry their accumulators
 * across pieces on the stack. A tile only changes which outputs share a
 * weight load, never the operations on one output: batch invariant.
 */
#include "kernels/quant.h"

#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    WA_PIECE = 256, /* blocks per piece of k (8192 elements); even, so a block's parity is its row's */
    WA_T = 4,       /* tokens per pass */
    WA_ROWS = 64,   /* rows whose accumulators wait between pieces */
};

typedef struct wa_prep {
    _Alignas(32) float sx[WA_T][WA_PIECE][8]; /* Q4_1 / Q5_1 (see top) */
} wa_prep;

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Offset of the nibbles (qs) and of the fifth bits (qh) in a block. */
static inline size_t qs_at(dtype type) {
    return type == DTYPE_Q4_1 ? 4 : type == DTYPE_Q5_0 ? 6 : type == DTYPE_Q5_1 ? 8 : 2;
}
static inline size_t qh_at(dtype type) { return type == DTYPE_Q5_1 ? 4 : 2; }

static inline bool is_signed(dtype type) { return type == DTYPE_Q5_0 || type == DTYPE_IQ4_NL; }

/* Byte i = 0xFF where bit i of the 32-bit word at p is set, else 0. */
AVX2 INLINE __m256i bits32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), spread);
    x = _mm256_or_si256(x, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    return _mm256_cmpeq_epi8(x, _mm256_set1_epi64x(-1));
}

/* The block at b's 32 integer weights (see top). */
AVX2 INLINE __m256i weights(const dtype type, const uint8_t *b) {
    __m128i qs = _mm_loadu_si128((const __m128i *)(b + qs_at(type)));
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1);
    v = _mm256_and_si256(v, _mm256_set1_epi8(15));
    switch (type) {
    case DTYPE_Q5_0: return _mm256_or_si256(v, _mm256_andnot_si256(bits32(b + qh_at(type)), _mm256_set1_epi8((char)0xF0)));
    case DTYPE_Q5_1: return _mm256_or_si256(v, _mm256_and_si256(bits32(b + qh_at(type)), _mm256_set1_epi8(16)));
    case DTYPE_IQ4_NL: {
        const __m128i kv = _mm_loadu_si128((const __m128i *)quant_iq4nl_values);
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(kv), v);
    }
    default: return v;
    }
}

AVX2 INLINE float reduce8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* s[l] = v[l] + v[l+4] */
    __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));                                 /* s0+s2, s1+s3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/* sx of T tokens for blocks [b0, b0 + nbk) of their xq rows. */
AVX2 static void wa_prep_tokens(const uint8_t *xq, int64_t ldxq, int T, int64_t b0, int64_t nbk, wa_prep *p) {
    const __m256i one8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < nbk; i++) {
            const uint8_t *xb = xq + t * ldxq + (b0 + i) * QUANT_ACT_BLOCK_BYTES;
            float dx;
            memcpy(&dx, xb, 4);
            __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)(xb + 4))), ones);
            _mm256_store_ps(p->sx[t][i], _mm256_mul_ps(_mm256_set1_ps(dx), _mm256_cvtepi32_ps(v)));
        }
}

/* One block (index i of the piece) of R rows at w (stride apart) into the
 * accumulators acc[r][t] of its parity, T tokens. */
AVX2 INLINE void wa_block(const int R, const int T, const dtype type, const uint8_t *w, size_t stride, int64_t i,
                          const uint8_t *x, int64_t ldxq, const wa_prep *p, __m256 (*acc)[WA_T]) {
    const size_t bb = dtype_block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const uint8_t *b = w + r * stride + i * bb;
        _mm_prefetch((const char *)b + R * stride, _MM_HINT_T0); /* the next tile's rows */
        const __m256i wv = weights(type, b), aw = is_signed(type) ? _mm256_abs_epi8(wv) : wv;
        const float dw = _cvtsh_ss(ld16(b));
        const __m256 mw = _mm256_set1_ps(quant_has_min(type) ? _cvtsh_ss(ld16(b + 2)) : 0.0f);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + t * ldxq + i * QUANT_ACT_BLOCK_BYTES;
            float dx;
            memcpy(&dx, xb, 4);
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + 4));
            if (is_signed(type)) xv = _mm256_sign_epi8(xv, wv);
            __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones));
            acc[r][t] = _mm256_fmadd_ps(f, _mm256_set1_ps(dw * dx), acc[r][t]);
            if (quant_has_min(type)) acc[r][t] = _mm256_fmadd_ps(mw, _mm256_load_ps(p->sx[t][i]), acc[r][t]);
        }
    }
}

/* R rows x T tokens over blocks [0, nbk) of a piece (w: row 0's first block
 * of the piece; x: token 0's). Accumulators start at zero (first) or from
 * acc_io, end in y (last) or back in acc_io ((R, WA_T, 2) ymm). */
AVX2 INLINE void wa_tile(const int R, const int T, const dtype type, const uint8_t *w, size_t stride, int64_t nbk,
                         const uint8_t *x, int64_t ldxq, const wa_prep *p, bool first, bool last, __m256 *acc_io,
                         float *y, int64_t ldy) {
    __m256 even[4][WA_T], odd[4][WA_T];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            even[r][t] = first ? _mm256_setzero_ps() : acc_io[(r * WA_T + t) * 2];
            odd[r][t] = first ? _mm256_setzero_ps() : acc_io[(r * WA_T + t) * 2 + 1];
        }
    int64_t i = 0;
    for (; i + 2 <= nbk; i += 2) {
        wa_block(R, T, type, w, stride, i, x, ldxq, p, even);
        wa_block(R, T, type, w, stride, i + 1, x, ldxq, p, odd);
    }
    if (i < nbk) wa_block(R, T, type, w, stride, i, x, ldxq, p, even); /* a last, odd block */
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            if (last) {
                y[t * ldy + r] = reduce8(_mm256_add_ps(even[r][t], odd[r][t]));
            } else {
                acc_io[(r * WA_T + t) * 2] = even[r][t];
                acc_io[(r * WA_T + t) * 2 + 1] = odd[r][t];
            }
        }
}

/* nr rows (w: the first one's piece) for T tokens: tiles of 4, 2 or 1 rows
 * as T allows (8 accumulators), then single rows. */
AVX2 INLINE void wa_rows(const int T, const dtype type, const uint8_t *w, size_t stride, int64_t nr, int64_t nbk,
                         const uint8_t *x, int64_t ldxq, const wa_prep *p, bool first, bool last, __m256 *acc_io,
                         float *y, int64_t ldy) {
    int64_t r = 0;
    if (T == 1)
        for (; r + 4 <= nr; r += 4)
            wa_tile(4, 1, type, w + r * stride, stride, nbk, x, ldxq, p, first, last, acc_io + r * WA_T * 2, y + r, ldy);
    if (T == 2)
        for (; r + 2 <= nr; r += 2)
            wa_tile(2, 2, type, w + r * stride, stride, nbk, x, ldxq, p, first, last, acc_io + r * WA_T * 2, y + r, ldy);
    for (; r < nr; r++)
        wa_tile(1, T, type, w + r * stride, stride, nbk, x, ldxq, p, first, last, acc_io + r * WA_T * 2, y + r, ldy);
}

AVX2 INLINE void wa_range(const dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                          int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    wa_prep p; /* 32 KB */
    __m256 acc_io[WA_ROWS * WA_T * 2]; /* 16 KB */
    const size_t stride = dtype_row_bytes(type, k), bb = dtype_block_bytes(type);
    const int64_t nb = k / QUANT_QK;
    for (int64_t t = t0; t < t1; t += WA_T) {
        const int T = t1 - t < WA_T ? (int)(t1 - t) : WA_T;
        const uint8_t *xt = (const uint8_t *)xq + t * ldxq;
        int64_t prepared = -1; /* the piece whose sx p holds (one piece: made once for every row) */
        for (int64_t rc = r0; rc < r1; rc += WA_ROWS) {
            const int64_t nr = r1 - rc < WA_ROWS ? r1 - rc : WA_ROWS;
            for (int64_t b0 = 0; b0 < nb; b0 += WA_PIECE) {
                const int64_t nbk = nb - b0 < WA_PIECE ? nb - b0 : WA_PIECE;
                const bool first = b0 == 0, last = b0 + nbk == nb;
                if (quant_has_min(type) && prepared != b0) {
                    wa_prep_tokens(xt, ldxq, T, b0, nbk, &p);
                    prepared = b0;
                }
                const uint8_t *wp = (const uint8_t *)w + rc * stride + b0 * bb;
                const uint8_t *xp = xt + b0 * QUANT_ACT_BLOCK_BYTES;
                float *yp = y + t * ldy + rc;
                switch (T) {
                case 1: wa_rows(1, type, wp, stride, nr, nbk, xp, ldxq, &p, first, last, acc_io, yp, ldy); break;
                case 2: wa_rows(2, type, wp, stride, nr, nbk, xp, ldxq, &p, first, last, acc_io, yp, ldy); break;
                case 3: wa_rows(3, type, wp, stride, nr, nbk, xp, ldxq, &p, first, last, acc_io, yp, ldy); break;
                default: wa_rows(4, type, wp, stride, nr, nbk, xp, ldxq, &p, first, last, acc_io, yp, ldy); break;
                }
            }
        }
    }
}

#define WA_ENTRY(name, type)                                                                                      \
    AVX2 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,          \
                          int64_t r0, int64_t r1, int64_t t0, int64_t t1) {                                       \
        wa_range(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);                                                   \
    }
WA_ENTRY(wide_q4_1, DTYPE_Q4_1)
WA_ENTRY(wide_q5_0, DTYPE_Q5_0)
WA_ENTRY(wide_q5_1, DTYPE_Q5_1)
WA_ENTRY(wide_iq4_nl, DTYPE_IQ4_NL)
#endif

void quant_matmul_act_range_wide_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                      int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2() || !quant_is_wide(type)) abort(); /* a caller bug */
#if defined(__x86_64__)
    switch (type) {
    case DTYPE_Q4_1: wide_q4_1(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q5_0: wide_q5_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q5_1: wide_q5_1(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    default: wide_iq4_nl(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    }
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)r0, (void)r1, (void)t0, (void)t1;
#endif
}
