/*
 * bench_pyjson.h - Python's json.dumps(v, ensure_ascii=False), for the
 * MaskBench benchmark (cmd_bench_structured.c) and its tests.
 */
#ifndef VLLM_CLI_BENCH_PYJSON_H
#define VLLM_CLI_BENCH_PYJSON_H

#include <jansson.h>

#include "base/strbuf.h"

/* Appends the text of v to out, as Python's json.dumps(v, ensure_ascii=False). */
vllm_status bench_pyjson_dumps(json_t *v, strbuf *out);

#endif
