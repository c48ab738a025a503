/*
 * mpi_group.c - the MPI process group of a tp/pp engine (see mpi_group.h).
 */
#include "dist/mpi_group.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

enum { HOST_CAP = MPI_MAX_PROCESSOR_NAME };

struct mpi_group {
    MPI_Comm comm;
    int32_t rank, size, tp, pp;
    int32_t *pids;                   /* (size) each rank's pid */
    bool *local;                     /* (size) rank runs on this host (its pid can be checked) */
    bool broken;
    bool finalize;                   /* this call initialized MPI */
};

/* execvp mpirun with this program and argv; returns only on failure. */
static vllm_status reexec_under_mpirun(int32_t n, int argc, char **argv) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return vllm_error(VLLM_ERR_IO, "tensor parallel: cannot find this program (/proc/self/exe)");
    exe[len] = 0;
    char np[16];
    snprintf(np, sizeof np, "%d", n);
    const char *head[] = {"mpirun", "--enable-recovery", "--bind-to", "none", "--oversubscribe", "-np", np};
    size_t nh = sizeof head / sizeof head[0];
    char **args = calloc(nh + 2 + (size_t)argc + 1, sizeof *args);
    if (!args) return vllm_error(VLLM_ERR_NOMEM, "tensor parallel: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < nh; i++) args[k++] = (char *)head[i];
    if (geteuid() == 0) args[k++] = "--allow-run-as-root";
    args[k++] = exe;
    for (int i = 0; i < argc; i++) args[k++] = argv[i];
    args[k] = NULL;
    /* shared memory without CMA: containers often forbid process_vm_readv */
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    log_info("tensor/pipeline parallel: %d ranks, re-executing under mpirun", n);
    fflush(stdout);
    fflush(stderr);
    execvp("mpirun", args);
    int e = errno;
    free(args);
    return vllm_error(VLLM_ERR_UNSUPPORTED, "tensor parallel: cannot run mpirun (%s); install openmpi-bin",
                      strerror(e));
}

vllm_status mpi_group_start(int32_t tp, int32_t pp, int argc, char **argv, mpi_group **out) {
    *out = NULL;
    if (tp < 1) tp = 1;
    if (pp < 1) pp = 1;
    int32_t n = tp * pp;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && !getenv("OMPI_COMM_WORLD_SIZE")) return reexec_under_mpirun(n, argc, argv);
    mpi_group *g = calloc(1, sizeof *g);
    if (!g) return vllm_error(VLLM_ERR_NOMEM, "mpi group: out of memory");
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            free(g);
            return vllm_error(VLLM_ERR_IO, "mpi group: MPI_Init_thread failed");
        }
        g->finalize = true;
        if (provided < MPI_THREAD_SERIALIZED) {
            mpi_group_finish(g);
            return vllm_error(VLLM_ERR_UNSUPPORTED, "mpi group: this MPI gives thread level %d, not SERIALIZED",
                              provided);
        }
    }
    g->comm = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(g->comm, &rank);
    MPI_Comm_size(g->comm, &size);
    g->rank = rank, g->size = size, g->tp = tp, g->pp = pp;
    if (size != n) {
        vllm_status rc = vllm_error(VLLM_ERR_INVALID,
                                    "mpirun started %d ranks, but tensor_parallel_size %d x pipeline_parallel_size "
                                    "%d needs %d (mpirun -np %d)", size, tp, pp, n, n);
        mpi_group_finish(g);
        return rc;
    }
    char host[HOST_CAP] = {0}, *hosts = calloc((size_t)size, HOST_CAP);
    int32_t pid = (int32_t)getpid();
    int hlen = 0;
    g->pids = calloc((size_t)size, sizeof *g->pids);
    g->local = calloc((size_t)size, sizeof *g->local);
    MPI_Get_processor_name(host, &hlen);
    if (!hosts || !g->pids || !g->local ||
        MPI_Allgather(&pid, 1, MPI_INT32_T, g->pids, 1, MPI_INT32_T, g->comm) != MPI_SUCCESS ||
        MPI_Allgather(host, HOST_CAP, MPI_CHAR, hosts, HOST_CAP, MPI_CHAR, g->comm) != MPI_SUCCESS) {
        free(hosts);
        mpi_group_finish(g);
        return vllm_error(VLLM_ERR_IO, "mpi group: cannot exchange pids");
    }
    for (int i = 0; i < size; i++) g->local[i] = i != rank && !strncmp(host, hosts + (size_t)i * HOST_CAP, HOST_CAP);
    free(hosts);
    *out = g;
    return VLLM_OK;
}

int32_t mpi_group_rank(const mpi_group *g) { return g->rank; }
int32_t mpi_group_size(const mpi_group *g) { return g->size; }
int32_t mpi_group_tp(const mpi_group *g) { return g->tp; }
int32_t mpi_group_pp(const mpi_group *g) { return g->pp; }
MPI_Comm mpi_group_comm(const mpi_group *g) { return g->comm; }
bool mpi_group_broken(const mpi_group *g) { return g->broken; }

/* The first rank on this host that no longer exists, or -1. */
static int32_t lost_rank(const mpi_group *g) {
    for (int32_t i = 0; i < g->size; i++)
        if (g->local[i] && kill((pid_t)g->pids[i], 0) != 0 && errno == ESRCH) return i;
    return -1;
}

vllm_status mpi_group_wait(mpi_group *g, MPI_Request *req, bool idle) {
    if (g->broken) return vllm_error(VLLM_ERR_IO, "mpi group: a rank is gone; the group is stopped");
    long sleep_ns = 10000;
    double start = clock_now(), last_check = start;
    for (int spins = 0;; spins++) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            g->broken = true;
            return vllm_error(VLLM_ERR_IO, "mpi group: rank %d: MPI reported an error", g->rank);
        }
        if (done) return VLLM_OK;
        if (spins < 64) continue; /* a step's collective usually completes in microseconds */
        double now = clock_now();
        if (now - last_check >= 0.02) {
            last_check = now;
            int32_t lost = lost_rank(g);
            if (lost >= 0) {
                g->broken = true;
                return vllm_error(VLLM_ERR_IO, "rank %d (pid %d) of the tensor/pipeline-parallel group is gone",
                                  lost, g->pids[lost]);
            }
        }
        long cap = idle && now - start > 1.0 ? 10000000 : 1000000;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        sleep_ns = sleep_ns * 2 > cap ? cap : sleep_ns * 2;
    }
}

void mpi_group_finish(mpi_group *g) {
    if (!g) return;
    if (g->finalize && !g->broken) MPI_Finalize();
    free(g->pids);
    free(g->local);
    free(g);
}
