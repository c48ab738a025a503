/*
 * bench_spec.c - single-request decode speed with and without speculative
 * decoding: n-gram prompt lookup on a prompt that asks for a passage to be
 * copied or code to be edited (where prompt lookup pays off; --task), or a
 * draft model (--draft).
 *
 *   build/bench/bench_spec --model DIR|GGUF [--k 4] [--lookup-min 1]
 *                          [--lookup-max 3] [--max-tokens 128] [--rounds 5]
 *                          [--threads 2] [--prompt TEXT | --task passage|short|code]
 *                          [--draft DIR|GGUF]
 *                          [--adaptive] [--exact] [--concurrency 1]
 *
 * Two engines over the same weights, one plain and one with
 * speculative_config {method ngram, num_speculative_tokens k,
 * prompt_lookup_min/max}; each round runs the greedy request (ignore_eos,
 * max_tokens) once on each, alternately, so both see the same machine noise.
 * Decode tokens/s = (output tokens - 1) / time from the first output token
 * to the last (the prefill step excluded); the medians over the rounds are
 * compared. --adaptive: the adaptive k of spec/spec_policy.h (the CLI's default);
 * --exact: a draft model's draft_token_acceptance_method "exact". Mean acceptance length is vLLM's: 1 + accepted / drafts. The
 * outputs of the two engines must be equal (exact verification): a
 * difference is reported and the exit status is 1.
 *
 * --concurrency N: N copies of the request at once (max_num_seqs N), the
 * batched case: decode tokens/s is then every sequence's output tokens after
 * its first over the time from the first output token to the last (the
 * adaptive k's cost model decides whether the batch drafts at all).
 *
 * The last line also gives the medians per CPU-second of the process (user
 * + system time from the first output token to the last): on a machine
 * shared with other work, wall-clock rates swing several-fold between
 * rounds, CPU time much less.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

#define MAX_ROUNDS 64

/* Built-in tasks (--task), each an input-copying task as issue 19 asks:
 * "passage" (the default): repeat a passage of ~110 tokens (SmolLM2's
 * tokenizer), longer than the 96 output tokens bench/spec_decode.sh times, so
 * the timed output is the copy; "short": the earlier, shorter passage (64
 * tokens), after which a model writes on freely; "code": rewrite a Python
 * function with a variable renamed (chat markup of SmolLM2-Instruct). */
static const char *passage_prompt =
    "Repeat this passage exactly.\n\n"
    "Passage: Lily and Tom went to the park on a sunny day. They saw a big brown dog under a tree. "
    "The dog wagged its tail and ran to them. Lily gave the dog a stick, and Tom threw a ball. "
    "They played until the sun went down. On the way home they met the dog's owner, an old man with a red hat, "
    "who thanked them for taking such good care of his friend. He gave each of them an apple from his garden, "
    "and they walked home together, tired and happy.\n\n"
    "Repeated passage: Lily and Tom went to the park on a sunny day. They saw a big brown dog under a tree. "
    "The dog wagged its tail and ran to them. Lily gave the dog a stick, and Tom threw a ball. "
    "They played until the sun went down. On the way home they met the dog's owner, an old man with a red hat, "
    "who thanked them for taking such good care of his friend. He gave each of them an apple from his garden, "
    "and they walked home together, tired and happy.\n\n"
    "Repeated passage: Lily and Tom";

static const char *short_prompt =
    "Repeat this passage exactly.\n\n"
    "Passage: Lily and Tom went to the park on a sunny day. They saw a big brown dog under a tree. "
    "The dog wagged its tail and ran to them. Lily gave the dog a stick, and Tom threw a ball. "
    "They played until the sun went down, and then they walked home together, tired and happy.\n\n"
    "Repeated passage: Lily and Tom went to the park on a sunny day. They saw a big brown dog under a tree. "
    "The dog wagged its tail and ran to them. Lily gave the dog a stick, and Tom threw a ball. "
    "They played until the sun went down, and then they walked home together, tired and happy.\n\n"
    "Repeated passage: Lily and Tom";

static const char *code_prompt =
    "<|im_start|>user\n"
    "Rewrite this Python code with the variable `total` renamed to `result`. Change nothing else.\n\n"
    "```python\n"
    "def summarize(orders):\n"
    "    total = 0\n"
    "    count = 0\n"
    "    for order in orders:\n"
    "        if order.status == \"paid\":\n"
    "            total += order.amount\n"
    "            count += 1\n"
    "    if count == 0:\n"
    "        return None\n"
    "    average = total / count\n"
    "    print(\"paid orders:\", count)\n"
    "    print(\"total amount:\", total)\n"
    "    print(\"average amount:\", average)\n"
    "    return total, count, average\n"
    "```\n<|im_end|>\n"
    "<|im_start|>assistant\n"
    "```python\n";

typedef struct run_result {
    double decode_tps;
    double decode_cpu_tps;           /* the same tokens per CPU-second of the process (user + system) */
    int32_t num_out;
    int32_t *ids;
    int64_t drafts, draft_tokens, accepted, steps;
} run_result;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_now(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           (double)u.ru_stime.tv_usec * 1e-6;
}

static int run_once(vllm_engine *e, const int32_t *prompt, int32_t len, const vllm_sampling_params *sp,
                    int32_t n, run_result *r) {
    memset(r, 0, sizeof *r);
    r->ids = malloc((size_t)n * (size_t)sp->max_tokens * sizeof *r->ids);
    int32_t *got = calloc((size_t)n, sizeof *got);
    if (!r->ids || !got) return -1;
    for (int32_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%d", i);
        if (vllm_engine_add_request(e, id, prompt, len, sp, NULL) != VLLM_OK) return -1;
    }
    double t_first = 0, t_last = 0, c_first = 0, c_last = 0;
    int64_t total = 0;
    while (vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        if (vllm_engine_step(e, &so) != VLLM_OK) return -1;
        r->steps++;
        r->drafts += so->stats.spec_num_drafts;
        r->draft_tokens += so->stats.spec_num_draft_tokens;
        r->accepted += so->stats.spec_num_accepted_tokens;
        for (int32_t j = 0; j < so->num_outputs; j++) {
            const vllm_seq_output *o = &so->outputs[j];
            if (o->num_new_tokens == 0) continue;
            if (total == 0) t_first = so->timestamp, c_first = cpu_now();
            t_last = so->timestamp, c_last = cpu_now();
            int32_t q = atoi(o->request_id);
            if (q < 0 || q >= n) continue;
            for (int32_t t = 0; t < o->num_new_tokens && got[q] < sp->max_tokens; t++, total++)
                r->ids[(size_t)q * (size_t)sp->max_tokens + (size_t)got[q]++] = o->new_token_ids[t];
        }
    }
    r->num_out = n * sp->max_tokens;
    for (int32_t q = 0; q < n; q++) /* a short one (never with ignore_eos): compare what there is */
        for (int32_t t = got[q]; t < sp->max_tokens; t++) r->ids[(size_t)q * (size_t)sp->max_tokens + (size_t)t] = -1;
    free(got);
    r->decode_tps = t_last > t_first ? (double)(total - n) / (t_last - t_first) : 0;
    r->decode_cpu_tps = c_last > c_first ? (double)(total - n) / (c_last - c_first) : 0;
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_spec --model DIR|GGUF [--k 4] [--lookup-min 1] [--lookup-max 3] "
                    "[--max-tokens 128] [--rounds 5] [--threads 2] [--prompt TEXT | --task passage|short|code] "
                    "[--draft DIR|GGUF] "
                    "[--adaptive] [--exact] [--concurrency 1]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *model = NULL, *text = passage_prompt, *draft = NULL;
    int k = 4, lmin = 1, lmax = 3, max_tokens = 128, rounds = 5, threads = 2, conc = 1;
    bool adaptive = false, exact = false;
    int nargs = 1; /* argv with the flags --adaptive / --exact taken out */
    char *args[64] = {argv[0]};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--adaptive")) adaptive = true;
        else if (!strcmp(argv[i], "--exact")) exact = true;
        else if (nargs < 64) args[nargs++] = argv[i];
        else return usage();
    }
    argc = nargs;
    argv = args;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--k")) k = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lookup-min")) lmin = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lookup-max")) lmax = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-tokens")) max_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) text = argv[i + 1];
        else if (!strcmp(argv[i], "--task")) {
            if (!strcmp(argv[i + 1], "passage")) text = passage_prompt;
            else if (!strcmp(argv[i + 1], "short")) text = short_prompt;
            else if (!strcmp(argv[i + 1], "code")) text = code_prompt;
            else return usage();
        }
        else if (!strcmp(argv[i], "--draft")) draft = argv[i + 1];
        else if (!strcmp(argv[i], "--concurrency")) conc = atoi(argv[i + 1]);
        else return usage();
    }
    if (argc % 2 == 0 || !model || max_tokens < 2 || rounds < 1 || rounds > MAX_ROUNDS || conc < 1 || conc > 1024)
        return usage();
    tokenizer *tok;
    int32_t *prompt, len;
    if (tokenizer_load(model, &tok) != VLLM_OK ||
        tokenizer_encode(tok, text, strlen(text), true, &prompt, &len) != VLLM_OK) {
        fprintf(stderr, "bench_spec: %s\n", vllm_errmsg());
        return 1;
    }
    tokenizer_free(tok);
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = model;
    a.num_threads = threads;
    a.max_num_seqs = conc;
    a.max_model_len = len + max_tokens + 8;
    a.enable_prefix_caching = false; /* every round computes the prompt */
    vllm_engine *plain, *spec;
    if (vllm_engine_create(&a, &plain) != VLLM_OK) {
        fprintf(stderr, "bench_spec: %s\n", vllm_errmsg());
        return 1;
    }
    if (draft) {
        a.speculative_config = (vllm_speculative_config){.method = VLLM_SPEC_METHOD_DRAFT_MODEL,
                                                         .num_speculative_tokens = k,
                                                         .exact_acceptance = exact};
        snprintf(a.speculative_config.model, sizeof a.speculative_config.model, "%s", draft);
    } else {
        a.speculative_config = (vllm_speculative_config){.method = VLLM_SPEC_METHOD_NGRAM,
                                                         .num_speculative_tokens = k,
                                                         .prompt_lookup_min = lmin,
                                                         .prompt_lookup_max = lmax};
    }
    a.speculative_config.adaptive = adaptive;
    if (vllm_engine_create(&a, &spec) != VLLM_OK) {
        fprintf(stderr, "bench_spec: %s\n", vllm_errmsg());
        return 1;
    }
    vllm_engine_info info;
    vllm_engine_get_info(plain, &info);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    if (draft)
        printf("model %s: %d threads, %d request(s), prompt %d tokens, %d output tokens, greedy; draft model %s "
               "k=%d\n", model, info.num_threads, conc, len, max_tokens, draft, k);
    else
        printf("model %s: %d threads, %d request(s), prompt %d tokens, %d output tokens, greedy; "
               "ngram k=%d prompt_lookup %d..%d\n",
               model, info.num_threads, conc, len, max_tokens, k, lmin, lmax);
    printf("%5s %16s %16s %7s %9s %12s\n", "round", "plain decode t/s", "spec decode t/s", "ratio", "mean acc",
           "steps p/s");
    double tp[MAX_ROUNDS], ts[MAX_ROUNDS], cp[MAX_ROUNDS], cs[MAX_ROUNDS];
    int64_t drafts = 0, accepted = 0, draft_tokens = 0;
    int status = 0;
    for (int r = -1; r < rounds; r++) { /* round -1 warms both up, unreported */
        run_result p, s;
        if (run_once(plain, prompt, len, &sp, conc, &p) != 0 || run_once(spec, prompt, len, &sp, conc, &s) != 0) {
            fprintf(stderr, "bench_spec: %s\n", vllm_errmsg());
            return 1;
        }
        if (p.num_out != s.num_out || memcmp(p.ids, s.ids, (size_t)p.num_out * sizeof *p.ids)) {
            fprintf(stderr, "bench_spec: round %d: the speculative output differs from the plain one\n", r);
            status = 1;
        }
        if (r >= 0) {
            tp[r] = p.decode_tps;
            ts[r] = s.decode_tps;
            cp[r] = p.decode_cpu_tps;
            cs[r] = s.decode_cpu_tps;
            drafts += s.drafts;
            accepted += s.accepted;
            draft_tokens += s.draft_tokens;
            printf("%5d %16.1f %16.1f %7.2f %9.2f %6lld/%-5lld\n", r, p.decode_tps, s.decode_tps,
                   s.decode_tps / p.decode_tps, s.drafts ? 1.0 + (double)s.accepted / (double)s.drafts : 0.0,
                   (long long)p.steps, (long long)s.steps);
            fflush(stdout);
        }
        free(p.ids);
        free(s.ids);
    }
    qsort(tp, (size_t)rounds, sizeof *tp, cmp_double);
    qsort(ts, (size_t)rounds, sizeof *ts, cmp_double);
    qsort(cp, (size_t)rounds, sizeof *cp, cmp_double);
    qsort(cs, (size_t)rounds, sizeof *cs, cmp_double);
    double mp = tp[rounds / 2], ms = ts[rounds / 2];
    double mcp = cp[rounds / 2], mcs = cs[rounds / 2];
    printf("median decode tokens/s: plain %.1f, %s %.1f, ratio %.2fx; mean acceptance length %.2f "
           "(%lld of %lld draft tokens accepted, %lld drafts); per CPU-second: plain %.1f, spec %.1f, "
           "ratio %.2fx\n",
           mp, draft ? "draft model" : "n-gram", ms, ms / mp, drafts ? 1.0 + (double)accepted / (double)drafts : 0.0,
           (long long)accepted, (long long)draft_tokens, (long long)drafts, mcp, mcs, mcs / mcp);
    free(prompt);
    vllm_engine_free(plain);
    vllm_engine_free(spec);
    return status;
}
