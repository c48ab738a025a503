/*
 * kv_connector.c - the connector's two sides over a kv_store; see
 * kv_connector.h.
 *
 * Staging: a lookup checks the matched blocks (kv_store_open: a file's
 * header; a RAM block is copied into `pending`) for the one sequence being
 * admitted; update_state_after_alloc appends them to this step's loads.
 * start_load_kv wakes the worker thread, which reads the file loads layer by
 * layer into `loads` (streaming each block's checksum, load_bad when wrong)
 * and publishes layers_loaded; wait_for_layer_load (the forward's thread)
 * waits for a layer and writes it into the pool. Saves are copied out of
 * the pool layer by layer into `saving`; for block files the worker appends
 * each copied layer to the files and renames them after the last. The
 * buffers grow to the largest step seen, so steady state allocates nothing.
 * Ownership: between start_load_kv and wait_for_save the worker writes only
 * `loads` layers it has not published yet, load_bad and its checksum
 * states; the engine reads only published layers; wmu orders the two.
 *
 * A block's payload is, for each layer l, K then V of executor_kv_block_bytes
 * each: [l][K|V][kv_block_bytes].
 *
 * The store is reached under `mu` by the engine, the worker (renames) and
 * the TcpConnector's threads: the KV server (producer) and fetches
 * (consumer); the worker's file reads and writes need no lock.
 * Wire format (little-endian, one connection per fetch):
 *   client: kv_wire_header {magic, tag, block_bytes, n}, then n 16-byte hashes
 *   server: per hash, one byte (1 = found) and, if found, block_bytes of
 *           payload and its XXH3-64; a header whose tag or block size differs
 *           from the server's gets the connection closed.
 */
#include "engine/kv_connector.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

struct kv_connector {
    kv_connector_config cfg;
    executor *ex;
    kv_cache_manager *kvm;
    kv_store *store;
    int32_t num_layers, block_size;
    uint64_t meta_tag;               /* the model and layout tag (kv_store's) */
    size_t half_bytes, block_bytes;  /* one layer's K (or V); a whole block */
    bool save_files;                 /* saves stream block files (the shared shape) */

    const seq *pending_seq;          /* the sequence the staged blocks belong to */
    int32_t num_pending;
    unsigned char *pending;          /* (num_pending, block_bytes): RAM blocks, copied at the lookup */
    kv_store_ref *pending_refs;      /* (num_pending) */
    size_t cap_pending, cap_pending_refs; /* in blocks */

    int32_t num_loads;               /* this step */
    int32_t *load_blocks;            /* (num_loads) pool ids */
    seq **load_seqs;                 /* (num_loads) whose block */
    kv_store_ref *load_refs;         /* (num_loads) */
    unsigned char *loads;            /* (num_loads, block_bytes) */
    unsigned char *load_bad;         /* (num_loads) LOAD_OK, LOAD_UNREADABLE, LOAD_CHECKSUM (the worker's) */
    XXH3_state_t **load_sums;        /* (num_loads) streamed checksums, created as needed */
    size_t cap_load_blocks, cap_load_seqs, cap_load_refs, cap_loads, cap_load_bad, cap_load_sums;
    int32_t num_load_sums;           /* created so far */
    seq **error_seqs;                /* sequences whose loads failed this step */
    int32_t num_error_seqs;
    size_t cap_error_seqs;

    int32_t num_saves;
    int32_t *save_blocks;
    block_hash *save_hashes;
    unsigned char *saving;           /* (num_saves, block_bytes) */
    unsigned char *save_bad;         /* (num_saves) a part could not be written (the worker's) */
    XXH3_state_t **save_sums;        /* (num_saves) */
    size_t cap_save_blocks, cap_save_hashes, cap_saving, cap_save_bad, cap_save_sums;
    int32_t num_save_sums;

    kv_connector_meta meta;

    /* The worker thread: reads this step's file loads a layer at a time
     * while the forward runs, and streams saved layers into block files.
     * Under wmu; the engine waits on progress, the worker on work. */
    pthread_mutex_t wmu;
    pthread_cond_t work, progress;
    pthread_t worker;
    bool worker_running, worker_stop;
    bool step_active;                /* between start_load_kv and wait_for_save */
    int32_t load_target;             /* layers the worker reads this step (0: every load was in RAM) */
    int32_t layers_loaded;           /* read by the worker so far */
    int32_t layers_copied;           /* saved layers copied out of the pool (engine) */
    int32_t layers_written;          /* of them, written by the worker */
    double t_first_wait, t_loaded;   /* layer 0's wait (engine), the last layer read (worker) */
    int64_t load_delay_us;           /* VLLMC_DEBUG_KV_LOAD_DELAY_US: the worker sleeps per layer (tests) */

    /* TcpConnector */
    pthread_mutex_t mu;              /* the store, between the engine and the threads */
    pthread_cond_t cv;               /* num_fetches reached 0 */
    int32_t num_fetches;             /* running fetch threads */
    int listen_fd;                   /* KV server (producer), or -1 */
    int32_t port;                    /* its bound port */
    pthread_t server;
    bool server_running;
    atomic_int stop;                 /* kv_connector_free tells the server thread to end */
};

enum { LOAD_OK, LOAD_UNREADABLE, LOAD_CHECKSUM };

static void *worker_main(void *arg);

#define KV_WIRE_MAGIC 0x4843544546564b56ull /* "VKVFETCH" */
#define KV_WIRE_MAX_BLOCKS (1 << 20)

typedef struct kv_wire_header {
    uint64_t magic, tag, block_bytes;
    uint32_t n, pad;
} kv_wire_header;

struct kv_connector_fetch {
    kv_connector *c;
    char host[256];
    int32_t port;
    int32_t n;
    block_hash *hashes;
    int refs;                        /* the engine's and the thread's, under c->mu */
    bool done;                       /* under c->mu */
};

static bool loads_kv(const kv_connector *c) { return c->cfg.role & KV_CONNECTOR_CONSUMER; }
static bool saves_kv(const kv_connector *c) { return c->cfg.role & KV_CONNECTOR_PRODUCER; }

/* ---- configuration ---- */

static vllm_status extra_bytes(json_t *extra, const char *key, double unit, int64_t *out) {
    json_t *v = json_object_get(extra, key);
    if (!v || json_is_null(v)) return VLLM_OK;
    if (!json_is_number(v) || json_number_value(v) < 0)
        return vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_connector_extra_config.%s must be a "
                          "non-negative number", key);
    *out = (int64_t)(json_number_value(v) * unit);
    return VLLM_OK;
}

static vllm_status extra_string(json_t *extra, const char *key, char *out, size_t n) {
    json_t *v = json_object_get(extra, key);
    if (!v || json_is_null(v)) return VLLM_OK;
    if (!json_is_string(v) || !json_string_value(v)[0] || strlen(json_string_value(v)) >= n)
        return vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_connector_extra_config.%s must be a "
                          "non-empty string shorter than %zu bytes", key, n);
    strcpy(out, json_string_value(v));
    return VLLM_OK;
}

/* The disk tier from the environment, when the JSON gave none. */
static vllm_status disk_from_env(kv_connector_config *c) {
    const char *p = getenv("VLLM_KV_OFFLOADING_DISK_PATH"), *sz = getenv("VLLM_KV_OFFLOADING_DISK_SIZE");
    if (!c->path[0] && p && p[0]) {
        if (strlen(p) >= sizeof c->path)
            return vllm_error(VLLM_ERR_INVALID, "VLLM_KV_OFFLOADING_DISK_PATH is too long");
        strcpy(c->path, p);
    }
    if (!c->disk_bytes && sz && sz[0]) {
        char *end;
        double g = strtod(sz, &end);
        if (*end || g < 0)
            return vllm_error(VLLM_ERR_INVALID, "VLLM_KV_OFFLOADING_DISK_SIZE '%s': expect GiB (a number >= 0)", sz);
        c->disk_bytes = (int64_t)(g * 1073741824.0);
    }
    if (c->path[0] && !c->disk_bytes)
        return vllm_error(VLLM_ERR_INVALID, "the offloading disk tier %s needs a size (disk_bytes_to_use, or "
                          "VLLM_KV_OFFLOADING_DISK_SIZE in GiB)", c->path);
    return VLLM_OK;
}

vllm_status kv_connector_config_parse(const char *text, double offloading_gib, kv_connector_config *out,
                                      bool *enabled) {
    *out = (kv_connector_config){0};
    *enabled = false;
    if (offloading_gib < 0)
        return vllm_error(VLLM_ERR_INVALID, "kv_offloading_size %g: expect GiB >= 0", offloading_gib);
    if (!text || !text[0]) {
        if (offloading_gib == 0) return VLLM_OK;
        out->kind = KV_CONNECTOR_OFFLOADING;
        out->role = KV_CONNECTOR_BOTH;
        out->cpu_bytes = (int64_t)(offloading_gib * 1073741824.0);
        strcpy(out->engine_id, "vllmc");
        *enabled = true;
        return disk_from_env(out);
    }
    json_error_t jerr;
    json_t *o = json_loads(text, 0, &jerr);
    vllm_status rc = VLLM_OK;
    if (!o || !json_is_object(o)) {
        rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: not a JSON object (%s)", o ? "" : jerr.text);
        goto done;
    }
    json_t *name = json_object_get(o, "kv_connector"), *role = json_object_get(o, "kv_role");
    json_t *extra = json_object_get(o, "kv_connector_extra_config"), *eid = json_object_get(o, "engine_id");
    if (!name || json_is_null(name)) goto done; /* vLLM: no connector named, no transfer */
    const char *n = json_is_string(name) ? json_string_value(name) : "";
    if (!strcmp(n, "SharedStorageConnector")) out->kind = KV_CONNECTOR_SHARED_STORAGE;
    else if (!strcmp(n, "OffloadingConnector")) out->kind = KV_CONNECTOR_OFFLOADING;
    else if (!strcmp(n, "TcpConnector")) out->kind = KV_CONNECTOR_TCP;
    else {
        rc = vllm_error(VLLM_ERR_UNSUPPORTED, "kv_transfer_config: kv_connector '%s' is not supported (vllm.c has "
                        "SharedStorageConnector, OffloadingConnector and TcpConnector)", n);
        goto done;
    }
    const char *r = role && json_is_string(role) ? json_string_value(role) : NULL;
    if (!r) {
        rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_role is required with kv_connector "
                        "(kv_producer, kv_consumer or kv_both)");
        goto done;
    }
    if (!strcmp(r, "kv_producer")) out->role = KV_CONNECTOR_PRODUCER;
    else if (!strcmp(r, "kv_consumer")) out->role = KV_CONNECTOR_CONSUMER;
    else if (!strcmp(r, "kv_both")) out->role = KV_CONNECTOR_BOTH;
    else {
        rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_role '%s' must be one of kv_producer, "
                        "kv_consumer, kv_both", r);
        goto done;
    }
    if (eid && json_is_string(eid) && strlen(json_string_value(eid)) < sizeof out->engine_id)
        strcpy(out->engine_id, json_string_value(eid));
    else strcpy(out->engine_id, "vllmc");
    if (extra && !json_is_null(extra) && !json_is_object(extra)) {
        rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_connector_extra_config must be an object");
        goto done;
    }
    if (out->kind == KV_CONNECTOR_TCP) {
        json_t *ip = json_object_get(o, "kv_ip"), *port = json_object_get(o, "kv_port");
        strcpy(out->kv_ip, "127.0.0.1");
        out->kv_port = 14579; /* vLLM's default kv_port */
        out->timeout_s = 5;
        out->cpu_bytes = (int64_t)1 << 30;
        if (ip && !json_is_null(ip)) {
            if (!json_is_string(ip) || !json_string_value(ip)[0] || strlen(json_string_value(ip)) >= sizeof out->kv_ip) {
                rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_ip must be a host name or address");
                goto done;
            }
            strcpy(out->kv_ip, json_string_value(ip));
        }
        if (port && !json_is_null(port)) {
            if (!json_is_integer(port) || json_integer_value(port) < 0 || json_integer_value(port) > 65535) {
                rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: kv_port must be an integer in 0..65535");
                goto done;
            }
            out->kv_port = (int32_t)json_integer_value(port);
        }
        double t = out->timeout_s * 1073741824.0;
        int64_t tb = (int64_t)t;
        if ((rc = extra_bytes(extra, "cpu_bytes_to_use", 1.0, &out->cpu_bytes)) != VLLM_OK ||
            (rc = extra_bytes(extra, "timeout_s", 1073741824.0, &tb)) != VLLM_OK)
            goto done;
        out->timeout_s = (double)tb / 1073741824.0;
        if (out->cpu_bytes <= 0 || out->timeout_s <= 0) {
            rc = vllm_error(VLLM_ERR_INVALID, "kv_transfer_config: TcpConnector needs cpu_bytes_to_use > 0 and "
                            "timeout_s > 0");
            goto done;
        }
    } else if (out->kind == KV_CONNECTOR_SHARED_STORAGE) {
        strcpy(out->path, "local_storage"); /* vLLM's default */
        if ((rc = extra_string(extra, "shared_storage_path", out->path, sizeof out->path)) != VLLM_OK) goto done;
    } else {
        out->cpu_bytes = (int64_t)(offloading_gib * 1073741824.0);
        json_t *nb = json_object_get(extra, "num_cpu_blocks");
        if (nb && !json_is_null(nb)) {
            rc = vllm_error(VLLM_ERR_UNSUPPORTED, "kv_transfer_config: num_cpu_blocks: give cpu_bytes_to_use "
                            "(bytes) or --kv-offloading-size (GiB) instead");
            goto done;
        }
        if ((rc = extra_bytes(extra, "cpu_bytes_to_use", 1.0, &out->cpu_bytes)) != VLLM_OK ||
            (rc = extra_string(extra, "disk_path", out->path, sizeof out->path)) != VLLM_OK ||
            (rc = extra_bytes(extra, "disk_bytes_to_use", 1.0, &out->disk_bytes)) != VLLM_OK ||
            (rc = disk_from_env(out)) != VLLM_OK)
            goto done;
        if (out->cpu_bytes <= 0) {
            rc = vllm_error(VLLM_ERR_INVALID, "OffloadingConnector needs a RAM budget: --kv-offloading-size GiB "
                            "or kv_connector_extra_config.cpu_bytes_to_use");
            goto done;
        }
    }
    *enabled = true;
done:
    json_decref(o);
    return rc;
}

/* ---- TcpConnector: sockets ---- */

static bool write_full(int fd, const void *p, size_t n) {
    const char *s = p;
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        s += k;
        n -= (size_t)k;
    }
    return true;
}

static bool read_full(int fd, void *p, size_t n) {
    char *s = p;
    while (n > 0) {
        ssize_t k = recv(fd, s, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        s += k;
        n -= (size_t)k;
    }
    return true;
}

static void set_timeouts(int fd, double seconds) {
    struct timeval tv = {.tv_sec = (time_t)seconds, .tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* One client: its header, its hashes, the blocks the store has. */
static void serve_client(kv_connector *c, int fd) {
    kv_wire_header hd;
    set_timeouts(fd, c->cfg.timeout_s);
    if (!read_full(fd, &hd, sizeof hd) || hd.magic != KV_WIRE_MAGIC || hd.tag != c->meta_tag ||
        hd.block_bytes != c->block_bytes || hd.n > KV_WIRE_MAX_BLOCKS) {
        log_warn("TcpConnector: a fetch with a bad header (another model or KV layout?) was refused");
        return;
    }
    block_hash *hs = malloc((size_t)(hd.n ? hd.n : 1) * sizeof *hs);
    unsigned char *blk = malloc(c->block_bytes + 1 + sizeof(uint64_t));
    if (hs && blk && read_full(fd, hs, (size_t)hd.n * sizeof *hs)) {
        for (uint32_t i = 0; i < hd.n; i++) {
            pthread_mutex_lock(&c->mu);
            bool found = kv_store_get(c->store, hs[i], blk + 1);
            pthread_mutex_unlock(&c->mu);
            blk[0] = found;
            size_t len = 1;
            if (found) {
                uint64_t sum = XXH3_64bits(blk + 1, c->block_bytes);
                memcpy(blk + 1 + c->block_bytes, &sum, sizeof sum);
                len += c->block_bytes + sizeof sum;
            }
            if (!write_full(fd, blk, len) || !found) break;
        }
    }
    free(hs);
    free(blk);
}

static void *server_main(void *arg) {
    kv_connector *c = arg;
    while (!c->stop) {
        struct pollfd p = {.fd = c->listen_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept(c->listen_fd, NULL, NULL);
        if (fd < 0) continue;
        serve_client(c, fd);
        close(fd);
    }
    return NULL;
}

static vllm_status start_server(kv_connector *c) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", c->cfg.kv_port);
    int e = getaddrinfo(c->cfg.kv_ip, port, &hints, &ai);
    if (e != 0)
        return vllm_error(VLLM_ERR_INVALID, "TcpConnector: kv_ip %s: %s", c->cfg.kv_ip, gai_strerror(e));
    int fd = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        vllm_status rc = vllm_error(VLLM_ERR_IO, "TcpConnector: cannot listen on %s:%s: %s", c->cfg.kv_ip, port,
                                    strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return rc;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    c->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    c->listen_fd = fd;
    if (pthread_create(&c->server, NULL, server_main, c) != 0)
        return vllm_error(VLLM_ERR_NOMEM, "TcpConnector: cannot start the KV server thread");
    c->server_running = true;
    return VLLM_OK;
}

/* Connects to host:port within the timeout; -1 if not. */
static int dial(const char *host, int32_t port, double timeout_s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &ai) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM, 0);
        if (fd < 0) continue;
        set_timeouts(fd, timeout_s); /* SO_SNDTIMEO bounds connect too (Linux) */
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

static void fetch_unref(kv_connector_fetch *f) { /* c->mu held */
    if (--f->refs > 0) return;
    free(f->hashes);
    free(f);
}

static void *fetch_main(void *arg) {
    kv_connector_fetch *f = arg;
    kv_connector *c = f->c;
    int32_t got = 0;
    const char *why = NULL;
    unsigned char *blk = malloc(c->block_bytes + sizeof(uint64_t));
    int fd = blk ? dial(f->host, f->port, c->cfg.timeout_s) : -1;
    kv_wire_header hd = {.magic = KV_WIRE_MAGIC, .tag = c->meta_tag, .block_bytes = c->block_bytes, .n = (uint32_t)f->n};
    if (fd < 0) why = "cannot connect";
    else if (!write_full(fd, &hd, sizeof hd) || !write_full(fd, f->hashes, (size_t)f->n * sizeof *f->hashes))
        why = "cannot send the request";
    for (int32_t i = 0; !why && i < f->n; i++) {
        unsigned char found;
        if (!read_full(fd, &found, 1)) why = "connection lost";
        else if (!found) break;
        else if (!read_full(fd, blk, c->block_bytes + sizeof(uint64_t))) why = "connection lost";
        else {
            uint64_t sum;
            memcpy(&sum, blk + c->block_bytes, sizeof sum);
            if (XXH3_64bits(blk, c->block_bytes) != sum) {
                why = "a block's checksum does not match";
                break;
            }
            pthread_mutex_lock(&c->mu);
            vllm_status rc = kv_store_put(c->store, f->hashes[i], blk);
            pthread_mutex_unlock(&c->mu);
            if (rc != VLLM_OK) why = "out of memory";
            else got++;
        }
    }
    if (fd >= 0) close(fd);
    free(blk);
    if (why)
        log_warn("TcpConnector: fetch from %s:%d: %s after %d of %d blocks; the rest is computed locally", f->host,
                 f->port, why, got, f->n);
    pthread_mutex_lock(&c->mu);
    f->done = true;
    fetch_unref(f);
    if (--c->num_fetches == 0) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

bool kv_connector_fetches(const kv_connector *c) { return c->cfg.kind == KV_CONNECTOR_TCP && loads_kv(c); }

const char *kv_connector_server(const kv_connector *c, int32_t *port) {
    *port = c->port;
    return c->listen_fd >= 0 ? c->cfg.kv_ip : NULL;
}

vllm_status kv_connector_start_fetch(kv_connector *c, const char *host, int32_t port, const block_hash *hashes,
                                     int32_t n, kv_connector_fetch **out) {
    *out = NULL;
    kv_connector_fetch *f = calloc(1, sizeof *f);
    if (!f || !(f->hashes = malloc((size_t)(n > 0 ? n : 1) * sizeof *hashes))) {
        free(f);
        return vllm_error(VLLM_ERR_NOMEM, "TcpConnector: out of memory");
    }
    f->c = c;
    snprintf(f->host, sizeof f->host, "%s", host);
    f->port = port;
    f->n = n;
    memcpy(f->hashes, hashes, (size_t)n * sizeof *hashes);
    f->refs = 2;
    pthread_mutex_lock(&c->mu);
    c->num_fetches++;
    pthread_mutex_unlock(&c->mu);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &at, fetch_main, f);
    pthread_attr_destroy(&at);
    if (e != 0) {
        pthread_mutex_lock(&c->mu);
        c->num_fetches--;
        pthread_mutex_unlock(&c->mu);
        free(f->hashes);
        free(f);
        return vllm_error(VLLM_ERR_NOMEM, "TcpConnector: cannot start a fetch thread");
    }
    *out = f;
    return VLLM_OK;
}

bool kv_connector_fetch_done(kv_connector_fetch *f) {
    pthread_mutex_lock(&f->c->mu);
    bool d = f->done;
    pthread_mutex_unlock(&f->c->mu);
    return d;
}

void kv_connector_fetch_release(kv_connector_fetch *f) {
    if (!f) return;
    kv_connector *c = f->c;
    pthread_mutex_lock(&c->mu);
    fetch_unref(f);
    pthread_mutex_unlock(&c->mu);
}

/* ---- lifetime ---- */

vllm_status kv_connector_create(const kv_connector_config *cfg, executor *ex, kv_cache_manager *kvm, uint64_t tag,
                                kv_connector **out) {
    *out = NULL;
    if (kv_cache_manager_num_groups(kvm) != 1)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "kv_transfer_config: KV connectors need a model with one KV cache "
                          "group (this one has %d: sliding-window layers)", kv_cache_manager_num_groups(kvm));
    kv_connector *c = calloc(1, sizeof *c);
    if (!c) return vllm_error(VLLM_ERR_NOMEM, "kv_connector: out of memory");
    c->cfg = *cfg;
    c->ex = ex;
    c->kvm = kvm;
    c->num_layers = executor_num_layers(ex);
    c->block_size = kv_cache_manager_block_size(kvm);
    c->half_bytes = executor_kv_block_bytes(ex);
    c->block_bytes = 2 * (size_t)c->num_layers * c->half_bytes;
    c->meta_tag = tag;
    kv_store_config sc = {.dir = cfg->path[0] ? cfg->path : NULL,
                          .block_bytes = c->block_bytes,
                          .tag = tag};
    if (cfg->kind == KV_CONNECTOR_OFFLOADING) {
        sc.ram_budget = cfg->cpu_bytes;
        sc.dir_budget = cfg->disk_bytes;
    } else if (cfg->kind == KV_CONNECTOR_TCP) {
        sc.ram_budget = cfg->cpu_bytes;
    }
    c->save_files = cfg->kind == KV_CONNECTOR_SHARED_STORAGE;
    const char *delay = getenv("VLLMC_DEBUG_KV_LOAD_DELAY_US");
    c->load_delay_us = delay ? strtoll(delay, NULL, 10) : 0;
    c->listen_fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_mutex_init(&c->wmu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->progress, NULL);
    vllm_status rc = kv_store_create(&sc, &c->store);
    if (rc == VLLM_OK) {
        if (pthread_create(&c->worker, NULL, worker_main, c) == 0) c->worker_running = true;
        else rc = vllm_error(VLLM_ERR_NOMEM, "kv_connector: cannot start the worker thread");
    }
    if (rc == VLLM_OK && cfg->kind == KV_CONNECTOR_TCP && saves_kv(c)) rc = start_server(c);
    if (rc != VLLM_OK) {
        kv_connector_free(c);
        return rc;
    }
    if (cfg->kind == KV_CONNECTOR_SHARED_STORAGE)
        log_info("KV connector: SharedStorageConnector, %s, path %s, %zu bytes per block",
                 cfg->role == KV_CONNECTOR_PRODUCER ? "kv_producer" : cfg->role == KV_CONNECTOR_CONSUMER ? "kv_consumer"
                                                                                                    : "kv_both",
                 cfg->path, c->block_bytes);
    else if (cfg->kind == KV_CONNECTOR_TCP) {
        char where[300] = "";
        if (c->listen_fd >= 0) snprintf(where, sizeof where, ", KV server on %s:%d", cfg->kv_ip, c->port);
        log_info("KV connector: TcpConnector, %s, %zu bytes per block%s", cfg->role == KV_CONNECTOR_PRODUCER ?
                 "kv_producer" : cfg->role == KV_CONNECTOR_CONSUMER ? "kv_consumer" : "kv_both", c->block_bytes, where);
    }
    else
        log_info("KV offloading: %.3f GiB of host RAM (%lld blocks of %zu bytes)%s%s%s", cfg->cpu_bytes / 1073741824.0,
                 (long long)(cfg->cpu_bytes / (int64_t)c->block_bytes), c->block_bytes,
                 cfg->path[0] ? ", then disk " : "", cfg->path, cfg->path[0] ? "" : " (no disk tier)");
    *out = c;
    return VLLM_OK;
}

void kv_connector_free(kv_connector *c) {
    if (!c) return;
    c->stop = 1;
    if (c->server_running) pthread_join(c->server, NULL);
    if (c->worker_running) {
        pthread_mutex_lock(&c->wmu);
        c->worker_stop = true;
        pthread_cond_signal(&c->work);
        pthread_mutex_unlock(&c->wmu);
        pthread_join(c->worker, NULL);
    }
    pthread_mutex_destroy(&c->wmu);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->progress);
    for (int32_t i = 0; i < c->num_load_sums; i++) XXH3_freeState(c->load_sums[i]);
    for (int32_t i = 0; i < c->num_save_sums; i++) XXH3_freeState(c->save_sums[i]);
    free(c->load_sums);
    free(c->save_sums);
    free(c->pending_refs);
    free(c->load_seqs);
    free(c->load_refs);
    free(c->load_bad);
    free(c->error_seqs);
    free(c->save_bad);
    if (c->listen_fd >= 0) close(c->listen_fd);
    pthread_mutex_lock(&c->mu); /* fetches end within their timeouts */
    while (c->num_fetches > 0) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    kv_store_free(c->store);
    free(c->pending);
    free(c->load_blocks);
    free(c->loads);
    free(c->save_blocks);
    free(c->save_hashes);
    free(c->saving);
    free(c);
}

const kv_connector_config *kv_connector_get_config(const kv_connector *c) { return &c->cfg; }
void kv_connector_get_store_stats(const kv_connector *c, kv_store_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    kv_store_get_stats(c->store, out);
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
}

/* ---- scheduler side ---- */

int32_t kv_connector_get_num_new_matched_tokens(kv_connector *c, seq *q, int32_t num_hits) {
    c->pending_seq = q;
    c->num_pending = 0;
    if (!loads_kv(c)) return 0;
    int32_t bs = c->block_size, limit = (q->num_tokens - 1) / bs;
    for (int32_t i = num_hits; i < limit; i++) {
        block_hash h;
        if (!kv_cache_manager_block_hash(c->kvm, q, i, &h)) break;
        size_t need = (size_t)c->num_pending + 1;
        if (buf_grow((void **)&c->pending, &c->cap_pending, need, c->block_bytes) != VLLM_OK ||
            buf_grow((void **)&c->pending_refs, &c->cap_pending_refs, need, sizeof *c->pending_refs) != VLLM_OK)
            break;
        pthread_mutex_lock(&c->mu);
        bool ok = kv_store_contains(c->store, h) &&
                  kv_store_open(c->store, h, c->pending + (size_t)c->num_pending * c->block_bytes,
                                &c->pending_refs[c->num_pending]);
        pthread_mutex_unlock(&c->mu);
        if (!ok) break;
        c->num_pending++;
    }
    return c->num_pending * bs;
}

vllm_status kv_connector_update_state_after_alloc(kv_connector *c, seq *q, int32_t first_block, int32_t num_blocks) {
    if (num_blocks <= 0) return VLLM_OK;
    if (q != c->pending_seq || num_blocks > c->num_pending)
        return vllm_error(VLLM_ERR_INVALID, "kv_connector: %d blocks allocated for a lookup that staged %d",
                          num_blocks, q == c->pending_seq ? c->num_pending : 0);
    size_t need = (size_t)c->num_loads + (size_t)num_blocks;
    vllm_status rc;
    if ((rc = buf_grow((void **)&c->load_blocks, &c->cap_load_blocks, need, sizeof *c->load_blocks)) != VLLM_OK ||
        (rc = buf_grow((void **)&c->load_seqs, &c->cap_load_seqs, need, sizeof *c->load_seqs)) != VLLM_OK ||
        (rc = buf_grow((void **)&c->load_refs, &c->cap_load_refs, need, sizeof *c->load_refs)) != VLLM_OK ||
        (rc = buf_grow((void **)&c->load_bad, &c->cap_load_bad, need, 1)) != VLLM_OK ||
        (rc = buf_grow((void **)&c->loads, &c->cap_loads, need, c->block_bytes)) != VLLM_OK)
        return rc;
    const int32_t *table = seq_block_table(q, 0);
    for (int32_t i = 0; i < num_blocks; i++) {
        int32_t k = c->num_loads + i;
        c->load_blocks[k] = table[first_block + i];
        c->load_seqs[k] = q;
        c->load_refs[k] = c->pending_refs[i];
        if (c->load_refs[k].in_ram)
            memcpy(c->loads + (size_t)k * c->block_bytes, c->pending + (size_t)i * c->block_bytes, c->block_bytes);
    }
    c->num_loads += num_blocks;
    c->pending_seq = NULL;
    c->num_pending = 0;
    return VLLM_OK;
}

/* True if the step already saves h (two sequences filling equal blocks). */
static bool saving_hash(const kv_connector *c, block_hash h) {
    for (int32_t i = 0; i < c->num_saves; i++)
        if (c->save_hashes[i].lo == h.lo && c->save_hashes[i].hi == h.hi) return true;
    return false;
}

vllm_status kv_connector_build_connector_meta(kv_connector *c, const scheduler_output *so,
                                              const kv_connector_meta **out) {
    c->num_saves = 0;
    c->pending_seq = NULL;
    vllm_status rc = VLLM_OK;
    int32_t bs = c->block_size;
    for (int32_t i = 0; saves_kv(c) && i < so->num_seqs; i++) {
        const scheduled_seq *e = &so->seqs[i];
        seq *q = e->seq;
        int32_t end = e->num_computed + e->num_new_tokens - e->num_drafts; /* committed tokens fed */
        if (end > q->num_tokens) end = q->num_tokens;
        const int32_t *table = seq_block_table(q, 0);
        for (int32_t b = e->num_computed / bs; b < end / bs; b++) {
            block_hash h;
            if (!kv_cache_manager_block_hash(c->kvm, q, b, &h)) continue;
            pthread_mutex_lock(&c->mu);
            bool have = kv_store_contains(c->store, h);
            pthread_mutex_unlock(&c->mu);
            if (have || saving_hash(c, h)) continue;
            size_t need = (size_t)c->num_saves + 1;
            if ((rc = buf_grow((void **)&c->save_blocks, &c->cap_save_blocks, need, sizeof *c->save_blocks)) !=
                    VLLM_OK ||
                (rc = buf_grow((void **)&c->save_hashes, &c->cap_save_hashes, need, sizeof *c->save_hashes)) !=
                    VLLM_OK ||
                (rc = buf_grow((void **)&c->save_bad, &c->cap_save_bad, need, 1)) != VLLM_OK ||
                (rc = buf_grow((void **)&c->saving, &c->cap_saving, need, c->block_bytes)) != VLLM_OK)
                return rc;
            c->save_blocks[c->num_saves] = table[b];
            c->save_hashes[c->num_saves] = h;
            c->num_saves++;
        }
    }
    c->meta = (kv_connector_meta){.num_loads = c->num_loads,
                                  .load_blocks = c->load_blocks,
                                  .num_saves = c->num_saves,
                                  .save_blocks = c->save_blocks};
    *out = &c->meta;
    return rc;
}

bool kv_connector_request_finished(kv_connector *c, const request *r) {
    (void)c;
    (void)r;
    return false;
}

/* ---- the worker thread ---- */

/* Grows a list of streamed checksums to n states. */
static vllm_status grow_sums(XXH3_state_t ***sums, size_t *cap, int32_t *num, int32_t n) {
    vllm_status rc = buf_grow((void **)sums, cap, (size_t)n, sizeof **sums);
    if (rc != VLLM_OK) return rc;
    for (; *num < n; (*num)++)
        if (!((*sums)[*num] = XXH3_createState())) return vllm_error(VLLM_ERR_NOMEM, "kv_connector: out of memory");
    return VLLM_OK;
}

/* Layer l of every load read from a file: K and V are contiguous in the
 * payload ([l][K|V]), read at once and added to the block's checksum; the
 * last layer settles it. */
static void load_layer(kv_connector *c, int32_t l) {
    size_t off = (size_t)(2 * l) * c->half_bytes, n = 2 * c->half_bytes;
    for (int32_t i = 0; i < c->num_loads; i++) {
        if (c->load_refs[i].in_ram || c->load_bad[i]) continue;
        unsigned char *dst = c->loads + (size_t)i * c->block_bytes + off;
        if (!kv_store_read_part(c->store, &c->load_refs[i], off, n, dst)) {
            c->load_bad[i] = LOAD_UNREADABLE;
            continue;
        }
        if (l == 0) XXH3_64bits_reset(c->load_sums[i]);
        XXH3_64bits_update(c->load_sums[i], dst, n);
        if (l == c->num_layers - 1 && XXH3_64bits_digest(c->load_sums[i]) != c->load_refs[i].checksum)
            c->load_bad[i] = LOAD_CHECKSUM;
    }
}

/* Layer l of every save into its block file; the last layer renames it into place. */
static void write_layer(kv_connector *c, int32_t l) {
    size_t off = (size_t)(2 * l) * c->half_bytes, n = 2 * c->half_bytes;
    for (int32_t i = 0; i < c->num_saves; i++) {
        const unsigned char *src = c->saving + (size_t)i * c->block_bytes + off;
        if (l == 0) XXH3_64bits_reset(c->save_sums[i]);
        if (!c->save_bad[i]) {
            XXH3_64bits_update(c->save_sums[i], src, n);
            if (kv_store_write_part(c->store, c->save_hashes[i], off, n, src) != VLLM_OK) {
                log_warn("KV connector: a block was not saved: %s", vllm_errmsg());
                c->save_bad[i] = 1;
            }
        }
        if (l == c->num_layers - 1) {
            pthread_mutex_lock(&c->mu);
            if (kv_store_write_finish(c->store, c->save_hashes[i], XXH3_64bits_digest(c->save_sums[i]),
                                      !c->save_bad[i]) != VLLM_OK)
                log_warn("KV connector: a block was not saved: %s", vllm_errmsg());
            pthread_mutex_unlock(&c->mu);
        }
    }
}

static void *worker_main(void *arg) {
    kv_connector *c = arg;
    pthread_mutex_lock(&c->wmu);
    while (!c->worker_stop) {
        if (c->layers_loaded < c->load_target) { /* loads first: the forward waits for them */
            int32_t l = c->layers_loaded;
            pthread_mutex_unlock(&c->wmu);
            load_layer(c, l);
            if (c->load_delay_us > 0) usleep((useconds_t)c->load_delay_us);
            pthread_mutex_lock(&c->wmu);
            c->layers_loaded = l + 1;
            if (l + 1 == c->load_target) c->t_loaded = vllm_monotonic_time();
            pthread_cond_broadcast(&c->progress);
        } else if (c->layers_written < c->layers_copied) {
            int32_t l = c->layers_written;
            pthread_mutex_unlock(&c->wmu);
            write_layer(c, l);
            pthread_mutex_lock(&c->wmu);
            c->layers_written = l + 1;
            pthread_cond_broadcast(&c->progress);
        } else {
            pthread_cond_wait(&c->work, &c->wmu);
        }
    }
    pthread_mutex_unlock(&c->wmu);
    return NULL;
}

/* ---- worker side ---- */

static vllm_status hook_before_attention(void *ctx, int32_t layer) {
    return kv_connector_wait_for_layer_load(ctx, layer);
}

static vllm_status hook_after_layer(void *ctx, int32_t layer) {
    kv_connector *c = ctx;
    return kv_connector_save_kv_layer(c, &c->meta, layer);
}

void kv_connector_layer_hooks(kv_connector *c, runner_layer_hooks *out) {
    *out = (runner_layer_hooks){.before_attention = hook_before_attention, .after_layer = hook_after_layer, .ctx = c};
}

vllm_status kv_connector_start_load_kv(kv_connector *c, const kv_connector_meta *m) {
    (void)m;
    c->num_error_seqs = 0;
    int32_t from_files = 0;
    for (int32_t i = 0; i < c->num_loads; i++) {
        c->load_bad[i] = LOAD_OK;
        if (!c->load_refs[i].in_ram) from_files++;
    }
    vllm_status rc = VLLM_OK;
    if (from_files > 0 && (rc = grow_sums(&c->load_sums, &c->cap_load_sums, &c->num_load_sums, c->num_loads)) != VLLM_OK)
        return rc;
    if (c->save_files && c->num_saves > 0) {
        if ((rc = grow_sums(&c->save_sums, &c->cap_save_sums, &c->num_save_sums, c->num_saves)) != VLLM_OK)
            return rc;
        memset(c->save_bad, 0, (size_t)c->num_saves);
    }
    pthread_mutex_lock(&c->wmu);
    c->step_active = true;
    c->layers_loaded = c->layers_copied = c->layers_written = 0;
    c->load_target = from_files > 0 ? c->num_layers : 0;
    c->t_first_wait = c->t_loaded = 0;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->wmu);
    return VLLM_OK;
}

vllm_status kv_connector_wait_for_layer_load(kv_connector *c, int32_t layer) {
    if (!c->step_active || c->num_loads == 0) return VLLM_OK;
    pthread_mutex_lock(&c->wmu);
    if (layer == 0) c->t_first_wait = vllm_monotonic_time();
    while (c->layers_loaded <= layer && c->load_target > 0) pthread_cond_wait(&c->progress, &c->wmu);
    pthread_mutex_unlock(&c->wmu);
    /* every load goes in, a bad one too: its sequence's step is void (wait_for_save) */
    vllm_status rc = VLLM_OK;
    size_t off = (size_t)(2 * layer) * c->half_bytes;
    for (int32_t i = 0; i < c->num_loads && rc == VLLM_OK; i++) {
        const unsigned char *blk = c->loads + (size_t)i * c->block_bytes + off;
        rc = executor_write_kv(c->ex, layer, c->load_blocks[i], blk, blk + c->half_bytes);
    }
    return rc;
}

vllm_status kv_connector_save_kv_layer(kv_connector *c, const kv_connector_meta *m, int32_t layer) {
    if (!c->step_active || m->num_saves == 0) return VLLM_OK;
    vllm_status rc = VLLM_OK;
    for (int32_t i = 0; i < m->num_saves && rc == VLLM_OK; i++) {
        unsigned char *blk = c->saving + (size_t)i * c->block_bytes + (size_t)(2 * layer) * c->half_bytes;
        rc = executor_read_kv(c->ex, layer, m->save_blocks[i], blk, blk + c->half_bytes);
    }
    if (rc == VLLM_OK && c->save_files) {
        pthread_mutex_lock(&c->wmu);
        c->layers_copied = layer + 1;
        pthread_cond_signal(&c->work);
        pthread_mutex_unlock(&c->wmu);
    }
    return rc;
}

/* After the loads: the sequences whose blocks failed, each once; the bad
 * files rejected in the store. */
static vllm_status collect_load_errors(kv_connector *c) {
    for (int32_t i = 0; i < c->num_loads; i++) {
        if (!c->load_bad[i]) continue;
        pthread_mutex_lock(&c->mu);
        kv_store_reject(c->store, &c->load_refs[i],
                        c->load_bad[i] == LOAD_CHECKSUM ? "checksum mismatch" : "unreadable payload");
        pthread_mutex_unlock(&c->mu);
        bool seen = false;
        for (int32_t k = 0; k < c->num_error_seqs && !seen; k++) seen = c->error_seqs[k] == c->load_seqs[i];
        if (seen) continue;
        vllm_status rc = buf_grow((void **)&c->error_seqs, &c->cap_error_seqs, (size_t)c->num_error_seqs + 1,
                                  sizeof *c->error_seqs);
        if (rc != VLLM_OK) return rc;
        c->error_seqs[c->num_error_seqs++] = c->load_seqs[i];
    }
    return VLLM_OK;
}

vllm_status kv_connector_wait_for_save(kv_connector *c, const kv_connector_meta *m) {
    if (!c->step_active) return VLLM_OK;
    pthread_mutex_lock(&c->wmu);
    while (c->layers_loaded < c->load_target) pthread_cond_wait(&c->progress, &c->wmu);
    while (c->layers_written < c->layers_copied) pthread_cond_wait(&c->progress, &c->wmu);
    double ahead_ms = (c->t_loaded - c->t_first_wait) * 1e3;
    bool timed = c->load_target > 0 && c->t_first_wait > 0;
    c->step_active = false;
    pthread_mutex_unlock(&c->wmu);
    if (timed)
        log_write(c->load_delay_us > 0 ? LOG_INFO : LOG_DEBUG, __FILE__, __LINE__,
                  "KV connector: %d blocks loaded layer by layer; the forward reached layer 0's attention %.1f ms "
                  "before the last layer was read", c->num_loads, ahead_ms);
    vllm_status rc = collect_load_errors(c);
    c->num_loads = 0; /* the loads of the next step start afresh */
    if (rc != VLLM_OK) return rc;
    for (int32_t i = 0; !c->save_files && i < m->num_saves; i++) {
        pthread_mutex_lock(&c->mu);
        rc = kv_store_put(c->store, c->save_hashes[i], c->saving + (size_t)i * c->block_bytes);
        pthread_mutex_unlock(&c->mu);
        if (rc == VLLM_ERR_NOMEM) return rc;
        if (rc != VLLM_OK) {
            log_warn("KV connector: a block was not saved: %s", vllm_errmsg());
            break;
        }
    }
    return VLLM_OK;
}

int32_t kv_connector_get_seqs_with_load_errors(kv_connector *c, seq *const **out) {
    *out = c->error_seqs;
    return c->num_error_seqs;
}

int32_t kv_connector_get_finished(kv_connector *c) {
    (void)c;
    return 0;
}
