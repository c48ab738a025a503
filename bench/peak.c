/*
 * peak.c - this machine's compute peaks for the instructions the matmul
 * kernels use: the denominator of the compute roofline (docs/bench.md,
 * "Batched float and Q4_0 rows: the roofline").
 *
 *   build/bench/peak [--threads 2] [--ms 300] [--repeat 3]
 *
 * Each row runs one instruction mix on T threads for --ms milliseconds,
 * with 12 independent accumulator chains per thread (more than the
 * latency x throughput of every instruction here), and prints the best of
 * --repeat passes in giga-operations per CPU second of each thread (its
 * CLOCK_THREAD_CPUTIME_ID, so other work on a shared machine does not
 * lower it), summed over the threads:
 *
 *   fma       vfmadd231ps zmm: 32 FLOP each
 *   dpbf16    vdpbf16ps zmm (AVX512-BF16): 64 FLOP each (32 products + sums)
 *   vpdpbusd  vpdpbusd zmm (AVX512-VNNI): 64 u8 x s8 products + 64 sums = 128 int ops each
 *   f16tile   the F16 kernel's inner step for a 3-row x 8-token tile: 3
 *             vcvtph2ps zmm per 24 FMAs (FLOPs counted as FMAs only), so
 *             the cost of converting weights in registers shows as the
 *             gap to `fma`
 *   bf16tile  the same with BF16 widened by vpmovzxwd + vpslld (the FP32
 *             path for BF16 weights)
 *   fma256    vfmadd231ps ymm: 16 FLOP each (AVX2 + FMA: the kernels' path
 *             on CPUs without AVX-512, e.g. Zen 3)
 *   f16tile256  tile_avx2's inner step for F16, 3 rows x 4 tokens: 3
 *             vcvtph2ps ymm per 12 FMAs
 *   bf16tile256 the same with BF16 widened by vpmovzxwd + vpslld ymm
 *
 * The AVX-512 mixes print n/a on a CPU without AVX-512 F, VNNI and BF16.
 *
 * Operands live in registers only (no loads): these are the execution
 * units' limits, not the caches'. Nothing is checked; the sums are printed
 * so the compiler keeps the work.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PEAK_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,f16c,fma")))
#define PEAK_FN256 __attribute__((target("avx2,f16c,fma")))

enum { CHAINS = 12, INNER = 100000 };

typedef enum {
    MIX_FMA, MIX_DPBF16, MIX_VNNI, MIX_F16TILE, MIX_BF16TILE, /* AVX-512 */
    MIX_FMA256, MIX_F16TILE256, MIX_BF16TILE256,               /* AVX2 + FMA */
    MIX_COUNT
} mix;
static const char *const mix_names[MIX_COUNT] = {"fma", "dpbf16", "vpdpbusd", "f16tile", "bf16tile",
                                                 "fma256", "f16tile256", "bf16tile256"};
static const double ops_per_inner[MIX_COUNT] = {CHAINS * 32.0, CHAINS * 64.0, CHAINS * 128.0, 24 * 32.0, 24 * 32.0,
                                                CHAINS * 16.0, 12 * 16.0, 12 * 16.0};

/* This thread's CPU time: on a machine shared with other work the rate
 * per CPU second is the units' rate, whatever the scheduler did. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    mix m;
    double seconds, ops, sink;
} job;

/* A register barrier: the compiler may not fold or hoist v. */
#define OPAQUE(v) __asm__ volatile("" : "+v"(v))

/* n steps of the tile: f16 picks the widening (a constant at each call). */
__attribute__((always_inline)) PEAK_FN static inline void tile_loop(const bool f16, long n, const float *xp,
                                                                     const uint16_t *wp, __m512 *accp) {
    __m512 acc[24];
    for (int c = 0; c < 24; c++) acc[c] = accp[c];
    for (long i = 0; i < n; i++) {
        __m512 w[3];
        __asm__ volatile("" : "+r"(xp), "+r"(wp)); /* an opaque address: reload and convert every step */
#pragma GCC unroll 3
        for (int r = 0; r < 3; r++) {
            __m256i h = _mm256_load_si256((const __m256i *)(wp + 16 * r));
            w[r] = f16 ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m512 xv = _mm512_load_ps(xp + 16 * j);
#pragma GCC unroll 3
            for (int r = 0; r < 3; r++) acc[r * 8 + j] = _mm512_fmadd_ps(w[r], xv, acc[r * 8 + j]);
        }
    }
    for (int c = 0; c < 24; c++) accp[c] = acc[c];
}

/* One mix, n inner steps; returns a sum of the accumulators. Each mix is
 * its own loop (one switch outside it), so the accumulators stay in
 * registers. */
PEAK_FN static double mix_loop(mix m, long n) {
    float out[16];
    double sink = 0;
    if (m == MIX_FMA || m == MIX_DPBF16 || m == MIX_VNNI) {
        __m512 f[CHAINS];
        __m512i q[CHAINS];
        for (int c = 0; c < CHAINS; c++) f[c] = _mm512_set1_ps(1e-3f * (float)c), q[c] = _mm512_set1_epi32(c);
        __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-7f);
        __m512i qa = _mm512_set1_epi8(3), qb = _mm512_set1_epi8(5);
        __m512bh ha = (__m512bh)_mm512_set1_epi16(0x3f80), hb = (__m512bh)_mm512_set1_epi16(0x3400);
        OPAQUE(a);
        OPAQUE(b);
        OPAQUE(qa);
        OPAQUE(qb);
        OPAQUE(ha);
        OPAQUE(hb);
        if (m == MIX_FMA)
            for (long i = 0; i < n; i++)
#pragma GCC unroll 12
                for (int c = 0; c < CHAINS; c++) f[c] = _mm512_fmadd_ps(a, f[c], b);
        else if (m == MIX_DPBF16)
            for (long i = 0; i < n; i++)
#pragma GCC unroll 12
                for (int c = 0; c < CHAINS; c++) f[c] = _mm512_dpbf16_ps(f[c], ha, hb);
        else
            for (long i = 0; i < n; i++)
#pragma GCC unroll 12
                for (int c = 0; c < CHAINS; c++) q[c] = _mm512_dpbusd_epi32(q[c], qa, qb);
        for (int c = 0; c < CHAINS; c++) {
            _mm512_storeu_ps(out, _mm512_add_ps(f[c], _mm512_cvtepi32_ps(q[c])));
            sink += out[0];
        }
        return sink;
    }
    /* the 3-row x 8-token tile of tile_avx512: 3 weight vectors widened per
     * step, 8 token vectors loaded (from L1), 24 FMAs */
    __m512 acc[24];
    for (int c = 0; c < 24; c++) acc[c] = _mm512_setzero_ps();
    _Alignas(64) float xs[8][16];
    _Alignas(64) uint16_t ws[3][16];
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 16; l++) xs[j][l] = 1e-6f * (float)j;
    for (int r = 0; r < 3; r++)
        for (int l = 0; l < 16; l++) ws[r][l] = (uint16_t)(0x3400 + r);
    const float *xp = &xs[0][0];
    const uint16_t *wp = &ws[0][0];
    __asm__ volatile("" : "+r"(xp), "+r"(wp) : : "memory");
    if (m == MIX_F16TILE) tile_loop(true, n, xp, wp, acc);
    else tile_loop(false, n, xp, wp, acc);
    for (int c = 0; c < 24; c++) {
        _mm512_storeu_ps(out, acc[c]);
        sink += out[0];
    }
    return sink;
}

/* n steps of tile_avx2's 3-row x 4-token F16 / BF16 tile (matmul.c). */
__attribute__((always_inline)) PEAK_FN256 static inline void tile_loop256(const bool f16, long n, const float *xp,
                                                                         const uint16_t *wp, __m256 *accp) {
    __m256 acc[12];
    for (int c = 0; c < 12; c++) acc[c] = accp[c];
    for (long i = 0; i < n; i++) {
        __m256 w[3];
        __asm__ volatile("" : "+r"(xp), "+r"(wp));
#pragma GCC unroll 3
        for (int r = 0; r < 3; r++) {
            __m128i h = _mm_load_si128((const __m128i *)(wp + 8 * r));
            w[r] = f16 ? _mm256_cvtph_ps(h)
                       : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256 xv = _mm256_load_ps(xp + 8 * j);
#pragma GCC unroll 3
            for (int r = 0; r < 3; r++) acc[r * 4 + j] = _mm256_fmadd_ps(w[r], xv, acc[r * 4 + j]);
        }
    }
    for (int c = 0; c < 12; c++) accp[c] = acc[c];
}

/* The AVX2 mixes, as mix_loop. */
PEAK_FN256 static double mix_loop256(mix m, long n) {
    float out[8];
    double sink = 0;
    if (m == MIX_FMA256) {
        __m256 f[CHAINS];
        for (int c = 0; c < CHAINS; c++) f[c] = _mm256_set1_ps(1e-3f * (float)c);
        __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
        OPAQUE(a);
        OPAQUE(b);
        for (long i = 0; i < n; i++)
#pragma GCC unroll 12
            for (int c = 0; c < CHAINS; c++) f[c] = _mm256_fmadd_ps(a, f[c], b);
        for (int c = 0; c < CHAINS; c++) {
            _mm256_storeu_ps(out, f[c]);
            sink += out[0];
        }
        return sink;
    }
    __m256 acc[12];
    for (int c = 0; c < 12; c++) acc[c] = _mm256_setzero_ps();
    _Alignas(32) float xs[4][8];
    _Alignas(32) uint16_t ws[3][8];
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 8; l++) xs[j][l] = 1e-6f * (float)j;
    for (int r = 0; r < 3; r++)
        for (int l = 0; l < 8; l++) ws[r][l] = (uint16_t)(0x3400 + r);
    const float *xp = &xs[0][0];
    const uint16_t *wp = &ws[0][0];
    __asm__ volatile("" : "+r"(xp), "+r"(wp) : : "memory");
    if (m == MIX_F16TILE256) tile_loop256(true, n, xp, wp, acc);
    else tile_loop256(false, n, xp, wp, acc);
    for (int c = 0; c < 12; c++) {
        _mm256_storeu_ps(out, acc[c]);
        sink += out[0];
    }
    return sink;
}

static double run_mix(mix m, double seconds, double *ops) {
    double t0 = now_s(), t = t0, sink = 0;
    long iters = 0;
    while (t - t0 < seconds) {
        sink += m >= MIX_FMA256 ? mix_loop256(m, INNER) : mix_loop(m, INNER);
        iters += INNER;
        t = now_s();
    }
    *ops = (double)iters * ops_per_inner[m] / (t - t0);
    return sink;
}

static void *worker_main(void *arg) {
    job *j = arg;
    j->sink = run_mix(j->m, j->seconds, &j->ops);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, ms = 300, repeat = 3;
    for (int i = 1; i < argc; i++) {
        int *dst = !strcmp(argv[i], "--threads") ? &threads : !strcmp(argv[i], "--ms") ? &ms
                 : !strcmp(argv[i], "--repeat") ? &repeat : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "usage: peak [--threads 2] [--ms 300] [--repeat 3]\n");
            return 2;
        }
        *dst = atoi(argv[++i]);
    }
    if (threads < 1 || threads > 256 || ms < 1 || repeat < 1) {
        fprintf(stderr, "peak: --threads must be 1..256, --ms and --repeat at least 1\n");
        return 2;
    }
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni") &&
                  __builtin_cpu_supports("avx512bf16");
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
        fprintf(stderr, "peak: needs AVX2, FMA and F16C\n");
        return 1;
    }
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    if (!tids || !jobs) {
        fprintf(stderr, "peak: out of memory\n");
        return 1;
    }
    double sink = 0;
    printf("%-11s %12s  (%d threads, best of %d x %d ms)\n", "mix", "G ops/s", threads, repeat, ms);
    for (int m = 0; m < MIX_COUNT; m++) {
        if (m < MIX_FMA256 && !avx512) {
            printf("%-11s %12s\n", mix_names[m], "n/a");
            continue;
        }
        double best = 0;
        for (int r = 0; r < repeat; r++) {
            double total = 0;
            for (int t = 0; t < threads; t++) {
                jobs[t] = (job){.m = (mix)m, .seconds = ms * 1e-3};
                if (pthread_create(&tids[t], NULL, worker_main, &jobs[t]) != 0) {
                    fprintf(stderr, "peak: pthread_create failed\n");
                    return 1;
                }
            }
            for (int t = 0; t < threads; t++) {
                pthread_join(tids[t], NULL);
                total += jobs[t].ops, sink += jobs[t].sink;
            }
            if (total > best) best = total;
        }
        printf("%-11s %12.1f\n", mix_names[m], best * 1e-9);
    }
    fprintf(stderr, "(sink %g)\n", sink);
    free(tids);
    free(jobs);
    return 0;
}
