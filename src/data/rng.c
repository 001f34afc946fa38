/* rng.c: MT19937 as NumPy's RandomState uses it (see rng.h). */
#include <config.h>
#include "data/rng.h"

/* Matsumoto and Nishimura's reference init_genrand. */
void gl_mt19937_seed(gl_mt19937 *r, uint32_t seed)
{
    r->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = 624;
}

uint32_t gl_mt19937_next32(gl_mt19937 *r)
{
    if (r->mti >= 624) {
        /* regenerate the 624 words of state */
        for (int k = 0; k < 624; k++) {
            uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[(k + 1) % 624] & 0x7fffffffu);
            r->mt[k] = r->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        r->mti = 0;
    }
    uint32_t y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t gl_np_interval(gl_mt19937 *r, uint64_t max)
{
    if (max == 0)
        return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4;
    mask |= mask >> 8; mask |= mask >> 16; mask |= mask >> 32;
    if (max <= 0xffffffffu) {
        do
            v = gl_mt19937_next32(r) & mask;
        while (v > max);
    } else {
        do {
            uint64_t hi = gl_mt19937_next32(r);
            v = ((hi << 32) | gl_mt19937_next32(r)) & mask;
        } while (v > max);
    }
    return v;
}

void gl_np_shuffle_i32(gl_mt19937 *r, int32_t *x, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)gl_np_interval(r, i);
        int32_t t = x[i]; x[i] = x[j]; x[j] = t;
    }
}

void gl_np_shuffle_i64(gl_mt19937 *r, int64_t *x, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)gl_np_interval(r, i);
        int64_t t = x[i]; x[i] = x[j]; x[j] = t;
    }
}
