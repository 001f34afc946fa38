/* ckpt_sum.c: the order-independent tensor checksum (see ckpt.h). */
#include <config.h>
#include "ckpt/ckpt.h"

#include <string.h>

/* SplitMix64's finaliser: xor-shifts and odd multipliers, each step
 * invertible, so the whole map is a bijection of 64-bit words. */
static inline uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Element i with bit pattern b contributes mix(b ^ mix(i + golden)).  For a
 * fixed position the contribution is a bijection of b, so changing any one
 * element changes the sum; the position key makes swapped elements count
 * as changes too.  The sum wraps modulo 2^64. */
uint64_t gl_ckpt_sum_f32(const float *x, long n, long first)
{
    uint64_t s = 0;
    for (long k = 0; k < n; k++) {
        uint32_t b;
        memcpy(&b, &x[k], sizeof b);
        s += mix((uint64_t)b ^ mix((uint64_t)(first + k) + 0x9e3779b97f4a7c15ULL));
    }
    return s;
}
