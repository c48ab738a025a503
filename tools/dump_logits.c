/*
 * dump_logits.c - run the runner the way the engine will, and dump every
 * position's logits for an independent reference to check.
 *
 *   build/tools/dump_logits --model DIR --prompts "1 5 9,1 7" --out FILE
 *       [--decode N] [--chunk N] [--budget N] [--threads N] [--block-size N]
 *       [--print-greedy]
 *
 * Sequences join one per step (sequence s is first scheduled at step s), so
 * batches mix prefill chunks (at most --chunk tokens of a prompt per step)
 * and decode tokens, at most --budget tokens per step. After its prompt, each
 * sequence decodes --decode greedy tokens (argmax of our own logits), fed one
 * per step. KV blocks are handed out in a scrambled order. Every token's
 * logits are requested.
 *
 * FILE: int32 num_seqs; per sequence: int32 len, int32 ids[len] (the tokens
 * fed), float32 logits[len][vocab] (logits at each of those positions).
 * tests/ref/torch_forward.py reads it. --print-greedy prints each sequence's
 * fed ids and the next greedy id on stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"
#include "model/runner.h"

enum { MAX_SEQS = 64 };

typedef struct seq {
    int32_t *ids;        /* (cap) prompt, then generated tokens */
    int32_t prompt_len, len, cap, done;
    int32_t *blocks;     /* (max_blocks) */
    float *logits;       /* (cap, vocab) */
} seq;

static int usage(void) {
    fprintf(stderr, "usage: dump_logits --model DIR --prompts \"IDS,IDS,...\" --out FILE [--decode N] [--chunk N]\n"
                    "                   [--budget N] [--threads N] [--block-size N] [--print-greedy]\n");
    return 2;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *prompts = NULL, *out = NULL;
    int32_t decode = 0, chunk = 16, budget = 64, threads = 0, bs = 16;
    int print_greedy = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--print-greedy")) { print_greedy = 1; continue; }
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
        else return usage();
    }
    if (!dir || !prompts || decode < 0 || chunk < 1 || budget < 1 || bs < 1) return usage();

    seq seqs[MAX_SEQS];
    int n = 0;
    for (const char *p = prompts; *p && n < MAX_SEQS;) {
        seq *s = &seqs[n++];
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

    /* every error below leaves through done:, which frees what exists */
    int rc = 1;
    model *m = NULL;
    runner *r = NULL;
    int32_t *ids = NULL, *pos = NULL, *lidx = NULL, *qsl = NULL, *lens = NULL, *owner = NULL, *tables = NULL;
    int64_t *slots = NULL;
    float *logits = NULL;
    if (model_load(dir, &m) != VLLM_OK) {
        fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
        goto done;
    }
    int32_t vocab = m->config.vocab_size, max_cap = 0, total_blocks = 0;
    for (int s = 0; s < n; s++) {
        if (seqs[s].cap > max_cap) max_cap = seqs[s].cap;
        total_blocks += (seqs[s].cap + bs - 1) / bs;
    }
    int32_t max_blocks = (max_cap + bs - 1) / bs;
    runner_config cfg = {.num_blocks = total_blocks + 1, .block_size = bs, .max_num_batched_tokens = budget,
                         .max_num_seqs = n, .num_threads = threads};
    if (runner_create(m, &cfg, &r) != VLLM_OK) {
        fprintf(stderr, "dump_logits: %s\n", vllm_errmsg());
        goto done;
    }
    for (int s = 0; s < n; s++) {
        seqs[s].blocks = calloc((size_t)max_blocks, sizeof(int32_t));
        seqs[s].logits = calloc((size_t)seqs[s].cap * vocab, sizeof(float));
    }
    ids = calloc((size_t)budget, sizeof(int32_t)), pos = calloc((size_t)budget, sizeof(int32_t));
    lidx = calloc((size_t)budget, sizeof(int32_t)), qsl = calloc((size_t)n + 1, sizeof(int32_t));
    lens = calloc((size_t)n, sizeof(int32_t)), owner = calloc((size_t)n, sizeof(int32_t));
    tables = calloc((size_t)n * max_blocks, sizeof(int32_t));
    slots = calloc((size_t)budget, sizeof(int64_t));
    logits = calloc((size_t)budget * vocab, sizeof(float));
    int32_t next_block = 0;

    for (int step = 0;; step++) {
        int32_t nt = 0, ns = 0, pending = 0;
        for (int s = 0; s < n; s++) {
            seq *q = &seqs[s];
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
                if (p % bs == 0) q->blocks[p / bs] = (int32_t)((next_block++ * 7919L) % cfg.num_blocks);
                ids[nt] = q->ids[p];
                pos[nt] = p;
                slots[nt] = (int64_t)q->blocks[p / bs] * bs + p % bs;
                lidx[nt] = nt;
                nt++;
            }
            memcpy(tables + (size_t)ns * max_blocks, q->blocks, sizeof(int32_t) * (size_t)max_blocks);
            lens[ns] = q->done + take;
            owner[ns] = s;
            qsl[++ns] = nt;
        }
        if (!pending) break;
        if (!nt) continue;
        step_batch b = {.num_tokens = nt, .token_ids = ids, .positions = pos, .slot_mapping = slots,
                          .num_seqs = ns, .query_start_loc = qsl, .seq_lens = lens, .block_tables = tables,
                          .max_blocks_per_seq = max_blocks, .num_scored = nt, .scored_indices = lidx};
        if (runner_forward(r, &b, logits) != VLLM_OK) {
            fprintf(stderr, "dump_logits: step %d: %s\n", step, vllm_errmsg());
            goto done;
        }
        for (int i = 0; i < ns; i++) {
            seq *q = &seqs[owner[i]];
            for (int32_t t = qsl[i]; t < qsl[i + 1]; t++)
                memcpy(q->logits + (size_t)pos[t] * vocab, logits + (size_t)t * vocab, sizeof(float) * (size_t)vocab);
            q->done += qsl[i + 1] - qsl[i];
        }
    }

    if (print_greedy)
        for (int s = 0; s < n; s++) {
            seq *q = &seqs[s];
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
    model_free(m);
    return rc;
}
