/*
 * attention.c - causal attention of one token over its paged K/V.
 *
 * KV pool layout (one layer, K and V separately):
 *     (num_blocks, kv_heads, block_size, head_dim) floats
 * so the block_size positions of one KV head in one block are contiguous.
 * Position p of a sequence lives in physical block block_table[p / block_size]
 * at offset p % block_size.
 *
 * Online softmax, block by block in position order: for each block the scores
 * q.k_j * scale of its positions, the running max m rises to the block's max
 * (rescaling the running sum l and output by exp(m_old - m_new)), then each
 * position adds exp(s_j - m) to l and exp(s_j - m) * v_j to the output; at the
 * end the output is divided by l. Blocks are aligned to positions, so the
 * sequence of floating-point operations for a token depends only on its
 * position and its sequence's K/V -- never on what else is in the batch or
 * how the prompt was chunked (batch invariance). The query heads that share a
 * KV head (GQA) are processed together so each K/V row is loaded once.
 */
#include <math.h>

#include "kernels/kernels.h"

/* 8-lane dot product, the same order as matmul's (see matmul.c). */
static inline float dot8(const float *a, const float *b, int32_t n) {
    float acc[8] = {0};
    int32_t n8 = n & ~7;
    for (int32_t i = 0; i < n8; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (int32_t i = n8; i < n; i++) acc[i - n8] += a[i] * b[i];
    float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6], a3 = acc[3] + acc[7];
    return (a0 + a2) + (a1 + a3);
}

void attention_paged(const attention_args *a, float *out, const float *q, int32_t group,
                     int32_t kv_head, const int32_t *block_table, int32_t n_ctx, float *scratch) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    float *m = scratch + (int64_t)group * bs; /* (group) running max */
    float *l = m + group;                     /* (group) running sum */
    for (int32_t g = 0; g < group; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int32_t i = 0; i < hd; i++) out[(int64_t)g * hd + i] = 0.0f;
    }
    for (int32_t b = 0; (int64_t)b * bs < n_ctx; b++) {
        int32_t cnt = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
        int64_t base = ((int64_t)block_table[b] * a->kv_heads + kv_head) * bs * hd;
        const float *kb = a->k_cache + base, *vb = a->v_cache + base;
        for (int32_t g = 0; g < group; g++) {
            const float *qg = q + (int64_t)g * hd;
            float *og = out + (int64_t)g * hd, *s = scratch + (int64_t)g * bs;
            float bmax = -INFINITY;
            for (int32_t j = 0; j < cnt; j++) {
                s[j] = dot8(qg, kb + (int64_t)j * hd, hd) * a->scale;
                if (s[j] > bmax) bmax = s[j];
            }
            if (bmax > m[g]) {
                float alpha = m[g] == -INFINITY ? 0.0f : expf(m[g] - bmax);
                l[g] *= alpha;
                for (int32_t i = 0; i < hd; i++) og[i] *= alpha;
                m[g] = bmax;
            }
            for (int32_t j = 0; j < cnt; j++) {
                float e = expf(s[j] - m[g]);
                const float *vj = vb + (int64_t)j * hd;
                l[g] += e;
                for (int32_t i = 0; i < hd; i++) og[i] += e * vj[i];
            }
        }
    }
    for (int32_t g = 0; g < group; g++) {
        float inv = 1.0f / l[g];
        for (int32_t i = 0; i < hd; i++) out[(int64_t)g * hd + i] *= inv;
    }
}

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
