/*
 * serving_lora.c - the server's LoRA routes, as vLLM's OpenAIServingModels
 * (vllm/entrypoints/openai/serving_models.py):
 *
 *   GET  /v1/models                 adapters after the base model: id = name,
 *                                   root = the adapter's path, parent = its
 *                                   base_model_name or the served model name
 *   POST /v1/load_lora_adapter      {"lora_name", "lora_path"} -> 200 text
 *                                   "Success: LoRA adapter '<name>' added successfully."
 *   POST /v1/unload_lora_adapter    {"lora_name"} -> 200 text
 *                                   "Success: LoRA adapter '<name>' removed successfully."
 *
 * The two POST routes exist only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=1
 * (otherwise FastAPI's 404 {"detail":"Not Found"}, as vLLM, which does not
 * mount them). Errors are vLLM's: 400 InvalidUserInput for a missing field
 * or a name already loaded, 404 NotFoundError for an unknown adapter at
 * unload and for a path with no adapter at load ("No adapter found for
 * ..."), 400 BadRequestError with the loader's message for an adapter that
 * does not fit the model (rank, target modules, shapes). A failed load
 * changes nothing: the server keeps serving what it served.
 *
 * Loading runs on the HTTP thread that received the request (reading and
 * converting the files); the engine's adapter table is thread-safe
 * (vllm_engine_load_lora), so the engine thread never waits for a file.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "server/openai_protocol.h"
#include "server/serving.h"

static void respond_text(http_request *r, const char *text) {
    http_respond(r, 200, "text/plain; charset=utf-8", text, strlen(text));
}

static void fail(http_request *r, int status, const char *type, const char *fmt, const char *a, const char *b) {
    openai_error e;
    openai_fail(&e, status, type, NULL, fmt, a, b);
    serving_respond_error(r, &e);
}

bool serving_lora_enabled(const serving_ctx *ctx) { return ctx->lora_engine || ctx->lora_ops; }

bool serving_lora_has(const serving_ctx *ctx, const char *name) {
    if (ctx->lora_ops) return ctx->lora_ops->has(ctx->lora_ud, name);
    return ctx->lora_engine && vllm_engine_has_lora(ctx->lora_engine, name);
}

static int32_t lora_list(const serving_ctx *ctx, vllm_lora_info *out, int32_t cap) {
    if (ctx->lora_ops) return ctx->lora_ops->list(ctx->lora_ud, out, cap);
    return vllm_engine_list_loras(ctx->lora_engine, out, cap);
}

static vllm_status lora_load(const serving_ctx *ctx, const char *name, const char *path) {
    if (ctx->lora_ops) return ctx->lora_ops->load(ctx->lora_ud, name, path);
    return vllm_engine_load_lora(ctx->lora_engine, name, path);
}

static vllm_status lora_unload(const serving_ctx *ctx, const char *name) {
    if (ctx->lora_ops) return ctx->lora_ops->unload(ctx->lora_ud, name);
    return vllm_engine_unload_lora(ctx->lora_engine, name);
}

void serving_lora_models(serving_ctx *ctx, json_t *data, int64_t now) {
    if (!serving_lora_enabled(ctx)) return;
    enum { CAP = 256 };
    vllm_lora_info *info = malloc(CAP * sizeof *info);
    if (!info) return;
    int32_t n = lora_list(ctx, info, CAP);
    for (int32_t i = 0; i < n && i < CAP; i++) {
        /* base_model_name counts only when it is a served name (vLLM's is_base_model) */
        const char *want = ctx->lora_parent ? ctx->lora_parent(info[i].name) : NULL, *parent = ctx->served_names[0];
        for (int k = 0; want && k < ctx->num_served_names; k++)
            if (!strcmp(want, ctx->served_names[k])) parent = ctx->served_names[k];
        json_array_append_new(data, openai_model_card(info[i].name, info[i].path, parent, 0, now));
    }
    free(info);
}

/* The body's string field, or NULL (absent, null, not a string, empty). */
static const char *field(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s && s[0] ? s : NULL;
}

static json_t *parse_body(http_request *r) {
    size_t len;
    const char *body = http_request_body(r, &len);
    json_t *j = json_loadb(body, len, 0, NULL);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        fail(r, 400, "Bad Request", "%s%s", "The request body is not a JSON object", "");
        return NULL;
    }
    return j;
}

static bool runtime_updates(serving_ctx *ctx, http_request *r) {
    if (ctx->allow_runtime_lora) return true;
    static const char body[] = "{\"detail\":\"Not Found\"}";
    http_respond(r, 404, "application/json", body, sizeof body - 1);
    return false;
}

void serving_load_lora_adapter(serving_ctx *ctx, http_request *r) {
    if (!runtime_updates(ctx, r)) return;
    json_t *j = parse_body(r);
    if (!j) return;
    const char *name = field(j, "lora_name"), *path = field(j, "lora_path");
    char msg[512];
    if (!name || !path) {
        fail(r, 400, "InvalidUserInput", "%s%s", "Both 'lora_name' and 'lora_path' must be provided.", "");
    } else if (!serving_lora_enabled(ctx)) {
        fail(r, 400, "BadRequestError", "%s%s", "LoRA is not enabled. Please relaunch with --enable-lora.", "");
    } else if (serving_lora_has(ctx, name)) {
        fail(r, 400, "InvalidUserInput", "The lora adapter '%s' has already been loaded.%s", name, "");
    } else {
        vllm_status rc = lora_load(ctx, name, path);
        if (rc == VLLM_OK) {
            snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' added successfully.", name);
            respond_text(r, msg);
        } else if (rc == VLLM_ERR_IO) {
            fail(r, 404, "NotFoundError", "Loading lora %s failed: No adapter found for %s", name, path);
        } else {
            fail(r, 400, rc == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "already been loaded") ? "InvalidUserInput"
                                                                                               : "BadRequestError",
                 "%s%s", vllm_errmsg(), "");
        }
    }
    json_decref(j);
}

void serving_unload_lora_adapter(serving_ctx *ctx, http_request *r) {
    if (!runtime_updates(ctx, r)) return;
    json_t *j = parse_body(r);
    if (!j) return;
    const char *name = field(j, "lora_name");
    char msg[512];
    if (!name && !json_is_integer(json_object_get(j, "lora_int_id"))) {
        fail(r, 400, "InvalidUserInput", "%s%s", "either 'lora_name' and 'lora_int_id' needs to be provided.", "");
    } else if (!serving_lora_enabled(ctx) || !name || lora_unload(ctx, name) != VLLM_OK) {
        fail(r, 404, "NotFoundError", "The lora adapter '%s' cannot be found.%s", name ? name : "None", "");
    } else {
        snprintf(msg, sizeof msg, "Success: LoRA adapter '%s' removed successfully.", name);
        respond_text(r, msg);
    }
    json_decref(j);
}
