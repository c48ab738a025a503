/*
 * test_text_api.c - the public text API (include/vllm/text.h) through its
 * vllm_* names only, as a program on libvllm.a (the Python package) calls
 * it; under ASan/LSan in `make test`, so its ownership rules (vllm_free,
 * the processor's borrowed results) are checked too.
 *
 * Expected values are independent of us:
 *   - stories260K's ids for "Once upon a time" with BOS, 1 403 407 261 378:
 *     transformers' AutoTokenizer and llama2.c's tokenizer agree on them
 *     (test_output_processor.c uses the same); "<s>" is id 1, "</s>" 2.
 *   - Greedy text: llama2.c's run.c from BOS (reference_bos_greedy200.json):
 *     its ids begin with those four tokens, so the greedy continuation of the
 *     prompt above is greedy_ids[4:], and its text is runc_stdout after
 *     "Once upon a time".
 *   - Chat templates: stories260K's own template joins the contents with
 *     "\n" (tokenizer_config.json); the other renderings are worked out by
 *     hand from the template text.
 */
/* checks: 4 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "vllm/text.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"

TEST(test_tokenizer) {
    vllm_tokenizer *t;
    CHECK(vllm_tokenizer_load(MODEL, &t) == VLLM_OK, "%s", vllm_errmsg());
    int32_t *ids = NULL, n = 0;
    char *text = NULL;
    size_t len;
    bool ok = vllm_tokenizer_encode(t, "Once upon a time", 16, true, &ids, &n) == VLLM_OK && n == 5 &&
              ids[0] == 1 && ids[1] == 403 && ids[2] == 407 && ids[3] == 261 && ids[4] == 378;
    ok = ok && vllm_tokenizer_decode(t, ids, n, true, &text, &len) == VLLM_OK && len == 16 &&
         !strcmp(text, "Once upon a time");
    vllm_free(text);
    text = NULL;
    ok = ok && vllm_tokenizer_decode(t, ids, n, false, &text, &len) == VLLM_OK && !strcmp(text, "<s> Once upon a time");
    vllm_free(text);
    vllm_free(ids);
    int32_t bad = 9999;
    vllm_status rc = vllm_tokenizer_decode(t, &bad, 1, true, &text, &len);
    bool named = rc == VLLM_ERR_INVALID && strstr(vllm_errmsg(), "9999");
    const char *piece = vllm_tokenizer_id_to_token(t, 1);
    bool info = vllm_tokenizer_vocab_size(t) == 512 && vllm_tokenizer_bos_token_id(t) == 1 &&
                vllm_tokenizer_eos_token_id(t) == 2 && piece && !strcmp(piece, "<s>") &&
                vllm_tokenizer_token_to_id(t, "</s>") == 2 && vllm_tokenizer_token_to_id(t, "no such") == -1 &&
                vllm_tokenizer_id_to_token(t, 512) == NULL;
    vllm_tokenizer_free(t);
    CHECK(ok, "encode/decode of \"Once upon a time\"");
    CHECK(named, "decode of id 9999: %s (%s)", vllm_status_str(rc), vllm_errmsg());
    CHECK(info);
    vllm_status missing = vllm_tokenizer_load("models/no-such-model", &t);
    CHECK(missing != VLLM_OK && t == NULL && strstr(vllm_errmsg(), "no-such-model"), "%s", vllm_errmsg());
}

/* Renders and frees; the text (or NULL on error) into buf. */
static vllm_status render(const vllm_chat_template *ct, const char *msgs, const char *tools, const char *kwargs,
                          bool agp, char *buf, size_t cap) {
    char *text;
    size_t len;
    vllm_status rc = vllm_chat_template_render(ct, msgs, tools, kwargs, agp, &text, &len);
    buf[0] = 0;
    if (rc == VLLM_OK) {
        snprintf(buf, cap, "%s", text);
        vllm_free(text);
    }
    return rc;
}

TEST(test_chat_template) {
    vllm_chat_template *ct, *own, *none = NULL;
    char buf[256];
    CHECK(vllm_chat_template_load(MODEL, NULL, &ct) == VLLM_OK, "%s", vllm_errmsg());
    const char *msgs = "[{\"role\":\"user\",\"content\":\"Hello\"},{\"role\":\"assistant\",\"content\":\"Hi\"}]";
    vllm_status rc = render(ct, msgs, NULL, NULL, true, buf, sizeof buf);
    bool own_ok = rc == VLLM_OK && !strcmp(buf, "Hello\nHi");
    /* content parts joined with "\n" for a template that prints content as a string (vLLM's normalization) */
    rc = render(ct, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]",
                NULL, NULL, false, buf, sizeof buf);
    bool parts_ok = rc == VLLM_OK && !strcmp(buf, "a\nb");
    vllm_status bad_json = render(ct, "[{", NULL, NULL, true, buf, sizeof buf);
    vllm_status not_array = render(ct, "{}", NULL, NULL, true, buf, sizeof buf);
    vllm_status bad_kwargs = render(ct, msgs, NULL, "[]", true, buf, sizeof buf);
    vllm_status bad_tools = render(ct, msgs, "{}", NULL, true, buf, sizeof buf);
    vllm_chat_template_free(ct);
    CHECK(own_ok && parts_ok, "the model's template rendered \"%s\"", buf);
    CHECK(bad_json == VLLM_ERR_INVALID && not_array == VLLM_ERR_INVALID && bad_kwargs == VLLM_ERR_INVALID &&
              bad_tools == VLLM_ERR_INVALID,
          "bad JSON %d, messages not an array %d, kwargs not an object %d, tools not an array %d", bad_json,
          not_array, bad_kwargs, bad_tools);

    const char *src = "{{ bos_token }}{{ messages[0]['content'] | upper }}{% if add_generation_prompt %}!{% endif %}"
                      "{{ greeting }}{% if tools %}{{ tools | length }}{% endif %}"
                      "{% if messages | length > 1 %}{{ raise_exception('one message only') }}{% endif %}";
    CHECK(vllm_chat_template_load(MODEL, src, &own) == VLLM_OK, "%s", vllm_errmsg());
    rc = render(own, "[{\"role\":\"user\",\"content\":\"hello\"}]", "[{\"type\":\"function\"},{\"type\":\"function\"}]",
                "{\"greeting\":\" hey\"}", true, buf, sizeof buf);
    bool override_ok = rc == VLLM_OK && !strcmp(buf, "<s>HELLO! hey2");
    char buf2[256];
    vllm_status raised = render(own, msgs, NULL, NULL, false, buf2, sizeof buf2);
    bool raised_named = strstr(vllm_errmsg(), "one message only") != NULL;
    vllm_chat_template_free(own);
    CHECK(override_ok, "override rendered \"%s\" (%s)", buf, rc == VLLM_OK ? "ok" : vllm_errmsg());
    CHECK(raised != VLLM_OK && raised_named, "raise_exception: %s", vllm_errmsg());

    /* a model directory whose tokenizer_config.json has no template, and no override */
    char dir[] = "/tmp/vllm_text_api_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{\"bos_token\": \"<s>\"}", f);
        fclose(f);
    }
    rc = vllm_chat_template_load(dir, NULL, &none);
    unlink(path);
    rmdir(dir);
    CHECK(rc == VLLM_ERR_NOT_FOUND && none == NULL, "no template: %s (%s)", vllm_status_str(rc), vllm_errmsg());
}

/* The greedy continuation of "Once upon a time" through the engine and the
 * public output processor, with a stop string and logprobs. */
TEST(test_output_processor) {
    json_error_t jerr;
    json_t *ref = json_load_file(MODEL "/reference_bos_greedy200.json", 0, &jerr);
    CHECK(ref, "reference: %s", jerr.text);
    json_t *greedy = json_object_get(ref, "greedy_ids");
    const char *story = json_string_value(json_object_get(ref, "runc_stdout"));
    char expect[256] = "";
    const char *after = story ? strstr(story, "Once upon a time") : NULL;
    const char *lily = after ? strstr(after, "Lily") : NULL;
    if (lily) snprintf(expect, sizeof expect, "%.*s", (int)(lily - after - 16), after + 16);

    vllm_tokenizer *tok = NULL;
    vllm_engine *e = NULL;
    vllm_output_processor *op = NULL;
    vllm_engine_args args;
    vllm_engine_args_init(&args);
    args.model = MODEL;
    args.num_threads = 1;
    int32_t *ids = NULL, n = 0;
    bool setup = vllm_tokenizer_load(MODEL, &tok) == VLLM_OK && vllm_engine_create(&args, &e) == VLLM_OK &&
                 vllm_output_processor_create(tok, &op) == VLLM_OK &&
                 vllm_tokenizer_encode(tok, "Once upon a time", 16, true, &ids, &n) == VLLM_OK;
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.max_tokens = 40;
    sp.logprobs = 2;
    const char *stop[] = {"Lily"};
    char text[512] = "";
    size_t len = 0;
    int32_t out_ids[64], num_out = 0, num_done = 0, lp_ok = 1;
    vllm_finish_reason fr = VLLM_FINISH_NONE;
    char stop_str[16] = "";
    if (setup) {
        setup = vllm_engine_add_request(e, "r0", ids, n, &sp, NULL) == VLLM_OK &&
                vllm_output_processor_add_request(op, &(vllm_output_request){
                    .request_id = "r0", .prompt_ids = ids, .num_prompt_ids = n, .sp = &sp, .stop = stop,
                    .num_stop = 1, .skip_special_tokens = true, .detokenize = true}) == VLLM_OK;
    }
    while (setup && vllm_engine_has_unfinished(e)) {
        const vllm_step_output *so;
        const vllm_output_result *res;
        if (vllm_engine_step(e, &so) != VLLM_OK || vllm_output_processor_process(op, so, &res) != VLLM_OK) {
            setup = false;
            break;
        }
        for (int32_t j = 0; j < res->num_stops; j++)
            vllm_engine_stop_sequence(e, res->stops[j].request_id, res->stops[j].index);
        for (int32_t j = 0; j < res->num_deltas; j++) {
            const vllm_output_delta *d = &res->deltas[j];
            if (len + d->text_len < sizeof text) {
                memcpy(text + len, d->text, d->text_len);
                len += d->text_len;
                text[len] = 0;
            }
            for (int32_t k = 0; k < d->num_tokens && num_out < 64; k++) {
                out_ids[num_out++] = d->token_ids[k];
                lp_ok &= d->logprobs && d->logprobs[k].num_entries >= 2 &&
                         d->logprobs[k].entries[0].token_id == d->token_ids[k] &&
                         d->logprobs[k].entries[0].rank == 1; /* greedy: the sampled token is the top one */
            }
            if (d->finish_reason != VLLM_FINISH_NONE) {
                fr = d->finish_reason;
                snprintf(stop_str, sizeof stop_str, "%s", d->stop_str ? d->stop_str : "");
            }
        }
        num_done += res->num_done;
    }
    const char *err = setup ? "" : vllm_errmsg();
    bool ids_ok = num_out > 0 && (size_t)num_out + 4 <= json_array_size(greedy);
    for (int32_t k = 0; ids_ok && k < num_out; k++)
        ids_ok = json_integer_value(json_array_get(greedy, (size_t)k + 4)) == out_ids[k];
    vllm_free(ids);
    vllm_output_processor_free(op);
    vllm_engine_free(e);
    vllm_tokenizer_free(tok);
    json_decref(ref);
    CHECK(setup, "%s", err);
    CHECK(expect[0] && !strcmp(text, expect), "text \"%s\", llama2.c's \"%s\"", text, expect);
    CHECK(fr == VLLM_FINISH_STOP && !strcmp(stop_str, "Lily") && num_done == 1, "finish %d stop '%s' done %d",
          fr, stop_str, num_done);
    CHECK(ids_ok && lp_ok, "%d ids: llama2.c's greedy ids %s, logprobs %s", num_out, ids_ok ? "yes" : "no",
          lp_ok ? "ok" : "wrong");
}

/* abort_all ends what runs with ABORT deltas and forgets every request. */
TEST(test_output_processor_abort_all) {
    vllm_tokenizer *tok = NULL;
    vllm_output_processor *op = NULL;
    CHECK(vllm_tokenizer_load(MODEL, &tok) == VLLM_OK, "%s", vllm_errmsg());
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.n = 2;
    static const int32_t prompt[] = {1, 403};
    bool ok = vllm_output_processor_create(tok, &op) == VLLM_OK &&
              vllm_output_processor_add_request(op, &(vllm_output_request){
                  .request_id = "a", .prompt_ids = prompt, .num_prompt_ids = 2, .sp = &sp,
                  .skip_special_tokens = true, .detokenize = true}) == VLLM_OK;
    /* a duplicate id and stop strings without detokenize are refused */
    const char *stop[] = {"x"};
    vllm_status dup = vllm_output_processor_add_request(op, &(vllm_output_request){
        .request_id = "a", .prompt_ids = prompt, .num_prompt_ids = 2, .sp = &sp, .detokenize = true});
    vllm_status nodetok = vllm_output_processor_add_request(op, &(vllm_output_request){
        .request_id = "b", .prompt_ids = prompt, .num_prompt_ids = 2, .sp = &sp, .stop = stop, .num_stop = 1});
    const vllm_output_result *res = NULL;
    ok = ok && vllm_output_processor_abort_all(op, &res) == VLLM_OK;
    bool aborted = ok && res->num_deltas == 2 && res->deltas[0].finish_reason == VLLM_FINISH_ABORT &&
                   res->deltas[1].finish_reason == VLLM_FINISH_ABORT && res->num_done == 1 &&
                   !strcmp(res->done[0].request_id, "a");
    vllm_output_processor_free(op);
    vllm_tokenizer_free(tok);
    CHECK(ok);
    CHECK(dup == VLLM_ERR_INVALID && nodetok == VLLM_ERR_INVALID, "duplicate %d, stop without detokenize %d", dup,
          nodetok);
    CHECK(aborted);
}

int main(void) {
    RUN(test_tokenizer);
    RUN(test_chat_template);
    RUN(test_output_processor);
    RUN(test_output_processor_abort_all);
    return harness_done();
}
