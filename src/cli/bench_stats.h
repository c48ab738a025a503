/*
 * bench_stats.h - the summary statistics the benchmarks print, computed as
 * numpy does so figures compare with vLLM's: np.mean, np.std (ddof 0),
 * np.median and np.percentile with its default linear interpolation
 * (index p/100 * (n - 1) into the sorted samples). As in vLLM's reports, an
 * empty sample summarises to 0 (`np.mean(x or 0)`).
 */
#ifndef VLLM_CLI_BENCH_STATS_H
#define VLLM_CLI_BENCH_STATS_H

#include <stddef.h>

/* Sorts x ascending in place (the percentile functions need sorted input). */
void bench_stats_sort(double *x, size_t n);
double bench_stats_mean(const double *x, size_t n);
double bench_stats_std(const double *x, size_t n);
/* p in [0, 100]; sorted must be ascending. */
double bench_stats_percentile(const double *sorted, size_t n, double p);
double bench_stats_median(const double *sorted, size_t n);

#endif
