/*
 * serving_kv.c - kv_transfer_params in responses (vLLM's P/D handshake).
 *
 * A disaggregation proxy sends a prompt to a prefill instance with
 * kv_transfer_params {"do_remote_decode": true} and max_tokens 1, then the
 * same request to a decode instance with the kv_transfer_params the prefill
 * response returned. vLLM's NixlConnector fills them with where the blocks
 * are (remote_host, remote_port, remote_block_ids); our connectors name
 * blocks by their chained hash in a shared store, so the decode side finds
 * them by the prompt alone and the parameters only say that a remote
 * prefill happened and which engine did it; a TcpConnector producer adds
 * remote_host and remote_port, where its KV server answers, and a
 * TcpConnector consumer fetches the blocks from there (serving_kv_remote). A request without
 * do_remote_decode, or an engine that saves nothing, gets null, as vLLM
 * answers without a connector.
 */
#include "server/serving.h"

json_t *serving_kv_transfer_params(const serving_ctx *ctx, const openai_request *req, const char *request_id) {
    json_t *in = req->kv_transfer_params;
    if (!ctx->kv_engine_id || !in || !json_is_true(json_object_get(in, "do_remote_decode"))) return json_null();
    json_t *o = json_object();
    if (!o) return json_null();
    json_object_set_new(o, "do_remote_prefill", json_true());
    json_object_set_new(o, "do_remote_decode", json_false());
    json_object_set_new(o, "remote_engine_id", json_string(ctx->kv_engine_id));
    json_object_set_new(o, "remote_request_id", json_string(request_id));
    json_object_set_new(o, "remote_block_ids", json_array());
    if (ctx->kv_host) {
        json_object_set_new(o, "remote_host", json_string(ctx->kv_host));
        json_object_set_new(o, "remote_port", json_integer(ctx->kv_port));
    }
    return o;
}

const char *serving_kv_remote(const openai_request *req, int32_t *port) {
    json_t *in = req->kv_transfer_params;
    *port = 0;
    json_t *h = json_object_get(in, "remote_host"), *p = json_object_get(in, "remote_port");
    if (!in || !json_is_true(json_object_get(in, "do_remote_prefill")) || !json_is_string(h) || !json_is_integer(p) ||
        json_integer_value(p) <= 0 || json_integer_value(p) > 65535)
        return NULL;
    *port = (int32_t)json_integer_value(p);
    return json_string_value(h);
}
