/*
 * spec_policy.h - how many drafts a sequence gets this step (speculative
 * decoding's adaptive k; vLLM has a fixed k and disable_by_batch_size only).
 *
 * Two limits, the smaller wins:
 *
 * - The sequence's own acceptance. Each verified step updates an
 *   exponentially weighted mean of its accepted drafts (weight 1/2 on the
 *   newest) and the sequence's limit: after a step that accepted every
 *   draft the limit doubles (at least twice that step's drafts), so a text
 *   that copies well climbs back to k within a few steps of a rejection;
 *   after a rejection it is floor(mean) + 1, one more than the sequence has
 *   been accepting. (The mean alone climbs too slowly: from a mean in
 *   [n, n + 1), n + 1 accepted drafts per step keep it below n + 1 forever,
 *   so a rejection at the start of a long copy capped the rest of it.) A
 *   sequence that has had no verified step yet may have k. Below
 *   a mean of 1/4 accepted drafts a sequence only probes: it proposes on
 *   every 8th output token, so a proposer that keeps missing (a model that
 *   does not copy its prompt) costs about an eighth of one scored row per
 *   token instead of k rows.
 *
 * - The batch: a cost model of a step (spec_policy_cost). A forward of T
 *   rows costs W + c T: reading the weights once (W) plus every row's
 *   compute (c). Measured in rows of c, W is w = (flops per byte the
 *   machine does) x (weight bytes) / (2 x parameters): about 20 rows for an
 *   F32 model, 10 for F16, 3 for Q4_x on a 2-core AVX-512 machine, so a
 *   quantized 135M model is compute-bound from a few rows on; a tenth of
 *   that for weights of at most 8 MiB, which the caches keep. Without
 *   speculation a step of R decoding sequences makes R tokens for w + R.
 *   With K drafts, sequence i scores k_i = min(K, its own limit) more rows
 *   and is expected to accept a_i = p + p^2 + ... + p^k_i of them, p the
 *   sequence's recent chance that a draft is accepted given the ones
 *   before it were (SPEC_POLICY_PRIOR, 3/4, without a record yet and
 *   for a probe: enough for a lone sequence to try 3 drafts, and for no
 *   more than about 5 decoding sequences of a Q4 model to try any: a
 *   loaded server never pays for drafts nobody has shown it will accept,
 *   nor for the probes of 16 sequences that started together, all at once
 *   on their 8th token); a draft
 *   model adds K forwards of its own (w_d each, in the target's c) over
 *   sum(k_i + a_i) rows (c_d each): a row per draft, and the accepted
 *   drafts its next proposal catches up with (and, spread over the
 *   next 32 steps, the tokens a cache is behind after a pause: a new
 *   sequence's prompt). spec_policy_batch_k picks the K with the
 *   most tokens per cost, and 0 unless that beats no speculation by 5%:
 *   so a batch large enough that verification costs more than it saves
 *   drafts nothing, and a draft model (whose forwards cost rows too) stops
 *   before n-gram does.
 *
 * Everything it reads is the sequences' own histories, the number of
 * sequences and the models' sizes, so greedy outputs never change (drafts
 * only save forwards); which steps propose does depend on the batch.
 */
#ifndef VLLM_SPEC_SPEC_POLICY_H
#define VLLM_SPEC_SPEC_POLICY_H

#include <stdint.h>

struct model;

#define SPEC_POLICY_PROBE_EVERY 8        /* a missing sequence proposes on these output counts */
#define SPEC_POLICY_FLOPS_PER_BYTE 10.0  /* machine balance: 2 AVX-512 cores (~100 GFLOP/s) over
                                          * ~10 GB/s; fits the measured single-request ratios */
#define SPEC_POLICY_MIN_GAIN 1.05        /* speculate only when the model predicts this much more */
#define SPEC_POLICY_MAX_K 128
#define SPEC_POLICY_HORIZON 32           /* steps a draft cache's catch-up is spread over */
#define SPEC_POLICY_CACHED_BYTES (8.0 * 1024 * 1024) /* weights this small stay in the caches:
                                          * their read costs a tenth (stories260K: w = 2, where each
                                          * extra row costs about as much as the step) */
#define SPEC_POLICY_PRIOR 0.75           /* the chance a draft is accepted, for a sequence without a
                                          * record (or probing): see the top */

/* A sequence's acceptance record (zeroed: none yet). */
typedef struct spec_policy_seq {
    float mean_accepted;             /* EWMA of accepted drafts per verified step */
    int32_t num_verified;            /* verified steps so far */
    int32_t limit;                   /* the most drafts the next proposal may have (once verified) */
    int32_t proposed_at;             /* the sequence's length at its last proposal (0: none yet) */
    float hits, tries;               /* drafts accepted, and drafts judged (the accepted ones and
                                      * the first rejected one), halved each verified step: their
                                      * ratio is the chance that one more draft is accepted */
} spec_policy_seq;

/* The cost of a step, in units of one target row's compute (see the top). */
typedef struct spec_policy_cost {
    double weight_rows;              /* w: the target's weight read */
    double draft_weight_rows;        /* w_d: a draft model forward's weight read (0: n-gram) */
    double draft_row;                /* c_d: one draft row's compute (0: n-gram) */
} spec_policy_cost;

/* The cost model of target with draft (NULL: a proposer without forwards),
 * from their matmul weights' bytes and parameters. */
spec_policy_cost spec_policy_cost_of(const struct model *target, const struct model *draft);

/* Drafts the sequence's own record allows now (0: none this step), at most k. */
int32_t spec_policy_num_drafts(const spec_policy_seq *s, int32_t k, int32_t num_output);

/* After a step verified num_drafts drafts and accepted num_accepted. */
void spec_policy_update(spec_policy_seq *s, int32_t num_drafts, int32_t num_accepted);

/* One step's candidates, gathered to choose K. */
typedef struct spec_policy_batch {
    int32_t k;                       /* the configured maximum */
    int32_t num;                     /* candidates added */
    double drafts[SPEC_POLICY_MAX_K + 1];   /* [K]: sum of min(K, own) */
    double accepted[SPEC_POLICY_MAX_K + 1]; /* [K]: sum of the expected accepted drafts */
    double catchup;                  /* draft rows the candidates' caches are behind, amortized */
} spec_policy_batch;

void spec_policy_batch_init(spec_policy_batch *b, int32_t k);
/* A sequence of num_tokens tokens that may draft up to own
 * (spec_policy_num_drafts, >= 1) and may still make up to room tokens. A
 * draft model's first proposal for it (or the first after a pause) catches
 * its cache up over the tokens since its last one (its prompt, the first
 * time): a cost paid once and counted spread over the next
 * min(room, SPEC_POLICY_HORIZON) steps. */
void spec_policy_batch_add(spec_policy_batch *b, const spec_policy_seq *s, int32_t own, int32_t num_tokens,
                           int32_t room);
/* The most drafts any candidate gets this step (0: none), with num_decoding
 * sequences in the step (candidates or not; at least the candidates). */
int32_t spec_policy_batch_k(const spec_policy_batch *b, const spec_policy_cost *c, int32_t num_decoding);

#endif
