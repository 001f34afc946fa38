/*
 * rng.h: a counter-based random number generator.
 *
 * Every value is a pure function of (seed, key, counter): there is no
 * state to carry, to split or to checkpoint, and any rank can compute
 * element e of any tensor without computing the ones before it.  This is
 * what lets parameter initialisation and synthetic data be identical
 * under every parallel layout (DESIGN.md, principle 2):
 *
 *   value of element e of parameter P = gl_rng_normal(seed, gl_rng_key(name(P)), e)
 *
 * The mixing function is SplitMix64's finaliser (Steele, Lea, Flood,
 * "Fast splittable pseudorandom number generators", 2014) applied in
 * three rounds, one per input word, which passes BigCrush as a hash of a
 * counter.  Normals come from Box-Muller on two uniforms drawn at
 * counters 2e and 2e+1.  No MPI, no CUDA.
 */
#ifndef GL_BASE_RNG_H
#define GL_BASE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A 64-bit key for a name (FNV-1a, then mixed): "layers.3.attention.wq". */
uint64_t gl_rng_key(const char *name);

/* 64 uniformly distributed bits for (seed, key, counter). */
uint64_t gl_rng_u64(uint64_t seed, uint64_t key, uint64_t counter);

/* A uniform double in (0, 1] (never 0, so log() is safe). */
double gl_rng_uniform(uint64_t seed, uint64_t key, uint64_t counter);

/* A standard normal N(0, 1) for element `index` of the stream (seed, key). */
double gl_rng_normal(uint64_t seed, uint64_t key, uint64_t index);

#ifdef __cplusplus
}
#endif
#endif
