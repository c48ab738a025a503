/*
 * test_forward.c - the runner at batch level.
 *
 *  - batch invariance: a sequence's logits at every position are
 *    memcmp-identical alone, prefilled in chunks of 1, 7 or 64, inside a batch
 *    of 64 mixed requests (some prefilling, some decoding, joining at different
 *    steps), and with 1 or 3 threads; on in-memory random models of each
 *    architecture variant and dtype (odd sizes: head_dim 12, dim 44), and
 *    with the KV cache in each --kv-cache-dtype (FP8 also with per-layer
 *    k_scale/v_scale);
 *  - long contexts (1100 positions, three 512-position attention
 *    partitions): decoding alone on 2 or 3 threads (the runner's split-K
 *    path) and beside short sequences gives one prefill's bits on 1 thread;
 *  - the KV accessors and block copies in each KV cache dtype;
 *  - validation: every malformed batch is VLLM_ERR_INVALID, with a message;
 *  - golden: greedy decoding from BOS on models/stories260K, one token per
 *    step through the paged KV, reproduces llama2.c's 200 ids, and so does a
 *    batched replay of the same tokens (with the same logits, bit for bit).
 *
 * The numerics themselves are checked against PyTorch by test_forward_ref.sh.
 */
/* checks: 13 */
/* tags: tsan */
/* variant: VLLM_KERNELS=avx2 needs avx2 */
/* variant: VLLM_KERNELS=portable */
/* variant: VLLM_QUANT_ORDER=wide needs avx512 */
/* variant: VLLM_AMX=0 needs amx */
/* variant: VLLM_AMX=f16 needs amx-bf16 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "kernels/quant.h"
#include "model/model.h"
#include "model/runner.h"

/* ---- in-memory random models ---------------------------------------------- */

static uint64_t rng = 0x2545f4914f6cdd1du;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

typedef struct fake_model {
    model m;
    layer_weights layers[3];
    void *bufs[64];
    int nbufs;
} fake_model;

/* A (rows, cols) tensor of offset + scale * uniform values. */
static tensor fake_tensor(fake_model *f, dtype t, int64_t rows, int64_t cols, float offset, float scale) {
    int64_t n = rows * cols;
    if (dtype_is_quantized(t) && cols == 1) t = DTYPE_F32; /* GGUF keeps 1-D tensors in F32 */
    if (dtype_is_quantized(t)) { /* Q8_0 / Q4_0 rows quantized from random F32 rows */
        size_t rb = dtype_row_bytes(t, cols);
        uint8_t *q = malloc((size_t)rows * rb);
        float *row = malloc(sizeof(float) * (size_t)cols);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < cols; i++) row[i] = offset + scale * frand();
            if (t == DTYPE_Q8_0) quant_quantize_row_q8_0(row, q + (size_t)r * rb, cols);
            else quant_quantize_row_q4_0(row, q + (size_t)r * rb, cols);
        }
        free(row);
        f->bufs[f->nbufs++] = q;
        return (tensor){.type = t, .ndim = 2, .shape = {rows, cols}, .data = q};
    }
    void *p = malloc((size_t)n * dtype_size(t));
    for (int64_t i = 0; i < n; i++) {
        float v = offset + scale * frand();
        if (t == DTYPE_F32) ((float *)p)[i] = v;
        else if (t == DTYPE_BF16) ((uint16_t *)p)[i] = f32_to_bf16(v);
        else ((uint16_t *)p)[i] = f32_to_f16(v);
    }
    f->bufs[f->nbufs++] = p;
    return (tensor){.type = t, .ndim = cols > 1 ? 2 : 1, .shape = {cols > 1 ? rows : rows * cols, cols > 1 ? cols : 0},
                    .data = p};
}

static void fake_model_free(fake_model *f) {
    model_free_x16(&f->m);
    for (int i = 0; i < f->nbufs; i++) free(f->bufs[i]);
    free(f);
}

static fake_model *fake_model_create(model_arch arch, dtype t, bool tied) {
    fake_model *f = calloc(1, sizeof *f);
    model_config *c = &f->m.config;
    c->arch = arch;
    c->hidden_size = 44;
    c->intermediate_size = 100;
    c->num_hidden_layers = 3;
    c->num_attention_heads = 6;
    c->num_key_value_heads = 2;
    c->head_dim = 12;
    c->vocab_size = 97;
    c->max_position_embeddings = 256;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_word_embeddings = tied;
    c->attention_bias = arch == MODEL_ARCH_QWEN2;
    c->qk_norm = arch == MODEL_ARCH_QWEN3;
    if (dtype_is_quantized(t)) { /* a GGUF-like llama: block-multiple dims, interleaved RoPE */
        c->hidden_size = 64;
        c->intermediate_size = 96;
        c->num_attention_heads = 4;
        c->head_dim = 16;
        c->rope_interleaved = true;
    }
    int64_t dim = c->hidden_size, in = c->intermediate_size;
    int64_t q = (int64_t)c->num_attention_heads * c->head_dim, kv = (int64_t)c->num_key_value_heads * c->head_dim;
    float s = 0.3f;
    f->m.w.embed_tokens = fake_tensor(f, t, c->vocab_size, dim, 0, 1);
    f->m.w.layers = f->layers;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        layer_weights *lw = &f->layers[l];
        lw->input_layernorm = fake_tensor(f, t, dim, 1, 1, 0.1f);
        lw->q_proj = fake_tensor(f, t, q, dim, 0, s);
        lw->k_proj = fake_tensor(f, t, kv, dim, 0, s);
        lw->v_proj = fake_tensor(f, t, kv, dim, 0, s);
        lw->o_proj = fake_tensor(f, t, dim, q, 0, s);
        if (c->attention_bias) {
            lw->q_bias = fake_tensor(f, t, q, 1, 0, 0.1f);
            lw->k_bias = fake_tensor(f, t, kv, 1, 0, 0.1f);
            lw->v_bias = fake_tensor(f, t, kv, 1, 0, 0.1f);
        }
        if (c->qk_norm) {
            lw->q_norm = fake_tensor(f, t, c->head_dim, 1, 1, 0.1f);
            lw->k_norm = fake_tensor(f, t, c->head_dim, 1, 1, 0.1f);
        }
        lw->post_attention_layernorm = fake_tensor(f, t, dim, 1, 1, 0.1f);
        lw->gate_proj = fake_tensor(f, t, in, dim, 0, s);
        lw->up_proj = fake_tensor(f, t, in, dim, 0, s);
        lw->down_proj = fake_tensor(f, t, dim, in, 0, s);
    }
    f->m.w.norm = fake_tensor(f, t, dim, 1, 1, 0.1f);
    f->m.w.lm_head = tied ? f->m.w.embed_tokens : fake_tensor(f, t, c->vocab_size, dim, 0, s);
    model_make_x16(&f->m); /* what model_load does: Q8_0/Q4_0 weights of whole 16-row groups get copies */
    return f;
}

/* ---- a tiny scheduler: sequences of fixed tokens, fed in chunks ------------ */

enum { MAX_SEQS = 64, MAX_LEN = 1152, BLOCK_SIZE = 16, NUM_BLOCKS = 1200, MAX_BLOCKS = MAX_LEN / BLOCK_SIZE };

typedef struct sim_seq {
    const int32_t *tokens;
    int32_t len;
    int32_t chunk;          /* tokens fed per step */
    int32_t start_step;     /* first step it is scheduled in */
    int32_t done;           /* tokens fed so far */
    int32_t blocks[MAX_BLOCKS];
    float *logits;          /* (len, vocab): logits at every position */
} sim_seq;

/* Runs steps until every sequence is fed, at most budget tokens per step.
 * Physical blocks are handed out from a scrambled order (the pool position of
 * a block says nothing about its sequence). Returns the runner's status. */
static vllm_status sim_run(runner *r, int32_t vocab, sim_seq *seqs, int n, int32_t budget) {
    static int32_t ids[4096], pos[4096], qsl[MAX_SEQS + 1], lens[MAX_SEQS], tables[MAX_SEQS * MAX_BLOCKS],
        lidx[4096], owner[MAX_SEQS];
    static int64_t slots[4096];
    static float logits[512 * 512];
    int32_t next_block = 0;
    for (int s = 0; s < n; s++) seqs[s].done = 0;
    for (int step = 0;; step++) {
        int32_t nt = 0, ns = 0, left = 0;
        for (int s = 0; s < n; s++) left += seqs[s].len - seqs[s].done;
        if (!left) return VLLM_OK;
        qsl[0] = 0;
        for (int s = 0; s < n; s++) {
            sim_seq *q = &seqs[s];
            int32_t take = q->len - q->done;
            if (take > q->chunk) take = q->chunk;
            if (take > budget - nt) take = budget - nt;
            if (step < q->start_step || take <= 0) continue;
            for (int32_t i = 0; i < take; i++) {
                int32_t p = q->done + i;
                if (p % BLOCK_SIZE == 0) q->blocks[p / BLOCK_SIZE] = (int32_t)((next_block++ * 337L) % NUM_BLOCKS);
                ids[nt] = q->tokens[p];
                pos[nt] = p;
                slots[nt] = (int64_t)q->blocks[p / BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE;
                lidx[nt] = nt;
                nt++;
            }
            memcpy(tables + ns * MAX_BLOCKS, q->blocks, sizeof q->blocks);
            lens[ns] = q->done + take;
            owner[ns] = s;
            qsl[++ns] = nt;
        }
        step_batch b = {.num_tokens = nt, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                          .num_seqs = ns, .query_start_loc = qsl, .seq_lens = lens, .block_tables = tables,
                          .max_blocks_per_seq = MAX_BLOCKS, .num_scored = nt, .scored_indices = lidx};
        vllm_status rc = runner_forward(r, &b, logits);
        if (rc != VLLM_OK) return rc;
        for (int i = 0; i < ns; i++) {
            sim_seq *q = &seqs[owner[i]];
            for (int32_t t = qsl[i]; t < qsl[i + 1]; t++)
                memcpy(q->logits + (size_t)pos[t] * vocab, logits + (size_t)t * vocab, sizeof(float) * (size_t)vocab);
            q->done += qsl[i + 1] - qsl[i];
        }
    }
}

static runner *make_runner_kv(const model *m, int threads, kv_dtype kv) {
    runner_config cfg = {.num_blocks = NUM_BLOCKS, .block_size = BLOCK_SIZE, .max_num_batched_tokens = 512,
                         .max_num_seqs = MAX_SEQS, .num_threads = threads, .kv_cache_dtype = kv};
    runner *r = NULL;
    vllm_status rc = runner_create(m, &cfg, &r);
    if (rc != VLLM_OK) fprintf(stderr, "runner_create: %s\n", vllm_errmsg());
    return r;
}

static runner *make_runner(const model *m, int threads) { return make_runner_kv(m, threads, KV_DTYPE_F32); }

/* Logits of `tokens` at every position under one schedule; caller frees. */
static float *logits_alone(runner *r, int32_t vocab, const int32_t *tokens, int32_t len, int32_t chunk) {
    sim_seq s = {.tokens = tokens, .len = len, .chunk = chunk, .logits = calloc((size_t)len * vocab, sizeof(float))};
    if (sim_run(r, vocab, &s, 1, 512) != VLLM_OK) {
        free(s.logits);
        return NULL;
    }
    return s.logits;
}

/* Sequence 0 alone in one prefill, in chunks of 1, 7 and 64, inside a batch of
 * 64 mixed requests, and with another thread count: identical bits. */
static void check_invariance_kv(const model *m, const char *what, kv_dtype kv) {
    int32_t vocab = m->config.vocab_size, len = 150;
    int32_t *tokens = malloc(sizeof(int32_t) * MAX_SEQS * MAX_LEN);
    for (int i = 0; i < MAX_SEQS * MAX_LEN; i++) tokens[i] = (int32_t)((frand() + 1) * 0.5f * (vocab - 1));
    runner *r = make_runner_kv(m, 2, kv), *r3 = make_runner_kv(m, 3, kv);
    CHECK(r && r3, "runner_create");
    float *ref = logits_alone(r, vocab, tokens, len, 512);
    CHECK(ref, "%s: forward failed: %s", what, vllm_errmsg());
    size_t bytes = sizeof(float) * (size_t)len * vocab;
    bool finite = true;
    for (size_t i = 0; i < (size_t)len * vocab; i++) finite &= isfinite(ref[i]);
    CHECK(finite, "%s: non-finite logits", what);

    const int32_t chunks[] = {1, 7, 64};
    for (int c = 0; c < 3; c++) {
        float *got = logits_alone(r, vocab, tokens, len, chunks[c]);
        bool same = got && !memcmp(got, ref, bytes);
        free(got);
        CHECK(same, "%s: prefill in chunks of %d differs from one prefill", what, chunks[c]);
    }
    float *got3 = logits_alone(r3, vocab, tokens, len, 64);
    bool same3 = got3 && !memcmp(got3, ref, bytes);
    free(got3);
    CHECK(same3, "%s: 3 threads differ from 2", what);

    /* 64 sequences: different lengths, chunk sizes (1 = decoding) and start
     * steps; sequence 0 joins late, in chunks of 7, beside them. */
    sim_seq seqs[MAX_SEQS];
    for (int s = 0; s < MAX_SEQS; s++) {
        seqs[s] = (sim_seq){.tokens = s ? tokens + s * MAX_LEN : tokens,
                            .len = s ? 1 + (s * 37) % 120 : len,
                            .chunk = s ? (s % 3 == 0 ? 1 : 5 + s % 29) : 7,
                            .start_step = s ? s % 6 : 4};
        seqs[s].logits = calloc((size_t)seqs[s].len * vocab, sizeof(float));
    }
    vllm_status rc = sim_run(r, vocab, seqs, MAX_SEQS, 300);
    bool same = rc == VLLM_OK && !memcmp(seqs[0].logits, ref, bytes);
    for (int s = 0; s < MAX_SEQS; s++) free(seqs[s].logits);
    free(ref);
    free(tokens);
    runner_free(r);
    runner_free(r3);
    CHECK(rc == VLLM_OK, "%s: batch of 64: %s", what, vllm_errmsg());
    CHECK(same, "%s: logits inside a batch of 64 differ from alone", what);
}

static void check_invariance(const model *m, const char *what) { check_invariance_kv(m, what, KV_DTYPE_F32); }

TEST(test_invariance_llama_f32_untied) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_F32, false);
    check_invariance(&f->m, "llama f32");
    fake_model_free(f);
}

TEST(test_invariance_qwen2_bf16) {
    fake_model *f = fake_model_create(MODEL_ARCH_QWEN2, DTYPE_BF16, false);
    check_invariance(&f->m, "qwen2 bf16");
    fake_model_free(f);
}

TEST(test_invariance_qwen3_f16_tied) {
    fake_model *f = fake_model_create(MODEL_ARCH_QWEN3, DTYPE_F16, true);
    check_invariance(&f->m, "qwen3 f16");
    fake_model_free(f);
}

TEST(test_invariance_llama_q8_0_gguf) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_Q8_0, false);
    check_invariance(&f->m, "llama q8_0");
    fake_model_free(f);
}

TEST(test_invariance_llama_q4_0_gguf_tied) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_Q4_0, true);
    check_invariance(&f->m, "llama q4_0");
    fake_model_free(f);
}

/* The same with the KV pool in each 16- and 8-bit type; the FP8 ones also
 * with per-layer k_scale / v_scale (folded into the attention kernel). */
TEST(test_invariance_kv_cache_dtypes) {
    fake_model *f = fake_model_create(MODEL_ARCH_QWEN3, DTYPE_BF16, false);
    for (int t = KV_DTYPE_BF16; t < KV_DTYPE_COUNT; t++) {
        check_invariance_kv(&f->m, kv_dtype_name((kv_dtype)t), (kv_dtype)t);
        if (harness_failed()) break;
    }
    for (int32_t l = 0; l < f->m.config.num_hidden_layers; l++)
        f->m.w.layers[l].k_scale = 0.75f + 0.5f * (float)l, f->m.w.layers[l].v_scale = 1.5f / (float)(l + 1);
    if (!harness_failed()) check_invariance_kv(&f->m, "fp8_e4m3 with scales", KV_DTYPE_FP8_E4M3);
    if (!harness_failed()) check_invariance_kv(&f->m, "fp8_e5m2 with scales", KV_DTYPE_FP8_E5M2);
    fake_model_free(f);
}

/* Long contexts (several 512-position attention partitions): one sequence
 * of 1100 tokens decoded one token per step on 2 and 3 threads (too few
 * (token, kv head) items for the threads, so the runner splits each
 * token's context across them: split-K) and beside 3 short sequences gives
 * the bits of one prefill in chunks of 512 on 1 thread (no split). */
TEST(test_invariance_long_context_split_k) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_F32, false);
    f->m.config.max_position_embeddings = 2048;
    int32_t vocab = f->m.config.vocab_size, len = 1100;
    int32_t *tokens = malloc(sizeof(int32_t) * 4 * MAX_LEN);
    for (int i = 0; i < 4 * MAX_LEN; i++) tokens[i] = (int32_t)((frand() + 1) * 0.5f * (vocab - 1));
    runner *r1 = make_runner(&f->m, 1), *r2 = make_runner(&f->m, 2), *r3 = make_runner(&f->m, 3);
    CHECK(r1 && r2 && r3, "runner_create");
    float *ref = logits_alone(r1, vocab, tokens, len, 512);
    float *got2 = logits_alone(r2, vocab, tokens, len, 1), *got3 = logits_alone(r3, vocab, tokens, len, 1);
    size_t bytes = sizeof(float) * (size_t)len * vocab;
    bool ok = ref && got2 && got3, same2 = ok && !memcmp(got2, ref, bytes), same3 = ok && !memcmp(got3, ref, bytes);
    sim_seq seqs[4];
    for (int s = 0; s < 4; s++)
        seqs[s] = (sim_seq){.tokens = tokens + s * MAX_LEN, .len = s ? 40 * s : len, .chunk = s ? 3 : 1,
                            .start_step = s ? 600 + 5 * s : 0,
                            .logits = calloc((size_t)(s ? 40 * s : len) * vocab, sizeof(float))};
    vllm_status rc = sim_run(r3, vocab, seqs, 4, 512);
    bool same_b = ok && rc == VLLM_OK && !memcmp(seqs[0].logits, ref, bytes);
    for (int s = 0; s < 4; s++) free(seqs[s].logits);
    free(ref), free(got2), free(got3), free(tokens);
    runner_free(r1), runner_free(r2), runner_free(r3);
    fake_model_free(f);
    CHECK(ok, "forward failed: %s", vllm_errmsg());
    CHECK(same2 && same3, "decoding 1100 tokens one by one on %s threads differs from one prefill on 1",
          same2 ? "3" : "2");
    CHECK(same_b, "a long sequence decoding beside 3 short ones differs from alone");
}

/* ---- validation -------------------------------------------------------------- */

TEST(test_invalid_batches) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_F32, false);
    runner *r = make_runner(&f->m, 1);
    CHECK(r, "runner_create");
    int32_t ids[3] = {5, 6, 7}, pos[3] = {0, 1, 2}, qsl[2] = {0, 3}, lens[1] = {3}, table[MAX_BLOCKS] = {9},
            lidx[1] = {2};
    int64_t slots[3] = {9 * 16, 9 * 16 + 1, 9 * 16 + 2};
    float logits[97];
    step_batch good = {.num_tokens = 3, .token_ids = ids, .positions = pos, .slot_mapping = slots, .num_seqs = 1,
                         .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                         .max_blocks_per_seq = MAX_BLOCKS, .num_scored = 1, .scored_indices = lidx};
    CHECK(runner_forward(r, &good, logits) == VLLM_OK, "%s", vllm_errmsg());

    typedef struct bad_batch { const char *what; step_batch b; } bad_batch;
    bad_batch bad[16];
    int nbad = 0;
#define BAD(desc, field, value) bad[nbad] = (bad_batch){desc, good}, bad[nbad++].b.field = value
    int32_t ids_bad[3] = {5, 97, 7}, pos_bad[3] = {0, 2, 2}, qsl_bad[2] = {0, 2}, lens_bad[1] = {2},
            table_bad[MAX_BLOCKS] = {NUM_BLOCKS}, lidx_bad[1] = {3};
    int64_t slots_bad[3] = {9 * 16, 9 * 16 + 5, 9 * 16 + 2};
    BAD("token id >= vocab", token_ids, ids_bad);
    BAD("position out of order", positions, pos_bad);
    BAD("query_start_loc does not end at num_tokens", query_start_loc, qsl_bad);
    BAD("seq_len shorter than the new tokens", seq_lens, lens_bad);
    BAD("block id outside the pool", block_tables, table_bad);
    BAD("slot not where the block table says", slot_mapping, slots_bad);
    BAD("logits index >= num_tokens", scored_indices, lidx_bad);
    BAD("too many tokens", num_tokens, 513);
    BAD("negative tokens", num_tokens, -1);
    BAD("too many sequences", num_seqs, MAX_SEQS + 1);
    BAD("too many logits", num_scored, 513);
    BAD("no block table", block_tables, NULL);
    BAD("max_blocks_per_seq too small for seq_len", max_blocks_per_seq, 0);
#undef BAD
    for (int i = 0; i < nbad; i++) {
        vllm_error(VLLM_OK, "%s", "");
        vllm_status rc = runner_forward(r, &bad[i].b, logits);
        CHECK(rc == VLLM_ERR_INVALID, "%s: got status %d", bad[i].what, rc);
        CHECK(strncmp(vllm_errmsg(), "runner", 6) == 0, "%s: message '%s'", bad[i].what, vllm_errmsg());
    }
    CHECK(runner_copy_block(r, 9, NUM_BLOCKS) == VLLM_ERR_INVALID, "copy to a block outside the pool");
    CHECK(runner_copy_block(r, 9, 10) == VLLM_OK, "%s", vllm_errmsg());

    runner_config cfg = {.num_blocks = 0, .block_size = 16, .max_num_batched_tokens = 8, .max_num_seqs = 1};
    runner *r2 = NULL;
    CHECK(runner_create(&f->m, &cfg, &r2) == VLLM_ERR_INVALID && !r2, "num_blocks 0 accepted");
    runner_free(r);
    fake_model_free(f);
}

/* Copy-on-write: a block copied to another serves the same attention (in
 * each KV cache dtype). */
static void check_copy_block(kv_dtype kv) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_F32, false);
    runner *r = make_runner_kv(&f->m, 1, kv);
    CHECK(r, "runner_create");
    int32_t ids[20], pos[20], qsl[2] = {0, 20}, lens[1] = {20}, table[MAX_BLOCKS] = {3, 4}, lidx[1] = {19};
    int64_t slots[20];
    for (int i = 0; i < 20; i++) ids[i] = i + 1, pos[i] = i, slots[i] = (i < 16 ? 3 * 16 : 4 * 16 - 16) + i;
    float a[97], b2[97];
    step_batch b = {.num_tokens = 20, .token_ids = ids, .positions = pos, .slot_mapping = slots, .num_seqs = 1,
                      .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                      .max_blocks_per_seq = MAX_BLOCKS, .num_scored = 1, .scored_indices = lidx};
    CHECK(runner_forward(r, &b, a) == VLLM_OK, "%s", vllm_errmsg());
    /* decode position 20 with block 3 copied to 7 */
    CHECK(runner_copy_block(r, 3, 7) == VLLM_OK, "%s", vllm_errmsg());
    int32_t id1[1] = {42}, pos1[1] = {20}, qsl1[2] = {0, 1}, len1[1] = {21}, t1[MAX_BLOCKS] = {3, 4}, t2[MAX_BLOCKS] = {7, 4},
            li[1] = {0};
    int64_t s1[1] = {4 * 16 + 4};
    step_batch d = {.num_tokens = 1, .token_ids = id1, .positions = pos1, .slot_mapping = s1, .num_seqs = 1,
                      .query_start_loc = qsl1, .seq_lens = len1, .block_tables = t1, .max_blocks_per_seq = MAX_BLOCKS,
                      .num_scored = 1, .scored_indices = li};
    CHECK(runner_forward(r, &d, a) == VLLM_OK, "%s", vllm_errmsg());
    d.block_tables = t2;
    CHECK(runner_forward(r, &d, b2) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(!memcmp(a, b2, sizeof a), "%s: logits through the copied block differ", kv_dtype_name(kv));
    runner_free(r);
    fake_model_free(f);
}

TEST(test_copy_block) {
    for (int t = 0; t < KV_DTYPE_COUNT && !harness_failed(); t++) check_copy_block((kv_dtype)t);
}

/* ---- golden: stories260K ------------------------------------------------------ */

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

TEST(test_stories260K_greedy_golden) {
    json_error_t jerr;
    json_t *ref = json_load_file("models/stories260K/reference_bos_greedy200.json", 0, &jerr);
    CHECK(ref, "reference json: %s", jerr.text);
    json_t *arr = json_object_get(ref, "greedy_ids");
    int32_t want[200];
    CHECK(json_array_size(arr) == 200, "expected 200 ids");
    for (int i = 0; i < 200; i++) want[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    json_decref(ref);

    model *m = NULL;
    CHECK(model_load("models/stories260K", &m) == VLLM_OK, "model_load: %s", vllm_errmsg());
    int32_t vocab = m->config.vocab_size;
    runner *r = make_runner(m, 2);
    CHECK(r, "runner_create");

    /* decode: one token per step; step i feeds token i and reads logits for i+1 */
    int32_t seq[201] = {1};
    float *decode_logits = calloc((size_t)200 * vocab, sizeof(float));
    int32_t table[MAX_BLOCKS];
    for (int j = 0; j < MAX_BLOCKS; j++) table[j] = (int32_t)((j * 7 + 3) % NUM_BLOCKS);
    int first_bad = -1;
    for (int i = 0; i < 200; i++) {
        int32_t pos = i, qsl[2] = {0, 1}, len = i + 1, li = 0;
        int64_t slot = (int64_t)table[i / BLOCK_SIZE] * BLOCK_SIZE + i % BLOCK_SIZE;
        step_batch b = {.num_tokens = 1, .token_ids = &seq[i], .positions = &pos, .slot_mapping = &slot,
                          .num_seqs = 1, .query_start_loc = qsl, .seq_lens = &len, .block_tables = table,
                          .max_blocks_per_seq = MAX_BLOCKS, .num_scored = 1, .scored_indices = &li};
        CHECK(runner_forward(r, &b, decode_logits + (size_t)i * vocab) == VLLM_OK, "%s", vllm_errmsg());
        seq[i + 1] = argmax(decode_logits + (size_t)i * vocab, vocab);
        if (seq[i + 1] != want[i] && first_bad < 0) first_bad = i;
    }
    CHECK(first_bad < 0, "greedy id %d is %d, llama2.c says %d", first_bad, seq[first_bad + 1], want[first_bad]);

    /* replay: the same 200 tokens as one prefill, and in chunks of 7 beside another sequence */
    sim_seq s[2] = {{.tokens = seq, .len = 200, .chunk = 512, .logits = calloc((size_t)200 * vocab, sizeof(float))},
                    {.tokens = want, .len = 100, .chunk = 3, .logits = calloc((size_t)100 * vocab, sizeof(float))}};
    CHECK(sim_run(r, vocab, s, 1, 512) == VLLM_OK, "%s", vllm_errmsg());
    for (int i = 0; i < 200; i++)
        CHECK(argmax(s[0].logits + (size_t)i * vocab, vocab) == want[i], "replayed prefill: position %d", i);
    bool same_prefill = !memcmp(s[0].logits, decode_logits, sizeof(float) * 200 * (size_t)vocab);
    s[0].chunk = 7;
    CHECK(sim_run(r, vocab, s, 2, 512) == VLLM_OK, "%s", vllm_errmsg());
    bool same_chunked = !memcmp(s[0].logits, decode_logits, sizeof(float) * 200 * (size_t)vocab);
    free(s[0].logits);
    free(s[1].logits);
    free(decode_logits);
    runner_free(r);
    model_free(m);
    CHECK(same_prefill, "logits of the one-shot prefill differ from decoding");
    CHECK(same_chunked, "logits of the chunked, batched prefill differ from decoding");
}

/* The KV accessors: a sequence's blocks read out layer by layer and written
 * into other blocks serve the same attention as the originals (what a KV
 * connector does between instances), in the pool's own dtype; bad layers
 * and blocks are refused. */
static void check_kv_read_write_blocks(kv_dtype kv) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_F32, false);
    runner *r = make_runner_kv(&f->m, 1, kv);
    CHECK(r, "runner_create");
    int32_t ids[20], pos[20], qsl[2] = {0, 20}, lens[1] = {20}, table[MAX_BLOCKS] = {3, 4}, lidx[1] = {19};
    int64_t slots[20];
    for (int i = 0; i < 20; i++) ids[i] = i + 1, pos[i] = i, slots[i] = (i < 16 ? 3 * 16 : 4 * 16 - 16) + i;
    float a[97], b[97];
    step_batch pre = {.num_tokens = 20, .token_ids = ids, .positions = pos, .slot_mapping = slots, .num_seqs = 1,
                      .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                      .max_blocks_per_seq = MAX_BLOCKS, .num_scored = 1, .scored_indices = lidx};
    CHECK(runner_forward(r, &pre, a) == VLLM_OK, "%s", vllm_errmsg());
    size_t bytes = runner_kv_block_bytes(r);
    CHECK(bytes == (size_t)f->m.config.num_key_value_heads * 16 * (size_t)f->m.config.head_dim * kv_dtype_size(kv),
          "%s: %zu bytes per block and layer", kv_dtype_name(kv), bytes);
    CHECK(runner_kv_cache_dtype(r) == kv);
    float *k = malloc(bytes), *v = malloc(bytes);
    CHECK(k && v);
    for (int32_t l = 0; l < runner_num_layers(r); l++)
        for (int32_t j = 0; j < 2; j++) {
            CHECK(runner_read_kv(r, l, 3 + j, k, v) == VLLM_OK, "%s", vllm_errmsg());
            CHECK(runner_write_kv(r, l, 7 + j, k, v) == VLLM_OK, "%s", vllm_errmsg());
        }
    int32_t id1[1] = {42}, pos1[1] = {20}, qsl1[2] = {0, 1}, len1[1] = {21}, t1[MAX_BLOCKS] = {3, 4},
            t2[MAX_BLOCKS] = {7, 8}, li[1] = {0};
    int64_t s1[1] = {4 * 16 + 4}, s2[1] = {8 * 16 + 4};
    step_batch d = {.num_tokens = 1, .token_ids = id1, .positions = pos1, .slot_mapping = s1, .num_seqs = 1,
                    .query_start_loc = qsl1, .seq_lens = len1, .block_tables = t1, .max_blocks_per_seq = MAX_BLOCKS,
                    .num_scored = 1, .scored_indices = li};
    CHECK(runner_forward(r, &d, a) == VLLM_OK, "%s", vllm_errmsg());
    d.block_tables = t2;
    d.slot_mapping = s2;
    CHECK(runner_forward(r, &d, b) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(!memcmp(a, b, sizeof a), "%s: logits through the moved blocks differ", kv_dtype_name(kv));
    CHECK(runner_read_kv(r, runner_num_layers(r), 0, k, v) == VLLM_ERR_INVALID, "layer past the last");
    CHECK(runner_read_kv(r, 0, NUM_BLOCKS, k, v) == VLLM_ERR_INVALID, "block outside the pool");
    CHECK(runner_write_kv(r, -1, 0, k, v) == VLLM_ERR_INVALID, "negative layer");
    free(k);
    free(v);
    runner_free(r);
    fake_model_free(f);
}

TEST(test_kv_read_write_blocks) {
    for (int t = 0; t < KV_DTYPE_COUNT && !harness_failed(); t++) check_kv_read_write_blocks((kv_dtype)t);
}

/* A step_batch's block copies run before its forward, in order. */
TEST(test_batch_copies_before_forward) {
    fake_model *f = fake_model_create(MODEL_ARCH_LLAMA, DTYPE_F32, false);
    runner *r = make_runner(&f->m, 1);
    CHECK(r, "runner_create");
    int32_t ids[20], pos[20], qsl[2] = {0, 20}, lens[1] = {20}, table[MAX_BLOCKS] = {3, 4}, lidx[1] = {19};
    int64_t slots[20];
    for (int i = 0; i < 20; i++) ids[i] = i + 1, pos[i] = i, slots[i] = (i < 16 ? 3 * 16 : 4 * 16 - 16) + i;
    float a[97], b[97];
    step_batch pre = {.num_tokens = 20, .token_ids = ids, .positions = pos, .slot_mapping = slots, .num_seqs = 1,
                      .query_start_loc = qsl, .seq_lens = lens, .block_tables = table,
                      .max_blocks_per_seq = MAX_BLOCKS, .num_scored = 1, .scored_indices = lidx};
    CHECK(runner_forward(r, &pre, a) == VLLM_OK, "%s", vllm_errmsg());
    /* decode with block 4 copied to 9 (then 9 to 10) by the batch itself */
    int32_t copies[4] = {4, 9, 9, 10}, id1[1] = {42}, pos1[1] = {20}, qsl1[2] = {0, 1}, len1[1] = {21},
            t1[MAX_BLOCKS] = {3, 4}, t2[MAX_BLOCKS] = {3, 10}, li[1] = {0};
    int64_t s1[1] = {4 * 16 + 4}, s2[1] = {10 * 16 + 4};
    step_batch d = {.num_tokens = 1, .token_ids = id1, .positions = pos1, .slot_mapping = s1, .num_seqs = 1,
                    .query_start_loc = qsl1, .seq_lens = len1, .block_tables = t1, .max_blocks_per_seq = MAX_BLOCKS,
                    .num_scored = 1, .scored_indices = li};
    CHECK(runner_forward(r, &d, a) == VLLM_OK, "%s", vllm_errmsg());
    d.block_tables = t2;
    d.slot_mapping = s2;
    d.num_copies = 2;
    d.copies = copies;
    CHECK(runner_forward(r, &d, b) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(!memcmp(a, b, sizeof a), "the copies did not run before the forward, or not in order");
    int32_t bad[2] = {4, NUM_BLOCKS};
    d.num_copies = 1;
    d.copies = bad;
    CHECK(runner_forward(r, &d, b) == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "copy"), "%s", vllm_errmsg());
    runner_free(r);
    fake_model_free(f);
}

/* The step builder flattens sequences as step_batch.h says (values worked
 * by hand, block size 4) and refuses what does not fit. */
TEST(test_step_builder) {
    step_builder *b;
    step_builder_config c = {.max_tokens = 5, .max_seqs = 2, .max_scored = 3, .max_copies = 1,
                             .max_blocks_per_seq = 3, .block_size = 4};
    CHECK(step_builder_create(&c, &b) == VLLM_OK, "%s", vllm_errmsg());
    int32_t ta[3] = {5, 6, 7}, blocks_a[2] = {9, 3}, tb[1] = {8}, blocks_b[2] = {1, 2};
    CHECK(step_builder_add_copy(b, 4, 9) == VLLM_OK);
    CHECK(step_builder_add_copy(b, 4, 9) == VLLM_ERR_INVALID, "a second copy past max_copies");
    CHECK(step_builder_add_seq(b, ta, 3, 2, blocks_a, 2, 2, 2, 0) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(step_builder_add_seq(b, tb, 1, 7, blocks_b, 2, 2, 1, 5) == VLLM_OK, "%s", vllm_errmsg());
    const step_batch *x = step_builder_batch(b);
    int64_t want_slots[4] = {9 * 4 + 2, 9 * 4 + 3, 3 * 4 + 0, 2 * 4 + 3};
    CHECK(x->num_tokens == 4 && x->num_seqs == 2 && x->num_scored == 3 && x->num_copies == 1);
    CHECK(!memcmp(x->slot_mapping, want_slots, sizeof want_slots), "slots %lld %lld %lld %lld",
          (long long)x->slot_mapping[0], (long long)x->slot_mapping[1], (long long)x->slot_mapping[2],
          (long long)x->slot_mapping[3]);
    CHECK(x->positions[0] == 2 && x->positions[2] == 4 && x->positions[3] == 7);
    CHECK(x->query_start_loc[1] == 3 && x->query_start_loc[2] == 4 && x->seq_lens[0] == 5 && x->seq_lens[1] == 8);
    CHECK(x->scored_start[1] == 2 && x->scored_start[2] == 3 && x->scored_indices[0] == 1 &&
          x->scored_indices[1] == 2 && x->scored_indices[2] == 3, "scored rows: the last 2 of a, the last of b");
    CHECK(x->block_tables[0] == 9 && x->block_tables[1] == 3 && x->block_tables[3] == 1 && x->block_tables[4] == 2);
    CHECK(x->lora_ids && x->lora_ids[0] == 0 && x->lora_ids[1] == 5 && x->copies[0] == 4 && x->copies[1] == 9);
    CHECK(step_builder_add_seq(b, tb, 1, 0, blocks_b, 2, 2, 1, 0) == VLLM_ERR_INVALID, "a third sequence");
    step_builder_reset(b);
    CHECK(x->num_tokens == 0 && x->num_seqs == 0 && x->num_copies == 0 && x->lora_ids == NULL);
    int32_t six[6] = {1, 2, 3, 4, 5, 6};
    CHECK(step_builder_add_seq(b, six, 6, 0, blocks_a, 2, 2, 1, 0) == VLLM_ERR_INVALID, "6 tokens > 5");
    CHECK(step_builder_add_seq(b, six, 4, 6, blocks_a, 2, 2, 1, 0) == VLLM_ERR_INVALID, "position 9 past 2 blocks");
    CHECK(step_builder_add_seq(b, six, 2, 0, blocks_a, 2, 2, 3, 0) == VLLM_ERR_INVALID, "3 scored of 2 new");
    CHECK(x->num_tokens == 0 && x->num_seqs == 0, "a refused sequence leaves nothing behind");
    step_builder_free(b);
}

int main(void) {
    RUN(test_invariance_llama_f32_untied);
    RUN(test_invariance_qwen2_bf16);
    RUN(test_invariance_qwen3_f16_tied);
    RUN(test_invariance_llama_q8_0_gguf);
    RUN(test_invariance_llama_q4_0_gguf_tied);
    RUN(test_invariance_kv_cache_dtypes);
    RUN(test_invariance_long_context_split_k);
    RUN(test_invalid_batches);
    RUN(test_copy_block);
    RUN(test_kv_read_write_blocks);
    RUN(test_batch_copies_before_forward);
    RUN(test_step_builder);
    RUN(test_stories260K_greedy_golden);
    return harness_done();
}
