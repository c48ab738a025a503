/*
 * attention.c - causal attention of one token over its paged K/V.
 *
 * KV pool layout (one layer; K and V are separate arrays of num_blocks blocks):
 *     K: (num_blocks, kv_heads, head_dim, block_size)   -- transposed in a block
 *     V: (num_blocks, kv_heads, block_size, head_dim)
 * Position p of a sequence lives in physical block block_table[p / block_size]
 * at offset p % block_size (slot = block * block_size + offset). K is stored
 * transposed so that the scores of a block are a sum over i of
 * q[i] * K[i][0..block_size): a vector of 8 positions per FMA with no
 * horizontal sums. V rows are contiguous so p * V[j] is an FMA over head_dim.
 *
 * Sliding window (attention_args.window, Gemma's local layers): a token at
 * position p attends to positions p - window + 1 .. p only. The scan starts
 * at the block holding the first of them, with that block's K and V
 * pointers moved past the positions before it, so those are never read
 * (not masked: their K/V may belong to a freed block) and every later step
 * is the full-context algorithm on fewer positions.
 *
 * Online softmax, block by block in position order: a block's scores
 * s_j = (q . k_j) * scale, the running max m rises to the block's max (the
 * running sum l and output rescaled by exp(m_old - m_new)), then each position
 * adds e_j = exp(s_j - m) to l and e_j * v_j to the output, in position order;
 * at the end the output is divided by l. Each score is a sequential sum over i,
 * and blocks are aligned to positions, so the sequence of floating-point
 * operations for a token depends only on its position and its sequence's K/V
 * -- never on what else is in the batch or how the prompt was chunked. The
 * query heads that share a KV head (GQA) are processed together so each K/V
 * block is loaded once.
 *
 * Partitions (split-K): the context is scanned in partitions of 512
 * positions (ATTENTION_PARTITION, whole blocks, aligned to absolute
 * positions, so a function of the token's position alone), each an online
 * softmax from a fresh state (max -inf, sum 0, output 0); partition k's
 * state (o_k, m_k, l_k) is merged into the running one in partition order:
 * m = max(m, m_k), l = l e^(m_old - m) + l_k e^(m_k - m), o likewise, by
 * one non-inlined function (merge_state) whoever calls it. attention_paged
 * runs the partitions one after the other; the runner can instead compute
 * them on different threads (attention_paged_partition) and merge them
 * afterwards (attention_merge_partitions): the same operations in the same
 * order, so the same bits for any thread count and any batch. A context of
 * at most 512 positions is one partition: the plain scan, as before.
 *
 * Tiles (attention_paged_tile): the tokens of one sequence in a step (a
 * prefill chunk) all read the same context. Scanned one after the other,
 * each streams the whole K/V of its KV head from memory: at 16k positions
 * 4 MiB in F16 per head, which no private cache holds, so a 32k prefill
 * ran its attention at a fifth of the FMA peak. A tile of up to
 * ATTENTION_MAX_TILE tokens takes each block in turn (partition by
 * partition, block by block, token by token): the block comes from memory
 * for the first token and from L1 for the others. Every step is one
 * token's own block step (block_fn) and each token still sees its blocks,
 * partition starts, merges and final division in its own order, so a token
 * gets the same bits in any tile as alone (attention_paged is the tile of
 * one).
 *
 * Three implementations of the same algorithm: AVX2 (8 positions per vector,
 * a polynomial exp), AVX-512 (16 positions, two query heads' outputs per V
 * row load; every float operation the same as AVX2's, so the same bits) and
 * portable C (libm expf); one process uses one of them.
 *
 * KV cache dtype (attention_args.cache_dtype, --kv-cache-dtype): the pool
 * holds F32, BF16, F16 or FP8 (E4M3, E5M2) elements in the layout above;
 * a store converts each element once (kv_dtype_store), and every load
 * converts to F32 in registers as part of the dot product or the V
 * accumulation (kernels/kv_dtype_x86.h; kv_dtype_load in the portable
 * path and the scalar tails). The conversions are exact, so each path does
 * on a 16-bit or FP8 pool the float operations it does on an F32 pool
 * holding the same values: batch invariance and the AVX2 = AVX-512 bits
 * hold for every type. Each path is one always-inline body instantiated
 * per type (the switch is outside every loop). FP8 scales are folded:
 * k_scale into the score scale, v_scale into the final division, so the
 * loops never multiply by them. The V accumulation loads E4M3 values
 * divided by 2^8 and multiplies the softmax weight by 2^8 instead: exact,
 * the same FMA results (kv_dtype_x86.h), one multiplication per position
 * instead of one per loaded vector.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kv_dtype.h"

/* Element offsets of (block, kv head) in the K and V arrays (same for both). */
static inline int64_t block_base(const attention_args *a, int64_t block, int32_t kv_head) {
    return (block * a->kv_heads + kv_head) * (int64_t)a->block_size * a->head_dim;
}

/* First position a token with n_ctx positions of context attends to: the
 * last a->window of them with a sliding window, else 0. */
static inline int32_t window_start(const attention_args *a, int32_t n_ctx) {
    return a->window > 0 && n_ctx > a->window ? n_ctx - a->window : 0;
}

/* FP8 dequantization scales (1 for the other types and when unset). */
static inline float k_scale_of(const attention_args *a) {
    return kv_dtype_is_fp8(a->cache_dtype) && a->k_scale != 0 ? a->k_scale : 1.0f;
}
static inline float v_scale_of(const attention_args *a) {
    return kv_dtype_is_fp8(a->cache_dtype) && a->v_scale != 0 ? a->v_scale : 1.0f;
}

/* The score scale with k_scale folded in: s_j = (q . k8_j) * scale * k_scale
 * (exactly a->scale without FP8 scales). */
static inline float score_scale(const attention_args *a) {
    float ks = k_scale_of(a);
    return ks == 1.0f ? a->scale : a->scale * ks;
}

/* Generates the switch over cache types around impl(T, args...), T a
 * constant in each case so each instance is specialized. */
#define KV_DISPATCH(t, impl, ...)                                               \
    switch (t) {                                                                \
    case KV_DTYPE_BF16: impl(KV_DTYPE_BF16, __VA_ARGS__); break;                \
    case KV_DTYPE_F16: impl(KV_DTYPE_F16, __VA_ARGS__); break;                  \
    case KV_DTYPE_FP8_E4M3: impl(KV_DTYPE_FP8_E4M3, __VA_ARGS__); break;        \
    case KV_DTYPE_FP8_E5M2: impl(KV_DTYPE_FP8_E5M2, __VA_ARGS__); break;        \
    default: impl(KV_DTYPE_F32, __VA_ARGS__); break;                            \
    }

/* The online-softmax steps every implementation shares (scalar, so the same
 * bits in each): the state of `group` heads at the start (running max -inf,
 * sum 0, output 0); one head's max rising to bmax (its sum and output scaled
 * by exp(m_old - bmax)); the output divided by the sum at the end. */
static inline void softmax_begin(float *out, float *m, float *l, int32_t group, int32_t hd) {
    for (int32_t g = 0; g < group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < hd; i++) out[(int64_t)g * hd + i] = 0.0f;
    }
}

static inline void softmax_raise(float *og, float *m, float *l, float bmax, int32_t hd) {
    if (bmax > *m) {
        float alpha = *m == -INFINITY ? 0.0f : expf(*m - bmax);
        *l *= alpha;
        for (int32_t i = 0; i < hd; i++) og[i] *= alpha;
        *m = bmax;
    }
}

/* vs: v_scale (1 exactly unless FP8 scales are set, so 1 / l as before). */
static inline void softmax_end(float *out, const float *l, int32_t group, int32_t hd, float vs) {
    for (int32_t g = 0; g < group; g++) {
        float inv = vs / l[g];
        for (int32_t i = 0; i < hd; i++) out[(int64_t)g * hd + i] *= inv;
    }
}

/* l[g] += s[g][0] + ... in position order (one float addition after the
 * other, as `for j: l[g] += s[g][j]`), for up to 8 heads at a time with the
 * heads' chains interleaved: each head's sum is a chain of dependent
 * additions, and one head after the other left the adder waiting on
 * latency (a fifth of the prefill attention time at 4k). Same operations,
 * same order per head, so the same bits. s: head g's weights at
 * s + g * stride. */
#define SUM_ROWS_FN static inline __attribute__((always_inline))
SUM_ROWS_FN void sum_rows_n(const int G, float *l, const float *s, int32_t stride, int32_t cnt) {
    float acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) acc[g] = l[g];
    for (int32_t j = 0; j < cnt; j++)
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) acc[g] += s[(int64_t)g * stride + j];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) l[g] = acc[g];
}

static void sum_rows(float *l, const float *s, int32_t stride, int32_t group, int32_t cnt) {
    for (int32_t g0 = 0; g0 < group; g0 += 8) {
        float *lg = l + g0;
        const float *sg = s + (int64_t)g0 * stride;
        switch (group - g0 < 8 ? group - g0 : 8) {
        case 1: sum_rows_n(1, lg, sg, stride, cnt); break;
        case 2: sum_rows_n(2, lg, sg, stride, cnt); break;
        case 3: sum_rows_n(3, lg, sg, stride, cnt); break;
        case 4: sum_rows_n(4, lg, sg, stride, cnt); break;
        case 5: sum_rows_n(5, lg, sg, stride, cnt); break;
        case 6: sum_rows_n(6, lg, sg, stride, cnt); break;
        case 7: sum_rows_n(7, lg, sg, stride, cnt); break;
        default: sum_rows_n(8, lg, sg, stride, cnt); break;
        }
    }
}

void attention_store_kv(const attention_args *a, void *k_cache, void *v_cache, int64_t slot, const float *k,
                        const float *v) {
    int32_t bs = a->block_size, hd = a->head_dim;
    int64_t block = slot / bs, off = slot % bs;
    const kv_dtype t = a->cache_dtype;
    const float ks = k_scale_of(a), vs = v_scale_of(a);
    for (int32_t h = 0; h < a->kv_heads; h++) {
        int64_t base = block_base(a, block, h);
        const float *kh = k + (int64_t)h * hd, *vh = v + (int64_t)h * hd;
        if (t == KV_DTYPE_F32) {
            float *kc = k_cache, *vc = v_cache;
            for (int32_t i = 0; i < hd; i++) kc[base + (int64_t)i * bs + off] = kh[i];
            memcpy(vc + base + off * hd, vh, sizeof(float) * (size_t)hd);
            continue;
        }
        for (int32_t i = 0; i < hd; i++) kv_dtype_store(k_cache, t, base + (int64_t)i * bs + off, kh[i] / ks);
        for (int32_t i = 0; i < hd; i++) kv_dtype_store(v_cache, t, base + off * hd + i, vh[i] / vs);
    }
}

/* ---- partitions (split-K) ------------------------------------------------ */

/* One block of the scan, from an ISA's always-inline body: the scores of
 * `group` query heads against cnt positions (kt: K^T row 0 at the first of
 * them, vb: its V row), the running max m and sum l raised, the weighted V
 * rows added to the unnormalized output out. scratch holds the block's
 * scores and weights, written before they are read: a step depends on
 * nothing but its arguments and the state (out, m, l) it updates. */
typedef void block_fn(const attention_args *a, float *out, float *m, float *l, const float *q, int32_t group,
                      const uint8_t *kt, const uint8_t *vb, int32_t cnt, float *scratch);

/* The step for block b (physical block `block`) of a scan over positions
 * [p0, p1): from p0 in the first block, to p1 in the last. */
static inline void scan_block(block_fn *fn, const attention_args *a, float *out, float *m, float *l, const float *q,
                              int32_t group, int32_t kv_head, int64_t block, int32_t b, int32_t p0, int32_t p1,
                              float *scratch) {
    const int32_t bs = a->block_size, hd = a->head_dim;
    const size_t es = kv_dtype_size(a->cache_dtype);
    int32_t lo = b == p0 / bs ? p0 % bs : 0;
    int32_t cnt = (p1 - b * bs < bs ? p1 - b * bs : bs) - lo;
    int64_t base = block_base(a, block, kv_head);
    fn(a, out, m, l, q, group, (const uint8_t *)a->k_cache + (size_t)(base + lo) * es,
       (const uint8_t *)a->v_cache + (size_t)(base + (int64_t)lo * hd) * es, cnt, scratch);
}

/* One partition of the scan: the unnormalized output of `group` heads over
 * positions [p0, p1) into out, with its running max m and sum l, from a
 * fresh state. */
static void scan_partition(block_fn *fn, const attention_args *a, float *out, float *m, float *l, const float *q,
                           int32_t group, int32_t kv_head, const int32_t *block_table, int32_t p0, int32_t p1,
                           float *scratch) {
    softmax_begin(out, m, l, group, a->head_dim);
    for (int32_t b = p0 / a->block_size; (int64_t)b * a->block_size < p1; b++)
        scan_block(fn, a, out, m, l, q, group, kv_head, block_table[b], b, p0, p1, scratch);
}

int32_t attention_partition_positions(const attention_args *a) {
    int32_t bs = a->block_size > 0 ? a->block_size : 1;
    return bs >= ATTENTION_PARTITION ? bs : ATTENTION_PARTITION / bs * bs;
}

/* Partition k (absolute, positions [k P, (k + 1) P)) clipped to the
 * token's attended range [start, n_ctx). */
static void partition_range(const attention_args *a, int32_t n_ctx, int32_t part, int32_t *p0, int32_t *p1) {
    int32_t P = attention_partition_positions(a), start = window_start(a, n_ctx);
    int64_t lo = ((int64_t)start / P + part) * P, hi = lo + P;
    *p0 = lo > start ? (int32_t)lo : start;
    *p1 = hi < n_ctx ? (int32_t)hi : n_ctx;
}

int32_t attention_num_partitions(const attention_args *a, int32_t n_ctx) {
    if (n_ctx <= 0) return 0;
    int32_t P = attention_partition_positions(a);
    return (n_ctx - 1) / P - window_start(a, n_ctx) / P + 1;
}

/* (o, m, l) = the merge of itself (partitions 0 .. k-1) and partition k's
 * (po, pm, pl): both rescaled to the larger max. Not inlined, so every
 * path and every caller (the sequential scan, the runner's merge stage)
 * runs these very instructions. */
static __attribute__((noinline)) void merge_state(float *o, float *m, float *l, const float *po, const float *pm,
                                                  const float *pl, int32_t group, int32_t hd) {
    for (int32_t g = 0; g < group; g++) {
        float mx = m[g] > pm[g] ? m[g] : pm[g];
        if (mx == -INFINITY) continue;
        float x = expf(m[g] - mx), y = expf(pm[g] - mx);
        l[g] = l[g] * x + pl[g] * y;
        float *og = o + (int64_t)g * hd;
        const float *pg = po + (int64_t)g * hd;
        for (int32_t i = 0; i < hd; i++) og[i] = og[i] * x + pg[i] * y;
        m[g] = mx;
    }
}

/* The whole attention of ntok tokens of one sequence (token i: query and
 * output at q and out + i * stride, context n_ctx[i]): partition by
 * partition in position order, each scanned from a fresh state and merged
 * into the first. The tokens go through each block of the KV pool one after
 * the other, so a block is read from memory once for all of them and from
 * L1 for the rest (the flash-attention tile); each token's own sequence of
 * steps, merges and final division is the one it gets alone (ntok 1): the
 * same bits whatever the tile. scratch: the block scores (group x bsv),
 * then per token its running max and sum (2 group) and one partition's
 * state (attention_state_floats). */
static void tile_driver(block_fn *fn, const attention_args *a, float *out, const float *q, int64_t stride,
                        int32_t group, int32_t kv_head, const int32_t *block_table, const int32_t *n_ctx,
                        int32_t ntok, float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size, bsv = (bs + 15) & ~15, P = attention_partition_positions(a);
    const int64_t per = 2 * group + attention_state_floats(group, hd);
    int32_t first[ATTENTION_MAX_TILE], last[ATTENTION_MAX_TILE], p0[ATTENTION_MAX_TILE], p1[ATTENTION_MAX_TILE];
    int32_t kmin = INT32_MAX, kmax = -1;
#define TOK_M(i) (scratch + (int64_t)group * bsv + (i) * per)
#define TOK_L(i) (TOK_M(i) + group)
#define TOK_PO(i) (TOK_L(i) + group)
#define TOK_PM(i) (TOK_PO(i) + (int64_t)group * hd)
#define TOK_PL(i) (TOK_PM(i) + group)
    for (int32_t i = 0; i < ntok; i++) {
        softmax_begin(out + i * stride, TOK_M(i), TOK_L(i), group, hd);
        first[i] = window_start(a, n_ctx[i]) / P, last[i] = n_ctx[i] > 0 ? (n_ctx[i] - 1) / P : first[i] - 1;
        if (first[i] <= last[i]) kmin = first[i] < kmin ? first[i] : kmin, kmax = last[i] > kmax ? last[i] : kmax;
    }
    for (int32_t k = kmin; k <= kmax; k++) {
        int32_t b0 = INT32_MAX, end = 0;
        for (int32_t i = 0; i < ntok; i++) {
            if (k < first[i] || k > last[i]) continue;
            partition_range(a, n_ctx[i], k - first[i], &p0[i], &p1[i]);
            if (k == first[i]) softmax_begin(out + i * stride, TOK_M(i), TOK_L(i), group, hd);
            else softmax_begin(TOK_PO(i), TOK_PM(i), TOK_PL(i), group, hd);
            b0 = p0[i] / bs < b0 ? p0[i] / bs : b0, end = p1[i] > end ? p1[i] : end;
        }
        for (int32_t b = b0; (int64_t)b * bs < end; b++)
            for (int32_t i = 0; i < ntok; i++) {
                if (k < first[i] || k > last[i] || b < p0[i] / bs || (int64_t)b * bs >= p1[i]) continue;
                if (k == first[i])
                    scan_block(fn, a, out + i * stride, TOK_M(i), TOK_L(i), q + i * stride, group, kv_head,
                               block_table[b], b, p0[i], p1[i], scratch);
                else
                    scan_block(fn, a, TOK_PO(i), TOK_PM(i), TOK_PL(i), q + i * stride, group, kv_head,
                               block_table[b], b, p0[i], p1[i], scratch);
            }
        for (int32_t i = 0; i < ntok; i++)
            if (k > first[i] && k <= last[i])
                merge_state(out + i * stride, TOK_M(i), TOK_L(i), TOK_PO(i), TOK_PM(i), TOK_PL(i), group, hd);
    }
    for (int32_t i = 0; i < ntok; i++) softmax_end(out + i * stride, TOK_L(i), group, hd, v_scale_of(a));
#undef TOK_M
#undef TOK_L
#undef TOK_PO
#undef TOK_PM
#undef TOK_PL
}

/* One token: the tile of one. */
static void paged_driver(block_fn *fn, const attention_args *a, float *out, const float *q, int32_t group,
                         int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch) {
    tile_driver(fn, a, out, q, 0, group, kv_head, block_table, &n_ctx, 1, scratch);
}

static block_fn *block_for_isa(void);

void attention_paged_partition(const attention_args *a, float *state, const float *q, int32_t group,
                               int32_t kv_head, const int32_t *block_table, int32_t n_ctx, int32_t part,
                               float *scratch) {
    const int32_t hd = a->head_dim;
    int32_t p0, p1;
    partition_range(a, n_ctx, part, &p0, &p1);
    float *m = state + (int64_t)group * hd;
    scan_partition(block_for_isa(), a, state, m, m + group, q, group, kv_head, block_table, p0, p1, scratch);
}

void attention_merge_partitions(const attention_args *a, float *out, const float *states, int32_t nparts,
                                int32_t group) {
    const int32_t hd = a->head_dim;
    const int64_t sf = attention_state_floats(group, hd);
    float m[ATTENTION_MAX_GROUP], l[ATTENTION_MAX_GROUP];
    memcpy(out, states, sizeof(float) * (size_t)group * (size_t)hd);
    memcpy(m, states + (int64_t)group * hd, sizeof(float) * (size_t)group);
    memcpy(l, states + (int64_t)group * hd + group, sizeof(float) * (size_t)group);
    for (int32_t k = 1; k < nparts; k++) {
        const float *s = states + k * sf;
        merge_state(out, m, l, s, s + (int64_t)group * hd, s + (int64_t)group * hd + group, group, hd);
    }
    softmax_end(out, l, group, hd, v_scale_of(a));
}

/* ---- portable -------------------------------------------------------------- */

/* One block of the scan (block_fn), head by head, in C. */
static inline __attribute__((always_inline)) void
portable_impl(const kv_dtype T, const attention_args *a, float *out, float *m, float *l, const float *q, int32_t group,
              const uint8_t *kt, const uint8_t *vb, int32_t cnt, float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    const size_t es = kv_dtype_size(T);
    const float scale = score_scale(a);
    for (int32_t g = 0; g < group; g++) {
        const float *qg = q + (int64_t)g * hd;
        float *og = out + (int64_t)g * hd, *s = scratch + (int64_t)g * bs;
        for (int32_t j = 0; j < cnt; j++) s[j] = 0.0f;
        for (int32_t i = 0; i < hd; i++)
            for (int32_t j = 0; j < cnt; j++) s[j] += qg[i] * kv_dtype_load(kt, T, (int64_t)i * bs + j);
        float bmax = -INFINITY;
        for (int32_t j = 0; j < cnt; j++) {
            s[j] *= scale;
            if (s[j] > bmax) bmax = s[j];
        }
        softmax_raise(og, &m[g], &l[g], bmax, hd);
        for (int32_t j = 0; j < cnt; j++) {
            float e = expf(s[j] - m[g]);
            const uint8_t *vj = vb + (size_t)j * (size_t)hd * es;
            l[g] += e;
            for (int32_t i = 0; i < hd; i++) og[i] += e * kv_dtype_load(vj, T, i);
        }
    }
}

static void block_portable(const attention_args *a, float *out, float *m, float *l, const float *q, int32_t group,
                           const uint8_t *kt, const uint8_t *vb, int32_t cnt, float *scratch) {
    KV_DISPATCH(a->cache_dtype, portable_impl, a, out, m, l, q, group, kt, vb, cnt, scratch)
}

void attention_paged_portable(const attention_args *a, float *out, const float *q, int32_t group,
                              int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch) {
    paged_driver(block_portable, a, out, q, group, kv_head, block_table, n_ctx, scratch);
}

/* ---- AVX2 -------------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/kv_dtype_x86.h"
#include "kernels/vexp.h"

#define AVX2_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX2_ENTRY __attribute__((target("avx2,fma,f16c")))

/* Lanes 0..cnt-1 set (cnt may exceed 8). */
AVX2_FN __m256i lane_mask(int32_t cnt) {
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), idx);
}

AVX2_FN float hmax8(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* Scores of G query heads (G <= 4) for block positions j0 .. j0+15:
 * s[g][j] = scale * sum_i q[g][i] * K^T[i][j], i in order; lanes at or past
 * cnt are -inf (their K never read: masked loads, or zero padding for the
 * 16- and 8-bit types). 2G independent FMA chains hide the FMA latency; each
 * score is still one chain over i in order. kt: K^T row 0 at position 0 of
 * the block's scan, elements of type T. */
AVX2_FN void scores_avx2(const kv_dtype T, const int G, const float *q, int32_t hd, const uint8_t *kt, int32_t bs,
                         int32_t j0, int32_t cnt, __m256 scale, float *s, int32_t s_stride) {
    const __m256i m0 = lane_mask(cnt - j0), m1 = lane_mask(cnt - j0 - 8);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const size_t es = kv_dtype_size(T);
    const bool full = cnt - j0 >= 16;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (int32_t i = 0; i < hd; i++) {
        const uint8_t *row = kt + ((int64_t)i * bs + j0) * es;
        __m256 k0, k1;
        if (T == KV_DTYPE_F32) {
            k0 = _mm256_maskload_ps((const float *)row, m0), k1 = _mm256_maskload_ps((const float *)row + 8, m1);
        } else if (full) {
            kv_load16_avx2(T, row, &k0, &k1);
        } else {
            k0 = kv_load8_partial_avx2(T, row, cnt - j0), k1 = kv_load8_partial_avx2(T, row + 8 * es, cnt - j0 - 8);
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m256 qi = _mm256_broadcast_ss(q + (int64_t)g * hd + i);
            acc[g][0] = _mm256_fmadd_ps(qi, k0, acc[g][0]);
            acc[g][1] = _mm256_fmadd_ps(qi, k1, acc[g][1]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        _mm256_storeu_ps(s + (int64_t)g * s_stride + j0,
                         _mm256_blendv_ps(ninf, _mm256_mul_ps(acc[g][0], scale), _mm256_castsi256_ps(m0)));
        _mm256_storeu_ps(s + (int64_t)g * s_stride + j0 + 8,
                         _mm256_blendv_ps(ninf, _mm256_mul_ps(acc[g][1], scale), _mm256_castsi256_ps(m1)));
    }
}

/* o[i] = fma(e_j, v_j[i], o[i]) for j = 0 .. cnt-1 in order, i < 8 NV: the
 * NV output vectors stay in registers across the block's positions. v: V
 * row 0 at output element 0, rows hd elements of type T apart. */
AVX2_FN void accum_v_avx2(const kv_dtype T, const int NV, float *o, const float *e, const uint8_t *v, int32_t hd,
                          int32_t cnt) {
    const size_t es = kv_dtype_size(T);
    __m256 acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++) acc[k] = _mm256_loadu_ps(o + 8 * k);
    for (int32_t j = 0; j < cnt; j++) {
        const __m256 ej = _mm256_set1_ps(e[j] * kv_raw_factor(T)); /* raw loads: kv_dtype_x86.h */
        const uint8_t *vj = v + (size_t)j * (size_t)hd * es;
#pragma GCC unroll 4
        for (int k = 0; k + 1 < NV; k += 2) {
            __m256 v0, v1;
            kv_load16_raw_avx2(T, vj + 8 * k * es, &v0, &v1);
            acc[k] = _mm256_fmadd_ps(ej, v0, acc[k]);
            acc[k + 1] = _mm256_fmadd_ps(ej, v1, acc[k + 1]);
        }
        if (NV & 1) acc[NV - 1] = _mm256_fmadd_ps(ej, kv_load8_raw_avx2(T, vj + 8 * (NV - 1) * es), acc[NV - 1]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++) _mm256_storeu_ps(o + 8 * k, acc[k]);
}

/* accum_v_avx2 for G query heads at once (each V row loaded and converted
 * once for all of them), G NV <= 8 vectors of accumulators: o_h[i] =
 * fma(e_h[j], v_j[i], o_h[i]) for j in order, i < 8 NV; head h's output at
 * o + h * hd, its weights at e + h * e_stride. */
AVX2_FN void accum_vg_avx2(const kv_dtype T, const int G, const int NV, float *o, const float *e, int32_t e_stride,
                           const uint8_t *v, int32_t hd, int32_t cnt) {
    const size_t es = kv_dtype_size(T);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++) acc[h][k] = _mm256_loadu_ps(o + (int64_t)h * hd + 8 * k);
    for (int32_t j = 0; j < cnt; j++) {
        const uint8_t *vj = v + (size_t)j * (size_t)hd * es;
        __m256 vv[4];
#pragma GCC unroll 2
        for (int k = 0; k + 1 < NV; k += 2) kv_load16_raw_avx2(T, vj + 8 * k * es, &vv[k], &vv[k + 1]);
        if (NV & 1) vv[NV - 1] = kv_load8_raw_avx2(T, vj + 8 * (NV - 1) * es);
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            const __m256 x = _mm256_set1_ps(e[(int64_t)h * e_stride + j] * kv_raw_factor(T));
#pragma GCC unroll 4
            for (int k = 0; k < NV; k++) acc[h][k] = _mm256_fmadd_ps(x, vv[k], acc[h][k]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++) _mm256_storeu_ps(o + (int64_t)h * hd + 8 * k, acc[h][k]);
}

/* Output elements [i0, hd) of one head by scalar FMAs, position order. */
AVX2_FN void accum_v_scalar(const kv_dtype T, float *o, const float *e, const uint8_t *v, int32_t hd, int32_t cnt,
                            int32_t i0) {
    for (int32_t i = i0; i < hd; i++)
        for (int32_t j = 0; j < cnt; j++)
            o[i] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(e[j]), _mm_set_ss(kv_dtype_load(v, T, (int64_t)j * hd + i)),
                                              _mm_set_ss(o[i])));
}

/* One head's whole output row (hd elements) from a block: up to 8 vectors
 * of accumulators at a time, then the scalar tail. */
AVX2_FN void accum_head_avx2(const kv_dtype T, float *o, const float *e, const uint8_t *vb, int32_t hd, int32_t cnt) {
    const size_t es = kv_dtype_size(T);
    const int32_t hd8 = hd & ~7;
    for (int32_t i0 = 0; i0 < hd8; i0 += 64) {
        const uint8_t *vi = vb + (size_t)i0 * es;
        switch ((hd8 - i0) / 8 < 8 ? (hd8 - i0) / 8 : 8) {
        case 1: accum_v_avx2(T, 1, o + i0, e, vi, hd, cnt); break;
        case 2: accum_v_avx2(T, 2, o + i0, e, vi, hd, cnt); break;
        case 3: accum_v_avx2(T, 3, o + i0, e, vi, hd, cnt); break;
        case 4: accum_v_avx2(T, 4, o + i0, e, vi, hd, cnt); break;
        case 5: accum_v_avx2(T, 5, o + i0, e, vi, hd, cnt); break;
        case 6: accum_v_avx2(T, 6, o + i0, e, vi, hd, cnt); break;
        case 7: accum_v_avx2(T, 7, o + i0, e, vi, hd, cnt); break;
        default: accum_v_avx2(T, 8, o + i0, e, vi, hd, cnt); break;
        }
    }
    accum_v_scalar(T, o, e, vb, hd, cnt, hd8);
}

/* One block of the scan (block_fn) on a pool of type T: the group's scores
 * 4 heads at a time, each head's max, rescale and weights, the sums, then
 * the weighted V rows. */
AVX2_FN void avx2_impl(const kv_dtype T, const attention_args *a, float *out, float *m, float *l, const float *q,
                       int32_t group, const uint8_t *kt, const uint8_t *vb, int32_t cnt, float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size, hd8 = hd & ~7;
    const size_t es = kv_dtype_size(T);
    const int32_t bsv = (bs + 15) & ~15;          /* scores padded to whole pairs of vectors */
    const __m256 scale = _mm256_set1_ps(score_scale(a)), ninf = _mm256_set1_ps(-INFINITY);
    for (int32_t g0 = 0; g0 < group; g0 += 4)
        for (int32_t j0 = 0; j0 < cnt; j0 += 16) {
            const float *qg = q + (int64_t)g0 * hd;
            float *sg = scratch + (int64_t)g0 * bsv;
            switch (group - g0 < 4 ? group - g0 : 4) {
            case 1: scores_avx2(T, 1, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 2: scores_avx2(T, 2, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 3: scores_avx2(T, 3, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            default: scores_avx2(T, 4, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            }
        }
    for (int32_t g = 0; g < group; g++) {
        float *og = out + (int64_t)g * hd, *s = scratch + (int64_t)g * bsv;
        __m256 bmaxv = ninf;
        for (int32_t j = 0; j < cnt; j += 8) bmaxv = _mm256_max_ps(bmaxv, _mm256_loadu_ps(s + j));
        float bmax = hmax8(bmaxv);
        softmax_raise(og, &m[g], &l[g], bmax, hd);
        /* weights e_j = exp(s_j - m) */
        const __m256 mv = _mm256_set1_ps(m[g]);
        for (int32_t j = 0; j < cnt; j += 8)
            _mm256_storeu_ps(s + j, vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
    }
    sum_rows(l, scratch, bsv, group, cnt); /* l in position order, heads interleaved */
    /* outputs: on an F32 pool (loads are cheap) one head at a time with up
     * to 8 vectors of accumulators; on the converted types up to 4 heads
     * per V row load and conversion (a lone head as on F32) */
    const int32_t gstep = T == KV_DTYPE_F32 ? 1 : 4;
    for (int32_t g0 = 0; g0 < group; g0 += gstep) {
        const int G = group - g0 < gstep ? group - g0 : gstep, nv_max = G == 2 ? 4 : 2;
        float *og = out + (int64_t)g0 * hd;
        const float *eg = scratch + (int64_t)g0 * bsv;
        if (G == 1) {
            accum_head_avx2(T, og, eg, vb, hd, cnt);
            continue;
        }
        for (int32_t i0 = 0; i0 < hd8;) {
            const int nv = (hd8 - i0) / 8 < nv_max ? (hd8 - i0) / 8 : nv_max;
            const uint8_t *vi = vb + (size_t)i0 * es;
#define VG(g, n) case (g - 1) * 4 + n - 1: accum_vg_avx2(T, g, n, og + i0, eg, bsv, vi, hd, cnt); break
            switch ((G - 1) * 4 + nv - 1) {
                VG(2, 1); VG(2, 2); VG(2, 3); VG(2, 4);
                VG(3, 1); VG(3, 2);
                VG(4, 1); VG(4, 2);
            }
#undef VG
            i0 += 8 * nv;
        }
        for (int h = 0; h < G; h++) accum_v_scalar(T, og + (int64_t)h * hd, eg + (int64_t)h * bsv, vb, hd, cnt, hd8);
    }
}

static AVX2_ENTRY void block_avx2(const attention_args *a, float *out, float *m, float *l, const float *q,
                                  int32_t group, const uint8_t *kt, const uint8_t *vb, int32_t cnt, float *scratch) {
    KV_DISPATCH(a->cache_dtype, avx2_impl, a, out, m, l, q, group, kt, vb, cnt, scratch)
}

void attention_paged_avx2(const attention_args *a, float *out, const float *q, int32_t group, int32_t kv_head,
                          const int32_t *block_table, int32_t n_ctx, float *scratch) {
    paged_driver(block_avx2, a, out, q, group, kv_head, block_table, n_ctx, scratch);
}

/* ---- AVX-512 --------------------------------------------------------------- */

#define AVX512_FN static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AVX512_ENTRY __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* scores_avx2 on 16 positions per vector for G <= 8 query heads: each score is
 * the same FMA chain over i, so the same bits. */
AVX512_FN void scores_avx512(const kv_dtype T, const int G, const float *q, int32_t hd, const uint8_t *kt, int32_t bs,
                             int32_t j0, int32_t cnt, __m512 scale, float *s, int32_t s_stride) {
    const __mmask16 m = cnt - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cnt - j0)) - 1);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const size_t es = kv_dtype_size(T);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
    for (int32_t i = 0; i < hd; i++) {
        __m512 k = kv_load16_mask_avx512(T, kt + ((int64_t)i * bs + j0) * es, m);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[(int64_t)g * hd + i]), k, acc[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
        _mm512_storeu_ps(s + (int64_t)g * s_stride + j0, _mm512_mask_blend_ps(m, ninf, _mm512_mul_ps(acc[g], scale)));
}

/* accum_v_avx2 for G <= 4 query heads at once, 16 lanes (each V row loaded
 * and converted once for all of them; G NV independent FMA chains):
 * o_h[i] = fma(e_h[j], v_j[i], o_h[i]) for j in order, i < 16 NV; head h's
 * output at o + h * hd, its weights at e + h * e_stride. */
AVX512_FN void accum_vg_avx512(const kv_dtype T, const int G, const int NV, float *o, const float *e,
                               int32_t e_stride, const uint8_t *v, int32_t hd, int32_t cnt) {
    const size_t es = kv_dtype_size(T);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++) acc[h][k] = _mm512_loadu_ps(o + (int64_t)h * hd + 16 * k);
    for (int32_t j = 0; j < cnt; j++) {
        __m512 x[4];
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) x[h] = _mm512_set1_ps(e[(int64_t)h * e_stride + j] * kv_raw_factor(T));
        const uint8_t *vj = v + (size_t)j * (size_t)hd * es;
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++) {
            __m512 vv = kv_load16_raw_avx512(T, vj + 16 * k * es);
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h][k] = _mm512_fmadd_ps(x[h], vv, acc[h][k]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++) _mm512_storeu_ps(o + (int64_t)h * hd + 16 * k, acc[h][k]);
}

/* accum_vg_avx512 with G and NV as constants (4 x 4 instances). */
AVX512_FN void accum_vg_dispatch_avx512(const kv_dtype T, int G, int NV, float *o, const float *e, int32_t e_stride,
                                        const uint8_t *v, int32_t hd, int32_t cnt) {
#define VG(g, nv) case (g - 1) * 4 + nv - 1: accum_vg_avx512(T, g, nv, o, e, e_stride, v, hd, cnt); break
    switch ((G - 1) * 4 + NV - 1) {
        VG(1, 1); VG(1, 2); VG(1, 3); VG(1, 4);
        VG(2, 1); VG(2, 2); VG(2, 3); VG(2, 4);
        VG(3, 1); VG(3, 2); VG(3, 3); VG(3, 4);
        VG(4, 1); VG(4, 2); VG(4, 3); VG(4, 4);
    }
#undef VG
}

/* Output elements [i0, hd) of one head, the part the 16-lane loop leaves:
 * one 8-lane step, then scalar FMAs (the AVX2 path's own tail). */
AVX512_FN void accum_v_tail_avx512(const kv_dtype T, float *o, const float *e, const uint8_t *v, int32_t hd,
                                   int32_t cnt, int32_t i0) {
    if (hd - i0 >= 8) {
        accum_v_avx2(T, 1, o + i0, e, v + (size_t)i0 * kv_dtype_size(T), hd, cnt);
        i0 += 8;
    }
    accum_v_scalar(T, o, e, v, hd, cnt, i0);
}

/* avx2_impl with 16-lane vectors: the same operations on every score,
 * weight and output element in the same order (vexp_avx512 is vexp_avx2 on
 * 16 lanes), so the same bits; one process uses either. */
AVX512_FN void avx512_impl(const kv_dtype T, const attention_args *a, float *out, float *m, float *l, const float *q,
                           int32_t group, const uint8_t *kt, const uint8_t *vb, int32_t cnt, float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size, hd16 = hd & ~15;
    const size_t es = kv_dtype_size(T);
    const int32_t bsv = (bs + 15) & ~15;
    const __m512 scale = _mm512_set1_ps(score_scale(a));
    for (int32_t g0 = 0; g0 < group; g0 += 8)
        for (int32_t j0 = 0; j0 < cnt; j0 += 16) {
            const float *qg = q + (int64_t)g0 * hd;
            float *sg = scratch + (int64_t)g0 * bsv;
            switch (group - g0 < 8 ? group - g0 : 8) {
            case 1: scores_avx512(T, 1, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 2: scores_avx512(T, 2, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 3: scores_avx512(T, 3, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 4: scores_avx512(T, 4, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 5: scores_avx512(T, 5, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 6: scores_avx512(T, 6, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            case 7: scores_avx512(T, 7, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            default: scores_avx512(T, 8, qg, hd, kt, bs, j0, cnt, scale, sg, bsv); break;
            }
        }
    /* per head: the running max, rescale and weights e_j; then the sums l */
    for (int32_t g = 0; g < group; g++) {
        float *og = out + (int64_t)g * hd, *s = scratch + (int64_t)g * bsv;
        __m512 bmaxv = _mm512_set1_ps(-INFINITY);
        for (int32_t j = 0; j < cnt; j += 16) bmaxv = _mm512_max_ps(bmaxv, _mm512_loadu_ps(s + j));
        float bmax = _mm512_reduce_max_ps(bmaxv);
        softmax_raise(og, &m[g], &l[g], bmax, hd);
        const __m512 mv = _mm512_set1_ps(m[g]);
        for (int32_t j = 0; j < cnt; j += 16)
            _mm512_storeu_ps(s + j, vexp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv)));
    }
    sum_rows(l, scratch, bsv, group, cnt); /* l in position order, heads interleaved */
    /* outputs: heads two at a time on an F32 pool, up to four per V row
     * load and conversion on the others; a lone head with 8-lane vectors
     * (twice the independent FMA chains) */
    const int32_t gstep = T == KV_DTYPE_F32 ? 2 : 4;
    for (int32_t g0 = 0; g0 < group; g0 += gstep) {
        const int G = group - g0 < gstep ? group - g0 : gstep;
        float *og = out + (int64_t)g0 * hd;
        const float *eg = scratch + (int64_t)g0 * bsv;
        for (int32_t i0 = 0; i0 < hd16; i0 += 64) {
            int nv = (hd16 - i0) / 16 < 4 ? (hd16 - i0) / 16 : 4;
            const uint8_t *vi = vb + (size_t)i0 * es;
            if (G > 1) {
                accum_vg_dispatch_avx512(T, G, nv, og + i0, eg, bsv, vi, hd, cnt);
                continue;
            }
            switch (nv) {
            case 1: accum_v_avx2(T, 2, og + i0, eg, vi, hd, cnt); break;
            case 2: accum_v_avx2(T, 4, og + i0, eg, vi, hd, cnt); break;
            case 3: accum_v_avx2(T, 6, og + i0, eg, vi, hd, cnt); break;
            default: accum_v_avx2(T, 8, og + i0, eg, vi, hd, cnt); break;
            }
        }
        for (int h = 0; h < G; h++) accum_v_tail_avx512(T, og + (int64_t)h * hd, eg + (int64_t)h * bsv, vb, hd, cnt, hd16);
    }
}

static AVX512_ENTRY void block_avx512(const attention_args *a, float *out, float *m, float *l, const float *q,
                                      int32_t group, const uint8_t *kt, const uint8_t *vb, int32_t cnt,
                                      float *scratch) {
    KV_DISPATCH(a->cache_dtype, avx512_impl, a, out, m, l, q, group, kt, vb, cnt, scratch)
}

void attention_paged_avx512(const attention_args *a, float *out, const float *q, int32_t group, int32_t kv_head,
                          const int32_t *block_table, int32_t n_ctx, float *scratch) {
    paged_driver(block_avx512, a, out, q, group, kv_head, block_table, n_ctx, scratch);
}
#endif

static block_fn *block_for_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    kernels_isa isa = kernels_isa_get();
    if (isa >= KERNELS_ISA_AVX512) return block_avx512;
    if (isa >= KERNELS_ISA_AVX2) return block_avx2;
#endif
    return block_portable;
}

void attention_paged_tile(const attention_args *a, float *out, const float *q, int64_t stride, int32_t group,
                          int32_t kv_head, const int32_t *block_table, const int32_t *positions, int32_t ntok,
                          float *scratch) {
    int32_t n_ctx[ATTENTION_MAX_TILE];
    for (int32_t i0 = 0; i0 < ntok; i0 += ATTENTION_MAX_TILE) {
        int32_t n = ntok - i0 < ATTENTION_MAX_TILE ? ntok - i0 : ATTENTION_MAX_TILE;
        for (int32_t i = 0; i < n; i++) n_ctx[i] = positions[i0 + i] + 1;
        tile_driver(block_for_isa(), a, out + i0 * stride, q + i0 * stride, stride, group, kv_head, block_table,
                    n_ctx, n, scratch);
    }
}

void attention_paged(const attention_args *a, float *out, const float *q, int32_t group, int32_t kv_head,
                     const int32_t *block_table, int32_t n_ctx, float *scratch) {
    kernels_isa isa = kernels_isa_get();
    if (isa >= KERNELS_ISA_AVX512)
        attention_paged_avx512(a, out, q, group, kv_head, block_table, n_ctx, scratch);
    else if (isa >= KERNELS_ISA_AVX2)
        attention_paged_avx2(a, out, q, group, kv_head, block_table, n_ctx, scratch);
    else
        attention_paged_portable(a, out, q, group, kv_head, block_table, n_ctx, scratch);
}

#if !defined(__x86_64__) && !defined(__i386__)
void attention_paged_avx2(const attention_args *a, float *out, const float *q, int32_t group, int32_t kv_head,
                          const int32_t *block_table, int32_t n_ctx, float *scratch) {
    attention_paged_portable(a, out, q, group, kv_head, block_table, n_ctx, scratch);
}
void attention_paged_avx512(const attention_args *a, float *out, const float *q, int32_t group, int32_t kv_head,
                            const int32_t *block_table, int32_t n_ctx, float *scratch) {
    attention_paged_portable(a, out, q, group, kv_head, block_table, n_ctx, scratch);
}
#endif

void attention_naive(float *out, const float *q, const float *k, const float *v, int32_t n_ctx,
                     int32_t head_dim, float scale) {
    double o[ATTENTION_NAIVE_MAX_HEAD_DIM] = {0}, mx = -INFINITY, sum = 0;
    if (head_dim > ATTENTION_NAIVE_MAX_HEAD_DIM) head_dim = ATTENTION_NAIVE_MAX_HEAD_DIM;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t j = 0; j < n_ctx; j++) {
            const float *kj = k + (int64_t)j * head_dim, *vj = v + (int64_t)j * head_dim;
            double s = 0;
            for (int32_t i = 0; i < head_dim; i++) s += (double)q[i] * kj[i];
            s *= scale;
            if (pass == 0) {
                if (s > mx) mx = s;
                continue;
            }
            double e = exp(s - mx);
            sum += e;
            for (int32_t i = 0; i < head_dim; i++) o[i] += e * vj[i];
        }
    }
    for (int32_t i = 0; i < head_dim; i++) out[i] = (float)(o[i] / sum);
}
