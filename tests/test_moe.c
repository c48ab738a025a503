/*
 * test_moe.c - the mixture-of-experts config fields (model/config.c) and
 * routing (model/moe.h), against values derived by hand from transformers'
 * Qwen3MoeConfig / MixtralConfig defaults and its router (softmax, top-k,
 * optional renormalisation). The forward pass itself is checked against
 * transformers and llama.cpp by tests/test_moe_ref.sh.
 */
/* checks: 7 */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "model/model.h"
#include "model/moe.h"
#include "vllm/status.h"

static vllm_status parse(const char *json, model_config *c) {
    return model_config_parse(json, strlen(json), "moe/config.json", c);
}

#define DIMS "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_attention_heads\": 4, \"vocab_size\": 512, "

TEST(test_qwen3_moe_defaults) {
    model_config c;
    CHECK(parse("{\"architectures\": [\"Qwen3MoeForCausalLM\"], " DIMS "\"num_hidden_layers\": 3}", &c) == VLLM_OK,
          "%s", vllm_errmsg());
    /* Qwen3MoeConfig: 128 experts, top 8, moe_intermediate_size 768, no renormalisation, every layer sparse */
    CHECK(c.arch == MODEL_ARCH_QWEN3 && c.qk_norm && c.num_experts == 128 && c.num_experts_per_tok == 8 &&
              c.moe_intermediate_size == 768 && !c.norm_topk_prob,
          "arch %d, %d experts, top %d, ff %d, norm %d", c.arch, c.num_experts, c.num_experts_per_tok,
          c.moe_intermediate_size, c.norm_topk_prob);
    CHECK(model_layer_is_moe(&c, 0) && model_layer_is_moe(&c, 1) && model_layer_is_moe(&c, 2));
}

TEST(test_qwen3_moe_sparse_step_and_mlp_only) {
    model_config c;
    /* HF: sparse iff layer not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0 */
    CHECK(parse("{\"model_type\": \"qwen3_moe\", " DIMS "\"num_hidden_layers\": 6, \"num_local_experts\": 16, "
                "\"num_experts_per_tok\": 4, \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3], "
                "\"norm_topk_prob\": true}",
                &c) == VLLM_OK,
          "%s", vllm_errmsg());
    CHECK(c.num_experts == 16 && c.num_experts_per_tok == 4 && c.norm_topk_prob);
    bool want[6] = {false, true, false, false, false, true};
    for (int l = 0; l < 6; l++) CHECK(model_layer_is_moe(&c, l) == want[l], "layer %d", l);
}

TEST(test_mixtral_defaults) {
    model_config c;
    CHECK(parse("{\"architectures\": [\"MixtralForCausalLM\"], " DIMS "\"num_hidden_layers\": 2}", &c) == VLLM_OK,
          "%s", vllm_errmsg());
    /* MixtralConfig: 8 local experts, top 2, experts of intermediate_size, always renormalised */
    CHECK(c.arch == MODEL_ARCH_MISTRAL && c.num_experts == 8 && c.num_experts_per_tok == 2 &&
              c.moe_intermediate_size == 96 && c.norm_topk_prob && model_layer_is_moe(&c, 0) &&
              model_layer_is_moe(&c, 1),
          "%d experts, top %d, ff %d", c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size);
}

TEST(test_bad_moe_configs) {
    model_config c;
    static const char *const bad[][2] = {
        {"{\"model_type\": \"qwen3_moe\", " DIMS "\"num_hidden_layers\": 3, \"mlp_only_layers\": [3]}", "mlp_only_layers"},
        {"{\"model_type\": \"qwen3_moe\", " DIMS "\"num_hidden_layers\": 3, \"mlp_only_layers\": 1}", "mlp_only_layers"},
        {"{\"model_type\": \"mixtral\", " DIMS "\"num_hidden_layers\": 3, \"num_local_experts\": 4, "
         "\"num_experts_per_tok\": 5}", "num_experts_per_tok"},
        {"{\"model_type\": \"qwen3_moe\", " DIMS "\"num_hidden_layers\": 3, \"num_experts\": 0}", "num_experts"},
        {"{\"model_type\": \"qwen3_moe\", " DIMS "\"num_hidden_layers\": 3, \"decoder_sparse_step\": 0}",
         "decoder_sparse_step"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(parse(bad[i][0], &c) != VLLM_OK, "config %zu accepted", i);
        CHECK(strstr(vllm_errmsg(), bad[i][1]), "config %zu: '%s' does not name %s", i, vllm_errmsg(), bad[i][1]);
    }
}

TEST(test_dense_has_no_experts) {
    model_config c;
    CHECK(parse("{\"model_type\": \"qwen3\", " DIMS "\"num_hidden_layers\": 2, \"num_experts\": 8}", &c) == VLLM_OK,
          "%s", vllm_errmsg());
    CHECK(c.num_experts == 0 && !model_layer_is_moe(&c, 0), "a dense Qwen3 config has %d experts", c.num_experts);
}

/* p = softmax(0, ln 2, ln 4, 0) = (1, 2, 4, 1) / 8: top 2 are experts 2
 * (1/2) and 1 (1/4); renormalised 2/3 and 1/3; returned in expert order */
TEST(test_route_top2) {
    int32_t e[2];
    float w[2];
    float l[4] = {0, logf(2), logf(4), 0};
    moe_route(l, 4, 2, false, e, w);
    CHECK(e[0] == 1 && e[1] == 2, "experts %d %d", e[0], e[1]);
    CHECK(fabsf(w[0] - 0.25f) < 1e-6f && fabsf(w[1] - 0.5f) < 1e-6f, "weights %g %g", w[0], w[1]);
    float m[4] = {0, logf(2), logf(4), 0};
    moe_route(m, 4, 2, true, e, w);
    CHECK(e[0] == 1 && e[1] == 2 && fabsf(w[0] - 1.0f / 3) < 1e-6f && fabsf(w[1] - 2.0f / 3) < 1e-6f,
          "renormalised: experts %d %d, weights %g %g", e[0], e[1], w[0], w[1]);
}

/* equal probabilities: the lower experts first, as the selection breaks ties */
TEST(test_route_ties) {
    int32_t e[3];
    float w[3];
    float l[5] = {1, 3, 1, 3, 1};
    moe_route(l, 5, 3, true, e, w);
    CHECK(e[0] == 0 && e[1] == 1 && e[2] == 3, "experts %d %d %d", e[0], e[1], e[2]);
    /* p(3) / (p(3) + p(3) + p(1)) = e^2 / (2 e^2 + 1) */
    float big = (float)(exp(2.0) / (2 * exp(2.0) + 1));
    CHECK(fabsf(w[1] - big) < 1e-6f && fabsf(w[2] - big) < 1e-6f && fabsf(w[0] + 2 * big - 1) < 1e-6f,
          "weights %g %g %g", w[0], w[1], w[2]);
}

int main(void) {
    RUN(test_qwen3_moe_defaults);
    RUN(test_qwen3_moe_sparse_step_and_mlp_only);
    RUN(test_mixtral_defaults);
    RUN(test_bad_moe_configs);
    RUN(test_dense_has_no_experts);
    RUN(test_route_top2);
    RUN(test_route_ties);
    return harness_done();
}
