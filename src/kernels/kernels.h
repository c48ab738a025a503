/*
 * kernels.h - the numeric kernels of the forward pass: matmul, RMSNorm, RoPE,
 * SwiGLU, paged attention. F32 activations and accumulation; weights F32, BF16
 * or F16, converted on the fly (no dequantized copies).
 *
 * Each fast kernel has a *_naive reference beside it (tests compare the two).
 * Kernels are single-threaded over a range the caller gives them; the runner
 * splits ops across its thread pool.
 *
 * Batch invariance: every output element is reduced in an order that depends
 * only on its own inputs. In particular matmul_range computes each y[t][n]
 * with the same 8-lane (16-lane on AVX-512) accumulation over k and the same
 * final horizontal sum whatever the tile it falls in, whatever (n0, n1, t0,
 * t1) the caller asks for. So splitting work differently, or running a token alone or in a batch,
 * never changes a single bit.
 *
 * Instruction set: chosen once per process (kernels_isa): the best the CPU
 * has of AVX-512 (F, BW, VL, DQ, VNNI), AVX2+FMA+F16C, portable C (the code
 * is compiled with target attributes, so a portable build still has them).
 * VLLM_KERNELS=portable|avx2|avx512 in the environment caps the choice (a
 * level the CPU lacks falls back to the best one below it). Paths may round
 * differently (FMA vs separate multiply and add, 16 vs 8 lanes), so one
 * process uses one path throughout; kernels without a path for the chosen
 * level use the best one below it (levels are ordered: test with >=).
 */
#ifndef VLLM_KERNELS_KERNELS_H
#define VLLM_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "kernels/kv_dtype.h"

typedef enum kernels_isa {
    KERNELS_ISA_PORTABLE = 0,
    KERNELS_ISA_AVX2,        /* AVX2 + FMA + F16C */
    KERNELS_ISA_AVX512,      /* the above + AVX-512 F/BW/VL/DQ/VNNI */
} kernels_isa;

/* The instruction set this process uses (decided on the first call). */
kernels_isa kernels_isa_get(void);
const char *kernels_isa_name(kernels_isa isa);
/* True if the CPU can run the AVX2 kernels (whatever kernels_isa_get says). */
bool kernels_cpu_has_avx2(void);
/* True if the CPU can run the AVX-512 kernels (AVX2 ones too). */
bool kernels_cpu_has_avx512(void);

/* Element i of a weight vector in its own dtype, as F32. */
static inline float kernels_weight_at(const void *w, dtype t, int64_t i) {
    switch (t) {
    case DTYPE_BF16: return bf16_to_f32(((const uint16_t *)w)[i]);
    case DTYPE_F16: return f16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

/* ---- matmul ------------------------------------------------------------ */

/* y = x W^T (+ bias) (+ y): one dot product per (token, weight row), HF
 * Linear layout. For t in [t0, t1), n in [n0, n1):
 *     y[t*ldy + n] = (accumulate ? y[t*ldy + n] : 0) + (dot(w[n,:], x[t,:]) + bias[n])
 */
typedef struct matmul_args {
    float *y;                /* (tokens, ldy) */
    int64_t ldy;
    const float *x;          /* (tokens, ldx), ldx >= k */
    int64_t ldx;
    const void *w;           /* (n, k) row-major, dtype wtype */
    dtype wtype;
    /* Optional, Q8_0/Q4_0/Q4_K weights only: w's x16 copy (kernels/quant.h; the
     * model's, tensor.x16), group g = rows [16g, 16g + 16) of w, or NULL.
     * Borrowed. A caller that passes w from row n0 on passes
     * quant_x16_rows(x16, wtype, k, n0) with it. */
    const void *x16;
    const void *bias;        /* (n) dtype btype, or NULL */
    dtype btype;
    int64_t n, k;
    bool accumulate;
    /* Optional, Q8_0/Q4_0 weights only: x already quantized by
     * quant_quantize_act_row, (tokens, ldxq bytes). NULL: matmul_range_quant
     * quantizes the rows it needs itself (the same bytes, so the same result).
     * The AMX and BF16 paths take their own prepared rows here (below). */
    const void *xq;
    int64_t ldxq;
} matmul_args;

typedef void (*matmul_range_fn)(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* The kernel for weights of dtype wtype (a per-dtype table filled once: the
 * ISA's scalar-weight kernel for F32/BF16/F16, matmul_range_quant for the
 * ggml block types). Callers may pick it once outside their loops. */
matmul_range_fn matmul_kernel(dtype wtype);
/* matmul_kernel(a->wtype)(a, ...). */
void matmul_range(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* Block-quantized W (any ggml type of dtype.h; k a multiple of the block):
 * fixed-order dot products plus bias/accumulate -- integer dots against
 * 8-bit activations (quant_matmul_act_range: a->xq, or the token's row
 * quantized on the fly when a->xq is NULL). */
void matmul_range_quant(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* The implementations behind it, exposed for tests. avx2 requires
 * kernels_cpu_has_avx2(), avx512 kernels_cpu_has_avx512(). */
void matmul_range_portable(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
void matmul_range_avx2(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
void matmul_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* Reference: a plain sequential dot product per output. */
void matmul_range_naive(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);

/* AMX-BF16 path for BF16 / F16 weights (matmul_amx.c): FP32 activations
 * split exactly into three BF16 parts (F16 weights into two), exact
 * products, one FP32 accumulator per output over k in 32-element steps.
 * matmul_kernel gives it the dtypes matmul_amx_takes(), for every token
 * count (one reduction order per process). Optional input: xq =
 * activations packed by matmul_amx_pack_act, ldxq >= matmul_amx_act_bytes(k)
 * bytes per token, in blocks of 16 tokens aligned to token 0 of xq (so a
 * caller may offset xq by a multiple of 16 tokens only); without it the
 * kernel packs the tokens it needs itself (the same bits, slower). */
void matmul_range_amx(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* Bytes per token of packed activations for rows of k elements. */
size_t matmul_amx_act_bytes(int64_t k);
/* Rows t0..t1 of x (k elements, stride ldx) into the packed blocks at xp
 * (ldxp >= matmul_amx_act_bytes(k) bytes per token; 16 * ldxp per block).
 * Writes only tokens t0..t1's bytes, so threads may pack neighbouring
 * ranges of one block. Aborts unless matmul_amx_available(). */
void matmul_amx_pack_act(const float *x, int64_t ldx, int64_t k, int64_t t0, int64_t t1, void *xp, int64_t ldxp);
/* True when the CPU has AMX-BF16 (and the AVX-512 level) and the OS granted
 * the tile state. */
bool matmul_amx_available(void);
/* False when VLLM_AMX=0 is in the environment: every AMX path (this one and
 * the quantized one of quant_amx.c) stays off. */
bool kernels_amx_allowed(void);
/* True when the AMX-BF16 kernel is in use in this process:
 * kernels_isa_get() >= KERNELS_ISA_AVX512, kernels_amx_allowed() and
 * matmul_amx_available(). */
bool matmul_use_amx(void);
/* True when weights of dtype wtype go to matmul_range_amx: BF16 whenever
 * matmul_use_amx(); F16 only with VLLM_AMX=f16 as well (its on-the-fly
 * weight split makes decode ~2x slower than the AVX-512 FMA kernel, see
 * matmul_amx.c). */
bool matmul_amx_takes(dtype wtype);

/* BF16 compute path (matmul_bf16.c): y = bf16(x) W^T (+ bias) (+ y) for
 * BF16 weights, each activation rounded to BF16 (nearest even), products
 * exact, FP32 accumulation in vdpbf16ps's order (one 16-lane accumulator
 * per output over 32-element steps, then matmul.c's AVX-512 tree); the
 * portable path emulates that instruction bit for bit. Batch invariant.
 * matmul_bf16_range takes the AVX512-BF16 kernel when kernels_isa_get() is
 * AVX-512 and the CPU has it (matmul_bf16_cpu_has_dot), else the AVX2 one
 * (the same bits from FMAs, where inputs are in the range that makes them
 * equal; the portable emulation for the rest) when it is AVX2 or above, else
 * the portable one. */
void matmul_bf16_range(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* Optional input of the BF16 path: a->xq = the activations already
 * prepared by matmul_bf16_round_act, ldxq >= matmul_bf16_act_bytes(k) bytes
 * per token (a multiple of 4) (the same bits the kernel would make itself,
 * so the same result: the runner prepares each stage's input once instead
 * of once per work item). The format is the kernel's that matmul_bf16_range
 * takes on this CPU: BF16 rows for the portable and AVX512-BF16 kernels,
 * widened panels for the AVX2 one. */
size_t matmul_bf16_act_bytes(int64_t k);
void matmul_bf16_round_act(const float *x, int64_t k, void *xb);
/* The portable and AVX512-BF16 kernels' a->xq: one row of k floats rounded
 * to BF16 (nearest even, as the kernels round) into xb, zero-padded to k
 * rounded up to 32 elements. */
void matmul_bf16_round_row(const float *x, int64_t k, uint16_t *xb);
/* The AVX2 kernel's a->xq: the row rounded to BF16 and widened to FP32 in
 * the kernel's order, with a range flag (matmul_bf16.c), in
 * matmul_bf16_act_bytes_avx2(k) bytes. Requires kernels_cpu_has_avx2(). */
size_t matmul_bf16_act_bytes_avx2(int64_t k);
void matmul_bf16_prep_act_avx2(const float *x, int64_t k, void *xp);
void matmul_bf16_range_portable(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* Requires kernels_cpu_has_avx2(). */
void matmul_bf16_range_avx2(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
/* Requires matmul_bf16_cpu_has_dot(). */
void matmul_bf16_range_avx512(const matmul_args *a, int64_t n0, int64_t n1, int64_t t0, int64_t t1);
bool matmul_bf16_cpu_has_dot(void);

/* ---- RMSNorm (norm.c), RoPE (rope.c), SwiGLU / GeGLU (act.c) ------------ */

/* out[i] = (w[i] + w_offset) * (x[i] / sqrt(mean(x^2) + eps)), i < n: HF
 * LlamaRMSNorm in F32 with w_offset 0, Gemma3RMSNorm ((1 + w), the sum in
 * F32) with w_offset 1. out may alias x. The mean is summed in a fixed
 * 8-lane order. */
void norm_rms(float *out, const float *x, const void *w, dtype wtype, int64_t n, float eps, float w_offset);
void norm_rms_naive(float *out, const float *x, const void *w, dtype wtype, int64_t n, float eps, float w_offset);

/* HF rotate_half RoPE on n_heads heads of x (n_heads, head_dim) in place:
 * element i pairs with i + head_dim/2, angle_i = pos * inv_freq[i].
 * cos/sin: (head_dim/2) for this token's position. */
void rope_apply(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin);
/* The same rotation on adjacent pairs: x[2i], x[2i+1] turn by angle_i (GPT-J
 * / llama.cpp order, for the q/k rows of llama GGUF files; see gguf.h). */
void rope_apply_interleaved(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin);
/* cos/sin (half) of pos * inv_freq[i], the angle rounded to F32 as HF does. */
void rope_cos_sin(float *cos, float *sin, const float *inv_freq, int32_t half, int32_t pos);

/* g[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u, i < n. */
void act_swiglu(float *g, const float *u, int64_t n);
/* The implementations behind it, for tests (same CPU requirements as matmul's). */
void act_swiglu_portable(float *g, const float *u, int64_t n);
void act_swiglu_avx2(float *g, const float *u, int64_t n);
void act_swiglu_avx512(float *g, const float *u, int64_t n);

/* g[i] = gelu_tanh(g[i]) * u[i], i < n: Gemma's GeGLU with torch's
 * gelu(approximate="tanh") = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * The portable path is that formula in F32 (tanhf); the vector paths use the
 * identity 0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y)) with vexp.h's exp. */
void act_geglu(float *g, const float *u, int64_t n);
void act_geglu_portable(float *g, const float *u, int64_t n);
void act_geglu_avx2(float *g, const float *u, int64_t n);
void act_geglu_avx512(float *g, const float *u, int64_t n);
/* Reference: the formula in double. */
void act_geglu_naive(float *g, const float *u, int64_t n);

/* ---- attention (attention.c) -------------------------------------------- */

/* Paged attention over one layer's K/V pool (see attention.c for the layout:
 * K (num_blocks, kv_heads, head_dim, block_size), V (num_blocks, kv_heads,
 * block_size, head_dim), elements of cache_dtype). */
typedef struct attention_args {
    const void *k_cache, *v_cache;
    int32_t kv_heads, head_dim, block_size;
    float scale;             /* 1 / sqrt(head_dim), or Gemma's query_pre_attn_scalar^-1/2 */
    int32_t window;          /* sliding window: attend to the last `window` positions only
                              * (HF: kv > q - window); 0 = the whole context */
    kv_dtype cache_dtype;    /* element type of the pool (kernels/kv_dtype.h); 0 = F32 */
    float k_scale, v_scale;  /* FP8 only: stored = x / scale (vLLM's per-tensor k_scale,
                              * v_scale); 0 means 1. Ignored for the other types */
} attention_args;

/* Floats of scratch attention_paged_tile needs for ntok tokens (at most
 * ATTENTION_MAX_TILE count) and a group of query heads: block scores, then
 * per token its running max and sum and one partition's state. */
static inline int64_t attention_tile_scratch_floats(int32_t ntok, int32_t group, int32_t block_size,
                                                    int32_t head_dim) {
    return (int64_t)group * ((block_size + 15) & ~15) + (int64_t)ntok * group * (2 + head_dim + 2);
}
/* ... and attention_paged (and attention_paged_partition): one token's. */
static inline int64_t attention_scratch_floats(int32_t group, int32_t block_size, int32_t head_dim) {
    return attention_tile_scratch_floats(1, group, block_size, head_dim);
}

/* Split-K. The context of a token is scanned in partitions of
 * attention_partition_positions(a) positions (ATTENTION_PARTITION rounded
 * down to whole blocks), aligned to absolute positions: partition k holds
 * positions [k P, (k + 1) P) of those the token attends to. Each partition
 * is an online softmax from a fresh state; the states are merged in
 * partition order. attention_paged does exactly that in one call;
 * attention_paged_partition computes one partition's state, so threads can
 * share one long sequence, and attention_merge_partitions merges them with
 * the same instructions in the same order: the same bits however the work
 * was split, and (the partitions being a function of the position alone)
 * whatever the batch. One partition (n_ctx <= P) is the plain scan. */
enum { ATTENTION_PARTITION = 512, ATTENTION_MAX_GROUP = 64, ATTENTION_MAX_TILE = 16 };
int32_t attention_partition_positions(const attention_args *a);
int32_t attention_num_partitions(const attention_args *a, int32_t n_ctx);
/* Floats of one partition's state: the unnormalized output
 * (group, head_dim), then the running max (group) and sum (group). */
static inline int64_t attention_state_floats(int32_t group, int32_t head_dim) {
    return (int64_t)group * (head_dim + 2);
}
/* state = partition `part` (0 .. attention_num_partitions - 1) of the token
 * attention_paged describes; scratch as attention_paged's. */
void attention_paged_partition(const attention_args *a, float *state, const float *q, int32_t group,
                               int32_t kv_head, const int32_t *block_table, int32_t n_ctx, int32_t part,
                               float *scratch);
/* out (group, head_dim) = the normalized merge of nparts consecutive states
 * (attention_state_floats apart), in order. group <= ATTENTION_MAX_GROUP. */
void attention_merge_partitions(const attention_args *a, float *out, const float *states, int32_t nparts,
                                int32_t group);

/* Writes one token's K and V, (kv_heads, head_dim) each, into slot
 * (block * block_size + offset) of k_cache / v_cache (the pool a describes),
 * converted once to a->kv_dtype (divided by a->k_scale / v_scale first when
 * FP8; kernels/kv_dtype.h says how each type rounds). */
void attention_store_kv(const attention_args *a, void *k_cache, void *v_cache, int64_t slot, const float *k,
                        const float *v);

/* Causal attention of one token's query heads that share one KV head:
 *   q, out:  (group, head_dim)  query heads kv_head*group .. +group-1
 *   block_table: physical block of logical block j = position / block_size
 *   n_ctx:   attend to positions 0 .. n_ctx-1 (the token's own position + 1),
 *            or with a window only n_ctx - window .. n_ctx-1: the blocks
 *            before the window are never read (their table entries may be
 *            anything, e.g. -1 once freed)
 *   scratch: attention_scratch_floats(group, block_size, head_dim) floats
 * Scans the context block by block in position order with an online softmax
 * (running max and sum), the same sequence of operations for a token whether
 * it is decoded alone or prefilled in a batch. */
void attention_paged(const attention_args *a, float *out, const float *q, int32_t group,
                     int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch);
/* attention_paged for ntok tokens of one sequence at once: token i's query
 * heads at q + i * stride, its output at out + i * stride, its context
 * positions 0 .. positions[i] (n_ctx = positions[i] + 1; the window as
 * attention_paged's). The tokens take each block of K/V in turn, up to
 * ATTENTION_MAX_TILE of them per pass, so a block comes from memory once for
 * all of them (the flash-attention tile: the win of a long prefill, where
 * every token of a chunk reads the same context); each token gets the bits
 * attention_paged gives it alone. scratch: attention_tile_scratch_floats(
 * min(ntok, ATTENTION_MAX_TILE), ...). */
void attention_paged_tile(const attention_args *a, float *out, const float *q, int64_t stride, int32_t group,
                          int32_t kv_head, const int32_t *block_table, const int32_t *positions, int32_t ntok,
                          float *scratch);
/* attention_paged for ntok tokens of one sequence at once: token i's query
 * heads at q + i * stride, its output at out + i * stride, its context
 * positions 0 .. positions[i] (n_ctx = positions[i] + 1; the window as
 * attention_paged's). The tokens take each block of K/V in turn, up to
 * ATTENTION_MAX_TILE of them per pass, so a block comes from memory once for
 * all of them (the flash-attention tile: the win of a long prefill, where
 * every token of a chunk reads the same context); each token gets the bits
 * attention_paged gives it alone. scratch: attention_tile_scratch_floats(
 * min(ntok, ATTENTION_MAX_TILE), ...). */
void attention_paged_tile(const attention_args *a, float *out, const float *q, int64_t stride, int32_t group,
                          int32_t kv_head, const int32_t *block_table, const int32_t *positions, int32_t ntok,
                          float *scratch);
/* The implementations behind it, for tests (avx2 needs kernels_cpu_has_avx2(),
 * avx512 kernels_cpu_has_avx512(); the two give identical bits). Each reads
 * every kv_dtype, converting to F32 as it loads (exact), so with scales 1 a
 * pool of another type gives the bits the same path gives on an F32 pool
 * holding the same values. */
void attention_paged_avx512(const attention_args *a, float *out, const float *q, int32_t group,
                            int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch);
void attention_paged_portable(const attention_args *a, float *out, const float *q, int32_t group,
                              int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch);
void attention_paged_avx2(const attention_args *a, float *out, const float *q, int32_t group,
                          int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch);

/* Reference: softmax(q k^T * scale) v over contiguous k, v (n_ctx, head_dim)
 * for one query head, two passes in double. head_dim <= 512. */
#define ATTENTION_NAIVE_MAX_HEAD_DIM 512
void attention_naive(float *out, const float *q, const float *k, const float *v, int32_t n_ctx,
                     int32_t head_dim, float scale);

#endif
