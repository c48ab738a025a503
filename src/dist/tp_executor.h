/*
 * tp_executor.h - the tensor- and pipeline-parallel executor over MPI
 * (vLLM's MultiprocExecutor / Ray executor with its workers, on MPI).
 *
 * Rank 0 runs the engine (scheduler, sampler, API server) and one shard of
 * the model; the other ranks run only their shards (dist/tp_shard.h) of
 * their stage's layers (dist/pp_stage.h; rank = stage * tp + tensor rank,
 * the all-reduces on the stage's own communicator). With pp > 1 each
 * stage receives the residual stream from the one before and sends its
 * own on (MPI_Isend / MPI_Irecv), the last stage sends the scored rows to
 * rank 0, and rank 0 projects them (runner_logits). With pp > 1 up to pp
 * batches are in flight (executor submit / collect, vLLM's
 * max_concurrent_batches; VLLMC_PP_BATCHES_IN_FLIGHT=1..16 overrides):
 * rank 0 posts the receive of a batch's scored rows when it submits it,
 * runs stage 0 and sends the result on, and collects the oldest batch
 * later, so the stages work on different batches at once. Per
 * engine step rank 0 broadcasts the step_batch (model/step_batch.h: a
 * header of counts, then its flat arrays in one message), every rank runs
 * the forward over its heads and its part of the MLP with an MPI_Allreduce
 * (sum) of the (tokens, hidden) partial outputs after o_proj and after
 * down_proj, and rank 0, which keeps the whole lm_head (replicated output
 * layer, not a split vocabulary: the simplest correct choice, and the
 * logits need no gather), computes the scored rows' logits. The sum over
 * ranks adds floats in another order than one rank's dot product, so
 * logits differ from tp=1 in the last bits (tokens are compared in
 * tests/test_tp.sh); a step is still batch invariant (per-token sums).
 *
 * Start-up: rank 0's engine sizes its KV pool as usual and calls the
 * factory (engine_set_executor_factory), which broadcasts the model path
 * and runner config; each rank loads the model (mmap), cuts its shard,
 * proposes min(rank 0's block count, what 40% of its MemAvailable holds of
 * its own smaller blocks, unless sized explicitly) and the ranks take the
 * MPI_Allreduce minimum; a rank that fails proposes 0 and everyone fails.
 *
 * A rank that dies: the waits notice (dist/mpi_group.h); rank 0 logs which
 * rank is gone, fails the step (the engine is then dead and its requests
 * end with an error) and sends itself SIGTERM, so `vllmc serve` shuts down
 * as on Ctrl-C; a worker whose rank 0 is gone exits with status 1.
 */
#ifndef VLLM_DIST_TP_EXECUTOR_H
#define VLLM_DIST_TP_EXECUTOR_H

#include "dist/mpi_group.h"
#include "engine/executor.h"
#include "vllm/vllm.h"

/* For `vllmc serve` with tp (or pp) > 1, before anything else starts:
 * joins the MPI group (or, outside mpirun, runs it under mpirun and
 * waits: see mpi_group.h; then *group is NULL and *worker_status the
 * status to exit with). On rank 0, installs the factory and sets *group (finish it
 * with tp_executor_finish after the engine is freed). On a worker rank,
 * runs the worker until rank 0 says stop or is gone, sets *group NULL and
 * *worker_status to the process's exit status. argv[0] is the subcommand. */
vllm_status tp_executor_start(const vllm_engine_args *args, int argc, char **argv, mpi_group **group,
                              int *worker_status);

/* Rank 0's end, status its exit status: releases workers still waiting
 * for a model (the engine failed before its executor existed), tells the
 * launcher the status (1 if a rank was lost), then mpi_group_finish.
 * NULL: no-op. */
void tp_executor_finish(mpi_group *group, int status);

#endif
