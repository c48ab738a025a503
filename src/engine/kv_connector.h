/*
 * kv_connector.h - moving KV blocks between the pool and somewhere else
 * (vLLM's kv_connector/v1): disaggregated prefill (a producer instance
 * computes a prompt's KV, a consumer loads it and only decodes) and the
 * offloading tier (blocks kept in host RAM and on disk beyond the pool).
 *
 * Two roles in one object, as vLLM splits KVConnectorBase_V1:
 *
 *   scheduler side (the scheduler, at admission):
 *     get_num_new_matched_tokens  after the prefix-cache lookup: how many
 *                                 more tokens of the prompt the connector
 *                                 can supply (whole blocks, consecutive from
 *                                 the first local miss)
 *     update_state_after_alloc    the scheduler gave those blocks pool ids:
 *                                 they are to be loaded this step
 *     build_connector_meta        (the engine, after scheduling) this step's
 *                                 loads and saves
 *     request_finished            a request is done: whether the connector
 *                                 still needs its blocks (never, here: every
 *                                 transfer completes within its step)
 *   worker side (the engine around the forward, and inside it per layer):
 *     start_load_kv, wait_for_layer_load, save_kv_layer, wait_for_save,
 *     get_finished (which requests' asynchronous transfers completed: none,
 *     every transfer ends within its step)
 *
 * Blocks are named by their chained block hash (kv_cache_manager.h, fixed
 * seed), which covers every token before them, the LoRA id and the cache
 * salt, so a hit anywhere is the KV of exactly this prefix. Only whole
 * blocks move; the last prompt token is always computed (its logits are
 * needed), so a consumer computes at most one block of a prompt itself.
 *
 * Safety: get_num_new_matched_tokens checks each block it counts without
 * reading its payload (kv_store_open: a file's header, tag, hash, size and
 * length; a RAM block is copied whole), so a missing block or a bad header
 * ends the match. The payload is read during the forward, layer by layer,
 * on the worker thread, and its XXH3-64 streamed; once the last layer is
 * read a mismatch (or a read that failed) voids the step of the sequence
 * that loaded the block: it goes back to the waiting queue with its blocks
 * freed (never cached), the file is refused from then on, and its next
 * admission loads only the blocks before it and computes the rest. So no
 * token, logprob or cached block ever derives from a bad block. Loads
 * overlap the forward (layer l is read while layers < l compute); saves are
 * copied out of the pool after each layer and a shared-storage connector's
 * worker writes them into the files meanwhile.
 *
 * Connectors (kv_transfer_config.kv_connector):
 *   SharedStorageConnector  block files under
 *                           kv_connector_extra_config.shared_storage_path
 *   OffloadingConnector     host RAM (cpu_bytes_to_use, or --kv-offloading-size
 *                           GiB), then a disk directory (disk_path, disk_bytes_to_use;
 *                           or VLLM_KV_OFFLOADING_DISK_PATH / _SIZE in GiB)
 *   TcpConnector            instance to instance over TCP, with NixlConnector's
 *                           handshake: a producer keeps the blocks it computed in
 *                           RAM (cpu_bytes_to_use, 1 GiB) and serves them from a
 *                           thread listening on kv_ip:kv_port; its responses to
 *                           do_remote_decode requests name remote_host/remote_port.
 *                           A consumer given a request with do_remote_prefill and
 *                           them fetches the prompt's blocks on a thread while the
 *                           request waits (WAITING_FOR_REMOTE_KVS, engine.c), into
 *                           its own RAM store, where admission finds them. A fetch
 *                           that fails (peer gone, timeout, bad checksum) ends
 *                           early: the rest of the prompt is computed locally.
 * kv_role: kv_producer saves, kv_consumer loads, kv_both does both.
 * Models with sliding-window KV groups are refused (one group only).
 */
#ifndef VLLM_ENGINE_KV_CONNECTOR_H
#define VLLM_ENGINE_KV_CONNECTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/executor.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_store.h"
#include "engine/request.h"
#include "engine/scheduler.h"

typedef enum kv_connector_role {
    KV_CONNECTOR_PRODUCER = 1,       /* saves */
    KV_CONNECTOR_CONSUMER = 2,       /* loads */
    KV_CONNECTOR_BOTH = 3,
} kv_connector_role;

typedef enum kv_connector_kind {
    KV_CONNECTOR_SHARED_STORAGE = 1,
    KV_CONNECTOR_OFFLOADING,
    KV_CONNECTOR_TCP,                /* instance to instance (NixlConnector's handshake) */
} kv_connector_kind;

typedef struct kv_connector_config {
    kv_connector_kind kind;
    kv_connector_role role;
    char engine_id[128];
    char path[1024];                 /* shared storage path, or the disk tier ("" = none) */
    int64_t cpu_bytes;               /* offloading: RAM budget */
    int64_t disk_bytes;              /* offloading: disk budget */
    char kv_ip[256];                 /* tcp: the producer's KV server address (127.0.0.1) */
    int32_t kv_port;                 /* tcp: its port (14579, vLLM's default kv_port; 0 = any) */
    double timeout_s;                /* tcp: connect and per-read timeout (5) */
} kv_connector_config;

/* Parses vLLM's --kv-transfer-config JSON (NULL = none) and
 * --kv-offloading-size (GiB, 0 = off) into *out; *enabled is false when
 * neither asks for a connector. Errors name the key that is wrong. */
vllm_status kv_connector_config_parse(const char *json, double offloading_gib, kv_connector_config *out,
                                      bool *enabled);

typedef struct kv_connector kv_connector;

/* This step's transfers (build_connector_meta); borrowed until the next build. */
typedef struct kv_connector_meta {
    int32_t num_loads;
    const int32_t *load_blocks;      /* (num_loads) pool block ids */
    int32_t num_saves;
    const int32_t *save_blocks;      /* (num_saves) */
} kv_connector_meta;

/* ex and kvm are borrowed and must outlive the connector; tag names the
 * model and KV layout (block files with another tag are not used). */
vllm_status kv_connector_create(const kv_connector_config *cfg, executor *ex, kv_cache_manager *kvm, uint64_t tag,
                                kv_connector **out);
void kv_connector_free(kv_connector *c);
const kv_connector_config *kv_connector_get_config(const kv_connector *c);
void kv_connector_get_store_stats(const kv_connector *c, kv_store_stats *out);

/* ---- TcpConnector ---- */

typedef struct kv_connector_fetch kv_connector_fetch;

/* True for a TcpConnector that loads (fetches from remote producers). */
bool kv_connector_fetches(const kv_connector *c);
/* Where a TcpConnector producer's KV server listens (its kv_ip, *port), or NULL. */
const char *kv_connector_server(const kv_connector *c, int32_t *port);
/* Starts fetching the blocks named hashes[0..n) from host:port into the
 * local store, on a thread; the first missing or bad block ends it. */
vllm_status kv_connector_start_fetch(kv_connector *c, const char *host, int32_t port, const block_hash *hashes,
                                     int32_t n, kv_connector_fetch **out);
/* Finished (blocks stored, or failed)? Never blocks. */
bool kv_connector_fetch_done(kv_connector_fetch *f);
/* The caller's reference; the fetch may still run (an abort) and frees
 * itself when done. kv_connector_free waits for running fetches. */
void kv_connector_fetch_release(kv_connector_fetch *f);

/* ---- scheduler side ---- */

/* Tokens after q's num_hits prefix-cache blocks that the connector can
 * supply (a multiple of block_size, 0 if it loads nothing), read, checked
 * and staged for update_state_after_alloc. Every block counted ends at or
 * before position q->num_tokens - 1, so the last token is computed. */
int32_t kv_connector_get_num_new_matched_tokens(kv_connector *c, seq *q, int32_t num_hits);
/* q got pool blocks for its staged match: table entries [first_block,
 * first_block + num_blocks) of group 0 are loaded this step. Fails only on
 * VLLM_ERR_NOMEM. */
vllm_status kv_connector_update_state_after_alloc(kv_connector *c, seq *q, int32_t first_block, int32_t num_blocks);
/* The step's loads (from update_state_after_alloc) and saves (every block
 * the step fills with committed tokens, producer roles, unless the store
 * has it). */
vllm_status kv_connector_build_connector_meta(kv_connector *c, const scheduler_output *so,
                                              const kv_connector_meta **out);
/* True if the connector still holds r's blocks (never: transfers are synchronous). */
bool kv_connector_request_finished(kv_connector *c, const request *r);

/* ---- worker side ----
 *
 * One step: build_connector_meta, start_load_kv (the worker thread starts
 * reading the loads kept in files, a layer at a time, into staging), the
 * forward, wait_for_save. Inside the forward (the runner's layer hooks,
 * kv_connector_layer_hooks) wait_for_layer_load(l) runs just before layer
 * l's attention and save_kv_layer(l) just after it; an executor without
 * hooks calls every wait_for_layer_load before the forward and every
 * save_kv_layer after it (same bytes, no overlap). */

/* The hooks to install in a local executor (executor_set_layer_hooks):
 * wait_for_layer_load and save_kv_layer of the step's meta. */
void kv_connector_layer_hooks(kv_connector *c, runner_layer_hooks *out);
vllm_status kv_connector_start_load_kv(kv_connector *c, const kv_connector_meta *m);
/* Waits until the worker has read layer's K/V of the step's loads, then
 * writes them into the pool (on the calling thread: the forward's). */
vllm_status kv_connector_wait_for_layer_load(kv_connector *c, int32_t layer);
/* Copies layer's K/V of the blocks to save out of the pool; a shared-storage
 * connector's worker then appends them to the blocks' files. */
vllm_status kv_connector_save_kv_layer(kv_connector *c, const kv_connector_meta *m, int32_t layer);
/* Ends the step: waits for the worker (loads read, files written), checks
 * the loads' checksums, stores the saves (a store that cannot write is
 * logged, not fatal). */
vllm_status kv_connector_wait_for_save(kv_connector *c, const kv_connector_meta *m);
/* After wait_for_save: the sequences whose loaded blocks failed their check
 * this step (vLLM's get_block_ids_with_load_errors, by sequence). Their step
 * is void: the engine sends them back to be recomputed
 * (scheduler_recompute_seq) before scheduler_update; the bad files are
 * refused from then on, so the new lookup stops before them. */
int32_t kv_connector_get_seqs_with_load_errors(kv_connector *c, seq *const **out);
/* Requests whose asynchronous transfers finished: always 0 here. */
int32_t kv_connector_get_finished(kv_connector *c);

#endif
