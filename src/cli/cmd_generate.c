/*
 * cmd_generate.c - `vllmc generate`: offline generation, vLLM's LLM.generate
 * from the command line.
 *
 *   vllmc generate [--model DIR] [--prompt TEXT]... [--prompts-file FILE]
 *                  [sampling flags] [engine flags] [--json] [--stats]
 *
 * Every prompt (from --prompt, or one JSON object per line of --prompts-file)
 * enters the engine at once and the engine batches them continuously. With no
 * prompt at all, generation starts from BOS. Sampling defaults come from the
 * model's generation_config.json (vLLM's --generation-config auto), then the
 * flags, then per-line overrides.
 *
 * This is the front end: the engine works on token ids; the output
 * processor (engine/output_processor.h, the server's too) turns each step
 * into text, finishes and logprobs. When a stop string completes, the
 * sequence is finished in the engine with vllm_engine_stop_sequence before
 * the next step, so no token is wasted.
 *
 * Output: plain text (one request with n = 1 streams as it generates), or with
 * --json one object per request on stdout in input order:
 *   {"prompt_token_ids":[...],"prompt_logprobs":null|[null,{"<id>":{...}},...],
 *    "outputs":[{"index":0,"text":"...","token_ids":[...],
 *    "finish_reason":"stop|length","stop_reason":...,"logprobs":null|[{"<id>":
 *    {"logprob":..,"rank":..,"decoded_token":".."},...},...]}]}
 * (vLLM's RequestOutput: the logprobs dicts in V1's order, sampled token
 * first.)
 * --stats prints one JSON object on stderr at the end (see print_stats).
 *
 * Structured outputs: --json-schema FILE, --json-object, --regex R, --choice
 * S (repeatable), --grammar FILE (GBNF), with --disable-any-whitespace and
 * --whitespace-pattern R, constrain every request (one kind at most); a
 * prompts-file line may carry its own, as the server reads them
 * (structured_outputs {json, regex, choice, grammar, json_object, ...},
 * response_format, guided_*), replacing the flags'. Constraints are
 * compiled before the requests enter the engine (its grammar cache, as the
 * server does; --structured-outputs-compile-timeout): one that does not
 * compile fails its request alone (finish_reason "error"), the message goes
 * to stderr, the others run, and the exit status is 1.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/cli.h"
#include "cli/engine_args.h"
#include "cli/lora_args.h"
#include "cli/model_alias.h"
#include "engine/engine.h"
#include "engine/output_processor.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"
#include "vllm/vllm.h"

#define MAX_STOPS 32

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc generate [--model DIR] [--prompt TEXT]... [--prompts-file FILE] [options]\n"
            "Input (all prompts enter the engine at once; none = start from BOS):\n"
            "  --prompt TEXT                   a text prompt (repeatable)\n"
            "  --prompts-file FILE             one JSON object per line: {\"prompt\": \"...\"} or\n"
            "                                  {\"prompt_token_ids\": [...]}, plus optional per-line\n"
            "                                  sampling fields (max_tokens, temperature, top_p, top_k,\n"
            "                                  min_p, seed, stop, stop_token_ids, ignore_eos, logprobs,\n"
            "                                  n, min_tokens, presence_penalty, frequency_penalty,\n"
            "                                  repetition_penalty, include_stop_str_in_output,\n"
            "                                  skip_special_tokens, logit_bias, priority, cache_salt,\n"
            "                                  structured_outputs, response_format, guided_*, and\n"
            "                                  lora: an adapter's name, null = the base model)\n"
            "  --lora NAME=PATH                a PEFT LoRA adapter (implies --enable-lora), the\n"
            "                                  prompts' adapter unless a line says \"lora\"\n"
            "Structured outputs (one kind; a prompts-file line's own replaces it):\n"
            "  --json-schema FILE              a JSON schema\n"
            "  --json-object                   any JSON object\n"
            "  --regex R                       a regular expression (the whole output)\n"
            "  --choice S                      one of the choices (repeatable)\n"
            "  --grammar FILE                  a GBNF grammar (start rule root)\n"
            "  --disable-any-whitespace --whitespace-pattern R   JSON whitespace\n"
            "Sampling (defaults: the model's generation_config.json, then vLLM's):\n"
            "  --max-tokens N --temperature T --top-p P --top-k K --min-p M --seed S\n"
            "  --n N --min-tokens N --presence-penalty X --frequency-penalty X\n"
            "  --repetition-penalty X --stop STR (repeatable) --include-stop-str-in-output\n"
            "  --ignore-eos --logprobs N\n"
            "Beam search (vLLM's LLM.beam_search; one prompt after another, text only):\n"
            "  --beam-width N  the N best beams by cumulative logprob / len ** length penalty\n"
            "  --length-penalty X  (1.0); --max-tokens, --ignore-eos, --temperature (0) apply\n"
            "Output:\n"
            "  --json       one JSON object per request on stdout, in input order\n"
            "  --stats      one JSON object of engine statistics on stderr at the end\n"
            "  --model DIR  default: %s\n",
            cli_default_model_dir());
    engine_args_usage(f);
}

/* ---- value parsing ------------------------------------------------------ */

static bool parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "vllmc generate: %s: '%s' is not an integer in [%lld, %lld]\n", flag, s,
                (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_i32(const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *out) {
    int64_t v;
    if (!parse_i64(flag, s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_f32(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "vllmc generate: %s: '%s' is not a finite number\n", flag, s);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') {
        /* vLLM seeds are Python ints; negative ones wrap like numpy's */
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || *end) goto bad;
        *out = (uint64_t)v;
        return true;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) goto bad;
    *out = v;
    return true;
bad:
    fprintf(stderr, "vllmc generate: %s: '%s' is not a 64-bit integer\n", flag, s);
    return false;
}

/* ---- per-request state -------------------------------------------------- */

typedef struct out_seq {
    char *text;                      /* NUL-terminated */
    size_t len, cap;
    int32_t *ids;
    size_t num_ids, cap_ids;
    json_t *logprobs;                /* array, or NULL */
    vllm_finish_reason finish_reason;
    json_t *stop_reason;
} out_seq;

typedef struct gen_request {
    int32_t *prompt;
    int32_t num_prompt;
    vllm_sampling_params sp;
    vllm_request_opts opts;
    char *cache_salt;
    char *lora;                      /* the adapter's name (owned), or NULL: the base model */
    char *so_text, *so_ws;           /* opts.structured_outputs' strings, owned */
    grammar_cache_entry *grammar;    /* its compiled constraint (a reference), or NULL */
    bool refused;                    /* its constraint did not compile: never added */
    char *stops[MAX_STOPS];
    int32_t num_stops;
    bool include_stop;
    bool keep_special;               /* skip_special_tokens false */
    out_seq *seqs;                   /* (sp.n) */
    json_t *prompt_logprobs;         /* vLLM's list once the first delta brought it (prompt_logprobs) */
} gen_request;

typedef struct gen_ctx {
    const tokenizer *tok;
    vllm_engine *engine;
    grammar_cache *grammars;         /* the engine's, once a request has a constraint */
    output_processor *op;
    gen_request *reqs;
    int32_t num_reqs;
    size_t cap_reqs;
    bool stream;                     /* one request, n = 1, plain text */
} gen_ctx;

static void request_deinit(gen_ctx *c, gen_request *r) {
    if (r->grammar) grammar_cache_entry_unref(c->grammars, r->grammar);
    if (r->seqs)
        for (int32_t k = 0; k < r->sp.n; k++) {
            out_seq *s = &r->seqs[k];
            free(s->text);
            free(s->ids);
            json_decref(s->logprobs);
            json_decref(s->stop_reason);
        }
    free(r->seqs);
    json_decref(r->prompt_logprobs);
    free(r->prompt);
    free(r->cache_salt);
    free(r->lora);
    free(r->so_text);
    free(r->so_ws);
    for (int32_t i = 0; i < r->num_stops; i++) free(r->stops[i]);
}

/* r's constraint = so (copied; kind NONE = none). */
static bool set_structured(gen_request *r, const vllm_structured_outputs *so) {
    free(r->so_text);
    free(r->so_ws);
    r->so_text = r->so_ws = NULL;
    r->opts.structured_outputs = *so;
    if (so->text && !(r->so_text = strndup(so->text, so->len ? so->len : strlen(so->text)))) return false;
    if (so->whitespace_pattern && !(r->so_ws = strdup(so->whitespace_pattern))) return false;
    r->opts.structured_outputs.text = r->so_text;
    r->opts.structured_outputs.len = r->so_text ? strlen(r->so_text) : 0;
    r->opts.structured_outputs.whitespace_pattern = r->so_ws;
    return true;
}

static gen_request *ctx_new_request(gen_ctx *c) {
    if (buf_grow((void **)&c->reqs, &c->cap_reqs, (size_t)c->num_reqs + 1, sizeof *c->reqs) != VLLM_OK) return NULL;
    gen_request *r = &c->reqs[c->num_reqs++];
    memset(r, 0, sizeof *r);
    return r;
}

static bool add_stop(gen_request *r, const char *s, const char *where) {
    if (r->num_stops == MAX_STOPS) {
        fprintf(stderr, "vllmc generate: %s: at most %d stop strings\n", where, MAX_STOPS);
        return false;
    }
    if (!(r->stops[r->num_stops] = strdup(s))) return false;
    r->num_stops++;
    return true;
}

/* ---- prompts file ------------------------------------------------------- */

static bool json_num(json_t *v, double *out) {
    if (!json_is_number(v)) return false;
    *out = json_number_value(v);
    return true;
}

#define LINE_ERR(...)                                                                      \
    do {                                                                                   \
        fprintf(stderr, "vllmc generate: %s:%ld: ", path, lineno);                         \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fputc('\n', stderr);                                                               \
        return false;                                                                      \
    } while (0)

/* Applies one prompts-file line (a JSON object) to r, which starts from the
 * flag defaults. */
static bool parse_line(gen_ctx *c, gen_request *r, json_t *o, const char *path, long lineno) {
    if (!json_is_object(o)) LINE_ERR("expected a JSON object");
    json_t *p = json_object_get(o, "prompt"), *pids = json_object_get(o, "prompt_token_ids");
    if ((p != NULL) == (pids != NULL)) LINE_ERR("give exactly one of \"prompt\" and \"prompt_token_ids\"");
    if (p) {
        if (!json_is_string(p)) LINE_ERR("\"prompt\" must be a string");
        if (tokenizer_encode(c->tok, json_string_value(p), json_string_length(p), true, &r->prompt,
                             &r->num_prompt) != VLLM_OK)
            LINE_ERR("prompt: %s", vllm_errmsg());
    } else {
        if (!json_is_array(pids)) LINE_ERR("\"prompt_token_ids\" must be an array of integers");
        size_t n = json_array_size(pids);
        r->prompt = malloc((n ? n : 1) * sizeof *r->prompt);
        if (!r->prompt) LINE_ERR("out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(pids, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                LINE_ERR("prompt_token_ids[%zu] must be a non-negative integer", i);
            r->prompt[i] = (int32_t)json_integer_value(v);
        }
        r->num_prompt = (int32_t)n;
    }
    openai_error oe = {0};
    vllm_structured_outputs so = {0};
    if (!openai_structured_from_json(o, false, &so, NULL, &oe)) LINE_ERR("%s", oe.message);
    bool ok = so.kind == VLLM_STRUCTURED_NONE || set_structured(r, &so);
    free((char *)so.text);
    free((char *)so.whitespace_pattern);
    if (!ok) LINE_ERR("out of memory");
    vllm_sampling_params *sp = &r->sp;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        double d;
        if (!strcmp(key, "structured_outputs") || !strcmp(key, "response_format") || !strncmp(key, "guided_", 7))
            continue;
        bool isint = json_is_integer(v);
        long long iv = isint ? json_integer_value(v) : 0;
        if (!strcmp(key, "prompt") || !strcmp(key, "prompt_token_ids")) continue;
        if (!strcmp(key, "max_tokens")) {
            if (json_is_null(v)) sp->max_tokens = -1;
            else if (!isint || iv < -1 || iv > INT32_MAX) LINE_ERR("\"max_tokens\" must be an integer");
            else sp->max_tokens = (int32_t)iv;
        } else if (!strcmp(key, "temperature") && json_num(v, &d)) sp->temperature = (float)d;
        else if (!strcmp(key, "top_p") && json_num(v, &d)) sp->top_p = (float)d;
        else if (!strcmp(key, "min_p") && json_num(v, &d)) sp->min_p = (float)d;
        else if (!strcmp(key, "presence_penalty") && json_num(v, &d)) sp->presence_penalty = (float)d;
        else if (!strcmp(key, "frequency_penalty") && json_num(v, &d)) sp->frequency_penalty = (float)d;
        else if (!strcmp(key, "repetition_penalty") && json_num(v, &d)) sp->repetition_penalty = (float)d;
        else if (!strcmp(key, "top_k") && isint && iv >= INT32_MIN && iv <= INT32_MAX) sp->top_k = (int32_t)iv;
        else if (!strcmp(key, "min_tokens") && isint && iv >= 0 && iv <= INT32_MAX) sp->min_tokens = (int32_t)iv;
        else if (!strcmp(key, "n") && isint && iv >= 1 && iv <= 1024) sp->n = (int32_t)iv;
        else if (!strcmp(key, "logprobs") && (json_is_null(v) || (isint && iv >= -1 && iv <= INT32_MAX)))
            sp->logprobs = json_is_null(v) ? -1 : (int32_t)iv;
        else if (!strcmp(key, "prompt_logprobs") && (json_is_null(v) || (isint && iv >= -1 && iv <= INT32_MAX)))
            sp->prompt_logprobs = json_is_null(v) ? -1 : (int32_t)iv;
        else if (!strcmp(key, "priority") && isint && iv >= INT32_MIN && iv <= INT32_MAX)
            r->opts.priority = (int32_t)iv;
        else if (!strcmp(key, "seed") && (isint || json_is_null(v))) {
            sp->has_seed = isint;
            sp->seed = (uint64_t)iv;
        } else if (!strcmp(key, "ignore_eos") && json_is_boolean(v)) sp->ignore_eos = json_is_true(v);
        else if (!strcmp(key, "include_stop_str_in_output") && json_is_boolean(v))
            r->include_stop = json_is_true(v);
        else if (!strcmp(key, "skip_special_tokens") && json_is_boolean(v))
            r->keep_special = !json_is_true(v);
        else if (!strcmp(key, "lora") && (json_is_string(v) || json_is_null(v))) {
            free(r->lora);
            r->lora = NULL;
            if (json_is_string(v) && json_string_length(v) && !(r->lora = strdup(json_string_value(v))))
                LINE_ERR("out of memory");
        } else if (!strcmp(key, "cache_salt") && json_is_string(v)) {
            free(r->cache_salt);
            if (!(r->cache_salt = strdup(json_string_value(v)))) LINE_ERR("out of memory");
        } else if (!strcmp(key, "stop")) {
            for (int32_t i = 0; i < r->num_stops; i++) free(r->stops[i]);
            r->num_stops = 0;
            if (json_is_string(v)) {
                if (!add_stop(r, json_string_value(v), "stop")) return false;
            } else if (json_is_array(v)) {
                size_t i;
                json_t *x;
                json_array_foreach(v, i, x) {
                    if (!json_is_string(x)) LINE_ERR("\"stop\"[%zu] must be a string", i);
                    if (!add_stop(r, json_string_value(x), "stop")) return false;
                }
            } else if (!json_is_null(v)) LINE_ERR("\"stop\" must be a string or a list of strings");
        } else if (!strcmp(key, "logit_bias") && json_is_object(v)) {
            if (json_object_size(v) > VLLM_MAX_LOGIT_BIAS) LINE_ERR("at most %d logit_bias entries", VLLM_MAX_LOGIT_BIAS);
            sp->num_logit_bias = 0;
            const char *tid;
            json_t *x;
            json_object_foreach(v, tid, x) {
                char *end;
                long id = strtol(tid, &end, 10);
                if (!*tid || *end || id < 0 || id > INT32_MAX || !json_is_number(x))
                    LINE_ERR("logit_bias: \"%s\" must be a token id with a number", tid);
                sp->logit_bias_ids[sp->num_logit_bias] = (int32_t)id;
                sp->logit_bias_values[sp->num_logit_bias++] = (float)json_number_value(x);
            }
        } else if (!strcmp(key, "stop_token_ids") && json_is_array(v)) {
            if (json_array_size(v) > VLLM_MAX_STOP_TOKEN_IDS)
                LINE_ERR("at most %d stop_token_ids", VLLM_MAX_STOP_TOKEN_IDS);
            sp->num_stop_token_ids = 0;
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) {
                if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
                    LINE_ERR("stop_token_ids[%zu] must be a non-negative integer", i);
                sp->stop_token_ids[sp->num_stop_token_ids++] = (int32_t)json_integer_value(x);
            }
        } else
            LINE_ERR("field \"%s\": unknown, or a value of the wrong type", key);
    }
    return true;
}

static bool read_prompts_file(gen_ctx *c, const char *path, const gen_request *defaults) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vllmc generate: %s: %s\n", path, strerror(errno));
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    bool ok = true;
    while (ok && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n' || line[i] == '\r')) i++;
        if (i == (size_t)n) continue; /* blank line */
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)n, 0, &err);
        if (!o) {
            fprintf(stderr, "vllmc generate: %s:%ld: %s\n", path, lineno, err.text);
            ok = false;
            break;
        }
        gen_request *r = ctx_new_request(c);
        if (!r) {
            json_decref(o);
            ok = false;
            break;
        }
        r->sp = defaults->sp;
        r->include_stop = defaults->include_stop;
        if (lora_args_default() && !(r->lora = strdup(lora_args_default()))) ok = false;
        ok = set_structured(r, &defaults->opts.structured_outputs);
        for (int32_t k = 0; k < defaults->num_stops && ok; k++) ok = add_stop(r, defaults->stops[k], path);
        ok = ok && parse_line(c, r, o, path, lineno);
        json_decref(o);
    }
    free(line);
    fclose(f);
    return ok;
}

/* ---- output handling ---------------------------------------------------- */

/* The request's output state, and its registration with the processor
 * (after the engine accepted it as request id). */
static bool start_request(gen_ctx *c, gen_request *r, const char *id) {
    int32_t n = r->sp.n;
    if (!(r->seqs = calloc((size_t)n, sizeof *r->seqs))) return false;
    for (int32_t k = 0; k < n; k++)
        if (r->sp.logprobs >= 0 && !(r->seqs[k].logprobs = json_array())) return false;
    output_request q = {
        .request_id = id,
        .prompt_ids = r->prompt,
        .num_prompt_ids = r->num_prompt,
        .sp = &r->sp,
        .stop = (const char *const *)r->stops,
        .num_stop = r->num_stops,
        .include_stop_str_in_output = r->include_stop,
        .skip_special_tokens = !r->keep_special,
        .detokenize = true,
        .ud = r,
    };
    return output_processor_add_request(c->op, &q) == VLLM_OK;
}

static bool text_append(out_seq *s, const char *p, size_t n) {
    if (buf_grow((void **)&s->text, &s->cap, s->len + n + 1, 1) != VLLM_OK) return false;
    memcpy(s->text + s->len, p, n);
    s->len += n;
    s->text[s->len] = 0;
    return true;
}

/* One position's logprobs as vLLM's dict {"<id>": {logprob, rank, decoded_token}}. */
static json_t *logprobs_json(const output_token_logprobs *lp) {
    json_t *d = json_object();
    for (int32_t k = 0; k < lp->num_entries; k++) {
        const output_logprob *e = &lp->entries[k];
        char key[16];
        snprintf(key, sizeof key, "%d", e->token_id);
        json_t *x = json_object(), *t = json_stringn(e->text ? e->text : "", e->text_len);
        json_object_set_new(x, "logprob", json_real(e->logprob));
        json_object_set_new(x, "rank", json_integer(e->rank));
        json_object_set_new(x, "decoded_token", t ? t : json_null());
        json_object_set_new(d, key, x);
    }
    return d;
}

/* One delta of one sequence. Returns false when out of memory. */
static bool handle_delta(gen_ctx *c, const output_delta *d) {
    gen_request *r = d->ud;
    out_seq *s = &r->seqs[d->index];
    if (!text_append(s, d->text, d->text_len)) return false;
    if (c->stream && d->text_len) {
        fwrite(d->text, 1, d->text_len, stdout);
        fflush(stdout);
    }
    if (buf_grow((void **)&s->ids, &s->cap_ids, s->num_ids + (size_t)d->num_tokens, sizeof *s->ids) != VLLM_OK)
        return false;
    if (d->num_tokens) /* a request that failed before any token has no ids yet */
        memcpy(s->ids + s->num_ids, d->token_ids, (size_t)d->num_tokens * sizeof *s->ids);
    s->num_ids += (size_t)d->num_tokens;
    if (s->logprobs && d->logprobs)
        for (int32_t t = 0; t < d->num_tokens; t++) json_array_append_new(s->logprobs, logprobs_json(&d->logprobs[t]));
    if (d->has_prompt_logprobs && !r->prompt_logprobs && (r->prompt_logprobs = json_array())) {
        json_array_append_new(r->prompt_logprobs, json_null()); /* position 0 has none */
        for (int32_t t = 0; t < d->num_prompt_logprobs; t++)
            json_array_append_new(r->prompt_logprobs, logprobs_json(&d->prompt_logprobs[t]));
    }
    if (d->finish_reason != VLLM_FINISH_NONE) {
        s->finish_reason = d->finish_reason;
        s->stop_reason = d->stop_str ? json_string(d->stop_str)
                         : d->stop_token_id >= 0 ? json_integer(d->stop_token_id) : json_null();
    }
    return true;
}

static bool print_json(const gen_request *r) {
    json_t *o = json_object(), *p = json_array(), *outs = json_array();
    for (int32_t i = 0; i < r->num_prompt; i++) json_array_append_new(p, json_integer(r->prompt[i]));
    json_object_set_new(o, "prompt_token_ids", p);
    json_object_set(o, "prompt_logprobs", r->prompt_logprobs ? r->prompt_logprobs : json_null());
    for (int32_t k = 0; k < r->sp.n; k++) {
        const out_seq *s = &r->seqs[k];
        json_t *x = json_object(), *ids = json_array();
        json_object_set_new(x, "index", json_integer(k));
        json_t *t = json_stringn(s->text ? s->text : "", s->len);
        json_object_set_new(x, "text", t ? t : json_stringn_nocheck(s->text, s->len));
        for (size_t i = 0; i < s->num_ids; i++) json_array_append_new(ids, json_integer(s->ids[i]));
        json_object_set_new(x, "token_ids", ids);
        const char *fr = vllm_finish_reason_str(s->finish_reason);
        json_object_set_new(x, "finish_reason", fr ? json_string(fr) : json_null());
        json_object_set(x, "stop_reason", s->stop_reason ? s->stop_reason : json_null());
        json_object_set(x, "logprobs", s->logprobs ? s->logprobs : json_null());
        json_array_append_new(outs, x);
    }
    json_object_set_new(o, "outputs", outs);
    char *str = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!str) return false;
    puts(str);
    free(str);
    return true;
}

/* ---- beam search ------------------------------------------------------------ */

/* Each request's beams, one request after another (vllm_engine_beam_search
 * steps the engine itself). Stop strings, n and logprobs do not apply. */
static bool run_beam_search(gen_ctx *c, vllm_beam_search_params *bp, float temperature, bool json) {
    vllm_engine_info info;
    vllm_engine_get_info(c->engine, &info);
    for (int32_t i = 0; i < c->num_reqs; i++) {
        gen_request *r = &c->reqs[i];
        if (r->num_stops || r->sp.n > 1 || r->sp.logprobs >= 0) {
            fprintf(stderr, "vllmc generate: request %d: --beam-width does not take stop strings, n > 1 or "
                    "logprobs\n", i);
            return false;
        }
        bp->max_tokens = r->sp.max_tokens >= 0 ? r->sp.max_tokens : info.max_model_len - r->num_prompt;
        bp->ignore_eos = r->sp.ignore_eos;
        bp->temperature = temperature;
        char id[32];
        snprintf(id, sizeof id, "beam-%d", i);
        vllm_beam *beams;
        int32_t nb;
        if (vllm_engine_beam_search(c->engine, id, r->prompt, r->num_prompt, bp, &beams, &nb) != VLLM_OK) {
            fprintf(stderr, "vllmc generate: request %d: %s\n", i, vllm_errmsg());
            return false;
        }
        json_t *o = json_object(), *p = json_array(), *outs = json_array();
        for (int32_t k = 0; k < r->num_prompt; k++) json_array_append_new(p, json_integer(r->prompt[k]));
        json_object_set_new(o, "prompt_token_ids", p);
        bool ok = true;
        for (int32_t k = 0; k < nb && ok; k++) {
            char *text = NULL;
            size_t len = 0;
            if (tokenizer_decode(c->tok, beams[k].token_ids, beams[k].num_tokens, true, &text, &len) != VLLM_OK) {
                fprintf(stderr, "vllmc generate: request %d: %s\n", i, vllm_errmsg());
                ok = false;
                break;
            }
            if (!json) printf("--- request %d, beam %d (%s, cumulative logprob %.6f, score %.6f)\n%s\n", i, k,
                              vllm_finish_reason_str(beams[k].finish_reason), beams[k].cumulative_logprob,
                              beams[k].score, text);
            json_t *x = json_object(), *ids = json_array();
            json_object_set_new(x, "index", json_integer(k));
            json_t *tj = json_stringn(text, len);
            json_object_set_new(x, "text", tj ? tj : json_string(""));
            for (int32_t t = 0; t < beams[k].num_tokens; t++) json_array_append_new(ids, json_integer(beams[k].token_ids[t]));
            json_object_set_new(x, "token_ids", ids);
            json_object_set_new(x, "cumulative_logprob", json_real(beams[k].cumulative_logprob));
            json_object_set_new(x, "score", json_real(beams[k].score));
            json_object_set_new(x, "finish_reason", json_string(vllm_finish_reason_str(beams[k].finish_reason)));
            json_array_append_new(outs, x);
            free(text);
        }
        vllm_beams_free(beams, nb);
        json_object_set_new(o, "outputs", outs);
        if (ok && json) {
            char *str = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (str) puts(str);
            ok = str != NULL;
            free(str);
        }
        json_decref(o);
        if (!ok) return false;
    }
    return fflush(stdout) == 0;
}

/* ---- the command -------------------------------------------------------- */

typedef struct gen_stats {
    int64_t steps, preemptions, queries, hits;
    int64_t spec_drafts, spec_draft_tokens, spec_accepted; /* speculative decoding */
    bool spec;
    int32_t max_tokens, max_seqs, blocks_total, blocks_free;
} gen_stats;

static void print_stats(const gen_stats *st) {
    fprintf(stderr,
            "{\"num_steps\":%lld,\"num_preemptions\":%lld,\"prefix_cache_queries\":%lld,"
            "\"prefix_cache_hits\":%lld,\"max_tokens_in_step\":%d,\"max_seqs_in_step\":%d,"
            "\"num_blocks_total\":%d,\"num_blocks_free_at_end\":%d",
            (long long)st->steps, (long long)st->preemptions, (long long)st->queries,
            (long long)st->hits, st->max_tokens, st->max_seqs, st->blocks_total, st->blocks_free);
    if (st->spec) /* vLLM's mean acceptance length: 1 + accepted / drafts */
        fprintf(stderr, ",\"spec_decode_num_drafts\":%lld,\"spec_decode_num_draft_tokens\":%lld,"
                "\"spec_decode_num_accepted_tokens\":%lld,\"mean_acceptance_length\":%.4f",
                (long long)st->spec_drafts, (long long)st->spec_draft_tokens, (long long)st->spec_accepted,
                st->spec_drafts ? 1.0 + (double)st->spec_accepted / (double)st->spec_drafts : 0.0);
    fputs("}\n", stderr);
}

#define FLAG(name) (!strcmp(arg, name))

/* A whole file, NUL-terminated (malloc'ed), or NULL with the reason on stderr. */
static char *slurp(const char *flag, const char *path) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    if (!f) {
        fprintf(stderr, "vllmc generate: %s %s: %s\n", flag, path, strerror(errno));
        return NULL;
    }
    do {
        if (buf_grow((void **)&buf, &cap, len + 65536 + 1, 1) != VLLM_OK) {
            free(buf);
            fclose(f);
            fprintf(stderr, "vllmc generate: %s %s: out of memory\n", flag, path);
            return NULL;
        }
        n = fread(buf + len, 1, 65536, f);
        len += n;
    } while (n > 0);
    bool err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "vllmc generate: %s %s: read error\n", flag, path);
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

/* The flags' constraint (at most one kind) into flags->opts.structured_outputs. */
static bool flags_structured(gen_request *flags, const char *schema_file, const char *regex, json_t *choices,
                             const char *grammar_file, bool json_object, bool daw, const char *ws) {
    int kinds = (schema_file != NULL) + (regex != NULL) + (json_array_size(choices) > 0) + (grammar_file != NULL) +
                json_object;
    if (kinds > 1) {
        fprintf(stderr, "vllmc generate: give one of --json-schema, --json-object, --regex, --choice and --grammar\n");
        return false;
    }
    if (!kinds) {
        if (daw || ws) fprintf(stderr, "vllmc generate: --disable-any-whitespace / --whitespace-pattern need a JSON constraint\n");
        return !(daw || ws);
    }
    vllm_structured_outputs so = {.disable_any_whitespace = daw, .whitespace_pattern = ws};
    char *owned = NULL;
    if (schema_file) {
        so.kind = VLLM_STRUCTURED_JSON;
        so.text = owned = slurp("--json-schema", schema_file);
    } else if (grammar_file) {
        so.kind = VLLM_STRUCTURED_GRAMMAR;
        so.text = owned = slurp("--grammar", grammar_file);
    } else if (regex) {
        so.kind = VLLM_STRUCTURED_REGEX;
        so.text = regex;
    } else if (json_object) {
        so.kind = VLLM_STRUCTURED_JSON_OBJECT;
    } else {
        so.kind = VLLM_STRUCTURED_CHOICE;
        so.text = owned = json_dumps(choices, JSON_COMPACT);
    }
    if (so.kind != VLLM_STRUCTURED_JSON_OBJECT && !so.text) return false;
    bool ok = set_structured(flags, &so);
    free(owned);
    return ok;
}

int cmd_generate(int argc, char **argv) {
    vllm_engine_args args;
    vllm_engine_args_init(&args);
    args.model = cli_default_model_dir();
    const char *prompts_file = NULL;
    const char **prompts = calloc((size_t)argc, sizeof *prompts);
    int32_t num_prompts = 0;
    bool json = false, stats = false, json_object = false, daw = false;
    const char *schema_file = NULL, *regex = NULL, *grammar_file = NULL, *ws = NULL;
    json_t *choices = json_array();
    gen_ctx c = {0};
    gen_request flags = {0}; /* flag-level sampling settings and stops */
    tokenizer *tok = NULL;
    int status = 2;
    /* sampling flags are applied over the engine's defaults once it exists */
    struct {
        bool max_tokens, temperature, top_p, top_k, min_p, seed, n, min_tokens, presence, frequency,
            repetition, logprobs, ignore_eos;
    } set = {0};
    vllm_sampling_params sf;
    vllm_sampling_params_init(&sf);
    vllm_beam_search_params beam;
    vllm_beam_search_params_init(&beam);
    beam.beam_width = 0; /* 0: no beam search */
    if (!prompts) goto done;

    for (int i = 1; i < argc;) {
        /* --seed is generate's sampling seed and also seeds the engine, so it is
         * taken here before the shared engine flags; the rest go to engine_args. */
        char name[64];
        const char *val = engine_args_flag_name(argv[i], name, sizeof name);
        const char *arg = name;
        if (FLAG("-h") || FLAG("--help")) {
            generate_usage(stdout);
            status = 0;
            goto done;
        }
        bool no_value = FLAG("--json") || FLAG("--stats") || FLAG("--ignore-eos") ||
                        FLAG("--include-stop-str-in-output") || FLAG("--json-object") ||
                        FLAG("--disable-any-whitespace");
        bool own = no_value || FLAG("--prompt") || FLAG("--prompts-file") || FLAG("--max-tokens") ||
                   FLAG("--temperature") || FLAG("--top-p") || FLAG("--top-k") || FLAG("--min-p") ||
                   FLAG("--presence-penalty") || FLAG("--frequency-penalty") ||
                   FLAG("--repetition-penalty") || FLAG("--min-tokens") || FLAG("--n") ||
                   FLAG("--logprobs") || FLAG("--seed") || FLAG("--stop") || FLAG("--beam-width") ||
                   FLAG("--length-penalty") || FLAG("--json-schema") || FLAG("--regex") || FLAG("--choice") ||
                   FLAG("--grammar") || FLAG("--whitespace-pattern");
        if (!own) {
            int r = engine_args_parse(&args, argc, argv, &i);
            if (r < 0) goto done;
            if (r > 0) continue;
            fprintf(stderr, "vllmc generate: unknown option '%s'\n", argv[i]);
            generate_usage(stderr);
            goto done;
        }
        if (no_value && val) {
            fprintf(stderr, "vllmc generate: %s takes no value\n", arg);
            goto done;
        }
        if (!no_value && !val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vllmc generate: %s needs a value\n", arg);
                goto done;
            }
            val = argv[++i];
        }
        i++;
        bool ok = true;
        if (FLAG("--prompt")) prompts[num_prompts++] = val;
        else if (FLAG("--prompts-file")) prompts_file = val;
        else if (FLAG("--json")) json = true;
        else if (FLAG("--stats")) stats = true;
        else if (FLAG("--max-tokens")) ok = set.max_tokens = parse_i32(arg, val, -1, INT32_MAX, &sf.max_tokens);
        else if (FLAG("--temperature")) ok = set.temperature = parse_f32(arg, val, &sf.temperature);
        else if (FLAG("--top-p")) ok = set.top_p = parse_f32(arg, val, &sf.top_p);
        else if (FLAG("--top-k")) ok = set.top_k = parse_i32(arg, val, -1, INT32_MAX, &sf.top_k);
        else if (FLAG("--min-p")) ok = set.min_p = parse_f32(arg, val, &sf.min_p);
        else if (FLAG("--presence-penalty")) ok = set.presence = parse_f32(arg, val, &sf.presence_penalty);
        else if (FLAG("--frequency-penalty")) ok = set.frequency = parse_f32(arg, val, &sf.frequency_penalty);
        else if (FLAG("--repetition-penalty")) ok = set.repetition = parse_f32(arg, val, &sf.repetition_penalty);
        else if (FLAG("--min-tokens")) ok = set.min_tokens = parse_i32(arg, val, 0, INT32_MAX, &sf.min_tokens);
        else if (FLAG("--n")) ok = set.n = parse_i32(arg, val, 1, 1024, &sf.n);
        else if (FLAG("--logprobs")) ok = set.logprobs = parse_i32(arg, val, -1, INT32_MAX, &sf.logprobs);
        else if (FLAG("--beam-width")) ok = parse_i32(arg, val, 1, VLLM_MAX_LOGPROBS / 2, &beam.beam_width);
        else if (FLAG("--length-penalty")) ok = parse_f32(arg, val, &beam.length_penalty);
        else if (FLAG("--seed")) {
            ok = set.seed = parse_u64(arg, val, &sf.seed);
            sf.has_seed = true;
            args.seed = sf.seed;
        } else if (FLAG("--ignore-eos")) set.ignore_eos = sf.ignore_eos = true;
        else if (FLAG("--stop")) ok = add_stop(&flags, val, "--stop");
        else if (FLAG("--include-stop-str-in-output")) flags.include_stop = true;
        else if (FLAG("--json-schema")) schema_file = val;
        else if (FLAG("--json-object")) json_object = true;
        else if (FLAG("--regex")) regex = val;
        else if (FLAG("--choice")) ok = json_array_append_new(choices, json_string(val)) == 0;
        else if (FLAG("--grammar")) grammar_file = val;
        else if (FLAG("--disable-any-whitespace")) daw = true;
        else if (FLAG("--whitespace-pattern")) ws = val;
        if (!ok) goto done;
    }
    if (prompts_file && num_prompts) {
        fprintf(stderr, "vllmc generate: give --prompt or --prompts-file, not both\n");
        goto done;
    }
    if (!choices || !flags_structured(&flags, schema_file, regex, choices, grammar_file, json_object, daw, ws))
        goto done;

    status = 1;
    if (model_alias_resolve(&args.model, NULL) != VLLM_OK || model_alias_resolve(&args.tokenizer, NULL) != VLLM_OK ||
        tokenizer_load(args.tokenizer ? args.tokenizer : args.model, &tok) != VLLM_OK) {
        fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
        goto done;
    }
    if (vllm_engine_create(&args, &c.engine) != VLLM_OK || lora_args_load(c.engine, &args) != VLLM_OK) {
        fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
        goto done;
    }
    c.tok = tok;
    if (output_processor_create(tok, &c.op) != VLLM_OK) {
        fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
        goto done;
    }
    vllm_engine_default_sampling_params(c.engine, &flags.sp);
    vllm_sampling_params *d = &flags.sp;
    if (set.max_tokens) d->max_tokens = sf.max_tokens;
    if (set.temperature) d->temperature = sf.temperature;
    if (set.top_p) d->top_p = sf.top_p;
    if (set.top_k) d->top_k = sf.top_k;
    if (set.min_p) d->min_p = sf.min_p;
    if (set.presence) d->presence_penalty = sf.presence_penalty;
    if (set.frequency) d->frequency_penalty = sf.frequency_penalty;
    if (set.repetition) d->repetition_penalty = sf.repetition_penalty;
    if (set.min_tokens) d->min_tokens = sf.min_tokens;
    if (set.n) d->n = sf.n;
    if (set.logprobs) d->logprobs = sf.logprobs;
    if (set.seed) {
        d->has_seed = true;
        d->seed = sf.seed;
    }
    if (set.ignore_eos) d->ignore_eos = true;

    if (prompts_file) {
        if (!read_prompts_file(&c, prompts_file, &flags)) goto done;
    } else {
        int32_t count = num_prompts ? num_prompts : 1;
        for (int32_t i = 0; i < count; i++) {
            gen_request *r = ctx_new_request(&c);
            if (!r) goto done;
            r->sp = flags.sp;
            r->include_stop = flags.include_stop;
            if (lora_args_default() && !(r->lora = strdup(lora_args_default()))) goto done;
            if (!set_structured(r, &flags.opts.structured_outputs)) goto done;
            for (int32_t k = 0; k < flags.num_stops; k++)
                if (!add_stop(r, flags.stops[k], "--stop")) goto done;
            if (num_prompts) {
                if (tokenizer_encode(tok, prompts[i], strlen(prompts[i]), true, &r->prompt, &r->num_prompt) !=
                    VLLM_OK) {
                    fprintf(stderr, "vllmc generate: --prompt: %s\n", vllm_errmsg());
                    goto done;
                }
            } else { /* start from BOS */
                vllm_engine_info info;
                vllm_engine_get_info(c.engine, &info);
                if (info.bos_token_id < 0 || !(r->prompt = malloc(sizeof *r->prompt))) {
                    fprintf(stderr, "vllmc generate: no prompt given and the model has no BOS token\n");
                    goto done;
                }
                r->prompt[0] = info.bos_token_id;
                r->num_prompt = 1;
            }
        }
    }
    if (beam.beam_width > 0) {
        status = run_beam_search(&c, &beam, set.temperature ? sf.temperature : 0.0f, json) ? 0 : 1;
        goto done;
    }
    c.stream = !json && c.num_reqs == 1 && c.reqs[0].sp.n == 1;

    /* constraints compile first, all at once on the cache's thread; a
     * request whose constraint does not compile is refused alone */
    bool failed = false;
    for (int32_t i = 0; i < c.num_reqs; i++) {
        gen_request *r = &c.reqs[i];
        st_spec spec;
        if (r->opts.structured_outputs.kind == VLLM_STRUCTURED_NONE) continue;
        if (!c.grammars && !(c.grammars = engine_grammar_cache(c.engine))) {
            fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
            goto done;
        }
        if (grammar_cache_spec(&r->opts.structured_outputs, &spec) != VLLM_OK) {
            fprintf(stderr, "vllmc generate: request %d: %s\n", i, vllm_errmsg());
            r->refused = failed = true;
        } else if (grammar_cache_get(c.grammars, &spec, &r->grammar) != VLLM_OK) {
            fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
            goto done;
        }
    }
    double deadline = vllm_monotonic_time() + engine_compile_timeout(c.engine);
    for (int32_t i = 0; i < c.num_reqs; i++) {
        gen_request *r = &c.reqs[i];
        if (!r->grammar) continue;
        grammar_state st = grammar_cache_entry_wait(c.grammars, r->grammar, deadline);
        if (st == GRAMMAR_FAILED)
            fprintf(stderr, "vllmc generate: request %d: %s\n", i, grammar_cache_entry_error(r->grammar));
        else if (st == GRAMMAR_PENDING)
            fprintf(stderr, "vllmc generate: request %d: the grammar did not compile within %g s "
                            "(--structured-outputs-compile-timeout)\n", i, engine_compile_timeout(c.engine));
        if (st != GRAMMAR_READY) r->refused = failed = true;
    }

    /* everything enters the engine at once */
    char id[24];
    for (int32_t i = 0; i < c.num_reqs; i++) {
        gen_request *r = &c.reqs[i];
        r->opts.cache_salt = r->cache_salt;
        r->opts.lora_name = r->lora;
        snprintf(id, sizeof id, "%d", i);
        if (r->sp.n < 1) r->sp.n = 1;
        if (r->refused) { /* reported above; its outputs say "error" */
            if (!(r->seqs = calloc((size_t)r->sp.n, sizeof *r->seqs))) goto done;
            for (int32_t k = 0; k < r->sp.n; k++) r->seqs[k].finish_reason = VLLM_FINISH_ERROR;
            continue;
        }
        if (vllm_engine_add_request(c.engine, id, r->prompt, r->num_prompt, &r->sp, &r->opts) != VLLM_OK) {
            fprintf(stderr, "vllmc generate: request %d: %s\n", i, vllm_errmsg());
            goto done;
        }
        if (!start_request(&c, r, id)) {
            fprintf(stderr, "vllmc generate: request %d: %s\n", i, vllm_errmsg());
            goto done;
        }
    }
    gen_stats st = {0};
    while (vllm_engine_has_unfinished(c.engine)) {
        const vllm_step_output *so;
        if (vllm_engine_step(c.engine, &so) != VLLM_OK) {
            fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
            goto done;
        }
        const vllm_scheduler_stats *s = &so->stats;
        if (s->num_scheduled_tokens > 0) st.steps++;
        st.preemptions += s->num_preemptions;
        st.queries += s->prefix_cache_queries;
        st.hits += s->prefix_cache_hits;
        st.spec |= s->num_spec_tokens > 0;
        st.spec_drafts += s->spec_num_drafts;
        st.spec_draft_tokens += s->spec_num_draft_tokens;
        st.spec_accepted += s->spec_num_accepted_tokens;
        if (s->num_scheduled_tokens > st.max_tokens) st.max_tokens = s->num_scheduled_tokens;
        if (s->num_scheduled_seqs > st.max_seqs) st.max_seqs = s->num_scheduled_seqs;
        st.blocks_total = s->num_blocks_total;
        st.blocks_free = s->num_blocks_free;
        for (int32_t j = 0; j < so->num_outputs; j++)
            if (so->outputs[j].error && so->outputs[j].index == 0) { /* a request that could not run */
                fprintf(stderr, "vllmc generate: request %s: %s\n", so->outputs[j].request_id, so->outputs[j].error);
                failed = true;
            }
        const output_result *res;
        if (output_processor_process(c.op, so, &res) != VLLM_OK) {
            fprintf(stderr, "vllmc generate: %s\n", vllm_errmsg());
            goto done;
        }
        for (int32_t j = 0; j < res->num_stops; j++)
            vllm_engine_stop_sequence(c.engine, res->stops[j].request_id, res->stops[j].index);
        for (int32_t j = 0; j < res->num_deltas; j++) {
            if (!handle_delta(&c, &res->deltas[j])) {
                fprintf(stderr, "vllmc generate: out of memory\n");
                goto done;
            }
        }
    }
    for (int32_t i = 0; i < c.num_reqs; i++) {
        const gen_request *r = &c.reqs[i];
        if (json) {
            if (!print_json(r)) goto done;
        } else if (c.stream) {
            putchar('\n');
        } else {
            for (int32_t k = 0; k < r->sp.n; k++) {
                const char *fr = vllm_finish_reason_str(r->seqs[k].finish_reason);
                printf("--- request %d, output %d (%s)\n%s\n", i, k, fr ? fr : "running",
                       r->seqs[k].text ? r->seqs[k].text : "");
            }
        }
    }
    if (stats) print_stats(&st);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "vllmc generate: write error on stdout\n");
        goto done;
    }
    status = failed ? 1 : 0;
done:
    for (int32_t i = 0; i < c.num_reqs; i++) request_deinit(&c, &c.reqs[i]);
    free(c.reqs);
    for (int32_t i = 0; i < flags.num_stops; i++) free(flags.stops[i]);
    free(flags.so_text);
    free(flags.so_ws);
    json_decref(choices);
    output_processor_free(c.op);
    vllm_engine_free(c.engine);
    tokenizer_free(tok);
    free(prompts);
    return status;
}
