/*
 * model_alias.h - short names for the real chat models that
 * scripts/fetch_models.sh downloads from PyPI, so that `vllmc serve smollm2`
 * (or generate/tokenize/bench --model gemma3) needs no path.
 *
 *   smollm2  SmolLM2-135M-Instruct.Q4_1.gguf (its own ChatML template)
 *   gemma3   gemma-3-270m-q4_k_m.gguf (no template in the file: Gemma's
 *            format from examples/template_gemma.jinja)
 *
 * An alias names the file in the model cache ($VLLMC_MODEL_CACHE, default
 * ~/.cache/vllmc/models, where the script puts it). The CLI never downloads:
 * a model not fetched yet is an error that says which command fetches it. A
 * file or directory that exists under the alias's name is taken as itself.
 */
#ifndef VLLM_CLI_MODEL_ALIAS_H
#define VLLM_CLI_MODEL_ALIAS_H

#include "vllm/status.h"

/* If *model is an alias: *model becomes its cached GGUF file and, when
 * chat_template is not NULL and *chat_template is NULL, *chat_template the
 * alias's template file for a model whose file has none. Anything else is
 * left alone. VLLM_ERR_NOT_FOUND (message: how to fetch it) when the alias's
 * file is not in the cache. The strings stay valid until exit (one model per
 * process). */
vllm_status model_alias_resolve(const char **model, const char **chat_template);

#endif
