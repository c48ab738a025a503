/*
 * dp_client.c - see dp_client.h.
 *
 * Everything here runs on the frontend's engine thread (the ops), except
 * dp_client_wake (any thread: one write to an eventfd). The thread blocks
 * in zmq_poll on the ROUTER, its monitor and that eventfd, so a queued
 * command wakes it at once and an idle front end costs nothing.
 *
 * Request bookkeeping: id -> (engine, n, which sequences finished); a
 * request leaves the table when the last of its sequences finished in an
 * OUTPUT. When an engine dies, its requests' unfinished sequences get
 * synthetic ERROR finishes, returned as that engine's next "step".
 */
#include "dist/dp_client.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zmq.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/map.h"
#include "dist/dp_engine.h"

#define PREFIX_SET_BITS 17           /* 2^17 slots, filled to half, then aged */
#define PREFIX_SET_SIZE ((size_t)1 << PREFIX_SET_BITS)
#define PREFIX_SET_FILL (PREFIX_SET_SIZE / 2)
#define PROBE_SECONDS 3.0

typedef struct dp_req {
    map_node by_id;
    char *id;
    int32_t engine, n, num_finished;
    uint8_t finished[];              /* (n) */
} dp_req;

typedef struct prefix_set {          /* open addressing, 0 = empty */
    uint64_t *slots;
    size_t count;
} prefix_set;

typedef struct dp_eng {
    bool hello, alive;
    pid_t pid;                       /* a spawned engine; 0 = remote */
    char rid[32];
    size_t rid_len;
    int32_t waiting, running, num_gpu_blocks;
    int64_t adds_sent, adds_acked, routed, live;
    vllm_scheduler_stats stats;
    prefix_set cur, prev;            /* block hashes sent to it, newest and previous generation */
    bool ctl_asked, ctl_replied;     /* the LoRA update in flight */
    bool ever_ready;                 /* a HELLO came (later ones: a new engine under this index) */
    int32_t restarts;                /* by this front end (--data-parallel-restart-engines) */
} dp_eng;

/* A runtime LoRA update (dp_client_lora): queued by an HTTP thread, sent to
 * every engine by the engine thread, done when each live engine replied. */
typedef enum ctl_state { CTL_IDLE = 0, CTL_QUEUED, CTL_SENT, CTL_DONE } ctl_state;

struct dp_client {
    dp_config cfg;
    int argc;                        /* serve's arguments, to restart an engine */
    char **argv;
    int32_t port;                    /* the ROUTER's */
    void *zctx, *router, *mon;
    int wake_fd;
    int32_t n, num_alive, block_size;
    dp_eng *eng;
    map reqs;
    dp_wire_writer w;
    zmq_msg_t held;
    bool holding;
    dp_output_decoder dec;
    /* synthetic finishes of a dead engine's requests, returned by the next step */
    vllm_seq_output *synth;
    size_t n_synth, cap_synth;
    char **synth_strs;
    size_t n_synth_strs, cap_synth_strs;
    int32_t synth_engine;
    bool synth_ready, synth_sent;
    vllm_step_output synth_out;
    double probe_until;
    uint64_t *hashes;
    size_t cap_hashes;
    pthread_mutex_t ctl_mu;
    pthread_cond_t ctl_cv;
    ctl_state ctl;
    uint64_t ctl_seq;
    bool ctl_load;
    char *ctl_name, *ctl_path;
    int32_t ctl_expected, ctl_replies;
    vllm_status ctl_status;
    char ctl_err[512];
};

/* ---- flags ------------------------------------------------------------------- */

void dp_client_config_init(dp_config *c) {
    memset(c, 0, sizeof *c);
    c->size = 1;
    c->size_local = -1;
    c->address = "127.0.0.1";
    c->api_server_count = 1;
    c->ready_timeout = 600;
    const char *t = getenv("VLLM_ENGINE_READY_TIMEOUT_S");
    if (t && atof(t) > 0) c->ready_timeout = atof(t);
}

const char *dp_client_usage(void) {
    return "data parallel (docs/deploy.md, \"Data parallel\"):\n"
           "  -dp, --data-parallel-size N     N engine processes behind this front end (1)\n"
           "  -dpl, --data-parallel-size-local N  engines started on this node (default: all)\n"
           "  -dpr, --data-parallel-start-rank N  index of this node's first engine (0; headless)\n"
           "  -dpa, --data-parallel-address A     the front end's address engines connect to (127.0.0.1)\n"
           "  -dpp, --data-parallel-rpc-port P    its port (29550; any free port if all engines are local)\n"
           "  --headless                      run this node's engines only, no API server\n"
           "  --data-parallel-routing least_loaded|prefix_cache  how requests pick an engine\n"
           "                                  (least_loaded: vLLM's waiting x 4 + running)\n"
           "  --data-parallel-restart-engines start a local engine that died again (beyond vLLM)\n"
           "  -asc, --api-server-count N      API server processes sharing the port (1; docs/deploy.md)\n";
}

static bool parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int32_t)v;
    return true;
}

int dp_client_parse_flag(dp_config *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (a[0] != '-') return 0;
    char name[64];
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    if (n >= sizeof name) return 0;
    for (size_t k = 0; k < n; k++) name[k] = k > 1 && a[k] == '_' ? '-' : a[k];
    name[n] = 0;
    static const char *const names[][2] = {
        {"-dp", "--data-parallel-size"},         {"-dpl", "--data-parallel-size-local"},
        {"-dpr", "--data-parallel-start-rank"},  {"-dpa", "--data-parallel-address"},
        {"-dpp", "--data-parallel-rpc-port"},    {"--headless", "--headless"},
        {"--data-parallel-routing", "--data-parallel-routing"},
        {"--api-server-count", "--api-server-count"}, {"-asc", "--api-server-count"},
        {"--data-parallel-restart-engines", "--data-parallel-restart-engines"}};
    const char *flag = NULL;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k][0]) || !strcmp(name, names[k][1])) flag = names[k][1];
    if (!flag) return 0;
    if (!strcmp(flag, "--headless") || !strcmp(flag, "--data-parallel-restart-engines")) {
        if (!strcmp(flag, "--headless")) c->headless = true;
        else c->restart_engines = true;
        (*i)++;
        return 1;
    }
    const char *val = eq ? eq + 1 : NULL;
    if (!val) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "vllmc serve: argument %s: expected one argument\n", flag);
            return -1;
        }
        val = argv[*i + 1];
        *i += 2;
    } else (*i)++;
    bool ok = true;
    if (!strcmp(flag, "--data-parallel-size")) ok = parse_int(val, 1, 256, &c->size);
    else if (!strcmp(flag, "--data-parallel-size-local")) ok = parse_int(val, 0, 256, &c->size_local);
    else if (!strcmp(flag, "--data-parallel-start-rank")) ok = parse_int(val, 0, 255, &c->start_rank);
    else if (!strcmp(flag, "--data-parallel-rpc-port")) ok = parse_int(val, 0, 65535, &c->rpc_port);
    else if (!strcmp(flag, "--api-server-count")) ok = parse_int(val, 1, 64, &c->api_server_count);
    else if (!strcmp(flag, "--data-parallel-address")) c->address = val;
    else if (!strcmp(flag, "--data-parallel-routing")) {
        if (!strcmp(val, "least_loaded")) c->routing = DP_ROUTING_LEAST_LOADED;
        else if (!strcmp(val, "prefix_cache")) c->routing = DP_ROUTING_PREFIX_CACHE;
        else ok = false;
    }
    if (!ok) {
        fprintf(stderr, "vllmc serve: argument %s: invalid value '%s'%s\n", flag, val,
                !strcmp(flag, "--data-parallel-routing") ? " (least_loaded or prefix_cache)" : "");
        return -1;
    }
    return 1;
}

/* ---- prefix sets ------------------------------------------------------------- */

static bool set_has(const prefix_set *s, uint64_t h) {
    if (!s->slots) return false;
    for (size_t i = h & (PREFIX_SET_SIZE - 1);; i = (i + 1) & (PREFIX_SET_SIZE - 1)) {
        if (s->slots[i] == h) return true;
        if (!s->slots[i]) return false;
    }
}

static void set_add(dp_eng *e, uint64_t h) {
    if (set_has(&e->cur, h)) return;
    if (e->cur.count >= PREFIX_SET_FILL || !e->cur.slots) { /* age: newest becomes previous */
        prefix_set old = e->prev;
        e->prev = e->cur;
        e->cur = old;
        e->cur.count = 0;
        if (!e->cur.slots) e->cur.slots = calloc(PREFIX_SET_SIZE, sizeof *e->cur.slots);
        else memset(e->cur.slots, 0, PREFIX_SET_SIZE * sizeof *e->cur.slots);
        if (!e->cur.slots) return; /* out of memory: routing just forgets */
    }
    size_t i = h & (PREFIX_SET_SIZE - 1);
    while (e->cur.slots[i]) i = (i + 1) & (PREFIX_SET_SIZE - 1);
    e->cur.slots[i] = h;
    e->cur.count++;
}

/* Chained hashes of the prompt's whole blocks into c->hashes; returns how many. */
static size_t block_hashes(dp_client *c, const int32_t *ids, int32_t n, const char *salt) {
    size_t nb = c->block_size > 0 ? (size_t)(n / c->block_size) : 0;
    if (!nb || buf_grow((void **)&c->hashes, &c->cap_hashes, nb, sizeof *c->hashes) != VLLM_OK) return 0;
    uint64_t h = salt ? XXH3_64bits(salt, strlen(salt)) : 0x9e3779b97f4a7c15ULL;
    for (size_t b = 0; b < nb; b++) {
        h = XXH3_64bits_withSeed(ids + b * (size_t)c->block_size, (size_t)c->block_size * sizeof *ids, h);
        c->hashes[b] = h ? h : 1;
    }
    return nb;
}

/* ---- engines ------------------------------------------------------------------- */

static int64_t score(const dp_eng *e) {
    int64_t pending = e->adds_sent - e->adds_acked;
    return 4 * ((int64_t)e->waiting + (pending > 0 ? pending : 0)) + e->running;
}

static int32_t route(dp_client *c, size_t nb) {
    int32_t best = -1;
    for (int32_t k = 0; k < c->n; k++)
        if (c->eng[k].alive && (best < 0 || score(&c->eng[k]) < score(&c->eng[best]))) best = k;
    if (best < 0 || c->cfg.routing != DP_ROUTING_PREFIX_CACHE || !nb) return best;
    int32_t pick = -1;
    size_t pick_len = 0;
    for (int32_t k = 0; k < c->n; k++) {
        dp_eng *e = &c->eng[k];
        if (!e->alive) continue;
        size_t len = 0;
        while (len < nb && (set_has(&e->cur, c->hashes[len]) || set_has(&e->prev, c->hashes[len]))) len++;
        if (len > pick_len || (len == pick_len && len && score(e) < score(&c->eng[pick]))) pick = k, pick_len = len;
    }
    if (pick >= 0 && score(&c->eng[pick]) - score(&c->eng[best]) <= DP_PREFIX_SLACK) return pick;
    return best;
}

static int send_to(dp_client *c, int32_t k) {
    dp_eng *e = &c->eng[k];
    if (c->w.oom) {
        errno = ENOMEM;
        return -1;
    }
    if (zmq_send(c->router, e->rid, e->rid_len, ZMQ_SNDMORE) < 0) return -1;
    return zmq_send(c->router, c->w.data, c->w.len, 0) < 0 ? -1 : 0;
}

static void synth_finish(dp_client *c, const char *id, int32_t index, const char *error) {
    char *s = strdup(id), *m = strdup(error);
    if (!s || !m || buf_grow((void **)&c->synth, &c->cap_synth, c->n_synth + 1, sizeof *c->synth) != VLLM_OK ||
        buf_grow((void **)&c->synth_strs, &c->cap_synth_strs, c->n_synth_strs + 2, sizeof *c->synth_strs) != VLLM_OK) {
        free(s);
        free(m);
        log_error("dp: out of memory failing request %s", id);
        return;
    }
    c->synth_strs[c->n_synth_strs++] = s;
    c->synth_strs[c->n_synth_strs++] = m;
    c->synth[c->n_synth++] = (vllm_seq_output){.request_id = s, .index = index, .finish_reason = VLLM_FINISH_ERROR,
                                               .stop_token_id = -1, .error = m};
}

static void req_forget(dp_client *c, dp_req *r) {
    map_remove(&c->reqs, &r->by_id);
    if (r->engine >= 0 && r->engine < c->n) c->eng[r->engine].live--;
    free(r->id);
    free(r);
}

static void ctl_reply_locked(dp_client *c, vllm_status st, const char *err) {
    c->ctl_replies++;
    if (st != VLLM_OK && c->ctl_status == VLLM_OK) {
        c->ctl_status = st;
        snprintf(c->ctl_err, sizeof c->ctl_err, "%s", err ? err : "the engine refused it");
    }
    if (c->ctl_replies >= c->ctl_expected) {
        c->ctl = CTL_DONE;
        pthread_cond_broadcast(&c->ctl_cv);
    }
}

static void engine_died(dp_client *c, int32_t k, const char *why) {
    dp_eng *e = &c->eng[k];
    if (!e->alive) return;
    e->alive = false;
    c->num_alive--;
    pthread_mutex_lock(&c->ctl_mu);
    if (c->ctl == CTL_SENT && e->ctl_asked && !e->ctl_replied) { /* it will not answer: the others decide */
        c->ctl_expected--;
        c->ctl_replies--;
        ctl_reply_locked(c, VLLM_OK, NULL);
    }
    pthread_mutex_unlock(&c->ctl_mu);
    log_error("data parallel engine %d %s; its %lld running requests fail; %d of %d engines left", k, why,
              (long long)e->live, c->num_alive, c->n);
    char msg[160];
    snprintf(msg, sizeof msg, "Data parallel engine %d %s; the request was lost.", k, why);
    for (map_node *nd = map_first(&c->reqs), *next; nd; nd = next) {
        next = map_next(&c->reqs, nd);
        dp_req *r = map_entry(nd, dp_req, by_id);
        if (r->engine != k) continue;
        for (int32_t i = 0; i < r->n; i++)
            if (!r->finished[i]) synth_finish(c, r->id, i, msg);
        req_forget(c, r);
    }
    c->synth_engine = k;
}

static void check_children(dp_client *c) {
    for (int32_t k = 0; k < c->n; k++) {
        dp_eng *e = &c->eng[k];
        int st;
        if (!e->alive || e->pid <= 0 || waitpid(e->pid, &st, WNOHANG) != e->pid) continue;
        char why[96];
        if (WIFSIGNALED(st)) snprintf(why, sizeof why, "(pid %d) was killed by signal %d", (int)e->pid, WTERMSIG(st));
        else snprintf(why, sizeof why, "(pid %d) exited with status %d", (int)e->pid, WEXITSTATUS(st));
        e->pid = 0;
        bool was_ready = e->hello;
        engine_died(c, k, why);
        if (!c->cfg.restart_engines) continue;
        if (!was_ready || e->restarts >= DP_RESTART_MAX) {
            log_error("data parallel engine %d: not restarting it (%s)", k,
                      was_ready ? "restarted too often" : "it died before it was ready");
            continue;
        }
        e->restarts++;
        e->hello = false; /* until the new one's HELLO */
        if (dp_engine_spawn(c->argc, c->argv, k, c->cfg.address, c->port, &e->pid) != VLLM_OK)
            log_error("data parallel engine %d: cannot restart it: %s", k, vllm_errmsg());
        else log_warn("data parallel engine %d: restarting it (pid %d)", k, (int)e->pid);
    }
}

static void drain_monitor(dp_client *c) {
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        zmq_msg_close(&ev);
        zmq_msg_init(&ev);
        zmq_msg_recv(&ev, c->mon, 0);
        zmq_msg_close(&ev);
        c->probe_until = clock_now() + PROBE_SECONDS;
    }
}

/* After a disconnect: which engine was it? Sends to a gone peer fail. */
static void probe(dp_client *c) {
    dp_wire_reset(&c->w);
    dp_wire_id(&c->w, DP_MSG_PING, "", 0);
    for (int32_t k = 0; k < c->n; k++)
        if (c->eng[k].alive && send_to(c, k) != 0 && errno == EHOSTUNREACH)
            engine_died(c, k, "lost its connection to the front end");
}

static int32_t engine_of(dp_client *c, const void *rid, size_t len) {
    char buf[32];
    if (len >= sizeof buf || len < 8 || memcmp(rid, "engine-", 7)) return -1;
    memcpy(buf, rid, len);
    buf[len] = 0;
    int32_t k;
    return parse_int(buf + 7, 0, c->n - 1, &k) ? k : -1;
}

static vllm_status take_hello(dp_client *c, int32_t k, const void *data, size_t len, dp_hello *h0) {
    dp_hello h;
    vllm_status rc = dp_wire_read_hello(data, len, &h);
    if (rc != VLLM_OK) return rc;
    dp_eng *e = &c->eng[k];
    if (h.engine_index != k)
        return vllm_error(VLLM_ERR_INVALID, "dp: engine %d says it is engine %d", k, h.engine_index);
    if (e->alive) /* a new engine under this index: the old one is gone */
        engine_died(c, k, "was replaced by a new engine under its index");
    bool again = e->ever_ready;
    if (h0 && k != 0 && c->eng[0].hello &&
        (h.info.vocab_size != h0->info.vocab_size || h.info.max_model_len != h0->info.max_model_len))
        return vllm_error(VLLM_ERR_INVALID, "dp: engine %d serves a different model (vocab %d, max_model_len %d; "
                          "engine 0: vocab %d, max_model_len %d)", k, h.info.vocab_size, h.info.max_model_len,
                          h0->info.vocab_size, h0->info.max_model_len);
    if (again) { /* its requests have failed: start from nothing */
        e->waiting = e->running = 0;
        e->adds_sent = e->adds_acked = e->live = 0;
        memset(&e->stats, 0, sizeof e->stats);
        e->cur.count = e->prev.count = 0;
        if (e->cur.slots) memset(e->cur.slots, 0, PREFIX_SET_SIZE * sizeof *e->cur.slots);
        if (e->prev.slots) memset(e->prev.slots, 0, PREFIX_SET_SIZE * sizeof *e->prev.slots);
    }
    e->ever_ready = true;
    e->hello = e->alive = true;
    e->num_gpu_blocks = h.info.num_gpu_blocks;
    c->num_alive++;
    if (k == 0 && h0) {
        *h0 = h;
        h0->info.kv_cache_dtype = h0->kv_cache_dtype;
        h0->info.kv_cache_storage_dtype = h0->kv_cache_storage_dtype;
    }
    if (!c->block_size) c->block_size = h.info.block_size;
    log_info("data parallel engine %d is ready%s (pid %d%s, %d KV blocks)", k, again ? " again" : "", h.pid,
             e->pid ? "" : ", remote", h.info.num_gpu_blocks);
    return VLLM_OK;
}

/* ---- create / free ----------------------------------------------------------------- */

vllm_status dp_client_create(const dp_config *cfg, int argc, char **argv, dp_client **out, dp_hello *hello) {
    *out = NULL;
    memset(hello, 0, sizeof *hello);
    int32_t local = cfg->size_local < 0 ? cfg->size : cfg->size_local;
    if (local > cfg->size)
        return vllm_error(VLLM_ERR_INVALID, "--data-parallel-size-local %d is more than --data-parallel-size %d",
                          local, cfg->size);
    dp_client *c = calloc(1, sizeof *c);
    if (!c) return vllm_error(VLLM_ERR_NOMEM, "dp: client");
    c->cfg = *cfg;
    c->n = cfg->size;
    c->argc = argc;
    c->argv = argv;
    c->wake_fd = -1;
    pthread_mutex_init(&c->ctl_mu, NULL);
    pthread_cond_init(&c->ctl_cv, NULL);
    map_init(&c->reqs);
    c->eng = calloc((size_t)c->n, sizeof *c->eng);
    c->zctx = zmq_ctx_new();
    c->router = c->zctx ? zmq_socket(c->zctx, ZMQ_ROUTER) : NULL;
    c->mon = c->zctx ? zmq_socket(c->zctx, ZMQ_PAIR) : NULL;
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    vllm_status rc = VLLM_OK;
    if (!c->eng || !c->router || !c->mon || c->wake_fd < 0) {
        rc = vllm_error(VLLM_ERR_NOMEM, "dp: cannot set up ZeroMQ: %s", zmq_strerror(errno));
        goto fail;
    }
    for (int32_t k = 0; k < c->n; k++)
        c->eng[k].rid_len = (size_t)snprintf(c->eng[k].rid, sizeof c->eng[k].rid, "engine-%d", k);
    int one = 1, zero = 0, ivl = DP_HEARTBEAT_IVL_MS, hto = DP_HEARTBEAT_TIMEOUT_MS;
    zmq_setsockopt(c->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(c->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one); /* a restarted engine takes its id back */
    zmq_setsockopt(c->router, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(c->router, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(c->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->router, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(c->router, ZMQ_HEARTBEAT_TIMEOUT, &hto, sizeof hto);
    char ep[300], mon_ep[64];
    int32_t port = cfg->rpc_port;
    bool any_port = port == 0 && local == cfg->size;
    if (port == 0 && !any_port) port = DP_DEFAULT_RPC_PORT;
    if (any_port) snprintf(ep, sizeof ep, "tcp://%s:*", cfg->address);
    else snprintf(ep, sizeof ep, "tcp://%s:%d", cfg->address, port);
    snprintf(mon_ep, sizeof mon_ep, "inproc://dp-client-monitor-%p", (void *)c);
    if (zmq_socket_monitor(c->router, mon_ep, ZMQ_EVENT_DISCONNECTED) != 0 || zmq_connect(c->mon, mon_ep) != 0) {
        rc = vllm_error(VLLM_ERR_IO, "dp: cannot monitor the front end's socket: %s", zmq_strerror(errno));
        goto fail;
    }
    if (zmq_bind(c->router, ep) != 0) {
        rc = vllm_error(VLLM_ERR_IO, "dp: cannot bind %s (--data-parallel-address / --data-parallel-rpc-port): %s",
                        ep, zmq_strerror(errno));
        goto fail;
    }
    if (any_port) {
        char last[300];
        size_t n = sizeof last;
        zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, last, &n);
        const char *colon = strrchr(last, ':');
        port = colon ? atoi(colon + 1) : 0;
    }
    c->port = port;
    log_info("data parallel: %d engines (%d started here), front end at tcp://%s:%d, routing %s", c->n, local,
             cfg->address, port, cfg->routing == DP_ROUTING_PREFIX_CACHE ? "prefix_cache" : "least_loaded");
    for (int32_t k = 0; k < local; k++) {
        if ((rc = dp_engine_spawn(argc, argv, k, cfg->address, port, &c->eng[k].pid)) != VLLM_OK) goto fail;
    }
    /* every engine's HELLO */
    double deadline = clock_now() + cfg->ready_timeout;
    int32_t num_hello = 0;
    while (num_hello < c->n) {
        check_children(c);
        for (int32_t k = 0; k < c->n; k++)
            if (c->eng[k].pid == 0 && k < local && !c->eng[k].hello) {
                rc = vllm_error(VLLM_ERR_IO, "data parallel engine %d exited during start-up (see its log above)", k);
                goto fail;
            }
        if (clock_now() > deadline) {
            rc = vllm_error(VLLM_ERR_IO, "dp: only %d of %d engines said hello within %.0f s "
                            "(VLLM_ENGINE_READY_TIMEOUT_S); are the headless engines pointed at tcp://%s:%d?",
                            num_hello, c->n, cfg->ready_timeout, cfg->address, port);
            goto fail;
        }
        zmq_pollitem_t it = {c->router, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 200) <= 0) continue;
        zmq_msg_t id, m;
        zmq_msg_init(&id);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&id, c->router, 0) >= 0 && zmq_msg_more(&id) && zmq_msg_recv(&m, c->router, 0) >= 0) {
            int32_t k = engine_of(c, zmq_msg_data(&id), zmq_msg_size(&id));
            const uint8_t *p = zmq_msg_data(&m);
            if (k >= 0 && zmq_msg_size(&m) && p[0] == DP_MSG_HELLO) {
                bool had = c->eng[k].hello;
                rc = take_hello(c, k, p, zmq_msg_size(&m), hello);
                if (rc == VLLM_OK && !had) num_hello++;
            } else log_warn("dp: ignoring a message from an unknown peer during start-up");
        }
        zmq_msg_close(&id);
        zmq_msg_close(&m);
        if (rc != VLLM_OK) goto fail;
    }
    *out = c;
    return VLLM_OK;
fail:
    dp_client_free(c);
    return rc;
}

void dp_client_free(dp_client *c) {
    if (!c) return;
    for (int32_t k = 0; c->eng && k < c->n; k++) {
        dp_eng *e = &c->eng[k];
        if (e->pid > 0) {
            kill(e->pid, SIGTERM);
            int st;
            double until = clock_now() + 5;
            while (waitpid(e->pid, &st, WNOHANG) == 0 && clock_now() < until) usleep(10000);
            if (waitpid(e->pid, &st, WNOHANG) == 0) {
                kill(e->pid, SIGKILL);
                waitpid(e->pid, &st, 0);
            }
        }
        free(e->cur.slots);
        free(e->prev.slots);
    }
    for (map_node *nd = map_first(&c->reqs), *next; nd; nd = next) {
        next = map_next(&c->reqs, nd);
        req_forget(c, map_entry(nd, dp_req, by_id));
    }
    map_deinit(&c->reqs);
    if (c->holding) zmq_msg_close(&c->held);
    if (c->mon) zmq_close(c->mon);
    if (c->router) zmq_close(c->router);
    if (c->zctx) zmq_ctx_term(c->zctx);
    if (c->wake_fd >= 0) close(c->wake_fd);
    for (size_t i = 0; i < c->n_synth_strs; i++) free(c->synth_strs[i]);
    free(c->synth_strs);
    free(c->synth);
    free(c->hashes);
    dp_wire_free(&c->w);
    dp_wire_output_decoder_free(&c->dec);
    free(c->eng);
    free(c->ctl_name);
    free(c->ctl_path);
    pthread_cond_destroy(&c->ctl_cv);
    pthread_mutex_destroy(&c->ctl_mu);
    free(c);
}

int64_t dp_client_num_routed(dp_client *c, int32_t k) { return k >= 0 && k < c->n ? c->eng[k].routed : 0; }

int32_t dp_client_size(const dp_client *c) { return c->n; }

int32_t dp_client_num_gpu_blocks(const dp_client *c, int32_t k) {
    return k >= 0 && k < c->n ? c->eng[k].num_gpu_blocks : 0;
}

/* ---- the frontend's engine ops -------------------------------------------------------- */

static vllm_status op_add(void *ud, const char *id, const int32_t *prompt, int32_t n, const vllm_sampling_params *sp,
                          const vllm_request_opts *opts) {
    dp_client *c = ud;
    if (map_find(&c->reqs, id)) return vllm_error(VLLM_ERR_INVALID, "request %s is already running", id);
    vllm_status rc = vllm_sampling_params_validate(sp);
    if (rc != VLLM_OK) return rc;
    int32_t nseq = sp->n < 1 ? 1 : sp->n;
    dp_req *r = calloc(1, sizeof *r + (size_t)nseq);
    if (!r || !(r->id = strdup(id))) {
        free(r);
        return vllm_error(VLLM_ERR_NOMEM, "dp: out of memory adding %s", id);
    }
    r->n = nseq;
    dp_add a = {id, prompt, n, sp, opts ? *opts : (vllm_request_opts){0}};
    dp_wire_reset(&c->w);
    dp_wire_add(&c->w, &a);
    size_t nb = c->cfg.routing == DP_ROUTING_PREFIX_CACHE ? block_hashes(c, prompt, n, a.opts.cache_salt) : 0;
    for (;;) {
        int32_t k = route(c, nb);
        if (k < 0) {
            free(r->id);
            free(r);
            return vllm_error(VLLM_ERR_INVALID, "No data parallel engine is alive; see the server log.");
        }
        if (send_to(c, k) != 0) {
            if (errno == EHOSTUNREACH) {
                engine_died(c, k, "lost its connection to the front end");
                continue;
            }
            free(r->id);
            free(r);
            return vllm_error(VLLM_ERR_IO, "dp: cannot send request %s to engine %d: %s", id, k, zmq_strerror(errno));
        }
        r->engine = k;
        dp_eng *e = &c->eng[k];
        e->adds_sent++;
        e->routed++;
        e->live++;
        for (size_t b = 0; b < nb; b++) set_add(e, c->hashes[b]);
        break;
    }
    if ((rc = map_insert(&c->reqs, &r->by_id, r->id)) != VLLM_OK) { /* the engine has it: abort there */
        dp_wire_reset(&c->w);
        dp_wire_id(&c->w, DP_MSG_ABORT, id, 0);
        send_to(c, r->engine);
        c->eng[r->engine].live--;
        free(r->id);
        free(r);
        return rc;
    }
    return VLLM_OK;
}

static vllm_status send_id(dp_client *c, dp_msg_type type, const char *id, int32_t index) {
    map_node *nd = map_find(&c->reqs, id);
    if (!nd) return VLLM_ERR_NOT_FOUND;
    dp_req *r = map_entry(nd, dp_req, by_id);
    if (!c->eng[r->engine].alive) return VLLM_ERR_NOT_FOUND;
    dp_wire_reset(&c->w);
    dp_wire_id(&c->w, type, id, index);
    if (send_to(c, r->engine) != 0 && errno == EHOSTUNREACH)
        engine_died(c, r->engine, "lost its connection to the front end");
    return VLLM_OK;
}

static vllm_status op_abort(void *ud, const char *id) { return send_id(ud, DP_MSG_ABORT, id, 0); }
static vllm_status op_stop(void *ud, const char *id, int32_t index) { return send_id(ud, DP_MSG_STOP, id, index); }

/* Always: the engine thread keeps watching the engines (a poll of up to a
 * second when idle), so an engine that dies while the server is idle is
 * noticed too, and when the last one is gone step fails once and the
 * frontend reports the engine dead (/health 503). */
static bool op_has_unfinished(void *ud) {
    (void)ud;
    return true;
}

static void op_wake(void *ud) {
    dp_client *c = ud;
    uint64_t one = 1;
    if (write(c->wake_fd, &one, sizeof one) < 0) { /* EAGAIN: already woken */ }
}

/* An engine's OUTPUT: bookkeeping, then it is the step. */
static void note_output(dp_client *c, int32_t k, const dp_output_decoder *d) {
    dp_eng *e = &c->eng[k];
    e->adds_acked = d->num_adds;
    e->waiting = d->out.stats.num_waiting;
    e->running = d->out.stats.num_running;
    e->stats = d->out.stats;
    for (int32_t i = 0; i < d->out.num_outputs; i++) {
        const vllm_seq_output *o = &d->out.outputs[i];
        if (o->finish_reason == VLLM_FINISH_NONE) continue;
        map_node *nd = map_find(&c->reqs, o->request_id);
        if (!nd) continue;
        dp_req *r = map_entry(nd, dp_req, by_id);
        if (r->engine != k || o->index < 0 || o->index >= r->n || r->finished[o->index]) continue;
        r->finished[o->index] = 1;
        if (++r->num_finished == r->n) req_forget(c, r);
    }
}

/* A queued LoRA update to every live engine (engine thread). */
static void ctl_send(dp_client *c) {
    pthread_mutex_lock(&c->ctl_mu);
    if (c->ctl == CTL_QUEUED) {
        dp_wire_reset(&c->w);
        dp_wire_lora(&c->w, c->ctl_seq, c->ctl_load, c->ctl_name, c->ctl_path);
        c->ctl_expected = c->ctl_replies = 0;
        for (int32_t k = 0; k < c->n; k++) {
            dp_eng *e = &c->eng[k];
            e->ctl_asked = e->ctl_replied = false;
            if (e->alive && send_to(c, k) == 0) e->ctl_asked = true, c->ctl_expected++;
        }
        c->ctl = CTL_SENT;
        if (!c->ctl_expected) {
            c->ctl_status = VLLM_ERR_IO;
            snprintf(c->ctl_err, sizeof c->ctl_err, "No data parallel engine is alive; see the server log.");
            c->ctl = CTL_DONE;
            pthread_cond_broadcast(&c->ctl_cv);
        }
    }
    pthread_mutex_unlock(&c->ctl_mu);
}

static void ctl_take_reply(dp_client *c, int32_t k, const void *p, size_t len) {
    uint64_t seq;
    vllm_status st;
    const char *err;
    if (dp_wire_read_reply(p, len, &seq, &st, &err) != VLLM_OK) {
        log_error("dp: a bad REPLY from engine %d: %s", k, vllm_errmsg());
        return;
    }
    pthread_mutex_lock(&c->ctl_mu);
    dp_eng *e = &c->eng[k];
    if (c->ctl == CTL_SENT && seq == c->ctl_seq && e->ctl_asked && !e->ctl_replied) {
        e->ctl_replied = true;
        if (st != VLLM_OK) log_warn("data parallel engine %d: LoRA update refused: %s", k, err ? err : "?");
        ctl_reply_locked(c, st, err);
    }
    pthread_mutex_unlock(&c->ctl_mu);
}

vllm_status dp_client_lora(dp_client *c, bool load, const char *name, const char *path) {
    char *n = strdup(name), *pth = path ? strdup(path) : NULL;
    if (!n || (path && !pth)) {
        free(n);
        free(pth);
        return vllm_error(VLLM_ERR_NOMEM, "dp: a LoRA update");
    }
    pthread_mutex_lock(&c->ctl_mu);
    while (c->ctl != CTL_IDLE) pthread_cond_wait(&c->ctl_cv, &c->ctl_mu); /* one update at a time */
    free(c->ctl_name);
    free(c->ctl_path);
    c->ctl_name = n;
    c->ctl_path = pth;
    c->ctl_load = load;
    c->ctl_seq++;
    c->ctl_status = VLLM_OK;
    c->ctl_err[0] = 0;
    c->ctl = CTL_QUEUED;
    pthread_mutex_unlock(&c->ctl_mu);
    op_wake(c);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DP_CONTROL_TIMEOUT_S;
    pthread_mutex_lock(&c->ctl_mu);
    int w = 0;
    while (c->ctl != CTL_DONE && w != ETIMEDOUT) w = pthread_cond_timedwait(&c->ctl_cv, &c->ctl_mu, &until);
    vllm_status rc = c->ctl == CTL_DONE ? c->ctl_status : VLLM_ERR_IO;
    char err[512];
    snprintf(err, sizeof err, "%s", c->ctl == CTL_DONE ? c->ctl_err
                                                       : "the data parallel engines did not answer the LoRA update");
    c->ctl = CTL_IDLE;
    pthread_cond_broadcast(&c->ctl_cv);
    pthread_mutex_unlock(&c->ctl_mu);
    return rc == VLLM_OK ? VLLM_OK : vllm_error(rc, "%s", err);
}

static vllm_status op_step(void *ud, const vllm_step_output **out, int32_t *engine_index) {
    dp_client *c = ud;
    *out = NULL;
    *engine_index = 0;
    if (c->holding) {
        zmq_msg_close(&c->held);
        c->holding = false;
    }
    if (c->synth_sent) { /* the previous step handed these out */
        for (size_t i = 0; i < c->n_synth_strs; i++) free(c->synth_strs[i]);
        c->n_synth = c->n_synth_strs = 0;
        c->synth_sent = false;
    }
    check_children(c);
    if (c->n_synth) {
        c->synth_out = (vllm_step_output){.timestamp = vllm_monotonic_time(), .num_outputs = (int32_t)c->n_synth,
                                          .outputs = c->synth};
        c->synth_out.stats.num_blocks_total = c->eng[c->synth_engine].stats.num_blocks_total;
        c->synth_out.stats.num_blocks_free = c->synth_out.stats.num_blocks_total;
        c->synth_sent = true;
        *out = &c->synth_out;
        *engine_index = c->synth_engine;
        return VLLM_OK;
    }
    if (c->num_alive == 0) return vllm_error(VLLM_ERR_IO, "every data parallel engine is gone");
    ctl_send(c);
    bool probing = clock_now() < c->probe_until;
    if (probing) probe(c);
    zmq_pollitem_t items[3] = {{c->router, 0, ZMQ_POLLIN, 0}, {c->mon, 0, ZMQ_POLLIN, 0},
                               {NULL, c->wake_fd, ZMQ_POLLIN, 0}};
    int rcp = zmq_poll(items, 3, probing ? 100 : 1000);
    if (rcp < 0 && errno != EINTR) return vllm_error(VLLM_ERR_IO, "dp: zmq_poll: %s", zmq_strerror(errno));
    if (items[1].revents & ZMQ_POLLIN) drain_monitor(c);
    if (items[2].revents & ZMQ_POLLIN) {
        uint64_t v;
        if (read(c->wake_fd, &v, sizeof v) < 0) { /* EAGAIN: someone else read it */ }
    }
    if (!(items[0].revents & ZMQ_POLLIN)) return VLLM_OK;
    zmq_msg_t id;
    zmq_msg_init(&id);
    zmq_msg_init(&c->held);
    c->holding = true;
    if (zmq_msg_recv(&id, c->router, ZMQ_DONTWAIT) < 0 || !zmq_msg_more(&id) ||
        zmq_msg_recv(&c->held, c->router, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&id);
        return VLLM_OK;
    }
    int32_t k = engine_of(c, zmq_msg_data(&id), zmq_msg_size(&id));
    zmq_msg_close(&id);
    const uint8_t *p = zmq_msg_data(&c->held);
    size_t len = zmq_msg_size(&c->held);
    if (k < 0 || !len) {
        log_warn("dp: ignoring a message from an unknown peer");
        return VLLM_OK;
    }
    if (p[0] == DP_MSG_HELLO) {
        if (take_hello(c, k, p, len, NULL) != VLLM_OK) log_error("dp: %s", vllm_errmsg());
        return VLLM_OK;
    }
    if (!c->eng[k].alive) return VLLM_OK; /* a late message from an engine given up on */
    if (p[0] == DP_MSG_REPLY) {
        ctl_take_reply(c, k, p, len);
        return VLLM_OK;
    }
    if (p[0] != DP_MSG_OUTPUT || dp_wire_read_output(p, len, &c->dec) != VLLM_OK) {
        log_error("dp: a bad message from engine %d: %s", k, p[0] == DP_MSG_OUTPUT ? vllm_errmsg() : "unknown type");
        return VLLM_OK;
    }
    note_output(c, k, &c->dec);
    *out = &c->dec.out;
    *engine_index = k;
    return VLLM_OK;
}

static void op_free(void *ud) { dp_client_free(ud); }

const frontend_engine_ops *dp_client_ops(void) {
    static const frontend_engine_ops ops = {op_add, op_abort, op_stop, op_has_unfinished, op_step, op_wake, op_free};
    return &ops;
}

/* ---- headless ------------------------------------------------------------------------ */

int dp_client_run_headless(const dp_config *c, const vllm_engine_args *ea, int argc, char **argv,
                           dp_engine_setup_fn setup) {
    int32_t local = c->size_local < 0 ? 1 : c->size_local;
    int32_t port = c->rpc_port ? c->rpc_port : DP_DEFAULT_RPC_PORT;
    if (local < 1 || c->start_rank + local > c->size) {
        fprintf(stderr, "vllmc serve: --headless runs engines %d..%d, but --data-parallel-size is %d\n",
                c->start_rank, c->start_rank + local - 1, c->size);
        return 2;
    }
    if (local == 1) {
        return dp_engine_run(ea, c->address, port, c->api_server_count, c->start_rank, setup);
    }
    pid_t *pids = calloc((size_t)local, sizeof *pids);
    if (!pids) return 1;
    int status = 0;
    for (int32_t j = 0; j < local; j++)
        if (dp_engine_spawn(argc, argv, c->start_rank + j, c->address, port, &pids[j]) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            status = 1;
        }
    for (int32_t j = 0; j < local; j++) {
        int st;
        if (pids[j] > 0 && waitpid(pids[j], &st, 0) == pids[j] && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            log_error("data parallel engine %d ended: %s %d", c->start_rank + j,
                      WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            status = 1;
        }
    }
    free(pids);
    return status;
}
