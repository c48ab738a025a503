/*
 * offline_inference.c - the public C API on its own: greedy generation from a
 * model directory, token ids in and out (vLLM's examples/offline_inference,
 * without text: the tokenizer is not part of the public API).
 *
 *     build/examples/offline_inference [MODEL_DIR [MAX_TOKENS [PROMPT_ID...]]]
 *
 * MODEL_DIR defaults to models/stories260K, MAX_TOKENS to 16, the prompt to the
 * model's BOS token. Prints the generated ids on one line.
 *
 * The Makefile builds it against build/libvllm.a alone with include/ as the only
 * include path, so it compiling, linking and running shows that the shipped
 * library works by itself: tests/test_symbols.sh runs it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "vllm/vllm.h"

static int fail(const char *what) {
    fprintf(stderr, "offline_inference: %s: %s\n", what, vllm_errmsg());
    return 1;
}

int main(int argc, char **argv) {
    vllm_engine_args args;
    vllm_engine_args_init(&args);
    args.model = argc > 1 ? argv[1] : "models/stories260K";
    int32_t max_tokens = argc > 2 ? (int32_t)atoi(argv[2]) : 16;

    vllm_engine *e;
    if (vllm_engine_create(&args, &e) != VLLM_OK) return fail(args.model);

    int32_t num_prompt = argc > 3 ? argc - 3 : 1;
    int32_t *prompt = malloc((size_t)num_prompt * sizeof *prompt);
    if (!prompt) {
        vllm_engine_free(e);
        fprintf(stderr, "offline_inference: out of memory\n");
        return 1;
    }
    if (argc > 3) {
        for (int i = 3; i < argc; i++) prompt[i - 3] = (int32_t)atoi(argv[i]);
    } else {
        vllm_engine_info info;
        vllm_engine_get_info(e, &info);
        prompt[0] = info.bos_token_id;
    }

    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = max_tokens;

    const int32_t *prompts[1] = {prompt};
    vllm_request_result *results;
    int rc = 0;
    if (vllm_engine_generate(e, 1, prompts, &num_prompt, &sp, NULL, &results) != VLLM_OK) {
        rc = fail("generate");
    } else {
        const vllm_sequence_result *seq = &results[0].seqs[0];
        for (int32_t i = 0; i < seq->num_tokens; i++)
            printf("%s%d", i ? " " : "", (int)seq->token_ids[i]);
        printf("\n");
        vllm_request_results_free(results, 1);
    }
    free(prompt);
    vllm_engine_free(e);
    return rc;
}
