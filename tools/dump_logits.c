/*
 * dump_logits.c - run the runner the way the engine will, and dump every
 * position's logits for an independent reference to check.
 *
 *   build/tools/dump_logits --model DIR --prompts "1 5 9,1 7" --out FILE
 *       [--decode N] [--chunk N] [--budget N] [--threads N] [--block-size N]
 *       [--kv-cache-dtype float32] [--print-greedy]
 *
 * Sequences join one per step (sequence s is first scheduled at step s), so
 * batches mix prefill chunks (at most --chunk tokens of a prompt per step)
 * and decode tokens, at most --budget tokens per step. After its prompt, each
 * sequence decodes --decode greedy tokens (argmax of our own logits), fed one
 * per step. The KV pool holds --kv-cache-dtype elements (kernels/kv_dtype.h;
 * float32, exact, unless given; the engine's "auto" is not accepted: name
 * the type), in both modes. KV blocks are handed out in a scrambled order, one table per KV
 * cache group (model/kv_layout.h), and none is released: sliding-window
 * layers see every block, so only the attention kernel's window limits what
 * they read. Every token's logits are requested.
 *
 * FILE: int32 num_seqs; per sequence: int32 len, int32 ids[len] (the tokens
 * fed), float32 logits[len][vocab] (logits at each of those positions).
 * tests/ref/torch_forward.py reads it. --print-greedy prints each sequence's
 * fed ids and the next greedy id on stdout.
 *
 * --lora DIR (repeatable) loads PEFT adapters (model/lora.h), the i-th with
 * id i + 1; --seq-lora "a,b,..." gives each sequence its adapter's id (0 =
 * the base model; missing entries are 0), so one batch mixes adapters;
 * --max-lora-rank N (64) refuses adapters of a larger rank.
 *
 * --engine runs the same prompts through the engine instead (vllm_engine_*:
 * scheduler, KV cache manager with prefix caching and sliding-window release,
 * sampler), request s added before step s * --gap (1), greedy with --decode + 1 tokens,
 * at most --chunk tokens of a prompt per step (long_prefill_token_threshold)
 * and --budget per step, a pool of --num-blocks blocks if given (preemption
 * when it runs out), --max-model-len, --no-prefix-caching; it prints what
 * --print-greedy prints (the engine's batch invariance makes the two equal),
 * and on stderr a line "kv: ..." with the peak blocks in use, their size in
 * layers and bytes, and the prefix-cache hits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/engine.h"
#include "model/kv_layout.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/runner.h"

enum { MAX_SEQS = 64 };

typedef struct prompt_seq {
    int32_t *ids;        /* (cap) prompt, then generated tokens */
    int32_t prompt_len, len, cap, done;
    int32_t *blocks;     /* (groups, max_blocks) */
    float *logits;       /* (cap, vocab) */
} prompt_seq;

static int usage(void) {
    fprintf(stderr, "usage: dump_logits --model DIR --prompts \"IDS,IDS,...\" --out FILE [--decode N] [--chunk N]\n"
                    "                   [--budget N] [--threads N] [--block-size N] [--kv-cache-dtype T]\n"
                    "                   [--print-greedy] [--dtype D]\n"
                    "       dump_logits --engine --model DIR --prompts ... [--decode N] [--chunk N] [--budget N]\n"
                    "                   [--threads N] [--block-size N] [--num-blocks N] [--max-model-len N]\n"
                    "                   [--no-prefix-caching] [--gap STEPS] [--kv-cache-dtype T]\n"
                    "  T: float32 (default), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2\n"
                    "  D (--dtype, both modes): float32 (default: FP32 activations), bfloat16, auto\n");
    return 2;
}

typedef struct engine_opts {
    int32_t decode, chunk, budget, threads, block_size, num_blocks, max_model_len, gap;
    bool caching;
    const char *kv_cache_dtype;
    kv_dtype kv_type;
    const char *dtype;
} engine_opts;

/* --engine: the prompts through vllm_engine (see the top). */
static int run_engine(const char *dir, prompt_seq *seqs, int n, const engine_opts *o) {
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = dir;
    a.block_size = o->block_size;
    a.max_num_batched_tokens = o->budget;
    a.max_num_seqs = n < o->budget ? n : o->budget;
    a.long_prefill_token_threshold = o->chunk;
    a.num_gpu_blocks_override = o->num_blocks;
    a.max_model_len = o->max_model_len;
    a.enable_prefix_caching = o->caching;
    a.num_threads = o->threads;
    a.kv_cache_dtype = o->kv_cache_dtype;
    a.dtype = o->dtype;
    vllm_engine *e;
    if (vllm_engine_create(&a, &e) != VLLM_OK) {
        fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
        return 1;
    }
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = o->decode + 1;
    int64_t queries = 0, hits = 0, preemptions = 0;
    int32_t last_used = 0, free_end = 0, total = 0;
    int rc = 0;
    for (int step = 0, added = 0; rc == 0 && (added < n || vllm_engine_has_unfinished(e)); step++) {
        if (added < n && step == added * o->gap) {
            int r = added++;
            char id[16];
            snprintf(id, sizeof id, "%d", r);
            seqs[r].len = 0;
            if (vllm_engine_add_request(e, id, seqs[r].ids, seqs[r].prompt_len, &sp, NULL) != VLLM_OK) {
                fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
                rc = 1;
                break;
            }
        }
        const vllm_step_output *out;
        if (!vllm_engine_has_unfinished(e)) continue;
        if (vllm_engine_step(e, &out) != VLLM_OK) {
            fprintf(stderr, "dump_logits: step %d: %s\n", step, vllm_errmsg());
            rc = 1;
            break;
        }
        queries += out->stats.prefix_cache_queries, hits += out->stats.prefix_cache_hits;
        preemptions += out->stats.num_preemptions;
        total = out->stats.num_blocks_total, free_end = out->stats.num_blocks_free;
        if (out->stats.num_running > 0) last_used = total - free_end;
        for (int32_t i = 0; i < out->num_outputs; i++) {
            prompt_seq *q = &seqs[atoi(out->outputs[i].request_id)];
            for (int32_t t = 0; t < out->outputs[i].num_new_tokens && q->prompt_len + q->len < q->cap + 1; t++)
                q->ids[q->prompt_len + q->len++] = out->outputs[i].new_token_ids[t];
        }
    }
    if (rc == 0) {
        for (int s = 0; s < n; s++) {
            prompt_seq *q = &seqs[s];
            for (int32_t i = 0; i < q->prompt_len + q->len - 1; i++) printf("%d ", q->ids[i]);
            printf("-> %d\n", q->ids[q->prompt_len + q->len - 1]);
        }
        vllm_kv_cache_report k;
        vllm_engine_get_kv_cache_report(e, &k);
        const model_config *c = &engine_model(e)->config;
        kv_layout *lay = malloc(sizeof *lay);
        kv_layout_init(lay, c);
        size_t bytes = kv_layout_block_bytes(lay, c, o->block_size, o->kv_type);
        fprintf(stderr,
                "kv: peak %d blocks in use of %d, %d at the last step with a running request, %d free at the end; "
                "%d layers of %d per block, %zu bytes per block; %d groups; prefix cache hits %lld of %lld tokens; "
                "%lld preemptions\n",
                k.peak_used_blocks, k.num_blocks, last_used, free_end, lay->group_size, c->num_hidden_layers, bytes,
                lay->num_groups, (long long)hits, (long long)queries, (long long)preemptions);
        free(lay);
    }
    vllm_engine_free(e);
    return rc;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *prompts = NULL, *out = NULL, *kv_name = "float32", *dtype_arg = "float32";
    int32_t decode = 0, chunk = 16, budget = 64, threads = 0, bs = 16, num_blocks = 0, max_model_len = 0, gap = 1;
    int print_greedy = 0, engine = 0, caching = 1;
    const char *lora_dirs[16], *seq_lora = NULL;
    int num_lora = 0, max_lora_rank = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--print-greedy")) { print_greedy = 1; continue; }
        if (!strcmp(a, "--engine")) { engine = 1; continue; }
        if (!strcmp(a, "--no-prefix-caching")) { caching = 0; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--prompts")) prompts = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--decode")) decode = atoi(v);
        else if (!strcmp(a, "--chunk")) chunk = atoi(v);
        else if (!strcmp(a, "--budget")) budget = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--block-size")) bs = atoi(v);
        else if (!strcmp(a, "--num-blocks")) num_blocks = atoi(v);
        else if (!strcmp(a, "--max-model-len")) max_model_len = atoi(v);
        else if (!strcmp(a, "--gap")) gap = atoi(v);
        else if (!strcmp(a, "--kv-cache-dtype")) kv_name = v;
        else if (!strcmp(a, "--dtype")) dtype_arg = v;
        else if (!strcmp(a, "--lora") && num_lora < 16) lora_dirs[num_lora++] = v;
        else if (!strcmp(a, "--seq-lora")) seq_lora = v;
        else if (!strcmp(a, "--max-lora-rank")) max_lora_rank = atoi(v);
        else return usage();
    }
    kv_dtype kv_type;
    if (!dir || !prompts || decode < 0 || chunk < 1 || budget < 1 || bs < 1 || num_blocks < 0 || max_model_len < 0 ||
        gap < 1 || !kv_dtype_from_name(kv_name, &kv_type) || engine_dtype_bf16(dtype_arg, DTYPE_F32) < 0)
        return usage();

    prompt_seq seqs[MAX_SEQS];
    int n = 0;
    for (const char *p = prompts; *p && n < MAX_SEQS;) {
        prompt_seq *s = &seqs[n++];
        memset(s, 0, sizeof *s);
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        int32_t count = 0;
        for (const char *q = p; q < end; q++) count += (q == p || q[-1] == ' ') && *q != ' ';
        s->cap = count + decode;
        s->ids = calloc((size_t)s->cap + 1, sizeof(int32_t));
        for (char *q = (char *)p; q < end;) {
            long id = strtol(q, &q, 10);
            while (q < end && *q == ' ') q++;
            s->ids[s->prompt_len++] = (int32_t)id;
        }
        s->len = s->prompt_len;
        p = *end ? end + 1 : end;
    }

    if (engine) {
        engine_opts o = {decode, chunk, budget, threads, bs, num_blocks, max_model_len, gap, caching, kv_name, kv_type, dtype_arg};
        int erc = run_engine(dir, seqs, n, &o);
        for (int s = 0; s < n; s++) free(seqs[s].ids);
        return erc;
    }

    /* every error below leaves through done:, which frees what exists */
    int rc = 1;
    model *m = NULL;
    runner *r = NULL;
    int32_t *ids = NULL, *pos = NULL, *lidx = NULL, *qsl = NULL, *lens = NULL, *owner = NULL, *tables = NULL;
    int32_t seq_ids[MAX_SEQS] = {0}, step_ids[MAX_SEQS] = {0};
    lora_table *loras = NULL;
    for (int s = 0; seq_lora && *seq_lora && s < MAX_SEQS; s++) {
        char *e;
        seq_ids[s] = (int32_t)strtol(seq_lora, &e, 10);
        seq_lora = *e == ',' ? e + 1 : e;
    }
    int64_t *slots = NULL;
    float *logits = NULL;
    if (model_load(dir, &m) != VLLM_OK ||
        (engine_dtype_bf16(dtype_arg, m->config.torch_dtype) == 1 && model_convert_bf16(m, NULL) != VLLM_OK)) {
        fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
        goto done;
    }
    int32_t vocab = m->config.vocab_size, max_cap = 0, total_blocks = 0;
    for (int s = 0; s < n; s++) {
        if (seqs[s].cap > max_cap) max_cap = seqs[s].cap;
        total_blocks += (seqs[s].cap + bs - 1) / bs;
    }
    int32_t max_blocks = (max_cap + bs - 1) / bs;
    kv_layout *lay = malloc(sizeof *lay);
    kv_layout_init(lay, &m->config);
    int32_t G = lay->num_groups;
    free(lay);
    total_blocks *= G;
    if (num_lora && lora_table_create(0, &loras) != VLLM_OK) goto done;
    for (int i = 0; i < num_lora; i++) {
        lora_adapter *a;
        char name[32];
        snprintf(name, sizeof name, "lora%d", i + 1);
        if (lora_adapter_load(m, name, lora_dirs[i], max_lora_rank, &a) != VLLM_OK || lora_table_add(loras, a) != VLLM_OK) {
            fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
            goto done;
        }
    }
    runner_config cfg = {.num_blocks = total_blocks + 1, .block_size = bs, .max_num_batched_tokens = budget,
                         .max_num_seqs = n, .num_threads = threads, .kv_cache_dtype = kv_type,
                         .lora = loras, .max_lora_rank = max_lora_rank,
                         .bf16_compute = engine_dtype_bf16(dtype_arg, m->config.torch_dtype) == 1};
    if (runner_create(m, &cfg, &r) != VLLM_OK) {
        fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
        goto done;
    }
    for (int s = 0; s < n; s++) {
        seqs[s].blocks = calloc((size_t)max_blocks * G, sizeof(int32_t));
        seqs[s].logits = calloc((size_t)seqs[s].cap * vocab, sizeof(float));
    }
    ids = calloc((size_t)budget, sizeof(int32_t)), pos = calloc((size_t)budget, sizeof(int32_t));
    lidx = calloc((size_t)budget, sizeof(int32_t)), qsl = calloc((size_t)n + 1, sizeof(int32_t));
    lens = calloc((size_t)n, sizeof(int32_t)), owner = calloc((size_t)n, sizeof(int32_t));
    tables = calloc((size_t)n * G * max_blocks, sizeof(int32_t));
    slots = calloc((size_t)budget * G, sizeof(int64_t));
    logits = calloc((size_t)budget * vocab, sizeof(float));
    int32_t next_block = 0;

    for (int step = 0;; step++) {
        int32_t nt = 0, ns = 0, pending = 0;
        for (int s = 0; s < n; s++) {
            prompt_seq *q = &seqs[s];
            /* a finished prompt has its next token once the last position has logits */
            int32_t avail = q->done < q->prompt_len ? q->prompt_len - q->done : q->len - q->done;
            if (q->done >= q->prompt_len && q->len < q->cap && q->done == q->len) {
                q->ids[q->len++] = argmax(q->logits + (size_t)(q->done - 1) * vocab, vocab);
                avail = 1;
            }
            pending += avail > 0;
            if (step < s || avail <= 0 || nt >= budget) continue;
            int32_t take = avail < chunk ? avail : chunk;
            if (take > budget - nt) take = budget - nt;
            for (int32_t i = 0; i < take; i++) {
                int32_t p = q->done + i;
                for (int32_t g = 0; g < G; g++) {
                    int32_t *table = q->blocks + (size_t)g * max_blocks;
                    if (p % bs == 0) table[p / bs] = (int32_t)((next_block++ * 7919L) % cfg.num_blocks);
                    slots[(size_t)nt * G + g] = (int64_t)table[p / bs] * bs + p % bs;
                }
                ids[nt] = q->ids[p];
                pos[nt] = p;
                lidx[nt] = nt;
                nt++;
            }
            memcpy(tables + (size_t)ns * G * max_blocks, q->blocks, sizeof(int32_t) * (size_t)max_blocks * G);
            lens[ns] = q->done + take;
            owner[ns] = s;
            step_ids[ns] = seq_ids[s];
            qsl[++ns] = nt;
        }
        if (!pending) break;
        if (!nt) continue;
        step_batch b = {.num_tokens = nt, .token_ids = ids, .positions = pos, .num_kv_groups = G, .slot_mapping = slots,
                          .num_seqs = ns, .query_start_loc = qsl, .seq_lens = lens, .block_tables = tables,
                          .max_blocks_per_seq = max_blocks, .num_scored = nt, .scored_indices = lidx,
                          .lora_ids = loras ? step_ids : NULL};
        if (runner_forward(r, &b, logits) != VLLM_OK) {
            fprintf(stderr, "dump_logits: step %d: %s\n", step, vllm_errmsg());
            goto done;
        }
        for (int i = 0; i < ns; i++) {
            prompt_seq *q = &seqs[owner[i]];
            for (int32_t t = qsl[i]; t < qsl[i + 1]; t++)
                memcpy(q->logits + (size_t)pos[t] * vocab, logits + (size_t)t * vocab, sizeof(float) * (size_t)vocab);
            q->done += qsl[i + 1] - qsl[i];
        }
    }

    if (print_greedy)
        for (int s = 0; s < n; s++) {
            prompt_seq *q = &seqs[s];
            for (int32_t i = 0; i < q->done; i++) printf("%d ", q->ids[i]);
            printf("-> %d\n", argmax(q->logits + (size_t)(q->done - 1) * vocab, vocab));
        }
    if (out) {
        FILE *f = fopen(out, "wb");
        if (!f) {
            perror(out);
            goto done;
        }
        int32_t ns = n;
        fwrite(&ns, 4, 1, f);
        for (int s = 0; s < n; s++) {
            fwrite(&seqs[s].done, 4, 1, f);
            fwrite(seqs[s].ids, 4, (size_t)seqs[s].done, f);
            fwrite(seqs[s].logits, sizeof(float), (size_t)seqs[s].done * vocab, f);
        }
        if (fclose(f)) {
            perror(out);
            goto done;
        }
    }
    rc = 0;
done:
    for (int s = 0; s < n; s++) free(seqs[s].ids), free(seqs[s].blocks), free(seqs[s].logits);
    free(ids), free(pos), free(lidx), free(qsl), free(lens), free(owner), free(tables), free(slots), free(logits);
    runner_free(r);
    lora_table_free(loras);
    model_free(m);
    return rc;
}
