/*
 * http.c - see http.h. libmicrohttpd (Debian 12: 0.9.75) with its own
 * polling threads (poll(), see below) and MHD_ALLOW_SUSPEND_RESUME.
 *
 * Why suspend/resume and not a thread per connection: a server holds as many
 * open streams as the engine runs sequences (hundreds), almost all of them
 * idle between two tokens. With a thread per connection each stream would pin
 * a thread blocked on a condition variable; here a small fixed pool of MHD
 * threads serves them all. A streaming response is a content-reader callback:
 * MHD asks for bytes only when the socket is writable (pull, so backpressure
 * is free); when our queue is empty the reader suspends the connection and
 * returns 0, and the producer resumes it when it appends bytes. Nothing polls
 * and nothing spins. The cost: MHD does not notice a client that went away
 * while its connection is suspended; it notices on the next write attempt,
 * which comes with the next token.
 *
 * Locking. Each request has a mutex guarding its deferred action, its stream
 * buffer and the `suspended` flag. The invariant that makes resume safe
 * (MHD forbids resuming a connection that is not suspended): `suspended` is
 * set and MHD_suspend_connection() called under the request's mutex on the
 * MHD thread; a producer clears the flag under the mutex and only then calls
 * MHD_resume_connection() (after unlocking; nobody else can resume or touch
 * the suspended connection in between). MHD's own mutexes are never held
 * while we wait for ours.
 *
 * Shutdown: MHD must not be stopped with suspended connections. The server
 * keeps a list of live exchanges; http_server_stop() waits for them, then
 * finishes whatever is still deferred with 503 (which resumes it), and stops.
 *
 * Why poll() and not epoll (MHD_USE_AUTO's pick): under epoll,
 * MHD_quiesce_daemon() deletes the listen socket from each polling thread's
 * epoll set while that thread, if awake, may be deleting it too; the loser
 * gets ENOENT and MHD aborts the process (0.9.75 and later; seen as SIGABRT
 * on SIGTERM with traffic, tests/test_http_shutdown.c). With poll() quiesce
 * only flags the threads and wakes them. Suspended connections are not in
 * the poll set, so idle streams cost poll() nothing.
 */
#include "server/http.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

enum pending { PENDING_NONE, PENDING_FINISH, PENDING_STREAM };

struct http_request {
    pthread_mutex_t mu;
    atomic_int refs;
    http_server *srv;
    struct MHD_Connection *conn;
    char *method, *path;
    char version[16];
    int status;       /* the status queued (for the access log) */
    double t0;        /* monotonic, when the request line came in (on_end) */
    size_t bytes_out; /* response body bytes handed to MHD (on_end) */
    /* body, accumulated on the MHD thread before the handler runs */
    char *body;
    size_t body_len, body_cap;
    bool too_large, dispatched, in_handler, responded, deferred;
    /* guarded by mu */
    bool suspended;   /* MHD_suspend_connection() called, not yet resumed */
    bool ended;       /* the exchange is over (notify-completed ran) */
    enum pending pending;
    int pend_status;
    char *pend_ctype, *pend_body;
    size_t pend_len;
    char *sbuf;       /* stream bytes not yet handed to MHD: sbuf[soff, slen) */
    size_t soff, slen, scap;
    bool stream_end;
    http_close_fn close_fn;
    void *close_arg;
    /* extra response headers (http_request_add_header), set inside the handler */
    char *xhdr_name[HTTP_MAX_EXTRA_HEADERS], *xhdr_value[HTTP_MAX_EXTRA_HEADERS];
    int num_xhdr;
    /* server's list of live exchanges (srv->mu) */
    http_request *prev, *next;
};

struct http_server {
    struct MHD_Daemon *daemon;
    http_server_config cfg;
    int port;
    char *tls_key, *tls_cert, *tls_trust; /* PEM text, alive as long as the daemon */
    int uds_fd;                           /* the Unix socket we bound, -1 if none */
    char *uds_path;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when an exchange ends */
    http_request *live;
    int num_live;
};

static void request_free(http_request *r) {
    pthread_mutex_destroy(&r->mu);
    free(r->method);
    free(r->path);
    free(r->body);
    free(r->pend_ctype);
    free(r->pend_body);
    free(r->sbuf);
    for (int i = 0; i < r->num_xhdr; i++) {
        free(r->xhdr_name[i]);
        free(r->xhdr_value[i]);
    }
    free(r);
}

void http_request_retain(http_request *r) { atomic_fetch_add(&r->refs, 1); }

void http_request_release(http_request *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) request_free(r);
}

const char *http_request_method(const http_request *r) { return r->method; }
const char *http_request_path(const http_request *r) { return r->path; }

const char *http_request_body(const http_request *r, size_t *len) {
    if (len) *len = r->body_len;
    return r->body ? r->body : "";
}

const char *http_request_header(http_request *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_request_query(http_request *r, const char *key) {
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

bool http_request_peer_closed(http_request *r) {
    bool closed = false;
    pthread_mutex_lock(&r->mu);
    if (r->ended) {
        closed = true;
    } else if (r->suspended) { /* only then is the socket certainly still open and idle */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) {
            char c;
            ssize_t n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return closed;
}

void http_request_on_close(http_request *r, http_close_fn fn, void *arg) {
    pthread_mutex_lock(&r->mu);
    r->close_fn = fn;
    r->close_arg = arg;
    pthread_mutex_unlock(&r->mu);
}

void http_request_add_header(http_request *r, const char *name, const char *value) {
    if (!r->in_handler || r->num_xhdr == HTTP_MAX_EXTRA_HEADERS) return;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return;
    }
    r->xhdr_name[r->num_xhdr] = n;
    r->xhdr_value[r->num_xhdr++] = v;
}

static void add_extra_headers(const http_request *r, struct MHD_Response *resp) {
    for (int i = 0; i < r->num_xhdr; i++) MHD_add_response_header(resp, r->xhdr_name[i], r->xhdr_value[i]);
}

static enum MHD_Result queue_buffer(http_request *r, int status, const char *ctype, const char *body,
                                    size_t len) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    if (ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    add_extra_headers(r, resp);
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ok;
}

void http_respond(http_request *r, int status, const char *content_type, const char *body,
                  size_t len) {
    if (!r->in_handler || r->responded || r->deferred) {
        log_error("http: respond outside the handler or twice (%s %s)", r->method, r->path);
        return;
    }
    r->responded = true;
    r->status = status;
    r->bytes_out = len;
    if (queue_buffer(r, status, content_type, body, len) != MHD_YES)
        log_warn("http: could not queue a %d response for %s %s", status, r->method, r->path);
}

void http_request_defer(http_request *r) {
    if (!r->in_handler || r->responded) return;
    pthread_mutex_lock(&r->mu);
    r->deferred = true;
    pthread_mutex_unlock(&r->mu);
}

/* Sets the deferred action; resumes the connection if it waits for it. */
static void set_pending(http_request *r, enum pending kind, int status, const char *ctype,
                        const char *body, size_t len) {
    char *ct = ctype ? strdup(ctype) : NULL;
    char *b = NULL;
    if (body && len) {
        b = malloc(len);
        if (b) memcpy(b, body, len);
    }
    bool resume = false;
    pthread_mutex_lock(&r->mu);
    if (!r->ended && r->pending == PENDING_NONE) {
        r->pending = kind;
        r->pend_status = status;
        r->pend_ctype = ct;
        r->pend_body = b;
        r->pend_len = b ? len : 0;
        ct = b = NULL;
        if (r->suspended) {
            r->suspended = false;
            resume = true;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (resume) MHD_resume_connection(r->conn);
    free(ct);
    free(b);
}

void http_request_finish(http_request *r, int status, const char *content_type, const char *body,
                         size_t len) {
    set_pending(r, PENDING_FINISH, status, content_type, body, len);
}

void http_request_start_stream(http_request *r, int status, const char *content_type) {
    set_pending(r, PENDING_STREAM, status, content_type, NULL, 0);
}

bool http_request_write(http_request *r, const char *data, size_t len) {
    bool ok = false, resume = false;
    pthread_mutex_lock(&r->mu);
    if (!r->ended && !r->stream_end && r->slen - r->soff + len <= HTTP_STREAM_MAX_PENDING) {
        if (r->soff > 0 && r->soff == r->slen) r->soff = r->slen = 0;
        if (r->slen + len > r->scap) {
            if (r->soff > 0) { /* compact before growing */
                memmove(r->sbuf, r->sbuf + r->soff, r->slen - r->soff);
                r->slen -= r->soff;
                r->soff = 0;
            }
            buf_grow((void **)&r->sbuf, &r->scap, r->slen + len, 1); /* else: the check below */
        }
        if (r->slen + len <= r->scap) {
            memcpy(r->sbuf + r->slen, data, len);
            r->slen += len;
            ok = true;
            if (r->suspended && r->pending == PENDING_STREAM) {
                r->suspended = false;
                resume = true;
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (resume) MHD_resume_connection(r->conn);
    return ok;
}

void http_request_end_stream(http_request *r) {
    bool resume = false;
    pthread_mutex_lock(&r->mu);
    if (!r->ended && !r->stream_end) {
        r->stream_end = true;
        if (r->suspended && r->pending == PENDING_STREAM) {
            r->suspended = false;
            resume = true;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (resume) MHD_resume_connection(r->conn);
}

/* MHD content reader of a streamed body (MHD thread). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    http_request *r = cls;
    ssize_t n;
    pthread_mutex_lock(&r->mu);
    if (r->slen > r->soff) {
        size_t avail = r->slen - r->soff;
        n = (ssize_t)(avail < max ? avail : max);
        memcpy(buf, r->sbuf + r->soff, (size_t)n);
        r->soff += (size_t)n;
        r->bytes_out += (size_t)n;
    } else if (r->stream_end) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        n = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* FastAPI-style error body for failures at the HTTP layer itself. */
static enum MHD_Result queue_error(http_request *r, int status, const char *msg) {
    char body[512];
    int n = snprintf(body, sizeof body,
                     "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%d}}",
                     msg, MHD_get_reason_phrase_for((unsigned)status), status);
    r->status = status;
    r->bytes_out = (size_t)n;
    return queue_buffer(r, status, "application/json", body, (size_t)n);
}

/* Runs the deferred action if there is one, else suspends until there is. */
static enum MHD_Result serve_deferred(http_request *r) {
    pthread_mutex_lock(&r->mu);
    enum pending kind = r->pending;
    if (kind == PENDING_NONE) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    if (r->responded) return MHD_YES; /* already queued; MHD is sending it */
    r->responded = true;
    r->status = r->pend_status;
    if (kind == PENDING_FINISH) {
        r->bytes_out = r->pend_len;
        return queue_buffer(r, r->pend_status, r->pend_ctype, r->pend_body, r->pend_len);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, r, NULL);
    if (!resp) return MHD_NO;
    if (r->pend_ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->pend_ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_extra_headers(r, resp);
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)r->pend_status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static http_request *request_create(http_server *s, struct MHD_Connection *c, const char *method,
                                    const char *url) {
    http_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    atomic_init(&r->refs, 1);
    r->srv = s;
    r->conn = c;
    r->t0 = clock_now();
    r->method = strdup(method);
    r->path = strdup(url);
    if (!r->method || !r->path) {
        request_free(r);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    r->next = s->live;
    if (s->live) s->live->prev = r;
    s->live = r;
    s->num_live++;
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Whether the connection's client certificate passes --ssl-cert-reqs (why
 * not, into why). GnuTLS verifies the chain against --ssl-ca-certs, the
 * dates and the signatures; a certificate that is absent passes only
 * CERT_OPTIONAL. Checked per request, so a renegotiated session is seen. */
static bool client_cert_ok(http_server *s, struct MHD_Connection *c, char *why, size_t n) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session) {
        snprintf(why, n, "client certificate required, but the connection is not TLS");
        return false;
    }
    gnutls_session_t ss = (gnutls_session_t)ci->tls_session;
    unsigned num = 0;
    if (!gnutls_certificate_get_peers(ss, &num) || num == 0) {
        if (s->cfg.ssl_cert_reqs < 2) return true;
        snprintf(why, n, "client certificate required (--ssl-cert-reqs 2), none was sent");
        return false;
    }
    unsigned status = 0;
    int rc = gnutls_certificate_verify_peers2(ss, &status);
    if (rc < 0) {
        snprintf(why, n, "client certificate not verified: %s", gnutls_strerror(rc));
        return false;
    }
    if (status == 0) return true;
    gnutls_datum_t text = {0};
    if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0) == 0) {
        snprintf(why, n, "client certificate rejected: %s", (const char *)text.data);
        gnutls_free(text.data);
    } else {
        snprintf(why, n, "client certificate rejected (GnuTLS status 0x%x)", status);
    }
    /* queue_error puts it in a JSON string as it is: no quotes, no trailing blank */
    for (char *p = why; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    for (size_t l = strlen(why); l && why[l - 1] == ' '; l--) why[l - 1] = 0;
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r) {
        r = request_create(s, c, method, url);
        if (!r) return MHD_NO;
        snprintf(r->version, sizeof r->version, "%s", version);
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes) r->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large) return MHD_YES;
        if (r->body_len + n > s->cfg.max_body_bytes) {
            r->too_large = true;
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
            return MHD_YES;
        }
        if (buf_grow((void **)&r->body, &r->body_cap, r->body_len + n + 1, 1) != VLLM_OK) return MHD_NO;
        memcpy(r->body + r->body_len, upload, n);
        r->body_len += n;
        r->body[r->body_len] = 0;
        return MHD_YES;
    }
    if (!r->dispatched) {
        r->dispatched = true;
        char why[256];
        if (s->cfg.ssl_cert_reqs > 0 && !client_cert_ok(s, c, why, sizeof why)) {
            log_warn("http: %s %s refused: %s", method, url, why);
            r->responded = true;
            return queue_error(r, 403, why);
        }
        if (r->too_large) {
            char msg[160];
            snprintf(msg, sizeof msg, "Request body exceeds the limit of %zu bytes",
                     s->cfg.max_body_bytes);
            r->responded = true;
            return queue_error(r, 413, msg);
        }
        r->in_handler = true;
        s->cfg.handler(s->cfg.handler_ud, r);
        r->in_handler = false;
        if (r->responded) return MHD_YES;
        if (!r->deferred) {
            log_error("http: handler gave no response for %s %s", method, url);
            r->responded = true;
            return queue_error(r, 500, "no response");
        }
    }
    return serve_deferred(r);
}

/* uvicorn's access line: 127.0.0.1:50000 - "GET /v1/models HTTP/1.1" 200 OK */
static void access_log(http_request *r, enum MHD_RequestTerminationCode toe) {
    char host[INET6_ADDRSTRLEN + 8] = "-";
    int port = 0;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) {
            const struct sockaddr_in *in = (const void *)sa;
            inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
            port = ntohs(in->sin_port);
        } else if (sa->sa_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const void *)sa;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
            port = ntohs(in6->sin6_port);
        }
    }
    log_info("%s:%d - \"%s %s %s\" %d %s%s", host, port, r->method, r->path, r->version,
             r->status, MHD_get_reason_phrase_for((unsigned)r->status),
             toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client disconnected)");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&r->mu);
    r->ended = true;
    http_close_fn fn = r->close_fn;
    void *arg = r->close_arg;
    r->close_fn = NULL;
    pthread_mutex_unlock(&r->mu);
    if (fn) fn(arg, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (s->cfg.access_log) access_log(r, toe);
    if (s->cfg.on_end)
        s->cfg.on_end(s->cfg.handler_ud, r->method, r->path, r->status, clock_now() - r->t0,
                      r->body_len, r->bytes_out);
    pthread_mutex_lock(&s->mu);
    if (r->prev) r->prev->next = r->next;
    else s->live = r->next;
    if (r->next) r->next->prev = r->prev;
    s->num_live--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    http_request_release(r);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    log_debug("libmicrohttpd: %s", msg);
}

/* A whole PEM file, NUL-terminated, into *out; the error names the flag. */
static vllm_status read_pem(const char *flag, const char *path, char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return vllm_error(VLLM_ERR_IO, "%s %s: %s", flag, path, strerror(errno));
    char *b = NULL;
    size_t len = 0, cap = 0;
    vllm_status rc = VLLM_OK;
    for (;;) {
        if ((rc = buf_grow((void **)&b, &cap, len + 4097, 1))) break;
        size_t n = fread(b + len, 1, 4096, f);
        len += n;
        if (n < 4096) break;
        if (len > (1u << 20)) {
            rc = vllm_error(VLLM_ERR_INVALID, "%s %s: larger than 1 MiB, not a PEM file", flag, path);
            break;
        }
    }
    if (!rc && ferror(f)) rc = vllm_error(VLLM_ERR_IO, "%s %s: read error", flag, path);
    fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    b[len] = 0;
    *out = b;
    return VLLM_OK;
}

/* Reads the --ssl-* files and checks them with GnuTLS before MHD sees them,
 * so a bad file is an error naming it (MHD would only fail to start). */
static vllm_status tls_load(http_server *s) {
    const http_server_config *c = &s->cfg;
    if (!c->ssl_keyfile != !c->ssl_certfile)
        return vllm_error(VLLM_ERR_INVALID, "%s needs %s too", c->ssl_keyfile ? "--ssl-keyfile" : "--ssl-certfile",
                          c->ssl_keyfile ? "--ssl-certfile" : "--ssl-keyfile");
    if (!c->ssl_keyfile) {
        if (c->ssl_ca_certs || c->ssl_cert_reqs)
            return vllm_error(VLLM_ERR_INVALID, "%s needs --ssl-keyfile and --ssl-certfile (HTTPS)",
                              c->ssl_ca_certs ? "--ssl-ca-certs" : "--ssl-cert-reqs");
        return VLLM_OK;
    }
    if (c->ssl_cert_reqs < 0 || c->ssl_cert_reqs > 2)
        return vllm_error(VLLM_ERR_INVALID, "--ssl-cert-reqs %d: expected 0 (none), 1 (optional) or 2 (required)",
                          c->ssl_cert_reqs);
    if (c->ssl_cert_reqs && !c->ssl_ca_certs)
        return vllm_error(VLLM_ERR_INVALID, "--ssl-cert-reqs %d needs --ssl-ca-certs to verify client certificates against",
                          c->ssl_cert_reqs);
    vllm_status rc;
    if ((rc = read_pem("--ssl-keyfile", c->ssl_keyfile, &s->tls_key)) ||
        (rc = read_pem("--ssl-certfile", c->ssl_certfile, &s->tls_cert)) ||
        (c->ssl_ca_certs && (rc = read_pem("--ssl-ca-certs", c->ssl_ca_certs, &s->tls_trust))))
        return rc;
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        return vllm_error(VLLM_ERR_NOMEM, "TLS: out of memory");
    gnutls_datum_t key = {(unsigned char *)s->tls_key, (unsigned)strlen(s->tls_key)};
    gnutls_datum_t crt = {(unsigned char *)s->tls_cert, (unsigned)strlen(s->tls_cert)};
    int g = gnutls_certificate_set_x509_key_mem(cred, &crt, &key, GNUTLS_X509_FMT_PEM);
    if (g < 0)
        rc = vllm_error(VLLM_ERR_INVALID, "--ssl-certfile %s with --ssl-keyfile %s: %s", c->ssl_certfile,
                        c->ssl_keyfile, gnutls_strerror(g));
    if (!rc && s->tls_trust) {
        gnutls_datum_t ca = {(unsigned char *)s->tls_trust, (unsigned)strlen(s->tls_trust)};
        g = gnutls_certificate_set_x509_trust_mem(cred, &ca, GNUTLS_X509_FMT_PEM);
        if (g <= 0)
            rc = vllm_error(VLLM_ERR_INVALID, "--ssl-ca-certs %s: %s", c->ssl_ca_certs,
                            g < 0 ? gnutls_strerror(g) : "no certificate in the file");
    }
    gnutls_certificate_free_credentials(cred);
    return rc;
}

/* Binds --uds: a socket file already there (a server that died) is
 * replaced, anything else there is an error. Mode 0666 as uvicorn leaves it
 * under the default umask for a local socket. */
static vllm_status uds_bind(http_server *s) {
    const char *path = s->cfg.uds;
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sun.sun_path)
        return vllm_error(VLLM_ERR_INVALID, "--uds %s: longer than %zu bytes", path, sizeof sun.sun_path - 1);
    memcpy(sun.sun_path, path, strlen(path) + 1);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return vllm_error(VLLM_ERR_INVALID, "--uds %s: the path exists and is not a socket", path);
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return vllm_error(VLLM_ERR_IO, "--uds %s: socket: %s", path, strerror(errno));
    if (bind(fd, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(fd, 511) != 0) {
        int e = errno;
        close(fd);
        return vllm_error(VLLM_ERR_IO, "--uds %s: %s", path, strerror(e));
    }
    chmod(path, 0666);
    s->uds_fd = fd;
    s->uds_path = strdup(path);
    return VLLM_OK;
}

static void server_free(http_server *s) {
    if (s->uds_fd >= 0) close(s->uds_fd);
    if (s->uds_path) unlink(s->uds_path);
    free(s->uds_path);
    free(s->tls_key);
    free(s->tls_cert);
    free(s->tls_trust);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

vllm_status http_server_start(const http_server_config *cfg, http_server **out) {
    *out = NULL;
    http_server *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "http server: out of memory");
    s->cfg = *cfg;
    s->uds_fd = -1;
    if (s->cfg.num_threads < 1) s->cfg.num_threads = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    vllm_status vrc = tls_load(s);
    if (!vrc && cfg->uds) vrc = uds_bind(s);
    if (vrc) {
        server_free(s);
        return vrc;
    }

    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (s->tls_key) flags |= MHD_USE_TLS;
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    bool have_addr = false;
    if (cfg->uds) {
        /* the socket is bound above */
    } else if (cfg->host && *cfg->host) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
        char port[16];
        snprintf(port, sizeof port, "%d", cfg->port);
        int rc = getaddrinfo(cfg->host, port, &hints, &ai);
        if (rc != 0) {
            server_free(s);
            return vllm_error(VLLM_ERR_INVALID, "--host %s: %s", cfg->host, gai_strerror(rc));
        }
        memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
        if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
        freeaddrinfo(ai);
        have_addr = true;
    } else {
        flags |= MHD_USE_DUAL_STACK;
    }
    struct MHD_OptionItem opts[12];
    int k = 0;
    opts[k++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s};
    opts[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->timeout_s, NULL};
    opts[k++] = (struct MHD_OptionItem){MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL};
    opts[k++] = (struct MHD_OptionItem){MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL};
    if (s->cfg.num_threads > 1)
        opts[k++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, s->cfg.num_threads, NULL};
    if (have_addr) opts[k++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &addr};
    if (s->uds_fd >= 0) opts[k++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, s->uds_fd, NULL};
    if (s->tls_key) {
        opts[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key};
        opts[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert};
        if (s->tls_trust) opts[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, s->tls_trust};
    }
    opts[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                                 MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno;
        vllm_status r = cfg->uds ? vllm_error(VLLM_ERR_IO, "cannot serve on --uds %s: %s", cfg->uds,
                                              e ? strerror(e) : "libmicrohttpd failed to start")
                                 : vllm_error(VLLM_ERR_IO, "cannot listen on %s:%d: %s",
                                              cfg->host && *cfg->host ? cfg->host : "0.0.0.0", cfg->port,
                                              e ? strerror(e) : "libmicrohttpd failed to start");
        server_free(s);
        return r;
    }
    if (cfg->uds) {
        s->port = 0;
    } else {
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
        s->port = info ? info->port : cfg->port;
    }
    *out = s;
    return VLLM_OK;
}

int http_server_port(const http_server *s) { return s->port; }

int http_server_num_active(http_server *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->num_live;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static bool any_deferred(http_server *s) {
    for (http_request *r = s->live; r; r = r->next) {
        pthread_mutex_lock(&r->mu);
        bool d = r->deferred && !r->ended;
        pthread_mutex_unlock(&r->mu);
        if (d) return true;
    }
    return false;
}

static void wait_deferred(http_server *s, double seconds) {
    struct timespec dl = clock_deadline(seconds);
    pthread_mutex_lock(&s->mu);
    while (any_deferred(s))
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) break;
    pthread_mutex_unlock(&s->mu);
}

void http_server_stop(http_server *s, double grace_s) {
    if (!s) return;
    /* stop accepting; keep serving what is open. The listening socket is
     * now ours to close (MHD_stop_daemon will not). */
    MHD_socket lsock = MHD_quiesce_daemon(s->daemon);
    /* Only deferred exchanges can hold a connection suspended (idle keep-alive
     * connections are simply closed by MHD_stop_daemon). Give their owners
     * the grace period, then end what is left ourselves. */
    wait_deferred(s, grace_s);
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (http_request *r = s->live; r; r = r->next) n++;
    http_request **left = n ? calloc((size_t)n, sizeof *left) : NULL;
    int k = 0;
    for (http_request *r = s->live; r && left; r = r->next) {
        http_request_retain(r);
        left[k++] = r;
    }
    pthread_mutex_unlock(&s->mu);
    static const char msg[] = "{\"error\":{\"message\":\"The server is shutting down.\","
                              "\"type\":\"Service Unavailable\",\"param\":null,\"code\":503}}";
    for (int i = 0; i < k; i++) {
        http_request_finish(left[i], 503, "application/json", msg, sizeof msg - 1);
        http_request_end_stream(left[i]);
        http_request_release(left[i]);
    }
    free(left);
    if (k) wait_deferred(s, 1.0);
    MHD_stop_daemon(s->daemon);
    if (lsock != MHD_INVALID_SOCKET && lsock != s->uds_fd) close(lsock);
    server_free(s);
}
