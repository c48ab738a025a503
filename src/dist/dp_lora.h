/*
 * dp_lora.h - LoRA adapters with data-parallel engines: what the front end
 * knows of them (server/serving.h's serving_lora_ops), since it has no
 * engine of its own.
 *
 *   start-up: every engine loads serve's --lora-modules (dp_engine_run's
 *             setup); the front end lists the same names (dp_lora_add)
 *   runtime:  /v1/load_lora_adapter and /v1/unload_lora_adapter go to every
 *             engine (dp_client_lora) and change the list only when every
 *             live engine did it; a request's lora_name travels in its ADD
 *
 * With --api-server-count > 1 each API server has its own list: an adapter
 * loaded at runtime through one of them is on every engine but known only
 * to that API server.
 */
#ifndef VLLM_DIST_DP_LORA_H
#define VLLM_DIST_DP_LORA_H

#include "dist/dp_client.h"
#include "server/serving.h"

typedef struct dp_lora dp_lora;

/* c is borrowed (the frontend owns it) and must outlive every call. */
vllm_status dp_lora_create(dp_client *c, dp_lora **out);
/* An adapter the engines loaded at start-up. */
vllm_status dp_lora_add(dp_lora *l, const char *name, const char *path);
const serving_lora_ops *dp_lora_ops(void);
void dp_lora_free(dp_lora *l);

#endif
