/*
 * engine.h - the engine core's internal extras, beside the public
 * vllm_engine_* API (include/vllm/vllm.h): what other subsystems of this
 * library (and tests) plug into an engine but users do not set directly.
 */
#ifndef VLLM_ENGINE_ENGINE_H
#define VLLM_ENGINE_ENGINE_H

#include "engine/executor.h"
#include "engine/grammar_cache.h"
#include "engine/kv_cache_manager.h"
#include "spec/spec.h"
#include "vllm/vllm.h"

/* Turns speculative decoding on (0 < k <= VLLM_MAX_SPEC_TOKENS, a proposer) or off (NULL or k 0).
 * Only while the engine has no unfinished request (VLLM_ERR_INVALID
 * otherwise); sizes the step's logits for k + 1 rows per sequence. The
 * proposer's and verifier's ud are borrowed. */
vllm_status engine_set_spec(vllm_engine *e, const spec_config *cfg);

/* An executor other than the local one (dist/tp_executor.c: tensor and
 * pipeline parallel over MPI). Called by vllm_engine_create with the loaded
 * model and the runner config it sized; it may lower cfg->num_blocks (the
 * ranks agree on a pool size) and the engine uses what it leaves there. */
typedef vllm_status (*engine_executor_factory)(void *ctx, const vllm_engine_args *args, const model *m,
                                               runner_config *cfg, executor **out);
/* Installs fn for the engines this process creates from now on (NULL: the
 * local executor). Process-wide, as the MPI group it stands for; set it
 * before any engine exists. */
void engine_set_executor_factory(engine_executor_factory fn, void *ctx);

/* Where the engine's steps run and its KV lives (a KV connector's way in). */
executor *engine_executor(vllm_engine *e);
/* The engine's block tables and prefix cache, for statistics and tests. */
const kv_cache_manager *engine_kv_cache_manager(const vllm_engine *e);

/* The loaded model (borrowed, read-only, for the engine's lifetime). */
const model *engine_model(const vllm_engine *e);

/* The engine's cache of compiled structured-output grammars, created on
 * first use (NULL: out of memory, error set). Thread-safe and alive as long
 * as the engine, so a front end may compile a request's constraint before
 * it adds the request, from its own thread (the server does: a bad
 * constraint is a 400 before admission), and the engine then finds it
 * READY. The first call must come from the thread that drives the engine,
 * or before any other thread does. */
grammar_cache *engine_grammar_cache(vllm_engine *e);
/* args.structured_outputs_compile_timeout with its default applied (seconds). */
double engine_compile_timeout(const vllm_engine *e);
/* The KV connector's engine_id when it saves KV (kv_producer, kv_both),
 * else NULL (no connector, or a consumer). Valid while the engine lives. */
const char *engine_kv_engine_id(const vllm_engine *e);
/* A KV connector (--kv-transfer-config, --kv-offloading-size) is on. */
bool engine_kv_connector_enabled(const vllm_engine *e);
/* Where the TcpConnector's KV server listens (host, *port), or NULL. */
const char *engine_kv_server(const vllm_engine *e, int32_t *port);

/* What --kv-cache-dtype auto stores for a model with config c, loaded from a
 * GGUF file or not (see vllm_engine_args.kv_cache_dtype and engine.c). */
kv_dtype engine_kv_cache_dtype_auto(const model_config *c, bool gguf);
/* --dtype (vllm_engine_args.dtype, NULL = auto) for a model whose own dtype
 * is model_dtype: 1 = BF16 weights compute with BF16 activations
 * (kernels/matmul_bf16.c), 0 = FP32 activations, -1 = not a choice. */
int engine_dtype_bf16(const char *name, dtype model_dtype);
#define ENGINE_DTYPE_CHOICES "auto, half, float16, bfloat16, float, float32"

#endif
