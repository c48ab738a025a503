/*
 * text.h - the text side of the public C API: the model's tokenizer, its
 * chat template, and the output processor that turns the engine's token ids
 * into vLLM's outputs (text, stop strings, finish and stop reasons,
 * logprobs). vllm.h's engine works on token ids only; a front end (the
 * Python package python/vllmc, `vllmc generate`, the server) adds these:
 *
 *     vllm_tokenizer *tok;
 *     vllm_tokenizer_load("models/stories260K", &tok);
 *     int32_t *ids, n;
 *     vllm_tokenizer_encode(tok, "Once upon a time", 16, true, &ids, &n);
 *     vllm_output_processor *op;
 *     vllm_output_processor_create(tok, &op);
 *     vllm_engine_add_request(e, "r0", ids, n, &sp, NULL);
 *     vllm_output_processor_add_request(op, &(vllm_output_request){
 *         .request_id = "r0", .prompt_ids = ids, .num_prompt_ids = n, .sp = &sp,
 *         .skip_special_tokens = true, .detokenize = true});
 *     while (vllm_engine_has_unfinished(e)) {
 *         const vllm_step_output *so;
 *         const vllm_output_result *res;
 *         vllm_engine_step(e, &so);
 *         vllm_output_processor_process(op, so, &res);
 *         for each res->stops[i]: vllm_engine_stop_sequence(e, id, index);
 *         for each res->deltas[i]: append its text, ids, logprobs
 *     }
 *     vllm_output_processor_free(op);
 *     vllm_free(ids);
 *     vllm_tokenizer_free(tok);
 *
 * The rules of the output processor (vLLM 0.11's, and where we differ) are
 * in src/engine/output_processor.h; the tokenizer's in
 * src/tokenizer/tokenizer.h; the chat template's in
 * src/template/chat_template.h. Strings and arrays these functions allocate
 * for the caller are freed with vllm_free.
 */
#ifndef VLLM_TEXT_H
#define VLLM_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"
#include "vllm/vllm.h"

#pragma GCC visibility push(default) /* libvllm.a exports only what include/vllm/ declares */

/* Frees what vllm_tokenizer_encode/decode and vllm_chat_template_render return. */
void vllm_free(void *p);

/* ---- tokenizer ---------------------------------------------------------- */

typedef struct vllm_tokenizer vllm_tokenizer;

/* model: a Hugging Face model directory (tokenizer.json, and
 * tokenizer_config.json if present) or a GGUF file (its embedded
 * tokenizer). Immutable once loaded: safe to share between threads. */
vllm_status vllm_tokenizer_load(const char *model, vllm_tokenizer **out);
void vllm_tokenizer_free(vllm_tokenizer *t);
int32_t vllm_tokenizer_vocab_size(const vllm_tokenizer *t); /* highest id + 1 */
int32_t vllm_tokenizer_bos_token_id(const vllm_tokenizer *t); /* -1 if none */
int32_t vllm_tokenizer_eos_token_id(const vllm_tokenizer *t); /* -1 if none */
/* tokenizer.encode(text, add_special_tokens=...): *ids malloc'ed (never NULL
 * on success). Any bytes are accepted (invalid UTF-8 becomes U+FFFD). */
vllm_status vllm_tokenizer_encode(const vllm_tokenizer *t, const char *text, size_t len,
                                  bool add_special_tokens, int32_t **ids, int32_t *num_ids);
/* tokenizer.decode(ids, skip_special_tokens=...): NUL-terminated, *len bytes.
 * An id outside the vocabulary is VLLM_ERR_INVALID naming it. */
vllm_status vllm_tokenizer_decode(const vllm_tokenizer *t, const int32_t *ids, int32_t num_ids,
                                  bool skip_special_tokens, char **text, size_t *len);
/* convert_ids_to_tokens for one id ("▁the", "Ġthe", "<s>"), borrowed from
 * the tokenizer; NULL outside the vocabulary. */
const char *vllm_tokenizer_id_to_token(const vllm_tokenizer *t, int32_t id);
/* The id of an exact token string, or -1. */
int32_t vllm_tokenizer_token_to_id(const vllm_tokenizer *t, const char *token);

/* ---- chat template ------------------------------------------------------ */

typedef struct vllm_chat_template vllm_chat_template;

/* The model's chat template (tokenizer_config.json's chat_template, or a
 * GGUF file's tokenizer.chat_template), or override_source (template text,
 * vLLM's chat_template argument) when not NULL. VLLM_ERR_NOT_FOUND when the
 * model has none and no override is given; a template that does not parse
 * is VLLM_ERR_FORMAT naming the line. */
vllm_status vllm_chat_template_load(const char *model, const char *override_source,
                                    vllm_chat_template **out);
void vllm_chat_template_free(vllm_chat_template *ct);
/* The prompt text of a conversation: the messages normalized as vLLM's
 * parse_chat_messages does (content parts joined or kept as the template
 * expects), rendered as transformers' apply_chat_template(tokenize=False).
 * messages_json: a JSON array of OpenAI messages; tools_json: NULL or a
 * JSON array; kwargs_json: NULL or a JSON object of extra template
 * variables (chat_template_kwargs). Bad JSON or shapes are
 * VLLM_ERR_INVALID; a template's raise_exception is VLLM_ERR_INVALID with
 * its message. */
vllm_status vllm_chat_template_render(const vllm_chat_template *ct, const char *messages_json,
                                      const char *tools_json, const char *kwargs_json,
                                      bool add_generation_prompt, char **text, size_t *len);

/* ---- output processor --------------------------------------------------- */

typedef struct vllm_output_processor vllm_output_processor;

/* What the processor needs of a request; everything is copied. */
typedef struct vllm_output_request {
    const char *request_id;              /* the engine's id for it */
    const int32_t *prompt_ids;           /* primes the detokenizers */
    int32_t num_prompt_ids;
    const vllm_sampling_params *sp;      /* n, min_tokens, ignore_eos, logprobs, prompt_logprobs */
    const char *const *stop;             /* stop strings (non-empty) */
    int32_t num_stop;
    bool include_stop_str_in_output;
    bool skip_special_tokens;            /* vLLM's default: true */
    bool detokenize;                     /* vLLM's default: true */
    void *ud;                            /* the caller's, handed back in deltas */
} vllm_output_request;

/* One logprob entry: a token, its logprob and rank, and its text. */
typedef struct vllm_output_logprob {
    int32_t token_id;
    float logprob;
    int32_t rank;                        /* 1-based */
    const char *text;                    /* NUL-terminated; NULL without detokenize */
    size_t text_len;
    const char *bytes;                   /* its bytes in a text (tokenizer_token_bytes), */
    size_t bytes_len;                    /* maybe not UTF-8; NULL without detokenize */
} vllm_output_logprob;

/* The logprobs of one output token: entries[0] is the sampled token. */
typedef struct vllm_output_token_logprobs {
    int32_t num_entries;
    const vllm_output_logprob *entries;  /* (num_entries) */
} vllm_output_token_logprobs;

/* What one sequence produced since its last delta. */
typedef struct vllm_output_delta {
    const char *request_id;
    void *ud;                            /* vllm_output_request.ud */
    int32_t index;                       /* sequence 0..n-1 */
    int32_t output_index;                /* its record in the step's outputs; -1 if none (abort_all) */
    const char *text;                    /* new final text, NUL-terminated (text_len bytes) */
    size_t text_len;
    const int32_t *token_ids;            /* new ids (cut after a stop string's token) */
    int32_t num_tokens;
    const vllm_output_token_logprobs *logprobs; /* (num_tokens), or NULL (no logprobs asked) */
    vllm_finish_reason finish_reason;    /* NONE while the sequence runs */
    const char *stop_str;                /* stop_reason when a string, else NULL */
    int32_t stop_token_id;               /* stop_reason when a token id, else -1 */
    int32_t num_prompt_tokens;
    int32_t num_cached_tokens;           /* prompt tokens the prefix cache served (max so far) */
    /* prompt_logprobs (sp->prompt_logprobs >= 0): on each sequence's first
     * delta, the prompt tokens' logprobs from position 1 on (position 0 has
     * none; vLLM's None), in the same entry order as logprobs; owned by the
     * processor until the request is done and the next call. */
    bool has_prompt_logprobs;
    int32_t num_prompt_logprobs;
    const vllm_output_token_logprobs *prompt_logprobs;
} vllm_output_delta;

typedef struct vllm_output_seq_ref {
    const char *request_id;
    int32_t index;
} vllm_output_seq_ref;

typedef struct vllm_output_done {
    const char *request_id;
    void *ud;
} vllm_output_done;

/* One call's results, owned by the processor until its next
 * process/abort_all call (or free). */
typedef struct vllm_output_result {
    int32_t num_deltas;
    const vllm_output_delta *deltas;     /* in the order of the step's outputs */
    int32_t num_stops;
    const vllm_output_seq_ref *stops;    /* running in the engine, but finished here: stop them */
    int32_t num_done;
    const vllm_output_done *done;        /* requests forgotten in this call, after their deltas */
} vllm_output_result;

/* tok is borrowed and must outlive the processor. One thread drives a processor. */
vllm_status vllm_output_processor_create(const vllm_tokenizer *tok, vllm_output_processor **out);
void vllm_output_processor_free(vllm_output_processor *op);
/* Registers a request after the engine accepted it. VLLM_ERR_INVALID for a
 * duplicate id, an empty stop string, stop strings without detokenize, n <
 * 1, or a prompt id outside the vocabulary. */
vllm_status vllm_output_processor_add_request(vllm_output_processor *op, const vllm_output_request *req);
/* Turns one engine step's outputs into deltas (see output_processor.h). */
vllm_status vllm_output_processor_process(vllm_output_processor *op, const vllm_step_output *out,
                                          const vllm_output_result **res);
/* Ends every live request here (the engine is gone): an ABORT delta for
 * each unfinished sequence, then every request is done. */
vllm_status vllm_output_processor_abort_all(vllm_output_processor *op, const vllm_output_result **res);

#pragma GCC visibility pop
#endif
