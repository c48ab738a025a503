/*
 * tp_executor.c - the tensor-parallel executor over MPI (see tp_executor.h).
 *
 * Messages, all MPI_Ibcast from rank 0 on the group's communicator:
 *
 *   start   tp_start: TP_CMD_START with the model path and runner config, or
 *           TP_CMD_STOP when rank 0 failed before it had an executor
 *   step    int32 header[TP_HDR_LEN] (TP_CMD_STEP, the batch's counts, the
 *           payload's bytes), then the payload: slot_mapping (int64), then
 *           token_ids, positions, query_start_loc, seq_lens, block_tables,
 *           scored_start (if any), scored_indices, copies, lora_ids (if any)
 *   stop    a header with TP_CMD_STOP: the workers finalize and exit
 *
 * and per layer two MPI_Iallreduce (sum) of (tokens, hidden) floats on the
 * stage's communicator, from inside runner_forward (runner_config.all_reduce);
 * between stages, point to point on the group's: TAG_HIDDEN, TAG_SCORED.
 *
 * Batches in flight (pp > 1, rank 0): the workers do not change, each
 * stage runs the steps in the order they were broadcast. Rank 0 posts the
 * MPI_Irecv of a batch's scored rows before it runs stage 0 of it, so the
 * last stage's send always has a receive to land in: rank 0 may be busy
 * with a later batch (or waiting for its own send to stage 1, which stage
 * 1 takes only after sending the earlier batch's rows), and a send with no
 * posted receive there would deadlock once messages pass the eager limit.
 * Rows arrive in order (one sender, one tag). MPI non-overtaking order
 * also matches the step broadcasts, which all ranks join in one order.
 */
#include "dist/tp_executor.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "dist/pp_stage.h"
#include "dist/tp_shard.h"
#include "engine/engine.h"
#include "model/runner.h"

enum {
    TP_CMD_START = 1,
    TP_CMD_STEP = 2,
    TP_CMD_STOP = 3,
    TP_PATH_CAP = 4096,
    TAG_HIDDEN = 1,                  /* stage s -> s + 1: the residual stream (tokens, hidden) */
    TAG_SCORED = 2,                  /* last stage -> rank 0: the scored rows of it (scored, hidden) */
};

enum { H_CMD, H_TOKENS, H_GROUPS, H_SEQS, H_MAX_BLOCKS, H_SCORED, H_COPIES, H_HAS_SCORED_START, H_HAS_LORA, H_BYTES,
       TP_HDR_LEN };

typedef struct tp_start {
    int32_t cmd;
    int32_t num_blocks, block_size, max_num_batched_tokens, max_num_seqs, num_threads, kv_cache_dtype;
    int32_t sized;                   /* the pool was sized explicitly: no memory check on the workers */
    char model[TP_PATH_CAP];
} tp_start;

/* Rank 0 with pp > 1: one batch in flight (submitted, not yet collected). */
typedef struct tp_flight {
    int32_t h[TP_HDR_LEN];
    uint8_t *buf;                    /* its payload, which view points into */
    size_t buf_cap;
    step_batch view;
    float *rows;                     /* (max_num_batched_tokens, hidden) its scored rows from the last stage */
    MPI_Request recv;                /* their MPI_Irecv, posted at submit; MPI_REQUEST_NULL if none */
} tp_flight;

/* One rank's side: its stage and shard, its runner, the message buffers. */
typedef struct tp_node {
    executor base;                   /* rank 0: the engine's executor */
    mpi_group *g;
    int32_t rank, tp, pp, stage, tp_rank; /* rank = stage * tp + tp_rank */
    MPI_Comm tp_comm;                /* the ranks of this stage (all-reduces), or MPI_COMM_NULL */
    model *full;                     /* workers: the model they loaded (rank 0: the engine's) */
    model stage_view;                /* this stage's layers of full (pp_stage.h) */
    model *shard;
    float *rows;                     /* (max_num_batched_tokens, hidden) scored rows on their way to rank 0 */
    runner *runner;
    uint8_t *buf;                    /* step payload */
    size_t buf_cap;
    bool signalled;                  /* rank 0 sent itself SIGTERM */
    tp_flight *flights;              /* rank 0, pp > 1: (max_flights) a ring, oldest at head */
    int32_t max_flights, head, num_flights;
    int64_t batches, overlapped;     /* submitted; of them, while another was in flight */
    double busy_since, busy_seconds; /* rank 0: time with a batch in flight */
    double collect_seconds;          /* rank 0: of it, waiting for the last stage's rows */
    /* all-reduce statistics (logged at the end; docs/deploy.md) */
    int64_t reduces, reduce_bytes;
    double reduce_seconds;
} tp_node;

static bool started;                 /* rank 0: the start message went out (one group per process) */

/* ---- messages ----------------------------------------------------------- */

static vllm_status bcast(tp_node *t, void *p, int64_t bytes, bool idle) {
    if (bytes > INT_MAX) return vllm_error(VLLM_ERR_INVALID, "tensor parallel: a message of %lld bytes", (long long)bytes);
    MPI_Request q;
    if (MPI_Ibcast(p, (int)bytes, MPI_BYTE, 0, mpi_group_comm(t->g), &q) != MPI_SUCCESS)
        return vllm_error(VLLM_ERR_IO, "tensor parallel: MPI_Ibcast failed");
    return mpi_group_wait(t->g, &q, idle);
}

static vllm_status all_reduce(void *ctx, float *x, int64_t n) {
    tp_node *t = ctx;
    if (n > INT_MAX) return vllm_error(VLLM_ERR_INVALID, "tensor parallel: all-reduce of %lld floats", (long long)n);
    double t0 = clock_now();
    MPI_Request q;
    if (MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, t->tp_comm, &q) != MPI_SUCCESS)
        return vllm_error(VLLM_ERR_IO, "tensor parallel: MPI_Iallreduce failed");
    vllm_status rc = mpi_group_wait(t->g, &q, false);
    t->reduces++;
    t->reduce_bytes += n * (int64_t)sizeof(float);
    t->reduce_seconds += clock_now() - t0;
    return rc;
}

static vllm_status reserve_buf(uint8_t **buf, size_t *buf_cap, size_t bytes) {
    if (bytes <= *buf_cap) return VLLM_OK;
    size_t cap = bytes + bytes / 2 + 4096;
    uint8_t *p = realloc(*buf, cap);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "tensor parallel: out of memory for a %zu-byte step", bytes);
    *buf = p, *buf_cap = cap;
    return VLLM_OK;
}

static vllm_status reserve(tp_node *t, size_t bytes) { return reserve_buf(&t->buf, &t->buf_cap, bytes); }

/* The payload's arrays in order: (pointer into b, count of int32 or int64). */
typedef struct field {
    const void **p;
    int64_t n;
    size_t size;
} field;

static int fields_of(step_batch *b, const int32_t *h, field *f) {
    int64_t T = h[H_TOKENS], G = h[H_GROUPS] ? h[H_GROUPS] : 1, S = h[H_SEQS];
    int k = 0;
    f[k++] = (field){(const void **)&b->slot_mapping, T * G, sizeof(int64_t)};
    f[k++] = (field){(const void **)&b->token_ids, T, sizeof(int32_t)};
    f[k++] = (field){(const void **)&b->positions, T, sizeof(int32_t)};
    f[k++] = (field){(const void **)&b->query_start_loc, S + 1, sizeof(int32_t)};
    f[k++] = (field){(const void **)&b->seq_lens, S, sizeof(int32_t)};
    f[k++] = (field){(const void **)&b->block_tables, S * G * h[H_MAX_BLOCKS], sizeof(int32_t)};
    if (h[H_HAS_SCORED_START]) f[k++] = (field){(const void **)&b->scored_start, S + 1, sizeof(int32_t)};
    f[k++] = (field){(const void **)&b->scored_indices, h[H_SCORED], sizeof(int32_t)};
    f[k++] = (field){(const void **)&b->copies, 2 * (int64_t)h[H_COPIES], sizeof(int32_t)};
    if (h[H_HAS_LORA]) f[k++] = (field){(const void **)&b->lora_ids, S, sizeof(int32_t)};
    return k;
}

static int64_t payload_bytes(const field *f, int k) {
    int64_t bytes = 0;
    for (int i = 0; i < k; i++) bytes += f[i].n * (int64_t)f[i].size;
    return bytes;
}

/* Sends (recv false) or receives n floats at p to / from world rank peer. */
static vllm_status p2p(tp_node *t, bool recv, float *p, int64_t n, int32_t peer, int tag) {
    if (n > INT_MAX) return vllm_error(VLLM_ERR_INVALID, "pipeline parallel: a message of %lld floats", (long long)n);
    MPI_Request q;
    int mrc = recv ? MPI_Irecv(p, (int)n, MPI_FLOAT, peer, tag, mpi_group_comm(t->g), &q)
                   : MPI_Isend(p, (int)n, MPI_FLOAT, peer, tag, mpi_group_comm(t->g), &q);
    if (mrc != MPI_SUCCESS) return vllm_error(VLLM_ERR_IO, "pipeline parallel: MPI_I%s failed", recv ? "recv" : "send");
    return mpi_group_wait(t->g, &q, false);
}

/* One rank's part of a step: its stage's input from the stage before (or
 * the embeddings), its layers (with the all-reduces of its stage), its
 * output to the stage after; the last stage's rank 0 of its tp group sends
 * the scored rows to rank 0, which projects them to logits. */
static vllm_status node_forward(tp_node *t, const step_batch *b, float *logits) {
    int64_t T = b->num_tokens, dim = t->full->config.hidden_size;
    float *x = runner_hidden(t->runner);
    vllm_status rc = VLLM_OK;
    if (t->stage > 0 && T > 0) rc = p2p(t, true, x, T * dim, t->rank - t->tp, TAG_HIDDEN);
    if (rc == VLLM_OK) rc = runner_forward(t->runner, b, logits);
    if (rc != VLLM_OK || T == 0 || t->pp == 1) return rc;
    if (t->stage < t->pp - 1) {
        rc = p2p(t, false, x, T * dim, t->rank + t->tp, TAG_HIDDEN);
    } else if (t->tp_rank == 0 && b->num_scored) {
        for (int32_t i = 0; i < b->num_scored; i++)
            memcpy(t->rows + (int64_t)i * dim, x + (int64_t)b->scored_indices[i] * dim, (size_t)dim * sizeof *x);
        rc = p2p(t, false, t->rows, b->num_scored * dim, 0, TAG_SCORED);
    }
    if (rc == VLLM_OK && t->rank == 0 && b->num_scored) {
        if ((rc = p2p(t, true, t->rows, b->num_scored * dim, (t->pp - 1) * t->tp, TAG_SCORED)) != VLLM_OK) return rc;
        for (int32_t i = 0; i < b->num_scored; i++)
            memcpy(x + (int64_t)b->scored_indices[i] * dim, t->rows + (int64_t)i * dim, (size_t)dim * sizeof *x);
        rc = runner_logits(t->runner, b, logits);
    }
    return rc;
}

/* ---- rank 0: the executor ------------------------------------------------ */

static tp_node *node_of(const executor *ex) { return (tp_node *)ex; }

/* A wait failed: say which rank is gone, once, and stop the server. */
static vllm_status lost(tp_node *t, vllm_status rc) {
    if (mpi_group_broken(t->g) && !t->signalled) {
        log_error("tensor parallel: %s; the engine stops and the server shuts down", vllm_errmsg());
        t->signalled = true;
        kill(getpid(), SIGTERM); /* vllmc serve's main thread takes it with sigwait */
    }
    return rc;
}

/* The step message of b: the header h and the payload, packed into *buf
 * (grown as needed); view (if not NULL) becomes b over *buf. */
static vllm_status pack(const step_batch *b, int32_t *h, uint8_t **buf, size_t *buf_cap, step_batch *view) {
    memset(h, 0, TP_HDR_LEN * sizeof *h);
    h[H_CMD] = TP_CMD_STEP, h[H_TOKENS] = b->num_tokens, h[H_GROUPS] = b->num_kv_groups, h[H_SEQS] = b->num_seqs;
    h[H_MAX_BLOCKS] = b->max_blocks_per_seq, h[H_SCORED] = b->num_scored, h[H_COPIES] = b->num_copies;
    h[H_HAS_SCORED_START] = b->scored_start != NULL, h[H_HAS_LORA] = b->lora_ids != NULL;
    step_batch src = *b;
    field f[10];
    int k = fields_of(&src, h, f);
    int64_t bytes = payload_bytes(f, k);
    if (bytes > INT_MAX) return vllm_error(VLLM_ERR_INVALID, "tensor parallel: a step of %lld bytes", (long long)bytes);
    h[H_BYTES] = (int32_t)bytes;
    vllm_status rc = reserve_buf(buf, buf_cap, (size_t)bytes);
    if (rc != VLLM_OK) return rc;
    size_t off = 0;
    for (int i = 0; i < k; i++) {
        size_t n = (size_t)f[i].n * f[i].size;
        if (n) memcpy(*buf + off, *f[i].p, n);
        off += n;
    }
    if (view) {
        *view = *b;
        k = fields_of(view, h, f);
        off = 0;
        for (int i = 0; i < k; i++) {
            *f[i].p = *buf + off;
            off += (size_t)f[i].n * f[i].size;
        }
    }
    return VLLM_OK;
}

/* Pipeline parallel, rank 0 (stage 0): the step message, an MPI_Irecv for
 * the batch's scored rows (posted now, so the last stage's send never waits
 * for rank 0 to get round to it), stage 0's layers, their output sent on. */
static vllm_status tp_submit(executor *ex, const step_batch *b) {
    tp_node *t = node_of(ex);
    if (t->num_flights == t->max_flights)
        return vllm_error(VLLM_ERR_INVALID, "pipeline parallel: %d batches in flight already", t->num_flights);
    tp_flight *f = &t->flights[(t->head + t->num_flights) % t->max_flights];
    vllm_status rc = pack(b, f->h, &f->buf, &f->buf_cap, &f->view);
    if (rc != VLLM_OK) return rc;
    if ((rc = bcast(t, f->h, sizeof f->h, false)) != VLLM_OK || (rc = bcast(t, f->buf, f->h[H_BYTES], false)) != VLLM_OK)
        return lost(t, rc);
    int64_t dim = t->full->config.hidden_size, T = b->num_tokens;
    f->recv = MPI_REQUEST_NULL;
    if (b->num_scored && MPI_Irecv(f->rows, (int)(b->num_scored * dim), MPI_FLOAT, (t->pp - 1) * t->tp, TAG_SCORED,
                                   mpi_group_comm(t->g), &f->recv) != MPI_SUCCESS)
        return lost(t, vllm_error(VLLM_ERR_IO, "pipeline parallel: MPI_Irecv failed"));
    t->batches++;
    t->overlapped += t->num_flights > 0;
    if (t->num_flights == 0) t->busy_since = clock_now();
    t->num_flights++;
    rc = runner_forward(t->runner, &f->view, NULL);
    if (rc == VLLM_OK && T > 0) rc = p2p(t, false, runner_hidden(t->runner), T * dim, t->rank + t->tp, TAG_HIDDEN);
    return rc == VLLM_OK ? rc : lost(t, rc);
}

/* The oldest batch in flight: its scored rows from the last stage, then the
 * final norm and lm_head here. */
static vllm_status tp_collect(executor *ex, float *logits) {
    tp_node *t = node_of(ex);
    if (t->num_flights == 0) return vllm_error(VLLM_ERR_INVALID, "pipeline parallel: no batch in flight to collect");
    tp_flight *f = &t->flights[t->head];
    t->head = (t->head + 1) % t->max_flights;
    t->num_flights--;
    const step_batch *b = &f->view;
    double t0 = clock_now();
    vllm_status rc = b->num_scored ? mpi_group_wait(t->g, &f->recv, false) : VLLM_OK;
    double t1 = clock_now();
    t->collect_seconds += t1 - t0;
    if (t->num_flights == 0) t->busy_seconds += t1 - t->busy_since;
    if (rc != VLLM_OK) return lost(t, rc);
    if (!b->num_scored) return VLLM_OK;
    int64_t dim = t->full->config.hidden_size;
    float *x = runner_hidden(t->runner);
    for (int32_t i = 0; i < b->num_scored; i++)
        memcpy(x + (int64_t)b->scored_indices[i] * dim, f->rows + (int64_t)i * dim, (size_t)dim * sizeof *x);
    return runner_logits(t->runner, b, logits);
}

static int32_t tp_max_in_flight(const executor *ex) { return node_of(ex)->max_flights; }

static vllm_status tp_execute(executor *ex, const step_batch *b, float *logits) {
    tp_node *t = node_of(ex);
    vllm_status rc;
    if (t->pp > 1) {
        if (t->num_flights) return vllm_error(VLLM_ERR_INVALID, "pipeline parallel: execute with batches in flight");
        return (rc = tp_submit(ex, b)) == VLLM_OK ? tp_collect(ex, logits) : rc;
    }
    int32_t h[TP_HDR_LEN];
    if ((rc = pack(b, h, &t->buf, &t->buf_cap, NULL)) != VLLM_OK) return rc;
    if ((rc = bcast(t, h, sizeof h, false)) != VLLM_OK || (rc = bcast(t, t->buf, h[H_BYTES], false)) != VLLM_OK)
        return lost(t, rc);
    rc = node_forward(t, b, logits);
    return rc == VLLM_OK ? rc : lost(t, rc);
}

static size_t tp_kv_block_bytes(const executor *ex) { return runner_kv_block_bytes(node_of(ex)->runner); }
static int32_t tp_num_layers(const executor *ex) { return runner_num_layers(node_of(ex)->runner); }

static vllm_status tp_read_kv(executor *ex, int32_t layer, int32_t block, void *k, void *v) {
    return vllm_error(VLLM_ERR_UNSUPPORTED, "KV connectors are not supported with tensor parallelism");
}

static vllm_status tp_write_kv(executor *ex, int32_t layer, int32_t block, const void *k, const void *v) {
    return vllm_error(VLLM_ERR_UNSUPPORTED, "KV connectors are not supported with tensor parallelism");
}

static threadpool *tp_threadpool(executor *ex) { return runner_threadpool(node_of(ex)->runner); }

static void node_log_stats(const tp_node *t) {
    if (t->batches)
        log_info("pipeline parallel: %lld batches, %lld of them submitted while another was in flight; "
                 "rank 0 waited %.2f s of %.2f s with batches in flight for the later stages",
                 (long long)t->batches, (long long)t->overlapped, t->collect_seconds, t->busy_seconds);
    if (t->reduces && t->tp > 1)
        log_info("tensor parallel rank %d: %lld all-reduces, %.1f MiB, %.3f s (%.1f us each)", mpi_group_rank(t->g),
                 (long long)t->reduces, (double)t->reduce_bytes / 1048576.0, t->reduce_seconds,
                 t->reduce_seconds * 1e6 / (double)t->reduces);
}

static void node_free(tp_node *t) {
    for (int32_t i = 0; t->flights && i < t->max_flights; i++) {
        free(t->flights[i].buf);
        free(t->flights[i].rows);
    }
    free(t->flights);
    runner_free(t->runner);
    tp_shard_free(t->shard);
    if (t->tp_comm && t->tp_comm != MPI_COMM_NULL && !mpi_group_broken(t->g)) MPI_Comm_free(&t->tp_comm);
    free(t->rows);
    free(t->buf);
    free(t);
}

static void tp_free(executor *ex) {
    tp_node *t = node_of(ex);
    node_log_stats(t);
    /* batches still in flight: let their scored rows arrive (and drop them) */
    for (; t->num_flights > 0 && !mpi_group_broken(t->g); t->num_flights--, t->head = (t->head + 1) % t->max_flights)
        if (t->flights[t->head].view.num_scored && mpi_group_wait(t->g, &t->flights[t->head].recv, false) != VLLM_OK)
            log_warn("pipeline parallel: %s", vllm_errmsg());
    if (!mpi_group_broken(t->g)) {
        int32_t h[TP_HDR_LEN] = {[H_CMD] = TP_CMD_STOP};
        if (bcast(t, h, sizeof h, false) != VLLM_OK) log_warn("tensor parallel: %s", vllm_errmsg());
    }
    node_free(t);
}

static const executor_ops tp_ops = {
    .name = "mpi-tp",
    .execute = tp_execute,
    .kv_block_bytes = tp_kv_block_bytes,
    .num_layers = tp_num_layers,
    .read_kv = tp_read_kv,
    .write_kv = tp_write_kv,
    .threadpool = tp_threadpool,
    .free = tp_free,
    .max_in_flight = tp_max_in_flight,
    .submit = tp_submit,
    .collect = tp_collect,
};

/* ---- every rank: shard, pool agreement, runner ------------------------------ */

static int64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    long long kb = 0;
    char line[256];
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
}

/* This rank's place: stage, rank in the stage, the stage's communicator
 * (collective over every rank: each calls it once, first). */
static vllm_status node_place(tp_node *t) {
    t->rank = mpi_group_rank(t->g), t->tp = mpi_group_tp(t->g), t->pp = mpi_group_pp(t->g);
    t->stage = t->rank / t->tp, t->tp_rank = t->rank % t->tp;
    t->tp_comm = MPI_COMM_NULL;
    if (MPI_Comm_split(mpi_group_comm(t->g), t->stage, t->tp_rank, &t->tp_comm) != MPI_SUCCESS)
        return vllm_error(VLLM_ERR_IO, "tensor parallel: MPI_Comm_split failed");
    return VLLM_OK;
}

/* Cuts this rank's stage and shard of t->full, agrees on the pool size with
 * the other ranks (*num_blocks in: rank 0's proposal; out: the agreed size)
 * and creates the runner. Every rank calls it and takes part in its two
 * all-reduces, whatever fails. */
static vllm_status node_setup(tp_node *t, const tp_start *s, vllm_status rc, int32_t *num_blocks) {
    int32_t rank = t->rank;
    int32_t mine = 0, agreed = 0, begin = 0, end = 0;
    if (rc == VLLM_OK && (rc = pp_stage_check(&t->full->config, t->pp)) == VLLM_OK &&
        (rc = tp_shard_check(&t->full->config, t->tp)) == VLLM_OK) {
        model_free_x16(t->full);
        pp_stage_layers(t->full->config.num_hidden_layers, t->pp, t->stage, &begin, &end);
        t->stage_view = pp_stage_view(t->full, begin, end);
        rc = tp_shard_create(&t->stage_view, t->tp_rank, t->tp, t->rank == 0, &t->shard);
    }
    if (rc == VLLM_OK) {
        if (!(t->rows = malloc((size_t)s->max_num_batched_tokens * (size_t)t->full->config.hidden_size * sizeof(float))))
            rc = vllm_error(VLLM_ERR_NOMEM, "tensor parallel: out of memory");
    }
    if (rc == VLLM_OK) {
        mine = s->num_blocks;
        size_t per_block = runner_kv_bytes_per_block(&t->shard->config, s->block_size, (kv_dtype)s->kv_cache_dtype);
        int64_t avail = mem_available(), fit = per_block ? (int64_t)(0.4 * (double)avail) / (int64_t)per_block : 0;
        if (!s->sized && avail > 0 && fit < mine) mine = fit > 0 ? (int32_t)fit : 1;
        log_info("rank %d (stage %d/%d, tensor rank %d/%d): layers %d..%d, %d of %d heads, %d of %d KV heads, "
                 "%d of %d intermediate, %.1f MiB of layer weights; KV pool: up to %d blocks of %zu bytes",
                 rank, t->stage, t->pp, t->tp_rank, t->tp, begin, end - 1,
                 t->shard->config.num_attention_heads, t->full->config.num_attention_heads,
                 t->shard->config.num_key_value_heads, t->full->config.num_key_value_heads,
                 t->shard->config.intermediate_size, t->full->config.intermediate_size,
                 (double)tp_shard_weight_bytes(t->shard) / 1048576.0, mine, per_block);
    } else {
        log_error("rank %d: %s", rank, vllm_errmsg());
    }
    if (MPI_Allreduce(&mine, &agreed, 1, MPI_INT32_T, MPI_MIN, mpi_group_comm(t->g)) != MPI_SUCCESS)
        return vllm_error(VLLM_ERR_IO, "tensor parallel: MPI_Allreduce of the KV pool size failed");
    if (rc == VLLM_OK && agreed < 1)
        rc = vllm_error(VLLM_ERR_INVALID, "tensor parallel: another rank could not load its shard (its log says why)");
    if (rc == VLLM_OK) {
        runner_config cfg = {.num_blocks = agreed,
                             .block_size = s->block_size,
                             .max_num_batched_tokens = s->max_num_batched_tokens,
                             .max_num_seqs = s->max_num_seqs,
                             .num_threads = s->num_threads,
                             .kv_cache_dtype = (kv_dtype)s->kv_cache_dtype,
                             .all_reduce = t->tp > 1 ? all_reduce : NULL,
                             .reduce_ctx = t,
                             .skip_logits = rank != 0 || t->pp > 1, /* pp: rank 0 calls runner_logits */
                             .no_embed = t->stage > 0};
        rc = runner_create(t->shard, &cfg, &t->runner);
        if (rc != VLLM_OK) log_error("rank %d: %s", rank, vllm_errmsg());
    }
    int32_t ok = rc == VLLM_OK, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT32_T, MPI_MIN, mpi_group_comm(t->g)) != MPI_SUCCESS)
        return vllm_error(VLLM_ERR_IO, "tensor parallel: MPI_Allreduce of the start-up status failed");
    if (rc == VLLM_OK && !all_ok)
        rc = vllm_error(VLLM_ERR_INVALID, "tensor parallel: another rank could not create its runner (its log says why)");
    *num_blocks = agreed;
    return rc;
}

/* Rank 0: the batches it may keep in flight with pp stages: pp, as vLLM's
 * max_concurrent_batches, or VLLMC_PP_BATCHES_IN_FLIGHT (1..16; 1 = the
 * stages take turns); 1 without pp. */
static vllm_status max_in_flight_of(int32_t pp, int32_t *out) {
    *out = pp;
    const char *env = getenv("VLLMC_PP_BATCHES_IN_FLIGHT");
    if (pp == 1 || !env || !*env) return VLLM_OK;
    char *end;
    long n = strtol(env, &end, 10);
    if (*end || n < 1 || n > 16)
        return vllm_error(VLLM_ERR_INVALID, "VLLMC_PP_BATCHES_IN_FLIGHT '%s' must be an integer in 1..16", env);
    *out = (int32_t)n;
    return VLLM_OK;
}

/* Rank 0 with pp > 1: the ring of t->max_flights batches. */
static vllm_status flights_create(tp_node *t, int32_t max_tokens) {
    if (t->pp == 1) return VLLM_OK;
    if (!(t->flights = calloc((size_t)t->max_flights, sizeof *t->flights)))
        return vllm_error(VLLM_ERR_NOMEM, "pipeline parallel: out of memory");
    size_t rows = (size_t)max_tokens * (size_t)t->full->config.hidden_size * sizeof(float);
    for (int32_t i = 0; i < t->max_flights; i++) {
        t->flights[i].recv = MPI_REQUEST_NULL;
        if (!(t->flights[i].rows = malloc(rows))) return vllm_error(VLLM_ERR_NOMEM, "pipeline parallel: out of memory");
    }
    log_info("pipeline parallel: up to %d batches in flight over %d stages", t->max_flights, t->pp);
    return VLLM_OK;
}

static vllm_status factory(void *ctx, const vllm_engine_args *args, const model *m, runner_config *cfg,
                           executor **out) {
    *out = NULL;
    mpi_group *g = ctx;
    tp_start s = {.cmd = TP_CMD_START,
                  .num_blocks = cfg->num_blocks,
                  .block_size = cfg->block_size,
                  .max_num_batched_tokens = cfg->max_num_batched_tokens,
                  .max_num_seqs = cfg->max_num_seqs,
                  .num_threads = cfg->num_threads,
                  .kv_cache_dtype = (int32_t)cfg->kv_cache_dtype,
                  .sized = args->kv_cache_memory_bytes > 0 || args->num_gpu_blocks_override > 0};
    if (strlen(args->model) >= sizeof s.model)
        return vllm_error(VLLM_ERR_INVALID, "tensor parallel: model path longer than %d bytes", TP_PATH_CAP - 1);
    strcpy(s.model, args->model);
    int32_t max_flights;
    vllm_status rc = max_in_flight_of(mpi_group_pp(g), &max_flights);
    if (rc != VLLM_OK) return rc; /* before the start message: tp_executor_finish stops the workers */
    tp_node *t = calloc(1, sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "tensor parallel: out of memory");
    t->g = g;
    t->max_flights = max_flights;
    t->full = (model *)m; /* the engine's: the shard's views point into it (its x16 copies are dropped) */
    started = true;
    rc = bcast(t, &s, sizeof s, false);
    if (rc == VLLM_OK) rc = node_place(t);
    if (rc == VLLM_OK) rc = node_setup(t, &s, VLLM_OK, &cfg->num_blocks);
    if (rc == VLLM_OK && (rc = flights_create(t, s.max_num_batched_tokens)) != VLLM_OK) {
        int32_t h[TP_HDR_LEN] = {[H_CMD] = TP_CMD_STOP}; /* the workers are in their step loop */
        if (bcast(t, h, sizeof h, false) != VLLM_OK) log_warn("tensor parallel: %s", vllm_errmsg());
    }
    if (rc != VLLM_OK) {
        node_free(t);
        return rc;
    }
    t->base.ops = &tp_ops;
    *out = &t->base;
    return VLLM_OK;
}

/* ---- workers --------------------------------------------------------------- */

static int worker_main(mpi_group *g) {
    int32_t rank = mpi_group_rank(g);
    tp_node *t = calloc(1, sizeof *t);
    tp_start s;
    if (!t) return 1;
    t->g = g;
    vllm_status rc = bcast(t, &s, sizeof s, true);
    if (rc != VLLM_OK || s.cmd != TP_CMD_START) {
        if (rc != VLLM_OK) log_error("tensor parallel rank %d: %s", rank, vllm_errmsg());
        free(t);
        return rc == VLLM_OK ? 0 : 1;
    }
    s.model[sizeof s.model - 1] = 0;
    if ((rc = node_place(t)) != VLLM_OK) {
        log_error("rank %d: %s", rank, vllm_errmsg());
        free(t);
        return 1;
    }
    vllm_status load = model_load(s.model, &t->full);
    int32_t agreed = 0;
    if ((rc = node_setup(t, &s, load, &agreed)) == VLLM_OK) {
        log_info("rank %d: ready, KV pool of %d blocks", rank, agreed);
        for (;;) {
            int32_t h[TP_HDR_LEN];
            if ((rc = bcast(t, h, sizeof h, true)) != VLLM_OK || h[H_CMD] != TP_CMD_STEP) break;
            step_batch b = {.num_tokens = h[H_TOKENS], .num_kv_groups = h[H_GROUPS], .num_seqs = h[H_SEQS],
                            .max_blocks_per_seq = h[H_MAX_BLOCKS], .num_scored = h[H_SCORED],
                            .num_copies = h[H_COPIES]};
            field f[10];
            int k = fields_of(&b, h, f);
            int64_t bytes = payload_bytes(f, k);
            if (bytes != h[H_BYTES]) {
                rc = vllm_error(VLLM_ERR_FORMAT, "tensor parallel: step of %d bytes, its counts say %lld", h[H_BYTES],
                                (long long)bytes);
                break;
            }
            if ((rc = reserve(t, (size_t)bytes)) != VLLM_OK || (rc = bcast(t, t->buf, bytes, false)) != VLLM_OK) break;
            size_t off = 0;
            for (int i = 0; i < k; i++) {
                *f[i].p = t->buf + off;
                off += (size_t)f[i].n * f[i].size;
            }
            if ((rc = node_forward(t, &b, NULL)) != VLLM_OK) break;
        }
        node_log_stats(t);
    }
    if (rc != VLLM_OK) log_error("tensor parallel rank %d: %s; exiting", rank, vllm_errmsg());
    model *full = t->full;
    node_free(t); /* the shard's views point into full */
    model_free(full);
    return rc == VLLM_OK ? 0 : 1;
}

vllm_status tp_executor_start(const vllm_engine_args *args, int argc, char **argv, mpi_group **group,
                              int *worker_status) {
    *group = NULL;
    *worker_status = 0;
    mpi_group *g;
    vllm_status rc = mpi_group_start(args->tensor_parallel_size, args->pipeline_parallel_size, argc, argv, &g,
                                     worker_status);
    if (rc != VLLM_OK) {
        mpi_group_write_status(NULL, 1);
        return rc;
    }
    if (!g) return VLLM_OK; /* the launcher: the group ran under mpirun and is over */
    if (mpi_group_rank(g) != 0) {
        /* a worker follows rank 0: the signals mpirun forwards must not kill it first */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        *worker_status = worker_main(g);
        mpi_group_finish(g);
        return VLLM_OK;
    }
    if ((rc = mpi_group_monitor_start(g)) != VLLM_OK) {
        mpi_group_finish(g);
        return rc;
    }
    engine_set_executor_factory(factory, g);
    *group = g;
    return VLLM_OK;
}

void tp_executor_finish(mpi_group *g, int status) {
    if (!g) return;
    /* a rank lost is a failure, however cleanly rank 0 shut down */
    mpi_group_write_status(g, status == 0 && mpi_group_broken(g) ? 1 : status);
    if (!started && !mpi_group_broken(g)) {
        tp_node t = {.g = g};
        tp_start s = {.cmd = TP_CMD_STOP};
        if (bcast(&t, &s, sizeof s, false) != VLLM_OK) log_warn("tensor parallel: %s", vllm_errmsg());
    }
    engine_set_executor_factory(NULL, NULL);
    mpi_group_finish(g);
}
