/* test_lora_engine.c - LoRA through the engine on stories260K with adapters
 * this test writes itself (PEFT's layout by hand: adapter_config.json and a
 * safetensors file of random F32 lora_A/lora_B for every projection; the
 * numbers are checked against PEFT in tests/test_lora_ref.sh, here only the
 * engine's rules):
 *
 *   - prefix cache per adapter: a prompt computed under A is a hit for A
 *     again (vllm_scheduler_stats.prefix_cache_hits) and never for B nor the
 *     base model; after unloading A and loading it again (a new id) the
 *     prompt misses (and gives A's tokens), and every block is free once
 *     idle;
 *   - batch invariance: each request's greedy tokens are the same alone and
 *     in one batch of the base model and three adapters, and an adapter's
 *     tokens differ from the base model's;
 *   - max_loras 1: requests of A and B added together run one adapter at a
 *     time (B's first token only after A's last), base requests alongside,
 *     and all finish;
 *   - unload while running: the running request finishes with the tokens it
 *     gets without the unload; a new request naming it fails NOT_FOUND;
 *   - errors: load with LoRA off, a duplicate name (vLLM's message), rank
 *     above max_lora_rank, unknown name at add;
 *   - the grouped update (lora_apply, runs of rows on the matmul kernels)
 *     against lora_apply_portable (plain loops, one row at a time) on every
 *     module of a batch of three adapters and base rows, within 1e-5.
 */
/* checks: 7 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "model/lora.h"
#include "model/model.h"
#include "vllm/vllm.h"

#define MODEL "models/stories260K"
/* stories260K: hidden 64, 8 heads x 8, 4 KV heads, intermediate 172, 5 layers */
enum { DIM = 64, QD = 64, KVD = 32, FF = 172, LAYERS = 5 };

static char tmpdir[256];

static uint64_t rng_state;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* Writes DIR/NAME: a PEFT adapter of the given rank on all seven projections. */
static int write_adapter(const char *name, int rank, uint64_t seed, char *dir_out, size_t cap) {
    snprintf(dir_out, cap, "%s/%s", tmpdir, name);
    mkdir(dir_out, 0755);
    char path[512];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir_out);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"r\": %d, \"lora_alpha\": %d, \"target_modules\": [\"q_proj\", \"k_proj\", \"v_proj\", "
               "\"o_proj\", \"gate_proj\", \"up_proj\", \"down_proj\"], \"peft_type\": \"LORA\"}", rank, 2 * rank);
    fclose(f);
    static const char *const mods[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    const int outs[7] = {QD, KVD, KVD, DIM, FF, FF, DIM}, ins[7] = {DIM, DIM, DIM, QD, DIM, DIM, FF};
    char header[16384];
    size_t hl = 0, off = 0;
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "{");
    for (int l = 0; l < LAYERS; l++)
        for (int m = 0; m < 7; m++)
            for (int ab = 0; ab < 2; ab++) {
                int d0 = ab ? outs[m] : rank, d1 = ab ? rank : ins[m];
                size_t bytes = (size_t)d0 * (size_t)d1 * 4;
                hl += (size_t)snprintf(header + hl, sizeof header - hl,
                                       "%s\"base_model.model.model.layers.%d.%s.lora_%c.weight\":{\"dtype\":\"F32\","
                                       "\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                       hl > 1 ? "," : "", l, mods[m], ab ? 'B' : 'A', d0, d1, off, off + bytes);
                off += bytes;
            }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    while (hl % 8) header[hl++] = ' ';
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir_out);
    if (!(f = fopen(path, "wb"))) return -1;
    uint64_t n = hl;
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, hl, f);
    rng_state = seed;
    for (int l = 0; l < LAYERS; l++)
        for (int m = 0; m < 7; m++)
            for (int ab = 0; ab < 2; ab++) {
                int d0 = ab ? outs[m] : rank, d1 = ab ? rank : ins[m];
                float sc = 1.0f / sqrtf((float)d1);
                for (int i = 0; i < d0 * d1; i++) {
                    float v = frand() * sc;
                    fwrite(&v, 4, 1, f);
                }
            }
    return fclose(f);
}

static vllm_engine *make_engine(int max_loras, bool lora) {
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    a.model = MODEL;
    a.num_threads = 1;
    a.max_model_len = 128;
    a.max_num_seqs = 8;
    a.num_gpu_blocks_override = 64;
    a.enable_lora = lora;
    a.max_loras = max_loras;
    a.max_lora_rank = 16;
    vllm_engine *e = NULL;
    CHECK_OR(NULL, vllm_engine_create(&a, &e) == VLLM_OK, "%s", vllm_errmsg());
    return e;
}

static char dir_a[300], dir_b[300], dir_c[300], dir_big[300];

enum { MAXREQ = 8, NTOK = 12 };
typedef struct run_result {
    int32_t tokens[MAXREQ][64];
    int32_t num[MAXREQ];
    int first_step[MAXREQ], last_step[MAXREQ];
    int64_t hits;
    int32_t free_at_end, total;
} run_result;

/* Adds n requests (prompt, lora name or NULL), steps to the end. unload_at:
 * the step after which to unload unload_name (or -1). */
static int run(vllm_engine *e, int n, const int32_t *const *prompts, const int32_t *lens, const char *const *loras,
               run_result *res, int unload_at, const char *unload_name) {
    memset(res, 0, sizeof *res);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = NTOK;
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        vllm_request_opts o = {0};
        o.lora_name = loras[i];
        if (vllm_engine_add_request(e, id, prompts[i], lens[i], &sp, &o) != VLLM_OK) return -1;
        res->first_step[i] = -1;
    }
    for (int step = 0; vllm_engine_has_unfinished(e); step++) {
        const vllm_step_output *out;
        if (vllm_engine_step(e, &out) != VLLM_OK) return -1;
        res->hits += out->stats.prefix_cache_hits;
        res->free_at_end = out->stats.num_blocks_free;
        res->total = out->stats.num_blocks_total;
        for (int32_t k = 0; k < out->num_outputs; k++) {
            int r = atoi(out->outputs[k].request_id);
            for (int32_t t = 0; t < out->outputs[k].num_new_tokens && res->num[r] < 64; t++)
                res->tokens[r][res->num[r]++] = out->outputs[k].new_token_ids[t];
            if (out->outputs[k].num_new_tokens) {
                if (res->first_step[r] < 0) res->first_step[r] = step;
                res->last_step[r] = step;
            }
        }
        if (step == unload_at && vllm_engine_unload_lora(e, unload_name) != VLLM_OK) return -1;
    }
    return 0;
}

static int32_t prompt_long[40], prompt2[9], prompt3[7];

static void init_prompts(void) {
    for (int i = 0; i < 40; i++) prompt_long[i] = i == 0 ? 1 : 20 + (i * 37) % 400;
    for (int i = 0; i < 9; i++) prompt2[i] = i == 0 ? 1 : 100 + i * 11;
    for (int i = 0; i < 7; i++) prompt3[i] = i == 0 ? 1 : 300 + i * 5;
}

TEST(test_lora_prefix_cache_per_adapter) {
    vllm_engine *e = make_engine(4, true);
    CHECK(e);
    CHECK(vllm_engine_load_lora(e, "A", dir_a) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "B", dir_b) == VLLM_OK, "%s", vllm_errmsg());
    const int32_t *p[1] = {prompt_long};
    int32_t l[1] = {40};
    run_result r;
    const char *la[1] = {"A"}, *lb[1] = {"B"}, *lbase[1] = {NULL};
    CHECK(run(e, 1, p, l, la, &r, -1, NULL) == 0, "%s", vllm_errmsg());
    CHECK(r.hits == 0, "first A run hit %lld", (long long)r.hits);
    CHECK(run(e, 1, p, l, lb, &r, -1, NULL) == 0, "%s", vllm_errmsg());
    CHECK(r.hits == 0, "B hit A's blocks: %lld tokens", (long long)r.hits);
    CHECK(run(e, 1, p, l, lbase, &r, -1, NULL) == 0, "%s", vllm_errmsg());
    CHECK(r.hits == 0, "the base model hit an adapter's blocks: %lld tokens", (long long)r.hits);
    CHECK(run(e, 1, p, l, la, &r, -1, NULL) == 0, "%s", vllm_errmsg());
    CHECK(r.hits == 32, "A again hit %lld tokens, want 32 (two full blocks of 16)", (long long)r.hits);
    int32_t a_tokens[NTOK];
    memcpy(a_tokens, r.tokens[0], sizeof a_tokens);
    /* unload A: its blocks go; a reload is a new adapter to the cache */
    CHECK(vllm_engine_unload_lora(e, "A") == VLLM_OK, "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "A", dir_a) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(run(e, 1, p, l, la, &r, -1, NULL) == 0, "%s", vllm_errmsg());
    CHECK(r.hits == 0, "reloaded A hit %lld tokens of the old A", (long long)r.hits);
    CHECK(!memcmp(a_tokens, r.tokens[0], sizeof a_tokens), "reloaded A gives other tokens");
    CHECK(r.free_at_end == r.total, "%d of %d blocks free when idle", r.free_at_end, r.total);
    vllm_engine_free(e);
}

TEST(test_lora_batch_invariance) {
    vllm_engine *e = make_engine(4, true);
    CHECK(e);
    CHECK(vllm_engine_load_lora(e, "A", dir_a) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "B", dir_b) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "C", dir_c) == VLLM_OK, "%s", vllm_errmsg());
    const int32_t *p[4] = {prompt2, prompt3, prompt2, prompt_long};
    int32_t l[4] = {9, 7, 9, 40};
    const char *names[4] = {NULL, "A", "B", "C"};
    run_result mixed, alone;
    vllm_engine_reset_prefix_cache(e);
    CHECK(run(e, 4, p, l, names, &mixed, -1, NULL) == 0, "%s", vllm_errmsg());
    for (int i = 0; i < 4; i++) {
        vllm_engine_reset_prefix_cache(e);
        CHECK(run(e, 1, p + i, l + i, names + i, &alone, -1, NULL) == 0, "%s", vllm_errmsg());
        CHECK(alone.num[0] == NTOK && !memcmp(alone.tokens[0], mixed.tokens[i], sizeof(int32_t) * NTOK),
              "request %d (%s) differs alone and in the mixed batch", i, names[i] ? names[i] : "base");
    }
    /* the adapter changes the output: B on prompt2 vs the base on prompt2 */
    CHECK(memcmp(mixed.tokens[0], mixed.tokens[2], sizeof(int32_t) * NTOK), "adapter B gives the base model's tokens");
    vllm_engine_free(e);
}

TEST(test_lora_max_loras) {
    vllm_engine *e = make_engine(1, true);
    CHECK(e);
    CHECK(vllm_engine_load_lora(e, "A", dir_a) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "B", dir_b) == VLLM_OK, "%s", vllm_errmsg());
    const int32_t *p[4] = {prompt2, prompt3, prompt3, prompt2};
    int32_t l[4] = {9, 7, 7, 9};
    const char *names[4] = {"A", "B", NULL, "A"};
    run_result r;
    CHECK(run(e, 4, p, l, names, &r, -1, NULL) == 0, "%s", vllm_errmsg());
    for (int i = 0; i < 4; i++) CHECK(r.num[i] == NTOK, "request %d got %d tokens", i, r.num[i]);
    CHECK(r.first_step[1] > r.last_step[0], "B started at step %d, A ended at %d", r.first_step[1], r.last_step[0]);
    CHECK(r.first_step[2] == r.first_step[0], "the base request waited (step %d, A at %d)", r.first_step[2],
          r.first_step[0]);
    /* nobody overtakes B: the later A request waits for B */
    CHECK(r.first_step[3] > r.last_step[1], "the second A (step %d) overtook B (ended %d)", r.first_step[3],
          r.last_step[1]);
    vllm_engine_free(e);
}

TEST(test_lora_unload_while_running) {
    vllm_engine *e = make_engine(4, true);
    CHECK(e);
    CHECK(vllm_engine_load_lora(e, "A", dir_a) == VLLM_OK, "%s", vllm_errmsg());
    const int32_t *p[1] = {prompt2};
    int32_t l[1] = {9};
    const char *la[1] = {"A"};
    run_result ref, r;
    CHECK(run(e, 1, p, l, la, &ref, -1, NULL) == 0, "%s", vllm_errmsg());
    vllm_engine_reset_prefix_cache(e);
    CHECK(run(e, 1, p, l, la, &r, 3, "A") == 0, "%s", vllm_errmsg());
    CHECK(r.num[0] == NTOK && !memcmp(r.tokens[0], ref.tokens[0], sizeof(int32_t) * NTOK),
          "unloading A mid-request changed its tokens");
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    vllm_request_opts o = {0};
    o.lora_name = "A";
    CHECK(vllm_engine_add_request(e, "x", prompt2, 9, &sp, &o) == VLLM_ERR_NOT_FOUND, "added to an unloaded adapter");
    CHECK(strstr(vllm_errmsg(), "'A'"), "%s", vllm_errmsg());
    CHECK(vllm_engine_list_loras(e, NULL, 0) == 0, "adapters left after unload");
    vllm_engine_free(e);
}

TEST(test_lora_errors) {
    vllm_engine *off = make_engine(1, false);
    CHECK(off);
    CHECK(vllm_engine_load_lora(off, "A", dir_a) == VLLM_ERR_INVALID, "load with LoRA off");
    CHECK(strstr(vllm_errmsg(), "--enable-lora"), "%s", vllm_errmsg());
    vllm_engine_free(off);
    vllm_engine *e = make_engine(2, true);
    CHECK(e);
    CHECK(vllm_engine_load_lora(e, "A", dir_a) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "A", dir_b) == VLLM_ERR_INVALID, "duplicate name");
    CHECK(!strcmp(vllm_errmsg(), "The lora adapter 'A' has already been loaded."), "%s", vllm_errmsg());
    CHECK(vllm_engine_load_lora(e, "big", dir_big) != VLLM_OK, "rank 32 above max_lora_rank 16 loaded");
    CHECK(strstr(vllm_errmsg(), "rank 32 is greater than max_lora_rank 16"), "%s", vllm_errmsg());
    CHECK(vllm_engine_unload_lora(e, "nope") == VLLM_ERR_NOT_FOUND, "unload of an unknown name");
    CHECK(!strcmp(vllm_errmsg(), "The lora adapter 'nope' cannot be found."), "%s", vllm_errmsg());
    vllm_lora_info info[4];
    CHECK(vllm_engine_list_loras(e, info, 4) == 1 && !strcmp(info[0].name, "A") && info[0].rank == 8,
          "list: %s", info[0].name);
    vllm_engine_free(e);
}

TEST(test_lora_engine_off_ignores_nothing) {
    /* a request naming an adapter on an engine without LoRA is refused, not run on the base */
    vllm_engine *e = make_engine(1, false);
    CHECK(e);
    vllm_sampling_params sp;
    vllm_sampling_params_init(&sp);
    vllm_request_opts o = {0};
    o.lora_name = "A";
    CHECK(vllm_engine_add_request(e, "x", prompt2, 9, &sp, &o) == VLLM_ERR_INVALID, "ran without LoRA");
    vllm_engine_free(e);
}

TEST(test_lora_grouped_vs_portable) {
    model *m = NULL;
    CHECK(model_load(MODEL, &m) == VLLM_OK, "%s", vllm_errmsg());
    lora_table *t = NULL;
    CHECK(lora_table_create(0, &t) == VLLM_OK);
    const char *dirs[3] = {dir_a, dir_b, dir_c};
    for (int i = 0; i < 3; i++) {
        lora_adapter *a;
        char name[8];
        snprintf(name, sizeof name, "x%d", i);
        CHECK(lora_adapter_load(m, name, dirs[i], 16, &a) == VLLM_OK, "%s", vllm_errmsg());
        CHECK(lora_table_add(t, a) == VLLM_OK, "%s", vllm_errmsg());
    }
    /* 7 sequences: base, a, b, a, c, base, b; 3 tokens each (a run of a spans two sequences) */
    enum { NS = 7, TPS = 3, NT = NS * TPS, W = 192 };
    int32_t ids[NS] = {0, 1, 2, 1, 3, 0, 2}, token_seq[NT];
    for (int i = 0; i < NT; i++) token_seq[i] = i / TPS;
    lora_batch lb;
    CHECK(lora_batch_init(&lb, m, NT, 16, 1) == VLLM_OK);
    CHECK(lora_batch_build(&lb, t, ids, NS, token_seq, NT) == VLLM_OK, "%s", vllm_errmsg());
    CHECK(lb.num_rows == 15, "%d rows with an adapter", lb.num_rows);
    static float x[NT * W], y1[NT * W], y2[NT * W];
    rng_state = 5;
    for (int i = 0; i < NT * W; i++) x[i] = frand();
    double worst = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int mod = 0; mod < LORA_NUM_MODULES; mod++) {
            for (int i = 0; i < NT * W; i++) y1[i] = y2[i] = 0.25f;
            lora_apply(&lb, l, (lora_module)mod, x, W, y1, W, NULL);
            lora_apply_portable(&lb, l, (lora_module)mod, x, W, y2, W);
            for (int i = 0; i < NT * W; i++) {
                double d = fabs((double)y1[i] - (double)y2[i]) / (1.0 + fabs((double)y2[i]));
                if (d > worst) worst = d;
                if (token_seq[i / W] == 0 || token_seq[i / W] == 5) CHECK(y1[i] == 0.25f, "a base row changed");
            }
        }
    CHECK(worst < 1e-5, "grouped and portable differ by %g", worst);
    lora_batch_deinit(&lb);
    lora_table_free(t);
    model_free(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_lora_engine.XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    init_prompts();
    int rc = write_adapter("a", 8, 11, dir_a, sizeof dir_a) | write_adapter("b", 4, 22, dir_b, sizeof dir_b) |
             write_adapter("c", 16, 33, dir_c, sizeof dir_c) | write_adapter("big", 32, 44, dir_big, sizeof dir_big);
    if (rc) return 1;
    RUN(test_lora_prefix_cache_per_adapter);
    RUN(test_lora_batch_invariance);
    RUN(test_lora_max_loras);
    RUN(test_lora_unload_while_running);
    RUN(test_lora_errors);
    RUN(test_lora_engine_off_ignores_nothing);
    RUN(test_lora_grouped_vs_portable);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) { /* leaving a temporary directory behind is not a test failure */
    }
    return harness_done();
}
