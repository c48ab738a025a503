/*
 * quant_k_amx.c - Q4_K / Q6_K weights x 8-bit activations on AMX-INT8 tiles,
 * the prefill path of quant_matmul_act_range_k when quant_use_amx() says so.
 *
 * The float order is quant_k.c's (eight accumulators per output, lane j fed
 * by activation block j of each super-block, super-blocks in order); only the
 * exact integer sums come from the tiles, so every output has the bits of the
 * portable mirror and of the AVX2 kernel, whatever the batch.
 *
 * Per super-block of 16 weight rows, the rows are unpacked once into a
 * scratch of 8 blocks x 16 rows x 32 bytes (Q4_K nibbles 0..15; Q6_K signed
 * q6 - 32), and per activation block j one tile multiply (tdpbusd, u8 x s8,
 * for Q4_K; tdpbssd, s8 x s8, for Q6_K) gives the integer dots for 16 rows x
 * T tokens (T <= 16):
 *     A: 16 rows x 32 bytes of block j (Q6_K: two tiles of 16 bytes, one per
 *        16-element sub-block, since each has its own scale);
 *     B: 8 rows x 4T bytes, B[q][4t + i] = x_t[4q + i] (Q6_K: rows 0..3 and
 *        4..7 as two tiles), prepared once per k piece for the token group;
 *     C: 16 x T int32, stored to a scratch and read back one row per zmm.
 * Epilogue per (row r, block j), token lanes in one zmm, all integers below
 * 2^24 so the float products of integers are exact:
 *     Q4_K: acc = fma(C * sc_j, d * dx_j, acc)
 *           acc = fma(xs_j * m_j, -(dmin * dx_j), acc)   xs_j = sum of x_t block j
 *     Q6_K: iq = C_lo * s_2j + C_hi * s_2j+1 (exact)
 *           acc = fma(iq, d * dx_j, acc)
 * with acc[row][j] (token lanes) in a stack array across k pieces, then the
 * quant_k_reduce tree per lane.
 *
 * Two full 16-token groups share each unpacked super-block (one unpack, two
 * sets of tile products and epilogues); a remainder of fewer than 32 tokens
 * goes one group at a time. Measured on Sapphire Rapids (1024 x 5632 x 32
 * tokens, one thread): the epilogue is ~40% of the time, unpack + activation
 * prep ~25%, the tiles ~30%. Software-pipelining the tile products of one
 * super-block under the epilogue of the previous one (double-buffered
 * scratches), four C tiles instead of two, and software prefetch of the rows
 * did not help (the bigger stack footprint made Q6_K slower).
 *
 * Tile state is per thread: each call loads its configuration per token group
 * and releases the tiles before it returns. Stack: ~130 KB.
 */
#include "kernels/quant_k.h"

#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>

#define AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    ROWS = 16,       /* weight rows per tile multiply */
    TOKENS = 16,     /* tokens per tile multiply at most */
    PIECE = 4,       /* super-blocks of k prepared at a time */
    CHUNK_ROWS = 64, /* rows whose accumulators wait on the stack between pieces */
    GROUPS = 2,      /* 16-token groups sharing each unpacked super-block */
    AHEAD = 4,       /* prefetch distance in super-blocks */
};

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* One activation block of a piece, token lanes. */
typedef struct {
    int8_t b[8][64];    /* B tile rows */
    float dx[16];       /* scales, 0 beyond T */
    float xs[16];       /* Q4_K: sum of the 32 xq */
} prep_block;

/* Per-row values of one super-block, decoded for the epilogue. */
typedef struct {
    float d[ROWS], dmin[ROWS];
    float sc[ROWS][16]; /* Q4_K: sc_j (j < 8) then m_j at 8 + j; Q6_K: s_0..s_15 */
} row_scales;

/* Blocks [b0, b0 + nbk) of T tokens' xq rows into p (lanes >= T zero; xs
 * for Q4_K only).
 * Per block the 16 tokens' 8 dwords are transposed in registers (token t
 * and t + 8 share a zmm; an 8x8 dword transpose per 256-bit half) so that
 * B row q holds dword q of every token; dx comes by a masked gather. */
AMX static void prep_piece(const dtype type, const uint8_t *xq, int64_t ldxq, int T, int64_t b0, int64_t nbk,
                           prep_block *p) {
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __mmask16 live = (__mmask16)((1u << T) - 1);
    const __m512i voff = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)ldxq));
    for (int64_t i = 0; i < nbk; i++) {
        const uint8_t *xb = xq + (b0 + i) * QUANT_ACT_BLOCK_BYTES;
        __m512i z[8];
        for (int t = 0; t < 8; t++) {
            __m256i a = t < T ? _mm256_loadu_si256((const __m256i *)(xb + t * ldxq + 4)) : _mm256_setzero_si256();
            __m256i b = t + 8 < T ? _mm256_loadu_si256((const __m256i *)(xb + (t + 8) * ldxq + 4))
                                  : _mm256_setzero_si256();
            z[t] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        }
        __m512i u[8], v[8];
        for (int h = 0; h < 4; h++) {
            u[2 * h] = _mm512_unpacklo_epi32(z[2 * h], z[2 * h + 1]);
            u[2 * h + 1] = _mm512_unpackhi_epi32(z[2 * h], z[2 * h + 1]);
        }
        for (int h = 0; h < 2; h++) { /* rows 4h..4h+3: columns (0,4) (1,5) (2,6) (3,7) */
            v[4 * h] = _mm512_unpacklo_epi64(u[4 * h], u[4 * h + 2]);
            v[4 * h + 1] = _mm512_unpackhi_epi64(u[4 * h], u[4 * h + 2]);
            v[4 * h + 2] = _mm512_unpacklo_epi64(u[4 * h + 1], u[4 * h + 3]);
            v[4 * h + 3] = _mm512_unpackhi_epi64(u[4 * h + 1], u[4 * h + 3]);
        }
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        for (int q = 0; q < 4; q++) {
            __m512i bq = _mm512_permutex2var_epi64(v[q], lo_idx, v[4 + q]);     /* dword q */
            __m512i bq4 = _mm512_permutex2var_epi64(v[q], hi_idx, v[4 + q]);    /* dword q + 4 */
            _mm512_store_si512(p[i].b[q], bq);
            _mm512_store_si512(p[i].b[q + 4], bq4);
            if (type == DTYPE_Q4_K) {
                lo = _mm512_dpbusd_epi32(lo, ones, bq);
                hi = _mm512_dpbusd_epi32(hi, ones, bq4);
            }
        }
        _mm512_store_ps(p[i].dx, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, voff, xb, 1));
        if (type == DTYPE_Q4_K) _mm512_store_ps(p[i].xs, _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)));
    }
}

/* Super-block s of R rows (row 0 at w, stride apart) into a (block, row, 32
 * values) and rs. Rows >= R of a are left as they are (their C rows unused). */
AMX INLINE void unpack_q4_k(const uint8_t *w, size_t stride, int R, uint8_t a[8][ROWS][32], row_scales *rs) {
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int r = 0; r < R; r++) {
        const uint8_t *b = w + r * stride;

        rs->d[r] = _cvtsh_ss((unsigned short)(b[0] | b[1] << 8));
        rs->dmin[r] = _cvtsh_ss((unsigned short)(b[2] | b[3] << 8));
        uint64_t sc8, m8;
        q4_k_scales_mins(b, &sc8, &m8);
        __m128i sm = _mm_set_epi64x((long long)m8, (long long)sc8);
        _mm512_store_ps(rs->sc[r], _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm)));
        for (int p = 0; p < 4; p++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * p));
            _mm256_store_si256((__m256i *)a[2 * p][r], _mm256_and_si256(q, m4));
            _mm256_store_si256((__m256i *)a[2 * p + 1][r], _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        }
    }
}

AMX INLINE void unpack_q6_k(const uint8_t *w, size_t stride, int R, uint8_t a[8][ROWS][32], row_scales *rs) {
    for (int r = 0; r < R; r++) {
        const uint8_t *b = w + r * stride;

        rs->d[r] = _cvtsh_ss((unsigned short)(b[208] | b[209] << 8));
        _mm512_store_ps(rs->sc[r], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)))));
        for (int h = 0; h < 2; h++) {
            __m256i wv[4];
            q6_k_unpack_half_avx2(b, h, wv); /* signed q6 - 32 */
            for (int i = 0; i < 4; i++) _mm256_store_si256((__m256i *)a[4 * h + i][r], wv[i]);
        }
    }
}

/* The integer dots of the 8 blocks of a super-block: Q4_K c[0][j] (tiles
 * 0/1 A, 2/3 B, 4/5 C, alternating per block); Q6_K c[0][j] from the first
 * 16 elements, c[1][j] from the last (tiles 0/1 A, 2/3 B, 4/5 C). */
AMX INLINE void tile_products(const dtype type, uint8_t a[8][ROWS][32], const prep_block *p,
                              int32_t c[2][8][ROWS][16]) {
    if (type == DTYPE_Q4_K) {
        for (int j = 0; j < 8; j += 2) {
            _tile_loadd(0, a[j], 32);
            _tile_loadd(2, p[j].b, 64);
            _tile_zero(4);
            _tile_dpbusd(4, 0, 2);
            _tile_loadd(1, a[j + 1], 32);
            _tile_loadd(3, p[j + 1].b, 64);
            _tile_zero(5);
            _tile_dpbusd(5, 1, 3);
            _tile_stored(4, c[0][j], 64);
            _tile_stored(5, c[0][j + 1], 64);
        }
    } else {
        for (int j = 0; j < 8; j++) {
            _tile_loadd(0, a[j], 32);
            _tile_loadd(1, a[j][0] + 16, 32);
            _tile_loadd(2, p[j].b[0], 64);
            _tile_loadd(3, p[j].b[4], 64);
            _tile_zero(4);
            _tile_zero(5);
            _tile_dpbssd(4, 0, 2);
            _tile_dpbssd(5, 1, 3);
            _tile_stored(4, c[0][j], 64);
            _tile_stored(5, c[1][j], 64);
        }
    }
}

/* acc[r][j] (token lanes) += super-block terms of rows r < R. */
AMX INLINE void epilogue(const dtype type, int R, const prep_block *p, const row_scales *rs,
                         const int32_t c[2][8][ROWS][16], __m512 (*acc)[8]) {
    for (int j = 0; j < 8; j++) {
        __m512 dx = _mm512_load_ps(p[j].dx);
        if (type == DTYPE_Q4_K) {
            __m512 xs = _mm512_load_ps(p[j].xs);
            for (int r = 0; r < R; r++) {
                __m512 iq = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[0][j][r])), _mm512_set1_ps(rs->sc[r][j]));
                __m512 a = _mm512_fmadd_ps(iq, _mm512_mul_ps(_mm512_set1_ps(rs->d[r]), dx), acc[r][j]);
                __m512 ix = _mm512_mul_ps(xs, _mm512_set1_ps(rs->sc[r][8 + j]));
                acc[r][j] = _mm512_fnmadd_ps(ix, _mm512_mul_ps(_mm512_set1_ps(rs->dmin[r]), dx), a);
            }
        } else {
            for (int r = 0; r < R; r++) {
                __m512 lo = _mm512_cvtepi32_ps(_mm512_load_si512(c[0][j][r]));
                __m512 hi = _mm512_cvtepi32_ps(_mm512_load_si512(c[1][j][r]));
                __m512 iq = _mm512_fmadd_ps(lo, _mm512_set1_ps(rs->sc[r][2 * j]),
                                            _mm512_mul_ps(hi, _mm512_set1_ps(rs->sc[r][2 * j + 1])));
                acc[r][j] = _mm512_fmadd_ps(iq, _mm512_mul_ps(_mm512_set1_ps(rs->d[r]), dx), acc[r][j]);
            }
        }
    }
}

AMX INLINE void range(const dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                      int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    _Alignas(64) prep_block prep[GROUPS][PIECE * 8];
    _Alignas(64) uint8_t a[8][ROWS][32];
    _Alignas(64) int32_t c[2][8][ROWS][16];
    _Alignas(64) row_scales rs;
    _Alignas(64) __m512 acc[GROUPS][CHUNK_ROWS][8];
    const size_t stride = dtype_row_bytes(type, k), bb = dtype_block_bytes(type);
    const int64_t nsb = k / QUANT_QK_K;
    if ((r1 - r0) % ROWS) memset(a, 0, sizeof a), memset(&rs, 0, sizeof rs); /* rows >= R: unused, defined */
    if ((t1 - t0) % TOKENS) memset(c, 0, sizeof c); /* lanes >= T: never written by the tiles, unused */
    for (int64_t t = t0; t < t1;) {
        /* G groups of T tokens: GROUPS full groups share each unpacked super-block */
        int G = t1 - t >= GROUPS * TOKENS ? GROUPS : 1;
        int T = t1 - t < TOKENS ? (int)(t1 - t) : TOKENS;
        tile_config cfg = {.palette = 1};
        if (type == DTYPE_Q4_K) {
            for (int i = 0; i < 2; i++) {
                cfg.rows[i] = ROWS, cfg.colsb[i] = 32;                        /* A */
                cfg.rows[2 + i] = 8, cfg.colsb[2 + i] = (uint16_t)(4 * T);    /* B */
                cfg.rows[4 + i] = ROWS, cfg.colsb[4 + i] = (uint16_t)(4 * T); /* C */
            }
        } else {
            for (int i = 0; i < 2; i++) {
                cfg.rows[i] = ROWS, cfg.colsb[i] = 16;                        /* A: one sub-block */
                cfg.rows[2 + i] = 4, cfg.colsb[2 + i] = (uint16_t)(4 * T);    /* B: its 16 xq */
                cfg.rows[4 + i] = ROWS, cfg.colsb[4 + i] = (uint16_t)(4 * T); /* C */
            }
        }
        _tile_loadconfig(&cfg);
        const uint8_t *xt = (const uint8_t *)xq + t * ldxq;
        for (int64_t rc = r0; rc < r1; rc += CHUNK_ROWS) {
            int64_t nr = r1 - rc < CHUNK_ROWS ? r1 - rc : CHUNK_ROWS;
            for (int g = 0; g < G; g++) memset(acc[g], 0, (size_t)nr * sizeof acc[g][0]);
            for (int64_t s0 = 0; s0 < nsb; s0 += PIECE) {
                int64_t ns = nsb - s0 < PIECE ? nsb - s0 : PIECE;
                for (int g = 0; g < G; g++) prep_piece(type, xt + g * TOKENS * ldxq, ldxq, T, 8 * s0, 8 * ns, prep[g]);
                for (int64_t rg = 0; rg < nr; rg += ROWS) {
                    int R = nr - rg < ROWS ? (int)(nr - rg) : ROWS;
                    const uint8_t *wr = (const uint8_t *)w + (rc + rg) * stride;
                    for (int64_t s = 0; s < ns; s++) {
                        if (type == DTYPE_Q4_K) unpack_q4_k(wr + (s0 + s) * bb, stride, R, a, &rs);
                        else unpack_q6_k(wr + (s0 + s) * bb, stride, R, a, &rs);
                        for (int g = 0; g < G; g++) {
                            tile_products(type, a, prep[g] + 8 * s, c);
                            if (R == ROWS) epilogue(type, ROWS, prep[g] + 8 * s, &rs, c, acc[g] + rg);
                            else epilogue(type, R, prep[g] + 8 * s, &rs, c, acc[g] + rg);
                        }
                    }
                }
            }
            for (int g = 0; g < G; g++)
                for (int64_t r = 0; r < nr; r++) {
                    __m512 *v = acc[g][r];
                    __m512 s0 = _mm512_add_ps(v[0], v[4]), s1 = _mm512_add_ps(v[1], v[5]);
                    __m512 s2 = _mm512_add_ps(v[2], v[6]), s3 = _mm512_add_ps(v[3], v[7]);
                    _Alignas(64) float o[16];
                    _mm512_store_ps(o, _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
                    for (int i = 0; i < T; i++) y[(t - t0 + g * TOKENS + i) * ldy + rc - r0 + r] = o[i];
                }
        }
        _tile_release();
        t += G * T;
    }
}

AMX static void range_q4_k(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                           int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q4_K, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

AMX static void range_q6_k(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                           int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q6_K, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

void quant_matmul_act_range_k_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                  int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!quant_amx_available() || !quant_k_amx_takes(type)) abort(); /* a caller bug */
    /* w, xq and y as the caller indexes them: row r0's and token t0's */
    const uint8_t *wr = (const uint8_t *)w + r0 * dtype_row_bytes(type, k);
    const uint8_t *xt = (const uint8_t *)xq + t0 * ldxq;
    float *yt = y + t0 * ldy + r0;
    if (type == DTYPE_Q4_K) range_q4_k(wr, k, xt, ldxq, yt, ldy, 0, r1 - r0, 0, t1 - t0);
    else range_q6_k(wr, k, xt, ldxq, yt, ldy, 0, r1 - r0, 0, t1 - t0);
}
#else
void quant_matmul_act_range_k_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                  int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    (void)type, (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)r0, (void)r1, (void)t0, (void)t1;
    abort(); /* never chosen: quant_amx_available() is false here */
}
#endif
