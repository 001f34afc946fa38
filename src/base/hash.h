/*
 * hash.h: the two non-cryptographic hashes gridlm uses, written once.
 *
 *   gl_mix64(z)   SplitMix64's finaliser (Steele, Lea, Flood, 2014):
 *                 xor-shifts and odd multipliers, each step invertible, so
 *                 the map is a bijection of 64-bit words with full
 *                 avalanche.  The counter-based RNG, the checkpoint
 *                 checksum and the tests' generators are built on it.
 *   gl_fnv1a64()  FNV-1a over bytes, 64 bits, continuing from h (start
 *                 with GL_FNV1A64_INIT): names to keys, cache file names,
 *                 the checkpoint's tensor-list agreement.
 *
 * Both are part of file formats and of the RNG's streams (a parameter's
 * initial value depends on them): never change their constants.
 */
#ifndef GL_BASE_HASH_H
#define GL_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The golden-ratio increment of SplitMix64's state (2^64 / phi, odd). */
#define GL_GOLDEN64 0x9e3779b97f4a7c15ULL

#define GL_FNV1A64_INIT 0xcbf29ce484222325ULL
#define GL_FNV1A64_PRIME 0x100000001b3ULL

static inline uint64_t gl_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t gl_fnv1a64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * GL_FNV1A64_PRIME;
    return h;
}

#endif
