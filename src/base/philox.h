/*
 * philox.h: the Philox-4x32-10 counter-based generator, and the dropout
 * mask drawn from it.
 *
 * Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers:
 * as easy as 1, 2, 3", SC 2011) maps a 128-bit counter c[0..3] and a
 * 64-bit key k[0..1] to 128 random bits in ten rounds.  One round, with
 * the multipliers M0 = 0xD2511F53, M1 = 0xCD9E8D57:
 *   (hi0, lo0) = M0 * c[0]     (the 64-bit product's two halves)
 *   (hi1, lo1) = M1 * c[2]
 *   c = { hi1 ^ c[1] ^ k[0],  lo1,  hi0 ^ c[3] ^ k[1],  lo0 }
 * and before every round but the first the key is bumped by the Weyl
 * constants: k[0] += 0x9E3779B9, k[1] += 0xBB67AE85.  The paper's
 * known-answer vectors (Random123's kat_vectors) are checked in
 * t/philox.c.
 *
 * Header only, plain C that nvcc also compiles for the GPU (GL_HD), so
 * the CPU reference and the CUDA kernels draw the very same bits.
 */
#ifndef GL_BASE_PHILOX_H
#define GL_BASE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define GL_HD __host__ __device__ __forceinline__
#else
#define GL_HD static inline
#endif

/* out = Philox-4x32-10(counter c, key k). */
GL_HD void gl_philox4x32_10(uint32_t out[4], const uint32_t c[4],
                            const uint32_t k[2])
{
    uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3];
    uint32_t k0 = k[0], k1 = k[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * x0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * x2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        x0 = hi1 ^ x1 ^ k0;
        x1 = lo1;
        x2 = hi0 ^ x3 ^ k1;
        x3 = lo0;
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

/*
 * Dropout masks.  Element e (a 64-bit index into the full logical tensor,
 * row-major) of the mask of (seed, iteration, layer, site) is word e % 4 of
 *   Philox-4x32-10(counter = { lo(e/4), hi(e/4), iteration, stream },
 *                  key     = { lo(seed), hi(seed) }),
 * stream = 16 layer + site,
 * and the element is dropped when that word is below the threshold
 * floor(p 2^32): kept with probability 1 - threshold / 2^32, which is
 * 1 - p up to 2^-32.  Four neighbouring elements share one Philox call.
 * A piece of the tensor (a shard, a micro-batch) draws its elements'
 * words by their index in the whole, so every split of the tensor
 * draws the same mask.
 */

/* The drop threshold of probability p in [0, 1): floor(p 2^32). */
GL_HD uint32_t gl_dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    if (!(t > 0))
        return 0;
    if (t >= 4294967295.0)
        return 4294967295u;
    return (uint32_t)t;
}

/* The mask's stream (counter word 3) of dropout site `site` (< 16) of
 * layer `layer` (< 2^28). */
GL_HD uint32_t gl_dropout_stream(uint32_t layer, uint32_t site)
{
    return layer << 4 | (site & 15u);
}

/* The four words of the mask for elements 4 g .. 4 g + 3. */
GL_HD void gl_dropout_words(uint32_t out[4], uint64_t seed,
                            uint32_t iteration, uint32_t stream, uint64_t g)
{
    uint32_t c[4] = { (uint32_t)g, (uint32_t)(g >> 32), iteration, stream };
    uint32_t k[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    gl_philox4x32_10(out, c, k);
}

/* 1 when element e is kept, 0 when it is dropped. */
GL_HD int gl_dropout_keep(uint64_t seed, uint32_t iteration, uint32_t stream,
                          uint64_t e, uint32_t threshold)
{
    uint32_t w[4];
    gl_dropout_words(w, seed, iteration, stream, e >> 2);
    return w[e & 3] >= threshold;
}

#undef GL_HD
#endif
