/*
 * rng.h: the random number generator that orders documents and samples.
 *
 * gl_mt19937 and gl_np_shuffle: NumPy's legacy RandomState(seed) --
 *    Mersenne Twister MT19937 seeded with init_genrand(seed) -- and its
 *    shuffle(): for i = n-1 down to 1, j = a uniform integer in [0, i]
 *    drawn by masked rejection (the smallest all-ones mask >= i; 32-bit
 *    draws while i fits 32 bits, otherwise two draws high word first),
 *    then swap x[i], x[j].  Megatron-LM shuffles its document and sample
 *    indices with exactly this generator seeded by --seed, so gridlm's
 *    order of documents and samples is Megatron's (t/data-megatron checks
 *    it against numpy).  It depends on nothing
 *    but the seed: the same for any parallel layout and after a restart.
 *
 * Synthetic data (--mock-data, the synthetic corpus) uses the
 * counter-based generator of base/rng.h instead.
 */
#ifndef GL_DATA_RNG_H
#define GL_DATA_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t mt[624];
    int mti;
} gl_mt19937;

void gl_mt19937_seed(gl_mt19937 *r, uint32_t seed);
uint32_t gl_mt19937_next32(gl_mt19937 *r);
/* NumPy's random_interval(max): uniform in [0, max]. */
uint64_t gl_np_interval(gl_mt19937 *r, uint64_t max);
/* RandomState.shuffle of a 1-d array, for int32 and int64 elements. */
void gl_np_shuffle_i32(gl_mt19937 *r, int32_t *x, size_t n);
void gl_np_shuffle_i64(gl_mt19937 *r, int64_t *x, size_t n);

#endif
