/*
 * sampler.c - one token from one row of logits, the vLLM V1 way.
 *
 * The steps and their order are listed in sampler.h. How they are done here:
 *
 * - Logit-changing steps (min_tokens, logit_bias, penalties) touch only the
 *   ids they name, in place. Penalties count output occurrences without a
 *   vocabulary-sized clear: the history's slots are zeroed, counted, then
 *   each id is penalised once (its slot set to -1).
 * - Greedy is one argmax pass (strict >, so ties go to the lowest id; NaN never
 *   wins). The same pass gives the maximum every later step needs.
 * - Random sampling without top_k turns the logits into unnormalised weights
 *   exp(l / t - max) in place (min_p: weight < min_p is cut, since the top
 *   weight is 1), one vectorised pass. With top_p it then gathers only tokens
 *   of weight >= mass (1 - top_p) / vocab: the ones below cannot total
 *   (1 - top_p) of the mass, so every token top_p keeps is among them.
 * - With top_k, a k-sized min-heap finds the k-th largest logit in one pass
 *   (large k: quickselect), and only tokens >= it (ties kept, as vLLM's mask
 *   keeps them) are gathered as (value, id) candidates; min_p and top_p then
 *   work on those few.
 * - top_p is a weighted quickselect: a token is kept iff the weight of
 *   strictly heavier tokens is < top_p * mass, which is vLLM's rule (ascending
 *   cumsum <= 1 - p is cut) without a sort; equal values share a fate. A
 *   recursion guard falls back to qsort, the plain reference, so adversarial
 *   logits cannot make it quadratic; tests run both.
 * - The draw inverts the CDF of the weights with one uniform from the
 *   sequence's own generator. vLLM draws by an exponential race
 *   (argmax p / Exp(1)), a random number per token; both pick token i with
 *   probability p_i.
 *
 * Logprobs are vLLM's raw_logprobs: log_softmax of the logits as the model
 * gave them, copied aside before anything changes them. The sampled token's
 * rank counts tokens whose raw logit is >= its own (vLLM's count of
 * logprobs >= the token's, itself included).
 *
 * Scratch layout (sampler_scratch_bytes): raw (vocab floats) | candidates
 * (vocab x {float value; int32 id}); the candidate area is also the penalty
 * counters (before candidates exist) and the top_k heap (at its far end).
 *
 * A step's batch (sampler_sample_batch) is a loop of sampler_sample over
 * each sequence's rows, stopping at the first row whose token is not the
 * draft (sampler.h). The sequences are independent -- own rows, generator,
 * history, output -- so a large batch is split over the engine's idle
 * worker threads, each with its own scratch, and the result does not depend
 * on which thread took which sequence. A sequence whose drafts come with
 * their distributions q (draft_probs) and whose request samples goes through
 * vLLM's rejection sampler instead (rejection_seq_rows, sampler.h): p from
 * sampler_probs, one uniform per draft, a second one at a rejection.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include "kernels/vexp.h"
#define SAMPLER_AVX2 1
#endif

#include "base/error.h"

#define SAMPLING_EPS 1e-5f     /* vLLM's _SAMPLING_EPS: below it, greedy */
#define MIN_TEMPERATURE 1e-2f  /* vLLM's _MAX_TEMP: smaller positive t is raised to it */
#define EXP_CUTOFF -87.0f      /* exp below it is taken as 0 (float32 normals end near -87.3) */
#define TOP_K_HEAP_MAX 4096    /* larger top_k selects by quickselect instead of a heap */
#define TOP_P_BUCKET_SHIFT 20  /* top_p histogram: float bits 30..20, exponent + 3 mantissa bits */
#define TOP_P_BUCKETS 2048     /* (weights are >= 0: the sign bit is 0) */

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
    for (int32_t i = 0; i < p->num_allowed_token_ids; i++)
        if (p->allowed_token_ids[i] < 0 || p->allowed_token_ids[i] >= vocab_size)
            return vllm_error(VLLM_ERR_INVALID, "allowed_token_ids contains out-of-vocab token id!");
    int64_t nb = 0;
    for (int32_t i = 0; i < p->num_bad_words; i++) nb += p->bad_words_lens[i];
    n = 0;
    for (int64_t i = 0; i < nb; i++) {
        int32_t id = p->bad_words_ids[i];
        if (id >= 0 && id < vocab_size) continue;
        if (n < sizeof list - 16) n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", bad ? ", " : "", id);
        bad++;
    }
    if (bad) /* SamplingParams._validate_bad_words' words */
        return vllm_error(VLLM_ERR_INVALID,
                          "The model vocabulary size is %d, but the following tokens were specified as bad: "
                          "[%s]. All token id values should be integers satisfying: 0 <= token_id <= %d.",
                          vocab_size, list, vocab_size - 1);
    return VLLM_OK;
}

size_t sampler_scratch_bytes(int32_t vocab_size) { return (size_t)vocab_size * 12 + 8; }

/* ---- logit processing ---------------------------------------------------- */

typedef struct cand { float v; int32_t id; } cand; /* a surviving token: value (logit, later weight) */

/* The candidate area: after the raw copy, 8-byte aligned (it also holds the
 * top_p histogram's doubles). */
static cand *scratch_cands(void *scratch, int32_t vocab_size) {
    size_t off = ((size_t)vocab_size * sizeof(float) + 7) & ~(size_t)7;
    return (cand *)((char *)scratch + off);
}

/* What processing leaves: a greedy token, or weights summing to mass, either
 * dense (by token id, vocab_size of them) or as candidates c[0, n). */
typedef struct processed {
    bool greedy;
    int32_t token;
    const float *dense;
    cand *c;
    int32_t n;
    double mass;
} processed;

/* allowed_token_ids: every other token gets -inf. mask: vocab_size bytes of
 * scratch (the candidate area, free until the penalties use it). */
static void apply_allowed_ids(const vllm_sampling_params *p, float *logits, int32_t vocab_size, uint8_t *mask) {
    if (p->num_allowed_token_ids <= 0) return;
    memset(mask, 0, (size_t)vocab_size);
    for (int32_t i = 0; i < p->num_allowed_token_ids; i++) {
        int32_t id = p->allowed_token_ids[i];
        if (id >= 0 && id < vocab_size) mask[id] = 1;
    }
    for (int32_t i = 0; i < vocab_size; i++)
        if (!mask[i]) logits[i] = -INFINITY;
}

/* bad_words: a sequence's last token gets -inf when the output ends with the
 * tokens before it (vLLM's _apply_bad_words_single_batch, on output tokens). */
static void apply_bad_words(const vllm_sampling_params *p, const sample_history *h, float *logits,
                            int32_t vocab_size) {
    int32_t nout = h ? h->num_output : 0;
    const int32_t *w = p->bad_words_ids;
    for (int32_t i = 0; i < p->num_bad_words; w += p->bad_words_lens[i], i++) {
        int32_t len = p->bad_words_lens[i], last = w[len - 1];
        if (len - 1 > nout || last < 0 || last >= vocab_size) continue;
        if (len == 1 || memcmp(h->output_ids + nout - (len - 1), w, (size_t)(len - 1) * sizeof *w) == 0)
            logits[last] = -INFINITY;
    }
}

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

/* counts: vocab_size int32 of scratch in any state; only history slots are
 * used: the output count, then -1 once the token has been penalised. */
static void apply_penalties(const vllm_sampling_params *p, const sample_history *h, float *logits,
                            int32_t vocab_size, int32_t *counts) {
    float rep = p->repetition_penalty, freq = p->frequency_penalty, pres = p->presence_penalty;
    if (!h || (rep == 1.0f && freq == 0.0f && pres == 0.0f)) return;
    const int32_t *ids[2] = {h->prompt_ids, h->output_ids};
    int32_t num[2] = {h->prompt_ids ? h->num_prompt : 0, h->output_ids ? h->num_output : 0};
    for (int s = 0; s < 2; s++)
        for (int32_t i = 0; i < num[s]; i++)
            if (ids[s][i] >= 0 && ids[s][i] < vocab_size) counts[ids[s][i]] = 0;
    for (int32_t i = 0; i < num[1]; i++)
        if (ids[1][i] >= 0 && ids[1][i] < vocab_size) counts[ids[1][i]]++;
    float inv_rep = 1.0f / rep;
    for (int s = 0; s < 2; s++) { /* every id of prompt and output once */
        for (int32_t i = 0; i < num[s]; i++) {
            int32_t id = ids[s][i];
            if (id < 0 || id >= vocab_size || counts[id] < 0) continue;
            int32_t n_out = counts[id];
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
 * than it is < target (= top_p x total weight), counting `above`, the weight
 * of heavier tokens outside c. *kept_mass gets above + the kept weight. */
static int32_t cand_select_top_p(cand *c, int32_t n, double target, double above, double *kept_mass) {
    int32_t lo = 0, hi = n, depth = 0, limit = depth_limit(n);
    /* above: weight of [0, lo) plus of the heavier tokens not in c; all kept */
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

/* ---- exp kernels ---------------------------------------------------------- */

#ifdef SAMPLER_AVX2
/* exp of 8 values <= 0 (vexp_avx2); below EXP_CUTOFF or NaN gives 0. */
static inline __m256 exp8(__m256 x) {
    __m256 valid = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_CUTOFF), _CMP_GE_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(EXP_CUTOFF));
    return _mm256_and_ps(vexp_avx2(x), valid);
}

/* acc += the 8 floats of w, in double. */
static inline void acc8(__m256 w, __m256d *acc) {
    *acc = _mm256_add_pd(*acc, _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
    *acc = _mm256_add_pd(*acc, _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
}

static double hsum_pd(__m256d a) {
    double t[4];
    _mm256_storeu_pd(t, a);
    return (t[0] + t[1]) + (t[2] + t[3]);
}
#endif

static inline float exp_or_zero(float v) { return v >= EXP_CUTOFF ? expf(v) : 0.0f; }

/* x[i] <- exp(x[i] / t - smax), or 0 where that is < min_p (or x[i] is -inf
 * or NaN); returns the sum. x: (n). smax is max(x) / t, finite. */
static double weights_in_place(float *x, int32_t n, float t, float smax, float min_p) {
    int32_t i = 0;
    double mass = 0.0;
#ifdef SAMPLER_AVX2
    __m256 vt = _mm256_set1_ps(t), vs = _mm256_set1_ps(smax), vm = _mm256_set1_ps(min_p);
    __m256d acc = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m256 w = exp8(_mm256_sub_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vt), vs));
        w = _mm256_and_ps(w, _mm256_cmp_ps(w, vm, _CMP_GE_OQ));
        _mm256_storeu_ps(x + i, w);
        acc8(w, &acc);
    }
    mass = hsum_pd(acc);
#endif
    for (; i < n; i++) {
        float w = exp_or_zero(x[i] / t - smax);
        x[i] = w >= min_p ? w : 0.0f;
        mass += x[i];
    }
    return mass;
}

/* sum of exp(x[i] - m) over x: (n), m = max(x) finite; -inf and NaN add 0. */
static double sum_exp(const float *x, int32_t n, float m) {
    int32_t i = 0;
    double sum = 0.0;
#ifdef SAMPLER_AVX2
    __m256 vm = _mm256_set1_ps(m);
    __m256d acc = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) acc8(exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)), &acc);
    sum = hsum_pd(acc);
#endif
    for (; i < n; i++) sum += exp_or_zero(x[i] - m);
    return sum;
}

/* ---- top-k -------------------------------------------------------------- */

/* The first index in [i, n) whose value is > thr (n if none; NaN never is),
 * skipping 8 values at a time: the scans below mostly find nothing. */
static inline int32_t next_above(const float *x, int32_t i, int32_t n, float thr) {
#ifdef SAMPLER_AVX2
    __m256 vt = _mm256_set1_ps(thr);
    for (; i + 8 <= n; i += 8) {
        unsigned hit = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vt, _CMP_GT_OQ));
        if (hit) return i + __builtin_ctz(hit);
    }
#endif
    while (i < n && !(x[i] > thr)) i++;
    return i;
}

/* The k-th largest of x: (n), ignoring -inf and NaN (-inf if fewer than k
 * remain), with a k-float min-heap in heap. One pass; a value costs a sift
 * only when it beats the current k-th, which is rare after the first few. */
static float kth_largest(const float *x, int32_t n, int32_t k, float *heap) {
    int32_t size = 0, i = 0;
    for (; i < n && size < k; i++) {
        float v = x[i];
        if (!(v > -INFINITY)) continue;
        int32_t j = size++;
        for (; j > 0 && heap[(j - 1) / 2] > v; j = (j - 1) / 2) heap[j] = heap[(j - 1) / 2];
        heap[j] = v;
    }
    if (size < k) return -INFINITY;
    for (i = next_above(x, i, n, heap[0]); i < n; i = next_above(x, i + 1, n, heap[0])) {
        float v = x[i];
        int32_t j = 0;
        for (;;) {
            int32_t l = 2 * j + 1, m = l + 1 < k && heap[l + 1] < heap[l] ? l + 1 : l;
            if (l >= k || heap[m] >= v) break;
            heap[j] = heap[m];
            j = m;
        }
        heap[j] = v;
    }
    return heap[0];
}

/* ---- top-p over dense weights ----------------------------------------- */

static inline uint32_t float_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* top_p over dense weights w: (n): zeroes the weights it cuts and returns the
 * kept mass (target = top_p x total). The bit patterns of positive floats are
 * ordered like their values, so a histogram of mass over the top bits
 * (exponent + 3 mantissa bits) finds the one bucket where the cut falls in a
 * pass; only that bucket's tokens go through the exact selection. Then a
 * token is kept iff it is heavier than every cut one.
 * scratch: TOP_P_BUCKETS doubles, then reused as n candidates. */
static double top_p_dense(float *w, int32_t n, double target, double *hist, cand *c) {
    memset(hist, 0, TOP_P_BUCKETS * sizeof *hist);
    for (int32_t i = 0; i < n; i++) hist[float_bits(w[i]) >> TOP_P_BUCKET_SHIFT] += w[i];
    double above = 0.0;
    int32_t b = TOP_P_BUCKETS - 1;
    for (; b > 0 && above + hist[b] < target; b--) above += hist[b];
    uint32_t lo = (uint32_t)b << TOP_P_BUCKET_SHIFT, hi = lo + (1u << TOP_P_BUCKET_SHIFT);
    int32_t m = 0, i = 0; /* hist is dead from here: c reuses its memory */
#ifdef SAMPLER_AVX2
    __m256i vlo = _mm256_set1_epi32((int32_t)lo), vhi = _mm256_set1_epi32((int32_t)hi);
    for (; i + 8 <= n; i += 8) { /* bits are < 2^31: signed compares order them */
        __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(w + i));
        __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(vlo, bits), _mm256_cmpgt_epi32(vhi, bits));
        for (unsigned hit = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(in)); hit; hit &= hit - 1) {
            int32_t j = i + __builtin_ctz(hit);
            if (w[j] > 0.0f) c[m++] = (cand){w[j], j};
        }
    }
#endif
    for (; i < n; i++) {
        uint32_t bits = float_bits(w[i]);
        if (bits >= lo && bits < hi && w[i] > 0.0f) c[m++] = (cand){w[i], i};
    }
    double kept_mass;
    int32_t kept = cand_select_top_p(c, m, target, above, &kept_mass);
    float cut_max = -1.0f;
    for (int32_t j = kept; j < m; j++) cut_max = c[j].v > cut_max ? c[j].v : cut_max;
    if (kept < m)
        for (i = 0; i < n; i++) w[i] = w[i] > cut_max ? w[i] : 0.0f;
    else
        for (i = 0; i < n; i++) w[i] = float_bits(w[i]) >= lo ? w[i] : 0.0f;
    return kept_mass;
}

/* The largest of x: (n), NaN ignored (-inf if nothing else), and in *first
 * the lowest index holding it (-1 if the largest is -inf). */
static float max_first(const float *x, int32_t n, int32_t *first) {
    int32_t i = 0;
    float m = -INFINITY;
#ifdef SAMPLER_AVX2
    __m256 vm = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm); /* NaN in x keeps vm */
    float lane[8];
    _mm256_storeu_ps(lane, vm);
    for (int j = 0; j < 8; j++) m = lane[j] > m ? lane[j] : m;
#endif
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    *first = -1;
    if (!(m > -INFINITY)) return m;
    i = 0;
#ifdef SAMPLER_AVX2
    vm = _mm256_set1_ps(m);
    for (; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit) { *first = i + __builtin_ctz((unsigned)hit); return m; }
    }
#endif
    for (; i < n; i++)
        if (x[i] == m) { *first = i; break; }
    return m;
}

/* ---- processing --------------------------------------------------------- */

/* Runs every step of sampler.h on logits (in place) up to the draw. */
static vllm_status sampler_process(const vllm_sampling_params *p, const sample_history *h, const int32_t *eos_ids,
                                   int32_t num_eos, float *logits, int32_t vocab_size, void *scratch,
                                   processed *out) {
    cand *c = scratch_cands(scratch, vocab_size);
    memset(out, 0, sizeof *out);
    apply_allowed_ids(p, logits, vocab_size, (uint8_t *)c);
    apply_bad_words(p, h, logits, vocab_size);
    apply_min_tokens(p, h, eos_ids, num_eos, logits, vocab_size);
    apply_logit_bias(p, logits, vocab_size);
    apply_penalties(p, h, logits, vocab_size, (int32_t *)c);

    int32_t best;
    float vmax = max_first(logits, vocab_size, &best);
    if (best < 0) return no_token_left();
    out->token = best;
    if ((out->greedy = sampler_is_greedy(p))) return VLLM_OK;

    float t = sampler_effective_temperature(p->temperature), min_p = p->min_p, smax = vmax / t;
    int32_t n = 0, k = p->top_k;
    if (isinf(smax)) { /* +inf logits (or overflow by t): they share all the mass */
        for (int32_t i = 0; i < vocab_size; i++)
            if (logits[i] / t == smax) c[n++] = (cand){1.0f, i};
        out->c = c, out->n = n, out->mass = n;
        return VLLM_OK;
    }
    double mass = 0.0;
    if (k <= 0 || k >= vocab_size) {
        mass = weights_in_place(logits, vocab_size, t, smax, min_p);
        if (p->top_p >= 1.0f) {
            out->dense = logits, out->mass = mass;
            return VLLM_OK;
        }
        double target = (double)p->top_p * mass;
        if (vocab_size >= TOP_P_BUCKETS) { /* the histogram fits in the candidate area */
            out->mass = top_p_dense(logits, vocab_size, target, (double *)c, c);
            out->dense = logits;
            return VLLM_OK;
        }
        float floor_w = (float)(mass * (1.0 - (double)p->top_p) / vocab_size);
        for (int32_t i = 0; i < vocab_size; i++)
            if (logits[i] > 0.0f && logits[i] >= floor_w) c[n++] = (cand){logits[i], i};
    } else {
        /* top_k (and min_p, the same kind of cut from the top) on values l / t */
        float kth = -INFINITY;
        if (k <= TOP_K_HEAP_MAX) kth = kth_largest(logits, vocab_size, k, (float *)c + 2 * (size_t)vocab_size - k);
        float below = kth > -INFINITY ? nextafterf(kth, -INFINITY) : -INFINITY; /* l > below: l >= kth, finite */
        for (int32_t i = next_above(logits, 0, vocab_size, below); i < vocab_size;
             i = next_above(logits, i + 1, vocab_size, below)) {
            float v = logits[i] / t;
            if (min_p > 0.0f && !(expf(v - smax) >= min_p)) continue;
            c[n++] = (cand){v, i};
        }
        if (k > TOP_K_HEAP_MAX && k < n) n = cand_select_top_k(c, n, k);
        for (int32_t i = 0; i < n; i++) mass += (c[i].v = expf(c[i].v - smax));
        if (p->top_p >= 1.0f) {
            out->c = c, out->n = n, out->mass = mass;
            return VLLM_OK;
        }
    }
    n = cand_select_top_p(c, n, (double)p->top_p * mass, 0.0, &mass);
    out->c = c, out->n = n, out->mass = mass;
    return VLLM_OK;
}

/* ---- sampling and logprobs ----------------------------------------------- */

static int32_t draw(const processed *pr, int32_t vocab_size, sampler_rng *rng) {
    double u = sampler_rng_uniform(rng) * pr->mass, acc = 0.0;
    int32_t last = -1;
    if (pr->dense) {
        int32_t i = 0;
#ifdef SAMPLER_AVX2
        /* skip whole blocks of 64 weights while they end below u */
        for (; i + 64 <= vocab_size; i += 64) {
            __m256d s = _mm256_setzero_pd();
            for (int j = 0; j < 64; j += 8) acc8(_mm256_loadu_ps(pr->dense + i + j), &s);
            double block = hsum_pd(s);
            if (u < acc + block) break;
            acc += block;
        }
#endif
        for (; i < vocab_size; i++) {
            if (pr->dense[i] <= 0.0f) continue;
            acc += pr->dense[i];
            last = i;
            if (u < acc) return i;
        }
    } else {
        for (int32_t i = 0; i < pr->n; i++) {
            if (pr->c[i].v <= 0.0f) continue;
            acc += pr->c[i].v;
            last = pr->c[i].id;
            if (u < acc) return last;
        }
    }
    return last >= 0 ? last : pr->token; /* u rounded up to the total */
}

/* Fills out's logprob fields from raw (the logits before processing), with
 * the top min(num_top, vocab) in out->top when it is not NULL. */
static void fill_logprobs(int32_t num_top, const float *raw, int32_t vocab_size, sample_result *out) {
    int32_t first;
    float m = max_first(raw, vocab_size, &first);
    float log_sum = (float)log(sum_exp(raw, vocab_size, m));

    float x = raw[out->token_id];
    int32_t rank = 0, i = 0;
#ifdef SAMPLER_AVX2
    __m256 vx = _mm256_set1_ps(x);
    for (; i + 8 <= vocab_size; i += 8)
        rank += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(raw + i), vx, _CMP_GE_OQ)));
#endif
    for (; i < vocab_size; i++) rank += raw[i] >= x;
    out->logprob = (x - m) - log_sum;
    out->rank = rank;

    /* top-N: a descending insertion list (holding raw values until the end);
     * strict > keeps the lower id first among equal values */
    sample_logprob *top = out->top;
    int32_t want = !top ? 0 : num_top < vocab_size ? num_top : vocab_size, have = 0;
    for (i = 0; i < vocab_size && want > 0; i++) {
        if (have == want && (i = next_above(raw, i, vocab_size, top[want - 1].logprob)) == vocab_size) break;
        float v = raw[i];
        if (isnan(v)) continue;
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
    out->token_id = pr.greedy ? pr.token : draw(&pr, vocab_size, rng);
    out->logprob = 0.0f;
    out->rank = 0;
    out->num_top = 0;
    if (want_logprobs) fill_logprobs(p->logprobs, raw, vocab_size, out);
    return VLLM_OK;
}

void sampler_logprobs(const float *logits, int32_t vocab_size, int32_t token_id, int32_t num_top,
                      sample_result *out) {
    out->token_id = token_id;
    out->num_top = 0;
    fill_logprobs(num_top, logits, vocab_size, out);
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
    if (pr.dense)
        for (int32_t i = 0; i < vocab_size; i++) probs[i] = (float)(pr.dense[i] / pr.mass);
    else
        for (int32_t i = 0; i < pr.n; i++) probs[pr.c[i].id] = (float)(pr.c[i].v / pr.mass);
    return VLLM_OK;
}

/* ---- a step's batch ------------------------------------------------------- */

enum {
    BATCH_PARALLEL_MIN = 16, /* sequences in a step before the pool is woken */
    BATCH_CHUNK = 4,         /* sequences per work item */
};

struct sampler {
    int32_t vocab;
    int32_t eos[8];
    int32_t num_eos;
    threadpool *pool;                /* borrowed, or NULL */
    int nth;
    size_t scratch_bytes;            /* per thread, 8-byte multiple */
    char *scratch;                   /* (nth, scratch_bytes) */
    float *rows;                     /* (nth, vocab): a shared row's private copy */
    float *probs;                    /* (nth, vocab): the rejection sampler's p, then its residual */
};

vllm_status sampler_create(int32_t vocab_size, const int32_t *eos_ids, int32_t num_eos, threadpool *pool,
                           sampler **out) {
    *out = NULL;
    if (vocab_size < 1 || num_eos < 0 || num_eos > 8)
        return vllm_error(VLLM_ERR_INVALID, "sampler: vocabulary %d, %d EOS ids (at most 8)", vocab_size, num_eos);
    sampler *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "sampler: out of memory");
    s->vocab = vocab_size;
    s->num_eos = num_eos;
    if (num_eos) memcpy(s->eos, eos_ids, (size_t)num_eos * sizeof *eos_ids);
    s->pool = pool;
    s->nth = pool ? threadpool_num_threads(pool) : 1;
    s->scratch_bytes = (sampler_scratch_bytes(vocab_size) + 7) & ~(size_t)7;
    s->scratch = malloc((size_t)s->nth * s->scratch_bytes);
    s->rows = malloc((size_t)s->nth * (size_t)vocab_size * sizeof *s->rows);
    s->probs = malloc((size_t)s->nth * (size_t)vocab_size * sizeof *s->probs);
    if (!s->scratch || !s->rows || !s->probs) {
        int nth = s->nth;
        sampler_free(s);
        return vllm_error(VLLM_ERR_NOMEM, "sampler: out of memory for %d threads' scratch", nth);
    }
    *out = s;
    return VLLM_OK;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->scratch);
    free(s->rows);
    free(s->probs);
    free(s);
}

/* Tokens whose bit is clear in mask get -inf. A grammar's mask is mostly
 * empty words (a whole word of -inf: vector stores) and a few mixed ones
 * (their clear bits, lowest first). */
static void apply_allowed(float *logits, const uint32_t *mask, int32_t vocab_size) {
    int32_t full = vocab_size / 32;
    for (int32_t w = 0; w < full; w++) {
        uint32_t m = mask[w];
        float *x = logits + (size_t)w * 32;
        if (m == UINT32_MAX) continue;
        if (m == 0) {
            for (int k = 0; k < 32; k++) x[k] = -INFINITY;
            continue;
        }
        for (uint32_t c = ~m; c; c &= c - 1) x[__builtin_ctz(c)] = -INFINITY;
    }
    for (int32_t i = full * 32; i < vocab_size; i++)
        if (!(mask[full] >> (i - full * 32) & 1u)) logits[i] = -INFINITY;
}

/* Inverse-CDF draw from unnormalised weights w (n, mass > 0) with uniform u;
 * the last positive weight if rounding runs past the end. */
static int32_t draw_dense(const float *w, int32_t n, double mass, double u) {
    double t = u * mass, acc = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (w[i] <= 0.0f) continue;
        acc += w[i];
        last = i;
        if (t < acc) return i;
    }
    return last;
}

/* vLLM's rejection sampler over one sequence's rows (sampler.h): p_j from
 * sampler_probs, accept x_j iff q_j(x_j) > 0 and p_j(x_j) >= u q_j(x_j), the
 * first rejection drawn from max(0, p_j - q_j), the bonus row sampled as
 * usual. The raw logits for logprobs go to the scratch's raw area, which
 * sampler_probs leaves alone. */
static void rejection_seq_rows(sampler *s, sample_seq *q, int ith) {
    int32_t V = s->vocab, words = (V + 31) / 32;
    void *scratch = s->scratch + (size_t)ith * s->scratch_bytes;
    float *p = s->probs + (size_t)ith * (size_t)V, *raw = scratch; /* raw: sampler_probs leaves it alone */
    bool want_lps = q->out_results != NULL && q->params->logprobs >= 0;
    for (int32_t j = 0; j <= q->num_drafts; j++) {
        float *x = q->logits + (size_t)j * (size_t)V;
        if (q->shared_logits) {
            float *copy = s->rows + (size_t)ith * (size_t)V;
            memcpy(copy, x, (size_t)V * sizeof *x);
            x = copy;
        }
        if (q->allowed) apply_allowed(x, q->allowed + (size_t)j * (size_t)words, V);
        sample_history h = {.prompt_ids = q->tokens,
                            .num_prompt = q->num_prompt,
                            .output_ids = q->tokens + q->num_prompt,
                            .num_output = q->num_tokens + j - q->num_prompt};
        sample_result none = {.top = NULL}, *res = q->out_results ? &q->out_results[j] : &none;
        if (j == q->num_drafts) { /* every draft accepted: the bonus token */
            if ((q->rc = sampler_sample(q->params, &h, s->eos, s->num_eos, x, V, q->rng, scratch, res)) != VLLM_OK)
                return;
            q->out_tokens[j] = res->token_id;
            q->num_out = j + 1;
            return;
        }
        memcpy(raw, x, (size_t)V * sizeof *raw);
        if ((q->rc = sampler_probs(q->params, &h, s->eos, s->num_eos, x, V, scratch, p)) != VLLM_OK) return;
        const float *qj = q->draft_probs + (size_t)j * (size_t)V;
        int32_t d = q->tokens[q->num_tokens + j], tok = d;
        double u = sampler_rng_uniform(q->rng);
        bool accept = qj[d] > 0.0f && p[d] > 0.0f && (double)p[d] >= u * (double)qj[d];
        if (!accept) {
            double mass = 0.0;
            for (int32_t i = 0; i < V; i++) mass += (p[i] = p[i] > qj[i] ? p[i] - qj[i] : 0.0f);
            if (!(mass > 0.0)) { /* p <= q everywhere (p == q up to rounding): draw from p itself */
                memcpy(x, raw, (size_t)V * sizeof *x);
                sampler_probs(q->params, &h, s->eos, s->num_eos, x, V, scratch, p);
                mass = 1.0;
            }
            double u2 = sampler_rng_uniform(q->rng);
            tok = draw_dense(p, V, mass, u2);
            if (tok < 0) tok = d;
        }
        res->token_id = tok;
        res->logprob = 0.0f;
        res->rank = 0;
        res->num_top = 0;
        if (want_lps) sampler_logprobs(raw, V, tok, q->params->logprobs, res);
        q->out_tokens[j] = tok;
        q->num_out = j + 1;
        if (!accept) return;
    }
}

static void sample_seq_rows(sampler *s, sample_seq *q, int ith) {
    int32_t V = s->vocab, words = (V + 31) / 32;
    void *scratch = s->scratch + (size_t)ith * s->scratch_bytes;
    q->num_out = 0;
    q->rc = VLLM_OK;
    if (q->draft_probs && q->num_drafts > 0 && !sampler_is_greedy(q->params)) {
        rejection_seq_rows(s, q, ith);
        return;
    }
    for (int32_t j = 0; j <= q->num_drafts; j++) {
        float *x = q->logits + (size_t)j * (size_t)V;
        if (q->shared_logits) {
            float *copy = s->rows + (size_t)ith * (size_t)V;
            memcpy(copy, x, (size_t)V * sizeof *x);
            x = copy;
        }
        if (q->allowed) apply_allowed(x, q->allowed + (size_t)j * (size_t)words, V);
        sample_history h = {.prompt_ids = q->tokens,
                            .num_prompt = q->num_prompt,
                            .output_ids = q->tokens + q->num_prompt,
                            .num_output = q->num_tokens + j - q->num_prompt};
        sample_result none = {.top = NULL}, *res = q->out_results ? &q->out_results[j] : &none;
        if ((q->rc = sampler_sample(q->params, &h, s->eos, s->num_eos, x, V, q->rng, scratch, res)) != VLLM_OK)
            return;
        q->out_tokens[j] = res->token_id;
        q->num_out = j + 1;
        if (j == q->num_drafts || res->token_id != q->tokens[q->num_tokens + j]) return;
    }
}

typedef struct batch_job { sampler *s; sample_seq *seqs; } batch_job;

static void stage_sample(void *arg, int64_t lo, int64_t hi, int ith) {
    batch_job *j = arg;
    for (int64_t i = lo; i < hi; i++) sample_seq_rows(j->s, &j->seqs[i], ith);
}

vllm_status sampler_sample_batch(sampler *s, sample_seq *seqs, int32_t num_seqs) {
    batch_job job = {s, seqs};
    if (s->pool && num_seqs >= BATCH_PARALLEL_MIN)
        threadpool_run(s->pool, stage_sample, &job, num_seqs, BATCH_CHUNK);
    else
        stage_sample(&job, 0, num_seqs, 0);
    for (int32_t i = 0; i < num_seqs; i++)
        if (seqs[i].rc != VLLM_OK) /* the message was set on whichever thread ran it: set it here */
            return seqs[i].rc == VLLM_ERR_INVALID ? no_token_left() : vllm_error(seqs[i].rc, "sampler failed");
    return VLLM_OK;
}
