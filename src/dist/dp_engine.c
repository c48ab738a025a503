/*
 * dp_engine.c - see dp_engine.h.
 */
#include "dist/dp_engine.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <zmq.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "dist/dp_wire.h"

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

int dp_engine_run(const vllm_engine_args *ea, const char *endpoint, int32_t engine_index) {
    int status = 1;
    vllm_engine *engine = NULL;
    void *ctx = NULL, *sock = NULL, *mon = NULL;
    dp_wire_writer w = {0};
    dp_add_scratch scratch = {0};
    refused *ref = NULL;
    size_t num_ref = 0, cap_ref = 0;
    vllm_seq_output *outs = NULL;
    size_t cap_outs = 0;
    int64_t num_adds = 0;
    vllm_scheduler_stats last_stats = {0};

    const char *delay = getenv("VLLMC_DEBUG_STEP_DELAY_US"); /* as frontend.h's: a slow engine, for tests */
    long step_delay_us = delay && *delay ? atol(delay) : 0;
    log_info("data parallel engine %d: loading the model, then connecting to %s", engine_index, endpoint);
    if (vllm_engine_create(ea, &engine) != VLLM_OK) {
        log_error("data parallel engine %d: %s", engine_index, vllm_errmsg());
        return 1;
    }
    ctx = zmq_ctx_new();
    sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    mon = ctx ? zmq_socket(ctx, ZMQ_PAIR) : NULL;
    if (!sock || !mon) {
        log_error("data parallel engine %d: cannot create ZeroMQ sockets: %s", engine_index, zmq_strerror(errno));
        goto out;
    }
    char rid[32], mon_ep[64];
    int n = snprintf(rid, sizeof rid, "engine-%d", engine_index);
    int ivl = DP_HEARTBEAT_IVL_MS, hto = DP_HEARTBEAT_TIMEOUT_MS, linger = 1000;
    zmq_setsockopt(sock, ZMQ_ROUTING_ID, rid, (size_t)n);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &hto, sizeof hto);
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    snprintf(mon_ep, sizeof mon_ep, "inproc://dp-engine-monitor-%d", engine_index);
    if (zmq_socket_monitor(sock, mon_ep, ZMQ_EVENT_DISCONNECTED) != 0 || zmq_connect(mon, mon_ep) != 0 ||
        zmq_connect(sock, endpoint) != 0) {
        log_error("data parallel engine %d: cannot connect to %s: %s", engine_index, endpoint, zmq_strerror(errno));
        goto out;
    }
    vllm_engine_info info;
    vllm_engine_get_info(engine, &info);
    vllm_sampling_params dsp;
    vllm_engine_default_sampling_params(engine, &dsp);
    dp_wire_hello(&w, engine_index, &info, &dsp);
    if (send_msg(sock, &w) != 0) {
        log_error("data parallel engine %d: cannot send HELLO: %s", engine_index, zmq_strerror(errno));
        goto out;
    }
    log_info("data parallel engine %d: ready (%d KV blocks of %d tokens, %d threads)", engine_index,
             info.num_gpu_blocks, info.block_size, info.num_threads);

    for (;;) {
        bool busy = vllm_engine_has_unfinished(engine);
        zmq_pollitem_t items[2] = {{sock, 0, ZMQ_POLLIN, 0}, {mon, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, busy || num_ref ? 0 : 1000) < 0 && errno != EINTR) {
            log_error("data parallel engine %d: zmq_poll: %s", engine_index, zmq_strerror(errno));
            goto out;
        }
        if ((items[1].revents & ZMQ_POLLIN) && front_end_gone(mon)) {
            log_warn("data parallel engine %d: the front end at %s went away; exiting", engine_index, endpoint);
            status = 0;
            goto out;
        }
        for (;;) { /* every queued command */
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            const uint8_t *p = zmq_msg_data(&m);
            size_t len = zmq_msg_size(&m);
            dp_add a;
            const char *id;
            int32_t index;
            switch (len ? p[0] : 0) {
            case DP_MSG_ADD:
                num_adds++;
                if (dp_wire_read_add(p, len, &scratch, &a) != VLLM_OK ||
                    vllm_engine_add_request(engine, a.request_id, a.prompt_ids, a.num_prompt_ids, a.sp, &a.opts) !=
                        VLLM_OK) {
                    if (!a.request_id) {
                        log_error("data parallel engine %d: %s", engine_index, vllm_errmsg());
                        break;
                    }
                    if (buf_grow((void **)&ref, &cap_ref, num_ref + 1, sizeof *ref) == VLLM_OK) {
                        ref[num_ref] = (refused){strdup(a.request_id), strdup(vllm_errmsg()), a.sp ? a.sp->n : 1};
                        if (ref[num_ref].id && ref[num_ref].error) num_ref++;
                        else free(ref[num_ref].id), free(ref[num_ref].error);
                    }
                }
                break;
            case DP_MSG_ABORT:
                if (dp_wire_read_id(p, len, &id, &index) == VLLM_OK) vllm_engine_abort_request(engine, id);
                break;
            case DP_MSG_STOP:
                if (dp_wire_read_id(p, len, &id, &index) == VLLM_OK) vllm_engine_stop_sequence(engine, id, index);
                break;
            case DP_MSG_PING:
                break;
            default:
                log_warn("data parallel engine %d: ignoring a message of unknown type (%zu bytes)", engine_index, len);
            }
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
        dp_wire_reset(&w);
        dp_wire_output(&w, num_adds, stepped, &send);
        for (size_t i = 0; i < num_ref; i++) free(ref[i].id), free(ref[i].error);
        num_ref = 0;
        if (send_msg(sock, &w) != 0) {
            log_error("data parallel engine %d: cannot send outputs: %s", engine_index, zmq_strerror(errno));
            goto out;
        }
    }
out:
    for (size_t i = 0; i < num_ref; i++) free(ref[i].id), free(ref[i].error);
    free(ref);
    free(outs);
    free(scratch.ints);
    dp_wire_free(&w);
    if (mon) zmq_close(mon);
    if (sock) zmq_close(sock);
    if (ctx) zmq_ctx_term(ctx);
    vllm_engine_free(engine);
    return status;
}

vllm_status dp_engine_spawn(int argc, char **argv, int32_t rank, const char *address, int32_t port, pid_t *pid) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return vllm_error(VLLM_ERR_IO, "dp: cannot find this executable (/proc/self/exe): %s", strerror(errno));
    exe[n] = 0;
    char **args = calloc((size_t)argc + 16, sizeof *args);
    if (!args) return vllm_error(VLLM_ERR_NOMEM, "dp: spawning engine %d", rank);
    char rank_s[16], port_s[16];
    snprintf(rank_s, sizeof rank_s, "%d", rank);
    snprintf(port_s, sizeof port_s, "%d", port);
    int k = 0;
    args[k++] = exe;
    for (int i = 0; i < argc; i++) args[k++] = argv[i];
    const char *extra[] = {"--headless", "--data-parallel-start-rank", rank_s, "--data-parallel-size-local", "1",
                           "--data-parallel-address", address, "--data-parallel-rpc-port", port_s, NULL};
    for (int i = 0; extra[i]; i++) args[k++] = (char *)extra[i];
    args[k] = NULL;
    pid_t parent = getpid();
    pid_t p = fork();
    if (p < 0) {
        free(args);
        return vllm_error(VLLM_ERR_IO, "dp: cannot fork engine %d: %s", rank, strerror(errno));
    }
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(exe, args);
        fprintf(stderr, "vllmc: cannot run %s for data parallel engine %d: %s\n", exe, rank, strerror(errno));
        _exit(127);
    }
    free(args);
    *pid = p;
    return VLLM_OK;
}
