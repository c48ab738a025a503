/*
 * dp_engine.c - see dp_engine.h.
 */
#include "dist/dp_engine.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "dist/dp_wire.h"
#include "dist/self_exec.h"

typedef struct refused {
    char *id;
    char *error;
    int32_t n;
} refused;

static int send_msg(void *sock, const dp_wire_writer *w) {
    if (w->oom) {
        log_error("dp engine: out of memory building a message");
        return -1;
    }
    return zmq_send(sock, w->data, w->len, 0) < 0 ? -1 : 0;
}

/* True when the monitor reports the connection to the front end dropped. */
static bool front_end_gone(void *mon) {
    bool gone = false;
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            break;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= 2) memcpy(&event, zmq_msg_data(&ev), 2);
        zmq_msg_close(&ev);
        zmq_msg_init(&addr);
        zmq_msg_recv(&addr, mon, 0); /* the endpoint frame */
        zmq_msg_close(&addr);
        if (event == ZMQ_EVENT_DISCONNECTED) gone = true;
    }
    return gone;
}

/* One API server (front end) this engine serves: its own DEALER socket
 * (routing id "engine-K") connected to tcp://ADDRESS:PORT+i. With more than
 * one, request ids carry "i/" inside this engine (two front ends may pick the
 * same id) and each step's outputs are split by that prefix. */
typedef struct client {
    void *sock, *mon;
    char endpoint[300];
    bool gone;
    int64_t num_adds;
    vllm_seq_output *outs;
    size_t num_outs, cap_outs;
} client;

/* Which client a request id belongs to ("i/..." with more than one); -1: none. */
static int32_t client_of(const char *id, int32_t num_clients, const char **rest) {
    *rest = id;
    if (num_clients == 1) return 0;
    char *end;
    long v = strtol(id, &end, 10);
    if (end == id || *end != '/' || v < 0 || v >= num_clients) return -1;
    *rest = end + 1;
    return (int32_t)v;
}

/* The per-step counters of a step's stats: only one front end may see them
 * (each forwards what it sees to the metrics owner, which adds them up). */
static void zero_step_counters(vllm_scheduler_stats *s) {
    s->prefix_cache_queries = s->prefix_cache_hits = 0;
    s->external_prefix_cache_queries = s->external_prefix_cache_hits = 0;
    s->num_preemptions = s->num_scheduled_tokens = s->num_scheduled_seqs = 0;
    s->spec_num_drafts = s->spec_num_draft_tokens = s->spec_num_accepted_tokens = 0;
    memset(s->spec_num_accepted_tokens_per_pos, 0, sizeof s->spec_num_accepted_tokens_per_pos);
}

/* One step to every front end still there: each its own requests (the "i/"
 * taken off again) and the engine's stats; the step's counters go to the
 * lowest-numbered one only. A front end that cannot take it is skipped
 * (its disconnect will be seen by the monitor). */
static int split_send(client *cl, int32_t num_clients, int32_t engine_index, dp_wire_writer *w, bool stepped,
                      const vllm_step_output *send) {
    int32_t counter = -1;
    for (int32_t i = 0; i < num_clients; i++) {
        cl[i].num_outs = 0;
        if (counter < 0 && !cl[i].gone) counter = i;
    }
    for (int32_t k = 0; k < send->num_outputs; k++) {
        const char *rest;
        int32_t i = client_of(send->outputs[k].request_id, num_clients, &rest);
        if (i < 0 || cl[i].gone) continue;
        client *c = &cl[i];
        if (buf_grow((void **)&c->outs, &c->cap_outs, c->num_outs + 1, sizeof *c->outs) != VLLM_OK) {
            log_error("data parallel engine %d: out of memory", engine_index);
            return -1;
        }
        c->outs[c->num_outs] = send->outputs[k];
        c->outs[c->num_outs++].request_id = rest;
    }
    for (int32_t i = 0; i < num_clients; i++) {
        client *c = &cl[i];
        if (c->gone) continue;
        vllm_step_output o = *send;
        o.outputs = c->outs;
        o.num_outputs = (int32_t)c->num_outs;
        if (i != counter) zero_step_counters(&o.stats);
        dp_wire_reset(w);
        dp_wire_output(w, c->num_adds, stepped && i == counter, &o);
        if (w->oom) {
            log_error("data parallel engine %d: out of memory building a message", engine_index);
            return -1;
        }
        if (zmq_send(c->sock, w->data, w->len, ZMQ_DONTWAIT) < 0)
            log_warn("data parallel engine %d: cannot send a step to %s: %s", engine_index, c->endpoint,
                     zmq_strerror(errno));
    }
    return 0;
}

int dp_engine_run(const vllm_engine_args *ea, const char *address, int32_t port, int32_t num_clients,
                  int32_t engine_index, dp_engine_setup_fn setup) {
    int status = 1;
    vllm_engine *engine = NULL;
    void *ctx = NULL;
    client *cl = calloc((size_t)(num_clients > 0 ? num_clients : 1), sizeof *cl);
    dp_wire_writer w = {0};
    dp_add_scratch scratch = {0};
    refused *ref = NULL;
    size_t num_ref = 0, cap_ref = 0;
    vllm_seq_output *outs = NULL;
    size_t cap_outs = 0;
    char *idbuf = NULL;
    size_t cap_idbuf = 0;
    zmq_pollitem_t *items = NULL;
    vllm_scheduler_stats last_stats = {0};

    const char *delay = getenv("VLLMC_DEBUG_STEP_DELAY_US"); /* as frontend.h's: a slow engine, for tests */
    long step_delay_us = delay && *delay ? atol(delay) : 0;
    if (!cl || num_clients < 1) {
        log_error("data parallel engine %d: out of memory", engine_index);
        free(cl);
        return 1;
    }
    if (num_clients > 1) { /* several API servers' logs share this stderr */
        char prefix[48];
        snprintf(prefix, sizeof prefix, "(EngineCore_DP%d pid=%d) ", engine_index, (int)getpid());
        log_set_prefix(prefix);
    }
    for (int32_t i = 0; i < num_clients; i++)
        snprintf(cl[i].endpoint, sizeof cl[i].endpoint, "tcp://%s:%d", address, port + i);
    log_info("data parallel engine %d: loading the model, then connecting to %s%s", engine_index, cl[0].endpoint,
             num_clients > 1 ? " and the next ports (one per API server)" : "");
    if (vllm_engine_create(ea, &engine) != VLLM_OK || (setup && setup(engine, ea) != VLLM_OK)) {
        log_error("data parallel engine %d: %s", engine_index, vllm_errmsg());
        vllm_engine_free(engine);
        free(cl);
        return 1;
    }
    ctx = zmq_ctx_new();
    items = calloc((size_t)num_clients * 2, sizeof *items);
    if (!ctx || !items) {
        log_error("data parallel engine %d: cannot create a ZeroMQ context: %s", engine_index, zmq_strerror(errno));
        goto out;
    }
    char rid[32];
    int n = snprintf(rid, sizeof rid, "engine-%d", engine_index);
    int ivl = DP_HEARTBEAT_IVL_MS, hto = DP_HEARTBEAT_TIMEOUT_MS, linger = 1000, zero = 0;
    for (int32_t i = 0; i < num_clients; i++) {
        client *c = &cl[i];
        char mon_ep[64];
        c->sock = zmq_socket(ctx, ZMQ_DEALER);
        c->mon = zmq_socket(ctx, ZMQ_PAIR);
        if (!c->sock || !c->mon) {
            log_error("data parallel engine %d: cannot create ZeroMQ sockets: %s", engine_index, zmq_strerror(errno));
            goto out;
        }
        zmq_setsockopt(c->sock, ZMQ_ROUTING_ID, rid, (size_t)n);
        zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
        zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_TIMEOUT, &hto, sizeof hto);
        zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
        if (num_clients > 1) zmq_setsockopt(c->sock, ZMQ_SNDHWM, &zero, sizeof zero); /* never block on one */
        snprintf(mon_ep, sizeof mon_ep, "inproc://dp-engine-monitor-%d-%d", engine_index, i);
        if (zmq_socket_monitor(c->sock, mon_ep, ZMQ_EVENT_DISCONNECTED) != 0 ||
            zmq_connect(c->mon, mon_ep) != 0 || zmq_connect(c->sock, c->endpoint) != 0) {
            log_error("data parallel engine %d: cannot connect to %s: %s", engine_index, c->endpoint,
                      zmq_strerror(errno));
            goto out;
        }
        items[2 * i] = (zmq_pollitem_t){c->sock, 0, ZMQ_POLLIN, 0};
        items[2 * i + 1] = (zmq_pollitem_t){c->mon, 0, ZMQ_POLLIN, 0};
    }
    vllm_engine_info info;
    vllm_engine_get_info(engine, &info);
    vllm_sampling_params dsp;
    vllm_engine_default_sampling_params(engine, &dsp);
    dp_wire_hello(&w, engine_index, &info, &dsp);
    for (int32_t i = 0; i < num_clients; i++)
        if (send_msg(cl[i].sock, &w) != 0) {
            log_error("data parallel engine %d: cannot send HELLO to %s: %s", engine_index, cl[i].endpoint,
                      zmq_strerror(errno));
            goto out;
        }
    log_info("data parallel engine %d: ready (%d KV blocks of %d tokens, %d threads)", engine_index,
             info.num_gpu_blocks, info.block_size, info.num_threads);

    int32_t num_gone = 0;
    for (;;) {
        bool busy = vllm_engine_has_unfinished(engine);
        if (zmq_poll(items, num_clients * 2, busy || num_ref ? 0 : 1000) < 0 && errno != EINTR) {
            log_error("data parallel engine %d: zmq_poll: %s", engine_index, zmq_strerror(errno));
            goto out;
        }
        for (int32_t i = 0; i < num_clients; i++) {
            client *c = &cl[i];
            if (!(items[2 * i + 1].revents & ZMQ_POLLIN) || c->gone || !front_end_gone(c->mon))
                continue;
            c->gone = true;
            num_gone++;
            if (num_gone == num_clients) {
                log_warn("data parallel engine %d: the front end at %s went away; exiting", engine_index,
                         c->endpoint);
                status = 0;
                goto out;
            }
            log_warn("data parallel engine %d: API server %d (%s) went away; %d of %d left", engine_index, i,
                     c->endpoint, num_clients - num_gone, num_clients);
        }
        for (int32_t ci = 0; ci < num_clients; ci++)
            for (;;) { /* every queued command */
                zmq_msg_t m;
                zmq_msg_init(&m);
                if (zmq_msg_recv(&m, cl[ci].sock, ZMQ_DONTWAIT) < 0) {
                    zmq_msg_close(&m);
                    break;
                }
                const uint8_t *p = zmq_msg_data(&m);
                size_t len = zmq_msg_size(&m);
                dp_add a = {0};
                const char *id = NULL;
                int32_t index;
                uint8_t type = len ? p[0] : 0;
                bool ok = true;
                switch (type) {
                case DP_MSG_ADD:
                    cl[ci].num_adds++;
                    ok = dp_wire_read_add(p, len, &scratch, &a) == VLLM_OK;
                    id = ok ? a.request_id : NULL;
                    break;
                case DP_MSG_ABORT:
                case DP_MSG_STOP:
                    ok = dp_wire_read_id(p, len, &id, &index) == VLLM_OK;
                    break;
                case DP_MSG_PING:
                    zmq_msg_close(&m);
                    continue;
                case DP_MSG_LORA: { /* a runtime adapter update: answer the front end that sent it */
                    uint64_t seq = 0;
                    bool load;
                    const char *name, *path;
                    vllm_status rc = dp_wire_read_lora(p, len, &seq, &load, &name, &path);
                    if (rc == VLLM_OK) rc = load ? vllm_engine_load_lora(engine, name, path ? path : "")
                                                 : vllm_engine_unload_lora(engine, name);
                    if (rc == VLLM_OK)
                        log_info("data parallel engine %d: LoRA adapter '%s' %s", engine_index, name,
                                 load ? "loaded" : "unloaded");
                    dp_wire_writer rw = {0};
                    dp_wire_reply(&rw, seq, rc, rc == VLLM_OK ? NULL : vllm_errmsg());
                    if (rw.oom || zmq_send(cl[ci].sock, rw.data, rw.len, ZMQ_DONTWAIT) < 0)
                        log_warn("data parallel engine %d: cannot answer a LoRA update", engine_index);
                    dp_wire_free(&rw);
                    zmq_msg_close(&m);
                    continue;
                }
                default:
                    log_warn("data parallel engine %d: ignoring a message of unknown type (%zu bytes)", engine_index,
                             len);
                    zmq_msg_close(&m);
                    continue;
                }
                if (ok && num_clients > 1) { /* this engine's name for the request: "ci/id" */
                    size_t need = strlen(id) + 16;
                    if (buf_grow((void **)&idbuf, &cap_idbuf, need, 1) != VLLM_OK) ok = false;
                    else snprintf(idbuf, need, "%d/%s", ci, id), id = idbuf;
                }
                if (type == DP_MSG_ADD) {
                    if (!ok || vllm_engine_add_request(engine, id, a.prompt_ids, a.num_prompt_ids, a.sp, &a.opts) !=
                                   VLLM_OK) {
                        if (!ok && !a.request_id) {
                            log_error("data parallel engine %d: %s", engine_index, vllm_errmsg());
                        } else if (buf_grow((void **)&ref, &cap_ref, num_ref + 1, sizeof *ref) == VLLM_OK) {
                            ref[num_ref] = (refused){strdup(ok ? id : a.request_id), strdup(vllm_errmsg()),
                                                     a.sp ? a.sp->n : 1};
                            if (ref[num_ref].id && ref[num_ref].error) num_ref++;
                            else free(ref[num_ref].id), free(ref[num_ref].error);
                        }
                    }
                } else if (ok && type == DP_MSG_ABORT) vllm_engine_abort_request(engine, id);
                else if (ok) vllm_engine_stop_sequence(engine, id, index);
                zmq_msg_close(&m);
            }
        const vllm_step_output *out = NULL;
        vllm_step_output none = {0};
        bool stepped = false;
        if (vllm_engine_has_unfinished(engine)) {
            if (vllm_engine_step(engine, &out) != VLLM_OK) {
                log_error("data parallel engine %d: engine step failed, exiting: %s", engine_index, vllm_errmsg());
                goto out;
            }
            stepped = true;
            last_stats = out->stats;
            if (step_delay_us > 0) usleep((useconds_t)step_delay_us);
        } else if (num_ref) {
            none.timestamp = vllm_monotonic_time();
            none.stats.num_running = last_stats.num_running;
            none.stats.num_waiting = last_stats.num_waiting;
            none.stats.kv_cache_usage = last_stats.kv_cache_usage;
            none.stats.num_blocks_total = last_stats.num_blocks_total;
            none.stats.num_blocks_free = last_stats.num_blocks_free;
            out = &none;
        } else continue;
        /* the step's outputs plus the refused requests' ERROR finishes */
        size_t total = (size_t)out->num_outputs;
        for (size_t i = 0; i < num_ref; i++) total += (size_t)(ref[i].n > 0 ? ref[i].n : 1);
        vllm_step_output send = *out;
        if (num_ref) {
            if (buf_grow((void **)&outs, &cap_outs, total, sizeof *outs) != VLLM_OK) {
                log_error("data parallel engine %d: out of memory", engine_index);
                goto out;
            }
            if (out->num_outputs) memcpy(outs, out->outputs, (size_t)out->num_outputs * sizeof *outs);
            size_t k = (size_t)out->num_outputs;
            for (size_t i = 0; i < num_ref; i++)
                for (int32_t s = 0; s < (ref[i].n > 0 ? ref[i].n : 1); s++)
                    outs[k++] = (vllm_seq_output){.request_id = ref[i].id, .index = s,
                                                  .finish_reason = VLLM_FINISH_ERROR, .stop_token_id = -1,
                                                  .error = ref[i].error};
            send.outputs = outs;
            send.num_outputs = (int32_t)total;
        }
        if (num_clients == 1) {
            dp_wire_reset(&w);
            dp_wire_output(&w, cl[0].num_adds, stepped, &send);
            if (send_msg(cl[0].sock, &w) != 0) {
                log_error("data parallel engine %d: cannot send outputs: %s", engine_index, zmq_strerror(errno));
                goto out;
            }
        } else if (split_send(cl, num_clients, engine_index, &w, stepped, &send) != 0) goto out;
        for (size_t i = 0; i < num_ref; i++) free(ref[i].id), free(ref[i].error);
        num_ref = 0;
    }
out:
    for (size_t i = 0; i < num_ref; i++) free(ref[i].id), free(ref[i].error);
    free(ref);
    free(outs);
    free(idbuf);
    free(items);
    free(scratch.ints);
    dp_wire_free(&w);
    for (int32_t i = 0; i < num_clients; i++) {
        if (cl[i].mon) zmq_close(cl[i].mon);
        if (cl[i].sock) zmq_close(cl[i].sock);
        free(cl[i].outs);
    }
    free(cl);
    if (ctx) zmq_ctx_term(ctx);
    vllm_engine_free(engine);
    return status;
}

vllm_status dp_engine_spawn(int argc, char **argv, int32_t rank, const char *address, int32_t port, pid_t *pid) {
    char rank_s[16], port_s[16], what[48];
    snprintf(rank_s, sizeof rank_s, "%d", rank);
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(what, sizeof what, "data parallel engine %d", rank);
    const char *extra[] = {"--headless", "--data-parallel-start-rank", rank_s, "--data-parallel-size-local", "1",
                           "--data-parallel-address", address, "--data-parallel-rpc-port", port_s, NULL};
    return self_exec_spawn(argc, argv, extra, NULL, what, pid);
}
