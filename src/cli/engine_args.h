/*
 * engine_args.h - the engine flags `vllmc generate` and `vllmc serve` share,
 * with vLLM's names (EngineArgs): --model, --tokenizer, --max-model-len,
 * --block-size, --kv-cache-memory-bytes, --kv-cache-dtype, --num-gpu-blocks-override,
 * --[no-]enable-prefix-caching, --max-num-seqs, --max-num-batched-tokens,
 * --long-prefill-token-threshold, --scheduling-policy, --seed,
 * --generation-config, --speculative-config (JSON), -tp/--tensor-parallel-size and
 * -pp/--pipeline-parallel-size (vllmc serve only: dist/, docs/deploy.md), and vllm.c's --threads. Both `--flag value` and `--flag=value` work, and
 * underscores may stand for dashes (--max_model_len), as in vLLM.
 * Sizes take vLLM's suffixes: 32k = 32000, 32K = 32768 (k/m/g/t decimal,
 * K/M/G/T binary).
 */
#ifndef VLLM_CLI_ENGINE_ARGS_H
#define VLLM_CLI_ENGINE_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vllm/vllm.h"

/* Tries argv[*i] as an engine flag. Returns 1 and advances *i past the flag
 * (and its value) when it is one, 0 when it is not (nothing consumed), -1
 * on a bad value (a message naming the flag is printed to stderr). */
int engine_args_parse(vllm_engine_args *a, int argc, char **argv, int *i);

/* --speculative-config's JSON (vLLM's SpeculativeConfig keys) into *c:
 * method "ngram" (or "[ngram]", or model "ngram" without a method),
 * num_speculative_tokens (required), prompt_lookup_min, prompt_lookup_max,
 * disable_by_batch_size; vLLM's other keys are accepted and ignored. 0 on
 * success; -1 with a message naming the key and the accepted values on
 * stderr (other methods, unknown keys, values out of range). */
int engine_args_parse_speculative_config(vllm_speculative_config *c, const char *json, const char *flag);

/* Prints the engine flags for --help. */
void engine_args_usage(FILE *f);

/* vLLM's human_readable_int ("32k", "1.5M", "4096"); false if malformed. */
bool engine_args_parse_size(const char *s, int64_t *out);

/* Splits argv[*i] into a flag name (dashes normalised, into name) and an
 * inline "=value" (returned, or NULL). For the subcommands' own flags. */
const char *engine_args_flag_name(const char *arg, char *name, size_t cap);

#endif
