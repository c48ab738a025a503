/*
 * runner.c - the Llama-family forward pass over a flattened batch and a paged
 * F32 KV pool (Llama, Mistral, Qwen2 biases, Qwen3 q/k norms).
 *
 * Per layer, over all num_tokens rows of the batch at once (x is the residual
 * stream, (tokens, dim)):
 *
 *   xb = rmsnorm(x) * input_layernorm
 *   q, k, v = xb Wq^T (+bq), xb Wk^T (+bk), xb Wv^T (+bv)      one dispatch
 *   per token: [Qwen3 q_norm/k_norm per head], RoPE(q, k), K/V -> pool slots
 *   att = paged causal attention, each token over positions 0..p of its own
 *         sequence through its block table (GQA: q head h reads KV head h/group)
 *   x += att Wo^T (+bo)
 *   xb = rmsnorm(x) * post_attention_layernorm
 *   hb = silu(xb Wg^T) * (xb Wu^T)                            one dispatch
 *   x += hb Wd^T
 *
 * In a mixture-of-experts layer (layer_weights.moe: Qwen3-MoE, Mixtral) the
 * last three lines are model/moe.h's sparse block instead: x += moe(xb).
 *
 * then the final norm and lm_head only for the scored_indices rows (the
 * last token of each sequence that samples, and its draft positions).
 *
 * KV pool: one anonymous mapping (zero pages the kernel hands out on first
 * touch, so start-up does not write gigabytes), per K/V slot of a block
 * (model/kv_layout.h: group_size of them; slot s holds the s-th layer of
 * whichever KV cache group owns the block; one group of every layer unless
 * the model has sliding-window layers) K then V, each num_blocks blocks of
 * kv_heads * block_size * head_dim elements (K transposed within a block,
 * see kernels/attention.c); slot = block * block_size + offset, through
 * the block table and slot mapping of the layer's group. Elements are of
 * runner_config.kv_cache_dtype (kernels/kv_dtype.h: F32, BF16, F16, FP8):
 * K and V are converted once as they are stored and back to F32 inside the
 * attention kernel, with the layer's FP8 scales (model.h: k_scale, v_scale).
 *
 * Weights: F32/BF16/F16, or ggml block-quantized (GGUF Q8_0, Q4_0, Q4_K,
 * Q6_K): matmul_range picks the kernel from a per-dtype table
 * (kernels/matmul.c), the embedding row is dequantized. Before a matmul
 * stage with Q8_0/Q4_0 weights, its input rows are quantized once per token
 * into r->xq (kernels/quant.h: 8-bit blocks, a function of the token's row
 * alone) for the integer dot kernels, and each weight's x16 copy, when the
 * model made one (model/model.h: tensor.x16, owned by the model), goes
 * along in matmul_args.x16. GGUF q/k rows are in interleaved order, so RoPE
 * is chosen once (r->rope_fn) from the config.
 *
 * Threads: each stage is one threadpool_run over work items claimed by
 * whichever thread is free: (row chunk, token chunk) for matmuls, (token,
 * kv head) for attention (or, when those are too few for the threads, e.g.
 * one long sequence decoding, (token, kv head, 512-position partition of
 * its context) and a merge: split-K, run_attention), chunks of TOKEN_CHUNK
 * tokens for the per-token
 * stages. Stages with little work (norms and RoPE at decode, everything of a
 * tiny model) run on the calling thread without waking the pool.
 *
 * LoRA (model/lora.h): when the step has sequences with adapters, each
 * projection's stage is followed by lora_apply on the rows of those
 * sequences (y += scale B (A x), grouped by adapter); gate/up then run as two
 * plain matmuls into hb and upfull, the deltas are added, and the GLU
 * combines them per token, the same elementwise arithmetic as the fused
 * stage, so rows without an adapter get the same bits either way.
 *
 * Invariance: no stage lets the batch change a token's arithmetic (see
 * kernels.h): work is split over outputs and tokens only, and every kernel's
 * reduction order is fixed by the token's own data.
 *
 * Memory: the KV pool, all scratch for max_num_batched_tokens and the
 * per-thread attention scratch are allocated by runner_create; runner_forward
 * allocates nothing.
 */
#include "model/runner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/kv_layout.h"
#include "model/moe.h"

enum {
    MM_TOKEN_CHUNK = 64,        /* tokens per matmul work item */
    MM_ROW_ALIGN = 48,          /* row chunks are multiples of every tile height (x16 groups too) */
    MM_ROW_ALIGN_AMX = 32,      /* ... of the AMX-BF16 kernel's 16-row tiles (kernels.h) */
    MM_MAX_ROWS = 480,          /* rows per work item at most */
    MM_CHUNK_BYTES = 64 << 10,  /* weight bytes per work item, to stay in L2 for reuse */
    MM_STREAM_BYTES = 512 << 10, /* ... when there is no reuse (< 4 tokens): longer streams */
    TOKEN_CHUNK = 8,            /* rows per work item of the per-token stages */
    PARALLEL_MIN_MACS = 1 << 17, /* matmul/attention stages smaller than this run on the caller */
    ATT_SPLIT_MAX_STATES = 1024, /* split-K partition states a step may hold */
    ATT_SPLIT_ITEMS_PER_THREAD = 4, /* split-K when (token, kv head) items are fewer than this per thread */
    ATT_TILE_TOKENS = 16,       /* tokens of a sequence per attention item (<= ATTENTION_MAX_TILE) */
    ATT_TILE_MIN_CTX = 2048,    /* ... for tokens with at least this many positions before them */
};

/* One parallel matmul stage: up to three weights sharing one input (q/k/v),
 * or a gate/up pair combined by SwiGLU / GeGLU into part[0].y (part[1].y
 * unused: each work item computes its block of up into per-thread scratch). */
typedef struct mm_op {
    matmul_args part[3];
    int nparts;
    bool swiglu;                /* a gate/up pair: the runner's glu combines them */
    int64_t tokens;
    int64_t row_chunk;
    int64_t num_tchunks;
    int64_t first_item[4];      /* work items of part p: [first_item[p], first_item[p+1]) */
} mm_op;

struct runner {
    const model *m;
    runner_config cfg;
    threadpool *pool;
    int nth;

    /* shapes */
    int32_t dim, n_heads, n_kv, head_dim, group, inter, vocab, n_layers;
    int64_t q_dim, kv_dim;
    float eps, attn_scale;
    float norm_off;             /* RMSNorm weight offset: 0, Gemma's 1 */
    bool has_sliding;           /* some layers attend through a sliding window (Gemma 3) */
    void (*glu)(float *g, const float *u, int64_t n); /* act_swiglu or act_geglu */
    float *inv_freq;            /* (head_dim / 2) with rope_scaling applied */
    float *inv_freq_local;      /* (head_dim / 2) the sliding layers' (rope_local_theta), or NULL */
    void (*rope_fn)(float *x, int32_t n_heads, int32_t head_dim, const float *cos, const float *sin);

    /* KV pool */
    kv_layout layout;           /* layer -> (KV cache group, slot) */
    kv_dtype kv_type;           /* element type of the pool */
    uint8_t *kv;                /* (group_size slots, 2 (K, V), num_blocks, n_kv * block_size * head_dim)
                                 * elements of kv_type */
    size_t kv_block_bytes;      /* n_kv * block_size * head_dim elements */
    size_t kv_half_bytes;       /* num_blocks * kv_block_bytes: one slot's K (or V) */
    size_t kv_bytes;            /* the mapping behind kv */

    /* scratch, T = max_num_batched_tokens */
    float *x;                   /* (T, dim) residual stream */
    float *xb;                  /* (T, dim) normed input of a matmul; final rows for logits */
    float *q;                   /* (T, q_dim) */
    float *k, *v;               /* (T, kv_dim) */
    float *att;                 /* (T, q_dim) attention output */
    float *hb;                  /* (T, inter) silu(gate) * up */
    float *up;                  /* (nth, MM_TOKEN_CHUNK * MM_MAX_ROWS) one work item's up */
    float *rope;                /* (T, head_dim): cos (head_dim/2) then sin */
    float *rope_local;          /* (T, head_dim) the same for the sliding layers, or NULL */
    float *att_scratch;         /* (nth, attention_scratch_floats) */
    float *att_part;            /* (ATT_SPLIT_MAX_STATES, attention_state_floats) split-K states */
    int32_t *att_nparts;        /* (T) partitions of each token's context, in a split step */
    int32_t *att_first;         /* (T + 1) first state (and work item) of each token, in a split step */
    int32_t *att_tile;          /* (T + 1) first token of each attention tile, in a step without split */
    int32_t att_ntiles;
    uint8_t *xq;                /* (T, xq_stride bytes) a matmul input quantized, when Q8_0/Q4_0 weights */
    size_t xq_stride;           /* quant_act_row_bytes(max(dim, q_dim, inter)) */
    uint8_t *xa;                /* (T rounded up to 4, xa_stride bytes) a matmul input packed for
                                 * the AMX-BF16 kernel (kernels.h), when it takes BF16/F16 weights */
    size_t xa_stride;           /* matmul_amx_act_bytes(max(dim, q_dim, inter)) */
    uint16_t *xh;               /* (T, xh_stride bytes) a matmul input rounded to BF16 in the
                                 * kernel's format, when bf16_compute and BF16 weights (kernels.h,
                                 * matmul_bf16_round_act) */
    size_t xh_stride;           /* matmul_bf16_act_bytes(max(dim, q_dim, inter)) */

    /* the stage being run */
    const step_batch *b;
    int32_t *token_seq;         /* (T) sequence of each token of the batch */
    int32_t layer;
    mm_op mm;
    float *logits;              /* the caller's, during runner_forward */

    /* LoRA, when runner_config.lora is set */
    lora_batch lora;            /* this step's rows grouped by adapter */
    float *upfull;              /* (T, inter) up's output when gate/up have deltas */

    moe *moe;                   /* the sparse MLP blocks' scratch (model/moe.h), for a MoE model */
    runner_layer_hooks hooks;   /* a KV connector's, or all NULL */
};

/* ---- set-up ------------------------------------------------------------ */

/* HF inv_freq = 1 / theta^(2i/d), in F32 like torch, then (if scaled) the
 * config's rope_scaling: linear divides by factor; llama3 (HF
 * _compute_llama3_parameters) divides low frequencies by factor, keeps high
 * ones and interpolates between. */
static void rope_init_inv_freq(float *inv_freq, const model_config *c, float theta, bool scaled) {
    int32_t half = c->head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)c->head_dim;
        float f = 1.0f / powf(theta, expo);
        if (!scaled) {
        } else if (c->rope_scaling == ROPE_SCALING_LINEAR) {
            f = f / c->rope_factor;
        } else if (c->rope_scaling == ROPE_SCALING_LLAMA3) {
            float old_len = (float)c->rope_original_max_position_embeddings;
            float low_wavelen = old_len / c->rope_low_freq_factor;
            float high_wavelen = old_len / c->rope_high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / c->rope_factor;
            } else if (!(wavelen < high_wavelen)) {
                float smooth = (old_len / wavelen - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0f - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

/* *out = a * b, false on overflow. */
static bool size_mul(size_t *out, size_t a, size_t b) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Zeroed array of n elements of size bytes; on failure sets *rc (once) and
 * returns NULL. Does nothing if *rc is already an error. */
static void *alloc_zeroed(size_t n, size_t size, vllm_status *rc) {
    size_t bytes;
    void *p = NULL;
    if (*rc != VLLM_OK) return NULL;
    /* 64-byte aligned (whole cache lines): the matmul kernels' 64-byte
     * vector loads of activation rows then never straddle two lines */
    if (size_mul(&bytes, n ? n : 1, size) && bytes <= SIZE_MAX - 63) {
        bytes = (bytes + 63) & ~(size_t)63;
        if ((p = aligned_alloc(64, bytes))) memset(p, 0, bytes);
    }
    if (!p) *rc = vllm_error(VLLM_ERR_NOMEM, "runner: cannot allocate %zu x %zu bytes", n, size);
    return p;
}

static float *alloc_floats(size_t n, vllm_status *rc) { return alloc_zeroed(n, sizeof(float), rc); }

/* Attention scratch floats per thread: a tile of ATT_TILE_TOKENS tokens. */
static int64_t att_scratch_floats(int32_t group, int32_t block_size, int32_t head_dim) {
    return attention_tile_scratch_floats(ATT_TILE_TOKENS, group, block_size, head_dim);
}

/* The KV pool: gigabytes, so mapped rather than memset (zeroing 9 GiB took
 * 5 s of `serve` start-up); page-aligned, zero until written. */
static uint8_t *map_bytes(size_t n, size_t *bytes, vllm_status *rc) {
    if (*rc != VLLM_OK) return NULL;
    void *p = MAP_FAILED;
    *bytes = n ? n : 1;
    p = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        *rc = vllm_error(VLLM_ERR_NOMEM, "runner: cannot map a KV cache of %zu bytes", n);
        return NULL;
    }
    return p;
}

size_t runner_kv_bytes_per_block(const model_config *c, int32_t block_size, kv_dtype t) {
    kv_layout l;
    kv_layout_init(&l, c);
    return kv_layout_block_bytes(&l, c, block_size, t);
}

/* True if any matmul weight's dtype satisfies has. */
static bool model_any_weight(const model *m, bool (*has)(dtype)) {
    const model_weights *w = &m->w;
    if (has(w->lm_head.type)) return true;
    for (int32_t l = 0; l < m->config.num_hidden_layers; l++) {
        const layer_weights *lw = &w->layers[l];
        const tensor *t[] = {&lw->q_proj, &lw->k_proj, &lw->v_proj, &lw->o_proj, &lw->gate_proj, &lw->up_proj, &lw->down_proj};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (has(t[i]->type)) return true;
    }
    return false;
}

/* Weights with an integer dot kernel (Q8_0/Q4_0...): inputs quantized into xq. */
static bool model_has_act_quant(const model *m) { return model_any_weight(m, quant_has_act_kernel); }

static bool is_bf16(dtype t) { return t == DTYPE_BF16; }

/* Weights the AMX-BF16 kernel takes in this process: inputs packed into xa. */
static bool uses_amx(dtype t) { return matmul_amx_takes(t); }

vllm_status runner_create(const model *m, const runner_config *cfg, runner **out) {
    *out = NULL;
    const model_config *c = &m->config;
    if (cfg->num_blocks < 1 || cfg->block_size < 1 || cfg->block_size > 4096 ||
        cfg->max_num_batched_tokens < 1 || cfg->max_num_seqs < 1 || cfg->num_threads < 0 ||
        (unsigned)cfg->kv_cache_dtype >= KV_DTYPE_COUNT)
        return vllm_error(VLLM_ERR_INVALID,
                          "runner: bad config: num_blocks %d, block_size %d (1..4096), "
                          "max_num_batched_tokens %d, max_num_seqs %d, num_threads %d, kv_cache_dtype %d",
                          cfg->num_blocks, cfg->block_size, cfg->max_num_batched_tokens,
                          cfg->max_num_seqs, cfg->num_threads, (int)cfg->kv_cache_dtype);
    if (c->head_dim < 2 || c->head_dim % 2 || c->num_key_value_heads < 1 ||
        c->num_attention_heads % c->num_key_value_heads)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "runner: head_dim %d, heads %d, kv heads %d",
                          c->head_dim, c->num_attention_heads, c->num_key_value_heads);
    if ((int64_t)cfg->num_blocks * cfg->block_size > INT32_MAX)
        return vllm_error(VLLM_ERR_INVALID, "runner: %d blocks of %d slots exceed 2^31 slots",
                          cfg->num_blocks, cfg->block_size);

    runner *r = calloc(1, sizeof *r);
    if (!r) return vllm_error(VLLM_ERR_NOMEM, "runner: out of memory");
    vllm_status rc = VLLM_OK;
    r->m = m;
    r->cfg = *cfg;
    r->dim = c->hidden_size;
    r->n_heads = c->num_attention_heads;
    r->n_kv = c->num_key_value_heads;
    r->head_dim = c->head_dim;
    r->group = r->n_heads / r->n_kv;
    r->inter = c->intermediate_size;
    r->vocab = c->vocab_size;
    r->n_layers = c->num_hidden_layers;
    r->q_dim = (int64_t)r->n_heads * r->head_dim;
    r->kv_dim = (int64_t)r->n_kv * r->head_dim;
    r->eps = c->rms_norm_eps;
    r->attn_scale = c->attn_scale > 0 ? c->attn_scale : (float)(1.0 / sqrt((double)r->head_dim));
    r->norm_off = c->norm_weight_offset;
    r->has_sliding = model_has_sliding_layers(c);
    r->glu = c->hidden_act == MODEL_ACT_GELU_TANH ? act_geglu : act_swiglu;

    if (cfg->shared_pool) r->pool = cfg->shared_pool;
    else if ((rc = threadpool_create(cfg->num_threads, &r->pool)) != VLLM_OK) goto fail;
    r->nth = threadpool_num_threads(r->pool);
    r->cfg.num_threads = r->nth;

    kv_layout_init(&r->layout, c);
    r->kv_type = cfg->kv_cache_dtype;
    r->kv_block_bytes = (size_t)r->n_kv * (size_t)cfg->block_size * (size_t)r->head_dim * kv_dtype_size(r->kv_type);
    size_t kv_total;
    if (!size_mul(&r->kv_half_bytes, (size_t)cfg->num_blocks, r->kv_block_bytes) ||
        !size_mul(&kv_total, r->kv_half_bytes, (size_t)2 * (size_t)r->layout.group_size)) {
        rc = vllm_error(VLLM_ERR_INVALID, "runner: KV pool of %d blocks overflows", cfg->num_blocks);
        goto fail;
    }
    r->kv = map_bytes(kv_total, &r->kv_bytes, &rc);

    size_t T = (size_t)cfg->max_num_batched_tokens;
    r->inv_freq = alloc_floats((size_t)r->head_dim / 2, &rc);
    if (r->has_sliding) {
        r->inv_freq_local = alloc_floats((size_t)r->head_dim / 2, &rc);
        r->rope_local = alloc_floats(T * (size_t)r->head_dim, &rc);
    }
    r->x = alloc_floats(T * (size_t)r->dim, &rc);
    r->xb = alloc_floats(T * (size_t)r->dim, &rc);
    r->q = alloc_floats(T * (size_t)r->q_dim, &rc);
    r->k = alloc_floats(T * (size_t)r->kv_dim, &rc);
    r->v = alloc_floats(T * (size_t)r->kv_dim, &rc);
    r->att = alloc_floats(T * (size_t)r->q_dim, &rc);
    r->hb = alloc_floats(T * (size_t)r->inter, &rc);
    r->up = alloc_floats((size_t)r->nth * MM_TOKEN_CHUNK * MM_MAX_ROWS, &rc);
    r->rope = alloc_floats(T * (size_t)r->head_dim, &rc);
    r->token_seq = alloc_zeroed(T, sizeof(int32_t), &rc);
    r->att_scratch = alloc_floats((size_t)r->nth * (size_t)att_scratch_floats(r->group, cfg->block_size, r->head_dim), &rc);
    r->att_part = alloc_floats(ATT_SPLIT_MAX_STATES * (size_t)attention_state_floats(r->group, r->head_dim), &rc);
    r->att_nparts = alloc_zeroed(T, sizeof(int32_t), &rc);
    r->att_first = alloc_zeroed(T + 1, sizeof(int32_t), &rc);
    r->att_tile = alloc_zeroed(T + 1, sizeof(int32_t), &rc);
    if (model_has_act_quant(m)) {
        int64_t kmax = r->dim > r->q_dim ? r->dim : r->q_dim;
        if (r->inter > kmax) kmax = r->inter;
        r->xq_stride = quant_act_row_bytes(kmax);
        r->xq = alloc_zeroed(T, r->xq_stride, &rc);
    }
    if (model_any_weight(m, uses_amx)) {
        int64_t kmax = r->dim > r->q_dim ? r->dim : r->q_dim;
        if (r->inter > kmax) kmax = r->inter;
        r->xa_stride = matmul_amx_act_bytes(kmax);
        r->xa = alloc_zeroed((T + 3) / 4 * 4, r->xa_stride, &rc);
    }
    if (cfg->bf16_compute && model_any_weight(m, is_bf16)) {
        int64_t kmax = r->dim > r->q_dim ? r->dim : r->q_dim;
        if (r->inter > kmax) kmax = r->inter;
        r->xh_stride = matmul_bf16_act_bytes(kmax);
        r->xh = alloc_zeroed(T, r->xh_stride, &rc);
    }
    if (rc == VLLM_OK && cfg->lora) {
        r->upfull = alloc_floats(T * (size_t)r->inter, &rc);
        if (rc == VLLM_OK)
            rc = lora_batch_init(&r->lora, m, cfg->max_num_batched_tokens,
                                 cfg->max_lora_rank > 0 ? cfg->max_lora_rank : 16, r->nth);
    }
    if (rc == VLLM_OK && c->num_experts) {
        if (cfg->all_reduce || cfg->lora)
            rc = vllm_error(VLLM_ERR_UNSUPPORTED, "runner: %s: %s is not supported with mixture-of-experts models",
                            c->architecture, cfg->lora ? "LoRA" : "tensor parallelism");
        else
            rc = moe_create(m, cfg->max_num_batched_tokens, r->nth, &r->moe);
    }
    if (rc != VLLM_OK) goto fail;
    rope_init_inv_freq(r->inv_freq, c, c->rope_theta, true);
    if (r->has_sliding) rope_init_inv_freq(r->inv_freq_local, c, c->rope_local_theta, false);
    r->rope_fn = c->rope_interleaved ? rope_apply_interleaved : rope_apply;
    *out = r;
    return VLLM_OK;
fail:
    runner_free(r);
    return rc;
}

void runner_free(runner *r) {
    if (!r) return;
    if (r->pool != r->cfg.shared_pool) threadpool_free(r->pool);
    if (r->kv) munmap(r->kv, r->kv_bytes);
    free(r->inv_freq);
    free(r->inv_freq_local);
    free(r->rope_local);
    free(r->x);
    free(r->xb);
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->att);
    free(r->hb);
    free(r->up);
    free(r->rope);
    free(r->xq);
    free(r->xa);
    free(r->xh);
    free(r->att_scratch);
    free(r->att_part);
    free(r->att_nparts);
    free(r->att_first);
    free(r->att_tile);
    free(r->token_seq);
    free(r->upfull);
    lora_batch_deinit(&r->lora);
    moe_free(r->moe);
    free(r);
}

vllm_status runner_copy_block(runner *r, int32_t src_block, int32_t dst_block) {
    if (src_block < 0 || src_block >= r->cfg.num_blocks || dst_block < 0 || dst_block >= r->cfg.num_blocks)
        return vllm_error(VLLM_ERR_INVALID, "runner_copy_block: blocks %d -> %d outside the pool of %d",
                          src_block, dst_block, r->cfg.num_blocks);
    if (src_block == dst_block) return VLLM_OK;
    size_t n = r->kv_block_bytes;
    for (int32_t half = 0; half < 2 * r->layout.group_size; half++) {
        uint8_t *base = r->kv + (size_t)half * r->kv_half_bytes;
        memcpy(base + (size_t)dst_block * n, base + (size_t)src_block * n, n);
    }
    return VLLM_OK;
}

/* ---- the KV pool, block by block ------------------------------------------- */

size_t runner_kv_block_bytes(const runner *r) { return r->kv_block_bytes; }

kv_dtype runner_kv_cache_dtype(const runner *r) { return r->kv_type; }

int32_t runner_num_layers(const runner *r) { return r->n_layers; }

threadpool *runner_threadpool(runner *r) { return r->pool; }

void runner_set_layer_hooks(runner *r, const runner_layer_hooks *h) {
    r->hooks = h ? *h : (runner_layer_hooks){0};
}

/* The K array of a layer's slot (all blocks); V follows kv_half_bytes later. */
static uint8_t *kv_slot(const runner *r, int32_t layer) {
    return r->kv + (size_t)(2 * r->layout.layer_slot[layer]) * r->kv_half_bytes;
}

/* The K array of (layer, block); V follows kv_half_bytes later. */
static uint8_t *kv_block(const runner *r, int32_t layer, int32_t block) {
    return kv_slot(r, layer) + (size_t)block * r->kv_block_bytes;
}

static vllm_status check_kv_block(const runner *r, int32_t layer, int32_t block) {
    if (layer < 0 || layer >= r->n_layers || block < 0 || block >= r->cfg.num_blocks)
        return vllm_error(VLLM_ERR_INVALID, "runner: KV of layer %d, block %d: outside %d layers x %d blocks",
                          layer, block, r->n_layers, r->cfg.num_blocks);
    return VLLM_OK;
}

vllm_status runner_read_kv(const runner *r, int32_t layer, int32_t block, void *k, void *v) {
    vllm_status rc = check_kv_block(r, layer, block);
    if (rc != VLLM_OK) return rc;
    const uint8_t *kb = kv_block(r, layer, block);
    memcpy(k, kb, r->kv_block_bytes);
    memcpy(v, kb + r->kv_half_bytes, r->kv_block_bytes);
    return VLLM_OK;
}

vllm_status runner_write_kv(runner *r, int32_t layer, int32_t block, const void *k, const void *v) {
    vllm_status rc = check_kv_block(r, layer, block);
    if (rc != VLLM_OK) return rc;
    uint8_t *kb = kv_block(r, layer, block);
    memcpy(kb, k, r->kv_block_bytes);
    memcpy(kb + r->kv_half_bytes, v, r->kv_block_bytes);
    return VLLM_OK;
}

/* ---- batch validation -------------------------------------------------------- */

static vllm_status check_batch(const runner *r, const step_batch *b) {
    const runner_config *c = &r->cfg;
    int32_t bs = c->block_size;
    if (b->num_tokens < 0 || b->num_tokens > c->max_num_batched_tokens)
        return vllm_error(VLLM_ERR_INVALID, "runner: num_tokens %d outside 0..max_num_batched_tokens %d",
                          b->num_tokens, c->max_num_batched_tokens);
    if (b->num_seqs < 0 || b->num_seqs > c->max_num_seqs)
        return vllm_error(VLLM_ERR_INVALID, "runner: num_seqs %d outside 0..max_num_seqs %d", b->num_seqs,
                          c->max_num_seqs);
    if (b->num_scored < 0 || b->num_scored > c->max_num_batched_tokens)
        return vllm_error(VLLM_ERR_INVALID, "runner: num_scored %d outside 0..%d", b->num_scored,
                          c->max_num_batched_tokens);
    if (b->num_tokens == 0) {
        if (b->num_scored) return vllm_error(VLLM_ERR_INVALID, "runner: logits requested for an empty batch");
        return VLLM_OK;
    }
    if (!b->token_ids || !b->positions || !b->slot_mapping || !b->query_start_loc || !b->seq_lens ||
        !b->block_tables || (b->num_scored && !b->scored_indices))
        return vllm_error(VLLM_ERR_INVALID, "runner: batch array missing (NULL)");
    if (b->num_seqs < 1 || b->max_blocks_per_seq < 1)
        return vllm_error(VLLM_ERR_INVALID, "runner: %d tokens but num_seqs %d, max_blocks_per_seq %d",
                          b->num_tokens, b->num_seqs, b->max_blocks_per_seq);
    if (b->query_start_loc[0] != 0 || b->query_start_loc[b->num_seqs] != b->num_tokens)
        return vllm_error(VLLM_ERR_INVALID, "runner: query_start_loc must run from 0 to num_tokens %d (got %d..%d)",
                          b->num_tokens, b->query_start_loc[0], b->query_start_loc[b->num_seqs]);
    const kv_layout *lay = &r->layout;
    int32_t G = b->num_kv_groups ? b->num_kv_groups : 1;
    if (G != lay->num_groups)
        return vllm_error(VLLM_ERR_INVALID, "runner: the batch has %d KV cache groups, the model %d", G,
                          lay->num_groups);
    for (int32_t s = 0; s < b->num_seqs; s++) {
        int32_t t0 = b->query_start_loc[s], t1 = b->query_start_loc[s + 1];
        int32_t len = b->seq_lens[s];
        if (t1 < t0 || t1 > b->num_tokens)
            return vllm_error(VLLM_ERR_INVALID, "runner: query_start_loc[%d..%d] = %d..%d not increasing", s,
                              s + 1, t0, t1);
        if (len < t1 - t0 || (int64_t)len > (int64_t)b->max_blocks_per_seq * bs)
            return vllm_error(VLLM_ERR_INVALID,
                              "runner: seq_lens[%d] = %d: fewer than its %d new tokens or more than "
                              "max_blocks_per_seq %d * block_size %d",
                              s, len, t1 - t0, b->max_blocks_per_seq, bs);
        for (int32_t g = 0; g < G; g++) {
            const int32_t *table = b->block_tables + ((int64_t)s * G + g) * b->max_blocks_per_seq;
            /* a sliding group's first new token reads back window - 1 positions; blocks
             * before those may have been released */
            int32_t first = len - (t1 - t0) - (lay->window[g] ? lay->window[g] - 1 : len);
            for (int32_t j = first > 0 ? first / bs : 0; (int64_t)j * bs < len; j++)
                if (table[j] < 0 || table[j] >= c->num_blocks)
                    return vllm_error(VLLM_ERR_INVALID,
                                      "runner: block_tables[%d][group %d][%d] = %d outside the pool of %d", s, g, j,
                                      table[j], c->num_blocks);
            for (int32_t t = t0; t < t1; t++) {
                int32_t pos = b->positions[t];
                if (pos != len - (t1 - t0) + (t - t0))
                    return vllm_error(VLLM_ERR_INVALID,
                                      "runner: positions[%d] = %d, expected %d (sequence %d: seq_len %d, %d new tokens)",
                                      t, pos, len - (t1 - t0) + (t - t0), s, len, t1 - t0);
                int64_t slot = (int64_t)table[pos / bs] * bs + pos % bs;
                if (b->slot_mapping[(int64_t)t * G + g] != slot)
                    return vllm_error(VLLM_ERR_INVALID,
                                      "runner: slot_mapping[%d][group %d] = %lld, but the block table puts position "
                                      "%d at %lld",
                                      t, g, (long long)b->slot_mapping[(int64_t)t * G + g], pos, (long long)slot);
            }
        }
        for (int32_t t = t0; t < t1; t++)
            if (b->token_ids[t] < 0 || b->token_ids[t] >= r->vocab)
                return vllm_error(VLLM_ERR_INVALID, "runner: token_ids[%d] = %d outside the vocabulary of %d", t,
                                  b->token_ids[t], r->vocab);
    }
    for (int32_t i = 0; i < b->num_scored; i++)
        if (b->scored_indices[i] < 0 || b->scored_indices[i] >= b->num_tokens)
            return vllm_error(VLLM_ERR_INVALID, "runner: scored_indices[%d] = %d outside 0..%d", i,
                              b->scored_indices[i], b->num_tokens - 1);
    return VLLM_OK;
}

static vllm_status check_copies(const runner *r, const step_batch *b) {
    if (b->num_copies < 0 || (b->num_copies > 0 && !b->copies))
        return vllm_error(VLLM_ERR_INVALID, "runner: %d block copies without an array", b->num_copies);
    for (int32_t c = 0; c < 2 * b->num_copies; c++)
        if (b->copies[c] < 0 || b->copies[c] >= r->cfg.num_blocks)
            return vllm_error(VLLM_ERR_INVALID, "runner: block copy %d names block %d outside the pool of %d",
                              c / 2, b->copies[c], r->cfg.num_blocks);
    return VLLM_OK;
}

/* ---- stages -------------------------------------------------------------- */

/* Runs a per-token stage over n rows in chunks of TOKEN_CHUNK rows (so a
 * decode step's few rows stay on the calling thread). */
static void run_rows(runner *r, threadpool_fn fn, int64_t n) { threadpool_run(r->pool, fn, r, n, TOKEN_CHUNK); }

/* x[t] = embed_tokens[token_ids[t]] (unless a later pipeline stage: x came
 * from the one before); rope[t] = cos/sin of positions[t]. */
static void stage_embed(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    const step_batch *b = r->b;
    const tensor *e = &r->m->w.embed_tokens;
    int32_t half = r->head_dim / 2;
    float scale = r->m->config.embed_scale;
    for (int64_t t = lo; t < hi; t++) {
        float *x = r->x + t * r->dim;
        if (!r->cfg.no_embed) {
            quant_dequantize_row(e->type,
                                 (const char *)e->data + (size_t)b->token_ids[t] * dtype_row_bytes(e->type, r->dim),
                                 x, r->dim);
            if (scale > 0)
                for (int32_t i = 0; i < r->dim; i++) x[i] *= scale;
        }
        float *cs = r->rope + t * r->head_dim;
        rope_cos_sin(cs, cs + half, r->inv_freq, half, b->positions[t]);
        if (r->rope_local) {
            cs = r->rope_local + t * r->head_dim;
            rope_cos_sin(cs, cs + half, r->inv_freq_local, half, b->positions[t]);
        }
    }
}

static void stage_norm(runner *r, int64_t lo, int64_t hi, const tensor *w) {
    for (int64_t t = lo; t < hi; t++)
        norm_rms(r->xb + t * r->dim, r->x + t * r->dim, w->data, w->type, r->dim, r->eps, r->norm_off);
}

static void stage_input_norm(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    stage_norm(r, lo, hi, &r->m->w.layers[r->layer].input_layernorm);
}

static void stage_post_norm(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    stage_norm(r, lo, hi, &r->m->w.layers[r->layer].post_attention_layernorm);
}

/* Gemma's post-norms: x += norm(xb) (xb: the attention's or the MLP's output). */
static void stage_norm_residual(runner *r, int64_t lo, int64_t hi, const tensor *w) {
    for (int64_t t = lo; t < hi; t++) {
        float *x = r->x + t * r->dim, *y = r->xb + t * r->dim;
        norm_rms(y, y, w->data, w->type, r->dim, r->eps, r->norm_off);
        for (int32_t i = 0; i < r->dim; i++) x[i] += y[i];
    }
}

static void stage_attn_post_norm(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    stage_norm_residual(r, lo, hi, &r->m->w.layers[r->layer].attn_post_norm);
}

static void stage_ffn_post_norm(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    stage_norm_residual(r, lo, hi, &r->m->w.layers[r->layer].ffn_post_norm);
}

/* logits[i] = cap * tanh(logits[i] / cap) (Gemma's final_logit_softcapping). */
static void stage_softcap(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    float cap = r->m->config.final_logit_softcapping;
    for (int64_t i = lo; i < hi; i++) {
        float *y = r->logits + i * r->vocab;
        for (int32_t j = 0; j < r->vocab; j++) y[j] = tanhf(y[j] / cap) * cap;
    }
}

/* xb[i] = norm(x[scored_indices[i]]): the rows that get logits. */
static void stage_final_norm(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    const tensor *w = &r->m->w.norm;
    for (int64_t i = lo; i < hi; i++)
        norm_rms(r->xb + i * r->dim, r->x + (int64_t)r->b->scored_indices[i] * r->dim, w->data, w->type, r->dim,
                 r->eps, r->norm_off);
}

/* Per token: Qwen3 q/k norms, RoPE on q and k, K and V into the pool. */
static void stage_rope_store(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    const step_batch *b = r->b;
    const layer_weights *lw = &r->m->w.layers[r->layer];
    int32_t hd = r->head_dim, half = hd / 2;
    uint8_t *k_cache = kv_slot(r, r->layer), *v_cache = k_cache + r->kv_half_bytes;
    int32_t G = r->layout.num_groups, g = r->layout.layer_group[r->layer];
    attention_args kv = {.kv_heads = r->n_kv, .head_dim = hd, .block_size = r->cfg.block_size,
                         .cache_dtype = r->kv_type, .k_scale = lw->k_scale, .v_scale = lw->v_scale};
    bool sliding = r->rope_local && model_layer_is_sliding(&r->m->config, r->layer);
    for (int64_t t = lo; t < hi; t++) {
        float *q = r->q + t * r->q_dim, *k = r->k + t * r->kv_dim, *v = r->v + t * r->kv_dim;
        if (lw->q_norm.data)
            for (int32_t h = 0; h < r->n_heads; h++)
                norm_rms(q + h * hd, q + h * hd, lw->q_norm.data, lw->q_norm.type, hd, r->eps, r->norm_off);
        if (lw->k_norm.data)
            for (int32_t h = 0; h < r->n_kv; h++)
                norm_rms(k + h * hd, k + h * hd, lw->k_norm.data, lw->k_norm.type, hd, r->eps, r->norm_off);
        const float *cs = (sliding ? r->rope_local : r->rope) + t * hd;
        r->rope_fn(q, r->n_heads, hd, cs, cs + half);
        r->rope_fn(k, r->n_kv, hd, cs, cs + half);
        attention_store_kv(&kv, k_cache, v_cache, b->slot_mapping[t * G + g], k, v);
    }
}

/* The attention_args of the current layer. */
static attention_args layer_attention(const runner *r) {
    const layer_weights *lw = &r->m->w.layers[r->layer];
    const uint8_t *k_cache = kv_slot(r, r->layer);
    return (attention_args){
        .k_cache = k_cache,
        .v_cache = k_cache + r->kv_half_bytes,
        .kv_heads = r->n_kv,
        .head_dim = r->head_dim,
        .block_size = r->cfg.block_size,
        .scale = r->attn_scale,
        .window = model_layer_is_sliding(&r->m->config, r->layer) ? r->m->config.sliding_window : 0,
        .cache_dtype = r->kv_type,
        .k_scale = lw->k_scale,
        .v_scale = lw->v_scale,
    };
}

static float *att_scratch_of(const runner *r, int ith) {
    return r->att_scratch + (size_t)ith * (size_t)att_scratch_floats(r->group, r->cfg.block_size, r->head_dim);
}

static const int32_t *block_table_of(const runner *r, int32_t t) {
    const step_batch *b = r->b;
    int32_t G = r->layout.num_groups, g = r->layout.layer_group[r->layer];
    return b->block_tables + ((int64_t)r->token_seq[t] * G + g) * b->max_blocks_per_seq;
}

/* Items: (tile, kv head), i = tile * n_kv + head; a tile is up to
 * ATT_TILE_TOKENS consecutive tokens of one sequence (att_tile), which
 * read each block of their context once between them. */
static void stage_attention(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    const attention_args a = layer_attention(r);
    float *scratch = att_scratch_of(r, ith);
    for (int64_t i = lo; i < hi; i++) {
        int32_t k = (int32_t)(i / r->n_kv), h = (int32_t)(i % r->n_kv), t = r->att_tile[k];
        int64_t qoff = t * r->q_dim + (int64_t)h * r->group * r->head_dim;
        attention_paged_tile(&a, r->att + qoff, r->q + qoff, r->q_dim, r->group, h, block_table_of(r, t),
                             r->b->positions + t, r->att_tile[k + 1] - t, scratch);
    }
}

/* Split-K items: (token, kv head, partition); token t's are
 * att_first[t] .. att_first[t + 1] - 1, kv head major. Item i's state goes
 * to att_part row i. */
static void stage_attention_part(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    const attention_args a = layer_attention(r);
    const int64_t sf = attention_state_floats(r->group, r->head_dim);
    float *scratch = att_scratch_of(r, ith);
    int32_t t = 0;
    for (int64_t i = lo; i < hi; i++) {
        while (i >= r->att_first[t + 1]) t++;
        int32_t np = r->att_nparts[t], h = (int32_t)((i - r->att_first[t]) / np), k = (int32_t)((i - r->att_first[t]) % np);
        int64_t qoff = t * r->q_dim + (int64_t)h * r->group * r->head_dim;
        attention_paged_partition(&a, r->att_part + i * sf, r->q + qoff, r->group, h, block_table_of(r, t),
                                  r->b->positions[t] + 1, k, scratch);
    }
}

/* Items: (token, kv head): its partition states merged in order. */
static void stage_attention_merge(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    runner *r = arg;
    const attention_args a = layer_attention(r);
    const int64_t sf = attention_state_floats(r->group, r->head_dim);
    for (int64_t i = lo; i < hi; i++) {
        int32_t t = (int32_t)(i / r->n_kv), h = (int32_t)(i % r->n_kv), np = r->att_nparts[t];
        int64_t qoff = t * r->q_dim + (int64_t)h * r->group * r->head_dim;
        attention_merge_partitions(&a, r->att + qoff, r->att_part + (r->att_first[t] + (int64_t)h * np) * sf, np,
                                   r->group);
    }
}

/* ---- matmul stages --------------------------------------------------------- */

static matmul_args mm_args(float *y, int64_t ldy, const float *x, int64_t ldx, const tensor *w,
                           const tensor *bias, bool accumulate) {
    return (matmul_args){
        .y = y, .ldy = ldy, .x = x, .ldx = ldx,
        .w = w->data, .wtype = w->type, .x16 = w->x16,
        .bias = bias ? bias->data : NULL, .btype = bias ? bias->type : DTYPE_F32,
        .n = w->shape[0], .k = w->shape[1],
        .accumulate = accumulate,
    };
}

/* Chooses the work items: row chunks of ~MM_CHUNK_BYTES of weights (a
 * multiple of every tile height) that stay in L2 while every 4-token tile
 * reuses them, or of ~MM_STREAM_BYTES at decode where each weight is read
 * once (longer sequential streams read faster), token chunks of
 * MM_TOKEN_CHUNK, halving the row chunk while there are too few items to
 * keep every thread busy. Weights on the AMX kernel get whole 16-row tiles. */
static void mm_plan(runner *r, mm_op *op, int64_t tokens) {
    const matmul_args *a = &op->part[0];
    int64_t row_bytes = (int64_t)dtype_row_bytes(a->wtype, a->k) * (op->swiglu ? 2 : 1);
    const int64_t align = uses_amx(a->wtype) ? MM_ROW_ALIGN_AMX : MM_ROW_ALIGN;
    int64_t rc = (tokens < 4 ? MM_STREAM_BYTES : MM_CHUNK_BYTES) / (row_bytes ? row_bytes : 1);
    rc = (rc + align - 1) / align * align;
    if (rc < align) rc = align;
    if (rc > MM_MAX_ROWS) rc = MM_MAX_ROWS / align * align;
    op->tokens = tokens;
    op->num_tchunks = (tokens + MM_TOKEN_CHUNK - 1) / MM_TOKEN_CHUNK;
    for (;;) {
        int64_t items = 0;
        int nparts = op->swiglu ? 1 : op->nparts;
        for (int p = 0; p < nparts; p++) {
            op->first_item[p] = items;
            items += (op->part[p].n + rc - 1) / rc * op->num_tchunks;
        }
        op->first_item[nparts] = items;
        if (items >= 4 * r->nth || rc <= align) break;
        rc = (rc / 2 + align - 1) / align * align;
    }
    op->row_chunk = rc;
}

static void stage_matmul(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    mm_op *op = &r->mm;
    for (int64_t i = lo; i < hi; i++) {
        int p = 0;
        while (i >= op->first_item[p + 1]) p++;
        int64_t local = i - op->first_item[p];
        const matmul_args *a = &op->part[p];
        int64_t n0 = local / op->num_tchunks * op->row_chunk;
        int64_t n1 = n0 + op->row_chunk < a->n ? n0 + op->row_chunk : a->n;
        int64_t t0 = local % op->num_tchunks * MM_TOKEN_CHUNK;
        int64_t t1 = t0 + MM_TOKEN_CHUNK < op->tokens ? t0 + MM_TOKEN_CHUNK : op->tokens;
        /* --dtype bfloat16: BF16 weights on the BF16 compute path */
        matmul_range_fn mm = r->cfg.bf16_compute && a->wtype == DTYPE_BF16 ? matmul_bf16_range : matmul_range;
        mm(a, n0, n1, t0, t1);
        if (op->swiglu) {
            /* up rows n0..n1 for tokens t0..t1 into this thread's (t1-t0, n1-n0) scratch */
            const matmul_args *up = &op->part[1];
            matmul_args blk = *up;
            blk.w = (const char *)up->w + (size_t)n0 * dtype_row_bytes(up->wtype, up->k);
            blk.x16 = quant_x16_rows(up->x16, up->wtype, up->k, n0); /* n0: whole groups (MM_ROW_ALIGN) */
            blk.x = up->x + t0 * up->ldx;
            if (up->xq) blk.xq = (const uint8_t *)up->xq + t0 * up->ldxq;
            blk.y = r->up + (size_t)ith * MM_TOKEN_CHUNK * MM_MAX_ROWS;
            blk.ldy = blk.n = n1 - n0;
            mm(&blk, 0, n1 - n0, 0, t1 - t0);
            for (int64_t t = t0; t < t1; t++) r->glu(a->y + t * a->ldy + n0, blk.y + (t - t0) * blk.ldy, n1 - n0);
        }
    }
}

/* xq rows lo..hi = the stage's input rows quantized (all parts share x). */
static void stage_quantize_act(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    runner *r = arg;
    const matmul_args *a = &r->mm.part[0];
    for (int64_t t = lo; t < hi; t++) quant_quantize_act_row(a->x + t * a->ldx, r->xq + t * r->xq_stride, a->k);
}

/* xh rows lo..hi = the stage's input rows rounded to BF16 for the kernel
 * (matmul_bf16_round_act; all parts share x). */
static void stage_round_bf16(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    runner *r = arg;
    const matmul_args *a = &r->mm.part[0];
    for (int64_t t = lo; t < hi; t++)
        matmul_bf16_round_act(a->x + t * a->ldx, a->k, (char *)r->xh + t * r->xh_stride);
}

/* xa blocks lo..hi (4 tokens each) = the stage's input rows packed for the
 * AMX-BF16 kernel (all parts share x). */
static void stage_pack_amx(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    runner *r = arg;
    const matmul_args *a = &r->mm.part[0];
    int64_t t1 = hi * 4 < r->mm.tokens ? hi * 4 : r->mm.tokens;
    matmul_amx_pack_act(a->x, a->ldx, a->k, lo * 4, t1, r->xa, (int64_t)r->xa_stride);
}

/* Runs the matmul stage in r->mm; small ones (under PARALLEL_MIN_MACS) on
 * the calling thread alone. Q8_0/Q4_0 parts get r->xq, filled first;
 * BF16 parts on the BF16 compute path get r->xh, rounded first; other
 * BF16/F16 parts on AMX get r->xa, packed first. */
static void run_matmul(runner *r, int64_t tokens) {
    mm_op *op = &r->mm;
    bool act = false, amx = false, bf16 = false;
    for (int p = 0; p < op->nparts; p++)
        if (r->xh && r->cfg.bf16_compute && op->part[p].wtype == DTYPE_BF16) {
            op->part[p].xq = r->xh, op->part[p].ldxq = (int64_t)r->xh_stride;
            bf16 = true;
        } else if (r->xq && quant_has_act_kernel(op->part[p].wtype)) {
            op->part[p].xq = r->xq, op->part[p].ldxq = (int64_t)r->xq_stride;
            act = true;
        } else if (r->xa && uses_amx(op->part[p].wtype)) {
            op->part[p].xq = r->xa, op->part[p].ldxq = (int64_t)r->xa_stride;
            amx = true;
        }
    if (act) run_rows(r, stage_quantize_act, tokens);
    if (bf16) run_rows(r, stage_round_bf16, tokens);
    if (amx) {
        op->tokens = tokens;
        threadpool_run(r->pool, stage_pack_amx, r, (tokens + 3) / 4, tokens < 64 ? (tokens + 3) / 4 : 2);
    }
    mm_plan(r, op, tokens);
    int64_t items = op->first_item[op->swiglu ? 1 : op->nparts], macs = 0;
    for (int p = 0; p < op->nparts; p++) macs += op->part[p].n * op->part[p].k * tokens;
    threadpool_run(r->pool, stage_matmul, r, items, macs < PARALLEL_MIN_MACS ? items : 1);
}

/* Runs the attention stage; chunks of one (tile of a sequence's tokens,
 * kv head) unless the whole stage is small (under PARALLEL_MIN_MACS). With fewer (token, kv head)
 * items than ATT_SPLIT_ITEMS_PER_THREAD per thread (a long sequence
 * decoding alone), split-K: one item per (token, kv head, partition of the
 * context), then one merge per (token, kv head). The partitions are those
 * attention_paged scans one after the other, merged in the same order by
 * the same function (kernels.h), so a token gets the same bits either way:
 * the choice, which depends on the batch and the thread count, changes
 * only who computes what. */
static void run_attention(runner *r) {
    const step_batch *b = r->b;
    int64_t items = (int64_t)b->num_tokens * r->n_kv, ctx = 0;
    for (int32_t t = 0; t < b->num_tokens; t++) ctx += b->positions[t] + 1;
    int64_t macs = 2 * ctx * r->n_heads * r->head_dim;
    if (macs >= PARALLEL_MIN_MACS && r->nth > 1 && items < (int64_t)ATT_SPLIT_ITEMS_PER_THREAD * r->nth &&
        r->group <= ATTENTION_MAX_GROUP) {
        /* few (token, kv head) items for the threads, e.g. one long
         * sequence decoding: split each token's context into its
         * partitions, when there are several and their states fit */
        const attention_args a = layer_attention(r);
        int64_t states = 0;
        r->att_first[0] = 0;
        for (int32_t t = 0; t < b->num_tokens; t++) {
            r->att_nparts[t] = attention_num_partitions(&a, b->positions[t] + 1);
            states += (int64_t)r->att_nparts[t] * r->n_kv;
            if (states > ATT_SPLIT_MAX_STATES) break;
            r->att_first[t + 1] = (int32_t)states;
        }
        if (states > items && states <= ATT_SPLIT_MAX_STATES) {
            threadpool_run(r->pool, stage_attention_part, r, states, 1);
            threadpool_run(r->pool, stage_attention_merge, r, items, 1);
            return;
        }
    }
    /* tiles: runs of up to ATT_TILE_TOKENS tokens of one sequence, from
     * ATT_TILE_MIN_CTX positions of context on (shorter contexts stay in
     * L2 and tiles only add their state's traffic: docs/bench.md); tiles of
     * one token when the tiles would leave threads idle (a sequence's few
     * scored tokens in a speculative step: 5 tokens x 3 KV heads are 3
     * tiles for 2 threads, but 15 tokens). A token's bits do not depend on
     * its tile (kernels.h) */
    int32_t tile = ATT_TILE_TOKENS;
    for (;;) {
        r->att_ntiles = 0;
        for (int32_t t = 0; t < b->num_tokens; t++)
            if (t == 0 || r->token_seq[t] != r->token_seq[t - 1] || t - r->att_tile[r->att_ntiles - 1] == tile ||
                b->positions[t] < ATT_TILE_MIN_CTX || b->positions[t - 1] < ATT_TILE_MIN_CTX)
                r->att_tile[r->att_ntiles++] = t;
        r->att_tile[r->att_ntiles] = b->num_tokens;
        if (tile == 1 || (int64_t)r->att_ntiles * r->n_kv >= (int64_t)ATT_SPLIT_ITEMS_PER_THREAD * r->nth) break;
        tile = 1;
    }
    items = (int64_t)r->att_ntiles * r->n_kv;
    threadpool_run(r->pool, stage_attention, r, items, macs < PARALLEL_MIN_MACS ? items : 1);
}

/* ---- LoRA ------------------------------------------------------------------ */

/* y += the step's adapter deltas of module mod in the current layer. */
static void lora_stage(runner *r, lora_module mod, const float *x, int64_t ldx, float *y, int64_t ldy) {
    if (r->lora.num_runs && lora_batch_has(&r->lora, r->layer, mod))
        lora_apply(&r->lora, r->layer, mod, x, ldx, y, ldy, r->pool);
}

/* hb[t] = act(hb[t]) * upfull[t]: the GLU of the unfused gate/up stage. */
static void stage_glu(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    runner *r = arg;
    for (int64_t t = lo; t < hi; t++) r->glu(r->hb + t * r->inter, r->upfull + t * r->inter, r->inter);
}

/* ---- the forward pass ---------------------------------------------------- */

/* logits = lm_head(norm(x[scored_indices])) (softcapped for Gemma). */
static void forward_logits(runner *r, float *logits) {
    run_rows(r, stage_final_norm, r->b->num_scored);
    r->mm = (mm_op){.nparts = 1};
    r->mm.part[0] = mm_args(logits, r->vocab, r->xb, r->dim, &r->m->w.lm_head, NULL, false);
    run_matmul(r, r->b->num_scored);
    if (r->m->config.final_logit_softcapping > 0) {
        r->logits = logits;
        threadpool_run(r->pool, stage_softcap, r, r->b->num_scored, 1);
        r->logits = NULL;
    }
}

/* x[t] += xb[t]: a summed partial output joins the residual stream. */
static void stage_add_xb(void *arg, int64_t lo, int64_t hi, int ith) {
    runner *r = arg;
    for (int64_t t = lo; t < hi; t++) {
        float *x = r->x + t * r->dim;
        const float *y = r->xb + t * r->dim;
        for (int32_t i = 0; i < r->dim; i++) x[i] += y[i];
    }
}

/* Tensor parallel: xb holds this rank's partial o_proj / down_proj rows;
 * sums them across the ranks, then adds them to x (unless post: Gemma's
 * post-norm does that from xb). */
static vllm_status reduce_residual(runner *r, int64_t T, bool post) {
    vllm_status rc = r->cfg.all_reduce(r->cfg.reduce_ctx, r->xb, T * r->dim);
    if (rc == VLLM_OK && !post) run_rows(r, stage_add_xb, T);
    return rc;
}

vllm_status runner_forward(runner *r, const step_batch *b, float *logits) {
    vllm_status rc = check_batch(r, b);
    if (rc == VLLM_OK) rc = check_copies(r, b);
    if (rc == VLLM_OK && b->num_scored && !logits && !r->cfg.skip_logits) rc = vllm_error(VLLM_ERR_INVALID, "runner: logits buffer is NULL");
    if (rc != VLLM_OK) return rc;
    for (int32_t c = 0; c < b->num_copies; c++) runner_copy_block(r, b->copies[2 * c], b->copies[2 * c + 1]);
    if (b->num_tokens == 0) return VLLM_OK;
    const model_weights *w = &r->m->w;
    int64_t T = b->num_tokens;
    r->b = b;
    for (int32_t s = 0; s < b->num_seqs; s++)
        for (int32_t t = b->query_start_loc[s]; t < b->query_start_loc[s + 1]; t++) r->token_seq[t] = s;
    r->lora.num_runs = 0;
    if (b->lora_ids) {
        if (!r->cfg.lora) {
            for (int32_t s = 0; s < b->num_seqs; s++)
                if (b->lora_ids[s]) {
                    r->b = NULL;
                    return vllm_error(VLLM_ERR_INVALID, "runner: sequence %d has LoRA id %d, LoRA is not enabled",
                                      s, b->lora_ids[s]);
                }
        } else if ((rc = lora_batch_build(&r->lora, r->cfg.lora, b->lora_ids, b->num_seqs, r->token_seq,
                                          b->num_tokens)) != VLLM_OK) {
            r->b = NULL;
            return rc;
        }
    }

    run_rows(r, stage_embed, T);
    for (int32_t l = 0; l < r->n_layers; l++) {
        const layer_weights *lw = &w->layers[l];
        r->layer = l;
        run_rows(r, stage_input_norm, T);

        r->mm = (mm_op){.nparts = 3};
        r->mm.part[0] = mm_args(r->q, r->q_dim, r->xb, r->dim, &lw->q_proj, lw->q_bias.data ? &lw->q_bias : NULL, false);
        r->mm.part[1] = mm_args(r->k, r->kv_dim, r->xb, r->dim, &lw->k_proj, lw->k_bias.data ? &lw->k_bias : NULL, false);
        r->mm.part[2] = mm_args(r->v, r->kv_dim, r->xb, r->dim, &lw->v_proj, lw->v_bias.data ? &lw->v_bias : NULL, false);
        run_matmul(r, T);
        lora_stage(r, LORA_Q, r->xb, r->dim, r->q, r->q_dim);
        lora_stage(r, LORA_K, r->xb, r->dim, r->k, r->kv_dim);
        lora_stage(r, LORA_V, r->xb, r->dim, r->v, r->kv_dim);

        run_rows(r, stage_rope_store, T);
        if (r->hooks.before_attention && (rc = r->hooks.before_attention(r->hooks.ctx, l)) != VLLM_OK) break;
        run_attention(r);
        if (r->hooks.after_layer && (rc = r->hooks.after_layer(r->hooks.ctx, l)) != VLLM_OK) break;

        /* o_proj adds into the residual stream, or (Gemma) goes through
         * its post-norm first */
        bool post = r->m->config.post_norms;
        bool split = r->cfg.all_reduce != NULL; /* tensor parallel: partial sums into xb, summed, added */
        r->mm = (mm_op){.nparts = 1};
        r->mm.part[0] = mm_args(post || split ? r->xb : r->x, r->dim, r->att, r->q_dim, &lw->o_proj,
                                lw->o_bias.data ? &lw->o_bias : NULL, !post && !split);
        run_matmul(r, T);
        lora_stage(r, LORA_O, r->att, r->q_dim, post || split ? r->xb : r->x, r->dim);
        if (split && (rc = reduce_residual(r, T, post)) != VLLM_OK) break;
        if (post) run_rows(r, stage_attn_post_norm, T);

        run_rows(r, stage_post_norm, T);
        if (lw->moe) { /* x += the sparse block's output (no LoRA, TP or post-norms: runner_create) */
            moe_forward(r->moe, lw->moe, r->xb, r->dim, r->x, r->dim, T, r->pool);
            continue;
        }

        if (r->lora.num_runs && (lora_batch_has(&r->lora, l, LORA_GATE) || lora_batch_has(&r->lora, l, LORA_UP))) {
            r->mm = (mm_op){.nparts = 2};
            r->mm.part[0] = mm_args(r->hb, r->inter, r->xb, r->dim, &lw->gate_proj, NULL, false);
            r->mm.part[1] = mm_args(r->upfull, r->inter, r->xb, r->dim, &lw->up_proj, NULL, false);
            run_matmul(r, T);
            lora_stage(r, LORA_GATE, r->xb, r->dim, r->hb, r->inter);
            lora_stage(r, LORA_UP, r->xb, r->dim, r->upfull, r->inter);
            run_rows(r, stage_glu, T);
        } else {
            r->mm = (mm_op){.nparts = 2, .swiglu = true};
            r->mm.part[0] = mm_args(r->hb, r->inter, r->xb, r->dim, &lw->gate_proj, NULL, false);
            r->mm.part[1] = mm_args(NULL, 0, r->xb, r->dim, &lw->up_proj, NULL, false);
            run_matmul(r, T);
        }

        r->mm = (mm_op){.nparts = 1};
        r->mm.part[0] = mm_args(post || split ? r->xb : r->x, r->dim, r->hb, r->inter, &lw->down_proj, NULL,
                                !post && !split);
        run_matmul(r, T);
        lora_stage(r, LORA_DOWN, r->hb, r->inter, post || split ? r->xb : r->x, r->dim);
        if (split && (rc = reduce_residual(r, T, post)) != VLLM_OK) break;
        if (post) run_rows(r, stage_ffn_post_norm, T);
    }
    if (rc != VLLM_OK) {
        r->b = NULL;
        return rc;
    }
    if (b->num_scored && !r->cfg.skip_logits) forward_logits(r, logits);
    r->b = NULL;
    return VLLM_OK;
}

float *runner_hidden(runner *r) { return r->x; }

vllm_status runner_logits(runner *r, const step_batch *b, float *logits) {
    vllm_status rc = check_batch(r, b);
    if (rc != VLLM_OK) return rc;
    if (!b->num_scored) return VLLM_OK;
    if (!logits || !r->m->w.lm_head.data)
        return vllm_error(VLLM_ERR_INVALID, "runner: no logits buffer, or no lm_head on this rank");
    r->b = b;
    forward_logits(r, logits);
    r->b = NULL;
    return VLLM_OK;
}
