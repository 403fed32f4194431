/* The tests' deterministic random numbers (an LCG with an output mix): the same sequence for the
 * same seed on every machine, so that test data and tolerances do not depend on libc. Only test
 * programs include it; the state is the caller's. */
#ifndef SPARROW_TEST_RNG_H
#define SPARROW_TEST_RNG_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t x = *s;
    x ^= x >> 31;
    return x * 0x9e3779b97f4a7c15ull;
}

/* Uniform in [lo, hi) with 24 bits of resolution. */
static inline float rng_uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next(s) >> 40) / (float)(1u << 24);
}

#endif
