/*
 * bench_engine.c - aggregate decode throughput of the engine under
 * continuous batching, through the public API (vllm_engine_*).
 *
 *   build/bench/bench_engine --model DIR [--concurrency 1,8,32,64]
 *                            [--prompt-len 16] [--decode 16] [--threads N]
 *
 * For each concurrency C: C requests with random --prompt-len token prompts
 * (greedy, ignore_eos, --decode output tokens each) enter the engine at once.
 * Steps that only decode (every scheduled sequence feeds one token) are
 * timed: aggregate decode tokens/s = tokens sampled in those steps / their
 * wall time. The prefill step(s) and the end-to-end rate are printed too.
 * A warm-up request faults the mmapped weights in first. CPU seconds (all
 * threads) beside wall time tell how much of the machine the run really got.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vllm/vllm.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_engine --model DIR [--concurrency 1,8,32,64] [--prompt-len 16] "
                    "[--decode 16] [--threads N]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *model = NULL, *conc = "1,8,32,64";
    int prompt_len = 16, decode = 16, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--concurrency")) conc = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt-len")) prompt_len = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else return usage();
    }
    if (!model || prompt_len < 1 || decode < 2) return usage();
    int levels[16], nlevels = 0, max_c = 1;
    for (const char *p = conc; *p && nlevels < 16;) {
        levels[nlevels] = atoi(p);
        if (levels[nlevels] < 1) return usage();
        if (levels[nlevels] > max_c) max_c = levels[nlevels];
        nlevels++;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }

    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = model;
    a.num_threads = threads;
    a.max_num_seqs = max_c;
    a.max_model_len = prompt_len + decode + 16;
    a.max_num_batched_tokens = max_c * prompt_len > max_c ? max_c * prompt_len : max_c;
    a.enable_prefix_caching = false; /* random prompts would not hit anyway */
    /* enough blocks for every sequence, no preemption */
    int per_seq = (a.max_model_len + a.block_size - 1) / a.block_size;
    a.num_gpu_blocks_override = max_c * per_seq + 1;
    vllm_engine *e;
    if (vllm_engine_create(&a, &e) != VLLM_OK) {
        fprintf(stderr, "bench_engine: %s\n", vllm_errmsg());
        return 1;
    }
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    int32_t *prompt = malloc((size_t)prompt_len * sizeof *prompt);
    uint64_t rng = 88172645463325252ULL;
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;

    /* warm-up: fault the weights in */
    for (int t = 0; t < prompt_len; t++) prompt[t] = 3 + (int32_t)((rng = rng * 6364136223846793005ULL + 1) >> 40) % (info.vocab_size - 3);
    sp.max_tokens = 2;
    const int32_t *pp[1] = {prompt};
    vllm_request_result *res;
    if (vllm_engine_generate(e, 1, pp, &prompt_len, &sp, NULL, &res) != VLLM_OK) {
        fprintf(stderr, "bench_engine: %s\n", vllm_errmsg());
        return 1;
    }
    vllm_request_results_free(res, 1);

    printf("model %s: %d threads, prompt %d tokens, %d output tokens per request\n", model,
           info.num_threads, prompt_len, decode);
    printf("%11s %14s %14s %12s %14s %9s\n", "concurrency", "decode tok/s", "ms/decode step",
           "prefill s", "e2e out tok/s", "cpu/wall");
    sp.max_tokens = decode;
    for (int l = 0; l < nlevels; l++) {
        int C = levels[l];
        char id[32];
        for (int i = 0; i < C; i++) {
            for (int t = 0; t < prompt_len; t++)
                prompt[t] = 3 + (int32_t)(((rng = rng * 6364136223846793005ULL + 1442695040888963407ULL) >> 40) %
                                          (uint64_t)(info.vocab_size - 3));
            snprintf(id, sizeof id, "c%d-%d", C, i);
            if (vllm_engine_add_request(e, id, prompt, prompt_len, &sp, NULL) != VLLM_OK) {
                fprintf(stderr, "bench_engine: %s\n", vllm_errmsg());
                return 1;
            }
        }
        double t0 = vllm_monotonic_time(), c0 = cpu_s(), dec_time = 0, pre_time = 0;
        long dec_tokens = 0, out_tokens = 0, dec_steps = 0;
        while (vllm_engine_has_unfinished(e)) {
            double s0 = vllm_monotonic_time();
            const vllm_step_output *so;
            if (vllm_engine_step(e, &so) != VLLM_OK) {
                fprintf(stderr, "bench_engine: %s\n", vllm_errmsg());
                return 1;
            }
            double dt = vllm_monotonic_time() - s0;
            long produced = 0;
            for (int j = 0; j < so->num_outputs; j++) produced += so->outputs[j].num_new_tokens;
            out_tokens += produced;
            if (so->stats.num_scheduled_seqs > 0 &&
                so->stats.num_scheduled_tokens == so->stats.num_scheduled_seqs) {
                dec_time += dt;
                dec_tokens += produced;
                dec_steps++;
            } else {
                pre_time += dt;
            }
        }
        double wall = vllm_monotonic_time() - t0, cpu = cpu_s() - c0;
        printf("%11d %14.1f %14.1f %12.2f %14.1f %9.2f\n", C, dec_tokens / dec_time,
               1000.0 * dec_time / (double)dec_steps, pre_time, out_tokens / wall, cpu / wall);
        fflush(stdout);
    }
    free(prompt);
    vllm_engine_free(e);
    return 0;
}
