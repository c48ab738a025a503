/*
 * mpi_group.h - the MPI process group of one tensor/pipeline-parallel
 * engine (Open MPI): who runs where, and waiting on MPI without hanging on
 * a dead rank.
 *
 * Launch: `mpirun -np N vllmc serve ... -tp T -pp P` (N = T * P), or a
 * plain `vllmc serve ... -tp T`, which starts its ranks itself: it runs
 * mpirun --enable-recovery --bind-to none --oversubscribe -np N (plus
 * --allow-run-as-root when root; Open MPI's TCP transport over loopback
 * unless OMPI_MCA_btl says otherwise: see mpi_group.c) on the same program and arguments as a
 * child, passes SIGINT/SIGTERM on to rank 0 (whose pid it reads from a
 * file rank 0 writes; rank 0 then stops the workers itself, where mpirun
 * would take seconds to tear the job down), and exits with rank 0's status.
 * Open MPI singletons cannot grow into a group here (MPI_Comm_spawn needs
 * an ompi-server or a running mpirun), so a child mpirun is the one path
 * that works everywhere mpirun does. --enable-recovery keeps mpirun from
 * killing rank 0 the moment a worker dies, so rank 0 can say so and shut
 * down cleanly; since mpirun then exits 0 whatever happened, rank 0 writes
 * its status to a file (VLLMC_MPI_STATUS_FILE) that the launcher reads.
 * Rank 0 runs the engine, scheduler and API server; the others are workers
 * (dist/tp_executor.h).
 *
 * Dead ranks: Open MPI 4.1 has no fault-tolerant MPI (ULFM is not built in
 * Debian's), and a blocking collective with a dead peer over shared memory
 * never returns. So every wait here is MPI_Test in a loop that yields the
 * core for its first 2 ms (a nonblocking collective advances only while
 * its ranks call MPI_Test, and on shared cores a peer may need this one),
 * then sleeps (20 us doubling to 1 ms, 10 ms after a second idle: no core
 * spins for long) and,
 * every 20 ms, checks that each rank on this host still exists (pids
 * exchanged at start-up). A vanished rank makes the wait return
 * VLLM_ERR_IO naming it, and the group is broken from then on:
 * nothing more is sent and MPI_Finalize is skipped (it would wait for the
 * dead). Ranks on other hosts cannot be checked this way; there mpirun
 * (without --enable-recovery) takes the job down when one exits.
 *
 * Threads: MPI is initialized MPI_THREAD_SERIALIZED; one thread at a time
 * calls into a group (the engine thread during steps, main at start and end).
 */
#ifndef VLLM_DIST_MPI_GROUP_H
#define VLLM_DIST_MPI_GROUP_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "vllm/status.h"

typedef struct mpi_group mpi_group;

/* Joins the group of tp * pp ranks. Outside mpirun (no OMPI_COMM_WORLD_SIZE
 * in the environment) this process becomes the launcher instead: it runs
 * the group under mpirun with argv (argv[0] = the subcommand, e.g.
 * "serve"), waits for it, and returns VLLM_OK with *out NULL and
 * *launcher_status the status to exit with. VLLM_ERR_INVALID when the
 * world's size is not tp * pp. */
vllm_status mpi_group_start(int32_t tp, int32_t pp, int argc, char **argv, mpi_group **out, int *launcher_status);

/* Rank 0 (g NULL: a process that could not join): the exit status for the
 * launcher to report, if there is one (VLLMC_MPI_STATUS_FILE). */
void mpi_group_write_status(const mpi_group *g, int status);

int32_t mpi_group_rank(const mpi_group *g);
int32_t mpi_group_size(const mpi_group *g);
int32_t mpi_group_tp(const mpi_group *g);
int32_t mpi_group_pp(const mpi_group *g);
MPI_Comm mpi_group_comm(const mpi_group *g);

/* Waits for req (an MPI_I* request of this group), see the top. idle: the
 * wait may be long (a worker between steps), so the sleeps grow to 10 ms.
 * VLLM_ERR_IO (message names the rank and pid) if a rank on this host
 * is gone or MPI reports an error; the group is broken from then on. */
vllm_status mpi_group_wait(mpi_group *g, MPI_Request *req, bool idle);

/* True once a wait found a rank gone. */
bool mpi_group_broken(const mpi_group *g);

/* Rank 0 of `vllmc serve`: a thread that checks every 100 ms that the
 * ranks on this host exist (no MPI calls), so a worker that dies while the
 * server is idle is noticed too. When one is gone it marks the group
 * broken, logs the rank and pid, and sends this process SIGTERM (serve's
 * main thread takes it and shuts down). Stopped by mpi_group_finish. */
vllm_status mpi_group_monitor_start(mpi_group *g);

/* Stops the monitor, MPI_Finalize (unless broken) and frees g. NULL is a no-op. */
void mpi_group_finish(mpi_group *g);

#endif
