/*
 * beam_search.c - see beam_search.h: the loop, and the engine-driven step
 * behind vllm_engine_beam_search.
 */
#include "engine/beam_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"

void vllm_beam_search_params_init(vllm_beam_search_params *p) {
    *p = (vllm_beam_search_params){.beam_width = 1, .max_tokens = 16, .temperature = 0.0f, .length_penalty = 1.0f};
}

void vllm_beams_free(vllm_beam *beams, int32_t n) {
    if (!beams) return;
    for (int32_t i = 0; i < n; i++) free(beams[i].token_ids);
    free(beams);
}

/* A beam in the loop: prompt and generated tokens, one allocation. */
typedef struct beam {
    int32_t *tokens;
    int32_t len;
    double cum;
    double score;
    bool eos;
} beam;

static bool is_eos(int32_t t, const int32_t *eos, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (eos[i] == t) return true;
    return false;
}

/* vLLM's get_beam_search_score: the prompt counts, a final EOS does not. */
static double score_of(const beam *b, float length_penalty) {
    int32_t len = b->len - (b->eos ? 1 : 0);
    return b->cum / pow((double)(len > 0 ? len : 1), (double)length_penalty);
}

/* Stable sort, best score first (insertion sort: a few hundred beams at most). */
static void sort_beams(beam *b, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        beam x = b[i];
        int32_t j = i;
        while (j > 0 && b[j - 1].score < x.score) {
            b[j] = b[j - 1];
            j--;
        }
        b[j] = x;
    }
}

static void free_beams(beam *b, int32_t n) {
    for (int32_t i = 0; i < n; i++) free(b[i].tokens);
}

vllm_status beam_search_run(const vllm_beam_search_params *p, const int32_t *eos_ids, int32_t num_eos,
                            const int32_t *prompt, int32_t num_prompt, beam_step_fn step, void *ud,
                            vllm_beam **out, int32_t *num_out) {
    *out = NULL;
    *num_out = 0;
    if (p->beam_width < 1 || 2 * p->beam_width > VLLM_MAX_LOGPROBS)
        return vllm_error(VLLM_ERR_INVALID, "beam_width %d: must be 1..%d (each step asks for 2 x beam_width "
                          "logprobs, at most %d)", p->beam_width, VLLM_MAX_LOGPROBS / 2, VLLM_MAX_LOGPROBS);
    if (p->max_tokens < 1) return vllm_error(VLLM_ERR_INVALID, "max_tokens %d: must be >= 1", p->max_tokens);
    if (num_prompt < 1) return vllm_error(VLLM_ERR_INVALID, "beam search needs a prompt of at least one token");
    const int32_t w = p->beam_width, k = 2 * w;
    beam *live = calloc((size_t)w, sizeof *live);
    const int32_t stride = k + 1; /* candidates per beam: top k and the sampled token */
    beam *next = calloc((size_t)w * (size_t)stride, sizeof *next); /* every candidate of a step */
    beam *done = NULL;
    size_t done_cap = 0;
    int32_t num_live = 0, num_done = 0, num_next = 0;
    beam_candidate *cand = malloc((size_t)w * (size_t)stride * sizeof *cand);
    int32_t *ncand = malloc((size_t)w * sizeof *ncand), *lens = malloc((size_t)w * sizeof *lens);
    const int32_t **seqs = malloc((size_t)w * sizeof *seqs);
    vllm_status rc = VLLM_OK;
    if (!live || !next || !cand || !ncand || !lens || !seqs || !(live[0].tokens = malloc((size_t)num_prompt * 4))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "beam search: out of memory");
        goto out;
    }
    memcpy(live[0].tokens, prompt, (size_t)num_prompt * sizeof *prompt);
    live[0].len = num_prompt;
    num_live = 1;
    for (int32_t t = 0; t < p->max_tokens && num_live > 0; t++) {
        for (int32_t i = 0; i < num_live; i++) {
            seqs[i] = live[i].tokens;
            lens[i] = live[i].len;
        }
        if ((rc = step(ud, seqs, lens, num_live, k, cand, ncand))) goto out;
        num_next = 0;
        for (int32_t i = 0; i < num_live; i++) {
            for (int32_t j = 0; j < ncand[i] && j < stride; j++) {
                const beam_candidate *c = &cand[(size_t)i * (size_t)stride + (size_t)j];
                beam nb = {.len = live[i].len + 1, .cum = live[i].cum + c->logprob};
                nb.eos = !p->ignore_eos && is_eos(c->token, eos_ids, num_eos);
                if (!(nb.tokens = malloc((size_t)nb.len * sizeof *nb.tokens))) {
                    rc = vllm_error(VLLM_ERR_NOMEM, "beam search: out of memory");
                    goto out;
                }
                memcpy(nb.tokens, live[i].tokens, (size_t)live[i].len * sizeof *nb.tokens);
                nb.tokens[live[i].len] = c->token;
                nb.score = score_of(&nb, p->length_penalty);
                if (nb.eos) {
                    if ((rc = buf_grow((void **)&done, &done_cap, (size_t)num_done + 1, sizeof *done))) {
                        free(nb.tokens);
                        goto out;
                    }
                    done[num_done++] = nb;
                } else {
                    next[num_next++] = nb;
                }
            }
        }
        sort_beams(next, num_next);
        free_beams(live, num_live);
        num_live = num_next < w ? num_next : w;
        memcpy(live, next, (size_t)num_live * sizeof *live);
        free_beams(next + num_live, num_next - num_live);
        num_next = 0;
    }
    /* the live beams join the completed ones; the best width of all are the answer */
    if ((rc = buf_grow((void **)&done, &done_cap, (size_t)(num_done + num_live), sizeof *done))) goto out;
    memcpy(done + num_done, live, (size_t)num_live * sizeof *live);
    num_done += num_live;
    num_live = 0;
    sort_beams(done, num_done);
    int32_t n = num_done < w ? num_done : w;
    vllm_beam *res = calloc((size_t)(n > 0 ? n : 1), sizeof *res);
    if (!res) {
        rc = vllm_error(VLLM_ERR_NOMEM, "beam search: out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        beam *b = &done[i];
        vllm_beam *r = &res[i];
        r->num_tokens = b->len - num_prompt;
        r->token_ids = malloc((size_t)(r->num_tokens > 0 ? r->num_tokens : 1) * sizeof *r->token_ids);
        if (!r->token_ids) {
            vllm_beams_free(res, i);
            rc = vllm_error(VLLM_ERR_NOMEM, "beam search: out of memory");
            goto out;
        }
        memcpy(r->token_ids, b->tokens + num_prompt, (size_t)r->num_tokens * sizeof *r->token_ids);
        r->cumulative_logprob = b->cum;
        r->score = b->score;
        r->finish_reason = b->eos ? VLLM_FINISH_STOP : VLLM_FINISH_LENGTH;
        r->stop_token_id = b->eos ? b->tokens[b->len - 1] : -1;
    }
    *out = res;
    *num_out = n;
out:
    free_beams(live, num_live);
    free_beams(next, num_next);
    free_beams(done, num_done);
    free(live);
    free(next);
    free(done);
    free(cand);
    free(ncand);
    free(lens);
    free(seqs);
    return rc;
}

/* ---- the step on an engine ------------------------------------------------------------ */

typedef struct engine_step_ctx {
    vllm_engine *e;
    const char *base_id;
    const vllm_beam_search_params *p;
    int32_t step;
} engine_step_ctx;

/* Candidates of one token's logprobs: the top-k, then the sampled token if
 * it is not among them (vLLM's logprobs dict holds both). */
static int32_t candidates_of(const vllm_token_logprobs *lp, int32_t k, beam_candidate *out) {
    int32_t n = 0;
    bool sampled_in = false;
    for (int32_t j = 0; j < lp->num_top && n < k; j++) {
        out[n++] = (beam_candidate){lp->top_ids[j], lp->top_logprobs[j]};
        sampled_in |= lp->top_ids[j] == lp->token_id;
    }
    if (!sampled_in) out[n++] = (beam_candidate){lp->token_id, lp->logprob};
    return n;
}

static vllm_status engine_step(void *ud, const int32_t *const *seqs, const int32_t *lens, int32_t n, int32_t k,
                               beam_candidate *out, int32_t *num_out) {
    engine_step_ctx *c = ud;
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.max_tokens = 1;
    sp.logprobs = k;
    sp.temperature = c->p->temperature;
    sp.ignore_eos = true; /* the loop decides what EOS means */
    char id[256];
    for (int32_t i = 0; i < n; i++) {
        num_out[i] = -1;
        snprintf(id, sizeof id, "%s-%d-%d", c->base_id, c->step, i);
        vllm_status rc = vllm_engine_add_request(c->e, id, seqs[i], lens[i], &sp, NULL);
        if (rc) {
            for (int32_t j = 0; j < i; j++) {
                snprintf(id, sizeof id, "%s-%d-%d", c->base_id, c->step, j);
                vllm_engine_abort_request(c->e, id);
            }
            while (vllm_engine_has_unfinished(c->e)) {
                const vllm_step_output *so;
                if (vllm_engine_step(c->e, &so)) break;
            }
            return rc;
        }
    }
    size_t base_len = strlen(c->base_id);
    while (vllm_engine_has_unfinished(c->e)) {
        const vllm_step_output *so;
        vllm_status rc = vllm_engine_step(c->e, &so);
        if (rc) return rc;
        for (int32_t o = 0; o < so->num_outputs; o++) {
            const vllm_seq_output *q = &so->outputs[o];
            const char *rid = q->request_id;
            int st = -1, bi = -1;
            if (strncmp(rid, c->base_id, base_len) || sscanf(rid + base_len, "-%d-%d", &st, &bi) != 2 ||
                st != c->step || bi < 0 || bi >= n)
                continue;
            if (q->num_new_tokens > 0 && q->new_logprobs && num_out[bi] < 0)
                num_out[bi] = candidates_of(&q->new_logprobs[0], k, out + (size_t)bi * (size_t)(k + 1));
            if (q->finish_reason == VLLM_FINISH_ABORT)
                return vllm_error(VLLM_ERR_INVALID, "beam search: step %d of beam %d was aborted", c->step, bi);
        }
    }
    for (int32_t i = 0; i < n; i++)
        if (num_out[i] < 0) return vllm_error(VLLM_ERR_INVALID, "beam search: beam %d got no token", i);
    c->step++;
    return VLLM_OK;
}

vllm_status vllm_engine_beam_search(vllm_engine *e, const char *request_id, const int32_t *prompt_ids,
                                    int32_t num_prompt_ids, const vllm_beam_search_params *p,
                                    vllm_beam **out, int32_t *num_out) {
    *out = NULL;
    *num_out = 0;
    if (vllm_engine_has_unfinished(e))
        return vllm_error(VLLM_ERR_INVALID, "beam search steps the engine itself: it must have no other "
                          "unfinished requests");
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    engine_step_ctx c = {e, request_id, p, 0};
    return beam_search_run(p, info.eos_token_ids, info.num_eos_token_ids, prompt_ids, num_prompt_ids,
                           engine_step, &c, out, num_out);
}
