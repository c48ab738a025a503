/*
 * fuzz_config.c - model_config_parse and model_generation_config_parse.
 *
 * Input: config.json text, optionally followed by FUZZ_CONFIG_SPLIT and a
 * generation_config.json text (without one, the bundled model's
 * generation_config.json is merged). A config that parses must satisfy what
 * model.h promises the forward pass: positive dims, heads a multiple of KV
 * heads, an even head_dim, token ids inside the vocabulary, at most 8 distinct
 * eos ids; and a failed generation_config parse leaves the config unchanged.
 */
#include "fuzz.h"

#include "model/model.h"

#define FUZZ_CONFIG_SPLIT "\n--- generation_config.json\n"

static const char fuzz_config_default_gen[] =
    "{\"bos_token_id\": 1, \"eos_token_id\": [2, 1], \"do_sample\": false, \"max_length\": 512}";

static const char fuzz_config_base[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, \"intermediate_size\": 8,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 16}";

int fuzz_config_init(void) { return 0; }

static bool fuzz_config_id_ok(const model_config *c, int32_t id) { return id >= 0 && id < c->vocab_size; }

int fuzz_config_one(const uint8_t *data, size_t size) {
    const char *text = (const char *)data, *gen_text = fuzz_config_default_gen;
    size_t len = size, gen_len = strlen(fuzz_config_default_gen);
    const char *split = memmem(text, size, FUZZ_CONFIG_SPLIT, strlen(FUZZ_CONFIG_SPLIT));
    if (split) {
        len = (size_t)(split - text);
        gen_text = split + strlen(FUZZ_CONFIG_SPLIT);
        gen_len = size - len - strlen(FUZZ_CONFIG_SPLIT);
    }
    model_config cfg;
    if (model_config_parse(text, len, "config.json", &cfg) != VLLM_OK) {
        /* rejected: fuzz the generation config against a small valid one */
        if (model_config_parse(fuzz_config_base, strlen(fuzz_config_base), "base.json", &cfg) != VLLM_OK)
            FUZZ_CHECK(false, "the fixed base config does not parse");
    } else {
        FUZZ_CHECK(memchr(cfg.architecture, 0, sizeof cfg.architecture) != NULL, "architecture not terminated");
        FUZZ_CHECK(cfg.hidden_size > 0 && cfg.intermediate_size > 0 && cfg.num_hidden_layers > 0 &&
                       cfg.vocab_size > 0 && cfg.max_position_embeddings > 0,
                   "non-positive dimension");
        FUZZ_CHECK(cfg.num_attention_heads > 0 && cfg.num_key_value_heads > 0 &&
                       cfg.num_attention_heads % cfg.num_key_value_heads == 0,
                   "heads %d / kv heads %d", cfg.num_attention_heads, cfg.num_key_value_heads);
        FUZZ_CHECK(cfg.head_dim > 0 && cfg.head_dim % 2 == 0, "head_dim %d", cfg.head_dim);
        FUZZ_CHECK(cfg.bos_token_id == -1 || fuzz_config_id_ok(&cfg, cfg.bos_token_id), "bos %d", cfg.bos_token_id);
        FUZZ_CHECK(cfg.rms_norm_eps > 0 && cfg.rope_theta > 0, "eps %g theta %g", cfg.rms_norm_eps, cfg.rope_theta);
        FUZZ_CHECK(cfg.sliding_window >= 0, "sliding_window %d", cfg.sliding_window);
        if (cfg.rope_scaling != ROPE_SCALING_NONE) FUZZ_CHECK(cfg.rope_factor > 0, "rope factor %g", cfg.rope_factor);
    }
    FUZZ_CHECK(cfg.num_eos_token_ids >= 0 && cfg.num_eos_token_ids <= 8, "%d eos ids", cfg.num_eos_token_ids);
    for (int32_t i = 0; i < cfg.num_eos_token_ids; i++)
        FUZZ_CHECK(fuzz_config_id_ok(&cfg, cfg.eos_token_ids[i]), "eos %d", cfg.eos_token_ids[i]);

    model_config before = cfg;
    generation_defaults gen;
    if (model_generation_config_parse(gen_text, gen_len, "generation_config.json", &cfg, &gen) != VLLM_OK) {
        FUZZ_CHECK(!memcmp(&before, &cfg, sizeof cfg), "failed generation_config parse changed the config");
        return 0;
    }
    FUZZ_CHECK(cfg.num_eos_token_ids >= before.num_eos_token_ids && cfg.num_eos_token_ids <= 8,
               "%d eos ids after merge", cfg.num_eos_token_ids);
    for (int32_t i = 0; i < cfg.num_eos_token_ids; i++) {
        FUZZ_CHECK(fuzz_config_id_ok(&cfg, cfg.eos_token_ids[i]), "merged eos %d", cfg.eos_token_ids[i]);
        for (int32_t j = 0; j < i; j++) FUZZ_CHECK(cfg.eos_token_ids[j] != cfg.eos_token_ids[i], "duplicate eos");
    }
    FUZZ_CHECK(!gen.has_top_p || (gen.top_p > 0 && gen.top_p <= 1), "top_p %g", gen.top_p);
    FUZZ_CHECK(!gen.has_temperature || gen.temperature >= 0, "temperature %g", gen.temperature);
    FUZZ_CHECK(gen.max_new_tokens >= 0, "max_new_tokens %d", gen.max_new_tokens);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_config_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_config_one(data, size); }
#endif
