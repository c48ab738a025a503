/*
 * mpi_group.h - the MPI process group of one tensor/pipeline-parallel
 * engine (Open MPI): who runs where, and waiting on MPI without hanging on
 * a dead rank.
 *
 * Launch: `mpirun -np N vllmc serve ... -tp T -pp P` (N = T * P), or a
 * plain `vllmc serve ... -tp T`, which re-executes itself under mpirun
 * (mpirun --enable-recovery --bind-to none --oversubscribe -np N, plus
 * --allow-run-as-root when root; the process keeps its pid, so whoever
 * started it can signal it as before and mpirun forwards SIGINT/SIGTERM
 * to the ranks). Open MPI singletons cannot grow into a group here
 * (MPI_Comm_spawn needs an ompi-server or a running mpirun), so re-exec
 * is the one path that works everywhere mpirun does. Rank 0 runs the engine,
 * scheduler and API server; the others are workers (dist/tp_executor.h).
 *
 * Dead ranks: Open MPI 4.1 has no fault-tolerant MPI (ULFM is not built in
 * Debian's), and a blocking collective with a dead peer over shared memory
 * never returns. So every wait here is MPI_Test in a loop that sleeps
 * (10 us doubling to 1 ms, 10 ms after a second idle: no core spins) and,
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
 * in the environment) re-executes this program under mpirun with argv
 * (argv[0] = the subcommand, e.g. "serve") and does not return unless that
 * fails. VLLM_ERR_INVALID when the world's size is not tp * pp. */
vllm_status mpi_group_start(int32_t tp, int32_t pp, int argc, char **argv, mpi_group **out);

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

/* MPI_Finalize (unless broken) and frees g. NULL is a no-op. */
void mpi_group_finish(mpi_group *g);

#endif
