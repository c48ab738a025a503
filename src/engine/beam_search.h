/*
 * beam_search.h - vLLM's beam search (vllm/beam_search.py and the
 * beam_search of LLM / OpenAIServing): not a sampler mode but a loop of
 * one-token requests over the ordinary engine.
 *
 * Each step asks the engine, for every live beam, for one token with
 * logprobs = 2 x beam_width (the sampled token and the top 2 x beam_width,
 * at the request's temperature: 0, vLLM's default, samples the top one);
 * every (beam, candidate) pair becomes a new beam with cumulative logprob
 * summed; one ending in EOS (unless ignore_eos) is set aside as completed;
 * the best beam_width of the rest go on. After max_tokens steps the live
 * beams join the completed ones and the best beam_width of all are the
 * answer, each ranked by vLLM's get_beam_search_score:
 *     cumulative_logprob / len ** length_penalty,
 * len = prompt + generated tokens, less one if the last is EOS (vLLM counts
 * the prompt). Ties keep the earlier beam (Python's stable sort).
 *
 * The beams of a step share their prompt's KV blocks through the prefix
 * cache, and a beam's next step shares its own: the engine recomputes only
 * what lies past the last full block.
 *
 * The step itself is a callback, so the same loop runs on the engine
 * directly (vllm_engine_beam_search: vllmc generate, libvllm users) and
 * through the server's frontend (serving_completion.c).
 */
#ifndef VLLM_ENGINE_BEAM_SEARCH_H
#define VLLM_ENGINE_BEAM_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "vllm/vllm.h"

/* One candidate continuation of a beam. */
typedef struct beam_candidate {
    int32_t token;
    float logprob;
} beam_candidate;

/* One step: for each of n token sequences seqs[i] (lens[i] tokens: prompt
 * and the beam's tokens), its candidates -- the top k and the sampled token
 * if it is not among them, so at most k + 1 -- into out[i * (k + 1) ...]
 * and their count into num_out[i]. */
typedef vllm_status (*beam_step_fn)(void *ud, const int32_t *const *seqs, const int32_t *lens, int32_t n,
                                    int32_t k, beam_candidate *out, int32_t *num_out);

/* The loop; eos_ids: the model's end-of-sequence ids. *out (malloc'ed,
 * num_out <= beam_width beams, best first) is freed with vllm_beams_free. */
vllm_status beam_search_run(const vllm_beam_search_params *p, const int32_t *eos_ids, int32_t num_eos,
                            const int32_t *prompt, int32_t num_prompt, beam_step_fn step, void *ud,
                            vllm_beam **out, int32_t *num_out);

#endif
