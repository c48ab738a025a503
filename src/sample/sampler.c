/*
 * sampler.c - one token from one row of logits, the vLLM V1 way.
 *
 * The steps and their order are listed in sampler.h. How they are done here:
 *
 * - Logit-changing steps (min_tokens, logit_bias, penalties) touch only the
 *   ids they name, in place. Penalties find "seen in prompt / count in output"
 *   without a vocabulary-sized clear: the ids of the history are zeroed, then
 *   counted, then applied once each (the slot is set to -1 when done).
 * - Greedy is one argmax pass (strict >, so ties go to the lowest id; NaN never
 *   wins).
 * - Random sampling gathers the surviving tokens as (value, id) candidates
 *   with temperature and min_p applied on the way. top_k is a quickselect of
 *   the k-th largest value (everything >= it kept, as vLLM's mask keeps ties);
 *   top_p is a weighted quickselect: a token is kept iff the mass of strictly
 *   larger tokens is < top_p * mass, which is vLLM's ascending-cumsum rule
 *   (cumsum <= 1 - p masked) without sorting; equal values share a fate.
 *   Both are expected O(n); a recursion guard falls back to qsort on the
 *   remaining range so adversarial logits cannot make them quadratic.
 * - The draw inverts the CDF of the unnormalised weights with one uniform
 *   from the sequence's own generator. vLLM draws by an exponential race
 *   (argmax p / Exp(1)), which needs a random number per token; both pick
 *   token i with probability p_i, and ours costs one number per step.
 *
 * Logprobs are vLLM's raw_logprobs: log_softmax of the logits as the model
 * gave them, copied aside before anything changes them. The sampled token's
 * rank counts tokens whose raw logit is >= its own (vLLM's count of
 * logprobs >= the token's, itself included).
 *
 * Scratch layout (sampler_scratch_bytes): raw (vocab floats) | candidates
 * (vocab x {float value; int32 id}); the candidate area doubles as the int32
 * penalty counters before candidates are gathered.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define SAMPLING_EPS 1e-5f     /* vLLM's _SAMPLING_EPS: below it, greedy */
#define MIN_TEMPERATURE 1e-2f  /* vLLM's _MAX_TEMP: smaller positive t is raised to it */

/* ---- random numbers ------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sampler_rng_seed(sampler_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

void sampler_rng_seed_request(sampler_rng *rng, const vllm_sampling_params *p,
                              uint64_t engine_seed, const char *request_id, int32_t index) {
    if (p && p->has_seed) {
        sampler_rng_seed(rng, p->seed + (uint64_t)(int64_t)index);
        return;
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the id, then mixed with the rest */
    for (const unsigned char *c = (const unsigned char *)(request_id ? request_id : ""); *c; c++)
        h = (h ^ *c) * 0x100000001b3ull;
    uint64_t x = engine_seed;
    h ^= splitmix64(&x);
    h += (uint64_t)(int64_t)index * 0x9e3779b97f4a7c15ull;
    sampler_rng_seed(rng, h);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sampler_rng_next(sampler_rng *rng) { /* xoshiro256** */
    uint64_t *s = rng->s;
    uint64_t r = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return r;
}

double sampler_rng_uniform(sampler_rng *rng) { return (double)(sampler_rng_next(rng) >> 11) * 0x1.0p-53; }

/* ---- parameters ---------------------------------------------------------- */

float sampler_effective_temperature(float t) { return t > 0.0f && t < MIN_TEMPERATURE ? MIN_TEMPERATURE : t; }

bool sampler_is_greedy(const vllm_sampling_params *p) {
    return sampler_effective_temperature(p->temperature) < SAMPLING_EPS;
}

vllm_status sampler_check_vocab(const vllm_sampling_params *p, int32_t vocab_size) {
    char list[256];
    size_t n = 0;
    int bad = 0;
    list[0] = 0;
    for (int32_t i = 0; i < p->num_logit_bias; i++) {
        int32_t id = p->logit_bias_ids[i];
        if (id >= 0 && id < vocab_size) continue;
        if (n < sizeof list - 16) n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", bad ? ", " : "", id);
        bad++;
    }
    if (bad)
        return vllm_error(VLLM_ERR_INVALID,
                          "token_id(s) [%s] in logit_bias contain out-of-vocab token ids. Vocabulary size: %d",
                          list, vocab_size);
    return VLLM_OK;
}

size_t sampler_scratch_bytes(int32_t vocab_size) { return (size_t)vocab_size * 12; }

/* ---- logit processing ---------------------------------------------------- */

typedef struct cand { float v; int32_t id; } cand; /* a surviving token: value (logit, later weight) */

/* What processing leaves: a greedy token, or candidates c[0, n) whose v are
 * unnormalised probabilities summing to mass. */
typedef struct processed {
    bool greedy;
    int32_t token;
    cand *c;
    int32_t n;
    double mass;
} processed;

static void apply_min_tokens(const vllm_sampling_params *p, const sample_history *h, const int32_t *eos_ids,
                             int32_t num_eos, float *logits, int32_t vocab_size) {
    int32_t num_output = h ? h->num_output : 0;
    if (p->min_tokens <= num_output) return;
    for (int32_t i = 0; i < num_eos; i++)
        if (eos_ids[i] >= 0 && eos_ids[i] < vocab_size) logits[eos_ids[i]] = -INFINITY;
    for (int32_t i = 0; i < p->num_stop_token_ids; i++) {
        int32_t id = p->stop_token_ids[i];
        if (id >= 0 && id < vocab_size) logits[id] = -INFINITY;
    }
}

static void apply_logit_bias(const vllm_sampling_params *p, float *logits, int32_t vocab_size) {
    for (int32_t i = 0; i < p->num_logit_bias; i++) {
        int32_t id = p->logit_bias_ids[i];
        if (id >= 0 && id < vocab_size) logits[id] += p->logit_bias_values[i];
    }
}

/* counts: vocab_size int32 of scratch in any state. Slot encoding while
 * counting: bit 0 = seen in the prompt, the rest = 2 x output count. */
static void apply_penalties(const vllm_sampling_params *p, const sample_history *h, float *logits,
                            int32_t vocab_size, int32_t *counts) {
    float rep = p->repetition_penalty, freq = p->frequency_penalty, pres = p->presence_penalty;
    if (!h || (rep == 1.0f && freq == 0.0f && pres == 0.0f)) return;
    const int32_t *ids[2] = {h->prompt_ids, h->output_ids};
    int32_t num[2] = {h->prompt_ids ? h->num_prompt : 0, h->output_ids ? h->num_output : 0};
    for (int s = 0; s < 2; s++)
        for (int32_t i = 0; i < num[s]; i++)
            if (ids[s][i] >= 0 && ids[s][i] < vocab_size) counts[ids[s][i]] = 0;
    for (int32_t i = 0; i < num[0]; i++)
        if (ids[0][i] >= 0 && ids[0][i] < vocab_size) counts[ids[0][i]] |= 1;
    for (int32_t i = 0; i < num[1]; i++)
        if (ids[1][i] >= 0 && ids[1][i] < vocab_size) counts[ids[1][i]] += 2;
    float inv_rep = 1.0f / rep;
    for (int s = 0; s < 2; s++) {
        for (int32_t i = 0; i < num[s]; i++) {
            int32_t id = ids[s][i];
            if (id < 0 || id >= vocab_size || counts[id] < 0) continue;
            int32_t n_out = counts[id] >> 1;
            float l = logits[id];
            l *= l > 0.0f ? inv_rep : rep; /* vLLM: logits *= where(logits > 0, 1/p, p) */
            l -= freq * (float)n_out;
            l -= pres * (float)(n_out > 0);
            logits[id] = l;
            counts[id] = -1;
        }
    }
}

static inline void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

static float median3(float a, float b, float c) {
    if (a > b) { float t = a; a = b; b = t; }
    if (b > c) b = c;
    return a > b ? a : b;
}

/* Three-way partition of c[lo, hi) around pivot: on return [lo, *gt) > pivot,
 * [*gt, *eq) == pivot, [*eq, hi) < pivot. Values are never NaN. */
static void cand_partition3(cand *c, int32_t lo, int32_t hi, float pivot, int32_t *gt, int32_t *eq) {
    int32_t a = lo, i = lo, b = hi;
    while (i < b) {
        float v = c[i].v;
        if (v > pivot) cand_swap(&c[a++], &c[i++]);
        else if (v < pivot) cand_swap(&c[i], &c[--b]);
        else i++;
    }
    *gt = a;
    *eq = b;
}

static int cand_cmp_desc(const void *x, const void *y) {
    float a = ((const cand *)x)->v, b = ((const cand *)y)->v;
    return (a < b) - (a > b);
}

static int32_t forced_depth_limit; /* 0 = the default below; tests force the qsort path */

void sampler_set_select_depth(int32_t depth) { forced_depth_limit = depth; }

static int32_t depth_limit(int32_t n) {
    if (forced_depth_limit > 0) return forced_depth_limit;
    int32_t d = 16;
    while (n > 1) { n >>= 1; d += 2; }
    return d;
}

/* Reorders c[0, n) so that the tokens whose value is >= the k-th largest come
 * first (1 <= k < n), and returns how many they are (>= k with ties). */
static int32_t cand_select_top_k(cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n, need = k, depth = 0, limit = depth_limit(n);
    for (;;) { /* [0, lo) kept, [hi, n) cut, need of [lo, hi) still to take */
        if (++depth > limit) {
            qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp_desc);
            float kth = c[lo + need - 1].v;
            int32_t e = lo + need;
            while (e < hi && c[e].v == kth) e++;
            return e;
        }
        int32_t gt, eq;
        cand_partition3(c, lo, hi, median3(c[lo].v, c[lo + (hi - lo) / 2].v, c[hi - 1].v), &gt, &eq);
        if (need <= gt - lo) hi = gt;
        else if (need <= eq - lo) return eq;
        else { need -= eq - lo; lo = eq; }
    }
}

/* Reorders c[0, n) (v = weights) so that the tokens top_p keeps come first and
 * returns how many: token i is kept iff the weight of tokens strictly heavier
 * than it is < target (= top_p x total weight). *kept_mass gets their weight. */
static int32_t cand_select_top_p(cand *c, int32_t n, double target, double *kept_mass) {
    int32_t lo = 0, hi = n, depth = 0, limit = depth_limit(n);
    double above = 0.0; /* weight of [0, lo): all kept, all heavier than [lo, hi) */
    while (lo < hi) {
        if (++depth > limit) {
            qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp_desc);
            int32_t i = lo;
            while (i < hi && above < target) {
                double group = 0.0;
                int32_t j = i;
                for (; j < hi && c[j].v == c[i].v; j++) group += c[j].v;
                above += group;
                i = j;
            }
            lo = i;
            break;
        }
        int32_t gt, eq;
        cand_partition3(c, lo, hi, median3(c[lo].v, c[lo + (hi - lo) / 2].v, c[hi - 1].v), &gt, &eq);
        double heavier = 0.0, equal = 0.0;
        for (int32_t i = lo; i < gt; i++) heavier += c[i].v;
        for (int32_t i = gt; i < eq; i++) equal += c[i].v;
        if (above + heavier >= target) hi = gt;  /* the pivot's group and below are cut */
        else { above += heavier + equal; lo = eq; } /* the pivot's group and above are kept */
    }
    *kept_mass = above;
    return lo;
}

static vllm_status no_token_left(void) {
    return vllm_error(VLLM_ERR_INVALID, "sampler: no token has a finite logit left "
                                        "(min_tokens or logit_bias masked the whole vocabulary, or NaN logits)");
}

/* Runs every step of sampler.h on logits (in place) up to the draw. */
static vllm_status sampler_process(const vllm_sampling_params *p, const sample_history *h, const int32_t *eos_ids,
                                   int32_t num_eos, float *logits, int32_t vocab_size, void *scratch,
                                   processed *out) {
    cand *c = (cand *)((float *)scratch + vocab_size);
    apply_min_tokens(p, h, eos_ids, num_eos, logits, vocab_size);
    apply_logit_bias(p, logits, vocab_size);
    apply_penalties(p, h, logits, vocab_size, (int32_t *)c);

    int32_t best = -1;
    float vmax = -INFINITY;
    for (int32_t i = 0; i < vocab_size; i++)
        if (logits[i] > vmax) { vmax = logits[i]; best = i; }
    if (best < 0) return no_token_left();
    out->greedy = sampler_is_greedy(p);
    out->token = best;
    if (out->greedy) return VLLM_OK;

    /* temperature (vLLM divides) and min_p (prob < min_p * max prob is cut,
     * i.e. exp(v - vmax) < min_p) while gathering candidates */
    float t = sampler_effective_temperature(p->temperature), min_p = p->min_p;
    float smax = vmax / t;
    int32_t n = 0;
    for (int32_t i = 0; i < vocab_size; i++) {
        float v = logits[i] / t;
        if (!(v > -INFINITY)) continue; /* -inf and NaN */
        if (min_p > 0.0f && !(isinf(smax) ? v == smax : expf(v - smax) >= min_p)) continue;
        c[n].v = v;
        c[n].id = i;
        n++;
    }
    if (p->top_k > 0 && p->top_k < n) n = cand_select_top_k(c, n, p->top_k);

    double mass = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float w = isinf(smax) ? (float)(c[i].v == smax) : expf(c[i].v - smax);
        c[i].v = w;
        mass += w;
    }
    if (p->top_p < 1.0f) n = cand_select_top_p(c, n, (double)p->top_p * mass, &mass);
    out->c = c;
    out->n = n;
    out->mass = mass;
    return VLLM_OK;
}

/* ---- sampling and logprobs ----------------------------------------------- */

static int32_t draw(const processed *pr, sampler_rng *rng) {
    double u = sampler_rng_uniform(rng) * pr->mass, acc = 0.0;
    int32_t last = pr->c[0].id;
    for (int32_t i = 0; i < pr->n; i++) {
        if (pr->c[i].v <= 0.0f) continue;
        acc += pr->c[i].v;
        last = pr->c[i].id;
        if (u < acc) return last;
    }
    return last; /* u rounded up to the total */
}

/* Fills out's logprob fields from raw (the logits before processing). */
static void fill_logprobs(const vllm_sampling_params *p, const float *raw, int32_t vocab_size, sample_result *out) {
    float m = -INFINITY;
    for (int32_t i = 0; i < vocab_size; i++)
        if (raw[i] > m) m = raw[i];
    double sum = 0.0;
    for (int32_t i = 0; i < vocab_size; i++)
        if (raw[i] > -INFINITY) sum += expf(raw[i] - m);
    float log_sum = (float)log(sum);

    float x = raw[out->token_id];
    int32_t rank = 0;
    for (int32_t i = 0; i < vocab_size; i++) rank += raw[i] >= x;
    out->logprob = (x - m) - log_sum;
    out->rank = rank;

    /* top-N: a descending insertion list (holding raw values until the end);
     * strict > keeps the lower id first among equal values */
    int32_t want = p->logprobs < vocab_size ? p->logprobs : vocab_size, have = 0;
    sample_logprob *top = out->top;
    for (int32_t i = 0; i < vocab_size && want > 0; i++) {
        float v = raw[i];
        if (isnan(v) || (have == want && !(v > top[have - 1].logprob))) continue;
        int32_t j = have < want ? have++ : want - 1;
        for (; j > 0 && v > top[j - 1].logprob; j--) top[j] = top[j - 1];
        top[j] = (sample_logprob){.token_id = i, .logprob = v};
    }
    for (int32_t j = 0; j < have; j++) {
        top[j].logprob = (top[j].logprob - m) - log_sum;
        top[j].rank = j + 1;
    }
    out->num_top = have;
}

vllm_status sampler_sample(const vllm_sampling_params *p, const sample_history *h, const int32_t *eos_ids,
                           int32_t num_eos, float *logits, int32_t vocab_size, sampler_rng *rng, void *scratch,
                           sample_result *out) {
    float *raw = scratch;
    bool want_logprobs = p->logprobs >= 0;
    if (want_logprobs) memcpy(raw, logits, (size_t)vocab_size * sizeof *raw);
    processed pr;
    vllm_status rc = sampler_process(p, h, eos_ids, num_eos, logits, vocab_size, scratch, &pr);
    if (rc != VLLM_OK) return rc;
    out->token_id = pr.greedy ? pr.token : draw(&pr, rng);
    out->logprob = 0.0f;
    out->rank = 0;
    out->num_top = 0;
    if (want_logprobs) fill_logprobs(p, raw, vocab_size, out);
    return VLLM_OK;
}

vllm_status sampler_probs(const vllm_sampling_params *p, const sample_history *h, const int32_t *eos_ids,
                          int32_t num_eos, float *logits, int32_t vocab_size, void *scratch, float *probs) {
    processed pr;
    vllm_status rc = sampler_process(p, h, eos_ids, num_eos, logits, vocab_size, scratch, &pr);
    if (rc != VLLM_OK) return rc;
    memset(probs, 0, (size_t)vocab_size * sizeof *probs);
    if (pr.greedy) {
        probs[pr.token] = 1.0f;
        return VLLM_OK;
    }
    for (int32_t i = 0; i < pr.n; i++) probs[pr.c[i].id] = (float)(pr.c[i].v / pr.mass);
    return VLLM_OK;
}
