/*
 * api_server.h - vLLM's api_server.py: the OpenAI-compatible routes over the
 * HTTP layer, --api-key auth, and the small endpoints (/health, /ping,
 * /version, /load, /metrics, /v1/models, /tokenize, /detokenize), CORS and
 * X-Request-Id headers. Generation routes go to serving.c.
 */
#ifndef VLLM_SERVER_API_SERVER_H
#define VLLM_SERVER_API_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "server/serving.h"

#define VLLMC_VERSION "0.11.0"

typedef struct api_server_config {
    const char *host;               /* NULL = every interface */
    int port;                       /* 0 = ephemeral */
    const char *uds;                /* --uds: a Unix socket instead of host:port */
    const char *ssl_keyfile, *ssl_certfile, *ssl_ca_certs; /* --ssl-*: HTTPS (http.h) */
    int ssl_cert_reqs;
    const char *const *api_keys;    /* --api-key (and VLLM_API_KEY); none = no auth */
    int num_api_keys;
    size_t max_body_bytes;
    int num_http_threads;
    bool access_log;                /* uvicorn-style line per request */
    /* CORS (Starlette's CORSMiddleware as vLLM configures it): each list NULL
     * (or empty) = vLLM's default ["*"]. Borrowed; must outlive the server. */
    const char *const *allowed_origins;   /* --allowed-origins */
    int num_allowed_origins;
    const char *const *allowed_methods;   /* --allowed-methods */
    int num_allowed_methods;
    const char *const *allowed_headers;   /* --allowed-headers */
    int num_allowed_headers;
    bool allow_credentials;               /* --allow-credentials */
    bool enable_request_id_headers;       /* X-Request-Id on every response */
} api_server_config;

typedef struct api_server api_server;

/* Starts listening; ctx (borrowed) must outlive the server. */
vllm_status api_server_start(serving_ctx *ctx, const api_server_config *cfg, api_server **out);
int api_server_port(const api_server *s);
/* Stops accepting; waits up to grace_s for exchanges to end; frees s. */
void api_server_stop(api_server *s, double grace_s);

#endif
