/* bench_stats.c - see bench_stats.h. */
#include "cli/bench_stats.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_stats_sort(double *x, size_t n) {
    if (n > 1) qsort(x, n, sizeof *x, cmp_double);
}

double bench_stats_mean(const double *x, size_t n) {
    if (n == 0) return 0;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s / (double)n;
}

double bench_stats_std(const double *x, size_t n) {
    if (n == 0) return 0;
    double m = bench_stats_mean(x, n), s = 0;
    for (size_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (double)n);
}

double bench_stats_percentile(const double *sorted, size_t n, double p) {
    if (n == 0) return 0;
    if (p <= 0) return sorted[0];
    if (p >= 100) return sorted[n - 1];
    double idx = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(idx);
    if (lo + 1 >= n) return sorted[n - 1];
    double frac = idx - (double)lo, a = sorted[lo], b = sorted[lo + 1];
    /* numpy's _lerp: a + (b - a) * t, from the upper end when t >= 0.5 */
    return frac >= 0.5 ? b - (b - a) * (1.0 - frac) : a + (b - a) * frac;
}

double bench_stats_median(const double *sorted, size_t n) { return bench_stats_percentile(sorted, n, 50); }
