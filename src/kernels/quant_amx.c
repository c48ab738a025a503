/*
 * quant_amx.c - Q8_0 / Q4_0 weights x 8-bit activations on AMX-INT8 tiles
 * (Sapphire Rapids and later), the path quant_matmul_act_range takes when
 * quant_use_amx() says so.
 *
 * One tile multiply per 32-block computes a block's whole integer dot for 16
 * weight rows x T tokens (T <= 16):
 *     A (tiles 0/1): 16 rows x 32 bytes, the rows' weights of block b: read
 *                 straight from the GGUF rows for Q8_0 (stride = row bytes),
 *                 unpacked to nibbles (0..15) in a scratch tile for Q4_0;
 *     B (tiles 2/3): 8 rows x 4T bytes, B[q][4t + j] = x_t[4q + j] (prepared
 *                 once per call and k piece from the tokens' xq rows);
 *     C (tiles 4/5): 16 x T int32, C[r][t] = isum of (row r, token t, block b):
 *                 tdpbssd for Q8_0 (s8 x s8); tdpbusd for Q4_0 (u8 nibble
 *                 x s8), then + corr[t] = -8 * sum(x_t block b), exact.
 * Then, per weight row r, one zmm of T token lanes:
 *     acc[r][t] = fma((float)C[r][t], dw_r * dx_t, acc[r][t])
 * over blocks in order, and y = acc: the "block" order of quant.h
 * (quant_dot_act_block_portable in C). Each output's operations do not depend
 * on T, the row group or the k pieces, so results are batch invariant.
 *
 * x16 copies (quant.h; quant_matmul_act_range_x16_amx) swap the roles: the
 * weights are the B tile (8 rows of 64 bytes = dwords (j, row): the record
 * as stored for Q8_0, nibbles - 8 unpacked for Q4_0) and the activations the
 * A tile, read in place from the xq rows (stride ldxq, skipping the scale),
 * so C = 16 tokens x 16 rows, tdpbssd, with no preparation of B and no
 * correction term; the float work is per token, one zmm of 16 rows:
 *     acc[t][r] = fma((float)C[t][r], dw_r * dx_t, acc[t][r])
 * in block order, the same operations per output as above (dw * dx commutes
 * exactly), so both layouts give the same bits.
 *
 * Tile state is per thread: every call loads its tile configuration and
 * releases the tiles before it returns. The kernel needs the process's
 * permission for the AMX state (kernels_amx_tiles_permitted, amx.h, asked
 * once by quant_amx_available); without it quant.c never calls in here.
 */
#include "kernels/quant.h"

#include "kernels/amx.h"
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>

#define AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    ROWS = 16,          /* weight rows per tile multiply */
    TOKENS = 16,        /* tokens per tile multiply at most */
    PIECE = 64,         /* blocks of k prepared at a time */
    CHUNK_ROWS = 64,    /* rows whose accumulators wait in acc_io between pieces */
    PREFETCH = 1024,    /* software prefetch distance into each weight row */
};

bool quant_amx_available(void) {
    static atomic_int state = -1;
    int s = atomic_load(&state);
    if (s < 0) {
        unsigned a, b, c, d;
        /* CPUID.(7,0):EDX bit 25 AMX-INT8; the tile state's grant: amx.h */
        s = kernels_amx_tiles_permitted() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 25 & 1);
        atomic_store(&state, s);
    }
    return s == 1;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Per block of a piece: the B tile, and dx / corr in token lanes. */
typedef struct {
    int8_t b[8][64];
    float dx[16];
    int32_t corr[16];
} prep_block;

/* Blocks [b0, b0 + nbk) of tokens' xq rows into p: B tile rows (lanes < T
 * only: the tile reads 4T bytes a row), dx (lanes >= T zero) and, for Q4_0,
 * corr = -8 * the lane's sum of 32 activations. */
AMX static void prep_piece(const dtype type, const uint8_t *xq, int64_t ldxq, int T, int64_t b0, int64_t nbk,
                           prep_block *p) {
    for (int64_t i = 0; i < nbk; i++) _mm512_store_ps(p[i].dx, _mm512_setzero_ps());
    for (int t = 0; t < T; t++) {
        const uint8_t *xb = xq + t * ldxq + b0 * QUANT_ACT_BLOCK_BYTES;
        for (int64_t i = 0; i < nbk; i++, xb += QUANT_ACT_BLOCK_BYTES) {
            memcpy(&p[i].dx[t], xb, 4);
            for (int q = 0; q < 8; q++) memcpy(&p[i].b[q][4 * t], xb + 4 + 4 * q, 4);
        }
    }
    if (type != DTYPE_Q4_0) return;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t i = 0; i < nbk; i++) {
        __m512i sum = _mm512_setzero_si512();
        for (int q = 0; q < 8; q++) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(p[i].b[q]));
        _mm512_store_si512(p[i].corr, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3)));
    }
}

/* Q4_0 block of R rows (at w, stride apart) unpacked to nibble bytes. */
AMX INLINE void unpack_q4_0(const uint8_t *w, size_t stride, int R, uint8_t a[ROWS][32]) {
    const __m128i m = _mm_set1_epi8(15);
    for (int r = 0; r < R; r++) {
        __m128i q = _mm_loadu_si128((const __m128i *)(w + r * stride + 2));
        _mm_store_si128((__m128i *)a[r], _mm_and_si128(q, m));
        _mm_store_si128((__m128i *)(a[r] + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m));
    }
}

/* Tile products of blocks i (and i + 1 when two) of R rows into c[0..two]:
 * A in tiles 0/1, B in 2/3, C in 4/5. */
AMX INLINE void tile_products(const dtype type, const uint8_t *wb, size_t stride, int R, bool two,
                              const prep_block *p, uint8_t a[2][ROWS][32], int32_t c[2][ROWS][16]) {
    const size_t bb = type == DTYPE_Q8_0 ? 34 : 18;
    for (int r = 0; r < R; r++) _mm_prefetch((const char *)wb + r * stride + PREFETCH, _MM_HINT_T0);
    if (type == DTYPE_Q8_0 && R == ROWS) {
        _tile_loadd(0, wb + 2, stride);
        if (two) _tile_loadd(1, wb + bb + 2, stride);
    } else {
        for (int h = 0; h < 1 + two; h++) {
            const uint8_t *w = wb + h * bb;
            if (type == DTYPE_Q8_0)
                for (int r = 0; r < R; r++) memcpy(a[h][r], w + r * stride + 2, 32);
            else
                unpack_q4_0(w, stride, R, a[h]);
        }
        _tile_loadd(0, a[0], 32);
        if (two) _tile_loadd(1, a[1], 32);
    }
    _tile_loadd(2, p[0].b, 64);
    _tile_zero(4);
    if (type == DTYPE_Q8_0) _tile_dpbssd(4, 0, 2);
    else _tile_dpbusd(4, 0, 2);
    if (two) {
        _tile_loadd(3, p[1].b, 64);
        _tile_zero(5);
        if (type == DTYPE_Q8_0) _tile_dpbssd(5, 1, 3);
        else _tile_dpbusd(5, 1, 3);
    }
    _tile_stored(4, c[0], 64);
    if (two) _tile_stored(5, c[1], 64);
}

/* acc[r] (token lanes) += block i's terms, from its products c. */
AMX INLINE void block_epilogue(const dtype type, const uint8_t *wb, size_t stride, int R, const prep_block *p,
                               const int32_t c[ROWS][16], __m512 acc[ROWS]) {
    __m512 dx = _mm512_load_ps(p->dx);
    __m512i corr = _mm512_load_si512(p->corr);
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; r++) {
        if (r >= R) break;
        __m512i ci = _mm512_load_si512(c[r]);
        if (type == DTYPE_Q4_0) ci = _mm512_add_epi32(ci, corr);
        uint16_t h;
        memcpy(&h, wb + r * stride, 2);
        __m512 dw = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ci), _mm512_mul_ps(dw, dx), acc[r]);
    }
}

/* R (<= 16) rows x the configured T tokens over blocks [0, nbk) of a piece
 * (w: row 0's first block of the piece). Accumulators (token lanes) start at
 * zero (first) or from acc_io, end in y (last) or back in acc_io. Blocks go
 * two at a time through the tiles, and the float work of a pair waits until
 * the next pair's tile products are issued, so the two overlap. */
AMX INLINE void tile_rows(const dtype type, const uint8_t *w, size_t stride, int R, int T, int64_t nbk,
                          const prep_block *p, bool first, bool last, __m512 *acc_io, float *y, int64_t ldy) {
    const size_t bb = type == DTYPE_Q8_0 ? 34 : 18;
    _Alignas(64) uint8_t a[2][ROWS][32];
    _Alignas(64) int32_t c[2][2][ROWS][16]; /* (pair parity, block of the pair, row, token) */
    __m512 acc[ROWS];
    if (R < ROWS) memset(a, 0, sizeof a);
    memset(c, 0, sizeof c); /* lanes >= T: never written by the tiles, never stored to y */
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; r++) acc[r] = first ? _mm512_setzero_ps() : acc_io[r];
    for (int64_t i = 0; i < nbk + 2; i += 2) {
        int par = (int)(i / 2) & 1;
        if (i < nbk) tile_products(type, w + i * bb, stride, R, i + 1 < nbk, p + i, a, c[par]);
        if (i >= 2) {
            int64_t j = i - 2;
            block_epilogue(type, w + j * bb, stride, R, p + j, c[!par][0], acc);
            if (j + 1 < nbk) block_epilogue(type, w + (j + 1) * bb, stride, R, p + j + 1, c[!par][1], acc);
        }
    }
    for (int r = 0; r < R; r++) {
        if (!last) {
            acc_io[r] = acc[r];
            continue;
        }
        _Alignas(64) float v[16];
        _mm512_store_ps(v, acc[r]);
        for (int t = 0; t < T; t++) y[t * ldy + r] = v[t];
    }
}

AMX INLINE void range(const dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                      int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    _Alignas(64) prep_block prep[PIECE]; /* 36 KB */
    __m512 acc_io[CHUNK_ROWS];
    const size_t stride = dtype_row_bytes(type, k), bb = dtype_block_bytes(type);
    const int64_t nb = k / QUANT_QK;
    for (int64_t t = t0; t < t1; t += TOKENS) {
        int T = t1 - t < TOKENS ? (int)(t1 - t) : TOKENS;
        tile_config cfg = {.palette = 1};
        for (int i = 0; i < 2; i++) {
            cfg.rows[i] = ROWS, cfg.colsb[i] = 32;                    /* A */
            cfg.rows[2 + i] = 8, cfg.colsb[2 + i] = (uint16_t)(4 * T); /* B */
            cfg.rows[4 + i] = ROWS, cfg.colsb[4 + i] = (uint16_t)(4 * T); /* C */
        }
        _tile_loadconfig(&cfg);
        const uint8_t *xt = (const uint8_t *)xq + t * ldxq;
        for (int64_t rc = r0; rc < r1; rc += CHUNK_ROWS) {
            int64_t nr = r1 - rc < CHUNK_ROWS ? r1 - rc : CHUNK_ROWS;
            for (int64_t b0 = 0; b0 < nb; b0 += PIECE) {
                int64_t nbk = nb - b0 < PIECE ? nb - b0 : PIECE;
                bool first = b0 == 0, last = b0 + nbk == nb;
                prep_piece(type, xt, ldxq, T, b0, nbk, prep);
                for (int64_t rg = 0; rg < nr; rg += ROWS) {
                    const uint8_t *wr = (const uint8_t *)w + (rc + rg) * stride + b0 * bb;
                    float *yr = y + t * ldy + rc + rg;
                    if (nr - rg >= ROWS) /* R a constant: the accumulators stay in registers */
                        tile_rows(type, wr, stride, ROWS, T, nbk, prep, first, last, acc_io + rg, yr, ldy);
                    else
                        tile_rows(type, wr, stride, (int)(nr - rg), T, nbk, prep, first, last, acc_io + rg, yr, ldy);
                }
            }
        }
        _tile_release();
    }
}

AMX static void range_q8_0(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                           int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q8_0, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

AMX static void range_q4_0(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                           int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    range(DTYPE_Q4_0, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
}

/* ---- the x16 layout (quant.h): weights as B tiles, activations as A ------- */


/* Q4_0 quants of a record as signed bytes (nibble - 8) in B tile rows:
 * bq[j] = elements 4j..4j+3 of the 16 rows, j < 8. */
AMX INLINE void x16_unpack_q4_0(const uint8_t *g, uint8_t bq[8][64]) {
    const __m512i m4 = _mm512_set1_epi8(15), e8 = _mm512_set1_epi8(8);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512i q = _mm512_loadu_si512(g + 32 + 64 * j);
        _mm512_store_si512(bq[j], _mm512_sub_epi8(_mm512_and_si512(q, m4), e8));
        _mm512_store_si512(bq[4 + j], _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), e8));
    }
}

/* The tile products of a pair of blocks (the second absent unless two):
 * C tiles 4, 5 (set 0) or 6, 7 (set 1) = the T tokens (A, straight from
 * xq: tiles 0, 1) x the group's 16 rows (B: the record's int8 quants for
 * Q8_0, the unpacked bq for Q4_0: tiles 2, 3), all signed: exact isums. */
AMX INLINE void x16_issue(const dtype type, const int set, const uint8_t *g, const uint8_t *xb, int64_t ldxq,
                          bool two, const uint8_t (*bq)[8][64]) {
    const size_t rec = type == DTYPE_Q8_0 ? 544 : 288;
    _tile_loadd(0, xb + 4, ldxq);
    if (type == DTYPE_Q8_0) _tile_loadd(2, g + 32, 64);
    else _tile_loadd(2, bq[0], 64);
    if (set == 0) {
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
    } else {
        _tile_zero(6);
        _tile_dpbssd(6, 0, 2);
    }
    if (!two) return;
    _tile_loadd(1, xb + QUANT_ACT_BLOCK_BYTES + 4, ldxq);
    if (type == DTYPE_Q8_0) _tile_loadd(3, g + rec + 32, 64);
    else _tile_loadd(3, bq[1], 64);
    if (set == 0) {
        _tile_zero(5);
        _tile_dpbssd(5, 1, 3);
    } else {
        _tile_zero(7);
        _tile_dpbssd(7, 1, 3);
    }
}

AMX INLINE void x16_store(const int set, bool two, int32_t c[2][TOKENS][16]) {
    if (set == 0) {
        _tile_stored(4, c[0], 64);
        if (two) _tile_stored(5, c[1], 64);
    } else {
        _tile_stored(6, c[0], 64);
        if (two) _tile_stored(7, c[1], 64);
    }
}

/* acc[t] (lanes = the group's rows) += the block's terms for tokens t < T. */
AMX INLINE void x16_epilogue(const uint8_t *g, const uint8_t *xb, int64_t ldxq, int T, const int32_t c[TOKENS][16],
                             __m512 acc[TOKENS]) {
    __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
#pragma GCC unroll 16
    for (int t = 0; t < TOKENS; t++) {
        if (t >= T) break;
        float dx;
        memcpy(&dx, xb + t * ldxq, 4);
        __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(c[t]));
        acc[t] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[t]);
    }
}

/* Groups [g0, g1) x T tokens over the whole of k, blocks in pairs. A
 * pair's tile products are issued into one C tile set while the previous
 * pair's (other set) are stored, and the float work reads a pair's
 * products a step later still; Q4_0 records are unpacked a pair ahead. */
AMX INLINE void x16_range(const dtype type, const void *w, int64_t k, const uint8_t *xq, int64_t ldxq, float *y,
                          int64_t ldy, int64_t g0, int64_t g1, int T) {
    _Alignas(64) int32_t c[3][2][TOKENS][16];
    _Alignas(64) uint8_t bq[2][2][8][64];
    const int64_t nb = k / QUANT_QK, np = (nb + 1) / 2;
    const size_t rec = type == DTYPE_Q8_0 ? 544 : 288;
    memset(c, 0, sizeof c);
    for (int64_t g = g0; g < g1; g++) {
        __m512 acc[TOKENS];
#pragma GCC unroll 16
        for (int t = 0; t < TOKENS; t++) acc[t] = _mm512_setzero_ps();
        const uint8_t *wg = (const uint8_t *)w + g * nb * rec;
        if (type == DTYPE_Q4_0) {
            x16_unpack_q4_0(wg, bq[0][0]);
            if (nb > 1) x16_unpack_q4_0(wg + rec, bq[0][1]);
        }
        for (int64_t p = 0; p < np + 2; p += 2) { /* two pairs per pass: the tile sets are constants */
#pragma GCC unroll 2
            for (int set = 0; set < 2; set++) {
                int64_t q = p + set, b = 2 * q;
                if (q < np) {
                    if (type == DTYPE_Q4_0 && b + 2 < nb) { /* the next pair's records */
                        x16_unpack_q4_0(wg + (b + 2) * rec, bq[!set][0]);
                        if (b + 3 < nb) x16_unpack_q4_0(wg + (b + 3) * rec, bq[!set][1]);
                    }
                    for (int i = 0; i < 2 * (4 + 4 * (type == DTYPE_Q8_0)); i++)
                        _mm_prefetch((const char *)wg + (b + 4) * rec + 32 + 64 * i, _MM_HINT_T0);
                    x16_issue(type, set, wg + b * rec, xq + b * QUANT_ACT_BLOCK_BYTES, ldxq, b + 1 < nb,
                              (const uint8_t (*)[8][64])bq[set]);
                }
                if (q >= 1 && q - 1 < np) x16_store(!set, 2 * q - 1 < nb, c[(q - 1) % 3]);
                if (q >= 2 && q - 2 < np) {
                    int64_t j = 2 * (q - 2);
                    x16_epilogue(wg + j * rec, xq + j * QUANT_ACT_BLOCK_BYTES, ldxq, T, c[(q - 2) % 3][0], acc);
                    if (j + 1 < nb)
                        x16_epilogue(wg + (j + 1) * rec, xq + (j + 1) * QUANT_ACT_BLOCK_BYTES, ldxq, T,
                                     c[(q - 2) % 3][1], acc);
                }
            }
        }
        for (int t = 0; t < T; t++) _mm512_storeu_ps(y + t * ldy + g * 16, acc[t]);
    }
}

AMX static void x16_amx(const dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                        int64_t ldy, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t += TOKENS) {
        int T = t1 - t < TOKENS ? (int)(t1 - t) : TOKENS;
        tile_config cfg = {.palette = 1};
        for (int i = 0; i < 2; i++) {
            cfg.rows[i] = (uint8_t)T, cfg.colsb[i] = 32; /* A: tokens x 32 activation bytes */
            cfg.rows[2 + i] = 8, cfg.colsb[2 + i] = 64;  /* B: k/4 x (16 rows x 4 bytes) */
        }
        for (int i = 4; i < 8; i++) cfg.rows[i] = (uint8_t)T, cfg.colsb[i] = 64; /* C: tokens x 16 rows */
        _tile_loadconfig(&cfg);
        const uint8_t *xt = (const uint8_t *)xq + t * ldxq;
        if (type == DTYPE_Q8_0) x16_range(DTYPE_Q8_0, w, k, xt, ldxq, y + t * ldy, ldy, g0, g1, T);
        else x16_range(DTYPE_Q4_0, w, k, xt, ldxq, y + t * ldy, ldy, g0, g1, T);
        _tile_release();
    }
}

void quant_matmul_act_range_x16_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                    int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!quant_amx_available() || r0 % 16 || r1 % 16) abort(); /* a caller bug */
    if (type != DTYPE_Q8_0 && type != DTYPE_Q4_0) abort();  /* a caller bug: no x16 layout for this type */
    x16_amx(type, w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
}

void quant_matmul_act_range_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!quant_amx_available()) abort(); /* a caller bug: test quant_amx_available() first */
    if (type == DTYPE_Q8_0) range_q8_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else if (type == DTYPE_Q4_0) range_q4_0(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
    else abort(); /* a caller bug: no integer kernel for this type */
}
#else
bool quant_amx_available(void) { return false; }

void quant_matmul_act_range_x16_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                    int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    abort(); /* never chosen: quant_amx_available() is false here */
}

void quant_matmul_act_range_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    abort(); /* never chosen: quant_amx_available() is false here */
}
#endif
