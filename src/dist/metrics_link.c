/*
 * metrics_link.c - see metrics_link.h.
 *
 * A call: [type u8][seq u64][server index i32][fields...]; the reply:
 * [seq u64][status i32][text: the error message, or render's exposition].
 * Fields use dp_wire's framing; a step is dp_wire_output's OUTPUT message
 * appended whole after the engine index and the time.
 */
#include "dist/metrics_link.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "dist/dp_wire.h"

enum { MSG_CONFIG = 'C', MSG_ENGINE = 'E', MSG_INIT = 'I', MSG_ARRIVED = 'A', MSG_RELEASED = 'R', MSG_STEP = 'S',
       MSG_FINISHED = 'F', MSG_HTTP = 'H', MSG_RENDER = 'M' };

#define HEADER_BYTES (1 + 8 + 4)

/* ---- the API server's side --------------------------------------------------------- */

typedef struct link {
    pthread_mutex_t mu;              /* one call at a time: the socket, the writer, the order */
    void *ctx, *sock;
    int32_t index;
    uint64_t seq;
    double dead_until;               /* after a timeout: calls fail at once until then, then try again */
    dp_wire_writer w;
} link;

static void begin(link *l, uint8_t type) {
    dp_wire_reset(&l->w);
    dp_wire_put(&l->w, &type, 1);
    l->seq++;
    dp_wire_put(&l->w, &l->seq, sizeof l->seq);
    dp_wire_i32(&l->w, l->index);
}

/* Sends the built message, waits for its reply; *text (malloc'd, may be
 * NULL) gets the reply's text. Called with l->mu held. */
static vllm_status call_locked(link *l, char **text, size_t *len) {
    if (text) *text = NULL;
    if (clock_now() < l->dead_until)
        return vllm_error(VLLM_ERR_IO, "the metrics owner (the supervisor process) is not answering");
    if (l->w.oom) return vllm_error(VLLM_ERR_NOMEM, "metrics link: out of memory");
    if (zmq_send(l->sock, l->w.data, l->w.len, 0) < 0)
        return vllm_error(VLLM_ERR_IO, "metrics link: send: %s", zmq_strerror(errno));
    double until = clock_now() + METRICS_LINK_TIMEOUT_S;
    for (;;) {
        double left = until - clock_now();
        zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
        int rc = left > 0 ? zmq_poll(&it, 1, (long)(left * 1000) + 1) : 0;
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) {
            l->dead_until = clock_now() + METRICS_LINK_RETRY_S;
            log_error("API server %d: the metrics owner did not answer within %.0f s; metrics from this "
                      "process are dropped for the next %.0f s", l->index, METRICS_LINK_TIMEOUT_S,
                      METRICS_LINK_RETRY_S);
            return vllm_error(VLLM_ERR_IO, "the metrics owner (the supervisor process) is not answering");
        }
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, l->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            continue;
        }
        const uint8_t *p = zmq_msg_data(&m);
        size_t n = zmq_msg_size(&m);
        uint64_t seq;
        int32_t st;
        if (n < 12 || (memcpy(&seq, p, 8), seq != l->seq)) { /* a late reply to a call given up on */
            zmq_msg_close(&m);
            continue;
        }
        memcpy(&st, p + 8, 4);
        vllm_status rc2 = (vllm_status)st;
        if (rc2 != VLLM_OK) vllm_error(rc2, "%.*s", (int)(n - 12), (const char *)p + 12);
        else if (text) {
            *text = malloc(n - 12 + 1);
            if (!*text) rc2 = vllm_error(VLLM_ERR_NOMEM, "metrics link: reply");
            else {
                memcpy(*text, p + 12, n - 12);
                (*text)[n - 12] = 0;
                if (len) *len = n - 12;
            }
        }
        zmq_msg_close(&m);
        return rc2;
    }
}

static vllm_status finish(link *l, char **text, size_t *len) {
    vllm_status rc = call_locked(l, text, len);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static vllm_status fwd_arrived(void *ud, const char *id, double arrival, int32_t np, int32_t n, int32_t max_tokens) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_ARRIVED);
    dp_wire_str(&l->w, id);
    dp_wire_put(&l->w, &arrival, sizeof arrival);
    dp_wire_i32(&l->w, np);
    dp_wire_i32(&l->w, n);
    dp_wire_i32(&l->w, max_tokens);
    return finish(l, NULL, NULL);
}

static void fwd_released(void *ud, const char *id) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_RELEASED);
    dp_wire_str(&l->w, id);
    finish(l, NULL, NULL);
}

static void fwd_step(void *ud, int32_t engine_index, const vllm_step_output *out, double now) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_STEP);
    dp_wire_i32(&l->w, engine_index);
    dp_wire_put(&l->w, &now, sizeof now);
    dp_wire_output(&l->w, 0, true, out);
    finish(l, NULL, NULL);
}

static void fwd_finished(void *ud, const char *id, int32_t index, vllm_finish_reason reason, double now) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_FINISHED);
    dp_wire_str(&l->w, id);
    dp_wire_i32(&l->w, index);
    dp_wire_i32(&l->w, (int32_t)reason);
    dp_wire_put(&l->w, &now, sizeof now);
    finish(l, NULL, NULL);
}

static void fwd_http(void *ud, const char *handler, const char *method, int status, double duration, int64_t rq,
                     int64_t rs) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_HTTP);
    dp_wire_str(&l->w, handler);
    dp_wire_str(&l->w, method);
    dp_wire_i32(&l->w, status);
    dp_wire_put(&l->w, &duration, sizeof duration);
    dp_wire_put(&l->w, &rq, sizeof rq);
    dp_wire_put(&l->w, &rs, sizeof rs);
    finish(l, NULL, NULL);
}

static vllm_status fwd_render(void *ud, double now, char **out, size_t *len) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_RENDER);
    dp_wire_put(&l->w, &now, sizeof now);
    return finish(l, out, len);
}

static vllm_status fwd_engine(void *ud, int32_t engine_index, int64_t blocks) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_ENGINE);
    dp_wire_i32(&l->w, engine_index);
    dp_wire_put(&l->w, &blocks, sizeof blocks);
    return finish(l, NULL, NULL);
}

static void fwd_init(void *ud) {
    link *l = ud;
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_INIT);
    finish(l, NULL, NULL);
}

static void link_free(void *ud) {
    link *l = ud;
    if (!l) return;
    if (l->sock) zmq_close(l->sock);
    if (l->ctx) zmq_ctx_term(l->ctx);
    dp_wire_free(&l->w);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

vllm_status metrics_link_connect(const char *endpoint, int32_t server_index, const metrics_config *mc,
                                 metrics **out) {
    *out = NULL;
    link *l = calloc(1, sizeof *l);
    if (!l) return vllm_error(VLLM_ERR_NOMEM, "metrics link");
    pthread_mutex_init(&l->mu, NULL);
    l->index = server_index;
    l->ctx = zmq_ctx_new();
    l->sock = l->ctx ? zmq_socket(l->ctx, ZMQ_DEALER) : NULL;
    int zero = 0;
    if (!l->sock || zmq_setsockopt(l->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(l->sock, endpoint) != 0) {
        vllm_status rc = vllm_error(VLLM_ERR_IO, "cannot connect to the metrics owner at %s: %s", endpoint,
                                    zmq_strerror(errno));
        link_free(l);
        return rc;
    }
    pthread_mutex_lock(&l->mu);
    begin(l, MSG_CONFIG);
    dp_wire_put(&l->w, mc, sizeof *mc); /* the same build at both ends: the strings follow */
    dp_wire_str(&l->w, mc->model_name);
    dp_wire_str(&l->w, mc->show_hidden_metrics_for_version);
    dp_wire_str(&l->w, mc->cache_dtype);
    dp_wire_str(&l->w, mc->prefix_caching_hash_algo);
    vllm_status rc = finish(l, NULL, NULL);
    metrics_forward f = {fwd_arrived, fwd_released, fwd_step, fwd_finished, fwd_http,
                         fwd_render,  fwd_engine,   fwd_init, link_free,    l};
    if (rc == VLLM_OK) rc = metrics_create_forward(&f, out);
    if (rc != VLLM_OK) link_free(l);
    return rc;
}

/* ---- the owner ------------------------------------------------------------------------ */

struct metrics_link_owner {
    void *ctx, *sock;
    metrics *m;
    bool logged_init;
    bool added[257];                 /* engines added (-dp is at most 256) */
    dp_output_decoder dec;
    vllm_seq_output *outs;
    size_t cap_outs;
    char *ids, *id1;
    size_t cap_ids, cap_id1;
    dp_wire_writer w;
};

vllm_status metrics_link_owner_create(metrics_link_owner **out, char *endpoint_out, size_t cap) {
    *out = NULL;
    metrics_link_owner *o = calloc(1, sizeof *o);
    if (!o) return vllm_error(VLLM_ERR_NOMEM, "metrics owner");
    o->ctx = zmq_ctx_new();
    o->sock = o->ctx ? zmq_socket(o->ctx, ZMQ_ROUTER) : NULL;
    int zero = 0;
    if (!o->sock || zmq_setsockopt(o->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(o->sock, "tcp://127.0.0.1:*") != 0) {
        vllm_status rc = vllm_error(VLLM_ERR_IO, "metrics owner: cannot bind a loopback port: %s",
                                    zmq_strerror(errno));
        metrics_link_owner_free(o);
        return rc;
    }
    size_t n = cap;
    zmq_getsockopt(o->sock, ZMQ_LAST_ENDPOINT, endpoint_out, &n);
    *out = o;
    return VLLM_OK;
}

void metrics_link_owner_free(metrics_link_owner *o) {
    if (!o) return;
    metrics_free(o->m);
    if (o->sock) zmq_close(o->sock);
    if (o->ctx) zmq_ctx_term(o->ctx);
    dp_wire_output_decoder_free(&o->dec);
    dp_wire_free(&o->w);
    free(o->outs);
    free(o->ids);
    free(o->id1);
    free(o);
}

/* "i/id" in o->id1. */
static const char *prefixed(metrics_link_owner *o, int32_t index, const char *id) {
    size_t need = (id ? strlen(id) : 0) + 16;
    if (buf_grow((void **)&o->id1, &o->cap_id1, need, 1) != VLLM_OK) return NULL;
    snprintf(o->id1, need, "%d/%s", index, id ? id : "");
    return o->id1;
}

static vllm_status owner_step(metrics_link_owner *o, int32_t index, dp_wire_reader *r) {
    int32_t engine = dp_wire_get_i32(r, "engine");
    double now = 0;
    dp_wire_get(r, &now, sizeof now, "now");
    if (r->bad) return vllm_error(VLLM_ERR_INVALID, "metrics owner: a bad step (%s)", r->bad);
    vllm_status rc = dp_wire_read_output(r->p, r->left, &o->dec);
    if (rc != VLLM_OK) return rc;
    vllm_step_output s = o->dec.out;
    size_t n = (size_t)s.num_outputs, total = 0;
    for (size_t i = 0; i < n; i++) total += strlen(s.outputs[i].request_id) + 16;
    if (n && (buf_grow((void **)&o->outs, &o->cap_outs, n, sizeof *o->outs) != VLLM_OK ||
              buf_grow((void **)&o->ids, &o->cap_ids, total, 1) != VLLM_OK))
        return vllm_error(VLLM_ERR_NOMEM, "metrics owner: a step of %zu outputs", n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        o->outs[i] = s.outputs[i];
        int k = snprintf(o->ids + at, total - at, "%d/%s", index, s.outputs[i].request_id);
        o->outs[i].request_id = o->ids + at;
        at += (size_t)k + 1;
    }
    s.outputs = o->outs;
    metrics_on_engine_step(o->m, engine, &s, now);
    return VLLM_OK;
}

/* One call; fills o->w with the reply's text. */
static vllm_status owner_apply(metrics_link_owner *o, uint8_t type, int32_t index, dp_wire_reader *r) {
    if (type == MSG_CONFIG) {
        metrics_config c;
        dp_wire_get(r, &c, sizeof c, "config");
        c.model_name = dp_wire_get_str(r, "model_name");
        c.show_hidden_metrics_for_version = dp_wire_get_str(r, "show_hidden_metrics_for_version");
        c.cache_dtype = dp_wire_get_str(r, "cache_dtype");
        c.prefix_caching_hash_algo = dp_wire_get_str(r, "prefix_caching_hash_algo");
        if (r->bad) return vllm_error(VLLM_ERR_INVALID, "metrics owner: a bad config (%s)", r->bad);
        if (o->m) return VLLM_OK; /* every API server sends the same */
        vllm_status rc = metrics_create(&c, &o->m);
        if (rc == VLLM_OK && metrics_logger_start(o->m) != VLLM_OK) log_warn("%s; no stats log line", vllm_errmsg());
        return rc;
    }
    if (!o->m) return vllm_error(VLLM_ERR_INVALID, "metrics owner: no config yet");
    const char *a, *b;
    int32_t i1, i2, i3;
    double d;
    int64_t q1, q2;
    switch (type) {
    case MSG_ENGINE:
        i1 = dp_wire_get_i32(r, "engine");
        dp_wire_get(r, &q1, sizeof q1, "blocks");
        if (r->bad) break;
        if (i1 <= 0 || i1 >= (int32_t)sizeof o->added)
            return vllm_error(VLLM_ERR_INVALID, "metrics owner: engine %d is out of range", i1);
        if (o->added[i1]) return VLLM_OK; /* every API server says it */
        o->added[i1] = true;
        return metrics_add_engine(o->m, i1, q1);
    case MSG_INIT:
        if (!o->logged_init) metrics_log_engine_initialized(o->m);
        o->logged_init = true;
        return VLLM_OK;
    case MSG_ARRIVED:
        a = dp_wire_get_str(r, "request_id");
        dp_wire_get(r, &d, sizeof d, "arrival");
        i1 = dp_wire_get_i32(r, "num_prompt_tokens");
        i2 = dp_wire_get_i32(r, "n");
        i3 = dp_wire_get_i32(r, "max_tokens");
        if (r->bad || !(a = prefixed(o, index, a))) break;
        return metrics_request_arrived(o->m, a, d, i1, i2, i3);
    case MSG_RELEASED:
        a = dp_wire_get_str(r, "request_id");
        if (r->bad || !(a = prefixed(o, index, a))) break;
        metrics_request_released(o->m, a);
        return VLLM_OK;
    case MSG_STEP:
        return owner_step(o, index, r);
    case MSG_FINISHED:
        a = dp_wire_get_str(r, "request_id");
        i1 = dp_wire_get_i32(r, "index");
        i2 = dp_wire_get_i32(r, "reason");
        dp_wire_get(r, &d, sizeof d, "now");
        if (r->bad || !(a = prefixed(o, index, a))) break;
        metrics_sequence_finished(o->m, a, i1, (vllm_finish_reason)i2, d);
        return VLLM_OK;
    case MSG_HTTP:
        a = dp_wire_get_str(r, "handler");
        b = dp_wire_get_str(r, "method");
        i1 = dp_wire_get_i32(r, "status");
        dp_wire_get(r, &d, sizeof d, "duration");
        dp_wire_get(r, &q1, sizeof q1, "request_bytes");
        dp_wire_get(r, &q2, sizeof q2, "response_bytes");
        if (r->bad) break;
        metrics_http_observe(o->m, a, b ? b : "GET", i1, d, q1, q2);
        return VLLM_OK;
    case MSG_RENDER: {
        dp_wire_get(r, &d, sizeof d, "now");
        if (r->bad) break;
        char *text = NULL;
        size_t len = 0;
        vllm_status rc = metrics_render(o->m, d, &text, &len);
        if (rc == VLLM_OK) dp_wire_put(&o->w, text, len);
        free(text);
        return rc;
    }
    default:
        return vllm_error(VLLM_ERR_INVALID, "metrics owner: unknown call '%c'", type);
    }
    return vllm_error(r->bad ? VLLM_ERR_INVALID : VLLM_ERR_NOMEM, "metrics owner: a bad call '%c' (%s)", type,
                      r->bad ? r->bad : "out of memory");
}

static void owner_handle(metrics_link_owner *o, const zmq_msg_t *id, const uint8_t *p, size_t n) {
    if (n < HEADER_BYTES) {
        log_warn("metrics owner: ignoring a short message (%zu bytes)", n);
        return;
    }
    uint64_t seq;
    int32_t index;
    memcpy(&seq, p + 1, 8);
    memcpy(&index, p + 9, 4);
    dp_wire_reader r = {p + HEADER_BYTES, n - HEADER_BYTES, NULL};
    dp_wire_reset(&o->w);
    int32_t st = 0;
    dp_wire_put(&o->w, &seq, sizeof seq);
    dp_wire_put(&o->w, &st, sizeof st);
    vllm_status rc = owner_apply(o, p[0], index, &r);
    if (rc != VLLM_OK) {
        dp_wire_reset(&o->w);
        st = (int32_t)rc;
        dp_wire_put(&o->w, &seq, sizeof seq);
        dp_wire_put(&o->w, &st, sizeof st);
        const char *msg = vllm_errmsg();
        dp_wire_put(&o->w, msg, strlen(msg));
    }
    if (o->w.oom) return; /* the caller times out and gives up */
    zmq_send(o->sock, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size((zmq_msg_t *)id), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(o->sock, o->w.data, o->w.len, ZMQ_DONTWAIT);
}

void metrics_link_owner_poll(metrics_link_owner *o, int timeout_ms) {
    zmq_pollitem_t it = {o->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return;
    for (;;) {
        zmq_msg_t id, m;
        zmq_msg_init(&id);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&id, o->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&m);
            return;
        }
        if (zmq_msg_more(&id) && zmq_msg_recv(&m, o->sock, 0) >= 0)
            owner_handle(o, &id, zmq_msg_data(&m), zmq_msg_size(&m));
        zmq_msg_close(&id);
        zmq_msg_close(&m);
    }
}
