/*
 * fuzz_openai_request.c - HTTP request bodies -> OpenAI request validation:
 * openai_request_parse, openai_request_sampling_params, openai_error_body,
 * and for chat bodies chat_template_prepare_messages, on arbitrary bytes.
 *
 * Input: byte 0 picks the endpoint (bit 0: chat), the prompt length the
 * context checks see (bits 1..7: 0..127 tokens, max_model_len 128); the rest
 * is the body, exactly as the server hands it over (not NUL-terminated).
 *
 * Checks beyond memory safety, i.e. what the serving layer relies on:
 *   - a failed parse or validation sets an HTTP status in 400..599 and a
 *     message, and the error body is JSON of vLLM's shape with that code;
 *   - a parsed request has <= OPENAI_MAX_STOP stop strings, completions at
 *     least one prompt, chat a messages array (n and the numeric ranges are
 *     checked later, by the sampling parameters, as in vLLM);
 *   - validated sampling parameters pass the engine's own validation and
 *     prompt + max_tokens fits max_model_len (so the engine never sees a
 *     request it would have to refuse for its size).
 */
#include "fuzz.h"

#include "server/openai_protocol.h"
#include "template/chat_template.h"

#define FUZZ_OPENAI_MAX_MODEL_LEN 128

int fuzz_openai_request_init(void) { return 0; }

/* The error body must be {"error":{"message":str,"type":str,"param":..,"code":status}}. */
static int fuzz_openai_check_error(const openai_error *e) {
    FUZZ_CHECK(e->status >= 400 && e->status <= 599, "error status %d", e->status);
    FUZZ_CHECK(e->type && *e->type && e->message[0], "error without type or message (status %d)", e->status);
    char *body = openai_error_body(e);
    FUZZ_CHECK(body != NULL, "no error body");
    json_error_t err;
    json_t *j = json_loads(body, 0, &err);
    json_t *o = json_object_get(j, "error");
    bool ok = json_is_object(o) && json_is_string(json_object_get(o, "message")) &&
              json_is_string(json_object_get(o, "type")) &&
              json_integer_value(json_object_get(o, "code")) == e->status;
    json_decref(j);
    FUZZ_CHECK_GOTO(bad, ok, "error body not in vLLM's shape: %.300s", body);
    free(body);
    return 0;
bad:
    free(body);
    return 0;
}

int fuzz_openai_request_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool chat = data[0] & 1;
    int32_t prompt_len = data[0] >> 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    openai_request req;
    openai_error e;
    memset(&e, 0, sizeof e);
    if (!openai_request_parse(body, len, chat, &req, &e)) return fuzz_openai_check_error(&e);

    FUZZ_CHECK_GOTO(out, req.chat == chat, "chat flag");
    FUZZ_CHECK_GOTO(out, req.num_stop >= 0 && req.num_stop <= OPENAI_MAX_STOP, "%d stop strings", req.num_stop);
    for (int32_t i = 0; i < req.num_stop; i++) FUZZ_CHECK_GOTO(out, req.stop[i] != NULL, "stop[%d] NULL", i);
    if (chat) {
        FUZZ_CHECK_GOTO(out, json_is_array(req.messages), "chat request without a messages array");
        for (int f = 0; f < 2; f++) {
            json_t *msgs = NULL;
            if (chat_template_prepare_messages(req.messages, f ? CHAT_CONTENT_OPENAI : CHAT_CONTENT_STRING,
                                               &msgs) == VLLM_OK)
                FUZZ_CHECK_GOTO(out, json_array_size(msgs) == json_array_size(req.messages),
                                "prepare_messages changed the message count");
            json_decref(msgs);
        }
    } else {
        FUZZ_CHECK_GOTO(out, req.num_prompts >= 1, "completion request without a prompt");
        for (int32_t i = 0; i < req.num_prompts; i++)
            FUZZ_CHECK_GOTO(out, req.prompts[i].text || req.prompts[i].num_ids >= 0, "prompt %d", i);
    }

    vllm_sampling_params sp;
    memset(&e, 0, sizeof e);
    if (!openai_request_sampling_params(&req, NULL, FUZZ_OPENAI_MAX_MODEL_LEN, prompt_len, 20, &sp, &e)) {
        fuzz_openai_check_error(&e);
        goto out;
    }
    FUZZ_CHECK_GOTO(out, vllm_sampling_params_validate(&sp) == VLLM_OK, "validated params rejected: %s",
                    vllm_errmsg());
    FUZZ_CHECK_GOTO(out, sp.n == req.n && sp.n >= 1, "n %d vs %d", sp.n, req.n);
    FUZZ_CHECK_GOTO(out, sp.max_tokens >= 0 && (int64_t)prompt_len + sp.max_tokens <= FUZZ_OPENAI_MAX_MODEL_LEN,
                    "prompt %d + max_tokens %d > %d", prompt_len, sp.max_tokens, FUZZ_OPENAI_MAX_MODEL_LEN);
    FUZZ_CHECK_GOTO(out, sp.logprobs <= 20, "logprobs %d > max_logprobs", sp.logprobs);
out:
    openai_request_free(&req);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_openai_request_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_openai_request_one(data, size); }
#endif
