/*
 * quant.h - ggml's block-quantized weight formats (as stored in GGUF files):
 * dequantize, quantize, and dot products against F32 activations.
 *
 * Layouts (little-endian, blocks back to back along a row; a row's length is a
 * multiple of the block size, which GGUF guarantees for these types):
 *
 *   Q8_0  32 elements, 34 bytes:  f16 d; int8 q[32];          x[i] = d * q[i]
 *   Q4_0  32 elements, 18 bytes:  f16 d; uint8 qs[16];        x[i] = d * (nib[i] - 8)
 *         nib[i] = qs[i] & 15 for i < 16, qs[i - 16] >> 4 for i >= 16
 *   Q4_K 256 elements, 144 bytes: f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]
 *         8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j] packed in
 *         scales[]; x = d*sc[j]*nib - dmin*m[j]; each 32 bytes of qs hold
 *         sub-block 2p in low nibbles and 2p+1 in high nibbles.
 *   Q6_K 256 elements, 210 bytes: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d
 *         16 sub-blocks of 16; x = d * scales[j] * (q6 - 32), q6 = 4 low bits
 *         from ql | 2 high bits from qh (two halves of 128, see quant.c).
 *
 * The rest, llama.cpp's types for rows that are not a multiple of 256 and
 * the other K-quants of the common mixes (nib[i] as Q4_0's; qh a 32-bit
 * little-endian word, its bit i the fifth bit of element i):
 *   Q4_1  32 elements, 20 bytes:  f16 d; f16 m; uint8 qs[16];          x[i] = d * nib[i] + m
 *   Q5_0  32 elements, 22 bytes:  f16 d; uint8 qh[4]; uint8 qs[16];    x[i] = d * (q5[i] - 16)
 *   Q5_1  32 elements, 24 bytes:  f16 d; f16 m; uint8 qh[4]; qs[16];   x[i] = d * q5[i] + m
 *         q5[i] = nib[i] | bit i of qh << 4
 *   IQ4_NL 32 elements, 18 bytes: f16 d; uint8 qs[16];                 x[i] = d * kv[nib[i]]
 *         kv = quant_iq4nl_values (-127 .. 113, non-linear)
 *   Q2_K 256 elements, 84 bytes:  uint8 scales[16]; uint8 qs[64]; f16 d; f16 dmin
 *         16 sub-blocks of 16, scales[j] = 4-bit scale | 4-bit min << 4;
 *         element e = 128h + 32r + l: q = bits 2r..2r+1 of qs[32h + l],
 *         sub-block j = 8h + 2r + l/16, x = d*sc[j]*q - dmin*m[j]
 *   Q3_K 256 elements, 110 bytes: uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d
 *         Q2_K's 2-bit q and sub-blocks, a third bit from bit 4h + r of
 *         hmask[l] (clear: subtract 4), sixteen 6-bit scales s (quant.c's
 *         q3_k_scale), x = d*(s[j] - 32)*(q - 4*(1 - hbit))
 *   Q5_K 256 elements, 176 bytes: f16 d; f16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]
 *         Q4_K's scales, mins and nibbles (qs), the fifth bit of element
 *         32j + l in bit j of qh[l]; x = d*sc[j]*q5 - dmin*m[j]
 * Which integer kernels each takes: Q4_1 / Q5_0 / Q5_1 / IQ4_NL the wide
 * order below, on every path (quant_is_wide); Q2_K / Q3_K / Q5_K the
 * K-quant order of quant_k.c with Q4_K and Q6_K (quant_is_k).
 *
 * Quantizers (F32 -> Q8_0, Q4_0) round exactly as ggml's reference quantizers
 * do (round half away from zero; Q4_0 keeps the sign of the largest-magnitude
 * element in d), so files we write match what llama.cpp's tools would write.
 *
 * Dot products and batch invariance. Every dot product of a weight row with an
 * activation row is reduced in one fixed order, whatever the number of tokens
 * or the row range asked for:
 *     w[i] = d * q[i] (F32, one rounding) per element, as dequantize gives it;
 *     four 8-lane accumulators, acc[c][l] += w[32b + 8c + l] * x[...] (fused
 *     multiply-add) over blocks b in order;
 *     v = (acc0 + acc1) + (acc2 + acc3); s[l] = v[l] + v[l+4] (l < 4);
 *     result = (s0 + s2) + (s1 + s3).
 * The AVX2 kernels and the portable C kernel (fmaf) implement exactly this and
 * agree bit for bit; quant_dot_naive is the plain sequential reference the
 * tests compare against with a tolerance.
 *
 * Integer dot products (Q8_0 / Q4_0 weights, what the runner uses). As ggml
 * does, each token's activation row is first quantized to 8 bits per 32-block
 * (quant_quantize_act_row: a function of that row alone, so batch invariance
 * holds), then each weight block meets it as integers:
 *     isum[l] = sum_{j<4} w[4l+j] * xq[4l+j]         (int32, exact; l < 8)
 *     acc[l]  = fma(dw * dx, (float)isum[l], acc[l])  over blocks in order
 *     result  = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))
 * w[i] is the signed weight (q for Q8_0, nibble - 8 for Q4_0), dw its block
 * scale, dx the activation block's. The AVX2 kernel (maddubs/madd, one
 * int32 lane per l) and the portable one compute exactly this.
 *
 * The AVX-512 kernel (quant_avx512.c, two blocks per zmm) uses the "wide"
 * order instead, the same isum[l] integers but 16 float accumulators:
 *     acc[8*(b&1) + l] = fma(dw * dx, (float)isum_b[l], acc[8*(b&1) + l])
 *         over blocks b in order (a last, odd block feeds lanes 0..7);
 *     v[l] = acc[l] + acc[l+8]; result = the 8-lane reduction above on v.
 * quant_dot_act_wide_portable is that order in C.
 *
 * Q4_1, Q5_0, Q5_1 and IQ4_NL use the wide order in every process and on
 * every path (portable C, quant_wide_avx2.c, quant_avx512.c): w[i] is the
 * integer in x[i] = dw * w[i] (+ m): Q4_1 / Q5_1 the unsigned 4 / 5 bits,
 * Q5_0 q5 - 16, IQ4_NL kv[nib]. Q4_1 / Q5_1 add their minimum's term after
 * each block's, lane by lane:
 *     acc[8*(b&1) + l] = fma(m_b, sx_b[l], acc[8*(b&1) + l]),
 *     sx_b[l] = dx * (float)(sum_{j<4} xq[4l+j])   (one rounding)
 * which is m * dx * sum(xq) = the minimum's share of sum x[i] * x_act[i].
 * Why wide: it is the order AVX-512 computes two blocks per zmm in without
 * a horizontal step (the block order needs the rows-in-lanes x16 copies,
 * which these types do not get), and AVX2 keeps it with two ymm
 * accumulators per output at no cost; so one order serves every level and
 * the process-wide choice of quant_act_order() does not apply to them.
 *
 * The AMX kernel (quant_amx.c, when the CPU has AMX-INT8 and the OS grants
 * it) and, on every AVX2 or AVX-512 process unless VLLM_QUANT_ORDER is wide
 * or narrow, the VNNI (quant_avx512.c) or AVX2 (quant_block_avx2.c)
 * block-order kernels use the "block" order: one accumulator per output,
 *     acc = fma((float)isum_b, dw * dx, acc) over blocks b in order, where
 *     isum_b = the whole block's int32 dot; result = acc.
 * quant_dot_act_block_portable is that order in C; the x16 kernels (weights
 * repacked 16 rows to a record, below) compute it too. A process uses one order
 * throughout (quant_act_order() decides), so batch invariance holds on each.
 *
 * x16 copies are data, not state of this module: the model owns them
 * (model/model.h, tensor.x16: made at load for the types quant_x16_wanted,
 * Q8_0 / Q4_0 when quant_use_block(), Q4_K on AVX-512 without AMX; unmapped
 * by model_free), and whoever calls a matmul passes the weight's copy along
 * with its rows (matmul_args.x16, the x16 argument of
 * quant_matmul_act_range). The kernels keep no table and look nothing up;
 * a weight passed without a copy takes the row kernels, with the same bits.
 */
#ifndef VLLM_KERNELS_QUANT_H
#define VLLM_KERNELS_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"

#define QUANT_QK 32   /* Q8_0 / Q4_0 block */
#define QUANT_QK_K 256 /* Q4_K / Q6_K super-block */

/* dst[0..n) = the values of the n-element row src of type t (any dtype,
 * scalar types included). n must be a multiple of dtype_block_elems(t). */
void quant_dequantize_row(dtype t, const void *src, float *dst, int64_t n);

/* Quantize x[0..n) (n a multiple of 32) into dtype_row_bytes(t, n) bytes at
 * dst, as ggml's quantize_row_*_ref. */
void quant_quantize_row_q8_0(const float *x, void *dst, int64_t n);
void quant_quantize_row_q4_0(const float *x, void *dst, int64_t n);

/* Dot product of one quantized row (type t, n elements) with x[0..n), in the
 * fixed order above. t is any dtype of dtype.h. */
float quant_dot(dtype t, const void *row, const float *x, int64_t n);
/* The same order in portable C (fmaf); the fallback without AVX2. */
float quant_dot_portable(dtype t, const void *row, const float *x, int64_t n);
/* Reference: dequantize, then a sequential sum in double. */
float quant_dot_naive(dtype t, const void *row, const float *x, int64_t n);

/* y = x W^T for a quantized W: for tokens t in [t0, t1) and rows r in [r0, r1)
 *     y[t*ldy + r] = quant_dot(type, W row r, x + t*ldx, k)
 * w: (rows, k) in type, row stride dtype_row_bytes(type, k); x: (tokens, ldx);
 * y: (tokens, ldy). Each weight block is decoded once for a pair of tokens;
 * every output is bit-identical to quant_dot on its own (batch invariant).
 * Single-threaded; callers split [r0, r1) across threads. */
void quant_matmul_range(dtype type, const void *w, int64_t k, const float *x, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* ---- quantized activations ---------------------------------------------- */

/* One activation block: float d; int8 q[32] (d = amax / 127, q =
 * round-half-to-even(x * (127 / amax)), all zero when amax = 0; so |q| <=
 * 127, which the AVX2 kernels' |w| x sign(x, w) relies on). A row of k
 * elements (k a multiple of 32) is k/32 blocks back to back. */
#define QUANT_ACT_BLOCK_BYTES 36
static inline size_t quant_act_row_bytes(int64_t k) { return (size_t)(k / QUANT_QK) * QUANT_ACT_BLOCK_BYTES; }

/* True for the K-quants (their integer dots: quant_k.c, one order of their own). */
static inline bool quant_is_k(dtype t) {
    return t == DTYPE_Q4_K || t == DTYPE_Q6_K || t == DTYPE_Q2_K || t == DTYPE_Q3_K || t == DTYPE_Q5_K;
}
/* True for the 32-element types whose integer dots use the wide order on
 * every path (Q4_1, Q5_0, Q5_1, IQ4_NL; see the top). */
static inline bool quant_is_wide(dtype t) {
    return t == DTYPE_Q4_1 || t == DTYPE_Q5_0 || t == DTYPE_Q5_1 || t == DTYPE_IQ4_NL;
}
/* True for the types whose blocks carry a minimum (x = d * q + m). */
static inline bool quant_has_min(dtype t) { return t == DTYPE_Q4_1 || t == DTYPE_Q5_1; }
/* True for the weight types with integer dot kernels: every quantized type. */
static inline bool quant_has_act_kernel(dtype t) {
    return t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || quant_is_wide(t) || quant_is_k(t);
}

/* IQ4_NL's 16 values (ggml's kvalues_iq4nl). */
extern const int8_t quant_iq4nl_values[16];

/* x[0..k) -> quant_act_row_bytes(k) bytes at dst. */
void quant_quantize_act_row(const float *x, void *dst, int64_t k);
void quant_quantize_act_row_portable(const float *x, void *dst, int64_t k);

/* y = x W^T with integer dot products, W of any quantized type:
 *     y[t*ldy + r] = quant_dot_act(type, W row r, xq + t*ldxq, k)
 * for t in [t0, t1), r in [r0, r1). xq: (tokens, ldxq bytes) rows from
 * quant_quantize_act_row. Every output is bit-identical whatever the ranges.
 * x16: NULL, or W's x16 copy (below) holding at least its rows
 * [0, r1 / 16 * 16), group g = rows [16g, 16g + 16); a block-order process
 * (quant_use_block()) then reads the whole groups inside [r0, r1) from it and
 * the rows around them from w: the same outputs, faster. So does a Q4_K
 * call when quant_k_use_x16(). Other processes and types ignore it. */
void quant_matmul_act_range(dtype type, const void *w, const void *x16, int64_t k, const void *xq, int64_t ldxq,
                            float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
float quant_dot_act(dtype t, const void *row, const void *xq, int64_t k);
/* The same outputs from F32 x: each token's row quantized in pieces on the
 * stack, portable dots (slow; for callers without an activation buffer). */
void quant_matmul_act_f32_range(dtype type, const void *w, int64_t k, const float *x, int64_t ldx, float *y,
                                int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* The narrow, wide and block orders in portable C: the references the
 * kernels are compared with. A type with one order of its own (quant_is_k,
 * quant_is_wide) gets that order from all three. */
float quant_dot_act_portable(dtype t, const void *row, const void *xq, int64_t k);
float quant_dot_act_wide_portable(dtype t, const void *row, const void *xq, int64_t k);
float quant_dot_act_block_portable(dtype t, const void *row, const void *xq, int64_t k);

/* K-quant integer dots (quant_k.c; the order is described there, the same
 * on every path). quant_k_dot_acc adds nsb super-blocks of row w against xq
 * into acc[8]; quant_k_reduce is the final sum. The avx2 entry aborts when
 * the CPU lacks AVX2; the generic act entries above route K types here. */
void quant_k_dot_acc(dtype t, const uint8_t *w, const uint8_t *xq, int64_t nsb, float acc[8]);
float quant_k_reduce(const float acc[8]);
float quant_dot_act_k_portable(dtype t, const void *row, const void *xq, int64_t k);
void quant_matmul_act_range_k_portable(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                       float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_k_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                   int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* The wide-order AVX2 kernel of Q4_1 / Q5_0 / Q5_1 / IQ4_NL (quant_wide_avx2.c),
 * what quant_matmul_act_range_avx2 runs for them. Aborts without AVX2 or
 * for another type. */
void quant_matmul_act_range_wide_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                      int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* The integer kernels' reduction order in this process (Q8_0 / Q4_0). */
typedef enum { QUANT_ORDER_NARROW, QUANT_ORDER_WIDE, QUANT_ORDER_BLOCK } quant_order;
quant_order quant_act_order(void);

/* quant_matmul_act_range on one path, whatever kernels_isa_get() says (for
 * tests and benchmarks). The avx2 / avx512 ones abort() when the CPU lacks the
 * instructions (kernels_cpu_has_avx2 / kernels_cpu_has_avx512 first). The
 * row kernels of Q8_0 / Q4_0's narrow (avx2) and wide (avx512) orders; for
 * the types with one order of their own, each level's kernel of that order. */
void quant_matmul_act_range_portable(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                     float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                 int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                   float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* The AVX-512 VNNI kernel in the block order (what the AMX process uses for
 * batches too small for tiles). */
void quant_matmul_act_range_avx512_block(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq,
                                         float *y, int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* Aborts unless quant_amx_available(). */
void quant_matmul_act_range_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* The x16 layout of a Q8_0 / Q4_0 matrix (rows a multiple of 16), the same
 * size as the GGUF rows (Q4_K's: below): 16-row groups one after the other, each a record
 * per block b in order; a record is the 16 rows' f16 scales (32 bytes), then
 * the quants as dwords (j, r) at 64j + 4r holding bytes 4j..4j+3 of row r's
 * block (Q8_0: int8 q, j < 8; Q4_0: qs bytes, j < 4). A zmm load is then 16
 * rows' lanes for vpdpbusd, and an AMX B tile (rows = k/4, columns = rows).
 * quant_repack_x16 writes groups [g0, g1) of the n-row matrix src into dst.
 * The x16 kernels (block order: the same outputs as the row kernels of an
 * AMX process, bit for bit) take rows [r0, r1) multiples of 16, w the
 * repacked matrix's start; the AMX one aborts unless quant_amx_available(),
 * the avx512 one unless kernels_cpu_has_avx512(). */
void quant_repack_x16(dtype type, const void *src, void *dst, int64_t g0, int64_t g1, int64_t k);
void quant_matmul_act_range_x16_avx512(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                       int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_x16_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                    int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* The same two kernels with AVX2 only (quant_block_avx2.c: the block order
 * of an AVX2 process): the x16 one (r0, r1 multiples of 16, w the copy's
 * start) and one on GGUF rows. Both abort() without AVX2. */
void quant_matmul_act_range_x16_avx2(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                     int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void quant_matmul_act_range_avx2_block(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                       int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
/* Q4_K's x16 layout (quant_k_x16.c has the details): per 16-row group and
 * super-block a record of QUANT_X16_Q4_K_REC bytes, the 16 rows' f16 d and
 * dmin, their 6-bit scales and mins unpacked to bytes (block-major), then
 * the qs bytes as dwords (i, r) at 64i + 4r, as Q4_0's. 148 bytes per row
 * and super-block against the GGUF rows' 144 (+2.8%). quant_repack_x16
 * makes it too; the x16 kernels of Q4_K are quant_k.h's. */
#define QUANT_X16_Q4_K_REC 2368
/* Bytes per row of type's x16 copy (k elements): the GGUF row's, but
 * Q4_K's 148 per super-block. */
static inline size_t quant_x16_row_bytes(dtype type, int64_t k) {
    return type == DTYPE_Q4_K ? (size_t)(k / QUANT_QK_K) * (QUANT_X16_Q4_K_REC / 16) : dtype_row_bytes(type, k);
}
/* True when this process's kernels read an x16 copy of type t's weights
 * (the model makes copies of those, model_make_x16): Q8_0 / Q4_0 when
 * quant_use_block(), Q4_K when quant_k_use_x16() (quant_k.h). */
bool quant_x16_wanted(dtype t);

/* The x16 copy of rows [n0, ...) of a matrix whose whole copy is x16: row
 * n0's group (n0 * quant_x16_row_bytes on); NULL when x16 is NULL or n0 is
 * not a multiple of 16 (no group starts there). For callers that pass a
 * matrix's rows from n0 on. */
static inline const void *quant_x16_rows(const void *x16, dtype type, int64_t k, int64_t n0) {
    if (!x16 || n0 % 16) return NULL;
    return (const uint8_t *)x16 + (size_t)n0 * quant_x16_row_bytes(type, k);
}

/* True when the CPU has AMX-TILE/INT8 (and the AVX-512 level) and the OS
 * granted this process the tile state (asked once, on the first call). */
bool quant_amx_available(void);

/* True when the AVX2+FMA+F16C kernels (or better) are in use: kernels_isa_get()
 * >= KERNELS_ISA_AVX2. */
bool quant_use_avx2(void);
/* True when the integer dots use the AVX-512 kernel and the wide order:
 * kernels_isa_get() >= KERNELS_ISA_AVX512. */
bool quant_use_avx512(void);
/* True when the integer dots use AMX tiles for 8 or more tokens (and the
 * VNNI block-order kernel for fewer): quant_use_avx512(),
 * quant_amx_available() and VLLM_QUANT_AMX is not "0". */
bool quant_use_amx(void);
/* True when Q8_0 / Q4_0 dots use the block order: AMX tiles as above, or
 * without them every token on the VNNI (AVX-512) or AVX2 block-order kernels
 * (on the x16 copies callers pass). On the AVX2 and AVX-512 levels unless
 * VLLM_QUANT_ORDER is "wide" or "narrow", which keeps the row kernel of the
 * level (wide order on AVX-512, narrow on AVX2) and no x16 copies (without
 * AMX only): the model makes copies only when this is true. */
bool quant_use_block(void);


#if defined(__x86_64__)
#include <immintrin.h>
/* The 32 signed weights of a Q8_0 / Q4_0 block at b in one register, element
 * i in byte i (Q4_0: nibble - 8); the AVX2 kernels' shared unpack. */
static inline __attribute__((always_inline, target("avx2"))) __m256i quant_weights_avx2(dtype t, const uint8_t *b) {
    if (t == DTYPE_Q8_0) return _mm256_loadu_si256((const __m256i *)(b + 2));
    __m128i qs = _mm_loadu_si128((const __m128i *)(b + 2));
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
}
#endif

#endif
