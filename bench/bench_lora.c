/*
 * bench_lora.c - multi-LoRA serving throughput: the same concurrent requests
 * on the base model alone and spread over 1, 4 and 16 adapters, in one run.
 *
 *   build/bench/bench_lora --model DIR --adapters DIR1,DIR2,... [--requests 16]
 *                          [--prompt-len 16] [--decode 16] [--threads N] [--rounds 1]
 *
 * One engine (--enable-lora, max_loras = the number of adapters, max rank
 * 64) with every adapter loaded. For each mix -- base, 1, 4, 16 adapters
 * (request i uses adapter i mod k; mixes needing more adapters than given
 * are skipped) -- the --requests requests (random --prompt-len token
 * prompts, greedy, ignore_eos, --decode tokens each) enter at once. As in
 * bench_engine.c, steps that only decode are timed: aggregate decode
 * tokens/s = tokens sampled in those steps / their wall time, and the
 * ratio to the base model's. --rounds repeats the mixes (interleaved, so a
 * busy machine disturbs them alike); the table shows the best round of
 * each. bench/lora/run.sh makes a TinyLlama-shaped model and rank-16
 * adapters on all projections and runs it (docs/lora.md has figures).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vllm/vllm.h"

static int usage(void) {
    fprintf(stderr, "usage: bench_lora --model DIR --adapters DIR,DIR,... [--requests 16] [--prompt-len 16] "
                    "[--decode 16] [--threads N] [--rounds 1]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *model = NULL, *adapters = NULL;
    int requests = 16, prompt_len = 16, decode = 16, threads = 0, rounds = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--adapters")) adapters = argv[i + 1];
        else if (!strcmp(argv[i], "--requests")) requests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt-len")) prompt_len = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else return usage();
    }
    if (!model || !adapters || requests < 1 || requests > 256 || prompt_len < 1 || decode < 2 || rounds < 1)
        return usage();
    char *paths[64];
    int num_adapters = 0;
    char *list = strdup(adapters);
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p && num_adapters < 64; p = strtok_r(NULL, ",", &save))
        paths[num_adapters++] = p;

    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = model;
    a.num_threads = threads;
    a.max_num_seqs = requests;
    a.max_model_len = prompt_len + decode + 16;
    a.max_num_batched_tokens = requests * prompt_len > 256 ? requests * prompt_len : 256;
    a.enable_prefix_caching = false;
    int per_seq = (a.max_model_len + a.block_size - 1) / a.block_size;
    a.num_gpu_blocks_override = requests * per_seq + 1;
    a.enable_lora = true;
    a.max_loras = num_adapters;
    a.max_lora_rank = 64;
    vllm_engine *e;
    if (vllm_engine_create(&a, &e) != VLLM_OK) {
        fprintf(stderr, "bench_lora: %s\n", vllm_errmsg());
        return 1;
    }
    char names[64][16];
    for (int i = 0; i < num_adapters; i++) {
        snprintf(names[i], sizeof names[i], "lora%d", i);
        if (vllm_engine_load_lora(e, names[i], paths[i]) != VLLM_OK) {
            fprintf(stderr, "bench_lora: %s\n", vllm_errmsg());
            return 1;
        }
    }
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    int32_t *prompt = malloc((size_t)prompt_len * sizeof *prompt);
    uint64_t rng = 88172645463325252ULL;
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = decode;

    const int mixes[] = {0, 1, 4, 16};
    double best[4] = {0}, best_ms[4] = {0};
    for (int round = -1; round < rounds; round++) { /* round -1: warm-up, not counted */
        for (int m = 0; m < 4; m++) {
            int k = mixes[m];
            if (k > num_adapters || (round < 0 && m > 0)) continue;
            char id[48];
            for (int i = 0; i < requests; i++) {
                for (int t = 0; t < prompt_len; t++)
                    prompt[t] = 3 + (int32_t)(((rng = rng * 6364136223846793005ULL + 1442695040888963407ULL) >> 40) %
                                              (uint64_t)(info.vocab_size - 3));
                snprintf(id, sizeof id, "r%d-m%d-%d", round, k, i);
                vllm_request_opts o = {0};
                o.lora_name = k ? names[i % k] : NULL;
                if (vllm_engine_add_request(e, id, prompt, prompt_len, &sp, &o) != VLLM_OK) {
                    fprintf(stderr, "bench_lora: %s\n", vllm_errmsg());
                    return 1;
                }
            }
            double dec_time = 0;
            long dec_tokens = 0, dec_steps = 0;
            while (vllm_engine_has_unfinished(e)) {
                double s0 = vllm_monotonic_time();
                const vllm_step_output *so;
                if (vllm_engine_step(e, &so) != VLLM_OK) {
                    fprintf(stderr, "bench_lora: %s\n", vllm_errmsg());
                    return 1;
                }
                double dt = vllm_monotonic_time() - s0;
                long produced = 0;
                for (int j = 0; j < so->num_outputs; j++) produced += so->outputs[j].num_new_tokens;
                if (so->stats.num_scheduled_seqs == requests &&
                    so->stats.num_scheduled_tokens == so->stats.num_scheduled_seqs) {
                    dec_time += dt;
                    dec_tokens += produced;
                    dec_steps++;
                }
            }
            if (round < 0 || !dec_steps) continue;
            double tps = dec_tokens / dec_time;
            if (tps > best[m]) best[m] = tps, best_ms[m] = 1000.0 * dec_time / (double)dec_steps;
        }
    }
    printf("model %s: %d threads, %d requests, prompt %d, %d output tokens each, %d adapters loaded, "
           "best of %d round(s)\n", model, info.num_threads, requests, prompt_len, decode, num_adapters, rounds);
    printf("%9s %14s %14s %10s\n", "adapters", "decode tok/s", "ms/step", "vs base");
    for (int m = 0; m < 4; m++) {
        if (mixes[m] > num_adapters) continue;
        char label[16];
        if (m) snprintf(label, sizeof label, "%d", mixes[m]);
        else snprintf(label, sizeof label, "base");
        printf("%9s %14.1f %14.1f %9.2fx\n", label, best[m], best_ms[m], best[0] > 0 ? best[m] / best[0] : 0.0);
    }
    free(prompt);
    free(list);
    vllm_engine_free(e);
    return 0;
}
