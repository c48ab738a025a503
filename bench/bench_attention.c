/*
 * bench_attention.c - the paged attention kernel alone, one thread: the
 * last N tokens of a C-token context (a prefill chunk's end) attending to
 * it, token by token (attention_paged, the runner's way before tiles) and
 * in tiles of T tokens (attention_paged_tile, the runner's way now), and
 * whether the two give the same bits.
 *
 *   build/bench/bench_attention [--context 2048,8192,32768] [--tokens 32]
 *       [--tiles 1,4,8,16] [--kv-cache-dtype float16] [--repeat 3]
 *
 * Shape: TinyLlama-1.1B's attention (4 KV heads x 64, 8 query heads per KV
 * head, block size 16), random K/V and queries, blocks in order in one
 * pool (as one sequence's prefill leaves them). Per row: the best of
 * --repeat passes, in milliseconds of wall time and GFLOP/s (4 FLOP per
 * query head, context position and head element: the scores' and the V
 * sum's multiply-adds), and the ratio to the token-by-token row of the
 * same context. Exits 1 if a tile's output differs from the token-by-token
 * output in any bit.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/kv_dtype.h"

enum { KV_HEADS = 4, HEAD_DIM = 64, GROUP = 8, BLOCK = 16, MAX_LIST = 16 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
}

/* Comma-separated positive integers into v; the count, or -1. */
static int parse_list(const char *s, int32_t *v) {
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x <= 0 || x > (1 << 20) || (*end && *end != ',')) return -1;
        v[n++] = (int32_t)x;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_attention [--context 2048,8192,32768] [--tokens 32] [--tiles 1,4,8,16]\n"
                    "                       [--kv-cache-dtype float16] [--repeat 3]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int32_t ctxs[MAX_LIST] = {2048, 8192, 32768}, tiles[MAX_LIST] = {1, 4, 8, 16};
    int nctx = 3, ntiles = 4, ntok = 32, repeat = 3;
    kv_dtype type = KV_DTYPE_F16;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--context")) nctx = parse_list(v, ctxs);
        else if (!strcmp(argv[i - 1], "--tiles")) ntiles = parse_list(v, tiles);
        else if (!strcmp(argv[i - 1], "--tokens")) ntok = atoi(v);
        else if (!strcmp(argv[i - 1], "--repeat")) repeat = atoi(v);
        else if (!strcmp(argv[i - 1], "--kv-cache-dtype")) {
            if (!kv_dtype_from_name(v, &type)) {
                fprintf(stderr, "bench_attention: --kv-cache-dtype %s: not float32, bfloat16, float16, fp8, "
                                "fp8_e4m3 or fp8_e5m2\n", v);
                return 2;
            }
        } else usage();
    }
    if (nctx < 1 || ntiles < 1 || ntok < 1 || ntok > 4096 || repeat < 1) usage();
    for (int i = 0; i < ntiles; i++)
        if (tiles[i] > ATTENTION_MAX_TILE) {
            fprintf(stderr, "bench_attention: --tiles: at most %d tokens per tile\n", ATTENTION_MAX_TILE);
            return 2;
        }
    const int64_t stride = (int64_t)KV_HEADS * GROUP * HEAD_DIM;
    float *q = malloc(sizeof(float) * (size_t)(ntok * stride)), *ref = malloc(sizeof(float) * (size_t)(ntok * stride)),
          *out = malloc(sizeof(float) * (size_t)(ntok * stride));
    float *scratch = malloc(sizeof(float) * (size_t)attention_tile_scratch_floats(ATTENTION_MAX_TILE, GROUP, BLOCK, HEAD_DIM));
    float *kr = malloc(sizeof(float) * KV_HEADS * HEAD_DIM), *vr = malloc(sizeof(float) * KV_HEADS * HEAD_DIM);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)ntok);
    if (!q || !ref || !out || !scratch || !kr || !vr || !pos) return 1;
    for (int64_t i = 0; i < ntok * stride; i++) q[i] = 2 * frand();
    printf("# paged attention, 1 thread, %d query tokens at the end of the context, %s KV, %d KV heads x %d, "
           "group %d, block %d, kernels %s, best of %d\n", ntok, kv_dtype_name(type), KV_HEADS, HEAD_DIM, GROUP,
           BLOCK, kernels_isa_name(kernels_isa_get()), repeat);
    printf("%8s %6s %10s %9s %7s %s\n", "context", "tile", "ms", "GFLOP/s", "ratio", "bits");
    bool all_same = true;
    for (int ic = 0; ic < nctx; ic++) {
        const int32_t ctx = ctxs[ic] < ntok ? ntok : ctxs[ic], nblocks = (ctx + BLOCK - 1) / BLOCK;
        const size_t pool = (size_t)nblocks * KV_HEADS * BLOCK * HEAD_DIM * kv_dtype_size(type);
        void *kc = calloc(1, pool), *vc = calloc(1, pool);
        int32_t *table = malloc(sizeof(int32_t) * (size_t)nblocks);
        if (!kc || !vc || !table) {
            fprintf(stderr, "bench_attention: out of memory for a %d-token context\n", ctx);
            return 1;
        }
        for (int32_t b = 0; b < nblocks; b++) table[b] = b;
        attention_args a = {.k_cache = kc, .v_cache = vc, .kv_heads = KV_HEADS, .head_dim = HEAD_DIM,
                            .block_size = BLOCK, .scale = 0.125f, .cache_dtype = type};
        for (int32_t p = 0; p < ctx; p++) {
            for (int i = 0; i < KV_HEADS * HEAD_DIM; i++) kr[i] = 2 * frand(), vr[i] = frand();
            attention_store_kv(&a, kc, vc, p, kr, vr);
        }
        for (int32_t t = 0; t < ntok; t++) pos[t] = ctx - ntok + t;
        const double flop = 4.0 * ntok * (double)ctx * KV_HEADS * GROUP * HEAD_DIM;
        double base = 0;
        for (int it = -1; it < ntiles; it++) { /* -1: token by token */
            const int32_t tile = it < 0 ? 0 : tiles[it];
            float *dst = it < 0 ? ref : out;
            double best = 1e30;
            for (int r = 0; r < repeat; r++) {
                double t0 = now();
                for (int32_t t = 0; t < ntok; t += it < 0 ? 1 : tile)
                    for (int32_t h = 0; h < KV_HEADS; h++) {
                        int64_t off = t * stride + (int64_t)h * GROUP * HEAD_DIM;
                        if (it < 0) {
                            attention_paged(&a, dst + off, q + off, GROUP, h, table, pos[t] + 1, scratch);
                        } else {
                            int32_t n = ntok - t < tile ? ntok - t : tile;
                            attention_paged_tile(&a, dst + off, q + off, stride, GROUP, h, table, pos + t, n, scratch);
                        }
                    }
                double dt = now() - t0;
                best = dt < best ? dt : best;
            }
            if (it < 0) base = best;
            bool same = it < 0 || !memcmp(ref, out, sizeof(float) * (size_t)(ntok * stride));
            all_same &= same;
            char name[16];
            snprintf(name, sizeof name, it < 0 ? "token" : "%d", tile);
            printf("%8d %6s %10.3f %9.1f %6.2fx %s\n", ctx, name, best * 1e3, flop / best * 1e-9, base / best,
                   it < 0 ? "-" : same ? "same" : "DIFFER");
        }
        free(kc), free(vc), free(table);
    }
    free(q), free(ref), free(out), free(scratch), free(kr), free(vr), free(pos);
    return all_same ? 0 : 1;
}
