/*
 * test_server_protocol.c - request parsing (src/server/openai_protocol.c):
 * vLLM's defaults and pydantic's lax typing (values from vLLM's protocol.py
 * and pydantic's documented coercions), the prompt shapes, sampling
 * parameters with generation-config defaults and context checks, and a
 * mutation fuzz: any byte-level damage to a valid body, or any JSON type in
 * any field, must come back as a clean 400/404 with a message, never a crash
 * (run it under make SAN=1).
 */
/* checks: 7 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/openai_protocol.h"

static bool parse(const char *body, bool chat, openai_request *r, openai_error *e) {
    return openai_request_parse(body, strlen(body), chat, r, e);
}

TEST(test_completion_defaults) {
    openai_request r;
    openai_error e;
    CHECK(parse("{\"prompt\":\"hi\"}", false, &r, &e), "%s", e.message);
    CHECK(r.n == 1 && r.has_max_tokens && r.max_tokens == 16, "n %d max_tokens %lld", r.n, (long long)r.max_tokens);
    CHECK(r.logprobs == -1 && r.add_special_tokens && r.skip_special_tokens && !r.stream && !r.echo,
          "defaults");
    CHECK(!r.has_temperature && !r.has_top_p && !r.has_top_k && !r.has_seed, "unset optionals");
    CHECK(r.num_prompts == 1 && r.prompts[0].text && !strcmp(r.prompts[0].text, "hi"), "prompt");
    openai_request_free(&r);
}

TEST(test_chat_defaults) {
    openai_request r;
    openai_error e;
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", true, &r, &e), "%s", e.message);
    CHECK(!r.has_max_tokens && r.add_generation_prompt && !r.add_special_tokens && r.logprobs == -1,
          "chat defaults");
    CHECK(r.tool_choice && !strcmp(r.tool_choice, "none"), "tool_choice %s", r.tool_choice);
    openai_request_free(&r);
    CHECK(parse("{\"messages\":[],\"max_tokens\":5,\"max_completion_tokens\":7}", true, &r, &e), "%s", e.message);
    CHECK(r.has_max_tokens && r.max_tokens == 7, "max_completion_tokens wins: %lld", (long long)r.max_tokens);
    openai_request_free(&r);
    CHECK(parse("{\"messages\":[],\"max_tokens\":5,\"max_completion_tokens\":0}", true, &r, &e), "%s", e.message);
    CHECK(r.max_tokens == 5, "`0 or 5` is 5 in Python: %lld", (long long)r.max_tokens);
    openai_request_free(&r);
    CHECK(parse("{\"messages\":[],\"logprobs\":true,\"top_logprobs\":3}", true, &r, &e), "%s", e.message);
    CHECK(r.logprobs == 3, "top_logprobs %d", r.logprobs);
    openai_request_free(&r);
    CHECK(parse("{\"messages\":[],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", true, &r, &e),
          "%s", e.message);
    CHECK(!strcmp(r.tool_choice, "auto"), "tools without tool_choice default to auto: %s", r.tool_choice);
    openai_request_free(&r);
}

TEST(test_lax_types) {
    openai_request r;
    openai_error e;
    CHECK(parse("{\"prompt\":\"a\",\"n\":\"3\",\"stream\":\"true\",\"temperature\":\"0.5\",\"top_k\":4.0,"
                "\"stream_options\":{\"include_usage\":1}}", false, &r, &e), "%s", e.message);
    CHECK(r.n == 3 && r.stream && r.has_temperature && r.temperature == 0.5 && r.top_k == 4 && r.include_usage,
          "coercions");
    openai_request_free(&r);
    CHECK(!parse("{\"prompt\":\"a\",\"n\":3.5}", false, &r, &e), "3.5 is not an int");
    CHECK(e.status == 400 && !strcmp(e.type, "Bad Request") && !strcmp(e.param, "n") &&
          strstr(e.message, "fractional part"), "%d %s %s", e.status, e.param, e.message);
    CHECK(!parse("{\"prompt\":\"a\",\"n\":null}", false, &r, &e), "CompletionRequest.n is not Optional");
    CHECK(parse("{\"messages\":[],\"n\":null}", true, &r, &e), "ChatCompletionRequest.n is Optional: %s", e.message);
    CHECK(r.n == 1, "null n keeps 1");
    openai_request_free(&r);
    CHECK(!parse("{\"prompt\":\"a\",\"model\":5}", false, &r, &e), "model must be a string");
    CHECK(!strcmp(e.param, "model"), "param %s", e.param);
}

TEST(test_prompt_shapes) {
    openai_request r;
    openai_error e;
    CHECK(parse("{\"prompt\":[\"a\",\"bc\"]}", false, &r, &e), "%s", e.message);
    CHECK(r.num_prompts == 2 && !strcmp(r.prompts[1].text, "bc"), "strings");
    openai_request_free(&r);
    CHECK(parse("{\"prompt\":[1,2,3]}", false, &r, &e), "%s", e.message);
    CHECK(r.num_prompts == 1 && r.prompts[0].num_ids == 3 && !r.prompts[0].text && r.prompts[0].ids[2] == 3, "ids");
    openai_request_free(&r);
    CHECK(parse("{\"prompt\":[[1,2],[3]]}", false, &r, &e), "%s", e.message);
    CHECK(r.num_prompts == 2 && r.prompts[1].num_ids == 1 && r.prompts[1].ids[0] == 3, "id lists");
    openai_request_free(&r);
    CHECK(!parse("{\"prompt\":[1,\"a\"]}", false, &r, &e) && e.status == 400, "mixed");
    CHECK(!parse("{\"prompt\":[[1],\"a\"]}", false, &r, &e) && e.status == 400, "mixed lists");
    CHECK(!parse("{\"prompt\":[]}", false, &r, &e) && strstr(e.message, "please provide at least one prompt"), "empty");
    CHECK(!parse("{\"prompt\":[1,4294967296]}", false, &r, &e) && e.status == 400, "id beyond int32");
    CHECK(parse("{\"prompt\":\"a\\u0000b\"}", false, &r, &e), "NUL inside a prompt: %s", e.message);
    CHECK(r.prompts[0].text_len == 3, "text_len %zu", r.prompts[0].text_len);
    openai_request_free(&r);
}

TEST(test_stop_and_unknown_fields) {
    openai_request r;
    openai_error e;
    CHECK(parse("{\"prompt\":\"a\",\"stop\":\"x\",\"stop_token_ids\":[7,8],\"foo\":1,\"bar\":{}}", false, &r, &e),
          "%s", e.message);
    CHECK(r.num_stop == 1 && !strcmp(r.stop[0], "x") && r.num_stop_token_ids == 2 && r.stop_token_ids[1] == 8,
          "stop");
    CHECK(strstr(r.unknown_fields, "'foo'") && strstr(r.unknown_fields, "'bar'") && !strstr(r.unknown_fields, "stop"),
          "unknown: %s", r.unknown_fields);
    openai_request_free(&r);
    CHECK(parse("{\"prompt\":\"a\",\"logit_bias\":{\"5\":500,\"6\":-1}}", false, &r, &e), "%s", e.message);
    CHECK(r.num_logit_bias == 2 && r.logit_bias_values[0] == 100.0f, "clamped to 100: %g",
          (double)r.logit_bias_values[0]);
    openai_request_free(&r);
    CHECK(!parse("{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}", false, &r, &e) &&
          strstr(e.message, "invalid literal for int() with base 10: 'x'"), "%s", e.message);
}

TEST(test_sampling_params) {
    openai_request r;
    openai_error e;
    vllm_sampling_params sp;
    openai_defaults d = {.has_temperature = true, .temperature = 0.6, .has_top_p = true, .top_p = 0.9,
                         .has_max_tokens = true, .max_tokens = 100};
    CHECK(parse("{\"messages\":[],\"top_p\":0.5}", true, &r, &e), "%s", e.message);
    CHECK(openai_request_sampling_params(&r, &d, 512, 10, 20, &sp, &e), "%s", e.message);
    CHECK(sp.temperature == 0.6f && sp.top_p == 0.5f && sp.max_tokens == 100 && sp.top_k == 0,
          "defaults then request: t %g p %g max %d", (double)sp.temperature, (double)sp.top_p, sp.max_tokens);
    d.has_max_tokens = false;
    CHECK(openai_request_sampling_params(&r, &d, 512, 10, 20, &sp, &e), "%s", e.message);
    CHECK(sp.max_tokens == 502, "chat default max_tokens = max_model_len - prompt: %d", sp.max_tokens);
    CHECK(!openai_request_sampling_params(&r, &d, 512, 512, 20, &sp, &e) &&
          strstr(e.message, "However, your request has 512 input tokens"), "%s", e.message);
    openai_request_free(&r);
    CHECK(parse("{\"prompt\":\"a\"}", false, &r, &e), "%s", e.message);
    CHECK(!openai_request_sampling_params(&r, NULL, 512, 500, 20, &sp, &e) &&
          strstr(e.message, "'max_tokens' or 'max_completion_tokens' is too large: 16. This model's maximum "
                            "context length is 512 tokens and your request has 500 input tokens (16 > 512 - 500)."),
          "completions' default 16 is checked too: %s", e.message);
    CHECK(openai_request_sampling_params(&r, NULL, 512, 10, 20, &sp, &e) && sp.temperature == 1.0f &&
              sp.max_tokens == 16, "vLLM defaults without a generation config");
    openai_request_free(&r);
    CHECK(parse("{\"prompt\":\"a\",\"logprobs\":5}", false, &r, &e), "%s", e.message);
    CHECK(!openai_request_sampling_params(&r, NULL, 512, 10, 4, &sp, &e) &&
          strstr(e.message, "Requested sample logprobs of 5, which is greater than max allowed: 4"), "%s", e.message);
    openai_request_free(&r);
}

/* ---- fuzz ------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *const seeds[] = {
    "{\"model\":\"tiny\",\"prompt\":[\"a\",\"b\"],\"max_tokens\":5,\"n\":2,\"temperature\":0.7,\"stop\":[\"x\"],"
    "\"logprobs\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logit_bias\":{\"3\":1}}",
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"tools\":[{\"type\":"
    "\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
    "\"f\"}},\"logprobs\":true,\"top_logprobs\":2,\"max_completion_tokens\":9,\"seed\":-3}",
};
static const char *const values[] = {"null", "true", "false", "0", "-1", "1e308", "3.5", "\"\"", "\"x\"", "[]",
                                     "[1,\"a\"]", "[[]]", "{}", "{\"a\":[]}", "9223372036854775807", "\"1e3\""};
static const char *const fields[] = {"prompt", "messages", "n", "max_tokens", "temperature", "top_p", "top_k",
                                     "stop", "logprobs", "top_logprobs", "stream", "stream_options", "seed",
                                     "logit_bias", "tools", "tool_choice", "echo", "priority", "cache_salt",
                                     "stop_token_ids", "min_tokens", "best_of", "response_format",
                                     "truncate_prompt_tokens", "chat_template_kwargs", "add_generation_prompt",
                                     "structured_outputs", "guided_json", "guided_regex", "guided_choice",
                                     "guided_grammar", "guided_whitespace_pattern", "structural_tag"};

static bool outcome_ok(bool ok, const openai_request *r, const openai_error *e, const char *body) {
    if (ok) return true;
    CHECK_OR(false, (e->status == 400 || e->status == 404) && e->type && e->message[0],
             "bad error for %s: %d '%s'", body, e->status, e->message);
    return true;
}

TEST(test_fuzz_requests) {
    char buf[1024];
    for (int it = 0; it < 20000; it++) {
        const char *seed = seeds[it % 2];
        bool chat = it % 2 == 1;
        size_t len = strlen(seed);
        memcpy(buf, seed, len + 1);
        if (it % 3 == 0) { /* byte damage */
            int k = 1 + (int)(next() % 4);
            for (int j = 0; j < k; j++) buf[next() % len] = (char)(next() & 0xff);
            if (next() % 4 == 0) len = next() % len;
        } else { /* a field with a value of any JSON type */
            int n = snprintf(buf, sizeof buf, "{%s\"%s\":%s,%s}", chat ? "\"messages\":[]," : "\"prompt\":\"p\",",
                             fields[next() % (sizeof fields / sizeof *fields)],
                             values[next() % (sizeof values / sizeof *values)],
                             "\"model\":\"m\"");
            len = (size_t)n;
        }
        openai_request r;
        openai_error e;
        bool ok = openai_request_parse(buf, len, chat, &r, &e);
        if (!outcome_ok(ok, &r, &e, buf)) return;
        if (ok) {
            vllm_sampling_params sp;
            openai_defaults d = {0};
            if (!openai_request_sampling_params(&r, &d, 64, 3, 20, &sp, &e))
                CHECK(e.status == 400 && e.message[0], "sampling error without a message for %s", buf);
            openai_request_free(&r);
        }
    }
}

int main(void) {
    RUN(test_completion_defaults);
    RUN(test_chat_defaults);
    RUN(test_lax_types);
    RUN(test_prompt_shapes);
    RUN(test_stop_and_unknown_fields);
    RUN(test_sampling_params);
    RUN(test_fuzz_requests);
    return harness_done();
}
