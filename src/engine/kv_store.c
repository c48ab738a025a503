/*
 * kv_store.c - block files and the RAM tier; see kv_store.h.
 *
 * The index (tiered shape) is one string-keyed map (the hash in hex) over
 * entries that sit on the RAM LRU or the disk LRU list, most recent at the
 * front. Eviction pops the tail. A RAM entry owns its payload; a disk entry
 * owns a file.
 */
#include "engine/kv_store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"

#define KV_FILE_MAGIC 0x31424b56434c4c56ull /* "VLLCVKB1" */

typedef struct kv_file_header {
    uint64_t magic;
    uint64_t tag;
    uint64_t hash_lo, hash_hi;
    uint64_t payload_bytes;
    uint64_t checksum;               /* XXH3-64 of the payload */
} kv_file_header;

typedef enum { TIER_RAM, TIER_DISK } tier;

typedef struct entry {
    map_node by_key;
    list_node lru;
    char key[33];
    block_hash h;
    tier tier;
    unsigned char *data;             /* RAM: (block_bytes) */
} entry;

#define KV_NUM_REJECTED 64

struct kv_store {
    kv_store_config cfg;
    char *dir;
    map index;
    list_node ram_lru, disk_lru;
    int64_t ram_used, disk_used;
    kv_store_stats st;
    /* files whose payload failed its checksum after kv_store_open passed
     * them (a ring: a file that stays bad is refused without rereading) */
    struct { block_hash h; uint64_t file_id; } rejected[KV_NUM_REJECTED];
    int32_t num_rejected;
};

static void hex_key(block_hash h, char out[33]) {
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, h.hi, h.lo);
}

static void file_path(const kv_store *s, block_hash h, char *out, size_t n) {
    char key[33];
    hex_key(h, key);
    snprintf(out, n, "%s/%s.kv", s->dir, key);
}

static bool tiered(const kv_store *s) { return s->cfg.ram_budget > 0; }

static size_t file_bytes(const kv_store *s) { return sizeof(kv_file_header) + s->cfg.block_bytes; }

vllm_status kv_store_create(const kv_store_config *cfg, kv_store **out) {
    *out = NULL;
    if (cfg->block_bytes == 0) return vllm_error(VLLM_ERR_INVALID, "kv_store: block_bytes is 0");
    if (cfg->ram_budget <= 0 && !cfg->dir)
        return vllm_error(VLLM_ERR_INVALID, "kv_store: neither a RAM budget nor a directory");
    kv_store *s = calloc(1, sizeof *s);
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "kv_store: out of memory");
    s->cfg = *cfg;
    map_init(&s->index);
    list_init(&s->ram_lru);
    list_init(&s->disk_lru);
    if (cfg->dir) {
        if (!(s->dir = strdup(cfg->dir))) {
            kv_store_free(s);
            return vllm_error(VLLM_ERR_NOMEM, "kv_store: out of memory");
        }
        if (mkdir(s->dir, 0755) != 0 && errno != EEXIST) {
            vllm_status rc = vllm_error(VLLM_ERR_IO, "kv_store: cannot create directory %s: %s", s->dir,
                                        strerror(errno));
            kv_store_free(s);
            return rc;
        }
    }
    s->cfg.dir = s->dir;
    *out = s;
    return VLLM_OK;
}

static void drop_entry(kv_store *s, entry *en) {
    map_remove(&s->index, &en->by_key);
    list_remove(&en->lru);
    if (en->tier == TIER_RAM) {
        s->ram_used -= (int64_t)s->cfg.block_bytes;
        s->st.ram_blocks--;
    } else {
        char path[4096];
        file_path(s, en->h, path, sizeof path);
        unlink(path);
        s->disk_used -= (int64_t)file_bytes(s);
        s->st.disk_blocks--;
    }
    free(en->data);
    free(en);
}

void kv_store_free(kv_store *s) {
    if (!s) return;
    for (map_node *n = map_first(&s->index), *next; n; n = next) {
        next = map_next(&s->index, n);
        drop_entry(s, map_entry(n, entry, by_key));
    }
    map_deinit(&s->index);
    free(s->dir);
    free(s);
}

static entry *find(const kv_store *s, block_hash h) {
    char key[33];
    hex_key(h, key);
    map_node *n = map_find(&s->index, key);
    return n ? map_entry(n, entry, by_key) : NULL;
}

static void tmp_path(const kv_store *s, block_hash h, char *out, size_t n) {
    char path[4096];
    file_path(s, h, path, sizeof path);
    snprintf(out, n, "%s.%ld.tmp", path, (long)getpid());
}

/* Writes the block file whole (temporary name, then rename). */
static vllm_status write_file(kv_store *s, block_hash h, const void *src) {
    char path[4096], tmp[4200];
    file_path(s, h, path, sizeof path);
    tmp_path(s, h, tmp, sizeof tmp);
    kv_file_header hd = {.magic = KV_FILE_MAGIC,
                         .tag = s->cfg.tag,
                         .hash_lo = h.lo,
                         .hash_hi = h.hi,
                         .payload_bytes = s->cfg.block_bytes,
                         .checksum = XXH3_64bits(src, s->cfg.block_bytes)};
    FILE *f = fopen(tmp, "wb");
    if (!f) return vllm_error(VLLM_ERR_IO, "kv_store: cannot write %s: %s", tmp, strerror(errno));
    bool ok = fwrite(&hd, sizeof hd, 1, f) == 1 && fwrite(src, 1, s->cfg.block_bytes, f) == s->cfg.block_bytes;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return vllm_error(VLLM_ERR_IO, "kv_store: cannot write %s: %s", path, strerror(errno));
    }
    return VLLM_OK;
}

/* Reads and checks a block file; false (logged) if missing or wrong. */
static bool read_file(kv_store *s, block_hash h, void *dst) {
    char path[4096];
    file_path(s, h, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    kv_file_header hd;
    const char *why = NULL;
    if (fread(&hd, sizeof hd, 1, f) != 1) why = "short header";
    else if (hd.magic != KV_FILE_MAGIC) why = "bad magic";
    else if (hd.tag != s->cfg.tag) why = "written for another model or KV layout";
    else if (hd.hash_lo != h.lo || hd.hash_hi != h.hi) why = "block hash differs from its name";
    else if (hd.payload_bytes != s->cfg.block_bytes) why = "wrong payload size";
    else if (fread(dst, 1, s->cfg.block_bytes, f) != s->cfg.block_bytes) why = "short payload";
    else if (fgetc(f) != EOF) why = "trailing bytes";
    else if (XXH3_64bits(dst, s->cfg.block_bytes) != hd.checksum) why = "checksum mismatch";
    fclose(f);
    if (why) {
        s->st.num_bad++;
        log_warn("kv_store: block file %s rejected (%s); the block will be recomputed", path, why);
        return false;
    }
    return true;
}

bool kv_store_contains(kv_store *s, block_hash h) {
    if (tiered(s)) return find(s, h) != NULL;
    char path[4096];
    file_path(s, h, path, sizeof path);
    return access(path, R_OK) == 0;
}

/* A found block: most recently used in its tier's LRU, and counted as that tier's hit. */
static void hit(kv_store *s, entry *en) {
    list_remove(&en->lru);
    list_push_front(en->tier == TIER_RAM ? &s->ram_lru : &s->disk_lru, &en->lru);
    if (en->tier == TIER_RAM) s->st.ram_hits++;
    else s->st.disk_hits++;
}

bool kv_store_get(kv_store *s, block_hash h, void *dst) {
    if (!tiered(s)) {
        bool ok = read_file(s, h, dst);
        if (ok) s->st.disk_hits++;
        return ok;
    }
    entry *en = find(s, h);
    if (!en) return false;
    if (en->tier == TIER_RAM) {
        memcpy(dst, en->data, s->cfg.block_bytes);
        hit(s, en);
        return true;
    }
    if (!read_file(s, h, dst)) {
        drop_entry(s, en);
        return false;
    }
    hit(s, en);
    return true;
}

/* Keeps the disk tier within its budget, oldest files first. */
static void trim_disk(kv_store *s) {
    while (s->disk_used > s->cfg.dir_budget && !list_empty(&s->disk_lru))
        drop_entry(s, list_entry(s->disk_lru.prev, entry, lru));
}

/* Moves RAM's least recent blocks to disk (or drops them) until RAM fits. */
static void trim_ram(kv_store *s) {
    while (s->ram_used > s->cfg.ram_budget && !list_empty(&s->ram_lru)) {
        entry *en = list_entry(s->ram_lru.prev, entry, lru);
        if (!s->dir || s->cfg.dir_budget < (int64_t)file_bytes(s) || write_file(s, en->h, en->data) != VLLM_OK) {
            drop_entry(s, en);
            continue;
        }
        list_remove(&en->lru);
        free(en->data);
        en->data = NULL;
        en->tier = TIER_DISK;
        s->ram_used -= (int64_t)s->cfg.block_bytes;
        s->st.ram_blocks--;
        s->disk_used += (int64_t)file_bytes(s);
        s->st.disk_blocks++;
        list_push_front(&s->disk_lru, &en->lru);
        trim_disk(s);
    }
}

vllm_status kv_store_put(kv_store *s, block_hash h, const void *src) {
    if (!tiered(s)) {
        vllm_status rc = write_file(s, h, src);
        if (rc == VLLM_OK) s->st.puts++;
        return rc;
    }
    entry *en = find(s, h);
    if (en) {
        list_remove(&en->lru);
        list_push_front(en->tier == TIER_RAM ? &s->ram_lru : &s->disk_lru, &en->lru);
        return VLLM_OK;
    }
    /* a block larger than the RAM budget goes straight to disk, if there is one */
    bool to_disk = s->cfg.ram_budget < (int64_t)s->cfg.block_bytes;
    if (to_disk && (!s->dir || s->cfg.dir_budget < (int64_t)file_bytes(s))) return VLLM_OK; /* nothing fits */
    if (!(en = calloc(1, sizeof *en)) || (!to_disk && !(en->data = malloc(s->cfg.block_bytes)))) {
        free(en);
        return vllm_error(VLLM_ERR_NOMEM, "kv_store: out of memory for a %zu-byte block", s->cfg.block_bytes);
    }
    en->h = h;
    hex_key(h, en->key);
    vllm_status rc = to_disk ? write_file(s, h, src) : VLLM_OK;
    if (rc == VLLM_OK) rc = map_insert(&s->index, &en->by_key, en->key);
    if (rc != VLLM_OK) {
        free(en->data);
        free(en);
        return rc;
    }
    s->st.puts++;
    if (to_disk) {
        en->tier = TIER_DISK;
        list_push_front(&s->disk_lru, &en->lru);
        s->disk_used += (int64_t)file_bytes(s);
        s->st.disk_blocks++;
        trim_disk(s);
        return VLLM_OK;
    }
    en->tier = TIER_RAM;
    memcpy(en->data, src, s->cfg.block_bytes);
    list_push_front(&s->ram_lru, &en->lru);
    s->ram_used += (int64_t)s->cfg.block_bytes;
    s->st.ram_blocks++;
    trim_ram(s);
    return VLLM_OK;
}

void kv_store_get_stats(const kv_store *s, kv_store_stats *out) { *out = s->st; }

/* ---- piece by piece ---- */

static bool was_rejected(const kv_store *s, block_hash h, uint64_t file_id) {
    int32_t n = s->num_rejected < KV_NUM_REJECTED ? s->num_rejected : KV_NUM_REJECTED;
    for (int32_t i = 0; i < n; i++)
        if (s->rejected[i].h.lo == h.lo && s->rejected[i].h.hi == h.hi && s->rejected[i].file_id == file_id)
            return true;
    return false;
}

/* Checks a block file's header and length without reading its payload. */
static bool open_file(kv_store *s, block_hash h, kv_store_ref *ref) {
    char path[4096];
    file_path(s, h, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    kv_file_header hd;
    struct stat stt;
    const char *why = NULL;
    if (pread(fd, &hd, sizeof hd, 0) != (ssize_t)sizeof hd) why = "short header";
    else if (hd.magic != KV_FILE_MAGIC) why = "bad magic";
    else if (hd.tag != s->cfg.tag) why = "written for another model or KV layout";
    else if (hd.hash_lo != h.lo || hd.hash_hi != h.hi) why = "block hash differs from its name";
    else if (hd.payload_bytes != s->cfg.block_bytes) why = "wrong payload size";
    else if (fstat(fd, &stt) != 0 || stt.st_size < (off_t)file_bytes(s)) why = "short payload";
    else if (stt.st_size > (off_t)file_bytes(s)) why = "trailing bytes";
    close(fd);
    if (why) {
        s->st.num_bad++;
        log_warn("kv_store: block file %s rejected (%s); the block will be recomputed", path, why);
        return false;
    }
    uint64_t id[3] = {(uint64_t)stt.st_ino, (uint64_t)stt.st_mtim.tv_sec, (uint64_t)stt.st_mtim.tv_nsec};
    ref->file_id = XXH3_64bits(id, sizeof id);
    if (was_rejected(s, h, ref->file_id)) return false;
    ref->checksum = hd.checksum;
    return true;
}

bool kv_store_open(kv_store *s, block_hash h, void *dst, kv_store_ref *ref) {
    *ref = (kv_store_ref){.h = h};
    if (!tiered(s)) {
        bool ok = open_file(s, h, ref);
        if (ok) s->st.disk_hits++;
        return ok;
    }
    entry *en = find(s, h);
    if (!en) return false;
    if (en->tier == TIER_RAM) {
        memcpy(dst, en->data, s->cfg.block_bytes);
        ref->in_ram = true;
        hit(s, en);
        return true;
    }
    if (!open_file(s, h, ref)) {
        drop_entry(s, en);
        return false;
    }
    hit(s, en);
    return true;
}

bool kv_store_read_part(const kv_store *s, const kv_store_ref *ref, size_t off, size_t n, void *dst) {
    char path[4096];
    file_path(s, ref->h, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, (char *)dst + done, n - done, (off_t)(sizeof(kv_file_header) + off + done));
        if (k <= 0) break;
        done += (size_t)k;
    }
    close(fd);
    return done == n;
}

void kv_store_reject(kv_store *s, const kv_store_ref *ref, const char *why) {
    char path[4096];
    file_path(s, ref->h, path, sizeof path);
    s->st.num_bad++;
    log_warn("kv_store: block file %s rejected (%s); the block will be recomputed", path, why);
    s->rejected[s->num_rejected % KV_NUM_REJECTED].h = ref->h;
    s->rejected[s->num_rejected % KV_NUM_REJECTED].file_id = ref->file_id;
    s->num_rejected++;
    entry *en = tiered(s) ? find(s, ref->h) : NULL;
    if (en && en->tier == TIER_DISK) drop_entry(s, en);
}

vllm_status kv_store_write_part(const kv_store *s, block_hash h, size_t off, size_t n, const void *src) {
    char tmp[4200];
    tmp_path(s, h, tmp, sizeof tmp);
    int fd = open(tmp, off == 0 ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY, 0644);
    if (fd < 0) return vllm_error(VLLM_ERR_IO, "kv_store: cannot write %s: %s", tmp, strerror(errno));
    size_t done = 0;
    while (done < n) {
        ssize_t k = pwrite(fd, (const char *)src + done, n - done, (off_t)(sizeof(kv_file_header) + off + done));
        if (k <= 0) break;
        done += (size_t)k;
    }
    bool ok = done == n;
    if (close(fd) != 0) ok = false;
    return ok ? VLLM_OK : vllm_error(VLLM_ERR_IO, "kv_store: cannot write %s: %s", tmp, strerror(errno));
}

vllm_status kv_store_write_finish(kv_store *s, block_hash h, uint64_t checksum, bool ok) {
    char path[4096], tmp[4200];
    file_path(s, h, path, sizeof path);
    tmp_path(s, h, tmp, sizeof tmp);
    if (!ok) {
        unlink(tmp);
        return VLLM_OK;
    }
    kv_file_header hd = {.magic = KV_FILE_MAGIC,
                         .tag = s->cfg.tag,
                         .hash_lo = h.lo,
                         .hash_hi = h.hi,
                         .payload_bytes = s->cfg.block_bytes,
                         .checksum = checksum};
    int fd = open(tmp, O_WRONLY);
    bool good = fd >= 0 && pwrite(fd, &hd, sizeof hd, 0) == (ssize_t)sizeof hd;
    if (fd >= 0 && close(fd) != 0) good = false;
    if (!good || rename(tmp, path) != 0) {
        vllm_status rc = vllm_error(VLLM_ERR_IO, "kv_store: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return rc;
    }
    s->st.puts++;
    return VLLM_OK;
}
