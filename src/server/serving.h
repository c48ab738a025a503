/*
 * serving.h - vLLM's OpenAIServingCompletion / OpenAIServingChat: from a
 * parsed request to engine requests and back to OpenAI responses.
 *
 * One serving_call per API call. A completion with several prompts becomes
 * one engine request per prompt ("<id>-<i>"), each with n sequences; choice
 * index = prompt * n + sequence, as vLLM numbers them. The call lives until
 * both the HTTP exchange has ended and the engine has finished every
 * sequence (a reference each), so a client that leaves early aborts its
 * requests but never frees memory the output thread still uses.
 *
 * Threads: serving_*_completions run on an MHD thread (parse, tokenize or
 * render, validate, submit); the sink callbacks run on the frontend's output
 * thread (detokenized deltas -> chunks appended to the HTTP stream, or
 * accumulated for the final JSON); the HTTP close callback runs on an MHD
 * thread and only sets a flag and queues aborts.
 */
#ifndef VLLM_SERVER_SERVING_H
#define VLLM_SERVER_SERVING_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/grammar_cache.h"
#include "server/frontend.h"
#include "server/http.h"
#include "server/openai_protocol.h"
typedef struct chat_template chat_template; /* template/chat_template.h */
typedef struct metrics metrics;             /* metrics/metrics.h */
typedef struct tracing tracing;             /* metrics/tracing.h */
#include "tokenizer/tokenizer.h"

/* What every call reads; set up at start-up, read-only afterwards (except
 * the counters). */
/* The adapter calls of serving_ctx.lora_ops (thread-safe, as the engine's). */
typedef struct serving_lora_ops {
    bool (*has)(void *ud, const char *name);
    int32_t (*list)(void *ud, vllm_lora_info *out, int32_t cap);
    vllm_status (*load)(void *ud, const char *name, const char *path);
    vllm_status (*unload)(void *ud, const char *name);
} serving_lora_ops;

typedef struct serving_ctx {
    frontend *fe;
    metrics *metrics;                    /* NULL: none; the caller feeds it engine steps */
    tracing *tracing;                    /* NULL: off; fed through the metrics' observer */
    const tokenizer *tok;
    const chat_template *chat_template;  /* NULL: the model has none */
    const json_t *tokenizer_config;      /* for templates sent with requests; may be NULL */
    const char *const *served_names;     /* --served-model-name (>= 1) */
    int num_served_names;
    const char *model_root;              /* the model path, /v1/models "root" */
    int32_t max_model_len;
    int32_t max_logprobs;
    openai_defaults defaults;
    vllm_scheduling_policy policy;
    bool trust_request_chat_template;
    bool enable_force_include_usage;
    const char *response_role;           /* "assistant" */
    bool log_requests;                   /* --enable-log-requests */
    bool log_outputs;                    /* --enable-log-outputs (with log_requests, as vLLM) */
    int32_t max_log_len;                 /* --max-log-len: prompt/output characters and ids logged; -1 = all */
    bool enable_prompt_tokens_details;   /* usage.prompt_tokens_details (cached_tokens) */
    bool return_tokens_as_token_ids;     /* --return-tokens-as-token-ids: unless a request says */
    atomic_llong server_load;            /* calls in flight (GET /load) */
    /* Admission control (--max-num-queued-reqs): sequences admitted and not
     * yet released (waiting + running; a call counts num_prompts * n). A
     * call that would take it past max_num_queued_reqs gets 503 with
     * Retry-After instead of queueing; 0 = unbounded. */
    int64_t max_num_queued_reqs;
    atomic_llong num_queued_seqs;
    atomic_ullong next_id;
    struct responses_store *responses; /* the Responses API's store (serving_responses.c) */
    int32_t eos_ids[8];                  /* the model's EOS ids (beam search) */
    int32_t num_eos_ids;
    atomic_int beam_workers;             /* beam searches running (serving_beam.c) */
    /* Structured outputs: the engine's grammar cache (engine_grammar_cache;
     * thread-safe) and how long a call waits for its constraint to compile
     * before it answers 400 (the engine's structured_outputs_compile_timeout).
     * NULL: constrained requests get a 400. */
    grammar_cache *grammars;
    double compile_timeout;
    /* LoRA (docs/lora.md): the engine, for its thread-safe adapter calls
     * (vllm_engine_load_lora ...; nothing else), NULL when LoRA is off; a
     * request's "model" naming an adapter runs it; /v1/load_lora_adapter
     * and /v1/unload_lora_adapter answer only with allow_runtime_lora
     * (VLLM_ALLOW_RUNTIME_LORA_UPDATING). lora_parent: an adapter's
     * base_model_name from --lora-modules, or NULL. */
    vllm_engine *lora_engine;
    /* LoRA with engines in other processes (data parallel: dist/dp_lora.h):
     * set, these answer the adapter calls instead of lora_engine's */
    const serving_lora_ops *lora_ops;
    void *lora_ud;
    bool allow_runtime_lora;
    const char *(*lora_parent)(const char *name);
    /* KV connector (docs/disagg.md): engine_id when the engine saves KV
     * (kv_producer, kv_both), else NULL; answers do_remote_decode */
    const char *kv_engine_id;
    /* --enable-auto-tool-choice, --tool-call-parser, --reasoning-parser
     * (server/tool_parser.h's kinds; 0 = none) */
    bool enable_auto_tool_choice;
    int tool_call_parser;
    int reasoning_parser;
    const char *kv_host;                 /* its KV server (TcpConnector producer), or NULL */
    int32_t kv_port;
} serving_ctx;

/* A response's kv_transfer_params (serving_kv.c): for a request with
 * kv_transfer_params.do_remote_decode on an engine that saves its KV, what
 * the decode instance needs (do_remote_prefill, remote_engine_id,
 * remote_request_id); else JSON null. New reference. */
json_t *serving_kv_transfer_params(const serving_ctx *ctx, const openai_request *req, const char *request_id);

/* A request's kv_transfer_params do_remote_prefill with remote_host and
 * remote_port: the host (borrowed from the request) and *port; else NULL. */
const char *serving_kv_remote(const openai_request *req, int32_t *port);

/* Handle POST /v1/completions and /v1/chat/completions (inside the HTTP
 * handler). Takes ownership of req. */
void serving_completions(serving_ctx *ctx, http_request *http, openai_request *req);
void serving_chat_completions(serving_ctx *ctx, http_request *http, openai_request *req);

/* The Responses API (serving_responses.c): POST /v1/responses (body parsed
 * here), GET /v1/responses/{id}, POST /v1/responses/{id}/cancel (rest = the
 * path after "/v1/responses/"). The store is made by serving_responses_init
 * (VLLM_ENABLE_RESPONSES_API_STORE=1 turns storing on, as in vLLM). */
vllm_status serving_responses_init(serving_ctx *ctx);
void serving_responses_free(serving_ctx *ctx);
void serving_responses_create(serving_ctx *ctx, http_request *http);
void serving_responses_get(serving_ctx *ctx, http_request *http, const char *rest);

/* LoRA (serving_lora.c): the adapters' /v1/models cards appended to data;
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter. */
void serving_lora_models(serving_ctx *ctx, json_t *data, int64_t now);
void serving_load_lora_adapter(serving_ctx *ctx, http_request *r);
void serving_unload_lora_adapter(serving_ctx *ctx, http_request *r);
/* LoRA is on (lora_engine or lora_ops); an adapter called name is loaded. */
bool serving_lora_enabled(const serving_ctx *ctx);
bool serving_lora_has(const serving_ctx *ctx, const char *name);

/* The token ids of a chat request's prompt (template rendered, then
 * tokenized), as /v1/chat/completions and /tokenize's chat form make them. */
bool serving_chat_prompt(serving_ctx *ctx, openai_request *req, int32_t **ids, int32_t *n,
                         openai_error *e);

/* Sends e as vLLM's error JSON from inside the handler. */
void serving_respond_error(http_request *http, const openai_error *e);
/* The served name a request's `model` refers to, or NULL (404 with e set). */
const char *serving_check_model(serving_ctx *ctx, const char *model, openai_error *e);
/* The LoRA adapter a call's checked model name selects, or NULL (a served
 * name of the base model, or LoRA off). */
const char *serving_lora_name(const serving_ctx *ctx, const char *model);

/* ---- shared by serving.c, serving_completion.c, serving_chat.c ------------ */

typedef struct serving_call serving_call;

/* The response format: completions or chat. */
typedef struct serving_format {
    /* stream: after every engine request was accepted (chat sends roles here) */
    void (*stream_begin)(serving_call *c);
    /* stream: one delta of one choice -> SSE chunk(s) */
    void (*stream_delta)(serving_call *c, int32_t choice, const output_delta *d,
                         const char *text, size_t text_len);
    /* non-stream: the whole response once every choice has finished */
    json_t *(*final_response)(serving_call *c);
    /* Optional (NULL: the completions/chat behaviour), for the Responses API: */
    /* stream: ends the stream instead of the usage chunk and "data: [DONE]" */
    void (*stream_end)(serving_call *c);
    /* every engine request was accepted and c->background: answers the HTTP
     * request now (the generation goes on without it) */
    void (*background_begin)(serving_call *c);
    /* non-stream and background: sees the final response before it is sent */
    void (*completed)(serving_call *c, json_t *response);
} serving_format;

typedef struct serving_choice {
    char *text;                  /* non-stream: all text; stream: unused */
    size_t text_len, text_cap;
    int32_t *token_ids;          /* all generated ids (usage, return_token_ids) */
    int32_t num_tokens;
    size_t cap_tokens;
    json_t *logprobs;            /* non-stream: accumulated logprobs (format's shape) */
    int64_t lp_offset;           /* characters the logprob tokens so far span (text_offset) */
    bool first_sent;             /* stream: echo / first chunk done */
    bool finished;
    vllm_finish_reason finish_reason;
    char *stop_str;              /* stop_reason when a string */
    int32_t stop_token_id;       /* stop_reason when a token id, else -1 */
    void *parse;                 /* stream: chat's tool / reasoning parser state, freed with parse_free */
    void (*parse_free)(void *parse);
} serving_choice;

typedef struct serving_prompt {
    vllm_sampling_params sp;     /* max_tokens may differ per prompt */
    int32_t *ids;
    int32_t num_ids;
    char *text;                  /* for echo; NULL until needed */
    size_t text_len;
    int32_t num_cached;
    json_t *prompt_logprobs;     /* vLLM's prompt_logprobs list, once the first delta brought it */
    bool done;                   /* the engine finished all its sequences */
} serving_prompt;

struct serving_call {
    atomic_int refs;
    serving_ctx *ctx;
    http_request *http;
    const serving_format *fmt;
    openai_request req;
    const char *model_name;
    char id[80];                 /* cmpl-... / chatcmpl-... */
    int64_t created;
    double arrival;              /* vllm_monotonic_time() when the call was parsed (metrics) */
    int32_t n;
    int32_t logprobs;            /* -1 = none, else top-N */
    serving_prompt *prompts;
    int32_t num_prompts;
    serving_choice *choices;     /* (num_prompts * n) */
    int32_t num_choices;
    char *echo_text;             /* chat echo: the last message's content */
    /* output thread */
    int32_t num_added, num_add_failed, num_finished;
    openai_error add_error;
    bool streaming, responded;
    double last_probe;
    atomic_bool http_gone;
    int64_t admitted_seqs;       /* counted in ctx->num_queued_seqs until release */
    /* A background call (Responses API) keeps generating after its HTTP
     * exchange ended: neither the client leaving nor the early answer
     * aborts it; only serving_call_abort does. */
    bool background;
    void *ext;                   /* the format's own state, freed with ext_free */
    void (*ext_free)(void *ext);
    grammar_cache_entry *grammar; /* the READY grammar of req.structured (a reference), or NULL */
};

/* Submits the call's prompts (ctx, http, req, fmt, prompts, sp, n filled in).
 * Responds with an error itself when nothing could be submitted. */
void serving_submit(serving_call *c);
serving_call *serving_call_new(serving_ctx *ctx, http_request *http, openai_request *req,
                               const serving_format *fmt, const char *id_prefix);
void serving_call_release(serving_call *c);
void serving_call_retain(serving_call *c);
/* Aborts the call's unfinished engine requests (any thread); their choices
 * finish with "abort" as the engine reports them. */
void serving_call_abort(serving_call *c);

/* A chat request run with another output format (the Responses API): as
 * serving_chat_completions, with fmt, the id prefix, the format's state
 * (ext, freed with ext_free also when the call cannot be made) and the
 * background flag. Takes ownership of req. */
typedef struct serving_chat_as {
    const serving_format *fmt;
    const char *id_prefix;
    void *ext;
    void (*ext_free)(void *ext);
    bool background;
} serving_chat_as;
void serving_chat_run(serving_ctx *ctx, http_request *http, openai_request *req, const serving_chat_as *as);

/* SSE framing: "data: <json>\n\n". Consumes j. */
void serving_send_event(serving_call *c, json_t *j, bool exclude_nulls);
json_t *serving_stop_reason(const serving_choice *ch);

/* A logprob token's text: its bytes in a text (output_logprob.bytes; a
 * byte that is not valid UTF-8 on its own becomes U+FFFD here, the raw bytes
 * are chat's `bytes`), or "token_id:N" with return_tokens_as_token_ids as
 * vLLM. Not vLLM's decode([id]), which drops SentencePiece's leading space
 * and turns byte pieces into U+FFFD: OpenAI's contract is that the tokens'
 * bytes concatenate to the text. */
json_t *serving_token_json(serving_call *c, const output_logprob *e);

json_t *serving_usage(serving_call *c, bool omit_null);
/* The non-streaming response object up to its usage (id, object, created, model,
 * choices (stolen), service_tier, system_fingerprint, usage), in vLLM's key
 * order; the caller appends its endpoint's extra keys. */
json_t *serving_response_new(serving_call *c, const char *object, json_t *choices);
bool serving_tokenize_prompt(serving_ctx *ctx, const char *text, size_t len, bool add_special,
                             int32_t **ids, int32_t *n, openai_error *e);
bool serving_check_prompt_ids(serving_ctx *ctx, const int32_t *ids, int32_t n, openai_error *e);
/* truncate_prompt_tokens: keeps the last N ids (N = max_model_len for -1). */
void serving_truncate_prompt(serving_ctx *ctx, const openai_request *req, int32_t *ids, int32_t *n);
/* What the engine would refuse in sp, as vLLM's 400s: ids outside the
 * vocabulary (logit_bias, allowed_token_ids, bad words). First tokenizes
 * req's bad_words (once per request, vLLM's update_from_tokenizer: each word
 * left-stripped, alone and after a space when that gives a different first
 * token and as many tokens) and points sp at them. */
bool serving_check_sampling(serving_ctx *ctx, openai_request *req, vllm_sampling_params *sp, openai_error *e);

/* use_beam_search in /v1/completions (serving_beam.c): takes req and the
 * prompts' ids (the caller frees the prompts array and what is left in it);
 * answers on a worker thread. serving_beam_wait waits (up to seconds) until
 * no beam search runs: the server's shutdown, before the frontend goes. */
void serving_beam_search(serving_ctx *ctx, http_request *http, openai_request *req, serving_prompt *prompts,
                         int32_t num_prompts, const char *model_name);
bool serving_beam_wait(serving_ctx *ctx, double seconds);

#endif
