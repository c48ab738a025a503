/*
 * spec_policy.h - how many drafts a sequence gets this step (speculative
 * decoding's adaptive k; vLLM has a fixed k and disable_by_batch_size only).
 *
 * Two limits, the smaller wins:
 *
 * - The sequence's own acceptance. Each verified step updates an
 *   exponentially weighted mean of its accepted drafts (weight 1/2 on the
 *   newest); the next step proposes floor(mean) + 1 drafts (at most k): one
 *   more than it has been accepting, so k climbs back when the text turns
 *   predictable. A sequence that has had no verified step yet gets k. Below
 *   a mean of 1/4 accepted drafts a sequence only probes: it proposes on
 *   every 8th output token, so a proposer that keeps missing (a model that
 *   does not copy its prompt) costs about an eighth of one scored row per
 *   token instead of k rows.
 *
 * - The batch. Scoring k + 1 rows is nearly free while a step is bound by
 *   reading the weights, and costs full price once it is bound by compute:
 *   with R sequences decoding, k is capped at SPEC_POLICY_MAX_ROWS / R - 1,
 *   so a step scores about that many rows at most, and speculation turns
 *   itself off (k = 0) from R > SPEC_POLICY_MAX_ROWS / 2. (The number is a
 *   CPU's: a 2-core machine turns compute-bound at a few dozen rows for a
 *   135M model.) disable_by_batch_size still applies on top, as vLLM's.
 *
 * Everything it reads is the sequence's own history and the number of
 * decoding sequences, so greedy outputs never change (drafts only save
 * forwards); which steps propose does depend on the batch.
 */
#ifndef VLLM_SPEC_SPEC_POLICY_H
#define VLLM_SPEC_SPEC_POLICY_H

#include <stdint.h>

#define SPEC_POLICY_MAX_ROWS 24      /* scored rows per step the batch cap aims at */
#define SPEC_POLICY_PROBE_EVERY 8    /* a missing sequence proposes on these output counts */

/* A sequence's acceptance record (zeroed: none yet). */
typedef struct spec_policy_seq {
    float mean_accepted;             /* EWMA of accepted drafts per verified step */
    int32_t num_verified;            /* verified steps so far */
} spec_policy_seq;

/* Drafts the sequence may get now (0: none this step): k the configured
 * maximum, num_decoding the sequences running. */
int32_t spec_policy_num_drafts(const spec_policy_seq *s, int32_t k, int32_t num_decoding, int32_t num_output);

/* After a step verified num_drafts drafts and accepted num_accepted. */
void spec_policy_update(spec_policy_seq *s, int32_t num_drafts, int32_t num_accepted);

#endif
