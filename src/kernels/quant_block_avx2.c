/*
 * quant_block_avx2.c - Q8_0 / Q4_0 weights x 8-bit activations in the
 * "block" order (quant.h) with AVX2 only: the kernels an AVX2 process uses
 * (quant_use_block()), on the model's x16 copies and on GGUF rows.
 *
 * x16 copies: a record holds 16 rows' block b, the quants as dwords (j, r)
 * at 64j + 4r. A 32-byte load at 64j + 32h is dword j of the 8 rows of half
 * h, so vpmaddubsw against the activation's dword j broadcast puts each
 * row's partial sums in its own lanes, and the rows' whole-block sums come
 * out of plain vertical adds, with no horizontal reduction:
 *     Q4_0: maddubs(nibble, x) for the 8 dwords (elements 4j.. low nibbles,
 *           16+4j.. high), added as int16 (16 products of 15 * 128 at most:
 *           30720, exact), one madd by ones to int32, plus corr = -8 * (sum
 *           of the block's xq): sum (nibble - 8) * x exactly;
 *     Q8_0: maddubs(|w|, sign(x, w)) per dword, madd by ones, int32 adds
 *           (two maddubs results could reach 2 * 32512: no int16 adds);
 * then acc (8 rows) = fma((float)isum, dw * dx, acc) per block in order,
 * which is quant_dot_act_block_portable's order bit for bit.
 *
 * A 16-row group is two units of 8 rows (its halves); a pass runs up to
 * XA_UNITS units over the blocks, their records read in turn. At decode a
 * pass takes both halves of XA_UNITS / 2 groups, so each line is used as it
 * arrives and several streams keep lines in flight: a half-0 pass and then a
 * half-1 pass from L2 left DRAM idle for the second (TinyLlama, 2 threads,
 * alternated: Q8_0 decode 16.9-18.1 -> 20.8-25.4 tok/s, Q4_0 30.6 -> 38.5).
 * With several tokens (compute-bound) a group's half-1 pass follows its
 * half-0 pass at once, so the group's records are still in L2.
 * The tokens are prepared once per piece of XA_PIECE blocks (dx and corr
 * per block, tokens side by side); longer rows carry the accumulators
 * across pieces in acc_io.
 *
 * GGUF rows (rows outside whole 16-row groups, or no copy): one row x up to
 * 4 tokens, each block's isum reduced to one int32 (an exact integer, so any
 * reduction gives the same) and added with one scalar fma.
 */
#include "kernels/quant.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    XA_PIECE = 512, /* blocks per prep piece (k 16384) */
    XA_T = 4,       /* tokens per pass */
    XA_UNITS = 8,   /* 8-row units (a group's half) per pass at decode */
    XA_CHUNK = 8,   /* 16-row groups whose sums wait in acc_io when k takes several pieces */
    XA_AHEAD = 8,   /* records of prefetch distance, per stream */
};

typedef struct xa_prep {
    _Alignas(32) int32_t corr[XA_PIECE][XA_T]; /* Q4_0: -8 * (sum of the block's xq) */
    _Alignas(32) float dx[XA_PIECE][XA_T];
} xa_prep;

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* The int32 sum of a vector's 8 lanes. */
AVX2 INLINE int32_t hsum_i32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    return _mm_cvtsi128_si32(h);
}

AVX2 static void xa_prep_tokens(const uint8_t *xq, int64_t ldxq, int T, int64_t b0, int64_t nbk, xa_prep *p) {
    const __m256i one8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < nbk; i++) {
            const uint8_t *xb = xq + t * ldxq + (b0 + i) * QUANT_ACT_BLOCK_BYTES;
            memcpy(&p->dx[i][t], xb, 4);
            __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)(xb + 4))), ones);
            p->corr[i][t] = -8 * hsum_i32(v);
        }
}

AVX2 INLINE __m256i bcast(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* NU units (8 rows each: half hs[u] of the group at g[u]) x T tokens over
 * blocks [0, nbk) of a piece; x: the tokens' xq rows at the piece's first
 * block. acc[u][t]: 8 rows' accumulators, carried in and out. */
AVX2 INLINE void xa_units(const int NU, const int T, const dtype type, const uint8_t *const *g, const int *hs,
                          int64_t nbk, const uint8_t *x, int64_t ldxq, const xa_prep *p, __m256 (*acc)[XA_T]) {
    const size_t rec = type == DTYPE_Q8_0 ? 544 : 288;
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256 ra[XA_UNITS][XA_T];
#pragma GCC unroll 4
    for (int u = 0; u < NU; u++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) ra[u][t] = acc[u][t];
    for (int64_t b = 0; b < nbk; b++) {
#pragma GCC unroll 4
        for (int u = 0; u < NU; u++) {
            const int h = hs[u];
            const uint8_t *gb = g[u] + b * rec, *q = gb + 32 + 32 * h;
            if (u == 0 || hs[u] == 0) /* once per group (decode: a group's halves are units u, u + 1) */
                for (int i = 0; i < (int)((rec + 63) / 64); i++) /* the record XA_AHEAD on, line by line */
                    _mm_prefetch((const char *)gb + XA_AHEAD * rec + 64 * i, _MM_HINT_T0);
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb + 16 * h)));
            __m256i wv[8];
            if (type == DTYPE_Q4_0) {
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(q + 64 * j));
                    wv[j] = _mm256_and_si256(v, m4);                         /* elements 4j.. */
                    wv[4 + j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); /* elements 16+4j.. */
                }
            } else {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) wv[j] = _mm256_loadu_si256((const __m256i *)(q + 64 * j));
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const uint8_t *xb = x + t * ldxq + b * QUANT_ACT_BLOCK_BYTES + 4;
                __m256i isum;
                if (type == DTYPE_Q4_0) {
                    __m256i s = _mm256_maddubs_epi16(wv[0], bcast(xb));
#pragma GCC unroll 8
                    for (int j = 1; j < 8; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(wv[j], bcast(xb + 4 * j)));
                    isum = _mm256_add_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(p->corr[b][t]));
                } else {
                    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 4
                    for (int j = 0; j < 8; j += 2) {
                        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wv[j]),
                                                                     _mm256_sign_epi8(bcast(xb + 4 * j), wv[j])), ones));
                        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wv[j + 1]),
                                                                     _mm256_sign_epi8(bcast(xb + 4 * j + 4), wv[j + 1])), ones));
                    }
                    isum = _mm256_add_epi32(s0, s1);
                }
                ra[u][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(p->dx[b][t])),
                                           ra[u][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < NU; u++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[u][t] = ra[u][t];
}

/* Groups [g0, g1) of the x16 copy at w for T tokens. */
AVX2 INLINE void xa_range(const int T, const dtype type, const uint8_t *w, int64_t k, const uint8_t *xq, int64_t ldxq,
                          float *y, int64_t ldy, int64_t g0, int64_t g1, xa_prep *p) {
    const size_t rec = type == DTYPE_Q8_0 ? 544 : 288;
    const int64_t nb = k / QUANT_QK;
    /* decode: XA_UNITS / 2 groups a pass, both halves of each record at once
     * (several streams, each line used as it arrives); several tokens: one
     * group's half-0 pass, then its half-1 pass (compute-bound) */
    const int H = T == 1 ? 2 : 1, NG = T == 1 ? XA_UNITS / 2 : 1;
    __m256 acc_io[2 * XA_CHUNK][XA_T];
    /* one piece: every group in one pass, the tokens prepared once;
     * otherwise XA_CHUNK groups at a time, their sums in acc_io between pieces */
    const int64_t span = nb <= XA_PIECE ? g1 - g0 : XA_CHUNK;
    for (int64_t gc = g0; gc < g1; gc += span) {
        const int64_t ng = g1 - gc < span ? g1 - gc : span;
        for (int64_t b0 = 0; b0 < nb; b0 += XA_PIECE) {
            const int64_t nbk = nb - b0 < XA_PIECE ? nb - b0 : XA_PIECE;
            const bool first = b0 == 0, last = b0 + nbk == nb;
            xa_prep_tokens(xq, ldxq, T, b0, nbk, p);
            for (int64_t gi = 0; gi < ng;) {
                const int n = ng - gi < NG ? (int)(ng - gi) : NG; /* groups in this pass */
                for (int h0 = 0; h0 < 2; h0 += H) {
                    const uint8_t *gp[XA_UNITS] = {0};
                    int hs[XA_UNITS] = {0}, nu = 0;
                    for (int u = 0; u < n; u++)
                        for (int h = h0; h < h0 + H; h++, nu++) {
                            gp[nu] = w + ((gc + gi + u) * nb + b0) * rec;
                            hs[nu] = h;
                        }
                    __m256 acc[XA_UNITS][XA_T];
                    for (int v = 0; v < nu; v++)
#pragma GCC unroll 4
                        for (int t = 0; t < T; t++)
                            acc[v][t] = first ? _mm256_setzero_ps() : acc_io[2 * (gi + v / H) + hs[v]][t];
                    const uint8_t *xp = xq + b0 * QUANT_ACT_BLOCK_BYTES;
                    switch (nu) {
                    case 8: xa_units(8, T, type, gp, hs, nbk, xp, ldxq, p, acc); break;
                    case 6: xa_units(6, T, type, gp, hs, nbk, xp, ldxq, p, acc); break;
                    case 4: xa_units(4, T, type, gp, hs, nbk, xp, ldxq, p, acc); break;
                    case 2: xa_units(2, T, type, gp, hs, nbk, xp, ldxq, p, acc); break;
                    default: xa_units(1, T, type, gp, hs, nbk, xp, ldxq, p, acc); break;
                    }
                    for (int v = 0; v < nu; v++)
#pragma GCC unroll 4
                        for (int t = 0; t < T; t++) {
                            const int64_t gv = gc + gi + v / H;
                            if (last) _mm256_storeu_ps(y + t * ldy + gv * 16 + 8 * hs[v], acc[v][t]);
                            else acc_io[2 * (gi + v / H) + hs[v]][t] = acc[v][t];
                        }
                }
                gi += n;
            }
        }
    }
}

#define XA_ENTRY(name, type)                                                                                      \
    AVX2 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,          \
                          int64_t g0, int64_t g1, int64_t t0, int64_t t1) {                                       \
        xa_prep p; /* 16 KB */                                                                                    \
        const uint8_t *x = (const uint8_t *)xq;                                                                   \
        for (int64_t t = t0; t < t1; t += XA_T) {                                                                 \
            const uint8_t *xt = x + t * ldxq;                                                                     \
            float *yt = y + t * ldy;                                                                              \
            switch (t1 - t < XA_T ? t1 - t : XA_T) {                                                              \
            case 4: xa_range(4, type, w, k, xt, ldxq, yt, ldy, g0, g1, &p); break;                                \
            case 3: xa_range(3, type, w, k, xt, ldxq, yt, ldy, g0, g1, &p); break;                                \
            case 2: xa_range(2, type, w, k, xt, ldxq, yt, ldy, g0, g1, &p); break;                                \
            default: xa_range(1, type, w, k, xt, ldxq, yt, ldy, g0, g1, &p); break;                               \
            }                                                                                                     \
        }                                                                                                         \
    }
XA_ENTRY(x16_q8_0_avx2, DTYPE_Q8_0)
XA_ENTRY(x16_q4_0_avx2, DTYPE_Q4_0)

/* ---- GGUF rows, block order ------------------------------------------------ */

/* One row x T tokens: block by block, isum = sum w * x (|w| against
 * sign-adjusted x, as the narrow kernel), acc = fma((float)isum, dw * dx, acc). */
AVX2 INLINE void row_block(const int T, const dtype type, const uint8_t *row, int64_t nb, const uint8_t *xq,
                           int64_t ldxq, float *y, int64_t ldy) {
    const size_t bb = dtype_block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    float acc[XA_T] = {0};
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = row + i * bb;
        const __m256i wv = quant_weights_avx2(type, b);
        const __m256i aw = _mm256_abs_epi8(wv);
        const float dw = _cvtsh_ss(ld16(b));
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = xq + t * ldxq + i * QUANT_ACT_BLOCK_BYTES;
            float dx;
            memcpy(&dx, xb, 4);
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + 4));
            int32_t isum = hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones));
            acc[t] = fmaf((float)isum, dw * dx, acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) y[t * ldy] = acc[t];
}

#define ROW_ENTRY(name, type)                                                                                     \
    AVX2 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,          \
                          int64_t r0, int64_t r1, int64_t t0, int64_t t1) {                                       \
        const size_t stride = dtype_row_bytes(type, k);                                                           \
        const uint8_t *x = (const uint8_t *)xq;                                                                   \
        for (int64_t t = t0; t < t1; t += XA_T)                                                                   \
            for (int64_t r = r0; r < r1; r++) {                                                                   \
                const uint8_t *row = (const uint8_t *)w + r * stride, *xt = x + t * ldxq;                         \
                float *yr = y + t * ldy + r;                                                                      \
                switch (t1 - t < XA_T ? t1 - t : XA_T) {                                                          \
                case 4: row_block(4, type, row, k / QUANT_QK, xt, ldxq, yr, ldy); break;                          \
                case 3: row_block(3, type, row, k / QUANT_QK, xt, ldxq, yr, ldy); break;                          \
                case 2: row_block(2, type, row, k / QUANT_QK, xt, ldxq, yr, ldy); break;                          \
                default: row_block(1, type, row, k / QUANT_QK, xt, ldxq, yr, ldy); break;                         \
                }                                                                                                 \
            }                                                                                                     \
    }
ROW_ENTRY(rows_q8_0_avx2, DTYPE_Q8_0)
ROW_ENTRY(rows_q4_0_avx2, DTYPE_Q4_0)
#endif

void quant_matmul_act_range_x16_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2() || r0 % 16 || r1 % 16) abort(); /* a caller bug */
#if defined(__x86_64__)
    if (type == DTYPE_Q8_0) x16_q8_0_avx2(w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
    else if (type == DTYPE_Q4_0) x16_q4_0_avx2(w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
    else abort(); /* a caller bug: no x16 layout for this type */
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)t0, (void)t1;
#endif
}

void quant_matmul_act_range_avx2_block(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                       int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2()) abort(); /* a caller bug */
#if defined(__x86_64__)
    if (type == DTYPE_Q8_0) rows_q8_0_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else if (type == DTYPE_Q4_0) rows_q4_0_avx2(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else abort(); /* a caller bug: the K types have an order of their own */
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)r0, (void)r1, (void)t0, (void)t1;
#endif
}
