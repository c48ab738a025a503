/*
 * clock.h - the one monotonic clock of the process.
 *
 * Every timestamp that is compared with another (engine events, metrics
 * intervals, HTTP durations, benchmark timings) comes from clock_now(), so
 * the front end and the engine core agree on time (mission.md §8: intervals
 * are only meaningful within one process's monotonic clock). The public API
 * exposes the same clock as vllm_monotonic_time().
 */
#ifndef VLLM_BASE_CLOCK_H
#define VLLM_BASE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (arbitrary origin, never goes back). */
double clock_now(void);

/* The CLOCK_REALTIME instant `seconds` from now: a deadline for
 * pthread_cond_timedwait on a default condition variable. */
struct timespec clock_deadline(double seconds);

#endif
