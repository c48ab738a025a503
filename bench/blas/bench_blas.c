/*
 * bench_blas.c - one library's matmul on one transformer layer's shapes, so
 * bench/blas/run.sh can put ours beside OpenBLAS and oneDNN ("use them where
 * they beat our own on a shape: measure, don't guess").
 *
 *   bench_blas --lib ours|openblas|onednn --wtype f32|bf16|f16 [--threads 2]
 *              [--tokens 1,16,128,512] [--repeat 5]
 *
 * y = x W^T over the seven matrices of a TinyLlama-1.1B layer (q 2048x2048,
 * k and v 256x2048, o 2048x2048, gate and up 5632x2048, down 2048x5632),
 * random weights in (n, k) row-major order as GGUF stores them, FP32
 * activations in, FP32 out. Per token count, prints the best of --repeat
 * passes over the seven: ms per layer, GFLOP/s (2 n k T per matrix) and,
 * for one token, the weight bytes read per second.
 *
 *   ours      matmul_range over our threadpool, split by rows and tokens like
 *             the runner (model/runner.c); BF16 on the AMX-BF16 kernel with
 *             the activations packed first (timed, as in a forward pass)
 *   openblas  cblas_sgemm (F32 only: Debian's OpenBLAS 0.3.21 is built
 *             without the BF16 sbgemm, and OpenBLAS has no F16 GEMM)
 *   onednn    the matmul primitive, weights reordered once into the layout it
 *             asks for (not timed, like our load-time repacks); F32, BF16
 *             (activations rounded to BF16, timed), F16 if the build has it
 *
 * Each library runs in a process of its own (OpenBLAS and OpenMP workers spin
 * after a call and would steal the other's cores). Every result is checked
 * on sampled outputs against a double-precision dot of the same operands
 * (activations as the library saw them), so a wrong call cannot look fast.
 * Exit status 0, 2 for bad arguments, 3 when the library lacks the weight
 * type (prints why), 1 on a failed check.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <dnnl.h>

#include "base/dtype.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"

enum { NMAT = 7, MAX_T = 4096, TOKEN_CHUNK = 64 };
static const int64_t mat_n[NMAT] = {2048, 256, 256, 2048, 5632, 5632, 2048};
static const int64_t mat_k[NMAT] = {2048, 2048, 2048, 2048, 2048, 2048, 5632};
static const char *mat_name[NMAT] = {"q", "k", "v", "o", "gate", "up", "down"};

typedef enum { LIB_OURS, LIB_OPENBLAS, LIB_ONEDNN } lib;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static size_t elem_size(dtype t) { return t == DTYPE_F32 ? 4 : 2; }

static float weight_at(const void *w, dtype t, size_t i) {
    if (t == DTYPE_F32) return ((const float *)w)[i];
    if (t == DTYPE_BF16) return bf16_to_f32(((const uint16_t *)w)[i]);
    return f16_to_f32(((const uint16_t *)w)[i]);
}

/* ---- ours: the runner's split over the threadpool ---------------------- */

typedef struct ours_op {
    matmul_args a;
    int64_t rc, nrc, tokens;
    const float *x;
    void *xp;
    size_t ldxp;
} ours_op;

static void ours_item(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    ours_op *op = arg;
    for (int64_t i = lo; i < hi; i++) {
        int64_t ntc = (op->tokens + TOKEN_CHUNK - 1) / TOKEN_CHUNK; /* token chunks of a row chunk in turn */
        int64_t n0 = i / ntc * op->rc, t0 = i % ntc * TOKEN_CHUNK;
        int64_t n1 = n0 + op->rc < op->a.n ? n0 + op->rc : op->a.n;
        int64_t t1 = t0 + TOKEN_CHUNK < op->tokens ? t0 + TOKEN_CHUNK : op->tokens;
        matmul_range(&op->a, n0, n1, t0, t1);
    }
}

static void ours_pack(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    ours_op *op = arg;
    int64_t t1 = hi * 4 < op->tokens ? hi * 4 : op->tokens;
    matmul_amx_pack_act(op->x, op->a.k, op->a.k, lo * 4, t1, op->xp, (int64_t)op->ldxp);
}

/* Row chunks of ~64 KB of weights (256 KB for < 4 tokens), a multiple of 48
 * rows (32 on AMX), halved until every thread has 4 items: as mm_plan. */
static void ours_run(threadpool *pool, int nth, ours_op *op) {
    const int64_t align = matmul_amx_takes(op->a.wtype) ? 32 : 48;
    int64_t row_bytes = op->a.k * (int64_t)elem_size(op->a.wtype);
    int64_t rc = (op->tokens < 4 ? 256 << 10 : 64 << 10) / row_bytes;
    rc = (rc + align - 1) / align * align;
    if (rc < align) rc = align;
    if (rc > 240) rc = 240 / align * align;
    int64_t ntc = (op->tokens + TOKEN_CHUNK - 1) / TOKEN_CHUNK;
    while ((op->a.n + rc - 1) / rc * ntc < 4 * nth && rc > align) rc = (rc / 2 + align - 1) / align * align;
    op->rc = rc, op->nrc = (op->a.n + rc - 1) / rc;
    if (op->xp) {
        op->a.xq = op->xp, op->a.ldxq = (int64_t)op->ldxp;
        threadpool_run(pool, ours_pack, op, (op->tokens + 3) / 4, op->tokens < 64 ? (op->tokens + 3) / 4 : 2);
    }
    threadpool_run(pool, ours_item, op, op->nrc * ntc, 1);
}

/* ---- oneDNN ------------------------------------------------------------- */

typedef struct dnn {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim[NMAT];
    dnnl_memory_t src[NMAT], wei[NMAT], dst[NMAT];
} dnn;

#define DNN_OK(call)                                                                             \
    do {                                                                                         \
        dnnl_status_t s_ = (call);                                                               \
        if (s_ != dnnl_success) {                                                                \
            fprintf(stderr, "bench_blas: oneDNN: %s failed with status %d\n", #call, (int)s_);   \
            return false;                                                                        \
        }                                                                                        \
    } while (0)

/* Primitive for matrix i at T tokens: src (T, k) sdt, weights (k, n) wdt in
 * the layout oneDNN picks (our (n, k) rows reordered into it), dst f32. */
static bool dnn_setup(dnn *d, int i, int64_t T, dnnl_data_type_t sdt, dnnl_data_type_t wdt, const void *w,
                      void *x, float *y) {
    int64_t n = mat_n[i], k = mat_k[i];
    dnnl_memory_desc_t smd, wmd_any, wmd_plain, dmd;
    dnnl_dims_t sd = {T, k}, wd = {k, n}, dd = {T, n};
    DNN_OK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, sdt, dnnl_ab));
    DNN_OK(dnnl_memory_desc_init_by_tag(&wmd_any, 2, wd, wdt, dnnl_format_tag_any));
    DNN_OK(dnnl_memory_desc_init_by_tag(&wmd_plain, 2, wd, wdt, dnnl_ba));
    DNN_OK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    DNN_OK(dnnl_matmul_desc_init(&md, &smd, &wmd_any, NULL, &dmd));
    dnnl_primitive_desc_t pd;
    DNN_OK(dnnl_primitive_desc_create(&pd, &md, NULL, d->eng, NULL));
    DNN_OK(dnnl_primitive_create(&d->prim[i], pd));
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t plain;
    DNN_OK(dnnl_memory_create(&plain, &wmd_plain, d->eng, (void *)w));
    DNN_OK(dnnl_memory_create(&d->wei[i], want, d->eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;
    DNN_OK(dnnl_reorder_primitive_desc_create(&rpd, &wmd_plain, d->eng, want, d->eng, NULL));
    DNN_OK(dnnl_primitive_create(&reorder, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, d->wei[i]}};
    DNN_OK(dnnl_primitive_execute(reorder, d->st, 2, rargs));
    DNN_OK(dnnl_stream_wait(d->st));
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(plain);
    dnnl_primitive_desc_destroy(pd);
    DNN_OK(dnnl_memory_create(&d->src[i], &smd, d->eng, x));
    DNN_OK(dnnl_memory_create(&d->dst[i], &dmd, d->eng, y));
    return true;
}

static bool dnn_run(dnn *d, int i) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, d->src[i]}, {DNNL_ARG_WEIGHTS, d->wei[i]}, {DNNL_ARG_DST, d->dst[i]}};
    DNN_OK(dnnl_primitive_execute(d->prim[i], d->st, 3, args));
    DNN_OK(dnnl_stream_wait(d->st));
    return true;
}

static void dnn_free(dnn *d) {
    for (int i = 0; i < NMAT; i++) {
        if (d->prim[i]) dnnl_primitive_destroy(d->prim[i]);
        if (d->src[i]) dnnl_memory_destroy(d->src[i]);
        if (d->wei[i]) dnnl_memory_destroy(d->wei[i]);
        if (d->dst[i]) dnnl_memory_destroy(d->dst[i]);
        d->prim[i] = NULL, d->src[i] = d->wei[i] = d->dst[i] = NULL;
    }
}

/* ---- main ---------------------------------------------------------------- */

static int usage(void) {
    fprintf(stderr, "usage: bench_blas --lib ours|openblas|onednn --wtype f32|bf16|f16 [--threads 2] "
                    "[--tokens 1,16,128,512] [--repeat 5]\n");
    return 2;
}

/* Max over sampled outputs of |y - ref| / sum |x_i w_i| (ref and the sum in
 * double), x as the library saw it: xs in dtype xt (BF16 or F16), or x when
 * xt is F32. */
static double check(const float *y, const float *x, const uint16_t *xs, dtype xt, const void *w, dtype wt,
                    int64_t n, int64_t k, int64_t T) {
    double worst = 0;
    for (int s = 0; s < 64; s++) {
        int64_t t = (int64_t)(s * 7919) % T, r = (int64_t)(s * 104729) % n;
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < k; i++) {
            double xv = xt == DTYPE_F32 ? x[t * k + i] : weight_at(xs, xt, (size_t)(t * k + i));
            double p = xv * weight_at(w, wt, (size_t)(r * k + i));
            ref += p, mag += fabs(p);
        }
        double e = fabs(y[t * n + r] - ref) / (mag > 0 ? mag : 1);
        if (e > worst) worst = e;
    }
    return worst;
}

int main(int argc, char **argv) {
    lib which = LIB_OURS;
    dtype wt = DTYPE_COUNT;
    int threads = 2, repeat = 5;
    int64_t tokens[16];
    int ntok = 0;
    const char *tok_list = "1,16,128,512";
    bool have_lib = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(argv[i], "--lib")) {
            have_lib = true;
            if (!strcmp(v, "ours")) which = LIB_OURS;
            else if (!strcmp(v, "openblas")) which = LIB_OPENBLAS;
            else if (!strcmp(v, "onednn")) which = LIB_ONEDNN;
            else return usage();
        } else if (!strcmp(argv[i], "--wtype")) {
            wt = !strcmp(v, "f32") ? DTYPE_F32 : !strcmp(v, "bf16") ? DTYPE_BF16 : !strcmp(v, "f16") ? DTYPE_F16
                                                                                                    : DTYPE_COUNT;
            if (wt == DTYPE_COUNT) return usage();
        } else if (!strcmp(argv[i], "--threads")) {
            threads = atoi(v);
        } else if (!strcmp(argv[i], "--repeat")) {
            repeat = atoi(v);
        } else if (!strcmp(argv[i], "--tokens")) {
            tok_list = v;
        } else {
            return usage();
        }
        i++;
    }
    if (!have_lib || wt == DTYPE_COUNT || threads < 1 || threads > 256 || repeat < 1) return usage();
    for (const char *p = tok_list; *p;) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > MAX_T || ntok == 16 || (*end && *end != ',')) return usage();
        tokens[ntok++] = t;
        p = *end ? end + 1 : end;
    }
    if (which == LIB_OPENBLAS && wt != DTYPE_F32) {
        printf("openblas %s: no GEMM for these weights (Debian's OpenBLAS is built without sbgemm, and "
               "OpenBLAS has no F16 GEMM)\n", dtype_name(wt));
        return 3;
    }

    /* operands: weights per matrix; x (MAX tokens, 5632) F32 and its BF16 copy; y */
    int64_t tmax = 0;
    for (int i = 0; i < ntok; i++) tmax = tokens[i] > tmax ? tokens[i] : tmax;
    void *w[NMAT];
    size_t wbytes = 0;
    for (int i = 0; i < NMAT; i++) {
        size_t cnt = (size_t)(mat_n[i] * mat_k[i]);
        w[i] = malloc(cnt * elem_size(wt));
        if (!w[i]) return fprintf(stderr, "bench_blas: out of memory\n"), 1;
        for (size_t j = 0; j < cnt; j++) {
            float f = 0.05f * frand();
            if (wt == DTYPE_F32) ((float *)w[i])[j] = f;
            else if (wt == DTYPE_BF16) ((uint16_t *)w[i])[j] = f32_to_bf16(f);
            else ((uint16_t *)w[i])[j] = f32_to_f16(f);
        }
        wbytes += cnt * elem_size(wt);
    }
    size_t xn = (size_t)(tmax * 5632);
    float *x = malloc(xn * sizeof *x), *y = malloc((size_t)(tmax * 5632) * sizeof *y);
    uint16_t *xs = malloc(xn * sizeof *xs);
    if (!x || !y || !xs) return fprintf(stderr, "bench_blas: out of memory\n"), 1;
    for (size_t j = 0; j < xn; j++) x[j] = frand();
    /* activations as the library sees them: oneDNN takes BF16/F16 ones with BF16/F16 weights */
    const bool round_x = which != LIB_OURS && wt != DTYPE_F32;
    const dtype xt = round_x ? wt : DTYPE_F32;
    const char *lib_name = which == LIB_OURS ? "ours" : which == LIB_OPENBLAS ? "openblas" : "onednn";

    threadpool *pool = NULL;
    void *xp = NULL;
    size_t ldxp = 0;
    dnn d = {0};
    if (which == LIB_OURS) {
        if (threadpool_create(threads, &pool) != VLLM_OK) return fprintf(stderr, "bench_blas: no threadpool\n"), 1;
        if (matmul_amx_takes(wt)) {
            ldxp = matmul_amx_act_bytes(5632);
            xp = aligned_alloc(64, ((size_t)tmax + 3) / 4 * 4 * ldxp + 64);
            if (!xp) return fprintf(stderr, "bench_blas: out of memory\n"), 1;
        }
    } else if (which == LIB_OPENBLAS) {
        openblas_set_num_threads(threads);
    } else {
        if (dnnl_engine_create(&d.eng, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags) != dnnl_success)
            return fprintf(stderr, "bench_blas: oneDNN has no CPU engine\n"), 1;
    }
    printf("%s, %s weights, %d threads (%s), best of %d, one TinyLlama-1.1B layer (%.1f MB of weights)\n", lib_name,
           dtype_name(wt), threads,
           which == LIB_OURS ? kernels_isa_name(kernels_isa_get())
                             : which == LIB_OPENBLAS ? openblas_get_config() : "OMP_NUM_THREADS sets the threads",
           repeat, (double)wbytes / 1e6);

    /* token 0's outputs at the first token count, per matrix: later counts
     * must give the same bits (batch invariance, kernels.h) */
    float *y0[NMAT];
    for (int i = 0; i < NMAT; i++)
        if (!(y0[i] = malloc((size_t)mat_n[i] * sizeof(float)))) return fprintf(stderr, "bench_blas: out of memory\n"), 1;
    int status = 0;
    for (int ti = 0; ti < ntok; ti++) {
        int64_t T = tokens[ti];
        if (which == LIB_ONEDNN) {
            dnnl_data_type_t wdt = wt == DTYPE_F32 ? dnnl_f32 : wt == DTYPE_BF16 ? dnnl_bf16 : dnnl_f16;
            for (int i = 0; i < NMAT; i++)
                if (!dnn_setup(&d, i, T, wt == DTYPE_F32 ? dnnl_f32 : wdt, wdt, w[i],
                               wt == DTYPE_F32 ? (void *)x : (void *)xs, y)) {
                    printf("onednn %s: no matmul primitive for these types in this build\n", dtype_name(wt));
                    fflush(stdout);
                    return 3;
                }
        }
        double best = 1e30;
        double err = 0;
        int64_t differ = 0, compared = 0;
        for (int r = 0; r < repeat + 1; r++) { /* pass 0 warms up */
            double t0 = now_s();
            for (int i = 0; i < NMAT; i++) {
                int64_t n = mat_n[i], k = mat_k[i];
                if (round_x) /* the conversion is part of the library's cost */
                    for (int64_t j = 0; j < T * k; j++) xs[j] = xt == DTYPE_F16 ? f32_to_f16(x[j]) : f32_to_bf16(x[j]);
                if (which == LIB_OURS) {
                    ours_op op = {.a = {.y = y, .ldy = n, .x = x, .ldx = k, .w = w[i], .wtype = wt, .n = n, .k = k},
                                  .tokens = T, .x = x, .xp = xp, .ldxp = ldxp};
                    ours_run(pool, threads, &op);
                } else if (which == LIB_OPENBLAS) {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)T, (blasint)n, (blasint)k, 1.0f, x,
                                (blasint)k, w[i], (blasint)k, 0.0f, y, (blasint)n);
                } else if (!dnn_run(&d, i)) {
                    return 1;
                }
                if (r == 0) {
                    if (ti == 0) memcpy(y0[i], y, (size_t)n * sizeof(float));
                    for (int64_t j = 0; j < n && ti > 0; j++, compared++) differ += memcmp(&y0[i][j], &y[j], 4) != 0;
                    double e = check(y, x, xs, xt, w[i], wt, n, k, T);
                    if (e > err) err = e;
                    if (e > 1e-4) {
                        printf("%s %s T=%lld %s: WRONG, relative error %.3g\n", lib_name, dtype_name(wt),
                               (long long)T, mat_name[i], e);
                        status = 1;
                    }
                }
            }
            double dt = now_s() - t0;
            if (r > 0 && dt < best) best = dt;
        }
        double flops = 0;
        for (int i = 0; i < NMAT; i++) flops += 2.0 * (double)(mat_n[i] * mat_k[i] * T);
        char inv[96] = "";
        if (ti > 0)
            snprintf(inv, sizeof inv, "; token 0 vs T=%lld: %s", (long long)tokens[0],
                     differ ? "DIFFERENT BITS" : "same bits");
        if (differ) snprintf(inv + strlen(inv), sizeof inv - strlen(inv), " (%lld of %lld outputs)", (long long)differ,
                             (long long)compared);
        printf("%s %s T=%lld: %.3f ms/layer, %.1f GFLOP/s, %.1f GB/s of weights (max rel err %.1e%s)\n", lib_name,
               dtype_name(wt), (long long)T, 1e3 * best, flops / best / 1e9, (double)wbytes / best / 1e9, err, inv);
        fflush(stdout);
        if (which == LIB_ONEDNN) dnn_free(&d);
    }
    threadpool_free(pool);
    free(xp);
    for (int i = 0; i < NMAT; i++) free(y0[i]);
    return status;
}
