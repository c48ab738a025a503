/*
 * quant_k_x16.c - Q4_K weights in the rows-in-lanes x16 layout: the repack,
 * the AVX-512 VNNI kernel that reads it (every token count on AVX-512
 * machines without AMX: prefill, batches and single-token decode, where it
 * also beats the row kernel), the AVX2 kernel (calls of two tokens or more
 * on AVX2 machines; single-token decode keeps the AVX2 row kernel, which
 * streams faster), its portable mirror, and the dispatch that sends a call's
 * whole 16-row groups to the copy and the rows around them to quant_k.c's
 * row kernels.
 *
 * Why. The row kernels (quant_k_avx512.c) spend most of their time after
 * the integer dots: a vpdpbusd leaves 16 lanes of one row's 4-element
 * sums, and a transpose-add, a permute, a mullo, a madd and the scales'
 * unpacking per row, token and super-block turn them into the eight block
 * sums the float order needs (a Q4_K prefill profile: 76% in that kernel,
 * 10% in its activation prep). With 16 rows in the 16 lanes of a zmm,
 * eight vpdpbusd against broadcast activation dwords leave each row's whole
 * block sum in its own lane: no horizontal step, and the float epilogue
 * (quant_k.c's order) is done for 16 rows at once.
 *
 * The layout (quant.h, QUANT_X16_Q4_K_REC): 16-row groups one after the
 * other, each a record per super-block s in order (2368 bytes, 148 per row:
 * the GGUF rows' 144 plus the scales and mins unpacked):
 *     0     d[16]       f16, row r's d
 *     32    dmin[16]    f16, row r's dmin
 *     64    sc[8][16]   uint8, the 6-bit scale of block j of row r at 16j + r
 *     192   m[8][16]    uint8, the 6-bit min, the same way
 *     320   qs          dword (i, r) at 64i + 4r (i < 32) = bytes 4i..4i+3 of
 *                       row r's 128 qs bytes: for i = 8p + c its low
 *                       nibbles are elements 4c..4c+3 of block 2p, its high
 *                       nibbles the same elements of block 2p + 1
 * so one 64-byte load is 16 rows' lanes for vpdpbusd (unsigned nibbles
 * against signed activations, no offset), and a 16-byte load of sc or m is a
 * block's scales for 16 rows.
 *
 * Float order: quant_k.c's, exactly. Per output, lane j of the eight
 * accumulators takes block j of each super-block in order:
 *     acc[j] = fma((float)(sc_j * iq_j), d * dx_j, acc[j])
 *     acc[j] = fma((float)(m_j * ix_j), -(dmin * dx_j), acc[j])
 * with (float)(sc * iq) computed as (float)iq * (float)sc and (float)(m * ix)
 * as (float)m * (float)ix: both products are integers below 2^22 (sc, m <
 * 64, |iq| < 32 * 15 * 128, |ix| <= 32 * 128), so exact, the same floats;
 * -(dmin * dx) as (-dmin) * dx (negation is exact). Then
 * ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)). So the copy gives the row
 * kernels' bits, whatever tile, token count or group an output falls in.
 *
 * AVX-512 kernel: one group at a time x T tokens (8, then 4 / 2 / 1 for the
 * rest), block pair by block pair: one load of qs dwords, its low and high
 * nibbles, 2T vpdpbusd against the tokens' broadcast dwords (2T int32
 * chains in registers); then the epilogue above for 16 rows per (token,
 * block), the 8T float accumulators in an L1 array. ix_j (the block sums of
 * xq, as floats) are prepared once per call and token for every group: k in
 * pieces of KX16_PIECE super-blocks, groups in chunks of KX16_GROUPS
 * carrying their accumulators between pieces when k is longer.
 */
#include "kernels/quant_k.h"

#include "kernels/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* ---- repack ------------------------------------------------------------------ */

void quant_repack_x16_q4_k(const void *src, void *dst, int64_t g0, int64_t g1, int64_t k) {
    const size_t stride = dtype_row_bytes(DTYPE_Q4_K, k);
    const int64_t nsb = k / QUANT_QK_K;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nsb + s) * QUANT_X16_Q4_K_REC;
            for (int r = 0; r < 16; r++) {
                const uint8_t *b = (const uint8_t *)src + (size_t)(g * 16 + r) * stride + (size_t)s * 144;
                uint64_t sc8, m8;
                q4_k_scales_mins(b, &sc8, &m8);
                memcpy(o + 2 * r, b, 2);
                memcpy(o + 32 + 2 * r, b + 2, 2);
                for (int j = 0; j < 8; j++) {
                    o[64 + 16 * j + r] = (uint8_t)(sc8 >> (8 * j));
                    o[192 + 16 * j + r] = (uint8_t)(m8 >> (8 * j));
                }
                for (int i = 0; i < 32; i++) memcpy(o + 320 + 64 * i + 4 * r, b + 16 + 4 * i, 4);
            }
        }
}

/* ---- which processes use it -------------------------------------------------- */

bool quant_k_use_x16(void) {
    static atomic_int cached = -1;
    int use = atomic_load(&cached);
    if (use < 0) {
        const char *env = getenv("VLLM_QUANT_K_X16");
        use = kernels_isa_get() >= KERNELS_ISA_AVX2 && !quant_use_amx() && !(env && !strcmp(env, "0"));
        atomic_store(&cached, use);
    }
    return use == 1;
}

bool quant_x16_wanted(dtype t) {
    if (t == DTYPE_Q8_0 || t == DTYPE_Q4_0) return quant_use_block();
    return t == DTYPE_Q4_K && quant_k_use_x16();
}

/* ---- portable mirror ---------------------------------------------------------- */

/* Element e (< 32) of block j of row r in record o: its nibble. */
static inline int x16_nib(const uint8_t *o, int j, int r, int e) {
    int i = 8 * (j / 2) + e / 4;
    uint8_t byte = o[320 + 64 * i + 4 * r + e % 4];
    return j % 2 ? byte >> 4 : byte & 15;
}

void quant_matmul_act_range_x16_k_portable(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                           float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (type != DTYPE_Q4_K || r0 % 16 || r1 % 16) abort(); /* a caller bug */
    const int64_t nsb = k / QUANT_QK_K;
    for (int64_t g = r0 / 16; g < r1 / 16; g++)
        for (int64_t t = t0; t < t1; t++) {
            float acc[16][8] = {{0}};
            for (int64_t s = 0; s < nsb; s++) {
                const uint8_t *o = (const uint8_t *)w + (size_t)(g * nsb + s) * QUANT_X16_Q4_K_REC;
                for (int j = 0; j < 8; j++) {
                    const uint8_t *xb = (const uint8_t *)xq + t * ldxq + (s * 8 + j) * QUANT_ACT_BLOCK_BYTES;
                    const int8_t *x = (const int8_t *)(xb + 4);
                    float dx;
                    memcpy(&dx, xb, 4);
                    int32_t ix = 0;
                    for (int e = 0; e < 32; e++) ix += x[e];
                    for (int r = 0; r < 16; r++) {
                        float d = f16_to_f32(ld16(o + 2 * r)), dmin = f16_to_f32(ld16(o + 32 + 2 * r));
                        int32_t iq = 0;
                        for (int e = 0; e < 32; e++) iq += x16_nib(o, j, r, e) * x[e];
                        acc[r][j] = fmaf((float)(o[64 + 16 * j + r] * iq), d * dx, acc[r][j]);
                        acc[r][j] = fmaf((float)(o[192 + 16 * j + r] * ix), -(dmin * dx), acc[r][j]);
                    }
                }
            }
            for (int r = 0; r < 16; r++) y[t * ldy + g * 16 + r] = quant_k_reduce(acc[r]);
        }
}

/* ---- AVX-512 VNNI kernel ------------------------------------------------------- */

#if defined(__x86_64__)
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

#ifndef KX16_AHEAD
#define KX16_AHEAD 2 /* records of prefetch distance */
#endif
enum {
    KX16_T = 8,       /* tokens per pass over a group */
    KX16_PIECE = 64,  /* super-blocks per prep piece (k 16384) */
    KX16_GROUPS = 4,  /* groups whose accumulators wait between pieces */
};

/* xsf[i] = (float)(sum of the 32 xq of activation block b0 + i), i < nbk
 * (a multiple of 8): eight blocks at a time, each block's 4-element sums
 * (vpdpbusd by ones) added up by a tree of hadds. */
AVX512 static void x16k_prep(const uint8_t *xr, int64_t b0, int64_t nbk, float *xsf) {
    const __m256i ones = _mm256_set1_epi8(1);
    const uint8_t *xb = xr + b0 * QUANT_ACT_BLOCK_BYTES + 4;
    for (int64_t i = 0; i < nbk; i += 8, xb += 8 * QUANT_ACT_BLOCK_BYTES) {
        __m256i s[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            s[j] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones,
                                       _mm256_loadu_si256((const __m256i *)(xb + j * QUANT_ACT_BLOCK_BYTES)));
        /* per 128-bit half: the half's sums of blocks 0..3 (t0) and 4..7 (t1) */
        __m256i t0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
        __m256i t1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
        __m256i v = _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20), _mm256_permute2x128_si256(t0, t1, 0x31));
        _mm256_storeu_ps(xsf + i, _mm256_cvtepi32_ps(v));
    }
}

static inline int32_t ld32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* One group's records g (nsb of them) x T tokens: acc[8t + j] (16 rows'
 * lanes) += block j's two terms per super-block in order. x: the tokens'
 * xq rows at the piece's first block, ldxq apart; xsf: their block sums,
 * KX16_PIECE * 8 apart. */
AVX512 INLINE void x16k_group(const int T, const uint8_t *g, int64_t nsb, const uint8_t *x, int64_t ldxq,
                              const float (*xsf)[KX16_PIECE * 8], __m512 *acc) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t s = 0; s < nsb; s++, g += QUANT_X16_Q4_K_REC) {
        for (int i = 0; i < QUANT_X16_Q4_K_REC / 64; i++)
            _mm_prefetch((const char *)g + KX16_AHEAD * QUANT_X16_Q4_K_REC + 64 * i, _MM_HINT_T0);
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        const __m512 ndv = _mm512_xor_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32))), sign);
        const uint8_t *xs = x + s * 8 * QUANT_ACT_BLOCK_BYTES;
#pragma GCC unroll 1
        for (int p = 0; p < 4; p++) {
            __m512i il[KX16_T], ih[KX16_T];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) il[t] = ih[t] = _mm512_setzero_si512();
            const uint8_t *xp = xs + 2 * p * QUANT_ACT_BLOCK_BYTES + 4;
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                __m512i q = _mm512_loadu_si512(g + 320 + 64 * (8 * p + c));
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const uint8_t *xb = xp + t * ldxq + 4 * c;
                    il[t] = _mm512_dpbusd_epi32(il[t], lo, _mm512_set1_epi32(ld32(xb)));
                    ih[t] = _mm512_dpbusd_epi32(ih[t], hi, _mm512_set1_epi32(ld32(xb + QUANT_ACT_BLOCK_BYTES)));
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = 2 * p + h;
                const __m512 scf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + 64 + 16 * j))));
                const __m512 mf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + 192 + 16 * j))));
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    float dx;
                    memcpy(&dx, xs + t * ldxq + j * QUANT_ACT_BLOCK_BYTES, 4);
                    const __m512 dxv = _mm512_set1_ps(dx);
                    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(h ? ih[t] : il[t]), scf);
                    __m512 a = _mm512_fmadd_ps(f, _mm512_mul_ps(dv, dxv), acc[8 * t + j]);
                    __m512 mx = _mm512_mul_ps(mf, _mm512_set1_ps(xsf[t][8 * s + j]));
                    acc[8 * t + j] = _mm512_fmadd_ps(mx, _mm512_mul_ps(ndv, dxv), a);
                }
            }
        }
    }
}

/* Groups [g0, g1) of the copy w x T tokens from xq. */
AVX512 INLINE void x16k_range(const int T, const uint8_t *w, int64_t k, const uint8_t *xq, int64_t ldxq, float *y,
                              int64_t ldy, int64_t g0, int64_t g1) {
    _Alignas(64) float xsf[KX16_T][KX16_PIECE * 8];
    __m512 acc_io[KX16_GROUPS][KX16_T * 8];
    const int64_t nsb = k / QUANT_QK_K;
    const bool one = nsb <= KX16_PIECE;
    /* One piece: every group in one pass, the tokens prepared once;
     * otherwise KX16_GROUPS groups at a time, their sums kept in acc_io. */
    const int64_t span = one ? g1 - g0 : KX16_GROUPS;
    for (int64_t gc = g0; gc < g1; gc += span) {
        const int64_t ng = g1 - gc < span ? g1 - gc : span;
        for (int64_t s0 = 0; s0 < nsb; s0 += KX16_PIECE) {
            const int64_t n = nsb - s0 < KX16_PIECE ? nsb - s0 : KX16_PIECE;
            const bool last = s0 + n == nsb;
            for (int t = 0; t < T; t++) x16k_prep(xq + t * ldxq, s0 * 8, n * 8, xsf[t]);
            for (int64_t gi = 0; gi < ng; gi++) {
                __m512 *acc = acc_io[one ? 0 : gi];
                if (s0 == 0)
                    for (int i = 0; i < 8 * T; i++) acc[i] = _mm512_setzero_ps();
                const uint8_t *rec = w + (size_t)((gc + gi) * nsb + s0) * QUANT_X16_Q4_K_REC;
                x16k_group(T, rec, n, xq + s0 * 8 * QUANT_ACT_BLOCK_BYTES, ldxq, xsf, acc);
                if (!last) continue;
                for (int t = 0; t < T; t++) {
                    const __m512 *a = acc + 8 * t;
                    __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                                             _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
                    _mm512_storeu_ps(y + t * ldy + (gc + gi) * 16, v);
                }
            }
        }
    }
}

AVX512 static void x16k_q4_k(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy,
                             int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    const uint8_t *x = (const uint8_t *)xq;
    int64_t t = t0;
    for (; t + 8 <= t1; t += 8) x16k_range(8, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1);
    if (t + 4 <= t1) x16k_range(4, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1), t += 4;
    if (t + 2 <= t1) x16k_range(2, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1), t += 2;
    if (t < t1) x16k_range(1, w, k, x + t * ldxq, ldxq, y + t * ldy, ldy, g0, g1);
}

/* ---- AVX2 kernel ------------------------------------------------------------- */

/* The same records, 8 rows at a time: half h of a group is the 32 bytes at
 * 64i + 32h of each qs line, the 8 bytes at 16j + 8h of sc and m, the 16 at
 * 16h of d and dmin. With no vpdpbusd, vpmaddubsw(nibbles, broadcast xq
 * dword) leaves each row's two pair sums in its two int16 lanes; a block's
 * 8 dwords are added as int16 (16 products of at most 15 * 128 per lane:
 * 30720, exact) and one vpmaddwd by ones gives the row's int32 block sum in
 * its own lane. The float epilogue is the AVX-512 kernel's, on 8 lanes, so
 * the bits are the row kernels'. The dword loop is unrolled by 2, not 8:
 * fully unrolled, GCC kept all 64 products of a block pair (4 tokens) on
 * the stack and added them afterwards, about 20% slower on Zen 3. */
#define AVX2 __attribute__((target("avx2,fma,f16c")))
enum {
    KA_T = 4,       /* tokens per pass over a group */
    KA_STREAMS = 2, /* groups per pass at one token (ka_range's call takes 1 or 2) */
    KA_AHEAD = 4,   /* records of prefetch distance */
};

/* x16k_prep's block sums without vpdpbusd. */
AVX2 static void ka_prep(const uint8_t *xr, int64_t b0, int64_t nbk, float *xsf) {
    const __m256i one8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    const uint8_t *xb = xr + b0 * QUANT_ACT_BLOCK_BYTES + 4;
    for (int64_t i = 0; i < nbk; i += 8, xb += 8 * QUANT_ACT_BLOCK_BYTES) {
        __m256i s[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            s[j] = _mm256_madd_epi16(
                _mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)(xb + j * QUANT_ACT_BLOCK_BYTES))),
                ones);
        __m256i t0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
        __m256i t1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
        __m256i v = _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20), _mm256_permute2x128_si256(t0, t1, 0x31));
        _mm256_storeu_ps(xsf + i, _mm256_cvtepi32_ps(v));
    }
}

AVX2 INLINE __m256i ka_bcast(const uint8_t *p) { return _mm256_set1_epi32(ld32(p)); }

/* NU units (unit u: half (h0 + u) % 2 of the group whose records start at
 * g[u]), nsb super-blocks x T tokens: acc[u][8t + j] (8 rows' lanes) += block j's
 * two terms per super-block in order. x, xsf: as x16k_group. */
AVX2 INLINE void ka_units(const int NU, const int T, const uint8_t *const *g, const int h0, int64_t nsb,
                          const uint8_t *x, int64_t ldxq, const float (*xsf)[KX16_PIECE * 8], __m256 *const *acc) {
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *xs = x + s * 8 * QUANT_ACT_BLOCK_BYTES;
#pragma GCC unroll 8
        for (int u = 0; u < NU; u++) {
            const uint8_t *r = g[u] + s * QUANT_X16_Q4_K_REC;
            const int hu = (h0 + u) % 2;
            const char *ahead = (const char *)r + KA_AHEAD * QUANT_X16_Q4_K_REC;
            if (hu == 0)
                for (int i = 0; i < 5; i++) _mm_prefetch(ahead + 64 * i, _MM_HINT_T0); /* d .. m */
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + 16 * hu)));
            const __m256 ndv =
                _mm256_xor_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + 32 + 16 * hu))), sign);
#pragma GCC unroll 1
            for (int p = 0; p < 4; p++) {
                __m256i il[KA_T], ih[KA_T];
                const uint8_t *xp = xs + 2 * p * QUANT_ACT_BLOCK_BYTES + 4;
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) il[t] = ih[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
                for (int c = 0; c < 8; c++) {
                    if (hu == 0) _mm_prefetch(ahead + 320 + 64 * (8 * p + c), _MM_HINT_T0);
                    __m256i q = _mm256_loadu_si256((const __m256i *)(r + 320 + 64 * (8 * p + c) + 32 * hu));
                    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) {
                        const uint8_t *xb = xp + t * ldxq + 4 * c;
                        __m256i pl = _mm256_maddubs_epi16(lo, ka_bcast(xb));
                        __m256i ph = _mm256_maddubs_epi16(hi, ka_bcast(xb + QUANT_ACT_BLOCK_BYTES));
                        il[t] = _mm256_add_epi16(il[t], pl);
                        ih[t] = _mm256_add_epi16(ih[t], ph);
                    }
                }
#pragma GCC unroll 2
                for (int hh = 0; hh < 2; hh++) {
                    const int j = 2 * p + hh;
                    const __m256 scf = _mm256_cvtepi32_ps(
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 64 + 16 * j + 8 * hu))));
                    const __m256 mf = _mm256_cvtepi32_ps(
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 192 + 16 * j + 8 * hu))));
#pragma GCC unroll 4
                    for (int t = 0; t < T; t++) {
                        float dx;
                        memcpy(&dx, xs + t * ldxq + j * QUANT_ACT_BLOCK_BYTES, 4);
                        const __m256 dxv = _mm256_set1_ps(dx);
                        const __m256i isum = _mm256_madd_epi16(hh ? ih[t] : il[t], ones);
                        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), scf);
                        __m256 a = _mm256_fmadd_ps(f, _mm256_mul_ps(dv, dxv), acc[u][8 * t + j]);
                        __m256 mx = _mm256_mul_ps(mf, _mm256_set1_ps(xsf[t][8 * s + j]));
                        acc[u][8 * t + j] = _mm256_fmadd_ps(mx, _mm256_mul_ps(ndv, dxv), a);
                    }
                }
            }
        }
    }
}

/* Groups [g0, g1) of the copy w x T tokens from xq, as x16k_range. Several
 * tokens: a group's half 0, then its half 1 (from L2: half 0 prefetched the
 * records' whole lines). One token: KA_STREAMS groups' both halves in one
 * pass, so each record is read once, with that many streams in flight. */
AVX2 INLINE void ka_range(const int T, const uint8_t *w, int64_t k, const uint8_t *xq, int64_t ldxq, float *y,
                          int64_t ldy, int64_t g0, int64_t g1) {
    _Alignas(32) float xsf[KA_T][KX16_PIECE * 8];
    __m256 acc_io[KX16_GROUPS][2][KA_T * 8];
    const int64_t nsb = k / QUANT_QK_K;
    const bool one = nsb <= KX16_PIECE;
    const int64_t span = one ? g1 - g0 : KX16_GROUPS;
    const int G = T == 1 ? KA_STREAMS : 1; /* groups per pass */
    for (int64_t gc = g0; gc < g1; gc += span) {
        const int64_t ng = g1 - gc < span ? g1 - gc : span;
        for (int64_t s0 = 0; s0 < nsb; s0 += KX16_PIECE) {
            const int64_t n = nsb - s0 < KX16_PIECE ? nsb - s0 : KX16_PIECE;
            const bool last = s0 + n == nsb;
            const uint8_t *xp = xq + s0 * 8 * QUANT_ACT_BLOCK_BYTES;
            for (int t = 0; t < T; t++) ka_prep(xq + t * ldxq, s0 * 8, n * 8, xsf[t]);
            for (int64_t gi = 0; gi < ng; gi += G) {
                const int m = ng - gi < G ? (int)(ng - gi) : G; /* groups in this pass */
                const uint8_t *gp[2 * KA_STREAMS];
                __m256 *ap[2 * KA_STREAMS];
                for (int u = 0; u < 2 * m; u++) {
                    gp[u] = w + (size_t)((gc + gi + u / 2) * nsb + s0) * QUANT_X16_Q4_K_REC;
                    ap[u] = acc_io[one ? u / 2 : gi + u / 2][u % 2];
                    if (s0 == 0)
                        for (int i = 0; i < 8 * T; i++) ap[u][i] = _mm256_setzero_ps();
                }
                if (T > 1) {
                    ka_units(1, T, gp, 0, n, xp, ldxq, xsf, ap);
                    ka_units(1, T, gp + 1, 1, n, xp, ldxq, xsf, ap + 1);
                } else if (m == 2) ka_units(4, 1, gp, 0, n, xp, ldxq, xsf, ap);
                else ka_units(2, 1, gp, 0, n, xp, ldxq, xsf, ap);
                if (!last) continue;
                for (int u = 0; u < 2 * m; u++)
                    for (int t = 0; t < T; t++) {
                        const __m256 *a = ap[u] + 8 * t;
                        __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                                                 _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
                        _mm256_storeu_ps(y + t * ldy + (gc + gi + u / 2) * 16 + 8 * (u % 2), v);
                    }
            }
        }
    }
}

AVX2 static void ka_q4_k(const void *w, int64_t k, const void *xq, int64_t ldxq, float *y, int64_t ldy, int64_t g0,
                         int64_t g1, int64_t t0, int64_t t1) {
    const uint8_t *x = (const uint8_t *)xq;
    for (int64_t t = t0; t < t1; t += KA_T) {
        const uint8_t *xt = x + t * ldxq;
        float *yt = y + t * ldy;
        switch (t1 - t < KA_T ? t1 - t : KA_T) {
        case 4: ka_range(4, w, k, xt, ldxq, yt, ldy, g0, g1); break;
        case 3: ka_range(3, w, k, xt, ldxq, yt, ldy, g0, g1); break;
        case 2: ka_range(2, w, k, xt, ldxq, yt, ldy, g0, g1); break;
        default: ka_range(1, w, k, xt, ldxq, yt, ldy, g0, g1); break;
        }
    }
}
#endif

void quant_matmul_act_range_x16_k_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                       float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx2() || type != DTYPE_Q4_K || r0 % 16 || r1 % 16) abort(); /* a caller bug */
#if defined(__x86_64__)
    ka_q4_k(w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)t0, (void)t1;
#endif
}

void quant_matmul_act_range_x16_k_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                         float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (!kernels_cpu_has_avx512() || type != DTYPE_Q4_K || r0 % 16 || r1 % 16) abort(); /* a caller bug */
#if defined(__x86_64__)
    x16k_q4_k(w, k, xq, ldxq, y, ldy, r0 / 16, r1 / 16, t0, t1);
#else
    (void)w, (void)k, (void)xq, (void)ldxq, (void)y, (void)ldy, (void)t0, (void)t1;
#endif
}

/* ---- dispatch ------------------------------------------------------------------ */

void quant_matmul_act_range_k_x16(dtype type, const void *w, const void *x16, int64_t k, const void *xq,
                                  int64_t ldxq, float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0,
                                  int64_t t1) {
    const int64_t m0 = (r0 + 15) / 16 * 16, m1 = r1 / 16 * 16;
    /* AVX2 decode: the row kernel streams GGUF rows faster than the copy's
     * one-token pass (docs/bench.md, "Q4_K rows in lanes on AVX2"). */
    const bool rows = t1 - t0 == 1 && kernels_isa_get() < KERNELS_ISA_AVX512;
    if (!x16 || type != DTYPE_Q4_K || m0 >= m1 || t0 >= t1 || rows || !quant_k_use_x16()) {
        quant_matmul_act_range_k(type, w, k, xq, ldxq, y, ldy, r0, r1, t0, t1);
        return;
    }
    if (r0 < m0) quant_matmul_act_range_k(type, w, k, xq, ldxq, y, ldy, r0, m0, t0, t1);
    const void *g = quant_x16_rows(x16, type, k, m0);
    if (kernels_isa_get() >= KERNELS_ISA_AVX512)
        quant_matmul_act_range_x16_k_avx512(type, g, k, xq, ldxq, y + m0, ldy, 0, m1 - m0, t0, t1);
    else quant_matmul_act_range_x16_k_avx2(type, g, k, xq, ldxq, y + m0, ldy, 0, m1 - m0, t0, t1);
    if (m1 < r1) quant_matmul_act_range_k(type, w, k, xq, ldxq, y, ldy, m1, r1, t0, t1);
}
