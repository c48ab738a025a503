/* bench_rng.c - see bench_rng.h. */
#include "cli/bench_rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bench_rng_seed(bench_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t bench_rng_next(bench_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double bench_rng_uniform(bench_rng *r) { return (double)(bench_rng_next(r) >> 11) * 0x1.0p-53; }

int64_t bench_rng_int(bench_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    if (span == 0) return (int64_t)bench_rng_next(r); /* the whole int64 range */
    /* rejection keeps every value equally likely */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span, x;
    do x = bench_rng_next(r);
    while (x >= limit);
    return lo + (int64_t)(x % span);
}

double bench_rng_normal(bench_rng *r) {
    double u1 = 1.0 - bench_rng_uniform(r), u2 = bench_rng_uniform(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double bench_rng_gamma(bench_rng *r, double shape, double scale) {
    if (shape < 1.0) {
        /* Gamma(a) = Gamma(a + 1) * U^(1/a) */
        double u = 1.0 - bench_rng_uniform(r);
        return bench_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = bench_rng_normal(r), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = 1.0 - bench_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v * scale;
    }
}
