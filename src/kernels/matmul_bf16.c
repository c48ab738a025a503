/*
 * matmul_bf16.c - the BF16 compute path: y = bf16(x) W^T for BF16 weights,
 * activations rounded to BF16 (round to nearest even) as vLLM's CPU backend
 * computes a bfloat16 model, products exact, FP32 accumulation with
 * vdpbf16ps (AVX512-BF16: Zen 4/5, Cooper Lake, Sapphire Rapids).
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

size_t matmul_bf16_act_bytes(int64_t k) { return (size_t)((k + 31) & ~(int64_t)31) * 2; }

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

static float dot_portable(const uint16_t *w, const uint16_t *x, int64_t k) {
    float acc[16] = {0};
    for (int64_t i = 0; i < k; i += 32)
        for (int l = 0; l < 16; l++) {
            int64_t e = i + 2 * l, o = e + 1;
            float pe = e < k ? bf16_daz(w[e]) * bf16_daz(x[e]) : 0.0f;
            float po = o < k ? bf16_daz(w[o]) * bf16_daz(x[o]) : 0.0f;
            acc[l] = ftz(ftz(acc[l] + po) + pe);
        }
    float a[8], b[4];
    for (int l = 0; l < 8; l++) a[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) b[l] = a[l] + a[l + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

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

bool matmul_bf16_cpu_has_dot(void) {
    __builtin_cpu_init();
    return kernels_cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
}
#else
void matmul_bf16_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    matmul_bf16_range_portable(a, n0, n1, t0, t1);
}
bool matmul_bf16_cpu_has_dot(void) { return false; }
#endif

/* ---- dispatch ------------------------------------------------------------------ */

static bool use_dot(void) {
    static atomic_int fast = -1;
    int f = atomic_load_explicit(&fast, memory_order_relaxed);
    if (f < 0) {
        f = kernels_isa_get() >= KERNELS_ISA_AVX512 && matmul_bf16_cpu_has_dot();
        atomic_store_explicit(&fast, f, memory_order_relaxed);
    }
    return f;
}

void matmul_bf16_range(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    if (use_dot()) matmul_bf16_range_avx512(a, n0, n1, t0, t1);
    else matmul_bf16_range_portable(a, n0, n1, t0, t1);
}

void matmul_bf16_round_act(const float *x, int64_t k, uint16_t *xb) {
#if defined(__x86_64__)
    if (use_dot()) {
        round_row_avx512(x, k, xb);
        return;
    }
#endif
    round_row_portable(x, k, xb);
}
