/*
 * tp_allreduce.c - what tensor parallelism's all-reduces cost per token:
 * the MPI_Iallreduce (sum) of one token's hidden state, waited for the way
 * the tp executor waits (dist/mpi_group.h: MPI_Test, yield, then sleep),
 * for the hidden sizes of real models, one token (decode) and a batch of
 * 32 tokens. Run under mpirun with 2 (or more) ranks; bench/tp_allreduce.sh
 * runs it on shared memory and across two network namespaces over a veth
 * link.
 *
 *   mpirun -np 2 build/bench/tp_allreduce [--iters N]
 *
 * Rank 0 prints one line per size: hidden, tokens, bytes per all-reduce,
 * the median and p90 microseconds of one all-reduce, and per token of a
 * Llama-style model (2 all-reduces per layer) the bytes and microseconds
 * of 32 layers' worth.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "dist/mpi_group.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int iters = 200;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    if (iters < 10) iters = 10;
    mpi_group *g;
    int status = 0;
    int size = 0;
    /* the group's size is whatever mpirun started: tp = that, pp = 1 */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    size = ws ? atoi(ws) : 0;
    if (size < 2) {
        fprintf(stderr, "tp_allreduce: run under mpirun with at least 2 ranks\n");
        return 2;
    }
    if (mpi_group_start(size, 1, argc, argv, &g, &status) != VLLM_OK || !g) {
        fprintf(stderr, "tp_allreduce: %s\n", vllm_errmsg());
        return 1;
    }
    const int hiddens[] = {2048, 4096, 8192};
    const int tokens[] = {1, 32};
    double *t = calloc((size_t)iters, sizeof *t);
    float *x = calloc((size_t)8192 * 32, sizeof *x);
    if (mpi_group_rank(g) == 0)
        printf("ranks %d\n%8s %6s %10s %8s %10s %10s %14s %14s\n", size, "hidden", "tokens", "bytes", "min_us", "median_us",
               "p90_us", "32L_bytes/tok", "32L_us/step");
    for (size_t h = 0; h < sizeof hiddens / sizeof hiddens[0]; h++)
        for (size_t k = 0; k < sizeof tokens / sizeof tokens[0]; k++) {
            int n = hiddens[h] * tokens[k];
            for (int i = -10; i < iters; i++) { /* 10 warm-up rounds */
                for (int j = 0; j < n; j++) x[j] = (float)(j % 7);
                MPI_Barrier(mpi_group_comm(g));
                double t0 = clock_now();
                MPI_Request q;
                MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, mpi_group_comm(g), &q);
                if (mpi_group_wait(g, &q, false) != VLLM_OK) {
                    fprintf(stderr, "tp_allreduce: %s\n", vllm_errmsg());
                    return 1;
                }
                if (i >= 0) t[i] = (clock_now() - t0) * 1e6;
            }
            qsort(t, (size_t)iters, sizeof *t, cmp_double);
            if (mpi_group_rank(g) == 0)
                printf("%8d %6d %10zu %8.1f %10.1f %10.1f %14zu %14.0f\n", hiddens[h], tokens[k], (size_t)n * sizeof(float), t[0],
                       t[iters / 2], t[iters * 9 / 10], (size_t)hiddens[h] * sizeof(float) * 2 * 32,
                       t[iters / 2] * 2 * 32);
        }
    free(t);
    free(x);
    mpi_group_finish(g);
    return 0;
}
