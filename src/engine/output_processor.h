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
#include "vllm/text.h"
#include "vllm/vllm.h"

/* The types are the public API's (include/vllm/text.h), under the names
 * the front ends have always used; the vllm_output_processor_* functions
 * there are this module's, for callers of libvllm.a (the Python package). */
typedef struct vllm_output_processor output_processor;
typedef vllm_output_request output_request;
typedef vllm_output_logprob output_logprob;
typedef vllm_output_token_logprobs output_token_logprobs;
typedef vllm_output_delta output_delta;
typedef vllm_output_seq_ref output_seq_ref;
typedef vllm_output_done output_done;
typedef vllm_output_result output_result;

/* tok must not be NULL (EOS and logprob tokens come from it even without
 * detokenization). */
vllm_status output_processor_create(const tokenizer *tok, output_processor **out);
/* Frees every request state (no deltas). NULL: no-op. */
void output_processor_free(output_processor *op);

/* Registers a request (after the engine accepted it). VLLM_ERR_INVALID for
 * a duplicate id, an empty stop string, stop strings without detokenize, n
 * < 1, or a prompt id outside the vocabulary; VLLM_ERR_NOMEM. On failure
 * nothing is registered. */
vllm_status output_processor_add_request(output_processor *op, const output_request *req);

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
