/*
 * serving_chat.c - POST /v1/chat/completions (vLLM's OpenAIServingChat).
 * Placeholder until the chat template interpreter (src/template) lands.
 */
#include <stdlib.h>

#include "server/serving.h"

bool serving_chat_prompt(serving_ctx *ctx, openai_request *req, int32_t **ids, int32_t *n,
                         openai_error *e) {
    *ids = NULL;
    *n = 0;
    return openai_fail(e, 501, "Not Implemented", "messages",
                       "Chat templates are not available in this build yet.");
}

void serving_chat_completions(serving_ctx *ctx, http_request *http, openai_request *req) {
    openai_error e;
    int32_t *ids = NULL, n = 0;
    serving_chat_prompt(ctx, req, &ids, &n, &e);
    openai_request_free(req);
    serving_respond_error(http, &e);
}

vllm_status serving_template_compile(const char *src, size_t len, jinja_template **out) {
    *out = NULL;
    return VLLM_OK;
}

void serving_template_free(jinja_template *t) { (void)t; }

bool serving_template_wants_parts(const jinja_template *t) { return false; }
