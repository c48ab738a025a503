/*
 * quant_avx512.c - 32-element block weights x 8-bit activations with AVX-512
 * VNNI (vpdpbusd): the wide-order kernel (Q8_0 / Q4_0 with
 * VLLM_QUANT_ORDER=wide; Q4_1 / Q5_0 / Q5_1 / IQ4_NL always) and the Q8_0 /
 * Q4_0 block-order ones (x16 copies and GGUF rows) that AVX-512 processes use.
 *
 * One zmm holds two consecutive 32-blocks (a "step" of 64 elements). vpdpbusd
 * multiplies unsigned by signed bytes, so the weights are made unsigned and
 * the offset taken back out exactly in int32:
 *     Q8_0:   u = w + 128 (w ^ 0x80),    sum u*x = sum w*x + 128 * sum x
 *     Q4_0:   u = nibble (0..15),        sum u*x = sum w*x +   8 * sum x
 *     Q5_0:   u = q5 (0..31),            sum u*x = sum w*x +  16 * sum x
 *     IQ4_NL: u = kv[nibble] + 128,      sum u*x = sum w*x + 128 * sum x
 *     Q4_1 / Q5_1: u = w (0..15 / 0..31), no offset
 * Each int32 lane starts at corr = -K * (sum of its 4 activations), computed
 * once per token and step (the "prep" below), so after one vpdpbusd lane l of
 * the zmm holds exactly the isum[l] of quant.h for block 2s (l < 8) and
 * isum[l - 8] of block 2s + 1 (l >= 8): the same integers as the AVX2
 * maddubs path, with no saturation anywhere. Q4_1 / Q5_1 start at zero and
 * keep, in corr's place, sx = dx * (float)(sum of the lane's 4 activations)
 * for their minimum's fma (quant.h). The fifth bits of Q5 types go in with
 * one masked or (a block's 32-bit qh is the zmm half's byte mask), IQ4_NL's
 * table with one vpshufb.
 *
 * Float order (the "wide" order, quant.h; quant_dot_act_wide_portable is
 * the same in C): acc[16] per output, lane l < 8 fed by the even blocks and
 * lane 8 + l by the odd ones, each acc = fma((float)isum, dw * dx, acc) in
 * block order (a last, odd block only touches lanes 0..7); then
 *     v[l] = acc[l] + acc[l + 8], result = ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)).
 * Tiles of R rows x T tokens only change which outputs share a weight load,
 * never the operations on one output, so results are batch invariant.
 *
 * Prep: for each token of a tile and each step of a k piece, 192 bytes: the
 * step's 64 activation bytes back to back (xq interleaves a float scale every
 * 32), corr[16] and dx[16] (dx of block 2s in lanes 0..7, of 2s + 1 in 8..15),
 * so the inner loop is loads and five vector ops per (row, token, step).
 * k is taken in pieces of PIECE_STEPS steps (prep stays in L1); accumulators
 * cross pieces in acc_io on the stack.
 *
 * x16 copies (quant.h; quant_matmul_act_range_x16_avx512, the block
 * order): a record's zmm of quants is 16 rows' lanes, so vpdpbusd against a
 * broadcast dword of activations (corr in the first chain's start, as
 * above) leaves each row's whole-block isum in its lane after 8 of them, no
 * horizontal reduction; then acc (16 rows) = fma((float)isum, dw * dx, acc)
 * per block. The copy is one contiguous stream: a fixed prefetch distance.
 *
 * Streaming (decode): rows are contiguous, so a tile of R rows reads one
 * contiguous range in R interleaved streams; each load prefetches the same
 * offset R rows on, i.e. the next tile, just in time and never twice. (A fixed
 * distance into the row left each tile's first KB to the hardware prefetcher:
 * ~15% less bandwidth; 8-row decode tiles beat 4.)
 */
#include "kernels/quant.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    PIECE_STEPS = 32,  /* 2048 elements of k per piece */
    TILE_T = 4,        /* tokens per prep group */
    CHUNK_ROWS = 64,   /* rows whose accumulators wait in acc_io between pieces */
    PREP_BYTES = 192,  /* per token and step: x[64], corr[16] int32, dx[16] float */
};


typedef struct {
    int8_t x[64];
    union {
        int32_t corr[16]; /* -K * (sum of the lane's 4 activations) */
        float sx[16];     /* Q4_1 / Q5_1: dx * (sum of the lane's 4 activations) */
    };
    float dx[16];
} prep_step;

/* K of the top: the offset of the unsigned weights (0: none). */
static inline int wide_offset(dtype type) {
    switch (type) {
    case DTYPE_Q8_0: case DTYPE_IQ4_NL: return 128;
    case DTYPE_Q4_0: return 8;
    case DTYPE_Q5_0: return 16;
    default: return 0;
    }
}

/* IQ4_NL's values + 128, the unsigned weights vpshufb looks up. */
static const uint8_t iq4nl_u8[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};

/* Prep for one token: steps [s0, s0 + ns) of xq row xr (nb blocks in all). */
AVX512 static void prep_token(dtype type, const uint8_t *xr, int64_t nb, int64_t s0, int64_t ns, prep_step *p) {
    const __m512i k = _mm512_set1_epi8((char)(quant_has_min(type) ? 1 : wide_offset(type)));
    for (int64_t s = 0; s < ns; s++, p++) {
        int64_t b = 2 * (s0 + s);
        const uint8_t *x0 = xr + b * QUANT_ACT_BLOCK_BYTES, *x1 = x0 + QUANT_ACT_BLOCK_BYTES;
        float d0, d1 = 0;
        memcpy(&d0, x0, 4);
        __m256i lo = _mm256_loadu_si256((const __m256i *)(x0 + 4)), hi = _mm256_setzero_si256();
        if (b + 1 < nb) {
            memcpy(&d1, x1, 4);
            hi = _mm256_loadu_si256((const __m256i *)(x1 + 4));
        }
        __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k, xv);
        __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
        _mm512_store_si512(p->x, xv);
        if (quant_has_min(type)) _mm512_store_ps(p->sx, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sum)));
        else _mm512_store_si512(p->corr, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
        _mm512_store_ps(p->dx, dx);
    }
}

/* Offset of the nibbles (qs) and of the fifth bits (qh) in a block. */
static inline size_t qs_at(dtype type) {
    switch (type) {
    case DTYPE_Q4_1: return 4;
    case DTYPE_Q5_0: return 6;
    case DTYPE_Q5_1: return 8;
    default: return 2;
    }
}
static inline size_t qh_at(dtype type) { return type == DTYPE_Q5_1 ? 4 : 2; }

/* The two blocks of step at b as unsigned bytes (see top), byte i = element
 * i of the pair; half: only the first block (the second reads as 0). */
AVX512 INLINE __m512i weights2(const dtype type, const uint8_t *b, bool half) {
    const size_t bb = dtype_block_bytes(type);
    if (type == DTYPE_Q8_0) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(b + 2));
        __m256i hi = half ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(b + bb + 2));
        __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const size_t qs = qs_at(type);
    __m128i q0 = _mm_loadu_si128((const __m128i *)(b + qs));
    __m128i q1 = half ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)(b + bb + qs));
    __m512i v = _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1));
    v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 1, 0, 0));   /* [q0, q0, q1, q1] */
    v = _mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4);           /* [q0, q0>>4, q1, q1>>4] */
    v = _mm512_and_si512(v, _mm512_set1_epi8(15));
    if (type == DTYPE_IQ4_NL) return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)iq4nl_u8)), v);
    if (type == DTYPE_Q5_0 || type == DTYPE_Q5_1) {
        uint32_t h0, h1 = 0;
        memcpy(&h0, b + qh_at(type), 4);
        if (!half) memcpy(&h1, b + bb + qh_at(type), 4);
        v = _mm512_mask_add_epi8(v, (__mmask64)h0 | (__mmask64)h1 << 32, v, _mm512_set1_epi8(16));
    }
    return v;
}

/* The f16 at offset off of the step's two blocks as [x0 x 8, x1 x 8] (the
 * scales d at 0, Q4_1 / Q5_1's minimums m at 2); half: x1 = 0. */
AVX512 INLINE __m512 halves2(const dtype type, const uint8_t *b, size_t off, bool half) {
    const size_t bb = dtype_block_bytes(type);
    uint16_t h0, h1 = 0;
    memcpy(&h0, b + off, 2);
    if (!half) memcpy(&h1, b + bb + off, 2);
    __m256i h = _mm256_mask_set1_epi16(_mm256_set1_epi16((short)h0), 0xFF00, (short)h1);
    return _mm512_cvtph_ps(h);
}

AVX512 INLINE __m512 scales2(const dtype type, const uint8_t *b, bool half) { return halves2(type, b, 0, half); }

AVX512 INLINE float reduce16(__m512 acc) {
    __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* s[l] = v[l] + v[l+4] */
    __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));                                 /* s0+s2, s1+s3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/* R rows x T tokens over steps [0, ns) of a piece (w: the piece's first
 * block of row 0; p: the T tokens' prep, pstride steps apart); odd: the last
 * step holds one block. Accumulators start at zero (first) or from acc_io,
 * end in y (last) or back in acc_io ((R, TILE_T) zmm). */
AVX512 INLINE void tile(const int R, const int T, const dtype type, const uint8_t *w, size_t stride, int64_t ns,
                        bool odd, const prep_step *p, int64_t pstride, bool first, bool last, __m512 *acc_io,
                        float *y, int64_t ldy) {
    const size_t step = 2 * dtype_block_bytes(type);
    const bool min = quant_has_min(type);
    __m512 acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) acc[r][j] = first ? _mm512_setzero_ps() : acc_io[r * TILE_T + j];
    int64_t full = odd ? ns - 1 : ns;
    for (int64_t s = 0; s < full; s++) {
        __m512i wv[8];
        __m512 dw[8], mw[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *b = w + r * stride + s * step;
            _mm_prefetch((const char *)b + R * stride, _MM_HINT_T0); /* the next tile's rows (see top) */
            wv[r] = weights2(type, b, false);
            dw[r] = scales2(type, b, false);
            if (min) mw[r] = halves2(type, b, 2, false);
        }
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            const prep_step *q = p + j * pstride + s;
            __m512i xv = _mm512_load_si512(q->x);
            __m512 dx = _mm512_load_ps(q->dx);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                __m512i i = _mm512_dpbusd_epi32(min ? _mm512_setzero_si512() : _mm512_load_si512(q->corr), wv[r], xv);
                acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(dw[r], dx), acc[r][j]);
                if (min) acc[r][j] = _mm512_fmadd_ps(mw[r], _mm512_load_ps(q->sx), acc[r][j]);
            }
        }
    }
    if (odd) {
        int64_t s = ns - 1;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *b = w + r * stride + s * step;
            __m512i wv = weights2(type, b, true);
            __m512 dw = scales2(type, b, true), mw = min ? halves2(type, b, 2, true) : _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) {
                const prep_step *q = p + j * pstride + s;
                __m512i i = _mm512_dpbusd_epi32(min ? _mm512_setzero_si512() : _mm512_load_si512(q->corr), wv,
                                                _mm512_load_si512(q->x));
                __m512 sc = _mm512_mul_ps(dw, _mm512_load_ps(q->dx));
                acc[r][j] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(i), sc, acc[r][j], 0x00FF); /* lanes 0..7 */
                if (min) acc[r][j] = _mm512_mask3_fmadd_ps(mw, _mm512_load_ps(q->sx), acc[r][j], 0x00FF);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            if (last) y[j * ldy + r] = reduce16(acc[r][j]);
            else acc_io[r * TILE_T + j] = acc[r][j];
        }
}

/* ---- the block order (quant.h), for the AMX process's small batches ---- */

/* 8 zmm of vpdpbusd lanes (row r: [block 2s lanes 0..7 | block 2s+1]) ->
 * one zmm [whole-block sums of rows 0..7 for block 2s | for block 2s+1].
 * Integer adds, so any tree gives the exact sums. */
AVX512 INLINE __m512i block_sums8(const __m512i i[8]) {
    __m512i q[4], h[2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) /* per 128-bit lane: [r0+r2 of 2k, 2k+1 interleaved] */
        q[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(i[2 * k], i[2 * k + 1]),
                                _mm512_unpackhi_epi32(i[2 * k], i[2 * k + 1]));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) /* per 128-bit lane: the lane's sums of rows 4k..4k+3 */
        h[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(q[2 * k], q[2 * k + 1]),
                                _mm512_unpackhi_epi64(q[2 * k], q[2 * k + 1]));
    /* 128-bit lanes 0+1 are block 2s, 2+3 block 2s+1 */
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    return _mm512_add_epi32(_mm512_permutex2var_epi64(h[0], lo, h[1]), _mm512_permutex2var_epi64(h[0], hi, h[1]));
}

/* 8 rows x T tokens in the block order: acc[t] lanes = rows; each step adds
 * block 2s then block 2s + 1 (absent in an odd last step) with one fma each.
 * Accumulators start at zero (first) or from acc_io, end in y (last) or back
 * in acc_io (the low 8 lanes of (8, TILE_T) zmm). */
AVX512 INLINE void tile_block8(const int T, const dtype type, const uint8_t *w, size_t stride, int64_t ns, bool odd,
                               const prep_step *p, int64_t pstride, bool first, bool last, __m512 *acc_io, float *y,
                               int64_t ldy) {
    const size_t step = type == DTYPE_Q8_0 ? 68 : 36, bb = type == DTYPE_Q8_0 ? 34 : 18;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) acc[j] = first ? _mm256_setzero_ps() : _mm512_castps512_ps256(acc_io[j]);
    for (int64_t s = 0; s < ns; s++) {
        bool half = odd && s == ns - 1;
        __m512i wv[8];
        _Alignas(32) uint16_t h[16] = {0};
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const uint8_t *b = w + r * stride + s * step;
            _mm_prefetch((const char *)b + 8 * stride, _MM_HINT_T0); /* the next tile's rows */
            wv[r] = weights2(type, b, half);
            memcpy(&h[r], b, 2);
            if (!half) memcpy(&h[8 + r], b + bb, 2);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h)); /* [rows, block 2s | 2s+1] */
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const prep_step *q = p + j * pstride + s;
            __m512i xv = _mm512_load_si512(q->x), corr = _mm512_load_si512(q->corr), i[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) i[r] = _mm512_dpbusd_epi32(corr, wv[r], xv);
            __m512 f = _mm512_cvtepi32_ps(block_sums8(i)), sc = _mm512_mul_ps(dw, _mm512_load_ps(q->dx));
            acc[j] = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm512_castps512_ps256(sc), acc[j]);
            if (!half) acc[j] = _mm256_fmadd_ps(_mm512_extractf32x8_ps(f, 1), _mm512_extractf32x8_ps(sc, 1), acc[j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) {
        if (!last) {
            acc_io[j] = _mm512_castps256_ps512(acc[j]);
            continue;
        }
        _Alignas(32) float v[8];
        _mm256_store_ps(v, acc[j]);
        for (int r = 0; r < 8; r++) y[j * ldy + r] = v[r];
    }
}

/* One row x T tokens in the block order (the rows a tile_block8 leaves). */
AVX512 INLINE void tile_block1(const int T, const dtype type, const uint8_t *w, int64_t ns, bool odd,
                               const prep_step *p, int64_t pstride, bool first, bool last, __m512 *acc_io, float *y,
                               int64_t ldy) {
    const size_t step = type == DTYPE_Q8_0 ? 68 : 36, bb = type == DTYPE_Q8_0 ? 34 : 18;
    float acc[4];
    for (int j = 0; j < T; j++) acc[j] = first ? 0.0f : _mm512_cvtss_f32(acc_io[j]);
    for (int64_t s = 0; s < ns; s++) {
        bool half = odd && s == ns - 1;
        const uint8_t *b = w + s * step;
        __m512i wv = weights2(type, b, half);
        uint16_t h0, h1 = 0;
        memcpy(&h0, b, 2);
        if (!half) memcpy(&h1, b + bb, 2);
        float dw0 = _cvtsh_ss(h0), dw1 = _cvtsh_ss(h1);
        for (int j = 0; j < T; j++) {
            const prep_step *q = p + j * pstride + s;
            __m512i i = _mm512_dpbusd_epi32(_mm512_load_si512(q->corr), wv, _mm512_load_si512(q->x));
            acc[j] = fmaf((float)_mm512_mask_reduce_add_epi32(0x00FF, i), dw0 * q->dx[0], acc[j]);
            if (!half) acc[j] = fmaf((float)_mm512_mask_reduce_add_epi32(0xFF00, i), dw1 * q->dx[8], acc[j]);
        }
    }
    for (int j = 0; j < T; j++) {
        if (last) y[j * ldy] = acc[j];
        else acc_io[j] = _mm512_set1_ps(acc[j]);
    }
}

AVX512 INLINE void rows_block(const int T, const dtype type, const uint8_t *w, size_t stride, int64_t nr,
                              int64_t ns, bool odd, const prep_step *p, bool first, bool last, __m512 *acc_io,
                              float *y, int64_t ldy) {
    int64_t r = 0;
    for (; r + 8 <= nr; r += 8)
        tile_block8(T, type, w + r * stride, stride, ns, odd, p, PIECE_STEPS, first, last, acc_io + r * TILE_T,
                    y + r, ldy);
    for (; r < nr; r++)
        tile_block1(T, type, w + r * stride, ns, odd, p, PIECE_STEPS, first, last, acc_io + r * TILE_T, y + r, ldy);
}

/* Rows [r0, r1) of a piece for T tokens: tiles of ROWS_T1 rows at decode,
 * 4 rows otherwise, then single rows. */
#ifndef ROWS_T1
#define ROWS_T1 8
#endif
AVX512 INLINE void rows(const int T, const dtype type, const uint8_t *w, size_t stride, int64_t nr, int64_t ns,
                        bool odd, const prep_step *p, bool first, bool last, __m512 *acc_io, float *y,
                        int64_t ldy) {
    int64_t r = 0;
    if (T == 1 && !quant_has_min(type)) /* (a minimum's 8 more registers would not fit 8 rows) */
        for (; r + ROWS_T1 <= nr; r += ROWS_T1)
            tile(ROWS_T1, 1, type, w + r * stride, stride, ns, odd, p, PIECE_STEPS, first, last, acc_io + r * TILE_T,
                 y + r, ldy);
    for (; r + 4 <= nr; r += 4)
        tile(4, T, type, w + r * stride, stride, ns, odd, p, PIECE_STEPS, first, last, acc_io + r * TILE_T, y + r,
             ldy);
    for (; r < nr; r++)
        tile(1, T, type, w + r * stride, stride, ns, odd, p, PIECE_STEPS, first, last, acc_io + r * TILE_T, y + r,
             ldy);
}

AVX512 INLINE void range(const dtype type, const bool block, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                         int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    prep_step prep[TILE_T * PIECE_STEPS] __attribute__((aligned(64))); /* 24 KB */
    __m512 acc_io[CHUNK_ROWS * TILE_T]; /* 16 KB */
    const size_t stride = dtype_row_bytes(type, k), step = 2 * dtype_block_bytes(type);
    const int64_t nb = k / QUANT_QK, nsteps = (nb + 1) / 2;
    for (int64_t t = t0; t < t1; t += TILE_T) {
        int T = t1 - t < TILE_T ? (int)(t1 - t) : TILE_T;
        for (int64_t rc = r0; rc < r1; rc += CHUNK_ROWS) {
            int64_t nr = r1 - rc < CHUNK_ROWS ? r1 - rc : CHUNK_ROWS;
            for (int64_t s0 = 0; s0 < nsteps; s0 += PIECE_STEPS) {
                int64_t ns = nsteps - s0 < PIECE_STEPS ? nsteps - s0 : PIECE_STEPS;
                bool first = s0 == 0, last = s0 + ns == nsteps, odd = last && (nb & 1);
                for (int j = 0; j < T; j++)
                    prep_token(type, (const uint8_t *)xq + (t + j) * ldxq, nb, s0, ns, prep + j * PIECE_STEPS);
                const uint8_t *wp = (const uint8_t *)w + rc * stride + s0 * step;
                float *yp = y + t * ldy + rc;
                if (block) {
                    switch (T) {
                    case 1: rows_block(1, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                    case 2: rows_block(2, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                    case 3: rows_block(3, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                    default: rows_block(4, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                    }
                    continue;
                }
                switch (T) {
                case 1: rows(1, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                case 2: rows(2, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                case 3: rows(3, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                default: rows(4, type, wp, stride, nr, ns, odd, prep, first, last, acc_io, yp, ldy); break;
                }
            }
        }
    }
}

/* ---- the x16 layout (quant.h), block order: rows in lanes ---------------- */

#ifndef X16_AHEAD
#define X16_AHEAD 8 /* records of prefetch distance, per group stream */
#endif
enum { X16_PIECE = 512, X16_T = 4, X16_GROUPS = 4 }; /* blocks per prep piece (k 16384); tokens, 16-row groups per pass */

/* Per token and block of a piece: corr = -K * (sum of the block's 32
 * activations), K = 8 (Q4_0 nibbles) or 128 (Q8_0 weights ^ 0x80), and dx. */
AVX512 static void x16_prep(const dtype type, const uint8_t *xr, int64_t b0, int64_t nbk, int32_t *corr,
                            float *dx) {
    const __m256i k = _mm256_set1_epi8(type == DTYPE_Q8_0 ? (char)0x80 : 8);
    const uint8_t *xb = xr + b0 * QUANT_ACT_BLOCK_BYTES;
    for (int64_t i = 0; i < nbk; i++, xb += QUANT_ACT_BLOCK_BYTES) {
        __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), k, _mm256_loadu_si256((const __m256i *)(xb + 4)));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
        corr[i] = -_mm_cvtsi128_si32(h);
        memcpy(&dx[i], xb, 4);
    }
}

/* NG groups of 16 rows (records from g[n], blocks [0, nbk)) x T tokens,
 * the groups' records read in turn (NG streams keep more lines in flight):
 * acc[n][t] lanes = rows, += block b's term per block in order. x: the
 * tokens' xq rows at the piece's first block, ldxq apart. */
AVX512 INLINE void x16_groups(const int NG, const int T, const dtype type, const uint8_t *const *g, int64_t nbk,
                              const uint8_t *x, int64_t ldxq, const int32_t (*corr)[X16_PIECE],
                              const float (*dx)[X16_PIECE], __m512 (*acc)[X16_T]) {
    const size_t rec = type == DTYPE_Q8_0 ? 544 : 288;
    const __m512i m4 = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nbk; b++) {
#pragma GCC unroll 4
        for (int n = 0; n < NG; n++) {
            const uint8_t *gb = g[n] + b * rec;
            for (int i = 0; i < (int)((rec + 63) / 64); i++) /* the record X16_AHEAD on, line by line */
                _mm_prefetch((const char *)gb + X16_AHEAD * rec + 64 * i, _MM_HINT_T0);
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb));
            __m512i wv[8];
            if (type == DTYPE_Q8_0) {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) wv[j] = _mm512_xor_si512(_mm512_loadu_si512(gb + 32 + 64 * j), flip);
            } else {
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m512i q = _mm512_loadu_si512(gb + 32 + 64 * j);
                    wv[j] = _mm512_and_si512(q, m4);
                    wv[4 + j] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const uint8_t *xb = x + t * ldxq + b * QUANT_ACT_BLOCK_BYTES + 4;
                int32_t xd[8];
                memcpy(xd, xb, 32);
                /* One int32 chain per (group, token): the NG x T chains are
                 * independent enough to hide vpdpbusd's latency, and the
                 * vpaddd that joined two chains per block was 1 of ~13
                 * vector ops per 8 vpdpbusd (Q4_0, 96 rows x 16 tokens, one
                 * thread: 231-236 -> 242-247 G MAC/s per CPU second). The
                 * sum is an exact integer either way: the same bits. */
                __m512i i0 = _mm512_set1_epi32(corr[t][b]);
                /* Q4_0: wv[j] = elements 4j.., wv[4+j] = 16+4j..; Q8_0: wv[j] = 4j.. */
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    int e0 = type == DTYPE_Q8_0 ? 2 * j : j, e1 = type == DTYPE_Q8_0 ? 2 * j + 1 : 4 + j;
                    i0 = _mm512_dpbusd_epi32(i0, wv[type == DTYPE_Q8_0 ? 2 * j : j], _mm512_set1_epi32(xd[e0]));
                    i0 = _mm512_dpbusd_epi32(i0, wv[type == DTYPE_Q8_0 ? 2 * j + 1 : 4 + j], _mm512_set1_epi32(xd[e1]));
                }
                __m512 f = _mm512_cvtepi32_ps(i0);
                acc[n][t] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(dx[t][b])), acc[n][t]);
            }
        }
    }
}

AVX512 INLINE void x16_range(const int T, const dtype type, const void *w, int64_t k, const uint8_t *xq,
                             int64_t ldxq, float *y, int64_t ldy, int64_t g0, int64_t g1) {
    int32_t corr[X16_T][X16_PIECE];
    float dx[X16_T][X16_PIECE];
    __m512 acc_io[X16_GROUPS][X16_T];
    const int64_t nb = k / QUANT_QK;
    const size_t rec = type == DTYPE_Q8_0 ? 544 : 288;
    /* One piece (k <= 32 * X16_PIECE): every group in one pass, the tokens
     * prepared once; otherwise X16_GROUPS groups at a time, whose sums wait
     * in acc_io between pieces. */
    const int64_t span = nb <= X16_PIECE ? g1 - g0 : X16_GROUPS;
    for (int64_t gc = g0; gc < g1; gc += span) {
        int64_t ng = g1 - gc < span ? g1 - gc : span;
        for (int64_t b0 = 0; b0 < nb; b0 += X16_PIECE) {
            int64_t nbk = nb - b0 < X16_PIECE ? nb - b0 : X16_PIECE;
            for (int t = 0; t < T; t++) x16_prep(type, xq + t * ldxq, b0, nbk, corr[t], dx[t]);
            for (int64_t g = 0; g < ng;) {
                const int NG = ng - g >= 4 ? 4 : ng - g >= 2 ? 2 : 1;
                __m512 acc[4][X16_T];
                const uint8_t *wg[4];
                for (int n = 0; n < NG; n++) {
                    wg[n] = (const uint8_t *)w + ((gc + g + n) * nb + b0) * rec;
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) acc[n][t] = b0 == 0 ? _mm512_setzero_ps() : acc_io[g + n][t];
                }
                if (NG == 4) x16_groups(4, T, type, wg, nbk, xq + b0 * QUANT_ACT_BLOCK_BYTES, ldxq, corr, dx, acc);
                else if (NG == 2) x16_groups(2, T, type, wg, nbk, xq + b0 * QUANT_ACT_BLOCK_BYTES, ldxq, corr, dx, acc);
                else x16_groups(1, T, type, wg, nbk, xq + b0 * QUANT_ACT_BLOCK_BYTES, ldxq, corr, dx, acc);
                for (int n = 0; n < NG; n++)
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) {
                        if (b0 + nbk < nb) acc_io[g + n][t] = acc[n][t];
                        else _mm512_storeu_ps(y + t * ldy + (gc + g + n) * 16, acc[n][t]);
                    }
                g += NG;
            }
        }
    }
}

#define X16_ENTRY(name, type)                                                                                     \
    AVX512 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,       \
                            int64_t g0, int64_t g1, int64_t t0, int64_t t1) {                                     \
        const uint8_t *x = (const uint8_t *)xq;                                                                   \
        int64_t t = t0;                                                                                           \
        for (; t + 4 <= t1; t += 4) x16_range(4, type, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1);       \
        switch (t1 - t) {                                                                                         \
        case 3: x16_range(3, type, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1); break;                    \
        case 2: x16_range(2, type, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1); break;                    \
        case 1: x16_range(1, type, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1); break;                    \
        default: break;                                                                                           \
        }                                                                                                         \
    }
X16_ENTRY(x16_q8_0, DTYPE_Q8_0)
X16_ENTRY(x16_q4_0, DTYPE_Q4_0)

void quant_matmul_act_range_x16_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                       int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx512() || r0 % 16 || r1 % 16) abort(); /* a caller bug */
    if (type == DTYPE_Q8_0) x16_q8_0(w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
    else if (type == DTYPE_Q4_0) x16_q4_0(w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
    else abort(); /* a caller bug: no x16 layout for this type */
}

AVX512 static void range_q8_0(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                              int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q8_0, false, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

AVX512 static void range_block_q8_0(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                                    int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q8_0, true, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

AVX512 static void range_q4_0(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                              int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q4_0, false, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

AVX512 static void range_block_q4_0(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                                    int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q4_0, true, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

#define WIDE_ENTRY(name, type)                                                                                     \
    AVX512 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,         \
                            int64_t r0, int64_t r1, int64_t t0, int64_t t1) {                                      \
        range(type, false, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);                                                \
    }
WIDE_ENTRY(range_q4_1, DTYPE_Q4_1)
WIDE_ENTRY(range_q5_0, DTYPE_Q5_0)
WIDE_ENTRY(range_q5_1, DTYPE_Q5_1)
WIDE_ENTRY(range_iq4_nl, DTYPE_IQ4_NL)

void quant_matmul_act_range_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                   int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx512()) abort(); /* a caller bug: test quant_use_avx512() first */
    switch (type) {
    case DTYPE_Q8_0: range_q8_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q4_0: range_q4_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q4_1: range_q4_1(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q5_0: range_q5_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_Q5_1: range_q5_1(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    case DTYPE_IQ4_NL: range_iq4_nl(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1); break;
    default: abort(); /* a caller bug: no integer kernel for this type */
    }
}

void quant_matmul_act_range_avx512_block(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                         float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx512()) abort(); /* a caller bug: test quant_use_avx512() first */
    if (type == DTYPE_Q8_0) range_block_q8_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else if (type == DTYPE_Q4_0) range_block_q4_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else abort(); /* a caller bug: no integer kernel for this type */
}
#else
void quant_matmul_act_range_avx512_block(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                         float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    abort(); /* never chosen: quant_use_avx512() is false off x86-64 */
}

void quant_matmul_act_range_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                   int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    abort(); /* never chosen: quant_use_avx512() is false off x86-64 */
}
#endif
