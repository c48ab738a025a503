/*
 * matmul.c - y = x W^T for F32 activations and F32/BF16/F16 weights, and the
 * per-dtype kernel table that also routes ggml block-quantized weights to
 * kernels/quant.c.
 *
 * The fast path (AVX2+FMA+F16C) computes a tile of R weight rows x T tokens
 * per call: each k-step loads R weight vectors (8 elements, converted to F32
 * in registers) and reuses each for T tokens, so prefill reads a weight row
 * once per 4 tokens instead of once per token. Tiles are (R, T) = (8, 1),
 * (6, 2), (4, 3), (3, 4), and for calls of exactly 5 or 6 tokens (2, 5)
 * and (2, 6) (range_avx2): at most 12 accumulators plus the weight and
 * token registers fit the 16 ymm registers.
 *
 * The AVX-512 path (F/BW/VL/DQ) is the same design with 16-lane zmm
 * vectors and 32 registers: tiles of 3 rows x 8 tokens (24 accumulators),
 * the remaining tokens with (3, 7), (4, 6), (4, 5), (6, 4), (6, 3), (8, 2),
 * (8, 1); BF16 widens by zero-extend + shift, F16 by vcvtph2ps, the k tail
 * by masked loads. Measured on Sapphire Rapids (one thread, runner-shaped
 * work items of 24 rows x 64 tokens, k = 2048): ~1.5x the AVX2 path.
 *
 * Invariance: whatever the tile, every output y[t][n] has exactly one 8-lane
 * (AVX2, portable) or 16-lane (AVX-512) accumulator that sees k in
 * increasing steps of 8 (16), the last step zero-padded, each step one FMA,
 * followed by the same horizontal sum (AVX-512 first adds lane l and l + 8,
 * then as AVX2: (l0+l4, l1+l5, l2+l6, l3+l7) -> pairs -> one; it reduces
 * sixteen accumulators at once with shuffles that keep each one's tree). So a token's
 * outputs are bit-identical however many tokens share its tile or its call.
 * Nothing here splits the reduction dimension. The paths round differently
 * from each other; one process uses one (kernels.h).
 *
 * The portable path mirrors the 8-lane order with separate multiply and add;
 * the naive reference is one sequential sum per output.
 */
#include "kernels/kernels.h"

#include "kernels/quant.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- instruction set -------------------------------------------------- */

bool kernels_cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

bool kernels_cpu_has_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return kernels_cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

kernels_isa kernels_isa_get(void) {
    static atomic_int cached = -1;
    int isa = atomic_load(&cached);
    if (isa < 0) {
        const char *env = getenv("VLLM_KERNELS");
        int cap = KERNELS_ISA_AVX512;
        if (env && !strcmp(env, "portable"))
            cap = KERNELS_ISA_PORTABLE;
        else if (env && !strcmp(env, "avx2"))
            cap = KERNELS_ISA_AVX2;
        isa = KERNELS_ISA_PORTABLE;
        if (cap >= KERNELS_ISA_AVX2 && kernels_cpu_has_avx2()) isa = KERNELS_ISA_AVX2;
        if (cap >= KERNELS_ISA_AVX512 && kernels_cpu_has_avx512()) isa = KERNELS_ISA_AVX512;
        atomic_store(&cached, isa);
    }
    return (kernels_isa)isa;
}

const char *kernels_isa_name(kernels_isa isa) {
    switch (isa) {
    case KERNELS_ISA_AVX512: return "avx512";
    case KERNELS_ISA_AVX2: return "avx2";
    default: return "portable";
    }
}

/* ---- shared epilogue --------------------------------------------------- */

static inline float weight_bias(const matmul_args *a, int64_t n) {
    return kernels_weight_at(a->bias, a->btype, n);
}

/* Writes one finished dot product: (dot + bias), added to y if accumulating. */
static inline void store_out(const matmul_args *a, int64_t t, int64_t n, float dot) {
    if (a->bias) dot += weight_bias(a, n);
    float *y = &a->y[t * a->ldy + n];
    *y = a->accumulate ? *y + dot : dot;
}

/* ---- naive reference ----------------------------------------------------- */

void matmul_range_naive(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
        const float *x = a->x + t * a->ldx;
        for (int64_t n = n0; n < n1; n++) {
            float s = 0.0f;
            for (int64_t i = 0; i < a->k; i++) s += kernels_weight_at(a->w, a->wtype, n * a->k + i) * x[i];
            store_out(a, t, n, s);
        }
    }
}

/* ---- portable ------------------------------------------------------------ */

static inline float hsum8(const float l[8]) {
    float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    float b0 = a0 + a2, b1 = a1 + a3;
    return b0 + b1;
}

static inline void load8_portable(float out[8], const void *w, dtype t, int64_t i, int cnt) {
    for (int l = 0; l < 8; l++) out[l] = l < cnt ? kernels_weight_at(w, t, i + l) : 0.0f;
}

void matmul_range_portable(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    const int64_t k = a->k;
    for (int64_t n = n0; n < n1; n++) {
        for (int64_t t = t0; t < t1; t++) {
            const float *x = a->x + t * a->ldx;
            float acc[8] = {0};
            for (int64_t i = 0; i < k; i += 8) {
                int cnt = k - i < 8 ? (int)(k - i) : 8;
                float w8[8], x8[8];
                load8_portable(w8, a->w, a->wtype, n * k + i, cnt);
                for (int l = 0; l < 8; l++) x8[l] = l < cnt ? x[i + l] : 0.0f;
                for (int l = 0; l < 8; l++) acc[l] += w8[l] * x8[l];
            }
            store_out(a, t, n, hsum8(acc));
        }
    }
}

/* ---- AVX2 ---------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX2_ENTRY __attribute__((target("avx2,fma,f16c")))

/* Single-token tiles (decode) read each weight once, straight from DRAM:
 * each of the R row streams is prefetched this far ahead (measured on
 * Sapphire Rapids, 6-layer TinyLlama decode: ~5% less CPU time at 256-512
 * bytes, worse at 1-2 KB). */
enum { DECODE_PREFETCH_BYTES = 512, TILE_PREFETCH_TILES = 2 };

AVX2_FN __m256 load8_avx2(dtype t, const void *base, int64_t i) {
    if (t == DTYPE_F32) return _mm256_loadu_ps((const float *)base + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + i));
    if (t == DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The last, partial step: cnt (< 8) elements, the rest zero. */
AVX2_FN __m256 load8_tail_avx2(dtype t, const void *base, int64_t i, int cnt) {
    uint32_t buf[8] = {0};
    memcpy(buf, (const char *)base + i * (int64_t)dtype_size(t), (size_t)cnt * dtype_size(t));
    return load8_avx2(t, buf, 0);
}

AVX2_FN float hsum8_avx2(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 hi = _mm_movehl_ps(lo, lo);
    lo = _mm_add_ps(lo, hi);
    hi = _mm_shuffle_ps(lo, lo, 1);
    return _mm_cvtss_f32(_mm_add_ss(lo, hi));
}

/* One R x T tile: weight rows n..n+R-1, tokens t..t+T-1, k in [k0, k1)
 * (k0 a multiple of 8). R, T and wt are compile-time constants at every call
 * site, so the loops unroll into registers. The accumulators start at zero
 * when k0 == 0, else from acc_io; they end in y (horizontal sum, bias,
 * accumulate) when k1 == k, else back in acc_io ((R, T, 8) floats). Either
 * way each accumulator sees the same FMAs in the same order as one pass
 * over the whole of k. */
AVX2_FN void tile_pf_avx2(const int R, const int T, const dtype wt, const matmul_args *a, int64_t n, int64_t gap,
                          int64_t t, int64_t k0, int64_t k1, float *acc_io, const bool pf) {
    const int64_t k = a->k, k8 = k1 & ~(int64_t)7;
    const size_t esz = dtype_size(wt);
    const size_t ahead = T == 1 ? (size_t)DECODE_PREFETCH_BYTES : (size_t)(TILE_PREFETCH_TILES * R) * (size_t)k * esz;
    const int64_t line = 64 / (int64_t)esz; /* weights per cache line: one prefetch each */
    const char *wr[8];
    const float *xr[6];
    __m256 acc[8][6];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) wr[r] = (const char *)a->w + (size_t)(n + r * gap) * (size_t)k * esz;
#pragma GCC unroll 6
    for (int j = 0; j < T; j++) xr[j] = a->x + (t + j) * a->ldx;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < T; j++)
            acc[r][j] = k0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(acc_io + (r * T + j) * 8);

    for (int64_t i = k0; i < k8; i += 8) {
        __m256 wv[8];
        if (T == 1)
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) _mm_prefetch(wr[r] + (size_t)i * esz + ahead, _MM_HINT_T0);
        else if (pf && i % line == 0)
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) _mm_prefetch(wr[r] + (size_t)i * esz + ahead, _MM_HINT_T0);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load8_avx2(wt, wr[r], i);
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) {
            __m256 xv = _mm256_loadu_ps(xr[j] + i);
            /* one load per token and step: left alone, gcc folds the load
             * into each of the R FMAs (R loads of the same vector) */
            __asm__("" : "+x"(xv));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k8 < k1) {
        int cnt = (int)(k1 - k8);
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) {
            __m256 xv = load8_tail_avx2(DTYPE_F32, xr[j], k8, cnt);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r][j] = _mm256_fmadd_ps(load8_tail_avx2(wt, wr[r], k8, cnt), xv, acc[r][j]);
        }
    }
    if (k1 < k) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 6
            for (int j = 0; j < T; j++) _mm256_store_ps(acc_io + (r * T + j) * 8, acc[r][j]);
        return;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) store_out(a, t + j, n + r * gap, hsum8_avx2(acc[r][j]));
}

/* Cache blocking: when the T tokens' rows of x exceed BLOCK_X_BYTES, rows
 * are taken BLOCK_ROWS at a time and k BLOCK_K at a time, so the tokens'
 * BLOCK_K slice of x stays in L1 while every row tile of the block streams
 * past it; the partial accumulators wait in acc (on the stack,
 * (BLOCK_ROWS, T, 8)). Below BLOCK_X_BYTES x is read from L2 and each
 * weight row is streamed whole. The machines disagree: on Zen 4 (one
 * thread, runner-shaped items, F16) unblocked tiles did 90-93 GFLOP/s
 * against 76-82 with 16 KB blocks, so the threshold was 256 KB (no TinyLlama
 * shape blocked); on Zen 5 (2 threads, 1.1B F16 prefill 512, alternated)
 * blocking past 32 KB gives the AVX-512 tiles +7-8% (182 -> 196 tok/s) and
 * leaves AVX2 and 16-sequence decode unchanged. 32 KB it is: also the L1 of
 * a Zen 3 core (AVX2 only), where 4 tokens' rows of x at k 2048 fill it already.
 *
 * A single token (decode) reads every weight once: its R-row tiles take
 * rows q apart (n, n + q, ... for the range's R * q rows, q = rows / R), so
 * each of the R streams walks consecutive rows, one long sequential read,
 * instead of R adjacent rows that end together after one row (F16 1.1B
 * decode +7% here). The order of the rows changes nothing in any output. */
enum { BLOCK_K = 512, BLOCK_ROWS = 48, BLOCK_X_BYTES = 32 << 10 };

/* Rows n0..n1 for tokens t..t+T-1: full R-row tiles, then single rows. One
 * body for both instruction sets (FN: the target attribute; TILE: the tile
 * function; LANES: floats per accumulator; TMAX: the most tokens a tile takes). */
#define DEFINE_ROWS(FN, NAME, TILE, LANES, TMAX)                                                              \
    FN void NAME(const int R, const int T, const dtype wt, const matmul_args *a, int64_t n0, int64_t n1,      \
                 int64_t t) {                                                                                 \
        if (T == 1) { /* R rows q apart: R long sequential streams */                                         \
            int64_t q = (n1 - n0) / R, n = n0;                                                                \
            for (; n < n0 + q; n++) TILE(R, 1, wt, a, n, q, t, 0, a->k, NULL);                                \
            for (n = n0 + R * q; n < n1; n++) TILE(1, 1, wt, a, n, 1, t, 0, a->k, NULL);                      \
            return;                                                                                           \
        }                                                                                                     \
        _Alignas(64) float acc[BLOCK_ROWS * (TMAX) * (LANES)];                                                \
        bool blocked = (int64_t)T * a->k * (int64_t)sizeof(float) > BLOCK_X_BYTES;                            \
        int64_t block_k = blocked ? BLOCK_K : a->k, block_rows = blocked ? BLOCK_ROWS : n1 - n0;              \
        for (int64_t nb = n0; nb < n1; nb += block_rows) {                                                    \
            int64_t ne = nb + block_rows < n1 ? nb + block_rows : n1;                                         \
            for (int64_t k0 = 0; k0 < a->k; k0 += block_k) {                                                  \
                int64_t k1 = k0 + block_k < a->k ? k0 + block_k : a->k;                                       \
                int64_t n = nb, step = T * (LANES);                                                           \
                for (; n + R <= ne; n += R) TILE(R, T, wt, a, n, 1, t, k0, k1, acc + (n - nb) * step);        \
                for (; n < ne; n++) TILE(1, T, wt, a, n, 1, t, k0, k1, acc + (n - nb) * step);                \
            }                                                                                                 \
        }                                                                                                     \
    }

AVX2_FN void tile_avx2(const int R, const int T, const dtype wt, const matmul_args *a, int64_t n, int64_t gap,
                       int64_t t, int64_t k0, int64_t k1, float *acc_io) {
    tile_pf_avx2(R, T, wt, a, n, gap, t, k0, k1, acc_io, false);
}
AVX2_FN void tile_avx2_pf(const int R, const int T, const dtype wt, const matmul_args *a, int64_t n, int64_t gap,
                          int64_t t, int64_t k0, int64_t k1, float *acc_io) {
    tile_pf_avx2(R, T, wt, a, n, gap, t, k0, k1, acc_io, true);
}

DEFINE_ROWS(AVX2_FN, rows_avx2, tile_avx2, 8, 4)
DEFINE_ROWS(AVX2_FN, rows_avx2_pf, tile_avx2_pf, 8, 6)

/* Calls of a few tokens (a speculative step's scored positions, small
 * batches) read their weights from DRAM in pieces that the hardware
 * prefetchers follow badly, as on AVX-512 (tile_pf_avx512): their tiles
 * prefetch the same k of the rows TILE_PREFETCH_TILES tiles on, one
 * prefetch per cache line. Larger calls reuse each weight from L2 over more
 * token tiles and lost ~10% of prefill with the prefetches, so they go
 * without. Prefetches change no result. */
enum { TILE_PREFETCH_MAX_TOKENS = 8 };

/* rows_avx2 or, for a few-token call, rows_avx2_pf. */
AVX2_FN void rows_pick_avx2(const bool pf, const int R, const int T, const dtype wt, const matmul_args *a,
                            int64_t n0, int64_t n1, int64_t t) {
    if (pf) rows_avx2_pf(R, T, wt, a, n0, n1, t);
    else rows_avx2(R, T, wt, a, n0, n1, t);
}

AVX2_FN void range_avx2(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t0,
                        int64_t t1) {
    const bool pf = t1 - t0 <= TILE_PREFETCH_MAX_TOKENS;
    int64_t t = t0;
    switch (t1 - t) { /* 5 or 6 tokens: one pass of 2-row tiles */
    case 5: rows_avx2_pf(2, 5, wt, a, n0, n1, t); return;
    case 6: rows_avx2_pf(2, 6, wt, a, n0, n1, t); return;
    default: break;
    }
    for (; t + 4 <= t1; t += 4) rows_pick_avx2(pf, 3, 4, wt, a, n0, n1, t);
    switch (t1 - t) {
    case 3: rows_pick_avx2(pf, 4, 3, wt, a, n0, n1, t); break;
    case 2: rows_pick_avx2(pf, 6, 2, wt, a, n0, n1, t); break;
    case 1: rows_pick_avx2(pf, 8, 1, wt, a, n0, n1, t); break;
    default: break;
    }
}

static AVX2_ENTRY void range_avx2_f32(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range_avx2(DTYPE_F32, a, n0, n1, t0, t1);
}
static AVX2_ENTRY void range_avx2_bf16(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range_avx2(DTYPE_BF16, a, n0, n1, t0, t1);
}
static AVX2_ENTRY void range_avx2_f16(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range_avx2(DTYPE_F16, a, n0, n1, t0, t1);
}

void matmul_range_avx2(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    switch (a->wtype) {
    case DTYPE_BF16: range_avx2_bf16(a, n0, n1, t0, t1); break;
    case DTYPE_F16: range_avx2_f16(a, n0, n1, t0, t1); break;
    default: range_avx2_f32(a, n0, n1, t0, t1); break;
    }
}

/* ---- AVX-512 --------------------------------------------------------------- */

#define AVX512_FN static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define AVX512_ENTRY __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

/* 16 weights (or x values) from element i of base as F32; the first cnt
 * lanes only (the rest zero, never read) when cnt < 16. */
AVX512_FN __m512 load16_avx512(dtype t, const void *base, int64_t i, int cnt) {
    if (t == DTYPE_F32) {
        const float *p = (const float *)base + i;
        return cnt < 16 ? _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1), p) : _mm512_loadu_ps(p);
    }
    const uint16_t *p = (const uint16_t *)base + i;
    __m256i h = cnt < 16 ? _mm256_maskz_loadu_epi16((__mmask16)((1u << cnt) - 1), p)
                         : _mm256_loadu_si256((const __m256i *)p);
    if (t == DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* out[i] = the horizontal sum of v[i], i < n, all by one tree: a_l = l + l+8
 * (l < 8), b_l = a_l + a_l+4 (l < 4), c_l = b_l + b_l+2 (l < 2), c_0 + c_1
 * -- the AVX2 tree after a first halving. Sixteen vectors are reduced
 * together (shuffles pair the same lanes, so each sum is bit-identical to
 * reducing its vector alone; a group of fewer is padded with zeros). out has
 * room for n rounded up to 16. */
AVX512_FN void hsum16_many_avx512(const int n, const __m512 *v, float *out) {
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

/* tile_avx2 with 16 lanes and up to 32 accumulators (32 zmm registers).
 * pf: bytes ahead of each weight load to prefetch (0: the default below). */
AVX512_FN void tile_pf_avx512(const int R, const int T, const dtype wt, const matmul_args *a, int64_t n,
                              int64_t gap, int64_t t, int64_t k0, int64_t k1, float *acc_io, size_t pf) {
    const int64_t k = a->k, k16 = k0 + ((k1 - k0) & ~(int64_t)15);
    const size_t esz = dtype_size(wt);
    const size_t tile_ahead = pf ? pf : (size_t)(TILE_PREFETCH_TILES * R) * (size_t)k * esz;
    const char *wr[8];
    const float *xr[8];
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) wr[r] = (const char *)a->w + (size_t)(n + r * gap) * (size_t)k * esz;
#pragma GCC unroll 8
    for (int j = 0; j < T; j++) xr[j] = a->x + (t + j) * a->ldx;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[r][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc_io + (r * T + j) * 16);

    for (int64_t i = k0; i < k16; i += 16) {
        __m512 wv[8];
        /* every tile (not only T == 1): batched decode reads its weights
         * from DRAM too (F16, 16 sequences: +15% here; prefill unchanged).
         * A single token streams each row: DECODE_PREFETCH_BYTES ahead in
         * it. Several tokens walk the rows in pieces (R rows by BLOCK_K),
         * which the hardware prefetchers follow badly: the same k of the
         * rows TILE_PREFETCH_TILES tiles further on instead (rows_avx512
         * takes the next tile R rows on), so the first token tile's weights
         * are in flight a tile or two before it reads them (F16, 16 tokens,
         * weights from DRAM, one thread: 153 -> 185 GFLOP/s; 64 tokens
         * unchanged). Prefetches change no result. */
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            _mm_prefetch(wr[r] + (size_t)i * esz + (T == 1 ? (size_t)DECODE_PREFETCH_BYTES : tile_ahead), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load16_avx512(wt, wr[r], i, 16);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512 xv = _mm512_loadu_ps(xr[j] + i);
            __asm__("" : "+v"(xv)); /* one load, not one per FMA (tile_avx2) */
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k16 < k1) {
        int cnt = (int)(k1 - k16);
        __m512 wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load16_avx512(wt, wr[r], k16, cnt);
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) {
            __m512 xv = load16_avx512(DTYPE_F32, xr[j], k16, cnt);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k1 < k) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) _mm512_store_ps(acc_io + (r * T + j) * 16, acc[r][j]);
        return;
    }
    __m512 flat[8 * 8];
    float sums[8 * 8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) flat[r * T + j] = acc[r][j];
    hsum16_many_avx512(R * T, flat, sums);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++) store_out(a, t + j, n + r * gap, sums[r * T + j]);
}

AVX512_FN void tile_avx512(const int R, const int T, const dtype wt, const matmul_args *a, int64_t n, int64_t gap,
                           int64_t t, int64_t k0, int64_t k1, float *acc_io) {
    tile_pf_avx512(R, T, wt, a, n, gap, t, k0, k1, acc_io, 0);
}

/* rows_avx2's cache blocking with 16-lane tiles; BLOCK_K is a multiple of 16. */
DEFINE_ROWS(AVX512_FN, rows_avx512, tile_avx512, 16, 8)

/* 16 tokens as two 8-token passes per (row block, k block): tokens t..t+7
 * over the block's row tiles, then t+8..t+15 over the same tiles. The
 * first pass reads the block's weights from DRAM at 16 FLOPs per F16 byte
 * (~34 GB/s per thread to keep the FMAs busy, more than DRAM gives), the
 * second from L2; rows_avx512 once per 8 tokens did the same, so the DRAM
 * stream only ran during the first pass. Here the second pass prefetches
 * the next k block of its rows instead (pf = block_k elements on), so the
 * stream runs through both. One thread, 48-row items over 256 MB of F16
 * weights (tiles 3 x 8, CPU seconds, loaded machine): 16 tokens 145-150 ->
 * 155-160 GFLOP/s, 64 tokens 168-170 -> 172-175; weights in L2 unchanged
 * (~205). Interleaving the two token groups per tile instead was slower
 * (151-160 from L2: 16 tokens' x slices and the accumulators crowd L1).
 * Every accumulator sees k in the same order: the same bits. */
AVX512_FN void rows16_avx512(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t) {
    enum { R = 3, T = 8, STEP = 2 * T * 16 };
    _Alignas(64) float acc[BLOCK_ROWS * STEP];
    bool blocked = T * a->k * (int64_t)sizeof(float) > BLOCK_X_BYTES;
    int64_t block_k = blocked ? BLOCK_K : a->k, block_rows = blocked ? BLOCK_ROWS : n1 - n0;
    for (int64_t nb = n0; nb < n1; nb += block_rows) {
        int64_t ne = nb + block_rows < n1 ? nb + block_rows : n1;
        for (int64_t k0 = 0; k0 < a->k; k0 += block_k) {
            int64_t k1 = k0 + block_k < a->k ? k0 + block_k : a->k;
            for (int g = 0; g < 2; g++) {
                int64_t n = nb;
                size_t pf = g ? (size_t)block_k * dtype_size(wt) : 0;
                for (; n + R <= ne; n += R)
                    tile_pf_avx512(R, T, wt, a, n, 1, t + g * T, k0, k1, acc + (n - nb) * STEP + g * R * T * 16, pf);
                for (; n < ne; n++)
                    tile_avx512(1, T, wt, a, n, 1, t + g * T, k0, k1, acc + (n - nb) * STEP + g * T * 16);
            }
        }
    }
}

/* Tiles of 8 tokens x 3 rows, the remaining tokens with as many rows as
 * fit (row counts that divide the runner's MM_ROW_ALIGN). */
AVX512_FN void range_avx512(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t0,
                            int64_t t1) {
    int64_t t = t0;
    for (; t + 16 <= t1; t += 16) rows16_avx512(wt, a, n0, n1, t);
    for (; t + 8 <= t1; t += 8) rows_avx512(3, 8, wt, a, n0, n1, t);
    switch (t1 - t) {
    case 7: rows_avx512(3, 7, wt, a, n0, n1, t); break;
    case 6: rows_avx512(4, 6, wt, a, n0, n1, t); break;
    case 5: rows_avx512(4, 5, wt, a, n0, n1, t); break;
    case 4: rows_avx512(6, 4, wt, a, n0, n1, t); break;
    case 3: rows_avx512(6, 3, wt, a, n0, n1, t); break;
    case 2: rows_avx512(8, 2, wt, a, n0, n1, t); break;
    case 1: rows_avx512(8, 1, wt, a, n0, n1, t); break;
    default: break;
    }
}

static AVX512_ENTRY void range_avx512_f32(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range_avx512(DTYPE_F32, a, n0, n1, t0, t1);
}
static AVX512_ENTRY void range_avx512_bf16(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range_avx512(DTYPE_BF16, a, n0, n1, t0, t1);
}
static AVX512_ENTRY void range_avx512_f16(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range_avx512(DTYPE_F16, a, n0, n1, t0, t1);
}

void matmul_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    switch (a->wtype) {
    case DTYPE_BF16: range_avx512_bf16(a, n0, n1, t0, t1); break;
    case DTYPE_F16: range_avx512_f16(a, n0, n1, t0, t1); break;
    default: range_avx512_f32(a, n0, n1, t0, t1); break;
    }
}
#else
void matmul_range_avx2(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    matmul_range_portable(a, n0, n1, t0, t1);
}
void matmul_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    matmul_range_portable(a, n0, n1, t0, t1);
}
#endif

/* ---- block-quantized weights (every GGUF type of dtype.h) ------------------ */

/* Up to 32 tokens per call: the AMX kernel needs 16+ tokens to fill its
 * tiles (prefill Q4_0 ~1.5x faster than with 8). The 8 KB stack tile holds
 * QUANT_TILE_FLOATS / tokens rows, a multiple of 64: at decode a whole work
 * item in one call, so the kernel prepares the token once and streams all
 * its rows. */
enum { QUANT_TILE_FLOATS = 2048, QUANT_TILE_TOKENS = 32 };
_Static_assert(QUANT_TILE_FLOATS / QUANT_TILE_TOKENS >= 64, "a full token tile keeps 64 rows");

/* quant_matmul_act_range / quant_matmul_range (kernels/quant.c: one fixed
 * reduction order per output, batch invariant) into a stack tile, then the
 * shared epilogue (bias, accumulate), so quantized weights serve every call
 * site of matmul_range. Each call starts the weight at the 16-row group
 * holding row n and skips the lead rows before n in the tile, so a->x16 can
 * go along (quant_x16_rows) whatever n0 is. */
void matmul_range_quant(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    float tile[QUANT_TILE_FLOATS + 15 * QUANT_TILE_TOKENS]; /* (tokens, lead + rows) */
    size_t stride = dtype_row_bytes(a->wtype, a->k);
    bool act = quant_has_act_kernel(a->wtype);
    for (int64_t t = t0; t < t1; t += QUANT_TILE_TOKENS) {
        int64_t nt = t1 - t < QUANT_TILE_TOKENS ? t1 - t : QUANT_TILE_TOKENS;
        int64_t rows = QUANT_TILE_FLOATS / nt / 64 * 64;
        for (int64_t n = n0; n < n1; n += rows) {
            int64_t nr = n1 - n < rows ? n1 - n : rows, lead = n % 16, ldt = lead + nr;
            const uint8_t *w = (const uint8_t *)a->w + (size_t)(n - lead) * stride;
            if (act && a->xq) {
                quant_matmul_act_range(a->wtype, w, quant_x16_rows(a->x16, a->wtype, a->k, n - lead), a->k,
                                       (const uint8_t *)a->xq + t * a->ldxq, a->ldxq, tile, ldt, lead, ldt, 0, nt);
            } else if (act) {
                quant_matmul_act_f32_range(a->wtype, w, a->k, a->x + t * a->ldx, a->ldx, tile, ldt, lead, ldt, 0, nt);
            } else {
                quant_matmul_range(a->wtype, w, a->k, a->x + t * a->ldx, a->ldx, tile, ldt, lead, ldt, 0, nt);
            }
            for (int64_t i = 0; i < nt; i++)
                for (int64_t j = 0; j < nr; j++) store_out(a, t + i, n + j, tile[i * ldt + lead + j]);
        }
    }
}

/* ---- dispatch ------------------------------------------------------------ */

/* The kernel for each weight dtype on this process's instruction set, filled
 * once: BF16 (and with VLLM_AMX=f16, F16) goes to the AMX-BF16 kernel
 * (matmul_amx.c) when the process uses it (matmul_amx_takes). The first
 * callers may be several worker threads: one fills the table under the
 * mutex, and every call after reads one acquire flag (matmul_range calls
 * this for every work item; a pthread_once version measured 5% slower
 * on a Q4_0 prefill). */
static matmul_range_fn kernel_table[DTYPE_COUNT];
static atomic_bool kernel_table_ready;
static pthread_mutex_t kernel_table_mu = PTHREAD_MUTEX_INITIALIZER;

static void kernel_table_fill(void) {
    kernels_isa isa = kernels_isa_get();
    matmul_range_fn scalar = isa >= KERNELS_ISA_AVX512 ? matmul_range_avx512
                             : isa >= KERNELS_ISA_AVX2 ? matmul_range_avx2
                                                       : matmul_range_portable;
    for (int t = 0; t < DTYPE_COUNT; t++)
        kernel_table[t] = dtype_is_quantized((dtype)t) ? matmul_range_quant : scalar;
    for (int t = 0; t < DTYPE_COUNT; t++)
        if (matmul_amx_takes((dtype)t)) kernel_table[t] = matmul_range_amx;
}

matmul_range_fn matmul_kernel(dtype wtype) {
    if (!atomic_load_explicit(&kernel_table_ready, memory_order_acquire)) {
        pthread_mutex_lock(&kernel_table_mu);
        if (!atomic_load_explicit(&kernel_table_ready, memory_order_relaxed)) {
            kernel_table_fill();
            atomic_store_explicit(&kernel_table_ready, true, memory_order_release);
        }
        pthread_mutex_unlock(&kernel_table_mu);
    }
    return (unsigned)wtype < DTYPE_COUNT ? kernel_table[wtype] : matmul_range_naive;
}

void matmul_range(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    matmul_kernel(a->wtype)(a, n0, n1, t0, t1);
}
