/*
 * output_processor.h - the front end's half of the engine: the engine's
 * token ids in, each sequence's text, finish and logprobs out. vLLM's
 * OutputProcessor with its RequestState, IncrementalDetokenizer and
 * LogprobsProcessor (vllm/v1/engine/output_processor.py, detokenizer.py,
 * logprobs.py), shared by every front end: the server's output thread
 * (server/frontend.c), `vllmc generate` and `vllmc bench`. The engine core
 * never sees text; this never sees the model.
 *
 *     output_processor *op;
 *     output_processor_create(tok, &op);
 *     vllm_engine_add_request(e, id, prompt, n, &sp, NULL);
 *     output_processor_add_request(op, &(output_request){.request_id = id, ...});
 *     while (vllm_engine_has_unfinished(e)) {
 *         const vllm_step_output *so;
 *         const output_result *res;
 *         vllm_engine_step(e, &so);
 *         output_processor_process(op, so, &res);
 *         for each res->deltas[i]: send or accumulate it
 *         for each res->stops[i]: vllm_engine_stop_sequence(e, id, index)
 *     }
 *     output_processor_free(op);
 *
 * Per sequence (vLLM 0.11 semantics, the rules a client sees):
 *   - Text: the sequence's tokens through an incremental detokenizer primed
 *     with the prompt (tokenizer.h; skip_special_tokens per request), then
 *     the stop-string matcher (sample/stop.h). A delta's text is final: it
 *     is never retracted; text that could still be the start of a stop
 *     string is held back until it cannot, or the sequence ends.
 *   - Stop token ids and EOS (the engine finished the sequence with
 *     VLLM_FINISH_STOP and a stop_token_id, always the step's last token):
 *     the id stays in token_ids and logprobs; its text is not in the output
 *     unless include_stop_str_in_output (vLLM's detokenizer skips it when
 *     stop_terminated). stop_reason is the id, except for the tokenizer's
 *     EOS when ignore_eos is off, which gives none (vLLM's check_stop sets
 *     request.stop_reason only for stop_token_ids; ids of
 *     generation_config.json's eos_token_id list other than the tokenizer's
 *     EOS are stop_token_ids in vLLM, so they report their id, here too).
 *   - Stop strings: the output ends at the first stop string completed in
 *     text from tokens past min_tokens (earliest completion, see stop.h;
 *     checked token by token, where vLLM checks a step's text at once and
 *     takes the first listed string found: the two differ only when one
 *     step completes two stop strings);
 *     the text is cut before it (after it with include_stop_str_in_output);
 *     finish_reason "stop", stop_reason the string, whatever the engine said
 *     in that step. The token whose text completed the match is the last of
 *     the output: later tokens of the same step (a step may commit several,
 *     speculative decoding) are dropped from token_ids and logprobs too, so
 *     the output does not depend on how many tokens a step commits. (vLLM
 *     0.11 truncates only the text and keeps the step's later ids in
 *     token_ids and logprobs, output_processor.py _new_completion_output;
 *     this is a deliberate difference.) If the engine still runs the
 *     sequence, it is listed in output_result.stops: the caller stops it
 *     there (vllm_engine_stop_sequence, or the frontend's stop command).
 *   - Other finishes (LENGTH, ABORT) release the text held back (by the
 *     stop matcher, and the detokenizer's unfinished tail, as U+FFFD).
 *   - A delta goes out for an engine output with new tokens or a finish
 *     (an output with only events, e.g. a prefill chunk, gives none), even
 *     if its text is empty for now.
 *   - Once a sequence's final delta is out, later engine outputs for it
 *     (tokens made before the engine heard of the stop) give no delta.
 *   - Logprobs (request logprobs >= 0): per token, vLLM V1's dict order: the
 *     sampled token first (its own rank), then the engine's top-N by rank
 *     without the sampled one (ranks 1..N by position), so N or N + 1
 *     entries; each with its decoded text, decode([id]) with special tokens
 *     kept, as vLLM's convert_ids_list_to_tokens, and its bytes in a text
 *     (tokenizer_token_bytes; what the server reports).
 *   - detokenize = false (vLLM's SamplingParams.detokenize, the benchmarks'
 *     --disable-detokenize): no text and no decoded logprob tokens; token
 *     ids, finishes and logprobs as above. Stop strings need text, so such a
 *     request may not have any.
 * A request is forgotten once every sequence's final delta went out and the
 * engine reported every sequence finished (so its KV blocks are free); it is
 * then listed in output_result.done.
 *
 * Not thread-safe: one thread drives a processor. The tokenizer is borrowed
 * (immutable, may be shared) and must outlive the processor.
 */
#ifndef VLLM_ENGINE_OUTPUT_PROCESSOR_H
#define VLLM_ENGINE_OUTPUT_PROCESSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

typedef struct output_processor output_processor;

/* tok must not be NULL (EOS and logprob tokens come from it even without
 * detokenization). */
vllm_status output_processor_create(const tokenizer *tok, output_processor **out);
/* Frees every request state (no deltas). NULL: no-op. */
void output_processor_free(output_processor *op);

/* What the processor needs of a request; everything is copied. */
typedef struct output_request {
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
} output_request;

/* Registers a request (after the engine accepted it). VLLM_ERR_INVALID for
 * a duplicate id, an empty stop string, stop strings without detokenize, n
 * < 1, or a prompt id outside the vocabulary; VLLM_ERR_NOMEM. On failure
 * nothing is registered. */
vllm_status output_processor_add_request(output_processor *op, const output_request *req);

/* One logprob entry: a token, its logprob and rank, and its text. */
typedef struct output_logprob {
    int32_t token_id;
    float logprob;
    int32_t rank;                        /* 1-based */
    const char *text;                    /* NUL-terminated; NULL without detokenize */
    size_t text_len;
    const char *bytes;                   /* its bytes in a text (tokenizer_token_bytes), */
    size_t bytes_len;                    /* maybe not UTF-8; NULL without detokenize */
} output_logprob;

/* The logprobs of one output token: entries[0] is the sampled token. */
typedef struct output_token_logprobs {
    int32_t num_entries;
    const output_logprob *entries;       /* (num_entries) */
} output_token_logprobs;

/* What one sequence produced since its last delta. */
typedef struct output_delta {
    const char *request_id;
    void *ud;                            /* output_request.ud */
    int32_t index;                       /* sequence 0..n-1 */
    int32_t output_index;                /* its record in the step's outputs; -1 if none (abort_all) */
    const char *text;                    /* new final text, NUL-terminated (text_len bytes) */
    size_t text_len;
    const int32_t *token_ids;            /* new ids (cut after a stop string's token) */
    int32_t num_tokens;
    const output_token_logprobs *logprobs; /* (num_tokens), or NULL (no logprobs asked) */
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
    const output_token_logprobs *prompt_logprobs;
} output_delta;

typedef struct output_seq_ref {
    const char *request_id;
    int32_t index;
} output_seq_ref;

typedef struct output_done {
    const char *request_id;
    void *ud;
} output_done;

/* One call's results. Everything is owned by the processor and valid until
 * its next process/abort_all call (or free). */
typedef struct output_result {
    int32_t num_deltas;
    const output_delta *deltas;          /* in the order of the step's outputs */
    int32_t num_stops;
    const output_seq_ref *stops;         /* running in the engine, but finished here: stop them */
    int32_t num_done;
    const output_done *done;             /* requests forgotten in this call, after their deltas */
} output_result;

/* Turns one engine step's outputs into deltas. Outputs of unknown requests
 * (never registered, or already done) are ignored, as vLLM ignores outputs
 * of aborted requests. Fails only with VLLM_ERR_NOMEM before changing any
 * state; text lost to a later allocation failure is logged. */
vllm_status output_processor_process(output_processor *op, const vllm_step_output *out,
                                     const output_result **res);

/* Ends every live request here (the engine died or is gone): an ABORT delta
 * for each sequence without a final delta, with no text (what was held back
 * is dropped: nothing more will come), then every request is done. */
vllm_status output_processor_abort_all(output_processor *op, const output_result **res);

/* Live requests (registered, not yet done). */
int64_t output_processor_num_requests(const output_processor *op);
/* Calls fn for every live request, in no particular order; fn must not
 * call into the processor. */
void output_processor_foreach(const output_processor *op,
                              void (*fn)(void *ctx, const char *request_id, void *ud), void *ctx);

/* decode([id]) with special tokens kept: vLLM's decoded_token of a
 * logprob. Borrowed from the processor's cache (valid until free); ""
 * for an id outside the vocabulary; *len may be NULL. */
const char *output_processor_token_text(output_processor *op, int32_t id, size_t *len);
/* tokenizer_token_bytes(id), NUL-terminated (bytes_len may hold NULs), cached
 * the same way: what an OpenAI logprob's token and `bytes` are made of, so
 * the tokens' bytes concatenate to the text (leading spaces and byte-fallback
 * pieces included, unlike decode([id])). */
const char *output_processor_token_bytes(output_processor *op, int32_t id, size_t *len);

#endif
