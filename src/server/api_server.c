/*
 * api_server.c - see api_server.h.
 *
 * Routing is a table of exact paths (query strings are not part of the path
 * MHD gives us). What FastAPI would answer on its own is answered the same
 * way: {"detail":"Not Found"} for an unknown path, {"detail":"Method Not
 * Allowed"} for a known path with the wrong method. Auth follows vLLM's
 * middleware: only paths starting with /v1, OPTIONS exempt, 401
 * {"error":"Unauthorized"} (not the OpenAI error shape). POST bodies must be
 * application/json (vLLM's validate_json_request), else 400.
 */
#include "server/api_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "metrics/metrics.h"

struct api_server {
    http_server *http;
    serving_ctx *ctx;
    api_server_config cfg;
};

typedef void (*route_fn)(api_server *s, http_request *r);

typedef struct route {
    const char *path;
    const char *methods; /* "GET", "POST" or "GET, POST" */
    route_fn fn;
    bool json_body;      /* POST body must be application/json */
} route;

static void respond_json(http_request *r, int status, json_t *j) {
    char *s = j ? openai_dumps(j) : NULL;
    json_decref(j);
    if (s) http_respond(r, status, "application/json", s, strlen(s));
    else http_respond(r, 500, "application/json", "{}", 2);
    free(s);
}

static void respond_error(http_request *r, int status, const char *type, const char *param,
                          const char *msg) {
    openai_error e;
    openai_fail(&e, status, type, param, "%s", msg);
    serving_respond_error(r, &e);
}

/* ---- small endpoints ---------------------------------------------------------- */

static void h_health(api_server *s, http_request *r) {
    frontend_stats st;
    frontend_get_stats(s->ctx->fe, &st);
    if (st.engine_dead) respond_error(r, 503, "Service Unavailable", NULL, "The engine is dead.");
    else http_respond(r, 200, NULL, "", 0);
}

static void h_version(api_server *s, http_request *r) {
    json_t *j = json_object();
    json_object_set_new(j, "version", json_string(VLLMC_VERSION));
    respond_json(r, 200, j);
}

static void h_load(api_server *s, http_request *r) {
    json_t *j = json_object();
    json_object_set_new(j, "server_load", json_integer(atomic_load(&s->ctx->server_load)));
    respond_json(r, 200, j);
}

/* The exposition text; formatted outside the metrics' locks (a scrape never
 * stalls the output thread for longer than a copy of the values). */
static void h_metrics(api_server *s, http_request *r) {
    char *text = NULL;
    size_t len = 0;
    if (!s->ctx->metrics) {
        respond_error(r, 404, "NotFoundError", NULL, "metrics are not enabled");
        return;
    }
    if (metrics_render(s->ctx->metrics, vllm_monotonic_time(), &text, &len) != VLLM_OK) {
        respond_error(r, 500, "Internal Server Error", NULL, vllm_errmsg());
        return;
    }
    http_respond(r, 200, METRICS_CONTENT_TYPE, text, len);
    free(text);
}

static void h_models(api_server *s, http_request *r) {
    serving_ctx *c = s->ctx;
    json_t *data = json_array();
    int64_t now = (int64_t)time(NULL);
    for (int i = 0; i < c->num_served_names; i++) {
        json_t *perm = json_object();
        char pid[64];
        openai_random_id("modelperm-", pid, sizeof pid);
        json_object_set_new(perm, "id", json_string(pid));
        json_object_set_new(perm, "object", json_string("model_permission"));
        json_object_set_new(perm, "created", json_integer(now));
        json_object_set_new(perm, "allow_create_engine", json_false());
        json_object_set_new(perm, "allow_sampling", json_true());
        json_object_set_new(perm, "allow_logprobs", json_true());
        json_object_set_new(perm, "allow_search_indices", json_false());
        json_object_set_new(perm, "allow_view", json_true());
        json_object_set_new(perm, "allow_fine_tuning", json_false());
        json_object_set_new(perm, "organization", json_string("*"));
        json_object_set_new(perm, "group", json_null());
        json_object_set_new(perm, "is_blocking", json_false());
        json_t *card = json_object();
        json_object_set_new(card, "id", json_string(c->served_names[i]));
        json_object_set_new(card, "object", json_string("model"));
        json_object_set_new(card, "created", json_integer(now));
        json_object_set_new(card, "owned_by", json_string("vllm"));
        json_object_set_new(card, "root", json_string(c->model_root));
        json_object_set_new(card, "parent", json_null());
        json_object_set_new(card, "max_model_len", json_integer(c->max_model_len));
        json_t *perms = json_array();
        json_array_append_new(perms, perm);
        json_object_set_new(card, "permission", perms);
        json_array_append_new(data, card);
    }
    json_t *j = json_object();
    json_object_set_new(j, "object", json_string("list"));
    json_object_set_new(j, "data", data);
    respond_json(r, 200, j);
}

/* Parses a small JSON body into an object, or answers 400 and returns NULL. */
static json_t *body_object(http_request *r, const char *model_name) {
    size_t len;
    const char *body = http_request_body(r, &len);
    json_error_t err;
    json_t *j = json_loadb(body, len, JSON_ALLOW_NUL, &err);
    if (!j || !json_is_object(j)) {
        char msg[512];
        if (!j)
            snprintf(msg, sizeof msg, "1 validation error for %s\n  JSON decode error: %s (line %d, "
                     "column %d) [type=json_invalid]", model_name, err.text, err.line, err.column);
        else
            snprintf(msg, sizeof msg, "1 validation error for %s\n  Input should be a valid "
                     "dictionary or object to extract fields from [type=model_attributes_type]",
                     model_name);
        json_decref(j);
        respond_error(r, 400, "Bad Request", NULL, msg);
        return NULL;
    }
    return j;
}

static bool check_model_field(api_server *s, http_request *r, json_t *body) {
    json_t *m = json_object_get(body, "model");
    openai_error e;
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) {
            respond_error(r, 400, "Bad Request", "model", "1 validation error\nmodel\n  Input should be a valid string [type=string_type]");
            return false;
        }
        if (!serving_check_model(s->ctx, json_string_value(m), &e)) {
            serving_respond_error(r, &e);
            return false;
        }
    }
    return true;
}

static void h_tokenize(api_server *s, http_request *r) {
    json_t *body = body_object(r, "TokenizeRequest");
    if (!body || !check_model_field(s, r, body)) {
        json_decref(body);
        return;
    }
    int32_t *ids = NULL, n = 0;
    openai_error e = {0};
    json_t *rts = json_object_get(body, "return_token_strs");
    bool want_strs = json_is_true(rts);
    if (json_object_get(body, "messages")) {
        size_t len;
        const char *raw = http_request_body(r, &len);
        openai_request req;
        if (!openai_request_parse(raw, len, true, &req, &e) ||
            !serving_chat_prompt(s->ctx, &req, &ids, &n, &e)) {
            if (e.status == 0) openai_fail(&e, 500, "Internal Server Error", NULL, "tokenize failed");
            openai_request_free(&req);
            json_decref(body);
            serving_respond_error(r, &e);
            return;
        }
        openai_request_free(&req);
    } else {
        json_t *p = json_object_get(body, "prompt");
        json_t *ast = json_object_get(body, "add_special_tokens");
        if (!json_is_string(p)) {
            json_decref(body);
            respond_error(r, 400, "Bad Request", "prompt",
                          "1 validation error for TokenizeCompletionRequest\nprompt\n  Input should "
                          "be a valid string [type=string_type]");
            return;
        }
        bool add = ast && !json_is_null(ast) ? json_is_true(ast) : true;
        if (!serving_tokenize_prompt(s->ctx, json_string_value(p), json_string_length(p), add, &ids,
                                     &n, &e)) {
            json_decref(body);
            serving_respond_error(r, &e);
            return;
        }
    }
    json_t *j = json_object();
    json_object_set_new(j, "count", json_integer(n));
    json_object_set_new(j, "max_model_len", json_integer(s->ctx->max_model_len));
    json_t *toks = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    json_object_set_new(j, "tokens", toks);
    if (want_strs) {
        json_t *strs = json_array();
        for (int32_t i = 0; i < n; i++) {
            const char *piece = tokenizer_id_to_piece(s->ctx->tok, ids[i]);
            json_array_append_new(strs, piece ? openai_json_text(piece, strlen(piece)) : json_string(""));
        }
        json_object_set_new(j, "token_strs", strs);
    } else {
        json_object_set_new(j, "token_strs", json_null());
    }
    free(ids);
    json_decref(body);
    respond_json(r, 200, j);
}

static void h_detokenize(api_server *s, http_request *r) {
    json_t *body = body_object(r, "DetokenizeRequest");
    if (!body || !check_model_field(s, r, body)) {
        json_decref(body);
        return;
    }
    json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks)) {
        json_decref(body);
        respond_error(r, 400, "Bad Request", "tokens",
                      "1 validation error for DetokenizeRequest\ntokens\n  Input should be a valid "
                      "list [type=list_type]");
        return;
    }
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t i;
    json_t *v;
    json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX) {
            free(ids);
            json_decref(body);
            respond_error(r, 400, "Bad Request", "tokens",
                          "1 validation error for DetokenizeRequest\ntokens\n  Input should be a "
                          "valid integer [type=int_type]");
            return;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    openai_error e;
    if (n > 0 && !serving_check_prompt_ids(s->ctx, ids, (int32_t)n, &e)) {
        free(ids);
        json_decref(body);
        serving_respond_error(r, &e);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    vllm_status rc = tokenizer_decode(s->ctx->tok, ids, (int32_t)n, false, &text, &len);
    free(ids);
    json_decref(body);
    if (rc != VLLM_OK) {
        respond_error(r, 400, "BadRequestError", "tokens", vllm_errmsg());
        return;
    }
    json_t *j = json_object();
    json_object_set_new(j, "prompt", openai_json_text(text, len));
    free(text);
    respond_json(r, 200, j);
}

static void h_generate(api_server *s, http_request *r, bool chat) {
    size_t len;
    const char *body = http_request_body(r, &len);
    openai_request req;
    openai_error e;
    if (!openai_request_parse(body, len, chat, &req, &e)) {
        serving_respond_error(r, &e);
        return;
    }
    if (chat) serving_chat_completions(s->ctx, r, &req);
    else serving_completions(s->ctx, r, &req);
}

static void h_completions(api_server *s, http_request *r) { h_generate(s, r, false); }
static void h_responses(api_server *s, http_request *r) { serving_responses_create(s->ctx, r); }
static void h_chat(api_server *s, http_request *r) { h_generate(s, r, true); }

static const route routes[] = {
    {"/health", "GET", h_health, false},
    {"/load", "GET", h_load, false},
    {"/metrics", "GET", h_metrics, false},
    {"/ping", "GET, POST", h_health, false},
    {"/tokenize", "POST", h_tokenize, true},
    {"/detokenize", "POST", h_detokenize, true},
    {"/v1/models", "GET", h_models, false},
    {"/version", "GET", h_version, false},
    {"/v1/chat/completions", "POST", h_chat, true},
    {"/v1/completions", "POST", h_completions, true},
    {"/v1/responses", "POST", h_responses, true},
};

/* Routes with a path parameter: /v1/responses/{response_id}[/cancel]. */
#define RESPONSES_PREFIX "/v1/responses/"

static bool method_allowed(const char *methods, const char *m) {
    size_t n = strlen(m);
    for (const char *p = methods; (p = strstr(p, m)); p += n)
        if ((p == methods || p[-1] == ' ') && (p[n] == 0 || p[n] == ',')) return true;
    return false;
}

/* constant-time comparison of the bearer token with each key */
static bool authorized(api_server *s, http_request *r) {
    const char *h = http_request_header(r, "Authorization");
    if (!h) return false;
    const char *sp = strchr(h, ' ');
    if (!sp || (size_t)(sp - h) != 6 || strncasecmp(h, "bearer", 6)) return false;
    const char *tok = sp + 1;
    size_t tl = strlen(tok);
    bool ok = false;
    for (int i = 0; i < s->cfg.num_api_keys; i++) {
        const char *k = s->cfg.api_keys[i];
        size_t kl = strlen(k);
        unsigned char diff = (unsigned char)(kl != tl);
        for (size_t j = 0; j < kl; j++) diff |= (unsigned char)(k[j] ^ (j < tl ? tok[j] : 0));
        ok |= diff == 0;
    }
    return ok;
}

static void handle(void *ud, http_request *r) {
    api_server *s = ud;
    const char *path = http_request_path(r), *method = http_request_method(r);
    if (s->cfg.num_api_keys > 0 && !strncmp(path, "/v1", 3) && strcmp(method, "OPTIONS") &&
        !authorized(s, r)) {
        static const char unauth[] = "{\"error\":\"Unauthorized\"}";
        http_respond(r, 401, "application/json", unauth, sizeof unauth - 1);
        return;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route *rt = &routes[i];
        if (strcmp(rt->path, path)) continue;
        if (!method_allowed(rt->methods, method)) {
            static const char body[] = "{\"detail\":\"Method Not Allowed\"}";
            http_respond(r, 405, "application/json", body, sizeof body - 1);
            return;
        }
        if (rt->json_body) {
            const char *ct = http_request_header(r, "Content-Type");
            size_t n = ct ? strcspn(ct, ";") : 0;
            while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
            if (!ct || n != 16 || strncasecmp(ct, "application/json", 16)) {
                respond_error(r, 400, "Bad Request", NULL,
                              "Unsupported Media Type: Only 'application/json' is allowed");
                return;
            }
        }
        rt->fn(s, r);
        return;
    }
    if (!strncmp(path, RESPONSES_PREFIX, sizeof RESPONSES_PREFIX - 1)) {
        serving_responses_get(s->ctx, r, path + sizeof RESPONSES_PREFIX - 1);
        return;
    }
    static const char body[] = "{\"detail\":\"Not Found\"}";
    http_respond(r, 404, "application/json", body, sizeof body - 1);
}

/* Seconds a connection may sit idle (no bytes either way, not waiting for
 * the engine) before it is closed: slowloris clients and dead peers cost a
 * socket only this long. VLLM_HTTP_TIMEOUT_KEEP_ALIVE as in vLLM (which
 * hands it to uvicorn; its default is 5 s, ours 120 s because libmicrohttpd
 * applies it to every idle period, not only between requests). */
static unsigned http_timeout_s(void) {
    const char *v = getenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE");
    long t = v && *v ? strtol(v, NULL, 10) : 120;
    return t > 0 && t < 86400 ? (unsigned)t : 120;
}

/* Every ended exchange, by route template ("none" for unmatched paths; the
 * metrics leave out /metrics, /health and the like themselves). */
static void on_http_end(void *ud, const char *method, const char *path, int status, double seconds,
                        size_t request_bytes, size_t response_bytes) {
    api_server *s = ud;
    const char *handler = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0] && !handler; i++)
        if (!strcmp(routes[i].path, path)) handler = routes[i].path;
    if (!handler && !strncmp(path, RESPONSES_PREFIX, sizeof RESPONSES_PREFIX - 1))
        handler = strstr(path + sizeof RESPONSES_PREFIX - 1, "/cancel") ? "/v1/responses/{response_id}/cancel"
                                                                        : "/v1/responses/{response_id}";
    metrics_http_observe(s->ctx->metrics, handler, method, status, seconds, (int64_t)request_bytes,
                         (int64_t)response_bytes);
}

vllm_status api_server_start(serving_ctx *ctx, const api_server_config *cfg, api_server **out) {
    *out = NULL;
    api_server *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "api server: out of memory");
    s->ctx = ctx;
    s->cfg = *cfg;
    http_server_config hc = {
        .host = cfg->host,
        .port = cfg->port,
        .uds = cfg->uds,
        .ssl_keyfile = cfg->ssl_keyfile,
        .ssl_certfile = cfg->ssl_certfile,
        .ssl_ca_certs = cfg->ssl_ca_certs,
        .ssl_cert_reqs = cfg->ssl_cert_reqs,
        .max_body_bytes = cfg->max_body_bytes,
        .num_threads = cfg->num_http_threads,
        .timeout_s = http_timeout_s(),
        .access_log = cfg->access_log,
        .handler = handle,
        .handler_ud = s,
        .on_end = ctx->metrics ? on_http_end : NULL,
    };
    log_info("Available routes are:");
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        log_info("Route: %s, Methods: %s", routes[i].path, routes[i].methods);
    vllm_status rc = http_server_start(&hc, &s->http);
    if (rc != VLLM_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return VLLM_OK;
}

int api_server_port(const api_server *s) { return http_server_port(s->http); }

void api_server_stop(api_server *s, double grace_s) {
    if (!s) return;
    http_server_stop(s->http, grace_s);
    free(s);
}
