/*
 * ngram.h - n-gram prompt lookup, speculative decoding's proposer that needs
 * no model (vLLM's NgramProposer, method "ngram").
 *
 * The drafts for a sequence come from its own tokens (prompt, then outputs):
 * find the longest n in [min_n, max_n] such that the last n tokens occurred
 * earlier, take the earliest such occurrence, and propose the up-to-k tokens
 * that followed it (fewer when the sequence ends first: the drafts never run
 * past what has been seen). No match of at least min_n tokens: no drafts.
 * These are vLLM 0.11's choices (_find_longest_matched_ngram_and_propose_tokens):
 * longest match first, then the earliest position, not the most recent.
 *
 * Cost: one pass of the KMP failure function over the reversed tokens,
 * O(num_tokens) time per call and O(max_n) scratch, allocated at create.
 * Nothing is kept between calls, so a proposer serves any number of
 * sequences, preempted or not, but only one thread at a time.
 */
#ifndef VLLM_SPEC_NGRAM_H
#define VLLM_SPEC_NGRAM_H

#include <stdint.h>

#include "spec/spec.h"
#include "vllm/status.h"

typedef struct ngram ngram;

/* 1 <= min_n <= max_n (VLLM_ERR_INVALID otherwise, naming the key). Free
 * with ngram_free. */
vllm_status ngram_create(int32_t min_n, int32_t max_n, ngram **out);
void ngram_free(ngram *g);

/* Writes at most k drafts for tokens[0..num_tokens) to drafts and returns
 * how many (0: no n-gram of at least min_n tokens recurs). */
int32_t ngram_propose(ngram *g, const int32_t *tokens, int32_t num_tokens, int32_t k, int32_t *drafts);

/* The proposer the engine calls (spec/spec.h); g is borrowed. */
spec_proposer ngram_as_proposer(ngram *g);

#endif
