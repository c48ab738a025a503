/*
 * http.h - the HTTP/1.1 server under the OpenAI API, on libmicrohttpd.
 *
 * One http_request per HTTP exchange. The handler runs on an MHD polling
 * thread once the headers and the whole body are in (bodies above the limit
 * get 413 without reaching it), and does exactly one of:
 *   - http_respond(): a complete response, now;
 *   - http_request_defer(): no response yet. The connection is suspended (no
 *     thread waits on it) until another thread calls http_request_finish()
 *     (a complete response) or http_request_start_stream() (status and
 *     headers now, the body later with http_request_write() and ended by
 *     http_request_end_stream()). Streamed bytes are pulled by MHD when the
 *     socket can take them; while none are queued the connection is suspended
 *     again, so a slow client costs memory, never a thread or a spin.
 *
 * Lifetime: the server holds one reference until the exchange ends (response
 * sent, or the client went away); whoever keeps a request past its handler
 * (to finish or stream it later) takes another with http_request_retain()
 * and drops it with http_request_release(). Producer calls after the
 * exchange ended are harmless no-ops. http_request_on_close() registers a
 * callback run once when the exchange ends, with completed=false when the
 * client disconnected or the response could not be sent.
 *
 * The server's on_end hook (optional) sees every exchange when it ends, on
 * the MHD thread: for HTTP metrics (prometheus_fastapi_instrumentator).
 */
#ifndef VLLM_SERVER_HTTP_H
#define VLLM_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm/status.h"

typedef struct http_server http_server;
typedef struct http_request http_request;

typedef void (*http_handler_fn)(void *ud, http_request *req);
typedef void (*http_close_fn)(void *arg, bool completed);
/* An exchange ended: status is the one queued (0 if none was), seconds from
 * its first byte to its end (streaming included), request_bytes the body
 * received, response_bytes the body handed to the socket. */
typedef void (*http_end_fn)(void *ud, const char *method, const char *path, int status,
                            double seconds, size_t request_bytes, size_t response_bytes);

typedef struct http_server_config {
    const char *host;      /* NULL or "" = every interface (IPv4 and IPv6) */
    int port;              /* 0 = an ephemeral port (see http_server_port) */
    const char *uds;       /* serve on this Unix domain socket instead of host:port
                              (--uds; a stale socket file there is replaced) */
    /* HTTPS (vLLM's --ssl-*): PEM files; key and certificate together turn
     * TLS on. ca_certs is the trust list for client certificates, which are
     * requested when it is given; cert_reqs as Python's ssl.CERT_NONE (0),
     * CERT_OPTIONAL (1: a certificate sent must verify), CERT_REQUIRED (2:
     * one must be sent and verify). A request whose client certificate does
     * not pass gets 403 naming why; the connection and the server carry on. */
    const char *ssl_keyfile, *ssl_certfile, *ssl_ca_certs;
    int ssl_cert_reqs;
    size_t max_body_bytes; /* larger request bodies get 413 */
    int num_threads;       /* MHD polling threads (>= 1) */
    unsigned timeout_s;    /* idle keep-alive timeout; 0 = none */
    bool access_log;       /* log each exchange as uvicorn does */
    http_handler_fn handler;
    void *handler_ud;      /* also on_end's */
    http_end_fn on_end;    /* NULL: none */
} http_server_config;

vllm_status http_server_start(const http_server_config *cfg, http_server **out);
/* The bound port (useful with port 0); 0 on a Unix socket. */
int http_server_port(const http_server *s);
/* Number of exchanges not yet ended. */
int http_server_num_active(http_server *s);
/* Stops accepting connections, waits up to grace_s seconds for exchanges in
 * flight to end (their owners are expected to finish them), ends the rest
 * with 503, then stops the daemon and frees s. NULL is a no-op. */
void http_server_stop(http_server *s, double grace_s);

/* ---- the request (accessors valid while a reference is held) ---------- */
const char *http_request_method(const http_request *r);
const char *http_request_path(const http_request *r);
/* Body bytes (NUL-terminated; len may be NULL). */
const char *http_request_body(const http_request *r, size_t *len);
/* A request header / query argument, or NULL. Only inside the handler. */
const char *http_request_header(http_request *r, const char *name);
const char *http_request_query(http_request *r, const char *key);

/* ---- responding --------------------------------------------------------- */
/* Inside the handler, before responding or deferring: one more header on
 * whatever response this exchange gets (e.g. Retry-After on a 503). At most
 * HTTP_MAX_EXTRA_HEADERS; name and value are copied. */
#define HTTP_MAX_EXTRA_HEADERS 8
void http_request_add_header(http_request *r, const char *name, const char *value);
/* A complete response from inside the handler; body is copied. */
void http_respond(http_request *r, int status, const char *content_type, const char *body,
                  size_t len);
/* Inside the handler: no response now; finish or stream from any thread later. */
void http_request_defer(http_request *r);
/* From any thread, for a deferred request: a complete response (body copied). */
void http_request_finish(http_request *r, int status, const char *content_type,
                         const char *body, size_t len);
/* From any thread, for a deferred request: send status and headers now; the
 * body follows as written (chunked transfer encoding). */
void http_request_start_stream(http_request *r, int status, const char *content_type);
/* Appends body bytes (copied) to a started stream; false if the exchange has
 * ended (the client is gone), no memory, or the client reads so slowly that
 * HTTP_STREAM_MAX_PENDING bytes are already queued (the caller then treats
 * it as gone: per-client memory stays bounded whatever the client does). */
#define HTTP_STREAM_MAX_PENDING ((size_t)16 << 20)
bool http_request_write(http_request *r, const char *data, size_t len);
/* Ends the stream once the queued bytes are sent. */
void http_request_end_stream(http_request *r);

/* For a deferred request whose connection waits suspended (MHD does not
 * watch it then): has the client closed its side? Any thread; cheap (a
 * non-blocking peek at the socket). */
bool http_request_peer_closed(http_request *r);

void http_request_on_close(http_request *r, http_close_fn fn, void *arg);
void http_request_retain(http_request *r);
void http_request_release(http_request *r);

#endif
