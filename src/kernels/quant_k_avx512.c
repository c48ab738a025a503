/*
 * quant_k_avx512.c - K-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) x 8-bit
 * activations with AVX-512 VNNI: the K-quant kernel of AVX-512 machines
 * (every token count for Q2_K / Q3_K / Q5_K; the few-token calls of Q4_K /
 * Q6_K where AMX takes the rest).
 *
 * The same integers and the same float order as quant_k.c documents, so the
 * results are bit-identical to its portable and AVX2 kernels; only the way
 * the eight block sums of a super-block are formed differs:
 *
 *   - The call's tokens (up to KX_TOKENS at a time) are first copied into
 *     contiguous int8 rows (8 blocks x 32 per super-block, no scales in
 *     between), with the activation scales and, per type, Q4_K / Q5_K's
 *     block sums of xq or the 16-element sums times -32 (Q6_K), -4 (Q3_K)
 *     or 1 (Q2_K, for its mins) beside them.
 *   - A super-block's weights become four 64-byte vectors of unsigned values,
 *     blocks (0,1) (2,3) (4,5) (6,7): Q4_K nibbles 0..15 (one 32-byte load
 *     broadcast to both halves, shifted by 0 / 4), Q5_K the same with the
 *     fifth bit added under a vptestmb mask of qh, Q6_K's q6 0..63, Q2_K's
 *     2-bit u (shifts 0/2 or 4/6 of the broadcast qs) and Q3_K's 3-bit u
 *     (the same plus hmask's bit, as Q5_K's).
 *   - vpdpbusd gives 16 int32 lanes per vector, lane i = elements 4i..4i+3
 *     of the pair; 128-bit lane c of pair p is half-block h = 4p + c (16
 *     elements). A 4x4 transpose-add within 128-bit lanes turns the four
 *     vectors into the 16 half-block sums, lane 4c + p = half 4p + c.
 *   - Q6_K / Q3_K: (half sum - offset * sum of its xq) * its scale, per lane;
 *     Q2_K: half sum * scale and (sum of its xq) * min, per lane.
 *   - Halves 2j and 2j+1 (lanes 4c+p, 4c+4+p) add up to block j; a permute
 *     puts block j in lane j of a 256-bit vector, and from there on the code
 *     is the AVX2 kernel's: the same float operations in the same lanes.
 *
 * Single-token calls read rows KX_STREAMS at a time, far apart (r, r + q,
 * r + 2q, ... of a range of 4q rows), super-block by super-block in turn: one
 * sequential stream per thread left decode well below the bandwidth the
 * machine gives to several (Q4_K 1.1B decode +20-28% here). With more tokens
 * the kernel is compute-bound and takes one row at a time: four rows' worth
 * of accumulators spilled to the stack (Zen 5, 1.1B prefill 512, 2 threads:
 * Q6_K 153 -> 186 tok/s, Q4_K unchanged).
 *
 * Integer sums: |sum| < 2^24 as quant_k.c bounds them, so every int32 step
 * is exact and any grouping gives the same integer.
 */
#include "kernels/quant_k.h"

#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum {
    KX_TOKENS = 4,       /* tokens per pass over the rows */
    KX_MAX_SB = 32,      /* super-blocks per piece of k (8192 elements) */
    KX_ROWS = 64,        /* rows per chunk when k takes several pieces */
    KX_STREAMS = 4,      /* rows read in turn */
    KX_AHEAD = 4,        /* super-blocks of prefetch distance, per row */
};

/* One piece of k for up to KX_TOKENS tokens, laid out for the kernel. */
typedef struct kx_acts {
    _Alignas(64) int8_t x[KX_TOKENS][KX_MAX_SB * 256]; /* xq without the block scales */
    _Alignas(64) float dx[KX_TOKENS][KX_MAX_SB * 8];   /* block scales */
    _Alignas(64) int32_t xs[KX_TOKENS][KX_MAX_SB * 16]; /* Q4_K / Q5_K: block sums (8 per sb); others: K * half sums, lane order */
} kx_acts;

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* The sums of the eight 4-element groups of a 32-byte block, one per lane. */
AVX512 INLINE __m256i sums4(__m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), x); }

AVX512 static void kx_prep(dtype type, const uint8_t *xq, int64_t ldxq, int T, int64_t nsb, kx_acts *a) {
    for (int t = 0; t < T; t++) {
        const uint8_t *xr = xq + t * ldxq;
        for (int64_t i = 0; i < nsb * 8; i++) {
            const uint8_t *xb = xr + i * QUANT_ACT_BLOCK_BYTES;
            __m256i v = _mm256_loadu_si256((const __m256i *)(xb + 4));
            _mm256_store_si256((__m256i *)(a->x[t] + 32 * i), v);
            memcpy(&a->dx[t][i], xb, 4);
            __m256i s = sums4(v); /* lanes 0..3: first 16 elements, 4..7: last 16 */
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            if (type == DTYPE_Q4_K || type == DTYPE_Q5_K) {
                h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
                a->xs[t][i] = _mm_cvtsi128_si32(h);
            } else { /* half sums times the offset: Q6_K -32, Q3_K -4, Q2_K 1 (for its mins) */
                const int32_t kh = type == DTYPE_Q6_K ? -32 : type == DTYPE_Q3_K ? -4 : 1;
                __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
                lo = _mm_add_epi32(lo, _mm_unpackhi_epi64(lo, lo));
                hi = _mm_add_epi32(hi, _mm_unpackhi_epi64(hi, hi));
                int32_t s0 = _mm_cvtsi128_si32(_mm_add_epi32(lo, _mm_shuffle_epi32(lo, 1)));
                int32_t s1 = _mm_cvtsi128_si32(_mm_add_epi32(hi, _mm_shuffle_epi32(hi, 1)));
                /* halves 2j, 2j+1 of the super-block (j = i % 8) at lanes
                 * 4 * (h % 4) + h / 4 of the super-block's 16 */
                int64_t sb = i / 8, hh = 2 * (i % 8);
                a->xs[t][16 * sb + 4 * (hh % 4) + hh / 4] = kh * s0;
                a->xs[t][16 * sb + 4 * ((hh + 1) % 4) + (hh + 1) / 4] = kh * s1;
            }
        }
    }
}

/* The four pair vectors -> the 16 half-block sums, lane 4c + p = half 4p + c. */
AVX512 INLINE __m512i halves(const __m512i p[4]) {
    __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
    __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

/* Half sums (lane order of halves()) -> block j's sum in lane j. */
AVX512 INLINE __m256i blocks(__m512i h) {
    const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i b = _mm512_add_epi32(h, _mm512_shuffle_i32x4(h, h, _MM_SHUFFLE(3, 3, 1, 1))); /* c=0: +c=1, c=2: +c=3 */
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, b));
}

/* R rows x T tokens over nsb super-blocks (one piece of k): row rr at
 * row + rr * gap, its accumulators acc[rr * agap] (carried in and out). The
 * rows' super-blocks are read in turn: R streams far apart keep more lines
 * in flight than one (adjacent rows don't: the prefetchers see one page). */
AVX512 INLINE void rows_kx(const int R, const int T, const dtype type, const uint8_t *row, size_t stride,
                           size_t gap, int64_t nsb, const kx_acts *a, __m256 (*acc)[KX_TOKENS], int64_t agap) {
    const size_t bb = dtype_block_bytes(type);
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30), m3 = _mm512_set1_epi8(3);
    /* Q2_K / Q3_K pair p's shifts: low half 4(p % 2), high half 4(p % 2) + 2 */
    const __m512i sh_2a = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002LL, 0x0002000200020002LL,
                                            0x0002000200020002LL, 0x0002000200020002LL);
    const __m512i sh_2b = _mm512_add_epi16(sh_2a, _mm512_set1_epi16(4));
    const __m512i sh_q4 = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004LL, 0x0004000400040004LL,
                                            0x0004000400040004LL, 0x0004000400040004LL);
    const __m512i sh_l = _mm512_setr_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL,
                                           0x0004000400040004LL, 0x0002000200020002LL, 0x0002000200020002LL,
                                           0x0002000200020002LL, 0x0002000200020002LL);
    const __m512i sh_r = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002LL, 0x0002000200020002LL,
                                           0x0002000200020002LL, 0x0002000200020002LL);
    /* byte 4c + p of the 16 Q6_K scales = scale of half 4p + c */
    const __m128i transpose = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    /* the accumulators in registers for the whole piece (the caller's array
     * is indexed by a run-time gap: kept there, every fma went through memory) */
    __m256 ra[KX_STREAMS][KX_TOKENS];
#pragma GCC unroll 4
    for (int rr = 0; rr < R; rr++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) ra[rr][t] = acc[rr * agap][t];
    for (int64_t s = 0; s < nsb; s++)
#pragma GCC unroll 4
    for (int rr = 0; rr < R; rr++) {
        const uint8_t *b = row + rr * gap + s * bb;
        for (int c = 0; c < (int)bb; c += 64) _mm_prefetch((const char *)b + stride + c, _MM_HINT_T0);
        __m512i w[4], scale16 = _mm512_setzero_si512(), min16 = _mm512_setzero_si512();
        __m256i scv = _mm256_setzero_si256(), mn = _mm256_setzero_si256();
        __m256 dvec, dmvec = _mm256_setzero_ps();
        if (type == DTYPE_Q4_K || type == DTYPE_Q5_K) {
            uint64_t sc8, m8;
            q4_k_scales_mins(b, &sc8, &m8);
            scv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8));
            mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
            dvec = _mm256_set1_ps(_cvtsh_ss(ld16(b)));
            dmvec = _mm256_set1_ps(-_cvtsh_ss(ld16(b + 2))); /* -dmin: (-dmin) * dx == -(dmin * dx) exactly */
            const uint8_t *qs = b + (type == DTYPE_Q4_K ? 16 : 48);
            __m512i qhb = _mm512_setzero_si512();
            if (type == DTYPE_Q5_K) qhb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) { /* blocks 2p, 2p+1: low, high nibbles of 32 bytes */
                __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * p)));
                w[p] = _mm512_and_si512(_mm512_srlv_epi16(q, sh_q4), m4);
                if (type == DTYPE_Q5_K) { /* bit 2p (low half) or 2p+1 (high half) of qh[l] is bit 4 */
                    __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * p))),
                                                     _mm256_set1_epi8((char)(1 << (2 * p + 1))), 1);
                    w[p] = _mm512_mask_add_epi8(w[p], _mm512_test_epi8_mask(qhb, bit), w[p], _mm512_set1_epi8(16));
                }
            }
        } else if (type == DTYPE_Q2_K || type == DTYPE_Q3_K) {
            const uint8_t *qs = b + (type == DTYPE_Q2_K ? 16 : 32);
            __m128i sc;
            __m512i hmb = _mm512_setzero_si512();
            if (type == DTYPE_Q2_K) {
                __m128i raw = _mm_loadu_si128((const __m128i *)b);
                sc = _mm_and_si128(raw, _mm_set1_epi8(15));
                min16 = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)),
                                                              transpose));
                dvec = _mm256_set1_ps(_cvtsh_ss(ld16(b + 80)));
                dmvec = _mm256_set1_ps(-_cvtsh_ss(ld16(b + 82)));
            } else {
                int8_t s3[16];
                q3_k_scales(b + 96, s3);
                sc = _mm_loadu_si128((const __m128i *)s3);
                dvec = _mm256_set1_ps(_cvtsh_ss(ld16(b + 108)));
                hmb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b));
            }
            scale16 = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc, transpose));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) { /* blocks 2p, 2p+1 = 4h + r, r + 1 with h = p / 2, r = 2 (p % 2) */
                __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (p / 2))));
                w[p] = _mm512_and_si512(_mm512_srlv_epi16(q, p % 2 ? sh_2b : sh_2a), m3);
                if (type == DTYPE_Q3_K) { /* bit 2p / 2p+1 of hmask[l] is bit 2 */
                    __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * p))),
                                                     _mm256_set1_epi8((char)(1 << (2 * p + 1))), 1);
                    w[p] = _mm512_mask_add_epi8(w[p], _mm512_test_epi8_mask(hmb, bit), w[p], _mm512_set1_epi8(4));
                }
            }
        } else {
            dvec = _mm256_set1_ps(_cvtsh_ss(ld16(b + 208)));
            scale16 = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b + 192)), transpose));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) { /* blocks 4h..4h+3 (q6_k_unpack_half_avx2's bits, unsigned) */
                __m512i l = _mm512_loadu_si512(b + 64 * h);
                __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
                w[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh_l), m30));
                w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi16(qh, sh_r), m30));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const int8_t *x = a->x[t] + 256 * s;
            __m512i p[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[i], _mm512_load_si512(x + 64 * i));
            __m512i h = halves(p);
            __m256 dxv = _mm256_load_ps(a->dx[t] + 8 * s);
            if (type == DTYPE_Q4_K || type == DTYPE_Q5_K) {
                __m256i iq = _mm256_mullo_epi32(blocks(h), scv);
                /* m_j * xs_j by madd: |xs_j| < 2^15, 0 <= m_j < 64 (quant_k.c) */
                __m256i ix = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(a->xs[t] + 8 * s)), mn);
                ra[rr][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dvec, dxv), ra[rr][t]);
                ra[rr][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ix),
                                             _mm256_mul_ps(dmvec, dxv), ra[rr][t]);
            } else if (type == DTYPE_Q2_K) { /* 4-bit scales on the q half sums, mins on xq's */
                __m256i iq = blocks(_mm512_mullo_epi32(h, scale16));
                __m256i ix = blocks(_mm512_mullo_epi32(_mm512_load_si512(a->xs[t] + 16 * s), min16));
                ra[rr][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iq), _mm256_mul_ps(dvec, dxv), ra[rr][t]);
                ra[rr][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ix), _mm256_mul_ps(dmvec, dxv), ra[rr][t]);
            } else { /* Q6_K, Q3_K: (half sum - offset * sum of its xq) * scale */
                h = _mm512_mullo_epi32(_mm512_add_epi32(h, _mm512_load_si512(a->xs[t] + 16 * s)), scale16);
                ra[rr][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blocks(h)), _mm256_mul_ps(dvec, dxv), ra[rr][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int rr = 0; rr < R; rr++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[rr * agap][t] = ra[rr][t];
}

AVX512 INLINE void range_kx(const int T, const dtype type, const uint8_t *w, int64_t k, const uint8_t *xq,
                            int64_t ldxq, float *y, int64_t ldy, int64_t r0, int64_t r1, kx_acts *a) {
    const size_t stride = dtype_row_bytes(type, k), bb = dtype_block_bytes(type);
    const int64_t nsb = k / QUANT_QK_K;
    if (nsb <= KX_MAX_SB) { /* one piece: prepare once, every row */
        kx_prep(type, xq, ldxq, T, nsb, a);
        /* rows r, r + q, r + 2q, ... in turn: KX_STREAMS streams far apart */
        const int64_t q = T == 1 ? (r1 - r0) / KX_STREAMS : 0; /* streams at decode only */
        for (int64_t r = r0; r < r1;) {
            const int R = r < r0 + q ? KX_STREAMS : 1;
            __m256 acc[KX_STREAMS][KX_TOKENS];
            for (int rr = 0; rr < R; rr++)
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) acc[rr][t] = _mm256_setzero_ps();
            if (R == KX_STREAMS) rows_kx(KX_STREAMS, T, type, w + r * stride, stride, (size_t)q * stride, nsb, a, acc, 1);
            else rows_kx(1, T, type, w + r * stride, stride, 0, nsb, a, acc, 1);
            for (int rr = 0; rr < R; rr++)
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) y[t * ldy + r + rr * q] = quant_k_reduce8_avx2(acc[rr][t]);
            r += 1;
            if (r == r0 + q) r = r0 + KX_STREAMS * q;
        }
        return;
    }
    /* longer rows: chunks of KX_ROWS rows, each piece of k prepared once
     * per chunk, the chunk's accumulators carried from piece to piece */
    __m256 accs[KX_ROWS][KX_TOKENS];
    for (int64_t rc = r0; rc < r1; rc += KX_ROWS) {
        int64_t nr = r1 - rc < KX_ROWS ? r1 - rc : KX_ROWS;
        for (int64_t i = 0; i < nr; i++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) accs[i][t] = _mm256_setzero_ps();
        for (int64_t s0 = 0; s0 < nsb; s0 += KX_MAX_SB) {
            int64_t n = nsb - s0 < KX_MAX_SB ? nsb - s0 : KX_MAX_SB;
            kx_prep(type, xq + s0 * 8 * QUANT_ACT_BLOCK_BYTES, ldxq, T, n, a);
            const int64_t q = T == 1 ? nr / KX_STREAMS : 0; /* as above, within the chunk */
            for (int64_t i = 0; i < nr;) {
                const uint8_t *wr = w + (rc + i) * stride + s0 * bb;
                if (i < q) rows_kx(KX_STREAMS, T, type, wr, stride, (size_t)q * stride, n, a, accs + i, q);
                else rows_kx(1, T, type, wr, stride, 0, n, a, accs + i, 0);
                i += 1;
                if (i == q) i = KX_STREAMS * q;
            }
        }
        for (int64_t i = 0; i < nr; i++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) y[t * ldy + rc + i] = quant_k_reduce8_avx2(accs[i][t]);
    }
}

#define KX_ENTRY(name, type)                                                                                    \
    AVX512 static void name(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,     \
                            int64_t r0, int64_t r1, int64_t t0, int64_t t1, kx_acts *a) {                       \
        const uint8_t *x = (const uint8_t *)xq;                                                                 \
        for (int64_t t = t0; t < t1; t += KX_TOKENS) {                                                          \
            const uint8_t *xt = x + t * ldxq;                                                                   \
            float *yt = y + t * ldy;                                                                            \
            switch (t1 - t < KX_TOKENS ? t1 - t : KX_TOKENS) {                                                  \
            case 4: range_kx(4, type, w, k, xt, ldxq, yt, ldy, r0, r1, a); break;                               \
            case 3: range_kx(3, type, w, k, xt, ldxq, yt, ldy, r0, r1, a); break;                               \
            case 2: range_kx(2, type, w, k, xt, ldxq, yt, ldy, r0, r1, a); break;                               \
            default: range_kx(1, type, w, k, xt, ldxq, yt, ldy, r0, r1, a); break;                              \
            }                                                                                                   \
        }                                                                                                       \
    }
KX_ENTRY(matmul_q4_k_avx512, DTYPE_Q4_K)
KX_ENTRY(matmul_q6_k_avx512, DTYPE_Q6_K)
KX_ENTRY(matmul_q2_k_avx512, DTYPE_Q2_K)
KX_ENTRY(matmul_q3_k_avx512, DTYPE_Q3_K)
KX_ENTRY(matmul_q5_k_avx512, DTYPE_Q5_K)
#endif

void quant_matmul_act_range_k_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx512() || !quant_is_k(type)) abort(); /* a caller bug */
#if defined(__x86_64__)
    kx_acts acts; /* 44 KB */
    switch (type) {
    case DTYPE_Q4_K: matmul_q4_k_avx512(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1, &acts); break;
    case DTYPE_Q6_K: matmul_q6_k_avx512(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1, &acts); break;
    case DTYPE_Q2_K: matmul_q2_k_avx512(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1, &acts); break;
    case DTYPE_Q3_K: matmul_q3_k_avx512(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1, &acts); break;
    default: matmul_q5_k_avx512(w, k, xq, ldxq, y, ldy, r0, r1, t0, t1, &acts); break;
    }
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)r0, (void)r1, (void)t0, (void)t1;
#endif
}
