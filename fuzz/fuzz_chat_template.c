/*
 * fuzz_chat_template.c - chat-template source and rendering: jinja_template_parse
 * and jinja_template_render on arbitrary template text, and chat_template_create
 * + chat_template_prepare_messages + chat_template_render on arbitrary
 * conversations.
 *
 * Input: template source, optionally followed by FUZZ_TEMPLATE_SPLIT and a
 * JSON value. When the JSON is an array it is the conversation (`messages`),
 * when an object its members are extra template variables (as a request's
 * chat_template_kwargs); without one a fixed two-turn conversation is used.
 * A source starting with "#llama3" / "#qwen3" is replaced by that model's
 * real template (from the npm tokenizer packages), so the seeds also drive
 * real templates with hostile conversations.
 *
 * Renders run with small limits (1 MiB output, 32 MiB memory, depth 200),
 * which must turn runaway templates (string doubling, deep recursion, huge
 * range) into errors, not crashes or timeouts. Checks beyond memory safety:
 *   - a successful render is NUL-terminated at its stated length and no
 *     longer than the output limit;
 *   - rendering is deterministic: the same template and context render to the
 *     same bytes twice (uninitialised memory or hash order would show here);
 *   - the same through chat_template_create/prepare_messages/render, which
 *     is the server's path (there only the output's shape is checked).
 */
#include "fuzz.h"

#include <jansson.h>

#include "template/chat_template.h"
#include "template/jinja.h"

#define FUZZ_TEMPLATE_SPLIT "\n--- context\n"
#define FUZZ_TEMPLATE_MAX_OUT (1u << 20)

static char *fuzz_template_real[2]; /* Llama 3, Qwen3 chat_template sources (NULL when absent) */

static char *fuzz_template_from_config(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
    const char *s = json_string_value(json_object_get(cfg, "chat_template"));
    char *out = s ? strdup(s) : NULL;
    json_decref(cfg);
    return out;
}

int fuzz_chat_template_init(void) {
    if (!fuzz_template_real[0]) fuzz_template_real[0] = fuzz_template_from_config(FUZZ_LLAMA3_DIR);
    if (!fuzz_template_real[1]) fuzz_template_real[1] = fuzz_template_from_config(FUZZ_QWEN3_DIR);
    return 0;
}

static const char fuzz_template_default_messages[] =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello\"},{\"role\":\"user\",\"content\":\"Why?\"}]";

int fuzz_chat_template_one(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    size_t src_len = size;
    json_t *ctxv = NULL;
    const char *split = memmem(text, size, FUZZ_TEMPLATE_SPLIT, strlen(FUZZ_TEMPLATE_SPLIT));
    if (split) {
        src_len = (size_t)(split - text);
        const char *j = split + strlen(FUZZ_TEMPLATE_SPLIT);
        ctxv = json_loadb(j, size - src_len - strlen(FUZZ_TEMPLATE_SPLIT), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    }
    /* the source, NUL-terminated (chat_template_create takes a C string) */
    char *src = NULL;
    if (src_len >= 7 && !memcmp(text, "#llama3", 7) && fuzz_template_real[0])
        src = strdup(fuzz_template_real[0]);
    else if (src_len >= 6 && !memcmp(text, "#qwen3", 6) && fuzz_template_real[1])
        src = strdup(fuzz_template_real[1]);
    else if ((src = malloc(src_len + 1)) != NULL) {
        memcpy(src, text, src_len);
        src[src_len] = 0;
    }
    json_t *messages = json_is_array(ctxv) ? json_incref(ctxv) : json_loads(fuzz_template_default_messages, 0, NULL);
    json_t *kwargs = json_is_object(ctxv) ? json_incref(ctxv) : NULL;
    json_t *config = json_pack("{s:s, s:s}", "bos_token", "<s>", "eos_token", "</s>");
    jinja_template *t = NULL;
    chat_template *ct = NULL;
    char *out1 = NULL, *out2 = NULL, *out3 = NULL;
    size_t len1 = 0, len2 = 0, len3 = 0;
    json_t *context = NULL, *prepared = NULL;
    if (!src || !messages || !config) goto out;

    /* 1. the interpreter on its own (the source up to its first NUL) */
    jinja_render_opts opts = {.max_output = FUZZ_TEMPLATE_MAX_OUT, .max_memory = 32u << 20, .max_depth = 200,
                              .now = 1700000000};
    if (jinja_template_parse(src, strlen(src), &t) == VLLM_OK) {
        (void)jinja_template_iterates_content(t);
        context = json_object();
        json_object_set(context, "messages", messages);
        json_object_set_new(context, "bos_token", json_string("<s>"));
        json_object_set_new(context, "eos_token", json_string("</s>"));
        json_object_set_new(context, "add_generation_prompt", json_true());
        if (kwargs) json_object_update(context, kwargs);
        vllm_status a = jinja_template_render(t, context, &opts, &out1, &len1);
        vllm_status b = jinja_template_render(t, context, &opts, &out2, &len2);
        FUZZ_CHECK_GOTO(out, a == b, "render status differs between two runs: %d vs %d", a, b);
        if (a == VLLM_OK) {
            FUZZ_CHECK_GOTO(out, out1[len1] == 0, "render output not NUL-terminated");
            FUZZ_CHECK_GOTO(out, len1 <= FUZZ_TEMPLATE_MAX_OUT, "output %zu bytes over the limit", len1);
            FUZZ_CHECK_GOTO(out, len1 == len2 && !memcmp(out1, out2, len1), "render not deterministic");
        }
    }

    /* 2. through chat_template (what the server does), messages normalised first */
    if (chat_template_create(config, src, &ct) == VLLM_OK) {
        chat_content_format fmt = chat_template_content_format(ct);
        if (chat_template_prepare_messages(messages, fmt, &prepared) == VLLM_OK) {
            chat_template_request r = {.messages = prepared,
                                       .add_generation_prompt = true,
                                       .kwargs = kwargs,
                                       .now = 1700000000,
                                       .max_output = FUZZ_TEMPLATE_MAX_OUT};
            if (chat_template_render(ct, &r, &out3, &len3) == VLLM_OK) {
                FUZZ_CHECK_GOTO(out, out3[len3] == 0, "chat render output not NUL-terminated");
                FUZZ_CHECK_GOTO(out, len3 <= FUZZ_TEMPLATE_MAX_OUT, "chat output %zu bytes over the limit", len3);
            }
        }
    }
out:
    free(out1);
    free(out2);
    free(out3);
    json_decref(prepared);
    json_decref(context);
    chat_template_free(ct);
    jinja_template_free(t);
    json_decref(config);
    json_decref(kwargs);
    json_decref(messages);
    json_decref(ctxv);
    free(src);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_chat_template_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_chat_template_one(data, size); }
#endif
