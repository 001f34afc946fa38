/*
 * rng.c: counter-based random numbers (see rng.h).
 */
#include <math.h>
#include <string.h>
#include "base/hash.h"
#include "base/rng.h"

/* SplitMix64's output function: one step of its state, then the
 * finaliser. */
static uint64_t mix64(uint64_t z)
{
    return gl_mix64(z + GL_GOLDEN64);
}

uint64_t gl_rng_key(const char *name)
{
    return mix64(gl_fnv1a64(name, strlen(name), GL_FNV1A64_INIT));
}

uint64_t gl_rng_u64(uint64_t seed, uint64_t key, uint64_t counter)
{
    return mix64(mix64(mix64(seed) ^ key) ^ counter);
}

double gl_rng_uniform(uint64_t seed, uint64_t key, uint64_t counter)
{
    /* The top 53 bits give a multiple of 2^-53 in [0, 1); shifting by one
     * ulp maps it to (0, 1]. */
    uint64_t r = gl_rng_u64(seed, key, counter) >> 11;
    return ((double)r + 1.0) * (1.0 / 9007199254740992.0);
}

double gl_rng_normal(uint64_t seed, uint64_t key, uint64_t index)
{
    /* Box-Muller: for u1, u2 uniform on (0, 1],
     * sqrt(-2 ln u1) cos(2 pi u2) is N(0, 1). */
    double u1 = gl_rng_uniform(seed, key, 2 * index);
    double u2 = gl_rng_uniform(seed, key, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
