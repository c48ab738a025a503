/*
 * bench_rng.h - the seeded random numbers the benchmarks draw: prompt token
 * ids, prompt/output lengths, and request inter-arrival times.
 *
 * xoshiro256** seeded through splitmix64, so a --seed gives the same workload
 * on every machine (not numpy's stream: vLLM's exact prompts are not
 * reproduced, only their distribution). Gamma variates use Marsaglia and
 * Tsang's method (shape >= 1) with the U^(1/a) boost for shape < 1; normals
 * come from Box-Muller.
 */
#ifndef VLLM_CLI_BENCH_RNG_H
#define VLLM_CLI_BENCH_RNG_H

#include <stdint.h>

typedef struct bench_rng {
    uint64_t s[4];
} bench_rng;

void bench_rng_seed(bench_rng *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng *r);
/* Uniform in [0, 1). */
double bench_rng_uniform(bench_rng *r);
/* Uniform integer in [lo, hi] (inclusive, lo <= hi), like numpy's integers(lo, hi + 1). */
int64_t bench_rng_int(bench_rng *r, int64_t lo, int64_t hi);
/* Standard normal. */
double bench_rng_normal(bench_rng *r);
/* Gamma(shape, scale), shape > 0, scale > 0: mean shape*scale, variance shape*scale^2. */
double bench_rng_gamma(bench_rng *r, double shape, double scale);

#endif
