/*
 * kv_store.h - where a KV connector keeps blocks outside the pool, named by
 * their chained block hash (kv_cache_manager.h): a directory of block files
 * (SharedStorageConnector's shared path, or the offloading tier's disk), and
 * host RAM (the offloading tier), each an LRU under its own byte budget.
 *
 * A block is the K and V of every layer for block_size positions, exactly
 * as the pool holds them (executor_read_kv's layout and element type), so a
 * block written back serves the same attention bit for bit.
 *
 * Files. <dir>/<32 hex digits of the hash>.kv: a 48-byte header (magic and
 * version, the layout tag, the block hash, the payload's size and its XXH3-64
 * checksum) and the payload. A file is written under a temporary name and
 * renamed, so a reader sees a whole file or none. A reader checks everything:
 * a file whose tag, hash, size or checksum is wrong is never used (counted in
 * num_bad, logged; the block is then recomputed by the caller).
 *
 * Two shapes:
 *   shared (ram_budget 0): every put writes a file, every get reads one;
 *     another process may write the directory (the producer instance); no
 *     index, no eviction (the directory is the operator's).
 *   tiered (ram_budget > 0): puts go to RAM; a block evicted from RAM (LRU)
 *     goes to the directory if there is one (dir_budget, LRU, files this
 *     process wrote, deleted on eviction and at kv_store_free), else it is
 *     dropped. One in-memory index over both tiers.
 *
 * Not thread-safe: callers serialize (kv_connector.c: one lock), except
 * for the _part functions below, which touch only files.
 */
#ifndef VLLM_ENGINE_KV_STORE_H
#define VLLM_ENGINE_KV_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/block_pool.h"
#include "vllm/status.h"

typedef struct kv_store_config {
    const char *dir;                 /* block files; NULL = none (copied) */
    int64_t dir_budget;              /* tiered: bytes of files kept (0 = no disk tier) */
    int64_t ram_budget;              /* bytes of blocks in RAM; 0 = shared shape */
    size_t block_bytes;              /* payload of one block */
    uint64_t tag;                    /* model and pool layout; files with another tag are ignored */
} kv_store_config;

typedef struct kv_store_stats {
    int64_t ram_blocks, disk_blocks; /* held now (tiered) */
    int64_t ram_hits, disk_hits;     /* gets served */
    int64_t puts, num_bad;           /* blocks stored; files rejected (tag, size, hash, checksum) */
} kv_store_stats;

typedef struct kv_store kv_store;

/* Creates the directory if missing. */
vllm_status kv_store_create(const kv_store_config *cfg, kv_store **out);
/* Deletes the tiered shape's own files; NULL is a no-op. */
void kv_store_free(kv_store *s);

/* Probably there (shared: the file exists; tiered: indexed). */
bool kv_store_contains(kv_store *s, block_hash h);
/* Copies the block's payload (block_bytes) into dst. False when missing or
 * rejected (a rejected tiered file is deleted and forgotten). */
bool kv_store_get(kv_store *s, block_hash h, void *dst);
/* Stores a block (a no-op if it is already there). Fails only on
 * VLLM_ERR_NOMEM or VLLM_ERR_IO (a file could not be written). */
vllm_status kv_store_put(kv_store *s, block_hash h, const void *src);

void kv_store_get_stats(const kv_store *s, kv_store_stats *out);

/* ---- piece by piece (kv_connector's layer-wise loads and saves) ----
 *
 * A load: kv_store_open checks a block without reading a file's payload,
 * kv_store_read_part reads the payload a part at a time (a layer's K and V),
 * and the caller checks the parts against ref.checksum (XXH3-64 of the whole
 * payload, streamed) and calls kv_store_reject if they differ. A save into
 * the shared shape: kv_store_write_part in order of offset, then
 * kv_store_write_finish with the payload's checksum, which renames the file
 * into place (a reader never sees a partial file). The _part functions touch
 * no state of the store (only its files): another thread may call them
 * without the caller's lock. */

typedef struct kv_store_ref {
    block_hash h;
    uint64_t checksum;               /* a file's: its header's XXH3-64 of the payload */
    uint64_t file_id;                /* a file's inode and modification time, mixed */
    bool in_ram;                     /* the payload was copied whole by kv_store_open */
} kv_store_ref;

/* Is block h there? A RAM block is copied whole into dst (in_ram). A file
 * must have a good header (magic, tag, hash, size), the right length, and
 * not be one kv_store_reject saw (the same inode and modification time: a
 * file written again, renamed into place, is new) (logged, counted in
 * num_bad, when wrong; a rejected tiered file is dropped). */
bool kv_store_open(kv_store *s, block_hash h, void *dst, kv_store_ref *ref);
/* Bytes [off, off + n) of an opened file's payload into dst; false if the
 * file is gone or short. */
bool kv_store_read_part(const kv_store *s, const kv_store_ref *ref, size_t off, size_t n, void *dst);
/* The payload read did not match ref->checksum (or could not be read): the
 * block is counted bad, logged with why, dropped (tiered), and kv_store_open
 * refuses this file until it is replaced. */
void kv_store_reject(kv_store *s, const kv_store_ref *ref, const char *why);
/* Shared shape only: bytes [off, off + n) of block h's payload into its
 * temporary file (created at offset 0). Fails with VLLM_ERR_IO. */
vllm_status kv_store_write_part(const kv_store *s, block_hash h, size_t off, size_t n, const void *src);
/* Writes the header with the checksum and renames the file into place
 * (counted in puts); on failure, or with ok false, deletes it instead. */
vllm_status kv_store_write_finish(kv_store *s, block_hash h, uint64_t checksum, bool ok);

#endif
