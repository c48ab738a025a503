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
 *
 * CORS is Starlette's CORSMiddleware with vLLM's arguments (--allowed-origins,
 * --allowed-methods, --allowed-headers, default ["*"]; --allow-credentials),
 * in vLLM's middleware order: X-Request-Id outermost, then auth, then CORS,
 * then the routes. So:
 *   - a request without Origin gets no Access-Control-* header;
 *   - a preflight (OPTIONS with Origin and Access-Control-Request-Method) is
 *     answered by CORS itself, for any path: 200 "OK", or 400 "Disallowed
 *     CORS origin, method, headers" naming what failed, with
 *     Access-Control-Allow-Methods / -Max-Age 600 / -Allow-Headers (the
 *     requested ones when all are allowed) / -Allow-Origin ("*", or the
 *     origin when origins are listed or credentials allowed, with Vary:
 *     Origin) / -Allow-Credentials;
 *   - any other request with Origin gets Access-Control-Allow-Origin ("*",
 *     or the origin itself when it is listed, or when all are allowed but
 *     the request carries a Cookie, with Vary: Origin) and
 *     Access-Control-Allow-Credentials when allowed, on whatever the route
 *     answers (errors and streams included);
 *   - a 401 from auth has none (auth is outside CORS in vLLM too).
 * --enable-request-id-headers: X-Request-Id on every response, the request's
 * own or a new uuid4 hex (vLLM's XRequestIdMiddleware).
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
    /* CORS, resolved at start (CORSMiddleware.__init__) */
    bool all_origins, all_headers, explicit_origin;
    char *methods_str;          /* "DELETE, GET, ..." (Access-Control-Allow-Methods) */
    char *headers_str;          /* safelisted + allowed, sorted, or NULL when all */
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
        json_t *card = openai_model_card(c->served_names[i], c->model_root, NULL, c->max_model_len, now);
        json_array_append_new(data, card);
    }
    serving_lora_models(c, data, now); /* adapters, parent = the base model */
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
static void h_load_lora(api_server *s, http_request *r) { serving_load_lora_adapter(s->ctx, r); }
static void h_unload_lora(api_server *s, http_request *r) { serving_unload_lora_adapter(s->ctx, r); }

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
    {"/v1/load_lora_adapter", "POST", h_load_lora, true},
    {"/v1/unload_lora_adapter", "POST", h_unload_lora, true},
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

/* ---- CORS -------------------------------------------------------------------- */

static bool list_has(const char *const *list, int n, const char *v) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], v)) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Joins strs (n) with ", " into a malloc'ed string. */
static char *join(const char *const *strs, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(strs[i]) + 2;
    char *out = malloc(len), *p = out;
    if (!out) return NULL;
    *p = 0;
    for (int i = 0; i < n; i++) p += sprintf(p, "%s%s", i ? ", " : "", strs[i]);
    return out;
}

static vllm_status cors_init(api_server *s) {
    const api_server_config *c = &s->cfg;
    static const char *const star[] = {"*"};
    static const char *const all_methods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
    static const char *const safelisted[] = {"Accept", "Accept-Language", "Content-Language", "Content-Type"};
    if (!c->num_allowed_origins) s->cfg.allowed_origins = star, s->cfg.num_allowed_origins = 1;
    if (!c->num_allowed_methods) s->cfg.allowed_methods = star, s->cfg.num_allowed_methods = 1;
    if (!c->num_allowed_headers) s->cfg.allowed_headers = star, s->cfg.num_allowed_headers = 1;
    s->all_origins = list_has(c->allowed_origins, c->num_allowed_origins, "*");
    s->all_headers = list_has(c->allowed_headers, c->num_allowed_headers, "*");
    s->explicit_origin = !s->all_origins || c->allow_credentials;
    if (list_has(c->allowed_methods, c->num_allowed_methods, "*")) {
        s->cfg.allowed_methods = all_methods;
        s->cfg.num_allowed_methods = (int)(sizeof all_methods / sizeof all_methods[0]);
    }
    s->methods_str = join(s->cfg.allowed_methods, s->cfg.num_allowed_methods);
    if (!s->methods_str) return vllm_error(VLLM_ERR_NOMEM, "api server: out of memory");
    if (s->all_headers) return VLLM_OK;
    /* sorted(SAFELISTED_HEADERS | set(allow_headers)) */
    int n = 0, cap = 4 + c->num_allowed_headers;
    const char **h = malloc(sizeof *h * (size_t)cap);
    if (!h) return vllm_error(VLLM_ERR_NOMEM, "api server: out of memory");
    for (int i = 0; i < 4; i++) h[n++] = safelisted[i];
    for (int i = 0; i < c->num_allowed_headers; i++)
        if (!list_has(h, n, c->allowed_headers[i])) h[n++] = c->allowed_headers[i];
    qsort(h, (size_t)n, sizeof *h, cmp_str);
    s->headers_str = join(h, n);
    free(h);
    return s->headers_str ? VLLM_OK : vllm_error(VLLM_ERR_NOMEM, "api server: out of memory");
}

static bool origin_allowed(const api_server *s, const char *origin) {
    return s->all_origins || list_has(s->cfg.allowed_origins, s->cfg.num_allowed_origins, origin);
}

/* A requested header is allowed when it is, lower-cased, one of the allowed
 * or safelisted headers lower-cased (Starlette compares them that way). */
static bool header_allowed(const api_server *s, const char *h, size_t n) {
    const char *list = s->headers_str;
    while (*list) {
        size_t m = strcspn(list, ",");
        if (m == n && !strncasecmp(list, h, n)) return true;
        list += m;
        while (*list == ',' || *list == ' ') list++;
    }
    return false;
}

/* CORSMiddleware.preflight_response */
static void cors_preflight(api_server *s, http_request *r, const char *origin) {
    const char *method = http_request_header(r, "Access-Control-Request-Method");
    const char *req_headers = http_request_header(r, "Access-Control-Request-Headers");
    char failures[64] = "";
    if (s->explicit_origin) http_request_add_header(r, "Vary", "Origin");
    else http_request_add_header(r, "Access-Control-Allow-Origin", "*");
    http_request_add_header(r, "Access-Control-Allow-Methods", s->methods_str);
    http_request_add_header(r, "Access-Control-Max-Age", "600");
    if (!s->all_headers) http_request_add_header(r, "Access-Control-Allow-Headers", s->headers_str);
    if (s->cfg.allow_credentials) http_request_add_header(r, "Access-Control-Allow-Credentials", "true");
    if (origin_allowed(s, origin)) {
        if (s->explicit_origin) http_request_add_header(r, "Access-Control-Allow-Origin", origin);
    } else {
        strcat(failures, "origin");
    }
    if (!list_has(s->cfg.allowed_methods, s->cfg.num_allowed_methods, method))
        strcat(failures, *failures ? ", method" : "method");
    if (s->all_headers && req_headers) {
        http_request_add_header(r, "Access-Control-Allow-Headers", req_headers);
    } else if (req_headers) {
        for (const char *p = req_headers;;) {
            size_t n = strcspn(p, ",");
            const char *a = p, *b = p + n;
            while (a < b && (*a == ' ' || *a == '\t')) a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
            if (!header_allowed(s, a, (size_t)(b - a))) {
                strcat(failures, *failures ? ", headers" : "headers");
                break;
            }
            if (!p[n]) break;
            p += n + 1;
        }
    }
    char body[96];
    int n = *failures ? snprintf(body, sizeof body, "Disallowed CORS %s", failures)
                      : snprintf(body, sizeof body, "OK");
    http_respond(r, *failures ? 400 : 200, "text/plain; charset=utf-8", body, (size_t)n);
}

/* CORSMiddleware.simple_response's headers, on whatever the route answers. */
static void cors_simple(api_server *s, http_request *r, const char *origin) {
    bool cookie = http_request_header(r, "Cookie") != NULL;
    if ((s->all_origins && cookie) || (!s->all_origins && origin_allowed(s, origin))) {
        http_request_add_header(r, "Access-Control-Allow-Origin", origin);
        http_request_add_header(r, "Vary", "Origin");
    } else if (s->all_origins) {
        http_request_add_header(r, "Access-Control-Allow-Origin", "*");
    }
    if (s->cfg.allow_credentials) http_request_add_header(r, "Access-Control-Allow-Credentials", "true");
}

static void handle(void *ud, http_request *r) {
    api_server *s = ud;
    const char *path = http_request_path(r), *method = http_request_method(r);
    if (s->cfg.enable_request_id_headers) {
        const char *rid = http_request_header(r, "X-Request-Id");
        char fresh[40];
        if (!rid) {
            openai_random_id("", fresh, sizeof fresh);
            rid = fresh;
        }
        http_request_add_header(r, "X-Request-Id", rid);
    }
    if (s->cfg.num_api_keys > 0 && !strncmp(path, "/v1", 3) && strcmp(method, "OPTIONS") &&
        !authorized(s, r)) {
        static const char unauth[] = "{\"error\":\"Unauthorized\"}";
        http_respond(r, 401, "application/json", unauth, sizeof unauth - 1);
        return;
    }
    const char *origin = http_request_header(r, "Origin");
    if (origin && !strcmp(method, "OPTIONS") && http_request_header(r, "Access-Control-Request-Method")) {
        cors_preflight(s, r, origin);
        return;
    }
    if (origin) cors_simple(s, r, origin);
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
    vllm_status rc = cors_init(s);
    if (rc != VLLM_OK) {
        free(s->methods_str);
        free(s);
        return rc;
    }
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
    rc = http_server_start(&hc, &s->http);
    if (rc != VLLM_OK) {
        free(s->methods_str);
        free(s->headers_str);
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
    free(s->methods_str);
    free(s->headers_str);
    free(s);
}
