/*
 * matmul_amx.c - y = x W^T for BF16 and F16 weights on AMX-BF16 tiles
 * (Sapphire Rapids and later), with FP32 products: the path matmul_kernel
 * gives BF16/F16 weights when matmul_use_amx() says so, for every token
 * count (decode included), so a process has one reduction order.
 *
 * Exactness. tdpbf16ps multiplies BF16 pairs into FP32 accumulators. Each
 * FP32 activation is split exactly into three BF16 parts
 *     x = hi + mid + lo    hi = x truncated to 8 significant bits,
 *                          mid = (x - hi) truncated, lo = x - hi - mid
 * (each difference is exact in FP32; lo has at most 8 significant bits).
 * BF16 weights are used as they are; an F16 weight (11 significant bits)
 * splits exactly into w = whi + wlo the same way. Every product of parts is
 * exact in FP32, so only the summation differs from the FMA kernels: one
 * FP32 accumulator per output over 3 (BF16) or 6 (F16) times k exact terms.
 * (Inputs the tiles see as subnormal, i.e. parts below 2^-126, count as 0.)
 *
 * Formulation: C^T = W X^T, so weight rows are tile rows read in place:
 *     A (tmm4, tmm5 for F16's wlo): 16 weight rows x 32 k as BF16, loaded
 *        straight from the rows (stride = row bytes) for BF16, converted
 *        into a scratch tile per 32-k step for F16 (whi, wlo);
 *     B (tmm6/7): one part of 16 tokens' activations in pair layout,
 *        B[kp][t] = (x_t[2kp], x_t[2kp+1]) as a BF16 pair, from the packed
 *        activation blocks (matmul_amx_pack_act);
 *     C (tmm0..3): 16 rows x up to 16 tokens, one tile per token tile of a
 *        group of up to 4 tiles (64 tokens): each weight tile (and each F16
 *        conversion) serves the whole group.
 * Packed activation blocks: 16 tokens each, matmul_amx_act_bytes(k) bytes
 * per token, laid out [part 3][step ceil(k/32)][kp 16][token 16] dwords,
 * zero beyond k. The runner packs once per matmul stage (args.xq); without
 * xq the kernel packs the call's tokens itself, a few steps at a time.
 *
 * Invariance: every output's accumulator starts at zero and sees the 32-k
 * steps in increasing order; within a step, the parts in one fixed order
 * (hi, mid, lo; for F16 each part times whi then wlo), each one tile
 * multiply. Nothing depends on the token count, the tile width, the row
 * tile or the caller's split, so a token's outputs are bit-identical alone
 * or in any batch. The epilogue is store_out's (bias, accumulate).
 *
 * Tile state is per thread: each call loads a configuration (reloaded when
 * the tile shapes change) and releases the tiles before returning. The OS
 * grants the tile state once per process (amx_tiles_permitted, amx.h).
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

size_t matmul_amx_act_bytes(int64_t k) { return (size_t)((k + 31) / 32) * 3 * 64; }

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

bool amx_tiles_permitted(void) {
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
    unsigned a, b, c, d;
    /* CPUID.(7,0):EDX bit 22 AMX-BF16 */
    return amx_tiles_permitted() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1);
}

#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    ROWS = 16,          /* weight rows per tile */
    TT = 16,            /* tokens per tile */
    GROUP = 4,          /* token tiles sharing each weight tile */
    STEP_BYTES = 1024,  /* one part of one 32-k step of a 16-token block */
    PIECE_STEPS = 4,    /* steps packed at a time when the caller gave no xq */
    CHUNK_ROWS = 128,   /* rows whose C tiles wait in memory between pieces */
    PREFETCH = 512,     /* software prefetch distance into each weight row */
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

/* Columns [c0, c1) of one 16-token block (x row of column c: x + c * ldx)
 * for steps [s0, s1): part p of step s at blk + p * part_stride + (s - s0) *
 * STEP_BYTES. A whole block goes through the transpose; a partial one is
 * written column by column (so threads packing neighbouring columns of one
 * block never write each other's bytes). */
AMX static void pack_block(const float *x, int64_t ldx, int64_t k, int c0, int c1, int64_t s0, int64_t s1,
                           uint8_t *blk, size_t part_stride) {
    for (int64_t s = s0; s < s1; s++) {
        uint8_t *d = blk + (s - s0) * STEP_BYTES;
        if (c0 == 0 && c1 == TT) {
            __m512i v[3][16];
            for (int c = 0; c < TT; c++) {
                __m512i o[3];
                split_step(x + c * ldx, k, s, o);
                v[0][c] = o[0], v[1][c] = o[1], v[2][c] = o[2];
            }
            for (int p = 0; p < 3; p++) {
                transpose16(v[p]);
                for (int q = 0; q < 16; q++) _mm512_store_si512(d + p * part_stride + q * 64, v[p][q]);
            }
        } else {
            for (int c = c0; c < c1; c++) {
                _Alignas(64) uint32_t o[3][16];
                __m512i v[3];
                split_step(x + c * ldx, k, s, v);
                for (int p = 0; p < 3; p++) _mm512_store_si512(o[p], v[p]);
                for (int p = 0; p < 3; p++)
                    for (int q = 0; q < 16; q++) memcpy(d + p * part_stride + q * 64 + 4 * c, &o[p][q], 4);
            }
        }
    }
}

AMX static void pack_act(const float *x, int64_t ldx, int64_t k, int64_t t0, int64_t t1, void *xp, int64_t ldxp) {
    const int64_t S = (k + 31) / 32;
    for (int64_t b = t0 / TT * TT; b < t1; b += TT) {
        int c0 = b < t0 ? (int)(t0 - b) : 0, c1 = b + TT > t1 ? (int)(t1 - b) : TT;
        pack_block(x + b * ldx, ldx, k, c0, c1, 0, S, (uint8_t *)xp + b * ldxp, (size_t)S * STEP_BYTES);
    }
}

typedef struct {
    int R, T, NT;       /* shapes of the loaded configuration (R = 0: none) */
} tile_shape;

AMX INLINE void configure(tile_shape *cur, int R, int T, int NT) {
    if (cur->R == R && cur->T == T && cur->NT == NT) return;
    amx_tile_config cfg = {.palette = 1};
    for (int j = 0; j < NT; j++) cfg.rows[j] = (uint8_t)R, cfg.colsb[j] = (uint16_t)(4 * T); /* C */
    for (int i = 4; i < 6; i++) cfg.rows[i] = (uint8_t)R, cfg.colsb[i] = 64;                  /* A */
    for (int i = 6; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = (uint16_t)(4 * T);           /* B */
    _tile_loadconfig(&cfg);
    *cur = (tile_shape){R, T, NT};
}

/* The A tile(s) of step s for R rows at w (row stride rowb): BF16 rows in
 * place (tmm4), or through asc (zero-padded) for a partial last step; F16
 * converted to whi (tmm4) and wlo (tmm5) via asc. */
AMX INLINE void load_a(const dtype wt, const uint8_t *w, size_t rowb, int R, int64_t k, int64_t s,
                       uint16_t asc[2][ROWS][32]) {
    const int64_t n = k - 32 * s;
    const uint8_t *ws = w + (size_t)s * 64;
    for (int r = 0; r < R; r++) _mm_prefetch((const char *)ws + r * rowb + PREFETCH, _MM_HINT_T0);
    if (wt == DTYPE_BF16) {
        if (n >= 32) {
            _tile_loadd(4, ws, rowb);
            return;
        }
        __mmask32 m = (__mmask32)((1u << n) - 1);
        for (int r = 0; r < R; r++) _mm512_store_si512(asc[0][r], _mm512_maskz_loadu_epi16(m, ws + r * rowb));
        _tile_loadd(4, asc[0], 64);
        return;
    }
    const __m512i mask = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
                                         27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __mmask32 m = n >= 32 ? (__mmask32)~0u : (__mmask32)((1u << n) - 1);
    for (int r = 0; r < R; r++) {
        __m512i h = _mm512_maskz_loadu_epi16(m, ws + r * rowb);
        __m512 a = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
        __m512 b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        __m512 ha = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), mask));
        __m512 hb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), mask));
        __m512 la = _mm512_sub_ps(a, ha), lb = _mm512_sub_ps(b, hb);
        _mm512_store_si512(asc[0][r], _mm512_permutex2var_epi16(_mm512_castps_si512(ha), idx, _mm512_castps_si512(hb)));
        _mm512_store_si512(asc[1][r], _mm512_permutex2var_epi16(_mm512_castps_si512(la), idx, _mm512_castps_si512(lb)));
    }
    _tile_loadd(4, asc[0], 64);
    _tile_loadd(5, asc[1], 64);
}

/* B tile of token tile J (register BT) for part XP, then the tile multiplies
 * of C J: by A (tmm4) and, for F16, by wlo (tmm5). */
#define MULT(BT, J, XP)                                                       \
    do {                                                                      \
        _tile_loadd(BT, bs[J] + (XP) * part_stride, 64);                      \
        _tile_dpbf16ps(J, 4, BT);                                             \
        if (f16) _tile_dpbf16ps(J, 5, BT);                                    \
    } while (0)

/* Steps [s0, s1) of R rows (w: row 0) x NT token tiles into C tiles 0..NT-1;
 * b[j]: token tile j's part 0 of step s0 (steps STEP_BYTES apart). */
AMX INLINE void run_steps(const dtype wt, const uint8_t *w, size_t rowb, int R, int NT, int64_t k, int64_t s0,
                          int64_t s1, const uint8_t *const b[GROUP], size_t part_stride) {
    _Alignas(64) uint16_t asc[2][ROWS][32];
    const bool f16 = wt == DTYPE_F16;
    for (int64_t s = s0; s < s1; s++) {
        const uint8_t *bs[GROUP];
        for (int j = 0; j < NT; j++) bs[j] = b[j] + (s - s0) * STEP_BYTES;
        load_a(wt, w, rowb, R, k, s, asc);
        if (NT == 1) {
            MULT(6, 0, 0);
            MULT(7, 0, 1);
            MULT(6, 0, 2);
            continue;
        }
        for (int p = 0; p < 3; p++) {
            MULT(6, 0, p);
            MULT(7, 1, p);
            if (NT > 2) MULT(6, 2, p);
            if (NT > 3) MULT(7, 3, p);
        }
    }
}

/* C tile J: zero, or load from / store to cb (16 x 16 floats). */
#define C_INIT(J, first, cb) do { if (first) _tile_zero(J); else _tile_loadd(J, cb, 64); } while (0)

/* Tokens [t, t + NT*T) (NT tiles of width T; the packed activations of
 * tile j at bt[j] with steps from s = 0, part stride part_stride, or packed
 * here piece by piece when bt is NULL) x rows [n0, n1). */
AMX INLINE void run_group(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t, int NT, int T,
                          const uint8_t *const bt[GROUP], size_t part_stride, tile_shape *cur) {
    _Alignas(64) uint8_t pbuf[GROUP][3][PIECE_STEPS][STEP_BYTES];   /* 48 KB */
    _Alignas(64) float cbuf[CHUNK_ROWS / ROWS][GROUP][ROWS][TT];  /* 32 KB */
    _Alignas(64) float out[ROWS][TT];
    const int64_t k = a->k, S = (k + 31) / 32;
    const size_t rowb = (size_t)k * 2;
    const bool packed = bt != NULL;
    for (int64_t rc = n0; rc < n1; rc += CHUNK_ROWS) {
        int64_t re = rc + CHUNK_ROWS < n1 ? rc + CHUNK_ROWS : n1;
        int64_t piece = packed ? S : PIECE_STEPS;
        for (int64_t s0 = 0; s0 < S; s0 += piece) {
            int64_t s1 = s0 + piece < S ? s0 + piece : S;
            const uint8_t *b[GROUP];
            size_t ps = part_stride;
            if (packed) {
                for (int j = 0; j < NT; j++) b[j] = bt[j] + s0 * STEP_BYTES;
            } else {
                ps = PIECE_STEPS * STEP_BYTES;
                for (int j = 0; j < NT; j++) {
                    pack_block(a->x + (t + j * T) * a->ldx, a->ldx, k, 0, T, s0, s1, pbuf[j][0][0], ps);
                    b[j] = pbuf[j][0][0];
                }
            }
            bool first = s0 == 0, last = s1 == S;
            for (int64_t n = rc; n < re; n += ROWS) {
                int R = re - n < ROWS ? (int)(re - n) : ROWS;
                configure(cur, R, T, NT);
                float(*cb)[ROWS][TT] = cbuf[(n - rc) / ROWS];
                C_INIT(0, first, cb[0]);
                if (NT > 1) C_INIT(1, first, cb[1]);
                if (NT > 2) C_INIT(2, first, cb[2]);
                if (NT > 3) C_INIT(3, first, cb[3]);
                const uint8_t *w = (const uint8_t *)a->w + (size_t)n * rowb;
                run_steps(wt, w, rowb, R, NT, k, s0, s1, b, ps);
                if (!last) {
                    _tile_stored(0, cb[0], 64);
                    if (NT > 1) _tile_stored(1, cb[1], 64);
                    if (NT > 2) _tile_stored(2, cb[2], 64);
                    if (NT > 3) _tile_stored(3, cb[3], 64);
                    continue;
                }
                for (int j = 0; j < NT; j++) {
                    switch (j) {
                    case 0: _tile_stored(0, out, 64); break;
                    case 1: _tile_stored(1, out, 64); break;
                    case 2: _tile_stored(2, out, 64); break;
                    default: _tile_stored(3, out, 64); break;
                    }
                    for (int c = 0; c < T; c++) {
                        float *y = a->y + (t + j * T + c) * a->ldy + n;
                        for (int r = 0; r < R; r++) {
                            float dot = out[r][c];
                            if (a->bias) dot += kernels_weight_at(a->bias, a->btype, n + r);
                            y[r] = a->accumulate ? y[r] + dot : dot;
                        }
                    }
                }
            }
        }
    }
}

AMX INLINE void range(const dtype wt, const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1) {
    const int64_t S = (a->k + 31) / 32;
    const size_t act = matmul_amx_act_bytes(a->k);
    /* packed blocks are aligned to token 0 of xq; our own ones to t0 */
    const bool packed = a->xq && (size_t)a->ldxq >= act;
    const int64_t tb = packed ? 0 : t0;
    tile_shape cur = {0, 0, 0};
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
                bt[j] = (const uint8_t *)a->xq + blk * a->ldxq + 4 * (tj - blk);
            }
        run_group(wt, a, n0, n1, t, NT, T, packed ? bt : NULL, (size_t)S * STEP_BYTES, &cur);
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
bool amx_tiles_permitted(void) { return false; }
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
