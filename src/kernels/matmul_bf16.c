/*
 * matmul_bf16.c - the BF16 compute path: y = bf16(x) W^T for BF16 weights,
 * activations rounded to BF16 (round to nearest even) as vLLM's CPU backend
 * computes a bfloat16 model, products exact, FP32 accumulation with
 * vdpbf16ps (AVX512-BF16: Zen 4/5, Cooper Lake, Sapphire Rapids); on AVX2
 * CPUs with FMAs that give the same bits (below, "AVX2").
 *
 * Why: the FP32 path (matmul.c) widens each BF16 weight to F32 and does one
 * FMA per weight and token: 16 multiply-adds per instruction. vdpbf16ps
 * does 32 (two BF16 pairs per FP32 lane), so a BF16 model's prefill and
 * batched decode, which are FMA-bound, get up to twice the arithmetic per
 * cycle (measured here: 254 vs 511 GFLOP/s per core in a register loop).
 * The price is the activations' rounding to 8 significant bits, which is
 * what `--dtype bfloat16` (and `auto` for a BF16 model) asks for.
 *
 * Order (the same on every path, so the portable path gives the same bits
 * and a row's result never depends on its batch): each output has one
 * 16-lane FP32 accumulator; step s covers k in [32s, 32s + 32), lane l
 * taking the pair (2l, 2l + 1) of the step (zero beyond k):
 *     acc_l = (acc_l + x[2l+1] w[2l+1]) + x[2l] w[2l]
 * each product exact, each add rounded to nearest even, results below the
 * normal range flushed to zero and BF16 subnormal inputs read as zero --
 * vdpbf16ps as Intel's manual defines it (AMD's Zen 5 gives the same bits:
 * 3.2 M random lanes checked, odd-then-even order, against 92% for any
 * other order). Then the horizontal sum of matmul.c's AVX-512 path:
 * a_l = v_l + v_{l+8}, b_l = a_l + a_{l+4}, c_l = b_l + b_{l+2}, c_0 + c_1.
 *
 * Tiles as in matmul.c: 3 rows x 8 tokens (24 accumulators), fewer tokens
 * with more rows; a single token takes 8 rows q apart (8 long streams).
 * The activations come rounded: a->xq from matmul_bf16_round_act (the
 * runner rounds a stage's input once), else this call rounds 8 tokens at
 * a time into a buffer per thread (freed when the thread exits). Rounding
 * per work item cost a fifth of the prefill time: the F32 rows of 64 tokens
 * (512 KiB-1.4 MiB) came from L3 again for every 48 weight rows.
 *
 * Blocking (prefill, batched decode): a tile loads 3 weight vectors and 8
 * token vectors per 24 vdpbf16ps, so where those come from decides the
 * speed. The 8 tokens' k-block (at most XPANEL_BYTES, equal whole 32-steps)
 * stays in L1 while the tiles of ROW_BLOCK rows stream their weights from
 * L2; the accumulators of those rows wait in a per-thread buffer between
 * k-blocks, as F32 vectors, so blocking adds no rounding and changes no bit
 * (the order above is per output, whatever the blocks). Without it k = 5632
 * (the down projection) read its 90 KiB token panel from L2 at ~60 B per
 * cycle, 40% of the instruction's peak; with it ~75%. Weights are
 * prefetched 256 B ahead (they come from L2 once the first 8 tokens read
 * them), or two tiles ahead for the first 8 tokens of a call (from DRAM).
 * Measured one thread, Zen 5, loaded machine (GFLOP/s, peak 511; before =
 * rounding per work item, 3 x 8 tiles over all of k), work items of 48 rows
 * x 64 tokens, k = 2048: 260 -> 330; k = 5632: 204 -> 385; 16 tokens
 * (batched decode, weights from DRAM): 170 -> 215.
 */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared ---------------------------------------------------------------- */

static inline void store_out(const matmul_args *a, int64_t t, int64_t n, float dot) {
    if (a->bias) dot += kernels_weight_at(a->bias, a->btype, n);
    float *y = &a->y[t * a->ldy + n];
    *y = a->accumulate ? *y + dot : dot;
}

enum {
    TOK_TILE = 8,              /* tokens per register tile at most */
    ROW_BLOCK = 48,            /* rows whose accumulators wait in memory between k-blocks */
    XPANEL_BYTES = 24 << 10,   /* a k-block of a tile's rounded tokens, kept in L1 */
    SAVE_FLOATS = ROW_BLOCK * TOK_TILE * 16,
    DECODE_PREFETCH_BYTES = 512, /* one token: weights from DRAM, prefetched this far ahead */
    TILE_PREFETCH_BYTES = 256,   /* several: weights from L2 (after the first tokens), into L1 */
    COLD_PREFETCH_TILES = 2,     /* the first tokens: weights from DRAM, the tile this far ahead */
};

/* Floats after each token's panel of the AVX2 kernel (the flag, then
 * padding): see matmul_bf16_range_avx2. */
enum { PANEL_PAD = 16 };

size_t matmul_bf16_act_bytes_avx2(int64_t k) { return (size_t)(((k + 31) & ~(int64_t)31) + PANEL_PAD) * 4; }

/* This thread's scratch (64-byte aligned), freed when the thread exits. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local void *scratch;
static _Thread_local size_t scratch_cap;

static void scratch_key_make(void) { (void)pthread_key_create(&scratch_key, free); }

/* Room for n bytes, or NULL when out of memory. */
static void *scratch_get(size_t n) {
    if (n <= scratch_cap) return scratch;
    pthread_once(&scratch_once, scratch_key_make);
    n = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n);
    if (!p) return NULL;
    free(scratch);
    scratch = p;
    scratch_cap = n;
    (void)pthread_setspecific(scratch_key, p); /* freed at thread exit */
    return p;
}

/* ---- portable: vdpbf16ps emulated --------------------------------------- */

static inline float bf16_daz(uint16_t h) { return (h & 0x7f80) ? bf16_to_f32(h) : 0.0f; }

static inline float ftz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (!(u & 0x7f800000)) u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

/* Element e of a token's AVX2 panel (below, "AVX2") as BF16 bits. */
static uint16_t panel_bf16(const float *p, int64_t k32, int64_t e) {
    int64_t l = e % 32, m = l % 16, i = (l / 16) * (k32 / 2) + e / 32 * 16 + (m % 2 ? m / 2 : 8 + m / 2);
    uint32_t u;
    memcpy(&u, p + i, 4);
    return (uint16_t)(u >> 16);
}

/* x: the token's BF16 row, or NULL and xp its AVX2 panel. */
static float dot_portable_x(const uint16_t *w, const uint16_t *x, const float *xp, int64_t k) {
    const int64_t k32 = (k + 31) & ~(int64_t)31;
    float acc[16] = {0};
    for (int64_t i = 0; i < k; i += 32)
        for (int l = 0; l < 16; l++) {
            int64_t e = i + 2 * l, o = e + 1;
            float pe = e < k ? bf16_daz(w[e]) * bf16_daz(x ? x[e] : panel_bf16(xp, k32, e)) : 0.0f;
            float po = o < k ? bf16_daz(w[o]) * bf16_daz(x ? x[o] : panel_bf16(xp, k32, o)) : 0.0f;
            acc[l] = ftz(ftz(acc[l] + po) + pe);
        }
    float a[8], b[4];
    for (int l = 0; l < 8; l++) a[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) b[l] = a[l] + a[l + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

static float dot_portable(const uint16_t *w, const uint16_t *x, int64_t k) { return dot_portable_x(w, x, NULL, k); }

static void round_row_portable(const float *x, int64_t k, uint16_t *xb) {
    int64_t i = 0;
    for (; i < k; i++) xb[i] = f32_to_bf16(x[i]);
    for (; i & 31; i++) xb[i] = 0;
}

void matmul_bf16_range_portable(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    const int64_t k = a->k;
    uint16_t *xb = a->xq ? NULL : scratch_get(matmul_bf16_act_bytes(k));
    if (!a->xq && !xb) return; /* out of memory: nothing written (callers size work far below this) */
    for (int64_t t = t0; t < t1; t++) {
        const uint16_t *xr = xb;
        if (a->xq) xr = (const uint16_t *)((const char *)a->xq + t * a->ldxq);
        else round_row_portable(a->x + t * a->ldx, k, xb);
        for (int64_t n = n0; n < n1; n++) store_out(a, t, n, dot_portable((const uint16_t *)a->w + n * k, xr, k));
    }
}

/* ---- AVX512-BF16 --------------------------------------------------------------- */

#if defined(__x86_64__)
#include <immintrin.h>

#define BF16_FN static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define BF16_ENTRY __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* One row of k floats rounded to BF16 into o, zero-padded to k32. */
BF16_FN void round_row(const float *x, int64_t k, uint16_t *o, int64_t k32) {
    for (int64_t i = 0; i < k32; i += 32) {
        int64_t n = k - i;
        __m512 lo = n >= 16 ? _mm512_loadu_ps(x + i)
                    : n > 0 ? _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), x + i)
                            : _mm512_setzero_ps();
        __m512 hi = n >= 32 ? _mm512_loadu_ps(x + i + 16)
                    : n > 16 ? _mm512_maskz_loadu_ps((__mmask16)((1u << (n - 16)) - 1), x + i + 16)
                             : _mm512_setzero_ps();
        _mm512_storeu_si512(o + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

BF16_ENTRY static void round_row_avx512(const float *x, int64_t k, uint16_t *xb) {
    round_row(x, k, xb, (k + 31) & ~(int64_t)31);
}

/* 32 BF16 weights from element i of row w; the first cnt only (rest zero). */
BF16_FN __m512bh load32_w(const uint16_t *w, int64_t i, int cnt) {
    if (cnt >= 32) return (__m512bh)_mm512_loadu_si512(w + i);
    return (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1ull << cnt) - 1), w + i);
}

/* matmul.c's hsum16_many_avx512: out[i] = the tree sum of v[i], i < n (room for n rounded up to 16). */
BF16_FN void hsum16_many(const int n, const __m512 *v, float *out) {
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 2
    for (int g = 0; g < n; g += 16) {
        __m512 s[8], u[4], w[2];
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            __m512 v0 = g + 2 * p < n ? v[g + 2 * p] : _mm512_setzero_ps();
            __m512 v1 = g + 2 * p + 1 < n ? v[g + 2 * p + 1] : _mm512_setzero_ps();
            s[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
        }
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0x88),
                                 _mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0xDD));
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            __m512d a0 = _mm512_castps_pd(u[2 * q]), a1 = _mm512_castps_pd(u[2 * q + 1]);
            w[q] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a0, a1)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a1)));
        }
        __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
        _mm512_storeu_ps(out + g, _mm512_permutexvar_ps(order, r));
    }
}

/* R rows (n, n + gap, ...) x T tokens (xb rows j, stride ldxb) over the
 * k-steps [i0, i1) (multiples of 32; i1 <= k32). The R x T accumulators
 * start at zero (first) or from save, and end in the outputs (last) or in
 * save (save[r * T + j], 16 floats each): the same adds in the same order
 * whatever the k-blocks, so blocking changes no bit. */
BF16_FN void tile(const int R, const int T, const matmul_args *a, int64_t n, int64_t gap, int64_t t,
                  const uint16_t *xb, int64_t ldxb, int64_t i0, int64_t i1, float *save, bool first, bool last,
                  bool cold) {
    const int64_t k = a->k, kfull = k & ~(int64_t)31, iend = i1 < kfull ? i1 : kfull;
    const size_t pf = T == 1 ? DECODE_PREFETCH_BYTES
                      : cold ? (size_t)(COLD_PREFETCH_TILES * R) * (size_t)k * 2
                             : TILE_PREFETCH_BYTES;
    const uint16_t *wr[8];
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) wr[r] = (const uint16_t *)a->w + (n + r * gap) * k;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) acc[r][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(save + (r * T + j) * 16);
    for (int64_t i = i0; i < iend; i += 32) {
        __m512bh wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            _mm_prefetch((const char *)(wr[r] + i) + pf, _MM_HINT_T0);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load32_w(wr[r], i, 32);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512i xv = _mm512_loadu_si512(xb + j * ldxb + i);
            __asm__("" : "+v"(xv)); /* one load, not one per instruction (matmul.c) */
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[r], (__m512bh)xv);
        }
    }
    if (i1 > kfull && kfull < k) { /* the last, partial step (x is zero-padded) */
        __m512bh wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load32_w(wr[r], kfull, (int)(k - kfull));
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512i xv = _mm512_loadu_si512(xb + j * ldxb + kfull);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[r], (__m512bh)xv);
        }
    }
    if (!last) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) _mm512_store_ps(save + (r * T + j) * 16, acc[r][j]);
        return;
    }
    __m512 flat[8 * 8];
    float sums[8 * 8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) flat[r * T + j] = acc[r][j];
    hsum16_many(R * T, flat, sums);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) store_out(a, t + j, n + r * gap, sums[r * T + j]);
}

/* The k-block for T tokens: all of k while T tokens' panel fits
 * XPANEL_BYTES, else the fewest equal blocks (whole 32-steps) that fit. */
static inline int64_t kblock(int T, int64_t k32) {
    int64_t bytes = (int64_t)T * k32 * 2, nb = (bytes + XPANEL_BYTES - 1) / XPANEL_BYTES;
    if (nb <= 1) return k32;
    int64_t steps = k32 / 32;
    return (steps + nb - 1) / nb * 32;
}

/* Rows [n0, n1) x T tokens (xb, stride ldxb) over all of k: per block of
 * ROW_BLOCK rows, per k-block, R-row tiles; so the k-block of the T
 * tokens stays in L1 while the rows' weights stream from L2. */
BF16_FN void rows(const int R, const int T, const matmul_args *a, int64_t n0, int64_t n1, int64_t t,
                  const uint16_t *xb, int64_t ldxb, int64_t k32, float *save, bool cold) {
    if (T == 1) { /* R rows q apart: R long sequential streams */
        int64_t q = (n1 - n0) / R, n = n0;
        for (; n < n0 + q; n++) tile(R, 1, a, n, q, t, xb, ldxb, 0, k32, NULL, true, true, cold);
        for (n = n0 + R * q; n < n1; n++) tile(1, 1, a, n, 1, t, xb, ldxb, 0, k32, NULL, true, true, cold);
        return;
    }
    const int64_t kc = kblock(T, k32);
    for (int64_t b0 = n0, b1; b0 < n1; b0 = b1) {
        b1 = kc == k32 || n1 - b0 <= ROW_BLOCK ? n1 : b0 + ROW_BLOCK;
        for (int64_t i0 = 0; i0 < k32; i0 += kc) {
            int64_t i1 = i0 + kc < k32 ? i0 + kc : k32, n = b0;
            for (; n + R <= b1; n += R)
                tile(R, T, a, n, 1, t, xb, ldxb, i0, i1, save + (n - b0) * T * 16, i0 == 0, i1 == k32, cold);
            for (; n < b1; n++)
                tile(1, T, a, n, 1, t, xb, ldxb, i0, i1, save + (n - b0) * T * 16, i0 == 0, i1 == k32, cold);
        }
    }
}

BF16_ENTRY void matmul_bf16_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    const int64_t k32 = (a->k + 31) & ~(int64_t)31;
    char *mem = scratch_get(SAVE_FLOATS * sizeof(float) + (a->xq ? 0 : TOK_TILE * (size_t)k32 * 2));
    if (!mem) return;
    float *save = (float *)mem;
    uint16_t *own = (uint16_t *)(mem + SAVE_FLOATS * sizeof(float));
    for (int64_t t = t0; t < t1; t += TOK_TILE) {
        int64_t nt = t1 - t < TOK_TILE ? t1 - t : TOK_TILE, ldxb = k32;
        const uint16_t *xb = own;
        if (a->xq) {
            xb = (const uint16_t *)((const char *)a->xq + t * a->ldxq);
            ldxb = a->ldxq / 2;
        } else {
            for (int64_t j = 0; j < nt; j++) round_row(a->x + (t + j) * a->ldx, a->k, own + j * k32, k32);
        }
        switch (nt) {
        case 8: rows(3, 8, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        case 7: rows(3, 7, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        case 6: rows(4, 6, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        case 5: rows(4, 5, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        case 4: rows(6, 4, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        case 3: rows(6, 3, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        case 2: rows(8, 2, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        default: rows(8, 1, a, n0, n1, t, xb, ldxb, k32, save, t == t0); break;
        }
    }
}

/* ---- AVX2: the same bits from FMAs ------------------------------------------- */

/*
 * No vdpbf16ps, and emulating its flushes costs six instructions per
 * product (the portable path does that: 0.8 tok/s on TinyLlama). But where
 * every non-zero activation and weight has a magnitude in [2^-50, 2^50),
 * the flushes provably never fire and two FMAs give the instruction's bits:
 *   - a product of two BF16 values (8-bit significands) has 16 significant
 *     bits and a magnitude in [2^-100, 2^100): exact in FP32, a multiple of
 *     2^-114;
 *   - so every partial sum, rounded or not, is a multiple of 2^-114 (a sum
 *     below 2^-90 is exact, a larger one rounds to a multiple of its ulp,
 *     at least 2^-113): zero or normal, never flushed; with k < 2^26 it
 *     stays far below FP32's overflow;
 *   - acc + odd product rounded, then + even product rounded, is then
 *     fma(w_odd, x_odd, acc) then fma(w_even, x_even, acc);
 *   - zeros: the portable path reads -0 and subnormal inputs as +0, here
 *     -0 stays -0 (subnormals are out of range), so a product may be -0
 *     where it has +0; an accumulator is never -0 (it starts at +0 and an
 *     exact cancellation rounds to +0), so adding either zero changes
 *     nothing.
 * Activations are range-checked as they are widened (a token out of range
 * takes the portable emulation), weights by one scan of the call's rows
 * when it has several tokens, else as they stream (a min and a max per 16
 * weights); a tile whose weights are out of range takes the emulation too:
 * same bits, slowly, for inputs no trained model has.
 *
 * Layout: lane l < 8 of the "lo" accumulator takes the pair (2l, 2l + 1)
 * of each 32-step's first 16 elements, lane l of the "hi" one the pair of
 * its last 16 -- the 16 lanes of the AVX-512 order in two halves, which
 * are independent until the final tree. Several tokens: a tile runs over a
 * k-block for the lo half, then again for the hi half (its weights then
 * come from L1), so each output needs one register at a time; one token
 * (a2_tile1) runs both halves in one pass. 16 BF16 weights as 8 dwords give
 * the odd elements as (dword >> 16) << 16 and the even ones as dword << 16;
 * the activations are widened once per group of tokens into a panel, per
 * token and half, of 8 odd then 8 even floats per step.
 */

#define AVX2_FN static inline __attribute__((always_inline, target("avx2,fma")))
#define AVX2_ENTRY __attribute__((target("avx2,fma")))

enum {
    A2_TOKENS = 6,         /* tokens widened and tiled together */
    A2_ROWS_MAX = 4,       /* rows of a tile at most */
    A2_XBLOCK = 16 << 10,  /* a k-block of their panels: half a Zen 3 core's L1 */
    A2_ROWS = 48,          /* rows whose accumulators wait in memory between k-blocks */
    A2_LO1 = 0x2680 - 1,   /* |v| >= 2^-50: BF16 magnitude bits >= 0x2680 (minus 1: zero wraps to 0xffff) */
    A2_HI = 0x587f,        /* |v| < 2^50: magnitude bits <= 0x587f */
};

/* The range check: over 16-bit lanes of BF16 values, *lo = min(|v| - 1)
 * (zero wraps to 0xffff, so zeros pass) and *hi = max(|v|), as bits. */
AVX2_FN void a2_range(__m256i v, __m256i *lo, __m256i *hi) {
    __m256i m = _mm256_and_si256(v, _mm256_set1_epi16(0x7fff));
    *lo = _mm256_min_epu16(*lo, _mm256_sub_epi16(m, _mm256_set1_epi16(1)));
    *hi = _mm256_max_epu16(*hi, m);
}

AVX2_FN bool a2_in_range(__m256i lo, __m256i hi) {
    __m256i bad = _mm256_or_si256(_mm256_subs_epu16(_mm256_set1_epi16(A2_LO1), lo),
                                  _mm256_subs_epu16(hi, _mm256_set1_epi16(A2_HI)));
    return _mm256_testz_si256(bad, bad);
}

/* One row of k floats rounded to BF16 into o, zero-padded to k32: dtype.h's
 * f32_to_bf16 (nearest even; a NaN stays a quiet NaN), 16 at a time. */
AVX2_FN void a2_round_row(const float *x, int64_t k, uint16_t *o, int64_t k32) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), abs = _mm256_set1_epi32(0x7fffffff),
                  inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x40);
    for (int64_t i = 0; i < k32; i += 16) {
        __m256i r[2];
        for (int q = 0; q < 2; q++) {
            int64_t n = k - i - 8 * q;
            __m256i u;
            if (n >= 8) {
                u = _mm256_loadu_si256((const __m256i *)(x + i + 8 * q));
            } else {
                uint32_t buf[8] = {0};
                for (int64_t e = 0; e < n; e++) memcpy(&buf[e], x + i + 8 * q + e, 4);
                u = _mm256_loadu_si256((const __m256i *)buf);
            }
            __m256i hi = _mm256_srli_epi32(u, 16);
            __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(hi, one))), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
            r[q] = _mm256_blendv_epi8(rne, _mm256_or_si256(hi, quiet), nan);
        }
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(o + i), packed);
    }
}

AVX2_ENTRY static void round_row_avx2(const float *x, int64_t k, uint16_t *xb) {
    a2_round_row(x, k, xb, (k + 31) & ~(int64_t)31);
}

/* 16 BF16 from element e of a row of k (zero beyond k). */
AVX2_FN __m256i a2_load16(const uint16_t *w, int64_t e, int64_t k) {
    if (e + 16 <= k) return _mm256_loadu_si256((const __m256i *)(w + e));
    uint16_t buf[16] = {0};
    for (int64_t i = e; i < k; i++) buf[i - e] = w[i];
    return _mm256_loadu_si256((const __m256i *)buf);
}

/* One token's k activations rounded to BF16 (a2_round_row's bits) and
 * widened into its panel p: half h of step s at p[h * k32 / 2 + 16 s], 8
 * odd then 8 even elements (zero beyond k); then the flag at p[k32] (as
 * bits: 1 when every value is in the range, else 0). */
AVX2_FN void a2_prep_row(const float *x, int64_t k, int64_t k32, float *p) {
    __m256i lo = _mm256_set1_epi16(-1), hi = _mm256_setzero_si256();
    const __m256i odd = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t i = 0; i < k32; i += 32) {
        _Alignas(32) uint16_t b[32];
        a2_round_row(x + i, k - i, b, 32);
        for (int h = 0; h < 2; h++) {
            __m256i v = _mm256_load_si256((const __m256i *)(b + 16 * h));
            a2_range(v, &lo, &hi);
            float *o = p + h * (k32 / 2) + i / 2;
            _mm256_storeu_ps(o, _mm256_castsi256_ps(_mm256_and_si256(v, odd)));
            _mm256_storeu_ps(o + 8, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        }
    }
    const uint32_t flag = a2_in_range(lo, hi);
    memcpy(p + k32, &flag, 4);
}

AVX2_ENTRY void matmul_bf16_prep_act_avx2(const float *x, int64_t k, void *xp) {
    a2_prep_row(x, k, (k + 31) & ~(int64_t)31, xp);
}

/* matmul.c's hsum8_avx2 after the first halving: the 16-lane tree of the
 * portable path, lanes l and l + 8 being lo_l and hi_l. */
AVX2_FN float a2_hsum(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);                                          /* a_l, l < 8 */
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* b_l = a_l + a_l+4 */
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                             /* b0 + b2, b1 + b3 */
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* One 32-step of half h: 16 BF16 weights of each row at src[r], the
 * tokens' panels at xs + j * ldp. The rows' odd elements widened, then per
 * token one load and R FMAs; then the even elements, the rows' weights
 * read again (from L1) rather than held through the odd FMAs. So a tile
 * needs R T accumulators, R widened rows and a token: 2 x 6 fits the 16
 * registers without spills. (Tokens read by the FMAs themselves would free
 * registers, but 2 x 6 then loads 28 vectors per 24 FMAs, more than the 2
 * per cycle the L1 gives.) The empty asm with a memory clobber keeps gcc
 * from holding the odd half's loads of the rows until the even half. */
AVX2_FN void a2_step(const int R, const int T, const bool chk, const __m256i *const *src, const float *xs,
                     int64_t ldp, __m256 (*acc)[A2_TOKENS], __m256i *lo, __m256i *hi) {
    __m256 w[A2_ROWS_MAX];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) { /* the odd elements first, as vdpbf16ps */
        __m256i v = _mm256_loadu_si256(src[r]);
        if (chk) a2_range(v, lo, hi);
        w[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v, 16), 16));
    }
#pragma GCC unroll 6
    for (int j = 0; j < T; j++) {
        __m256 xv = _mm256_loadu_ps(xs + j * ldp);
        __asm__("" : "+x"(xv)); /* one load per token, not one per FMA (matmul.c) */
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) acc[r][j] = _mm256_fmadd_ps(w[r], xv, acc[r][j]);
    }
    __asm__("" ::: "memory");
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) w[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(src[r]), 16));
#pragma GCC unroll 6
    for (int j = 0; j < T; j++) {
        __m256 xv = _mm256_loadu_ps(xs + j * ldp + 8);
        __asm__("" : "+x"(xv));
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) acc[r][j] = _mm256_fmadd_ps(w[r], xv, acc[r][j]);
    }
}

/* One half (h) of an R x T tile over the elements [i0, i1) (i0 a multiple
 * of 32; i1 too, or k): rows wr, tokens' panels p + j * ldp. The
 * accumulators start at zero (first) or from io[r * T + j] (8 floats
 * each) and end there; the weights' range is added to *lo_io, *hi_io when
 * chk (else the caller checked them). */
AVX2_FN void a2_half(const int R, const int T, const bool chk, const int h, const uint16_t *const *wr, int64_t k,
                     int64_t i0, int64_t i1, const float *p, int64_t ldp, float *io, bool first, __m256i *lo_io,
                     __m256i *hi_io) {
    const int64_t k32 = (k + 31) & ~(int64_t)31, kfull = k & ~(int64_t)31, iend = i1 < kfull ? i1 : kfull;
    const float *ph = p + h * (k32 / 2);
    __m256i lo = *lo_io, hi = *hi_io;
    __m256 acc[A2_ROWS_MAX][A2_TOKENS];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) acc[r][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(io + (r * T + j) * 8);
    for (int64_t i = i0; i < iend; i += 32) {
        const __m256i *src[A2_ROWS_MAX];
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) src[r] = (const __m256i *)(wr[r] + i + 16 * h);
        a2_step(R, T, chk, src, ph + i / 2, ldp, acc, &lo, &hi);
    }
    if (i1 > kfull && kfull < k) { /* the last, partial step: weights zero beyond k, as the panel */
        __m256i wv[A2_ROWS_MAX];
        const __m256i *src[A2_ROWS_MAX];
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) wv[r] = a2_load16(wr[r], kfull + 16 * h, k), src[r] = &wv[r];
        a2_step(R, T, chk, src, ph + kfull / 2, ldp, acc, &lo, &hi);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) _mm256_store_ps(io + (r * T + j) * 8, acc[r][j]);
    *lo_io = lo;
    *hi_io = hi;
}

/* R rows (n, n + gap, ...) x T tokens (panels p + j * ldp) over the
 * elements [i0, i1): the lo half,
 * then the hi half, their accumulators in io (2 R T vectors), and when i1
 * is k the tree into the outputs. chk (only over the whole of k): the
 * weights' range is checked here, else the caller found them in it. */
AVX2_FN void a2_tile(const int R, const int T, const bool chk, const matmul_args *a, int64_t n, int64_t gap,
                     int64_t t, const float *p, int64_t ldp, int64_t i0, int64_t i1, float *io) {
    const int64_t k = a->k;
    const uint16_t *wr[A2_ROWS_MAX];
    __m256i lo = _mm256_set1_epi16(-1), hi = _mm256_setzero_si256();
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) wr[r] = (const uint16_t *)a->w + (n + r * gap) * k;
    a2_half(R, T, chk, 0, wr, k, i0, i1, p, ldp, io, i0 == 0, &lo, &hi);
    a2_half(R, T, chk, 1, wr, k, i0, i1, p, ldp, io + R * T * 8, i0 == 0, &lo, &hi);
    if (i1 < k) return;
    const bool ok = !chk || a2_in_range(lo, hi);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < T; j++)
            store_out(a, t + j, n + r * gap,
                      ok ? a2_hsum(_mm256_load_ps(io + (r * T + j) * 8), _mm256_load_ps(io + (R * T + r * T + j) * 8))
                         : dot_portable_x(wr[r], NULL, p + j * ldp, k));
}

/* One token, R rows (n, n + gap, ...), weights checked as they stream
 * (decode reads each once, from DRAM). Both halves in one pass: the lo
 * and hi accumulators are independent chains, 2R of them, where one half
 * at a time would leave each step waiting on R chains of two dependent
 * FMAs. */
AVX2_FN void a2_tile1(const int R, const matmul_args *a, int64_t n, int64_t gap, int64_t t, const float *p) {
    const int64_t k = a->k, k32 = (k + 31) & ~(int64_t)31, kfull = k & ~(int64_t)31;
    const float *plo = p, *phi = p + k32 / 2;
    const uint16_t *wr[4];
    __m256 lo_acc[4], hi_acc[4];
    __m256i lo = _mm256_set1_epi16(-1), hi = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        wr[r] = (const uint16_t *)a->w + (n + r * gap) * k;
        lo_acc[r] = hi_acc[r] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < k32; i += 32) {
        __m256i wl[4], wh[4];
        if (i < kfull) {
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                _mm_prefetch((const char *)(wr[r] + i) + DECODE_PREFETCH_BYTES, _MM_HINT_T0);
                wl[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + i));
                wh[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + i + 16));
            }
        } else {
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                wl[r] = a2_load16(wr[r], i, k);
                wh[r] = a2_load16(wr[r], i + 16, k);
            }
        }
        const __m256 xol = _mm256_loadu_ps(plo + i / 2), xel = _mm256_loadu_ps(plo + i / 2 + 8);
        const __m256 xoh = _mm256_loadu_ps(phi + i / 2), xeh = _mm256_loadu_ps(phi + i / 2 + 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            a2_range(wl[r], &lo, &hi);
            a2_range(wh[r], &lo, &hi);
            lo_acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(wl[r], 16), 16)), xol,
                                        lo_acc[r]);
            hi_acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(wh[r], 16), 16)), xoh,
                                        hi_acc[r]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            lo_acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wl[r], 16)), xel, lo_acc[r]);
            hi_acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wh[r], 16)), xeh, hi_acc[r]);
        }
    }
    const bool ok = a2_in_range(lo, hi);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        store_out(a, t, n + r * gap, ok ? a2_hsum(lo_acc[r], hi_acc[r]) : dot_portable_x(wr[r], NULL, p, k));
}

/* Rows [n0, n1) x T tokens: R-row tiles; a single token takes R rows q
 * apart (R long sequential streams, as matmul.c). Several tokens whose
 * panels outgrow A2_XBLOCK (and weights checked by the caller) go by
 * blocks of A2_ROWS rows and k-blocks of panel that fit it: the block
 * stays in L1 while the rows' tiles stream past, each tile's accumulators
 * waiting in acc between k-blocks (the same adds in the same order). */
AVX2_FN void a2_rows(const int R, const int T, const bool chk, const matmul_args *a, int64_t n0, int64_t n1,
                     int64_t t, const float *p, int64_t ldp) {
    const int64_t k = a->k, k32 = (k + 31) & ~(int64_t)31;
    if (T == 1) {
        int64_t gap = (n1 - n0) / R, n = n0;
        for (; n < n0 + gap; n++) a2_tile1(R, a, n, gap, t, p);
        for (n = n0 + R * gap; n < n1; n++) a2_tile1(1, a, n, 1, t, p);
        return;
    }
    _Alignas(32) float acc[A2_ROWS * A2_TOKENS * 16];
    int64_t kb = k; /* rows go by A2_ROWS anyway: acc holds that many */
    if (!chk && (int64_t)T * k32 * 4 > A2_XBLOCK) { /* the fewest equal k-blocks (whole 32-steps) that fit */
        int64_t nb = ((int64_t)T * k32 * 4 + A2_XBLOCK - 1) / A2_XBLOCK, steps = k32 / 32;
        kb = (steps + nb - 1) / nb * 32;
    }
    for (int64_t b0 = n0; b0 < n1; b0 += A2_ROWS) {
        const int64_t b1 = b0 + A2_ROWS < n1 ? b0 + A2_ROWS : n1;
        for (int64_t i0 = 0; i0 < k; i0 += kb) {
            const int64_t i1 = i0 + kb < k ? i0 + kb : k;
            int64_t n = b0;
            for (; n + R <= b1; n += R) a2_tile(R, T, chk, a, n, 1, t, p, ldp, i0, i1, acc + (n - b0) * T * 16);
            for (; n < b1; n++) a2_tile(1, T, chk, a, n, 1, t, p, ldp, i0, i1, acc + (n - b0) * T * 16);
        }
    }
}

/* nt tokens' tiles over rows [n0, n1): 8-12 accumulators (each takes two
 * dependent FMAs a step, 4 cycles each), no spills. */
AVX2_FN void a2_tiles(const int nt, const bool chk, const matmul_args *a, int64_t n0, int64_t n1, int64_t t,
                      const float *p, int64_t ldp) {
    switch (nt) {
    case 6: a2_rows(2, 6, chk, a, n0, n1, t, p, ldp); break;
    case 5: a2_rows(2, 5, chk, a, n0, n1, t, p, ldp); break;
    case 4: a2_rows(3, 4, chk, a, n0, n1, t, p, ldp); break;
    case 3: a2_rows(4, 3, chk, a, n0, n1, t, p, ldp); break;
    case 2: a2_rows(4, 2, chk, a, n0, n1, t, p, ldp); break;
    default: a2_rows(3, 1, chk, a, n0, n1, t, p, ldp); break;
    }
}

/* True when the n BF16 values at w are all in range. */
AVX2_FN bool a2_scan(const uint16_t *w, int64_t n) {
    __m256i lo = _mm256_set1_epi16(-1), hi = _mm256_setzero_si256();
    for (int64_t i = 0; i < n; i += 16) a2_range(a2_load16(w, i, n), &lo, &hi);
    return a2_in_range(lo, hi);
}

AVX2_ENTRY void matmul_bf16_range_avx2(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    const int64_t k = a->k, k32 = (k + 31) & ~(int64_t)31;
    /* Tokens' panels a cache line (PANEL_PAD floats) more than k32 apart: at
     * k32 = 2048 (TinyLlama) they were 8 KiB apart, so a step's line of
     * every token's panel and of both rows' weights (4 KiB apart) fell in
     * one L1 set, 8 lines for 8 ways, and the tiles missed L1 on their own
     * panels. One thread, 2048 x 2048 x 64 tokens in 48-row items: 37-44 ->
     * 52 GFLOP/s (F16's tiles: 69-85 in the same minutes). Prepared panels
     * (a->xq, matmul_bf16_prep_act_avx2) come at the caller's stride. */
    const int64_t ldp = a->xq ? a->ldxq / 4 : k32 + PANEL_PAD;
    float *own = NULL;
    if (!a->xq && !(own = scratch_get(A2_TOKENS * (size_t)ldp * sizeof(float)))) return;
    bool checked = t1 - t0 < 2, scanned = false; /* one token: the tiles check as they stream */
    for (int64_t t = t0; t < t1; t += A2_TOKENS) {
        const int nt = t1 - t < A2_TOKENS ? (int)(t1 - t) : A2_TOKENS;
        const float *panel = a->xq ? (const float *)((const char *)a->xq + t * a->ldxq) : own;
        bool ok = k < (int64_t)1 << 26; /* the overflow bound above */
        for (int j = 0; j < nt; j++) {
            if (!a->xq) a2_prep_row(a->x + (t + j) * a->ldx, k, k32, own + j * ldp);
            uint32_t flag;
            memcpy(&flag, panel + j * ldp + k32, 4);
            ok &= flag == 1;
        }
        if (!ok) { /* an activation out of range: these tokens the portable way */
            for (int j = 0; j < nt; j++)
                for (int64_t n = n0; n < n1; n++)
                    store_out(a, t + j, n, dot_portable_x((const uint16_t *)a->w + n * k, NULL, panel + j * ldp, k));
            continue;
        }
        if (!checked) { /* several tokens: one pass over the weights' range, not one per tile */
            scanned = a2_scan((const uint16_t *)a->w + n0 * k, (n1 - n0) * k);
            checked = true;
        }
        if (scanned) a2_tiles(nt, false, a, n0, n1, t, panel, ldp);
        else a2_tiles(nt, true, a, n0, n1, t, panel, ldp); /* weights out of range somewhere: tiles that check them */
    }
}

bool matmul_bf16_cpu_has_dot(void) {
    __builtin_cpu_init();
    return kernels_cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
}
#else
void matmul_bf16_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    matmul_bf16_range_portable(a, n0, n1, t0, t1);
}
void matmul_bf16_range_avx2(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    matmul_bf16_range_portable(a, n0, n1, t0, t1);
}
void matmul_bf16_prep_act_avx2(const float *x, int64_t k, void *xp) { round_row_portable(x, k, xp); }
bool matmul_bf16_cpu_has_dot(void) { return false; }
#endif

/* ---- dispatch ------------------------------------------------------------------ */

enum { PATH_PORTABLE, PATH_AVX2, PATH_DOT };

static int path(void) {
    static atomic_int cached = -1;
    int p = atomic_load_explicit(&cached, memory_order_relaxed);
    if (p < 0) {
        kernels_isa isa = kernels_isa_get();
        p = isa >= KERNELS_ISA_AVX512 && matmul_bf16_cpu_has_dot() ? PATH_DOT
            : isa >= KERNELS_ISA_AVX2                              ? PATH_AVX2
                                                                   : PATH_PORTABLE;
        atomic_store_explicit(&cached, p, memory_order_relaxed);
    }
    return p;
}

void matmul_bf16_range(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    switch (path()) {
    case PATH_DOT: matmul_bf16_range_avx512(a, n0, n1, t0, t1); break;
    case PATH_AVX2: matmul_bf16_range_avx2(a, n0, n1, t0, t1); break;
    default: matmul_bf16_range_portable(a, n0, n1, t0, t1); break;
    }
}

size_t matmul_bf16_act_bytes(int64_t k) {
    return path() == PATH_AVX2 ? matmul_bf16_act_bytes_avx2(k) : (size_t)((k + 31) & ~(int64_t)31) * 2;
}

void matmul_bf16_round_act(const float *x, int64_t k, void *xb) {
#if defined(__x86_64__)
    if (path() == PATH_AVX2) {
        matmul_bf16_prep_act_avx2(x, k, xb);
        return;
    }
#endif
    matmul_bf16_round_row(x, k, xb);
}

void matmul_bf16_round_row(const float *x, int64_t k, uint16_t *xb) {
#if defined(__x86_64__)
    if (path() == PATH_DOT) {
        round_row_avx512(x, k, xb);
        return;
    }
    if (path() == PATH_AVX2) {
        round_row_avx2(x, k, xb);
        return;
    }
#endif
    round_row_portable(x, k, xb);
}
