/* test_kv_store.c - the KV connector's block store (engine/kv_store.h) and
 * --kv-transfer-config parsing (engine/kv_connector.h), against hand-derived
 * expectations: LRU order in RAM, spill to disk and disk eviction by budget,
 * files rejected for a flipped byte, a short payload, another tag or a name
 * that does not match the hash; config errors name the key; the piece-wise
 * reads and writes of the layer-wise loads and saves (a file streamed in two
 * parts reads back whole through the one-shot reader, its header checked
 * without its payload, a flipped payload byte passes kv_store_open but not
 * the streamed checksum, and a rejected file is refused until replaced). */
/* checks: 6 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/kv_connector.h"
#include "engine/kv_store.h"
#include "harness.h"

#define BB 64 /* block bytes */

static block_hash H(uint64_t i) { return (block_hash){i * 0x9e3779b97f4a7c15ull, i}; }
static void fill(unsigned char *b, int v) { memset(b, v, BB); }

static char dir[256];
static void mkdir_tmp(void) {
    snprintf(dir, sizeof dir, "/tmp/test_kv_store.XXXXXX");
    if (!mkdtemp(dir)) dir[0] = 0;
}
static void rm_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

TEST(test_ram_lru) {
    kv_store *s;
    CHECK(kv_store_create(&(kv_store_config){.ram_budget = 3 * BB, .block_bytes = BB, .tag = 1}, &s) == VLLM_OK);
    unsigned char b[BB], out[BB];
    for (int i = 1; i <= 3; i++) {
        fill(b, i);
        CHECK(kv_store_put(s, H(i), b) == VLLM_OK);
    }
    CHECK(kv_store_get(s, H(1), out) && out[0] == 1 && out[BB - 1] == 1, "block 1 back whole");
    fill(b, 4);
    CHECK(kv_store_put(s, H(4), b) == VLLM_OK); /* evicts the least recent: 2 (1 was just read) */
    CHECK(!kv_store_contains(s, H(2)), "block 2 should be evicted");
    CHECK(kv_store_contains(s, H(1)) && kv_store_contains(s, H(3)) && kv_store_contains(s, H(4)));
    kv_store_stats st;
    kv_store_get_stats(s, &st);
    CHECK(st.ram_blocks == 3 && st.ram_hits == 1 && st.puts == 4, "%lld %lld %lld", (long long)st.ram_blocks,
          (long long)st.ram_hits, (long long)st.puts);
    kv_store_free(s);
}

TEST(test_spill_to_disk) {
    mkdir_tmp();
    CHECK(dir[0]);
    kv_store *s;
    /* RAM holds 1 block, disk 2 files (header 48 + 64 bytes each) */
    CHECK(kv_store_create(&(kv_store_config){.dir = dir, .ram_budget = BB, .dir_budget = 2 * (48 + BB),
                                             .block_bytes = BB, .tag = 7},
                          &s) == VLLM_OK);
    unsigned char b[BB], out[BB];
    for (int i = 1; i <= 4; i++) {
        fill(b, 10 + i);
        CHECK(kv_store_put(s, H(i), b) == VLLM_OK);
    }
    /* RAM: 4; disk: 3, 2 (1 evicted by the budget) */
    kv_store_stats st;
    kv_store_get_stats(s, &st);
    CHECK(st.ram_blocks == 1 && st.disk_blocks == 2, "ram %lld disk %lld", (long long)st.ram_blocks,
          (long long)st.disk_blocks);
    CHECK(!kv_store_contains(s, H(1)));
    CHECK(kv_store_get(s, H(2), out) && out[7] == 12, "block 2 from disk");
    CHECK(kv_store_get(s, H(4), out) && out[7] == 14, "block 4 from RAM");
    kv_store_free(s);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls %s)\"", dir);
    CHECK(system(cmd) == 0, "the tiered store's files are deleted at free");
    rm_dir();
}

/* Writes block i through a shared store, then damages its file with cmd (%s = path). */
static bool damaged_get(const char *how, uint64_t tag_reader) {
    kv_store *w, *r;
    unsigned char b[BB], out[BB];
    fill(b, 33);
    if (kv_store_create(&(kv_store_config){.dir = dir, .block_bytes = BB, .tag = 5}, &w) != VLLM_OK) return true;
    kv_store_put(w, H(9), b);
    kv_store_free(w);
    char path[400], cmd[900];
    snprintf(path, sizeof path, "%s/%016llx%016llx.kv", dir, (unsigned long long)H(9).hi, (unsigned long long)H(9).lo);
    if (how) {
        snprintf(cmd, sizeof cmd, how, path, path);
        if (system(cmd) != 0) return true;
    }
    kv_store_create(&(kv_store_config){.dir = dir, .block_bytes = BB, .tag = tag_reader}, &r);
    bool ok = kv_store_get(r, H(9), out) && out[20] == 33;
    kv_store_free(r);
    unlink(path);
    return ok;
}

TEST(test_shared_files_checked) {
    mkdir_tmp();
    CHECK(dir[0]);
    CHECK(damaged_get(NULL, 5), "an intact file is read");
    CHECK(!damaged_get("printf '\\042' | dd of=%s bs=1 seek=70 conv=notrunc 2>/dev/null #%s", 5), "flipped byte used");
    CHECK(!damaged_get("truncate -s -1 %s #%s", 5), "short payload used");
    CHECK(!damaged_get("printf x >> %s #%s", 5), "trailing byte accepted");
    CHECK(!damaged_get(NULL, 6), "a file of another model/layout used");
    /* a file renamed to another hash's name: its header still names the old hash */
    kv_store *w, *r;
    unsigned char b[BB], out[BB];
    fill(b, 1);
    CHECK(kv_store_create(&(kv_store_config){.dir = dir, .block_bytes = BB, .tag = 5}, &w) == VLLM_OK);
    CHECK(kv_store_put(w, H(1), b) == VLLM_OK);
    kv_store_free(w);
    char from[400], to[400];
    snprintf(from, sizeof from, "%s/%016llx%016llx.kv", dir, (unsigned long long)H(1).hi, (unsigned long long)H(1).lo);
    snprintf(to, sizeof to, "%s/%016llx%016llx.kv", dir, (unsigned long long)H(2).hi, (unsigned long long)H(2).lo);
    CHECK(rename(from, to) == 0);
    CHECK(kv_store_create(&(kv_store_config){.dir = dir, .block_bytes = BB, .tag = 5}, &r) == VLLM_OK);
    CHECK(!kv_store_get(r, H(2), out), "a block under another hash's name used");
    kv_store_stats st;
    kv_store_get_stats(r, &st);
    CHECK(st.num_bad == 1);
    kv_store_free(r);
    rm_dir();
}

TEST(test_config_parse) {
    kv_connector_config c;
    bool on;
    CHECK(kv_connector_config_parse(NULL, 0, &c, &on) == VLLM_OK && !on);
    CHECK(kv_connector_config_parse(NULL, 0.5, &c, &on) == VLLM_OK && on && c.kind == KV_CONNECTOR_OFFLOADING &&
          c.role == KV_CONNECTOR_BOTH && c.cpu_bytes == (int64_t)1 << 29);
    CHECK(kv_connector_config_parse("{\"kv_connector\":\"SharedStorageConnector\",\"kv_role\":\"kv_consumer\"}", 0, &c,
                                    &on) == VLLM_OK && on && c.role == KV_CONNECTOR_CONSUMER && !strcmp(c.path, "local_storage"));
    CHECK(kv_connector_config_parse("{\"kv_connector\":\"TcpConnector\",\"kv_role\":\"kv_producer\"}", 0, &c, &on) ==
              VLLM_OK && c.kind == KV_CONNECTOR_TCP && c.kv_port == 14579 && !strcmp(c.kv_ip, "127.0.0.1"));
    CHECK(kv_connector_config_parse("{\"kv_connector\":\"SharedStorageConnector\"}", 0, &c, &on) == VLLM_ERR_INVALID &&
          strstr(vllm_errmsg(), "kv_role is required"), "%s", vllm_errmsg());
    CHECK(kv_connector_config_parse("{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}", 0, &c, &on) ==
          VLLM_ERR_UNSUPPORTED && strstr(vllm_errmsg(), "LMCacheConnectorV1"), "%s", vllm_errmsg());
    CHECK(kv_connector_config_parse("{\"kv_connector\":\"OffloadingConnector\",\"kv_role\":\"kv_both\"}", 0, &c, &on) ==
          VLLM_ERR_INVALID && strstr(vllm_errmsg(), "RAM budget"), "%s", vllm_errmsg());
    CHECK(kv_connector_config_parse("[1]", 0, &c, &on) == VLLM_ERR_INVALID);
}

TEST(test_disk_only_when_block_exceeds_ram) {
    mkdir_tmp();
    CHECK(dir[0]);
    kv_store *s;
    CHECK(kv_store_create(&(kv_store_config){.dir = dir, .ram_budget = BB / 2, .dir_budget = 10 * (48 + BB),
                                             .block_bytes = BB, .tag = 7},
                          &s) == VLLM_OK);
    unsigned char b[BB], out[BB];
    fill(b, 3);
    CHECK(kv_store_put(s, H(3), b) == VLLM_OK);
    kv_store_stats st;
    kv_store_get_stats(s, &st);
    CHECK(st.ram_blocks == 0 && st.disk_blocks == 1);
    CHECK(kv_store_get(s, H(3), out) && out[0] == 3);
    kv_store_free(s);
    rm_dir();
}

TEST(test_pieces) {
    mkdir_tmp();
    CHECK(dir[0]);
    kv_store *s;
    CHECK(kv_store_create(&(kv_store_config){.dir = dir, .block_bytes = BB, .tag = 3}, &s) == VLLM_OK);
    unsigned char b[BB], out[BB];
    for (int i = 0; i < BB; i++) b[i] = (unsigned char)(i * 7 + 1);
    /* two parts (two "layers" of 32 bytes), then the header and rename */
    CHECK(kv_store_write_part(s, H(1), 0, BB / 2, b) == VLLM_OK);
    CHECK(!kv_store_contains(s, H(1)), "a file in progress is not visible");
    CHECK(kv_store_write_part(s, H(1), BB / 2, BB / 2, b + BB / 2) == VLLM_OK);
    CHECK(kv_store_write_finish(s, H(1), XXH3_64bits(b, BB), true) == VLLM_OK);
    CHECK(kv_store_get(s, H(1), out) && !memcmp(out, b, BB), "the one-shot reader checks the whole file");
    kv_store_ref ref;
    CHECK(kv_store_open(s, H(1), out, &ref) && !ref.in_ram && ref.checksum == XXH3_64bits(b, BB));
    memset(out, 0, BB);
    CHECK(kv_store_read_part(s, &ref, BB / 2, BB / 2, out + BB / 2) && !memcmp(out + BB / 2, b + BB / 2, BB / 2));
    CHECK(!kv_store_read_part(s, &ref, BB / 2, BB, out), "a part past the payload is short");
    /* an aborted write leaves nothing */
    CHECK(kv_store_write_part(s, H(2), 0, BB, b) == VLLM_OK);
    CHECK(kv_store_write_finish(s, H(2), 0, false) == VLLM_OK && !kv_store_contains(s, H(2)));
    /* a flipped payload byte: the header still passes, the payload's checksum does not */
    char path[512];
    snprintf(path, sizeof path, "%s/%016llx%016llx.kv", dir, (unsigned long long)H(1).hi, (unsigned long long)H(1).lo);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 48 + 5, SEEK_SET);
        fputc(b[5] ^ 0xff, f);
        fclose(f);
    }
    CHECK(kv_store_open(s, H(1), out, &ref), "the header is intact");
    CHECK(kv_store_read_part(s, &ref, 0, BB, out) && XXH3_64bits(out, BB) != ref.checksum);
    kv_store_reject(s, &ref, "checksum mismatch");
    CHECK(!kv_store_open(s, H(1), out, &ref), "a rejected file is refused");
    usleep(10000); /* a later modification time, whatever the file system's granularity */
    CHECK(kv_store_put(s, H(1), b) == VLLM_OK);
    CHECK(kv_store_open(s, H(1), out, &ref), "a replaced file is new");
    kv_store_stats st;
    kv_store_get_stats(s, &st);
    CHECK(st.num_bad == 1 && st.puts == 2, "bad %lld puts %lld", (long long)st.num_bad, (long long)st.puts);
    kv_store_free(s);
    rm_dir();
}

int main(void) {
    RUN(test_ram_lru);
    RUN(test_spill_to_disk);
    RUN(test_shared_files_checked);
    RUN(test_config_parse);
    RUN(test_disk_only_when_block_exceeds_ram);
    RUN(test_pieces);
    return harness_done();
}
