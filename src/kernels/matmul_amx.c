/*
 * matmul_amx.c - y = x W^T for BF16 and F16 weights on AMX-BF16 tiles
 * (Sapphire Rapids and later), with FP32 products: the path matmul_kernel
 * gives the dtypes matmul_amx_takes() (BF16; F16 only with VLLM_AMX=f16)
 * for every token count (decode included), so a process has one reduction
 * order.
 *
 * Exactness. tdpbf16ps multiplies BF16 pairs into FP32 accumulators. Each
 * FP32 activation is split exactly into three BF16 parts
 *     x = hi + mid + lo    hi = x truncated to 8 significant bits,
 *                          mid = (x - hi) truncated, lo = x - hi - mid
 * (each difference is exact in FP32; lo has at most 8 significant bits).
 * BF16 weights are used as they are; an F16 weight (11 significant bits)
 * splits exactly into w = whi + wlo the same way. Every product of parts is
 * exact in FP32, so only the summation differs from the FMA kernels: three
 * FP32 accumulators per output (one per activation part) over k (BF16) or
 * 2k (F16) exact terms each. (Inputs the tiles see as subnormal, i.e.
 * parts below 2^-126, count as 0; Inf/NaN activations give NaN.)
 *
 * Formulation: C^T = W X^T, so weight rows are tile rows read in place,
 * and the three parts of a token are three columns of C (so decode, one
 * token, fills 3 of a tile's 16 columns with one tile multiply per step
 * instead of three):
 *     A (tmm4/5): 16 weight rows x 32 k as BF16, loaded straight from the
 *        rows (stride = row bytes) for BF16, converted into scratch tiles
 *        per 32-k step for F16 (whi, wlo);
 *     B (tmm6/7): 4 tokens' parts in pair layout, 16 pair rows x 12 columns,
 *        B[kp][3t + p] = (part p of x_t[2kp], of x_t[2kp+1]) as BF16;
 *     C (tmm0..3): 16 rows x (4 tokens x 3 parts) FP32 accumulators, one
 *        tile per token tile of a group of up to 4 tiles (16 tokens) that
 *        share each weight tile (decode: one C tile, 3 of its columns).
 * The result: y = (C[.., lo] + C[.., mid]) + C[.., hi], then store_out's
 * bias and accumulate.
 * Packed activations: blocks of 4 tokens, one 1 KB B tile per 32-k step
 * (zero beyond k): matmul_amx_act_bytes(k) = ceil(k/32) * 256 bytes per
 * token. The runner packs once per matmul stage (args.xq); without xq the
 * kernel packs the call's tokens itself, a few steps at a time.
 *
 * Invariance: each of the 3 accumulators of an output starts at zero and
 * sees the 32-k steps in increasing order, one tile multiply per step (F16:
 * by whi, then by wlo), then the fixed three-term sum. Nothing depends on
 * the token count, the tile, the row group or the caller's split, so a
 * token's outputs are bit-identical alone or in any batch.
 *
 * Measured (Sapphire Rapids, one thread, runner-shaped 32 rows x 64
 * tokens, k = 2048): ~2.3x the AVX-512 FMA kernel for BF16 prefill, decode
 * at the same bandwidth. F16 is another matter: converting each weight tile
 * to whi/wlo costs more than the tile multiplies (and a tile load of bytes
 * just stored stalls unless an sfence drains them first), so F16 decode
 * runs at ~1/2 of the FMA kernel's bandwidth and prefill gains little; F16
 * stays on the FMA kernel unless VLLM_AMX=f16.
 *
 * Tile state is per thread: each call loads a configuration (reloaded when
 * the tile shapes change) and releases the tiles before returning. The OS
 * grants the tile state once per process (kernels_amx_tiles_permitted, amx.h).
 */
#include "kernels/kernels.h"

#include "kernels/amx.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static bool amx_env_allowed(void) {
    const char *env = getenv("VLLM_AMX");
    return !(env && !strcmp(env, "0"));
}

bool kernels_amx_allowed(void) {
    static atomic_int state = -1;
    int s = atomic_load(&state);
    if (s < 0) atomic_store(&state, s = amx_env_allowed());
    return s == 1;
}

size_t matmul_amx_act_bytes(int64_t k) { return (size_t)((k + 31) / 32) * 256; }

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

bool kernels_amx_tiles_permitted(void) {
    static atomic_int state = -1;
    int s = atomic_load(&state);
    if (s < 0) {
        unsigned a, b, c, d;
        s = 0;
        /* CPUID.(7,0):EDX bit 24 AMX-TILE; then the OS's grant of XTILEDATA */
        if (kernels_cpu_has_avx512() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1))
            s = syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA) == 0;
        atomic_store(&state, s);
    }
    return s == 1;
}

bool matmul_amx_available(void) {
    static atomic_int state = -1; /* cached: CPUID is slow under a hypervisor */
    int s = atomic_load(&state);
    if (s < 0) {
        unsigned a, b, c, d;
        /* CPUID.(7,0):EDX bit 22 AMX-BF16 */
        s = kernels_amx_tiles_permitted() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1);
        atomic_store(&state, s);
    }
    return s == 1;
}

#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))


#ifndef AMX_PREFETCH
#define AMX_PREFETCH 512
#endif
#ifndef AMX_DECODE_ROWS
#define AMX_DECODE_ROWS 8
#endif
enum {
    ROWS = 16,          /* weight rows per tile */
    TT = 4,             /* tokens per tile (x 3 parts = 12 columns) */
    GROUP = 4,          /* token tiles sharing each weight tile, or row tiles each B tile */
    STEP_BYTES = 1024,  /* one 32-k step of a 4-token block: 16 pair rows x 64 bytes */
    PIECE_STEPS = 16,   /* steps packed at a time when the caller gave no xq */
    CHUNK_ROWS = 128,   /* rows whose C tiles wait in memory between pieces */
    PREFETCH = AMX_PREFETCH, /* software prefetch distance into each weight row */
    DECODE_ROWS = AMX_DECODE_ROWS, /* rows per tile for a single token */
};

/* Splits x[32s .. 32s+32) (zero beyond k) into hi/mid/lo, each as 16 BF16
 * pairs (dword kp = (x[2kp], x[2kp+1]) of the step). */
AMX INLINE void split_step(const float *x, int64_t k, int64_t s, __m512i out[3]) {
    const int64_t i = 32 * s, n = k - i;
    const __m512i mask = _mm512_set1_epi32((int)0xFFFF0000u);
    /* 16-bit element j of the result = the top half of float j of (a, b) */
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
                                         27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 a = n >= 16 ? _mm512_loadu_ps(x + i) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), x + i);
    __m512 b = n >= 32   ? _mm512_loadu_ps(x + i + 16)
               : n > 16 ? _mm512_maskz_loadu_ps((__mmask16)((1u << (n - 16)) - 1), x + i + 16)
                        : _mm512_setzero_ps();
    __m512 ha = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), mask));
    __m512 hb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), mask));
    __m512 ra = _mm512_sub_ps(a, ha), rb = _mm512_sub_ps(b, hb);
    __m512 ma = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(ra), mask));
    __m512 mb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rb), mask));
    __m512 la = _mm512_sub_ps(ra, ma), lb = _mm512_sub_ps(rb, mb);
    out[0] = _mm512_permutex2var_epi16(_mm512_castps_si512(ha), idx, _mm512_castps_si512(hb));
    out[1] = _mm512_permutex2var_epi16(_mm512_castps_si512(ma), idx, _mm512_castps_si512(mb));
    out[2] = _mm512_permutex2var_epi16(_mm512_castps_si512(la), idx, _mm512_castps_si512(lb));
}

/* In place: r[i] lane j <- r[j] lane i (16 x 16 dwords). */
AMX INLINE void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    /* u[4g + j] 128-bit lane L: rows 4g..4g+3 of column 4L + j */
    for (int j = 0; j < 4; j++) {
        __m512i w0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), w1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
        __m512i w2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        __m512i w3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_i32x4(w0, w2, 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(w0, w2, 0xDD);
        r[4 + j] = _mm512_shuffle_i32x4(w1, w3, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(w1, w3, 0xDD);
    }
}

/* Tokens [c0, c1) of one 4-token block (x row of token c: x + c * ldx)
 * for steps [s0, s1), step s at blk + (s - s0) * STEP_BYTES. A whole block
 * goes through the transpose; a partial one is written token by token (so
 * threads packing neighbouring tokens of one block never write each other's
 * bytes). */
AMX static void pack_block(const float *x, int64_t ldx, int64_t k, int c0, int c1, int64_t s0, int64_t s1,
                           uint8_t *blk) {
    for (int64_t s = s0; s < s1; s++) {
        uint8_t *d = blk + (s - s0) * STEP_BYTES;
        if (c0 == 0 && c1 == TT) {
            __m512i v[16];
            for (int c = 0; c < TT; c++) split_step(x + c * ldx, k, s, v + 3 * c);
            for (int c = 3 * TT; c < 16; c++) v[c] = _mm512_setzero_si512();
            transpose16(v);
            for (int q = 0; q < 16; q++) _mm512_store_si512(d + q * 64, v[q]);
        } else {
            for (int c = c0; c < c1; c++) {
                _Alignas(64) uint32_t o[3][16];
                __m512i v[3];
                split_step(x + c * ldx, k, s, v);
                for (int p = 0; p < 3; p++) _mm512_store_si512(o[p], v[p]);
                for (int p = 0; p < 3; p++)
                    for (int q = 0; q < 16; q++) memcpy(d + q * 64 + 4 * (3 * c + p), &o[p][q], 4);
            }
        }
    }
}

AMX static void pack_act(const float *x, int64_t ldx, int64_t k, int64_t t0, int64_t t1, void *xp, int64_t ldxp) {
    const int64_t S = (k + 31) / 32;
    for (int64_t b = t0 / TT * TT; b < t1; b += TT) {
        int c0 = b < t0 ? (int)(t0 - b) : 0, c1 = b + TT > t1 ? (int)(t1 - b) : TT;
        pack_block(x + b * ldx, ldx, k, c0, c1, 0, S, (uint8_t *)xp + b * ldxp);
    }
}

typedef struct {
    int R, T;           /* shapes of the loaded configuration (R = 0: none) */
} tile_shape;

/* C tiles 0..3: R rows x 3T columns; A (4, 5): R rows x 32 k; B (6, 7): 16
 * pair rows x 3T columns. Loaded only when the shapes change. */
AMX INLINE void configure(tile_shape *cur, int R, int T) {
    if (cur->R == R && cur->T == T) return;
    amx_tile_config cfg = {.palette = 1};
    for (int j = 0; j < 4; j++) cfg.rows[j] = (uint8_t)R, cfg.colsb[j] = (uint16_t)(12 * T);
    for (int i = 4; i < 6; i++) cfg.rows[i] = (uint8_t)R, cfg.colsb[i] = 64;
    for (int i = 6; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = (uint16_t)(12 * T);
    _tile_loadconfig(&cfg);
    *cur = (tile_shape){R, T};
}

/* 32 f16s (h) split exactly through F32: whi = the top 8 significant bits,
 * wlo = the rest (3 bits at most), as BF16. */
AMX INLINE void f16_row_f32(__m512i h, uint16_t whi[32], uint16_t wlo[32]) {
    const __m512i mask = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
                                         27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 a = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    __m512 b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    __m512 ha = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), mask));
    __m512 hb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), mask));
    __m512 la = _mm512_sub_ps(a, ha), lb = _mm512_sub_ps(b, hb);
    _mm512_store_si512(whi, _mm512_permutex2var_epi16(_mm512_castps_si512(ha), idx, _mm512_castps_si512(hb)));
    _mm512_store_si512(wlo, _mm512_permutex2var_epi16(_mm512_castps_si512(la), idx, _mm512_castps_si512(lb)));
}

/* Step s of R rows at w (row stride rowb) as BF16 tile rows: BF16 rows in
 * place (*a0 = the rows, *stride = rowb) or through asc[0] (zero-padded) for
 * a partial last step; F16 converted to whi (asc[0]) and wlo (asc[1]). */
AMX INLINE void prep_a(const dtype wt, const uint8_t *w, size_t rowb, int R, int64_t k, int64_t s,
                       uint16_t asc[2][ROWS][32], const void **a0, size_t *stride) {
    const int64_t n = k - 32 * s;
    const uint8_t *ws = w + (size_t)s * 64;
    for (int r = 0; r < R; r++) _mm_prefetch((const char *)ws + r * rowb + PREFETCH, _MM_HINT_T0);
    *a0 = asc[0], *stride = 64;
    if (wt == DTYPE_BF16) {
        if (n >= 32) {
            *a0 = ws, *stride = rowb;
            return;
        }
        __mmask32 m = (__mmask32)((1u << n) - 1);
        for (int r = 0; r < R; r++) _mm512_store_si512(asc[0][r], _mm512_maskz_loadu_epi16(m, ws + r * rowb));
        return;
    }
    /* F16 -> BF16 whi, wlo in 16-bit lanes. A normal f16 (exponent e, 10
     * mantissa bits) has whi = sign | (e + 112, top 7 mantissa bits) =
     * sign | ((h & 0x7fff) >> 3) + 0x3800, and wlo = sign * m3 * 2^(e-25)
     * (m3 = the low 3 bits), whose BF16 exponent and mantissa for m3 = 1..7
     * come from a table plus e << 7; zero gives zeros. Rows with subnormal
     * f16s go through F32 (exact too). */
    const __m512i lut = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         104 << 7 | 0x60, 104 << 7 | 0x40, 104 << 7 | 0x20, 104 << 7,
                                         103 << 7 | 0x40, 103 << 7, 102 << 7, 0);
    const __m512i c7c00 = _mm512_set1_epi16(0x7c00), c0fff = _mm512_set1_epi16(0x0fff);
    const __m512i c3800 = _mm512_set1_epi16(0x3800), c8000 = _mm512_set1_epi16((short)0x8000);
    const __m512i c7fff = _mm512_set1_epi16(0x7fff), c7 = _mm512_set1_epi16(7);
    __mmask32 m = n >= 32 ? (__mmask32)~0u : (__mmask32)((1u << n) - 1);
    for (int r = 0; r < R; r++) {
        __m512i h = _mm512_maskz_loadu_epi16(m, ws + r * rowb);
        __mmask32 normal = _mm512_test_epi16_mask(h, c7c00);
        if (_mm512_test_epi16_mask(h, c7fff) & ~normal) {
            f16_row_f32(h, asc[0][r], asc[1][r]);
            continue;
        }
        __m512i sign = _mm512_and_si512(h, c8000);
        __m512i hi = _mm512_add_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 3), c0fff), c3800);
        _mm512_store_si512(asc[0][r], _mm512_maskz_or_epi32(0xffff, sign, _mm512_maskz_mov_epi16(normal, hi)));
        __m512i e7 = _mm512_srli_epi16(_mm512_and_si512(h, c7c00), 3);
        __m512i lo = _mm512_add_epi16(_mm512_permutexvar_epi16(_mm512_and_si512(h, c7), lut), e7);
        __mmask32 nz = _mm512_test_epi16_mask(h, c7);
        _mm512_store_si512(asc[1][r], _mm512_maskz_mov_epi16(nz, _mm512_or_si512(lo, sign)));
    }
}

/* Token tile J's B (register BT), then C J += A . B (tmm4) and, for F16,
 * += wlo . B (tmm5). */
#define MULT(BT, J)                                                           \
    do {                                                                      \
        _tile_loadd(BT, bs[J], 64);                                           \
        _tile_dpbf16ps(J, 4, BT);                                             \
        if (f16) _tile_dpbf16ps(J, 5, BT);                                    \
    } while (0)

/* Steps [s0, s1) of R rows (w: row 0) x NT token tiles into C tiles
 * 0..NT-1; b[j]: token tile j's B tile of step s0 (steps STEP_BYTES apart).
 * Each C tile sees one tile multiply per step (F16: by whi, then by wlo). */
AMX INLINE void run_steps(const dtype wt, const uint8_t *w, size_t rowb, int R, int NT, int64_t k, int64_t s0,
                          int64_t s1, const uint8_t *const b[GROUP]) {
    _Alignas(64) uint16_t asc[2][ROWS][32];
    const bool f16 = wt == DTYPE_F16;
    for (int64_t s = s0; s < s1; s++) {
        const uint8_t *bs[GROUP];
        for (int j = 0; j < NT; j++) bs[j] = b[j] + (s - s0) * STEP_BYTES;
        const void *a0;
        size_t as;
        prep_a(wt, w, rowb, R, k, s, asc, &a0, &as);
        if (f16) _mm_sfence(); /* a tile load of just-stored bytes waits far longer than the stores' drain */
        _tile_loadd(4, a0, as);
        if (f16) _tile_loadd(5, asc[1], 64);
        MULT(6, 0);
        if (NT > 1) MULT(7, 1);
        if (NT > 2) MULT(6, 2);
        if (NT > 3) MULT(7, 3);
    }
}

/* C tile J: zero, or load from / store to cb (16 x 16 floats). */
#define C_INIT(J, first, cb) do { if (first) _tile_zero(J); else _tile_loadd(J, cb, 64); } while (0)

/* Tokens [t, t + NT*T) (NT tiles of width T; the packed activations of
 * tile j at bt[j] from step 0, or packed here piece by piece when bt is
 * NULL) x rows [n0, n1). */
AMX INLINE void run_group(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t, int NT, int T,
                          const uint8_t *const bt[GROUP], tile_shape *cur) {
    _Alignas(64) uint8_t pbuf[GROUP][PIECE_STEPS][STEP_BYTES];    /* 64 KB */
    _Alignas(64) float cbuf[CHUNK_ROWS / DECODE_ROWS][GROUP][ROWS][16]; /* 64 KB */
    _Alignas(64) float out[ROWS][16];
    const int64_t k = a->k, S = (k + 31) / 32;
    const size_t rowb = (size_t)k * 2;
    const bool packed = bt != NULL;
    for (int64_t rc = n0; rc < n1; rc += CHUNK_ROWS) {
        int64_t re = rc + CHUNK_ROWS < n1 ? rc + CHUNK_ROWS : n1;
        int64_t piece = packed ? S : PIECE_STEPS;
        for (int64_t s0 = 0; s0 < S; s0 += piece) {
            int64_t s1 = s0 + piece < S ? s0 + piece : S;
            const uint8_t *b[GROUP];
            if (packed) {
                for (int j = 0; j < NT; j++) b[j] = bt[j] + s0 * STEP_BYTES;
            } else {
                for (int j = 0; j < NT; j++) {
                    pack_block(a->x + (t + j * T) * a->ldx, a->ldx, k, 0, T, s0, s1, pbuf[j][0]);
                    b[j] = pbuf[j][0];
                }
            }
            bool first = s0 == 0, last = s1 == S;
            /* Tile i's row r is row n + r * q. A chunk of whole tiles takes
             * its rows q apart (n = rc + i, q = rows / 16), so each tile row
             * walks q consecutive rows, a long sequential stream (16 adjacent
             * rows would end together after one row each); otherwise tiles
             * are 16 adjacent rows (n = rc + 16 i, q = 1), the last partial.
             * The rows' order changes no output. */
            const int rows = NT == 1 && T == 1 ? DECODE_ROWS : ROWS; /* rows per tile */
            const bool spread = (re - rc) % rows == 0;
            const int64_t q = spread ? (re - rc) / rows : 1, ntiles = (re - rc + rows - 1) / rows;
            for (int64_t i = 0; i < ntiles; i++) {
                const int64_t n = rc + (spread ? i : i * rows);
                int R = re - n < rows && !spread ? (int)(re - n) : rows, NC = NT; /* C tiles in use */
                configure(cur, R, T);
                float(*cb)[ROWS][16] = cbuf[i];
                C_INIT(0, first, cb[0]);
                if (NC > 1) C_INIT(1, first, cb[1]);
                if (NC > 2) C_INIT(2, first, cb[2]);
                if (NC > 3) C_INIT(3, first, cb[3]);
                const uint8_t *w = (const uint8_t *)a->w + (size_t)n * rowb;
                run_steps(wt, w, rowb * (size_t)q, R, NT, k, s0, s1, b);
                if (!last) {
                    _tile_stored(0, cb[0], 64);
                    if (NC > 1) _tile_stored(1, cb[1], 64);
                    if (NC > 2) _tile_stored(2, cb[2], 64);
                    if (NC > 3) _tile_stored(3, cb[3], 64);
                    continue;
                }
                for (int j = 0; j < NC; j++) {
                    switch (j) {
                    case 0: _tile_stored(0, out, 64); break;
                    case 1: _tile_stored(1, out, 64); break;
                    case 2: _tile_stored(2, out, 64); break;
                    default: _tile_stored(3, out, 64); break;
                    }
                    int64_t tq = t + j * T;
                    for (int c = 0; c < T; c++) {
                        float *y = a->y + (tq + c) * a->ldy;
                        for (int r = 0; r < R; r++) {
                            int64_t row = n + r * q;
                            float dot = (out[r][3 * c + 2] + out[r][3 * c + 1]) + out[r][3 * c];
                            if (a->bias) dot += kernels_weight_at(a->bias, a->btype, row);
                            y[row] = a->accumulate ? y[row] + dot : dot;
                        }
                    }
                }
            }
        }
    }
}

AMX INLINE void range(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    /* packed blocks are aligned to token 0 of xq; our own ones to t0 */
    const bool packed = a->xq && (size_t)a->ldxq >= matmul_amx_act_bytes(a->k);
    const int64_t tb = packed ? 0 : t0;
    tile_shape cur = {0, 0};
    int64_t t = t0;
    while (t < t1) {
        int64_t bend = tb + ((t - tb) / TT + 1) * TT; /* end of t's block */
        int NT = 1, T;
        if (t == bend - TT && bend <= t1) { /* whole tiles: up to GROUP of them */
            T = TT;
            while (NT < GROUP && t + (NT + 1) * TT <= t1) NT++;
        } else {
            T = (int)((bend < t1 ? bend : t1) - t);
        }
        const uint8_t *bt[GROUP];
        if (packed)
            for (int j = 0; j < NT; j++) {
                int64_t tj = t + j * TT, blk = tj / TT * TT;
                bt[j] = (const uint8_t *)a->xq + blk * a->ldxq + 12 * (tj - blk);
            }
        run_group(wt, a, n0, n1, t, NT, T, packed ? bt : NULL, &cur);
        t += (int64_t)NT * T;
    }
    if (cur.R) _tile_release();
}

AMX static void range_bf16(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range(DTYPE_BF16, a, n0, n1, t0, t1);
}
AMX static void range_f16(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    range(DTYPE_F16, a, n0, n1, t0, t1);
}

void matmul_range_amx(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    if (!matmul_amx_available()) abort(); /* a caller bug: test matmul_amx_available() first */
    if (a->wtype == DTYPE_BF16) range_bf16(a, n0, n1, t0, t1);
    else if (a->wtype == DTYPE_F16) range_f16(a, n0, n1, t0, t1);
    else abort(); /* a caller bug: BF16 / F16 weights only */
}

void matmul_amx_pack_act(const float *x, int64_t ldx, int64_t k, int64_t t0, int64_t t1, void *xp, int64_t ldxp) {
    if (!matmul_amx_available()) abort();
    pack_act(x, ldx, k, t0, t1, xp, ldxp);
}
#else
bool kernels_amx_tiles_permitted(void) { return false; }
bool matmul_amx_available(void) { return false; }
void matmul_range_amx(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    (void)a, (void)n0, (void)n1, (void)t0, (void)t1;
    abort(); /* never chosen: matmul_amx_available() is false here */
}
void matmul_amx_pack_act(const float *x, int64_t ldx, int64_t k, int64_t t0, int64_t t1, void *xp, int64_t ldxp) {
    (void)x, (void)ldx, (void)k, (void)t0, (void)t1, (void)xp, (void)ldxp;
    abort();
}
#endif

bool matmul_use_amx(void) {
    static atomic_int state = -1;
    int s = atomic_load(&state);
    if (s < 0)
        atomic_store(&state, s = kernels_isa_get() >= KERNELS_ISA_AVX512 && kernels_amx_allowed() &&
                                 matmul_amx_available());
    return s == 1;
}

bool matmul_amx_takes(dtype wtype) {
    static atomic_int f16 = -1;
    int s = atomic_load(&f16);
    if (s < 0) {
        const char *env = getenv("VLLM_AMX");
        atomic_store(&f16, s = env && !strcmp(env, "f16"));
    }
    return matmul_use_amx() && (wtype == DTYPE_BF16 || (wtype == DTYPE_F16 && s == 1));
}
