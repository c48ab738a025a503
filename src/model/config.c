/*
 * config.c - config.json and generation_config.json into model_config and
 * generation_defaults (see model.h).
 *
 * Defaults follow the transformers config classes of the four supported
 * architectures (num_key_value_heads = heads, head_dim = hidden / heads,
 * rope_theta 10000, rms_norm_eps 1e-6, no tied embeddings, float32 when no
 * dtype is declared, as vLLM assumes). Everything the forward pass will
 * divide by, index with or allocate from is range-checked here, so a
 * malformed or hostile config is an error message, never a crash or a
 * 2^40-byte allocation: this parser is a fuzz target.
 *
 * Newer transformers write "dtype" for "torch_dtype" and "rope_parameters"
 * (holding rope_theta and the scaling) for "rope_scaling"; both are read.
 *
 * Gemma 3 (Gemma3TextConfig) has defaults of its own (head_dim 256,
 * rope_theta 1e6 for the global layers, 10000 for the local ones, tied
 * embeddings, query_pre_attn_scalar 256, sliding_window 4096 every layer but
 * each sliding_window_pattern-th (6)), lists its layers' kinds in
 * layer_types when written by newer transformers, and nests rope_parameters
 * per kind ({"full_attention": {...}, "sliding_attention": {...}}). What it
 * changes in the forward pass lands in model_config's Gemma fields.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "model/model.h"

#define MAX_DIM (1 << 24)   /* hidden, intermediate, vocab */
#define MAX_LAYERS MODEL_MAX_LAYERS
#define MAX_HEADS 4096
#define MAX_HEAD_DIM 4096

static const struct {
    const char *architecture, *model_type;
    model_arch arch;
} archs[] = {
    {"LlamaForCausalLM", "llama", MODEL_ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", MODEL_ARCH_MISTRAL},
    {"Qwen2ForCausalLM", "qwen2", MODEL_ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", MODEL_ARCH_QWEN3},
    {"Gemma3ForCausalLM", "gemma3_text", MODEL_ARCH_GEMMA3},
    /* mixtures of experts: the attention of Qwen3 / Mistral, the MLP of model/moe.h */
    {"Qwen3MoeForCausalLM", "qwen3_moe", MODEL_ARCH_QWEN3},
    {"MixtralForCausalLM", "mixtral", MODEL_ARCH_MISTRAL},
};
#define SUPPORTED_ARCHS \
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, " \
    "Qwen3MoeForCausalLM, MixtralForCausalLM"
#define MAX_EXPERTS 4096

static bool is_absent(json_t *v) { return !v || json_is_null(v); }

/* An integer field in [lo, hi]; absent/null gives def, or an error if required. */
static vllm_status get_int(json_t *o, const char *key, const char *path, bool required, int64_t def,
                           int64_t lo, int64_t hi, int32_t *out) {
    json_t *v = json_object_get(o, key);
    if (is_absent(v)) {
        if (required) return vllm_error(VLLM_ERR_FORMAT, "%s: missing required field \"%s\"", path, key);
        *out = (int32_t)def;
        return VLLM_OK;
    }
    if (!json_is_integer(v)) return vllm_error(VLLM_ERR_FORMAT, "%s: \"%s\" must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return vllm_error(VLLM_ERR_INVALID, "%s: \"%s\" is %lld, outside [%lld, %lld]", path, key, (long long)x,
                          (long long)lo, (long long)hi);
    *out = (int32_t)x;
    return VLLM_OK;
}

/* A number field (integer or real) in [lo, hi]; *present says whether it was given. */
static vllm_status get_float(json_t *o, const char *key, const char *path, double lo, double hi,
                             bool *present, float *out) {
    json_t *v = json_object_get(o, key);
    *present = !is_absent(v);
    if (!*present) return VLLM_OK;
    if (!json_is_number(v)) return vllm_error(VLLM_ERR_FORMAT, "%s: \"%s\" must be a number", path, key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) /* also rejects NaN */
        return vllm_error(VLLM_ERR_INVALID, "%s: \"%s\" is %g, outside [%g, %g]", path, key, x, lo, hi);
    *out = (float)x;
    return VLLM_OK;
}

static vllm_status get_bool(json_t *o, const char *key, const char *path, bool def, bool *out) {
    json_t *v = json_object_get(o, key);
    if (is_absent(v)) {
        *out = def;
        return VLLM_OK;
    }
    if (!json_is_boolean(v)) return vllm_error(VLLM_ERR_FORMAT, "%s: \"%s\" must be true or false", path, key);
    *out = json_is_true(v);
    return VLLM_OK;
}

/* Adds one token id (int) or a list of them to cfg's eos ids, without duplicates. */
static vllm_status merge_eos(json_t *v, const char *path, model_config *cfg) {
    if (is_absent(v)) return VLLM_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e))
            return vllm_error(VLLM_ERR_FORMAT, "%s: \"eos_token_id\" must be an integer or a list of integers",
                              path);
        json_int_t id = json_integer_value(e);
        if (id < 0 || id >= cfg->vocab_size)
            return vllm_error(VLLM_ERR_INVALID, "%s: eos_token_id %lld is outside the vocabulary [0, %d)", path,
                              (long long)id, cfg->vocab_size);
        bool seen = false;
        for (int32_t j = 0; j < cfg->num_eos_token_ids; j++) seen |= cfg->eos_token_ids[j] == id;
        if (seen) continue;
        int32_t cap = (int32_t)(sizeof cfg->eos_token_ids / sizeof cfg->eos_token_ids[0]);
        if (cfg->num_eos_token_ids == cap)
            return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: more than %d distinct eos_token_id values", path, cap);
        cfg->eos_token_ids[cfg->num_eos_token_ids++] = (int32_t)id;
    }
    return VLLM_OK;
}

static vllm_status parse_architecture(json_t *root, const char *path, model_config *cfg) {
    json_t *list = json_object_get(root, "architectures");
    if (!is_absent(list)) {
        if (!json_is_array(list) || json_array_size(list) == 0)
            return vllm_error(VLLM_ERR_FORMAT, "%s: \"architectures\" must be a non-empty list of strings", path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            const char *name = json_string_value(json_array_get(list, i));
            if (!name)
                return vllm_error(VLLM_ERR_FORMAT, "%s: \"architectures\" must be a list of strings", path);
            for (size_t k = 0; k < sizeof archs / sizeof archs[0]; k++)
                if (!strcmp(name, archs[k].architecture)) {
                    cfg->arch = archs[k].arch;
                    snprintf(cfg->architecture, sizeof cfg->architecture, "%s", name);
                    return VLLM_OK;
                }
        }
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: architecture %s is not supported (supported: %s)", path,
                          json_string_value(json_array_get(list, 0)), SUPPORTED_ARCHS);
    }
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!type)
        return vllm_error(VLLM_ERR_FORMAT, "%s: no \"architectures\" (or \"model_type\") field", path);
    for (size_t k = 0; k < sizeof archs / sizeof archs[0]; k++)
        if (!strcmp(type, archs[k].model_type)) {
            cfg->arch = archs[k].arch;
            snprintf(cfg->architecture, sizeof cfg->architecture, "%s", archs[k].architecture);
            return VLLM_OK;
        }
    return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: model_type %s is not supported (supported: %s)", path, type,
                      SUPPORTED_ARCHS);
}

/* rope_scaling: null, {"type"|"rope_type": "linear", factor}, or llama3's four fields. */
static vllm_status parse_rope_scaling(json_t *rs, const char *path, model_config *cfg) {
    if (is_absent(rs)) return VLLM_OK;
    if (!json_is_object(rs)) return vllm_error(VLLM_ERR_FORMAT, "%s: \"rope_scaling\" must be an object or null", path);
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type) type = json_string_value(json_object_get(rs, "type"));
    if (!type) return vllm_error(VLLM_ERR_FORMAT, "%s: rope_scaling has no \"rope_type\" (or \"type\")", path);
    if (!strcmp(type, "default")) return VLLM_OK;
    bool linear = !strcmp(type, "linear"), llama3 = !strcmp(type, "llama3");
    if (!linear && !llama3)
        return vllm_error(VLLM_ERR_UNSUPPORTED,
                          "%s: rope_scaling type \"%s\" is not supported (supported: linear, llama3)", path, type);
    vllm_status rc;
    bool has;
    char where[512];
    snprintf(where, sizeof where, "%s: rope_scaling", path);
    if ((rc = get_float(rs, "factor", where, 1e-6, 1e6, &has, &cfg->rope_factor)) != VLLM_OK) return rc;
    if (!has) return vllm_error(VLLM_ERR_FORMAT, "%s: \"%s\" rope_scaling needs \"factor\"", path, type);
    cfg->rope_scaling = linear ? ROPE_SCALING_LINEAR : ROPE_SCALING_LLAMA3;
    if (linear) return VLLM_OK;
    bool has_low, has_high;
    if ((rc = get_float(rs, "low_freq_factor", where, 1e-6, 1e6, &has_low, &cfg->rope_low_freq_factor)) ||
        (rc = get_float(rs, "high_freq_factor", where, 1e-6, 1e6, &has_high, &cfg->rope_high_freq_factor)))
        return rc;
    if (!has_low || !has_high || is_absent(json_object_get(rs, "original_max_position_embeddings")))
        return vllm_error(VLLM_ERR_FORMAT,
                          "%s: llama3 rope_scaling needs factor, low_freq_factor, high_freq_factor and "
                          "original_max_position_embeddings",
                          path);
    if ((rc = get_int(rs, "original_max_position_embeddings", where, true, 0, 1, INT32_MAX,
                      &cfg->rope_original_max_position_embeddings)))
        return rc;
    if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
        return vllm_error(VLLM_ERR_INVALID, "%s: rope_scaling high_freq_factor %g must exceed low_freq_factor %g",
                          path, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
    return VLLM_OK;
}

static vllm_status parse_dtype(json_t *root, const char *path, model_config *cfg) {
    json_t *v = json_object_get(root, "torch_dtype");
    if (is_absent(v)) v = json_object_get(root, "dtype");
    cfg->torch_dtype = DTYPE_F32;
    if (is_absent(v)) return VLLM_OK;
    const char *s = json_string_value(v);
    if (!s) return vllm_error(VLLM_ERR_FORMAT, "%s: \"torch_dtype\" must be a string", path);
    if (!strcmp(s, "float32") || !strcmp(s, "float")) cfg->torch_dtype = DTYPE_F32;
    else if (!strcmp(s, "float16") || !strcmp(s, "half")) cfg->torch_dtype = DTYPE_F16;
    else if (!strcmp(s, "bfloat16")) cfg->torch_dtype = DTYPE_BF16;
    else log_warn("%s: torch_dtype %s is not one we compute in; assuming float32", path, s);
    return VLLM_OK;
}

static vllm_status parse_sliding_window(json_t *root, const char *path, model_config *cfg) {
    if (cfg->arch == MODEL_ARCH_LLAMA || cfg->arch == MODEL_ARCH_GEMMA3) return VLLM_OK; /* Gemma: parse_gemma3 */
    if (cfg->arch != MODEL_ARCH_MISTRAL) { /* Qwen2/3 carry a window that is off unless asked for */
        bool use = false;
        vllm_status rc = get_bool(root, "use_sliding_window", path, false, &use);
        if (rc || !use) return rc;
    }
    return get_int(root, "sliding_window", path, false, 0, 1, INT32_MAX, &cfg->sliding_window);
}

/* The rope_theta of a Gemma 3 layer kind: rope_parameters[kind].rope_theta,
 * else the old flat key (rope_theta / rope_local_base_freq), else def. */
static vllm_status gemma3_rope_theta(json_t *root, json_t *kind, const char *flat_key, const char *path,
                                     float def, float *out) {
    bool has = false;
    *out = def;
    vllm_status rc = VLLM_OK;
    if (kind && (rc = get_float(kind, "rope_theta", path, 1e-6, 1e30, &has, out))) return rc;
    if (!has) rc = get_float(root, flat_key, path, 1e-6, 1e30, &has, out);
    return rc;
}

/* Which layers are sliding: layer_types (a list of "sliding_attention" /
 * "full_attention", one per layer), else every layer but each
 * sliding_window_pattern-th (HF: (i + 1) % pattern != 0). A null
 * sliding_window makes every layer global. */
static vllm_status gemma3_layer_types(json_t *root, const char *path, model_config *cfg) {
    memset(cfg->sliding_layers, 0, sizeof cfg->sliding_layers);
    if (!cfg->sliding_window) return VLLM_OK;
    json_t *types = json_object_get(root, "layer_types");
    int32_t n = cfg->num_hidden_layers;
    if (!is_absent(types)) {
        if (!json_is_array(types) || json_array_size(types) != (size_t)n)
            return vllm_error(VLLM_ERR_FORMAT, "%s: \"layer_types\" must list one kind per layer (%d)", path, n);
        for (int32_t l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            bool sliding = t && !strcmp(t, "sliding_attention");
            if (!sliding && (!t || strcmp(t, "full_attention")))
                return vllm_error(VLLM_ERR_UNSUPPORTED,
                                  "%s: layer_types[%d] is %s%s%s (sliding_attention or full_attention)", path, l,
                                  t ? "\"" : "", t ? t : "not a string", t ? "\"" : "");
            if (sliding) cfg->sliding_layers[l >> 6] |= (uint64_t)1 << (l & 63);
        }
        return VLLM_OK;
    }
    int32_t pattern;
    vllm_status rc = get_int(root, "sliding_window_pattern", path, false, 6, 1, MAX_LAYERS, &pattern);
    if (rc) return rc;
    for (int32_t l = 0; l < n; l++)
        if ((l + 1) % pattern) cfg->sliding_layers[l >> 6] |= (uint64_t)1 << (l & 63);
    return VLLM_OK;
}

/* Gemma3TextConfig's fields (see the top). */
static vllm_status parse_gemma3(json_t *root, const char *path, model_config *cfg) {
    vllm_status rc;
    bool has;
    const char *act = json_string_value(json_object_get(root, "hidden_activation"));
    if (!act) act = json_string_value(json_object_get(root, "hidden_act"));
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: hidden_activation %s is not supported (gelu_pytorch_tanh only)",
                          path, act);
    cfg->hidden_act = MODEL_ACT_GELU_TANH;
    cfg->norm_weight_offset = 1.0f;
    cfg->post_norms = true;
    cfg->qk_norm = true;
    bool flag = false;
    if ((rc = get_bool(root, "use_bidirectional_attention", path, false, &flag))) return rc;
    if (flag)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: use_bidirectional_attention true is not supported (causal only)",
                          path);
    float cap = 0;
    if ((rc = get_float(root, "attn_logit_softcapping", path, 1e-6, 1e30, &has, &cap))) return rc;
    if (has)
        return vllm_error(VLLM_ERR_UNSUPPORTED,
                          "%s: attn_logit_softcapping %g is not supported (Gemma 3 checkpoints leave it null)", path,
                          cap);
    if ((rc = get_float(root, "final_logit_softcapping", path, 1e-6, 1e30, &has, &cfg->final_logit_softcapping)))
        return rc;
    float scalar = 256;
    if ((rc = get_float(root, "query_pre_attn_scalar", path, 1e-6, 1e30, &has, &scalar))) return rc;
    cfg->attn_scale = (float)pow((double)scalar, -0.5); /* HF: query_pre_attn_scalar**-0.5 */
    /* sliding_window: 4096 when absent, none when null */
    json_t *sw = json_object_get(root, "sliding_window");
    if (!sw) cfg->sliding_window = 4096;
    else if (!json_is_null(sw) &&
             (rc = get_int(root, "sliding_window", path, false, 0, 1, INT32_MAX, &cfg->sliding_window)))
        return rc;
    if ((rc = gemma3_layer_types(root, path, cfg))) return rc;

    /* RoPE: the global layers' base and scaling, the local layers' base */
    json_t *rp = json_object_get(root, "rope_parameters"), *full = NULL, *local = NULL;
    if (!is_absent(rp)) {
        if (!json_is_object(rp))
            return vllm_error(VLLM_ERR_FORMAT, "%s: \"rope_parameters\" must be an object", path);
        full = json_object_get(rp, "full_attention");
        local = json_object_get(rp, "sliding_attention");
        if ((full && !json_is_object(full)) || (local && !json_is_object(local)))
            return vllm_error(VLLM_ERR_FORMAT, "%s: rope_parameters.full_attention / sliding_attention must be objects",
                              path);
        if (!full && !local) full = rp; /* one set for both kinds */
    }
    if ((rc = gemma3_rope_theta(root, full, "rope_theta", path, 1e6f, &cfg->rope_theta)) ||
        (rc = gemma3_rope_theta(root, local, "rope_local_base_freq", path, 10000.0f, &cfg->rope_local_theta)))
        return rc;
    json_t *rs = json_object_get(root, "rope_scaling");
    if ((rc = parse_rope_scaling(is_absent(rs) ? full : rs, path, cfg))) return rc;
    if (local && local != full) {
        model_config tmp = {0};
        if ((rc = parse_rope_scaling(local, path, &tmp))) return rc;
        if (tmp.rope_scaling != ROPE_SCALING_NONE)
            return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: rope_parameters.sliding_attention: only the default RoPE is "
                              "supported on sliding layers", path);
    }
    return VLLM_OK;
}

/* sqrt(hidden) as HF's Gemma3TextScaledWordEmbedding multiplies: a float32
 * tensor converted to the weights' dtype. */
static float gemma3_embed_scale(const model_config *cfg) {
    float s = (float)sqrt((double)cfg->hidden_size);
    if (cfg->torch_dtype == DTYPE_BF16) return bf16_to_f32(f32_to_bf16(s));
    if (cfg->torch_dtype == DTYPE_F16) return f16_to_f32(f32_to_f16(s));
    return s;
}

/* The mixture-of-experts fields (model.h), with the defaults of transformers'
 * Qwen3MoeConfig (128 experts, top 8, moe_intermediate_size 768,
 * norm_topk_prob false, every decoder_sparse_step-th layer sparse unless in
 * mlp_only_layers) and MixtralConfig (8 local experts, top 2, experts of
 * intermediate_size, top-k always renormalised, every layer sparse). Newer
 * transformers write Qwen3's num_experts as num_local_experts. */
static vllm_status parse_moe(json_t *root, const char *path, model_config *cfg) {
    bool qwen = !strcmp(cfg->architecture, "Qwen3MoeForCausalLM");
    if (!qwen && strcmp(cfg->architecture, "MixtralForCausalLM")) return VLLM_OK;
    vllm_status rc;
    int32_t n = cfg->num_hidden_layers, step = 1;
    const char *key = qwen && !is_absent(json_object_get(root, "num_experts")) ? "num_experts" : "num_local_experts";
    if ((rc = get_int(root, key, path, false, qwen ? 128 : 8, 1, MAX_EXPERTS, &cfg->num_experts)) ||
        (rc = get_int(root, "num_experts_per_tok", path, false, qwen ? 8 : 2, 1, cfg->num_experts,
                      &cfg->num_experts_per_tok)))
        return rc;
    memset(cfg->moe_layers, 0, sizeof cfg->moe_layers);
    if (!qwen) {
        cfg->moe_intermediate_size = cfg->intermediate_size;
        cfg->norm_topk_prob = true;
        for (int32_t l = 0; l < n; l++) cfg->moe_layers[l >> 6] |= (uint64_t)1 << (l & 63);
        return VLLM_OK;
    }
    if ((rc = get_int(root, "moe_intermediate_size", path, false, 768, 1, MAX_DIM, &cfg->moe_intermediate_size)) ||
        (rc = get_bool(root, "norm_topk_prob", path, false, &cfg->norm_topk_prob)) ||
        (rc = get_int(root, "decoder_sparse_step", path, false, 1, 1, MAX_LAYERS, &step)))
        return rc;
    for (int32_t l = 0; l < n; l++) /* HF: (layer_idx + 1) % decoder_sparse_step == 0 */
        if ((l + 1) % step == 0) cfg->moe_layers[l >> 6] |= (uint64_t)1 << (l & 63);
    json_t *only = json_object_get(root, "mlp_only_layers");
    if (is_absent(only)) return VLLM_OK;
    if (!json_is_array(only))
        return vllm_error(VLLM_ERR_FORMAT, "%s: \"mlp_only_layers\" must be a list of layer indices", path);
    for (size_t i = 0; i < json_array_size(only); i++) {
        json_t *v = json_array_get(only, i);
        json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
        if (l < 0 || l >= n)
            return vllm_error(VLLM_ERR_INVALID, "%s: mlp_only_layers[%zu] must be a layer index in [0, %d)", path, i,
                              n);
        cfg->moe_layers[l >> 6] &= ~((uint64_t)1 << (l & 63));
    }
    return VLLM_OK;
}

static vllm_status parse_fields(json_t *root, const char *path, model_config *cfg) {
    vllm_status rc;
    bool has;
    if ((rc = parse_architecture(root, path, cfg))) return rc;
    bool gemma3 = cfg->arch == MODEL_ARCH_GEMMA3;
    if ((rc = get_int(root, "hidden_size", path, true, 0, 1, MAX_DIM, &cfg->hidden_size)) ||
        (rc = get_int(root, "intermediate_size", path, true, 0, 1, MAX_DIM, &cfg->intermediate_size)) ||
        (rc = get_int(root, "num_hidden_layers", path, true, 0, 1, MAX_LAYERS, &cfg->num_hidden_layers)) ||
        (rc = get_int(root, "num_attention_heads", path, true, 0, 1, MAX_HEADS, &cfg->num_attention_heads)) ||
        (rc = get_int(root, "num_key_value_heads", path, false, cfg->num_attention_heads, 1, MAX_HEADS,
                      &cfg->num_key_value_heads)) ||
        (rc = get_int(root, "head_dim", path, false, gemma3 ? 256 : 0, 1, MAX_HEAD_DIM, &cfg->head_dim)) ||
        (rc = get_int(root, "vocab_size", path, true, 0, 1, MAX_DIM, &cfg->vocab_size)) ||
        (rc = get_int(root, "max_position_embeddings", path, false, gemma3 ? 131072 : 2048, 1, INT32_MAX,
                      &cfg->max_position_embeddings)))
        return rc;

    cfg->rms_norm_eps = 1e-6f;
    if ((rc = get_float(root, "rms_norm_eps", path, 1e-30, 1.0, &has, &cfg->rms_norm_eps))) return rc;
    if (gemma3) {
        if ((rc = parse_gemma3(root, path, cfg))) return rc;
    } else {
        /* rope_parameters (newer transformers) holds rope_theta and the scaling together */
        json_t *rp = json_object_get(root, "rope_parameters"), *rs = json_object_get(root, "rope_scaling");
        if (!is_absent(rp) && !json_is_object(rp))
            return vllm_error(VLLM_ERR_FORMAT, "%s: \"rope_parameters\" must be an object", path);
        cfg->rope_theta = 10000.0f;
        if ((rc = get_float(root, "rope_theta", path, 1e-6, 1e30, &has, &cfg->rope_theta))) return rc;
        if (!has && !is_absent(rp) &&
            (rc = get_float(rp, "rope_theta", path, 1e-6, 1e30, &has, &cfg->rope_theta)))
            return rc;
        if ((rc = parse_rope_scaling(is_absent(rs) ? rp : rs, path, cfg))) return rc;
        const char *act = json_string_value(json_object_get(root, "hidden_act"));
        if (act && strcmp(act, "silu"))
            return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: hidden_act %s is not supported (silu only)", path, act);
    }

    if ((rc = get_bool(root, "tie_word_embeddings", path, gemma3, &cfg->tie_word_embeddings))) return rc;
    if ((rc = get_bool(root, "attention_bias", path, false, &cfg->attention_bias))) return rc;
    if (cfg->arch == MODEL_ARCH_QWEN2) cfg->attention_bias = true;  /* q/k/v always biased */
    if (cfg->arch == MODEL_ARCH_MISTRAL) cfg->attention_bias = false; /* never biased */
    cfg->qk_norm = cfg->arch == MODEL_ARCH_QWEN3 || gemma3;
    bool mlp_bias;
    if ((rc = get_bool(root, "mlp_bias", path, false, &mlp_bias))) return rc;
    if (mlp_bias) return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: mlp_bias true is not supported", path);
    if ((rc = parse_dtype(root, path, cfg)) || (rc = parse_sliding_window(root, path, cfg))) return rc;
    if (gemma3) cfg->embed_scale = gemma3_embed_scale(cfg);
    if ((rc = parse_moe(root, path, cfg))) return rc;

    if ((rc = get_int(root, "bos_token_id", path, false, -1, 0, cfg->vocab_size - 1, &cfg->bos_token_id)))
        return rc;
    return merge_eos(json_object_get(root, "eos_token_id"), path, cfg);
}

/* Relations between fields: what the shapes of the weights will rely on. */
static vllm_status check_shape_fields(const char *path, model_config *cfg) {
    if (cfg->num_attention_heads % cfg->num_key_value_heads)
        return vllm_error(VLLM_ERR_INVALID,
                          "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                          cfg->num_attention_heads, cfg->num_key_value_heads);
    if (!cfg->head_dim) {
        if (cfg->hidden_size % cfg->num_attention_heads)
            return vllm_error(VLLM_ERR_INVALID,
                              "%s: hidden_size %d is not a multiple of num_attention_heads %d (and no head_dim)",
                              path, cfg->hidden_size, cfg->num_attention_heads);
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    }
    if (cfg->head_dim % 2)
        return vllm_error(VLLM_ERR_INVALID, "%s: head_dim %d is odd; RoPE rotates pairs", path, cfg->head_dim);
    return VLLM_OK;
}

/* *root = the JSON object in json[0..len) (path names it in messages). */
static vllm_status load_object(const char *json, size_t len, const char *path, json_t **root) {
    json_error_t jerr;
    *root = json_loadb(json, len, 0, &jerr);
    if (!*root)
        return vllm_error(VLLM_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", path, jerr.text,
                          jerr.line, jerr.column);
    if (json_is_object(*root)) return VLLM_OK;
    json_decref(*root);
    *root = NULL;
    return vllm_error(VLLM_ERR_FORMAT, "%s: not a JSON object", path);
}

vllm_status model_config_parse(const char *json, size_t len, const char *path, model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    json_t *root;
    vllm_status rc = load_object(json, len, path, &root);
    if (rc) return rc;
    rc = parse_fields(root, path, cfg);
    if (!rc) rc = check_shape_fields(path, cfg);
    json_decref(root);
    if (rc) memset(cfg, 0, sizeof *cfg);
    return rc;
}

vllm_status model_generation_config_parse(const char *json, size_t len, const char *path, model_config *cfg,
                                          generation_defaults *gen) {
    memset(gen, 0, sizeof *gen);
    json_t *root;
    vllm_status rc = load_object(json, len, path, &root);
    if (rc) return rc;
    model_config merged = *cfg; /* cfg changes only on success */
    rc = get_float(root, "temperature", path, 0, 1e6, &gen->has_temperature, &gen->temperature);
    if (!rc) rc = get_float(root, "top_p", path, 1e-9, 1, &gen->has_top_p, &gen->top_p);
    if (!rc) rc = get_float(root, "min_p", path, 0, 1, &gen->has_min_p, &gen->min_p);
    if (!rc)
        rc = get_float(root, "repetition_penalty", path, 1e-9, 1e6, &gen->has_repetition_penalty,
                       &gen->repetition_penalty);
    if (!rc) {
        gen->has_top_k = !is_absent(json_object_get(root, "top_k"));
        rc = get_int(root, "top_k", path, false, 0, -1, INT32_MAX, &gen->top_k);
    }
    if (!rc) rc = get_int(root, "max_new_tokens", path, false, 0, 0, INT32_MAX, &gen->max_new_tokens);
    if (!rc) rc = merge_eos(json_object_get(root, "eos_token_id"), path, &merged);
    json_decref(root);
    if (rc) {
        memset(gen, 0, sizeof *gen);
        return rc;
    }
    *cfg = merged;
    return VLLM_OK;
}
