/*
 * lora_args.h - vLLM's LoRA flags (--enable-lora, --lora-modules,
 * --max-loras, --max-lora-rank, --max-cpu-loras; generate's --lora) and the
 * start-up adapters they name. See lora_args.c.
 */
#ifndef VLLM_CLI_LORA_ARGS_H
#define VLLM_CLI_LORA_ARGS_H

#include <stdio.h>

#include "vllm/vllm.h"

#define LORA_ARGS_MAX 64

typedef struct lora_args_module {
    char name[256];
    char path[1024];
    char base_model_name[256];       /* "" = the served model */
} lora_args_module;

/* As engine_args_parse: 1 (consumed), 0 (not a LoRA flag), -1 (bad value). */
int lora_args_parse(vllm_engine_args *a, int argc, char **argv, int *i);
/* The --lora-modules / --lora adapters given so far. */
int lora_args_modules(const lora_args_module **out);
/* Loads them into e (created with a); the first failure's error. */
vllm_status lora_args_load(vllm_engine *e, const vllm_engine_args *a);
/* The adapter of the last --lora NAME=PATH (generate: every prompt's unless
 * its prompts-file line says "lora"), or NULL. */
const char *lora_args_default(void);
/* The base_model_name given for adapter name, or NULL. */
const char *lora_args_base_model_name(const char *name);
void lora_args_usage(FILE *f);

#endif
