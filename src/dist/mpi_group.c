/*
 * mpi_group.c - the MPI process group of a tp/pp engine (see mpi_group.h).
 */
#include "dist/mpi_group.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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
    atomic_bool broken;
    bool finalize;                   /* this call initialized MPI */
    /* the monitor (mpi_group_monitor_start) */
    pthread_t monitor;
    bool monitoring;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
};

static volatile sig_atomic_t pending_signal; /* the launcher's: SIGINT/SIGTERM to pass on */

static void note_signal(int sig) { pending_signal = sig; }

/* Rank 0's pid, from the file it writes at start-up (path.pid), or 0. */
static pid_t read_rank0_pid(const char *path) {
    char pid_path[80];
    snprintf(pid_path, sizeof pid_path, "%s.pid", path);
    FILE *f = fopen(pid_path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

/* Runs mpirun with this program and argv as a child, forwards SIGINT and
 * SIGTERM to it, waits, and sets *status to rank 0's exit status (from the
 * file named by VLLMC_MPI_STATUS_FILE, which rank 0 writes at its end:
 * mpirun --enable-recovery itself exits 0 whatever its ranks did), or 1. */
static vllm_status launch_under_mpirun(int32_t n, int argc, char **argv, int *status) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return vllm_error(VLLM_ERR_IO, "tensor parallel: cannot find this program (/proc/self/exe)");
    exe[len] = 0;
    char np[16], status_path[64];
    snprintf(np, sizeof np, "%d", n);
    snprintf(status_path, sizeof status_path, "/tmp/vllmc-mpi-%d.status", (int)getpid());
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
    /* TCP over loopback rather than shared memory (vader), unless told: our
     * waits sleep between MPI_Tests (mpi_group_wait), and a collective over
     * vader advances only while both ranks are inside MPI, so every round
     * waits for a sleeper; TCP's kernel buffers carry a round meanwhile. On
     * this 2-core machine a tp=2 all-reduce of one token: ~20 us median on
     * TCP, 10-40 ms on vader (bench/tp_allreduce.sh, docs/deploy.md). */
    setenv("OMPI_MCA_btl", "tcp,self", 0);
    setenv("VLLMC_MPI_STATUS_FILE", status_path, 1);
    unlink(status_path);
    log_info("tensor/pipeline parallel: %d ranks, starting them with mpirun", n);
    fflush(stdout);
    fflush(stderr);
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        free(args);
        return vllm_error(VLLM_ERR_IO, "tensor parallel: pipe: %s", strerror(errno));
    }
    pid_t child = fork();
    if (child == 0) {
        close(pipefd[0]);
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the launcher killed: mpirun takes its ranks down */
        execvp("mpirun", args);
        int e = errno;
        ssize_t w = write(pipefd[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    free(args);
    close(pipefd[1]);
    if (child < 0) {
        close(pipefd[0]);
        return vllm_error(VLLM_ERR_IO, "tensor parallel: fork: %s", strerror(errno));
    }
    int e = 0;
    ssize_t got = read(pipefd[0], &e, sizeof e); /* EOF when the exec succeeded */
    close(pipefd[0]);
    /* SIGINT/SIGTERM go to rank 0, which shuts down and stops the workers
     * (mpirun, told instead, tears the job down in seconds); to mpirun
     * while rank 0 is not up yet */
    struct sigaction sa = {.sa_handler = note_signal}; /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int ws = 0;
    while (waitpid(child, &ws, 0) < 0 && errno == EINTR) {
        int sig = pending_signal;
        pending_signal = 0;
        if (!sig) continue;
        pid_t r0 = read_rank0_pid(status_path);
        if (r0 <= 0 || kill(r0, sig) != 0) kill(child, sig);
    }
    char pid_path[80];
    snprintf(pid_path, sizeof pid_path, "%s.pid", status_path);
    unlink(pid_path);
    if (got == (ssize_t)sizeof e) {
        unlink(status_path);
        return vllm_error(VLLM_ERR_UNSUPPORTED, "tensor parallel: cannot run mpirun (%s); install openmpi-bin",
                          strerror(e));
    }
    *status = 1;
    FILE *f = fopen(status_path, "r");
    if (f) {
        if (fscanf(f, "%d", status) != 1) *status = 1;
        fclose(f);
        unlink(status_path);
    }
    if (WIFEXITED(ws) && WEXITSTATUS(ws) != 0 && *status == 0) *status = WEXITSTATUS(ws);
    return VLLM_OK;
}

void mpi_group_write_status(const mpi_group *g, int status) {
    const char *path = getenv("VLLMC_MPI_STATUS_FILE");
    if (!path || (g && g->rank != 0)) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%d\n", status);
    fclose(f);
}

/* Under AddressSanitizer: Open MPI keeps allocations in globals of plugins
 * (mca_*.so, and libpmix through its PMIx plugin) that MPI_Finalize
 * dlcloses; once a plugin is unmapped LeakSanitizer reports that memory as
 * leaked from "<unknown module>", where no suppression can name it
 * (tests/lsan_mpi.supp matches the library frames of what stays mapped).
 * Marking every Open MPI object loaded so far RTLD_NODELETE (dlopen with
 * RTLD_NOLOAD only touches what is already loaded) keeps them mapped to the
 * end. Called after MPI_Init and before MPI_Finalize. */
#if defined(__SANITIZE_ADDRESS__)
static int pin_object(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size, (void)arg;
    const char *n = info->dlpi_name;
    if (n && *n && (strstr(n, "/openmpi") || strstr(n, "libpmix") || strstr(n, "libpciaccess")))
        (void)dlopen(n, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}
#endif

static void keep_plugins_mapped(void) {
#if defined(__SANITIZE_ADDRESS__)
    dl_iterate_phdr(pin_object, NULL);
#endif
}

vllm_status mpi_group_start(int32_t tp, int32_t pp, int argc, char **argv, mpi_group **out, int *launcher_status) {
    *out = NULL;
    *launcher_status = 0;
    if (tp < 1) tp = 1;
    if (pp < 1) pp = 1;
    int32_t n = tp * pp;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && !getenv("OMPI_COMM_WORLD_SIZE")) return launch_under_mpirun(n, argc, argv, launcher_status);
    mpi_group *g = calloc(1, sizeof *g);
    if (!g) return vllm_error(VLLM_ERR_NOMEM, "mpi group: out of memory");
    if (!inited) {
        /* Open MPI starts threads of its own (PMIx, its event loop): they must
         * not take SIGINT/SIGTERM, which `vllmc serve` waits for with sigwait
         * (a signal they took would kill the process), so they inherit a mask
         * that blocks them */
        sigset_t sigs, old;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, &old);
        int provided = 0, mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        keep_plugins_mapped();
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (mrc != MPI_SUCCESS) {
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
    const char *status_path = getenv("VLLMC_MPI_STATUS_FILE");
    if (rank == 0 && status_path) { /* for the launcher's signals */
        char pid_path[PATH_MAX];
        snprintf(pid_path, sizeof pid_path, "%s.pid", status_path);
        FILE *f = fopen(pid_path, "w");
        if (f) {
            fprintf(f, "%d\n", (int)pid);
            fclose(f);
        }
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
bool mpi_group_broken(const mpi_group *g) { return atomic_load(&g->broken); }

/* The first rank on this host that no longer exists, or -1. */
static int32_t lost_rank(const mpi_group *g) {
    for (int32_t i = 0; i < g->size; i++)
        if (g->local[i] && kill((pid_t)g->pids[i], 0) != 0 && errno == ESRCH) return i;
    return -1;
}

vllm_status mpi_group_wait(mpi_group *g, MPI_Request *req, bool idle) {
    if (atomic_load(&g->broken)) return vllm_error(VLLM_ERR_IO, "mpi group: a rank is gone; the group is stopped");
    long sleep_ns = 20000;
    double start = clock_now(), last_check = start;
    for (int spins = 0;; spins++) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            atomic_store(&g->broken, true);
            return vllm_error(VLLM_ERR_IO, "mpi group: rank %d: MPI reported an error", g->rank);
        }
        if (done) return VLLM_OK;
        double now = clock_now();
        /* the first 2 ms: yield only (a collective's rounds need every rank
         * to call MPI_Test; on shared cores the peer may need this one) */
        if (now - start < 0.002) {
            if (spins >= 16) sched_yield();
            continue;
        }
        if (now - last_check >= 0.02) {
            last_check = now;
            int32_t lost = lost_rank(g);
            if (lost >= 0) {
                atomic_store(&g->broken, true);
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

/* Every 100 ms until stopped: is every local rank still there? */
static void *monitor_main(void *arg) {
    mpi_group *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (g->stop) break;
        int32_t lost = lost_rank(g);
        if (lost >= 0) {
            if (!atomic_exchange(&g->broken, true)) {
                log_error("rank %d (pid %d) of the tensor/pipeline-parallel group is gone; shutting down", lost,
                          g->pids[lost]);
                kill(getpid(), SIGTERM);
            }
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

vllm_status mpi_group_monitor_start(mpi_group *g) {
    if (g->monitoring) return VLLM_OK;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->monitor, NULL, monitor_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        return vllm_error(VLLM_ERR_NOMEM, "mpi group: cannot start the monitor thread");
    }
    g->monitoring = true;
    return VLLM_OK;
}

void mpi_group_finish(mpi_group *g) {
    if (!g) return;
    if (g->monitoring) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->monitor, NULL);
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
    }
    if (g->finalize && !atomic_load(&g->broken)) {
        keep_plugins_mapped();
        MPI_Finalize();
    }
    free(g->pids);
    free(g->local);
    free(g);
}
