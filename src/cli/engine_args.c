/* engine_args.c - see engine_args.h. */
#include "cli/engine_args.h"
#include "cli/lora_args.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kv_dtype.h"

const char *engine_args_flag_name(const char *arg, char *name, size_t cap) {
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n >= cap) n = cap - 1;
    for (size_t k = 0; k < n; k++) name[k] = k >= 2 && arg[k] == '_' ? '-' : arg[k];
    name[n] = 0;
    return eq ? eq + 1 : NULL;
}

bool engine_args_parse_size(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0 || !isfinite(v)) return false;
    double mult = 1;
    if (*end) {
        static const char dec[] = "kmgt", bin[] = "KMGT";
        const char *p;
        if (end[1]) return false;
        if ((p = strchr(dec, *end)) && *p) mult = pow(1000.0, (double)(p - dec + 1));
        else if ((p = strchr(bin, *end)) && *p) {
            if (v != floor(v)) return false; /* vLLM: no fractions with binary suffixes */
            mult = pow(1024.0, (double)(p - bin + 1));
        } else {
            return false;
        }
    } else if (v != floor(v)) {
        return false;
    }
    double r = v * mult;
    if (r > 9.2e18) return false;
    *out = (int64_t)r;
    return true;
}

static int bad(const char *flag, const char *value, const char *why) {
    fprintf(stderr, "vllmc: argument %s: invalid value '%s'%s%s\n", flag, value ? value : "",
            why ? ": " : "", why ? why : "");
    return -1;
}

static bool parse_i32(const char *s, int32_t *out, bool sized) {
    int64_t v;
    if (sized) {
        if (!engine_args_parse_size(s, &v)) return false;
    } else {
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno || end == s || *end) return false;
        v = x;
    }
    if (v < INT32_MIN || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

/* A JSON integer key of --speculative-config in lo..hi (absent or null
 * leaves *out). */
static bool spec_int(json_t *o, const char *key, int32_t lo, int32_t hi, int32_t *out, const char *flag) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        fprintf(stderr, "vllmc: argument %s: %s=%s: expected an integer in %d..%d\n", flag, key, txt ? txt : "?",
                lo, hi);
        free(txt);
        return false;
    }
    *out = (int32_t)json_integer_value(v);
    return true;
}

int engine_args_parse_speculative_config(vllm_speculative_config *c, const char *json, const char *flag) {
    static const char *const methods_elsewhere[] = {
        "eagle", "eagle3", "medusa", "mlp_speculator", "deepseek_mtp", "ernie_mtp",
        "qwen3_next_mtp", "mimo_mtp", "longcat_flash_mtp", "mtp", NULL};
    /* SpeculativeConfig's other keys: accepted, and meaningless here */
    static const char *const ignored[] = {
        "model", "draft_tensor_parallel_size", "quantization", "max_model_len", "revision", "code_revision",
        "enforce_eager", "disable_logprobs", "disable_padded_drafter_batch", "speculative_token_tree", NULL};
    json_error_t err;
    json_t *o = json_loads(json, 0, &err);
    if (!o || !json_is_object(o)) {
        fprintf(stderr, "vllmc: argument %s: expected a JSON object%s%s\n", flag, o ? "" : ": ",
                o ? "" : err.text);
        json_decref(o);
        return -1;
    }
    vllm_speculative_config r = {0};
    int rc = -1;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        static const char *const ours[] = {"method", "num_speculative_tokens", "prompt_lookup_min",
                                           "prompt_lookup_max", "disable_by_batch_size",
                                           "draft_token_acceptance_method", "adaptive", NULL};
        bool known = false;
        for (const char *const *k = ours; *k && !known; k++) known = !strcmp(key, *k);
        for (const char *const *k = ignored; *k && !known; k++) known = !strcmp(key, *k);
        if (!known) {
            fprintf(stderr, "vllmc: argument %s: unknown key '%s' (accepted: method, model, num_speculative_tokens, "
                    "prompt_lookup_min, prompt_lookup_max, disable_by_batch_size, draft_token_acceptance_method, adaptive)\n", flag, key);
            goto done;
        }
    }
    json_t *m = json_object_get(o, "method"), *model = json_object_get(o, "model");
    const char *method = json_is_string(m) ? json_string_value(m) : NULL;
    if (m && !json_is_null(m) && !method) {
        fprintf(stderr, "vllmc: argument %s: method must be a string (accepted: 'ngram', 'draft_model')\n", flag);
        goto done;
    }
    if (!method && json_is_string(model)) /* vLLM: {"model": "ngram"} means the method */
        method = !strcmp(json_string_value(model), "ngram") || !strcmp(json_string_value(model), "[ngram]")
                     ? "ngram" : "draft_model";
    if (!method) {
        fprintf(stderr, "vllmc: argument %s: method is required (accepted: 'ngram', 'draft_model')\n", flag);
        goto done;
    }
    bool draft = !strcmp(method, "draft_model");
    if (strcmp(method, "ngram") && strcmp(method, "[ngram]") && !draft) {
        bool vllm_has = false;
        for (const char *const *k = methods_elsewhere; *k; k++) vllm_has |= !strcmp(method, *k);
        fprintf(stderr, "vllmc: argument %s: method '%s' %s (accepted: 'ngram', 'draft_model')\n", flag, method,
                vllm_has ? "is not supported by vllm.c yet" : "is unknown");
        goto done;
    }
    r.method = draft ? VLLM_SPEC_METHOD_DRAFT_MODEL : VLLM_SPEC_METHOD_NGRAM;
    if (draft) {
        if (!json_is_string(model) || !json_string_value(model)[0] ||
            json_string_length(model) >= sizeof r.model) {
            fprintf(stderr, "vllmc: argument %s: method 'draft_model' needs \"model\": the draft model's path "
                    "(at most %zu bytes)\n", flag, sizeof r.model - 1);
            goto done;
        }
        memcpy(r.model, json_string_value(model), json_string_length(model) + 1);
        json_t *acc = json_object_get(o, "draft_token_acceptance_method");
        const char *am = json_is_string(acc) ? json_string_value(acc) : NULL;
        if (acc && !json_is_null(acc) && (!am || (strcmp(am, "rejection_sampler") && strcmp(am, "exact")))) {
            fprintf(stderr, "vllmc: argument %s: draft_token_acceptance_method must be 'rejection_sampler' "
                    "(vLLM's) or 'exact'\n", flag);
            goto done;
        }
        r.exact_acceptance = am && !strcmp(am, "exact");
        if (json_object_get(o, "prompt_lookup_min") || json_object_get(o, "prompt_lookup_max")) {
            fprintf(stderr, "vllmc: argument %s: prompt_lookup_min/max belong to method 'ngram'\n", flag);
            goto done;
        }
    }
    if (!json_object_get(o, "num_speculative_tokens") || json_is_null(json_object_get(o, "num_speculative_tokens"))) {
        fprintf(stderr, "vllmc: argument %s: num_speculative_tokens is required for method '%s' (1..%d)\n",
                flag, draft ? "draft_model" : "ngram", VLLM_MAX_SPEC_TOKENS);
        goto done;
    }
    if (!spec_int(o, "num_speculative_tokens", 1, VLLM_MAX_SPEC_TOKENS, &r.num_speculative_tokens, flag) ||
        !spec_int(o, "prompt_lookup_min", 1, INT32_MAX, &r.prompt_lookup_min, flag) ||
        !spec_int(o, "prompt_lookup_max", 1, INT32_MAX, &r.prompt_lookup_max, flag) ||
        !spec_int(o, "disable_by_batch_size", 2, INT32_MAX, &r.disable_by_batch_size, flag))
        goto done;
    json_t *ad = json_object_get(o, "adaptive");
    if (ad && !json_is_null(ad) && !json_is_boolean(ad)) {
        fprintf(stderr, "vllmc: argument %s: adaptive must be true or false\n", flag);
        goto done;
    }
    r.adaptive = !json_is_false(ad);
    if (r.prompt_lookup_min && r.prompt_lookup_max && r.prompt_lookup_min > r.prompt_lookup_max) {
        fprintf(stderr, "vllmc: argument %s: prompt_lookup_min=%d must be <= prompt_lookup_max=%d\n", flag,
                r.prompt_lookup_min, r.prompt_lookup_max);
        goto done;
    }
    *c = r;
    rc = 0;
done:
    json_decref(o);
    return rc;
}

int engine_args_parse(vllm_engine_args *a, int argc, char **argv, int *i) {
    int lora = lora_args_parse(a, argc, argv, i); /* cli/lora_args.c */
    if (lora) return lora;
    char name[64];
    const char *inline_val = engine_args_flag_name(argv[*i], name, sizeof name);
    /* flags without a value */
    if (!strcmp(name, "--enable-prefix-caching") || !strcmp(name, "--no-enable-prefix-caching")) {
        if (inline_val) return bad(name, inline_val, "takes no value");
        a->enable_prefix_caching = name[2] != 'n';
        (*i)++;
        return 1;
    }
    static const char *const with_value[] = {
        "--model", "--tokenizer", "--max-model-len", "--block-size", "--kv-cache-memory-bytes",
        "--num-gpu-blocks-override", "--max-num-seqs", "--max-num-batched-tokens",
        "--long-prefill-token-threshold", "--scheduling-policy", "--seed", "--generation-config",
        "--kv-cache-dtype", "--threads", "--speculative-config", "--structured-outputs-compile-timeout",
        "--kv-transfer-config", "--kv-offloading-size", "--dtype", NULL};
    if (!strcmp(name, "-tp")) strcpy(name, "--tensor-parallel-size"); /* vLLM's short forms */
    if (!strcmp(name, "-pp")) strcpy(name, "--pipeline-parallel-size");
    bool known = !strcmp(name, "--tensor-parallel-size") || !strcmp(name, "--pipeline-parallel-size");
    for (const char *const *f = with_value; *f; f++) known |= !strcmp(name, *f);
    if (!known) return 0;
    const char *v = inline_val;
    int used = 1;
    if (!v) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "vllmc: argument %s: expected one argument\n", name);
            return -1;
        }
        v = argv[*i + 1];
        used = 2;
    }
    int64_t big;
    if (!strcmp(name, "--model")) a->model = v;
    else if (!strcmp(name, "--tokenizer")) a->tokenizer = v;
    else if (!strcmp(name, "--generation-config")) a->generation_config = v;
    else if (!strcmp(name, "--speculative-config")) {
        if (engine_args_parse_speculative_config(&a->speculative_config, v, name) != 0) return -1;
    }
    else if (!strcmp(name, "--kv-cache-dtype")) {
        kv_dtype t;
        if (strcmp(v, "auto") && !kv_dtype_from_name(v, &t)) return bad(name, v, "choose from " KV_DTYPE_CHOICES);
        a->kv_cache_dtype = v;
    }
    else if (!strcmp(name, "--dtype")) {
        static const char *const dtypes[] = {"auto", "half", "float16", "bfloat16", "float", "float32", NULL};
        const char *const *d = dtypes;
        while (*d && strcmp(*d, v)) d++;
        if (!*d) return bad(name, v, "choose from 'auto', 'half', 'float16', 'bfloat16', 'float', 'float32'");
        a->dtype = v;
    }
    else if (!strcmp(name, "--kv-transfer-config")) a->kv_transfer_config = v; /* checked by the engine */
    else if (!strcmp(name, "--kv-offloading-size")) {
        char *end;
        errno = 0;
        double g = strtod(v, &end);
        if (errno || end == v || *end || !(g >= 0) || g > 1e6) return bad(name, v, "expected GiB >= 0 such as 0.5");
        a->kv_offloading_size = g;
    }
    else if (!strcmp(name, "--structured-outputs-compile-timeout")) {
        char *end;
        errno = 0;
        double t = strtod(v, &end);
        if (errno || end == v || *end || !(t > 0) || t > 3600) return bad(name, v, "expected seconds in (0, 3600]");
        a->structured_outputs_compile_timeout = t;
    }
    else if (!strcmp(name, "--max-model-len")) {
        if (!parse_i32(v, &a->max_model_len, true) || a->max_model_len < 1)
            return bad(name, v, "expected a positive length such as 4096, 32k or 32K");
    } else if (!strcmp(name, "--block-size")) {
        if (!parse_i32(v, &a->block_size, false) || a->block_size < 1)
            return bad(name, v, "expected a positive integer");
    } else if (!strcmp(name, "--kv-cache-memory-bytes")) {
        if (!engine_args_parse_size(v, &big)) return bad(name, v, "expected a size such as 4G");
        a->kv_cache_memory_bytes = big;
    } else if (!strcmp(name, "--num-gpu-blocks-override")) {
        if (!parse_i32(v, &a->num_gpu_blocks_override, false) || a->num_gpu_blocks_override < 0)
            return bad(name, v, "expected a non-negative integer");
    } else if (!strcmp(name, "--max-num-seqs")) {
        if (!parse_i32(v, &a->max_num_seqs, false) || a->max_num_seqs < 1)
            return bad(name, v, "expected a positive integer");
    } else if (!strcmp(name, "--max-num-batched-tokens")) {
        if (!parse_i32(v, &a->max_num_batched_tokens, true) || a->max_num_batched_tokens < 1)
            return bad(name, v, "expected a positive integer");
    } else if (!strcmp(name, "--long-prefill-token-threshold")) {
        if (!parse_i32(v, &a->long_prefill_token_threshold, false) || a->long_prefill_token_threshold < 0)
            return bad(name, v, "expected a non-negative integer");
    } else if (!strcmp(name, "--tensor-parallel-size") || !strcmp(name, "--pipeline-parallel-size")) {
        int32_t n;
        if (!parse_i32(v, &n, false) || n < 1 || n > 1024) return bad(name, v, "expected an integer in 1..1024");
        *(name[2] == 't' ? &a->tensor_parallel_size : &a->pipeline_parallel_size) = n;
    } else if (!strcmp(name, "--threads")) {
        if (!parse_i32(v, &a->num_threads, false) || a->num_threads < 0)
            return bad(name, v, "expected a non-negative integer (0 = every online CPU)");
    } else if (!strcmp(name, "--scheduling-policy")) {
        if (!strcmp(v, "fcfs")) a->scheduling_policy = VLLM_SCHEDULING_FCFS;
        else if (!strcmp(v, "priority")) a->scheduling_policy = VLLM_SCHEDULING_PRIORITY;
        else return bad(name, v, "choose from 'fcfs', 'priority'");
    } else if (!strcmp(name, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') return bad(name, v, "expected an integer >= 0");
        a->seed = s;
    }
    *i += used;
    return 1;
}

void engine_args_usage(FILE *f) {
    fprintf(f,
            "engine options (vLLM's names):\n"
            "  --model DIR                     Hugging Face model directory\n"
            "  --tokenizer DIR                 tokenizer directory (default: the model's)\n"
            "  --max-model-len N               context length (default: max_position_embeddings;\n"
            "                                  accepts 32k = 32000, 32K = 32768)\n"
            "  --block-size N                  KV cache block size in tokens (16)\n"
            "  --kv-cache-memory-bytes SIZE    KV cache size (e.g. 4G; default: from free memory)\n"
            "  --kv-cache-dtype T              KV cache element type: auto (the model's dtype:\n"
            "                                  bfloat16 for float32/bfloat16 checkpoints, float16 for\n"
            "                                  float16 ones and GGUF files, bfloat16 for Gemma 3),\n"
            "                                  bfloat16, float16, fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2,\n"
            "                                  float32 (exact; vllm.c only) (auto)\n"
            "  --dtype T                       compute dtype: auto (the model's own: a bfloat16 model\n"
            "                                  computes with bfloat16 activations), bfloat16, float32\n"
            "                                  (= float; FP32 activations), float16 (= half; FP32 on CPU)\n"
            "  --num-gpu-blocks-override N     KV cache size in blocks\n"
            "  --[no-]enable-prefix-caching    prefix caching (on)\n"
            "  --max-num-seqs N                sequences per step\n"
            "  --max-num-batched-tokens N      tokens per step\n"
            "  --long-prefill-token-threshold N  cap a long prompt's tokens per step (0 = off)\n"
            "  --scheduling-policy fcfs|priority\n"
            "  --seed N                        seed for requests that give none (0)\n"
            "  --structured-outputs-compile-timeout S  seconds a structured-outputs grammar may take\n"
            "                                  to compile before its request fails (vllm.c only) (5)\n"
            "  --threads N                     compute threads (0 = every online CPU)\n"
            "  -tp, --tensor-parallel-size N   ranks splitting every layer (vllmc serve, MPI; docs/deploy.md)\n"
            "  -pp, --pipeline-parallel-size M ranks splitting the layers into stages (vllmc serve, MPI)\n"
            "  --generation-config auto|vllm|DIR  sampling defaults from generation_config.json (auto)\n"
            "  --speculative-config JSON       speculative decoding, e.g. '{\"method\":\"ngram\",\n"
            "                                  \"num_speculative_tokens\":4,\"prompt_lookup_max\":4}'; keys:\n"
            "                                  method (ngram, draft_model), model (draft_model's path),\n"
            "                                  num_speculative_tokens (1..128), prompt_lookup_min/\n"
            "                                  prompt_lookup_max (5), disable_by_batch_size,\n"
            "                                  draft_token_acceptance_method (rejection_sampler, exact),\n"
            "                                  adaptive (true: fewer drafts for sequences that miss and in\n"
            "                                  big batches; vllm.c only)\n"
            "  --kv-transfer-config JSON       KV connector (docs/disagg.md), e.g. '{\"kv_connector\":\n"
            "                                  \"SharedStorageConnector\",\"kv_role\":\"kv_both\",\n"
            "                                  \"kv_connector_extra_config\":{\"shared_storage_path\":\"/tmp/kv\"}}'\n"
            "  --kv-offloading-size GiB        keep prefix blocks in host RAM beyond the pool (0 = off;\n"
            "                                  disk tier: VLLM_KV_OFFLOADING_DISK_PATH, _SIZE in GiB)\n");
    lora_args_usage(f);
}
