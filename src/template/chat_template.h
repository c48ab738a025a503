/*
 * chat_template.h - a model's chat template applied to an OpenAI conversation.
 *
 * Startup: chat_template_create() takes tokenizer_config.json (its
 * `chat_template`, a string or a list of {name, template}, and its special
 * tokens) and compiles every template; a template we cannot parse is a
 * startup error naming the line. Per request: chat_template_prepare_messages()
 * normalizes the request's messages the way vLLM does (content parts joined or
 * kept per the template's content format, tool-call arguments parsed from
 * JSON), then chat_template_render() renders them with the context
 * transformers' apply_chat_template builds: messages, add_generation_prompt,
 * tools, documents, bos_token/eos_token/... and the request's
 * chat_template_kwargs (e.g. enable_thinking). Render errors (a template's
 * raise_exception, a value it cannot handle) are request errors (HTTP 400).
 *
 * Lifetime: chat_template_create/chat_template_free. A chat_template is
 * immutable after creation and may be used by many threads at once.
 */
#ifndef VLLM_TEMPLATE_CHAT_TEMPLATE_H
#define VLLM_TEMPLATE_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

typedef struct chat_template chat_template;

/* tokenizer_config: the parsed tokenizer_config.json (borrowed; may be NULL
 * when override_source is given). override_source: template text that replaces
 * the config's (vllm serve --chat-template), or NULL. A config without a
 * template and no override is VLLM_ERR_NOT_FOUND. */
vllm_status chat_template_create(const json_t *tokenizer_config, const char *override_source,
                                 chat_template **out);
/* The same from a tokenizer_config.json path (big integers such as
 * model_max_length 1e30 are read as reals). */
vllm_status chat_template_load(const char *config_path, const char *override_source, chat_template **out);
void chat_template_free(chat_template *ct);

/* vLLM's "content format": does the template iterate over message content
 * parts (OPENAI) or print content as a string (STRING)? Detected from the
 * template's syntax tree, as vLLM's --chat-template-content-format auto does. */
typedef enum chat_content_format { CHAT_CONTENT_STRING, CHAT_CONTENT_OPENAI } chat_content_format;
chat_content_format chat_template_content_format(const chat_template *ct);

/* Normalizes OpenAI request messages (borrowed) into a new array (*out, caller
 * json_decref's) as vLLM's parse_chat_messages does: keeps role, content,
 * tool_calls, reasoning/reasoning_content, tool_call_id, name; content null ->
 * "" (STRING) or [] (OPENAI); a string -> [{type: text, text}] (OPENAI); text
 * parts -> joined with "\n" (STRING); empty tool_calls dropped; tool-call
 * arguments given as a JSON string parsed into an object. Bad shapes are
 * VLLM_ERR_INVALID naming the message index and field. */
vllm_status chat_template_prepare_messages(const json_t *messages, chat_content_format format, json_t **out);

typedef struct chat_template_request {
    const json_t *messages;     /* array, required (usually from chat_template_prepare_messages) */
    const json_t *tools;        /* array or NULL (the template sees none) */
    const json_t *documents;    /* array or NULL */
    bool add_generation_prompt;
    const json_t *kwargs;       /* object of extra variables (chat_template_kwargs) or NULL */
    const char *template_name;  /* pick a named template of a multi-template config, or NULL */
    int64_t now;                /* unix time for strftime_now; 0 = the clock */
    size_t max_output;          /* 0 = the interpreter's default */
} chat_template_request;

/* Renders the prompt. *out is malloc'ed (NUL-terminated, *len bytes), freed by
 * the caller. */
vllm_status chat_template_render(const chat_template *ct, const chat_template_request *req, char **out,
                                 size_t *len);

/* The special token strings the template sees (NULL when the config has none). */
const char *chat_template_bos_token(const chat_template *ct);
const char *chat_template_eos_token(const chat_template *ct);

#endif
