/*
 * openai_protocol.h - vLLM's OpenAI protocol (vllm/entrypoints/openai/protocol.py)
 * in C: CompletionRequest and ChatCompletionRequest parsed from JSON with
 * vLLM's field names, defaults and validation messages, their conversion to
 * engine sampling parameters, and the pieces responses are built from
 * (errors, usage, logprobs) in vLLM's shapes.
 *
 * Errors come back as an openai_error (HTTP status, vLLM's `type`, the field
 * it concerns, a message); the server turns it into
 *     {"error":{"message":...,"type":...,"param":...,"code":status}}.
 * Two kinds of 400 exist in vLLM and are kept apart: request-model validation
 * (pydantic; type "Bad Request") and serving-layer ValueErrors (type
 * "BadRequestError"). Unknown fields are accepted; their names are returned
 * so the caller can log them as vLLM does.
 */
#ifndef VLLM_SERVER_OPENAI_PROTOCOL_H
#define VLLM_SERVER_OPENAI_PROTOCOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "vllm/vllm.h"

#define OPENAI_MAX_STOP 32

typedef struct openai_error {
    int status;        /* 0 = no error */
    const char *type;  /* "Bad Request", "BadRequestError", "NotFoundError", ... */
    char param[64];    /* the field, or "" (→ null) */
    char message[1024];
} openai_error;

/* Sets e and returns false, so a check reads `return openai_fail(e, ...)`. */
bool openai_fail(openai_error *e, int status, const char *type, const char *param,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The error body JSON (malloc'ed). */
char *openai_error_body(const openai_error *e);

/* One completion prompt: text, or token ids (text == NULL). */
typedef struct openai_prompt {
    char *text;
    size_t text_len;
    int32_t *ids;
    int32_t num_ids;
} openai_prompt;

/* A parsed request. Optional numbers carry has_* flags: unset (or null)
 * means "the model's generation config, else vLLM's default". */
typedef struct openai_request {
    bool chat;
    char *model;                 /* NULL = the served model */
    char *request_id;            /* chat's optional `request_id`, else NULL */
    /* completions */
    openai_prompt *prompts;
    int32_t num_prompts;
    /* chat (borrowed references into body) */
    json_t *messages, *tools, *chat_template_kwargs, *documents;
    const char *chat_template;
    bool add_generation_prompt, continue_final_message;
    /* common */
    bool stream, include_usage, continuous_usage_stats, echo;
    bool has_max_tokens;
    int64_t max_tokens;          /* completions default 16; chat: max_completion_tokens or max_tokens */
    int32_t n;
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    double temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
    double presence_penalty, frequency_penalty;
    bool has_seed;
    int64_t seed;
    char *stop[OPENAI_MAX_STOP];
    int32_t num_stop;
    int32_t stop_token_ids[VLLM_MAX_STOP_TOKEN_IDS];
    int32_t num_stop_token_ids;
    bool include_stop_str_in_output, ignore_eos, skip_special_tokens;
    bool spaces_between_special_tokens;
    int32_t min_tokens;
    int32_t logprobs;            /* -1 = none; completions: N; chat: top_logprobs if logprobs */
    int32_t prompt_logprobs;     /* -1 = none (completions: echo with logprobs asks for them too) */
    int32_t priority;
    char *cache_salt;
    bool add_special_tokens;     /* completions true, chat false */
    int32_t truncate_prompt_tokens; /* keep only the last N prompt tokens; 0 = all, -1 = max_model_len */
    int32_t *allowed_token_ids;  /* owned; NULL when unset (an empty list is an error later) */
    int32_t num_allowed_token_ids;
    bool has_allowed_token_ids;
    json_t *kv_transfer_params;  /* borrowed from body: an object, or NULL (docs/disagg.md) */
    json_t *bad_words;           /* borrowed from body: a list of strings, or NULL */
    int32_t *bad_words_ids, *bad_words_lens; /* owned: serving_check_sampling tokenizes them */
    int32_t num_bad_words;
    bool return_token_ids, return_tokens_as_token_ids;
    int32_t num_logit_bias;
    int32_t logit_bias_ids[VLLM_MAX_LOGIT_BIAS];
    float logit_bias_values[VLLM_MAX_LOGIT_BIAS];
    char *tool_choice;           /* "none", "auto", "required", "named" */
    bool use_beam_search;        /* completions: n is the beam width (serving_beam.c) */
    double length_penalty;       /* beam search's, 1.0 */
    char *tool_choice_name;      /* "named": the function's name */
    /* structured outputs: the one constraint of response_format,
     * structured_outputs or the guided_* fields (kind NONE = none); its
     * text and whitespace_pattern are owned; structured_field names the
     * field it came from (for errors: "response_format", ...) */
    vllm_structured_outputs structured;
    const char *structured_field;
    json_t *body;                /* owned */
    char unknown_fields[512];    /* comma-separated names, for the log */
} openai_request;

/* Parses a JSON body (len bytes) as a CompletionRequest (chat=false) or a
 * ChatCompletionRequest. On failure returns false with e set; req is then
 * already released. On success release with openai_request_free. */
bool openai_request_parse(const char *body, size_t len, bool chat, openai_request *req,
                          openai_error *e);
void openai_request_free(openai_request *req);

/* The structured-outputs constraint of a request object obj (its
 * response_format, structured_outputs, guided_* fields, as
 * openai_request_parse reads them): *out's text and whitespace_pattern are
 * malloc'ed (caller frees), kind NONE when there is none; *field names the
 * field it came from (static). For other front ends (vllmc generate's
 * prompts file). */
bool openai_structured_from_json(json_t *obj, bool chat, vllm_structured_outputs *out, const char **field,
                                 openai_error *e);

/* Defaults for fields a request leaves unset: the model's generation config
 * where it has the key (vLLM's get_diff_sampling_param), else vLLM's. */
typedef struct openai_defaults {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty, has_max_tokens;
    double temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
    int64_t max_tokens;          /* from max_new_tokens */
} openai_defaults;

/* From the engine's default sampling parameters (generation config applied). */
void openai_defaults_from_sampling(const vllm_sampling_params *sp, openai_defaults *d);

/* The engine's sampling parameters for a request whose prompt has prompt_len
 * tokens (vLLM's to_sampling_params + get_max_tokens + _validate_input).
 * Checks the context length with vLLM's wording and the parameter ranges with
 * SamplingParams' messages. max_logprobs: the server's --max-logprobs. */
bool openai_request_sampling_params(const openai_request *req, const openai_defaults *d,
                                    int32_t max_model_len, int32_t prompt_len,
                                    int32_t max_logprobs, vllm_sampling_params *sp,
                                    openai_error *e);

/* ---- response pieces ------------------------------------------------------- */

/* "cmpl-" / "chatcmpl-" + 32 random hex digits (vLLM's random_uuid). */
void openai_random_id(const char *prefix, char *out, size_t cap);

/* One /v1/models entry as vLLM's ModelCard, with its one model_permission:
 * parent NULL (the base model) or the base model's name (a LoRA adapter);
 * max_model_len <= 0 writes null (vLLM sets it for the base model only). */
json_t *openai_model_card(const char *id, const char *root, const char *parent, int32_t max_model_len,
                          int64_t now);

/* {"prompt_tokens","total_tokens","completion_tokens","prompt_tokens_details"}
 * with prompt_tokens_details {"cached_tokens"} when cached > 0, else null
 * (or omitted when omit_null, as in streamed usage chunks). */
json_t *openai_usage_json(int64_t prompt, int64_t completion, int64_t cached, bool omit_null);

/* A JSON string from bytes that may not be valid UTF-8 (invalid sequences
 * become U+FFFD, as Python's errors="replace"). */
json_t *openai_json_text(const char *s, size_t len);

/* Serialises compactly in insertion order, as pydantic/Starlette do. */
char *openai_dumps(const json_t *j);

#endif
