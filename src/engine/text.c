/*
 * text.c - the public text API (include/vllm/text.h): thin wrappers over
 * the tokenizer (src/tokenizer), the chat template (src/template) and the
 * output processor (engine/output_processor.h), so that a program linking
 * libvllm.a alone (the Python package) turns text into prompts and engine
 * outputs into vLLM's outputs with exactly the code `vllmc generate` and
 * the server run. Nothing here has rules of its own: JSON in, the modules'
 * structures through, their errors out.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/output_processor.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vllm/text.h"

void vllm_free(void *p) { free(p); }

/* ---- tokenizer ---------------------------------------------------------- */

struct vllm_tokenizer {
    tokenizer *tok;
};

vllm_status vllm_tokenizer_load(const char *model, vllm_tokenizer **out) {
    *out = NULL;
    if (!model) return vllm_error(VLLM_ERR_INVALID, "vllm_tokenizer_load: no model path given");
    vllm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "vllm_tokenizer_load: out of memory");
    vllm_status rc = tokenizer_load(model, &t->tok);
    if (rc != VLLM_OK) {
        free(t);
        return rc;
    }
    *out = t;
    return VLLM_OK;
}

void vllm_tokenizer_free(vllm_tokenizer *t) {
    if (!t) return;
    tokenizer_free(t->tok);
    free(t);
}

int32_t vllm_tokenizer_vocab_size(const vllm_tokenizer *t) { return tokenizer_vocab_size(t->tok); }
int32_t vllm_tokenizer_bos_token_id(const vllm_tokenizer *t) { return tokenizer_bos_id(t->tok); }
int32_t vllm_tokenizer_eos_token_id(const vllm_tokenizer *t) { return tokenizer_eos_id(t->tok); }

vllm_status vllm_tokenizer_encode(const vllm_tokenizer *t, const char *text, size_t len,
                                  bool add_special_tokens, int32_t **ids, int32_t *num_ids) {
    return tokenizer_encode(t->tok, text, len, add_special_tokens, ids, num_ids);
}

vllm_status vllm_tokenizer_decode(const vllm_tokenizer *t, const int32_t *ids, int32_t num_ids,
                                  bool skip_special_tokens, char **text, size_t *len) {
    return tokenizer_decode(t->tok, ids, num_ids, skip_special_tokens, text, len);
}

const char *vllm_tokenizer_id_to_token(const vllm_tokenizer *t, int32_t id) {
    return tokenizer_id_to_piece(t->tok, id);
}

int32_t vllm_tokenizer_token_to_id(const vllm_tokenizer *t, const char *token) {
    return tokenizer_piece_to_id(t->tok, token);
}

/* ---- chat template ------------------------------------------------------ */

struct vllm_chat_template {
    chat_template *ct;
};

vllm_status vllm_chat_template_load(const char *model, const char *override_source,
                                    vllm_chat_template **out) {
    *out = NULL;
    json_t *config = NULL;
    vllm_status rc0 = model ? tokenizer_load_config(model, &config) : VLLM_OK;
    if (rc0 != VLLM_OK) return rc0;
    vllm_chat_template *t = calloc(1, sizeof *t);
    vllm_status rc = t ? chat_template_create(config, override_source, &t->ct)
                       : vllm_error(VLLM_ERR_NOMEM, "vllm_chat_template_load: out of memory");
    json_decref(config);
    if (rc != VLLM_OK) {
        free(t);
        return rc;
    }
    *out = t;
    return VLLM_OK;
}

void vllm_chat_template_free(vllm_chat_template *t) {
    if (!t) return;
    chat_template_free(t->ct);
    free(t);
}

/* JSON text of the given type (JSON_ARRAY or JSON_OBJECT) into *out; NULL text: *out NULL. */
static vllm_status parse_json_arg(const char *what, const char *text, json_type type, json_t **out) {
    *out = NULL;
    if (!text) return VLLM_OK;
    json_error_t err;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &err);
    if (!v) return vllm_error(VLLM_ERR_INVALID, "%s: not JSON: %s (line %d)", what, err.text, err.line);
    if (json_typeof(v) != type) {
        json_decref(v);
        return vllm_error(VLLM_ERR_INVALID, "%s: must be a JSON %s", what, type == JSON_ARRAY ? "array" : "object");
    }
    *out = v;
    return VLLM_OK;
}

vllm_status vllm_chat_template_render(const vllm_chat_template *t, const char *messages_json,
                                      const char *tools_json, const char *kwargs_json,
                                      bool add_generation_prompt, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    json_t *messages = NULL, *prepared = NULL, *tools = NULL, *kwargs = NULL;
    vllm_status rc;
    if (!messages_json) return vllm_error(VLLM_ERR_INVALID, "messages: none given");
    if ((rc = parse_json_arg("messages", messages_json, JSON_ARRAY, &messages)) != VLLM_OK ||
        (rc = parse_json_arg("tools", tools_json, JSON_ARRAY, &tools)) != VLLM_OK ||
        (rc = parse_json_arg("chat_template_kwargs", kwargs_json, JSON_OBJECT, &kwargs)) != VLLM_OK ||
        (rc = chat_template_prepare_messages(messages, chat_template_content_format(t->ct), &prepared)) != VLLM_OK)
        goto done;
    chat_template_request req = {
        .messages = prepared,
        .tools = tools,
        .add_generation_prompt = add_generation_prompt,
        .kwargs = kwargs,
    };
    rc = chat_template_render(t->ct, &req, text, len);
done:
    json_decref(messages);
    json_decref(prepared);
    json_decref(tools);
    json_decref(kwargs);
    return rc;
}

/* ---- output processor --------------------------------------------------- */

vllm_status vllm_output_processor_create(const vllm_tokenizer *tok, vllm_output_processor **out) {
    return output_processor_create(tok->tok, out);
}

void vllm_output_processor_free(vllm_output_processor *op) { output_processor_free(op); }

vllm_status vllm_output_processor_add_request(vllm_output_processor *op, const vllm_output_request *req) {
    return output_processor_add_request(op, req);
}

vllm_status vllm_output_processor_process(vllm_output_processor *op, const vllm_step_output *out,
                                          const vllm_output_result **res) {
    return output_processor_process(op, out, res);
}

vllm_status vllm_output_processor_abort_all(vllm_output_processor *op, const vllm_output_result **res) {
    return output_processor_abort_all(op, res);
}
