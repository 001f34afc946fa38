/* ckpt_sum.c: the order-independent tensor checksum (see ckpt.h). */
#include <config.h>
#include "ckpt/ckpt.h"

#include <string.h>

#include "base/hash.h"

/* Element i with bit pattern b contributes mix(b ^ mix(i + golden)), mix
 * being SplitMix64's finaliser (a bijection of 64-bit words).  For a
 * fixed position the contribution is a bijection of b, so changing any one
 * element changes the sum; the position key makes swapped elements count
 * as changes too.  The sum wraps modulo 2^64. */
uint64_t gl_ckpt_sum_f32(const float *x, long n, long first)
{
    uint64_t s = 0;
    for (long k = 0; k < n; k++) {
        uint32_t b;
        memcpy(&b, &x[k], sizeof b);
        s += gl_mix64((uint64_t)b ^ gl_mix64((uint64_t)(first + k) + GL_GOLDEN64));
    }
    return s;
}
