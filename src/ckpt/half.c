/* half.c: bf16 and fp16 <-> fp32 conversions (see half.h). */
#include <config.h>
#include "ckpt/half.h"

#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "half.c assumes a little-endian host (as safetensors files are)"
#endif

static inline uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* bf16 is the upper 16 bits of the fp32 pattern. */
float gl_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

/* Round the 32-bit pattern to its upper half, nearest-even: adding
 * 0x7fff plus the lowest kept bit carries into the kept half exactly when
 * the dropped half is above one half ulp, or equal to it with an odd kept
 * half.  A carry out of the largest finite value gives infinity, as
 * rounding should.  NaNs are kept quiet (the carry could turn one into an
 * infinity). */
uint16_t gl_f32_to_bf16(float x)
{
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* binary16: sign, 5-bit exponent (bias 15), 10-bit mantissa.  Exponent 0
 * holds zero and subnormals (mantissa x 2^-24), 31 infinities and NaNs. */
float gl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0)
            return float_of(sign);
        /* Subnormal: shift the mantissa up until its leading one reaches
         * the implicit-bit position, lowering the exponent as we go. */
        int e = -14;
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        man &= 0x3ffu;
        return float_of(sign | (uint32_t)(e + 127) << 23 | man << 13);
    }
    if (exp == 31)
        return float_of(sign | 0x7f800000u | man << 13);
    return float_of(sign | (exp - 15 + 127) << 23 | man << 13);
}

uint16_t gl_f32_to_f16(float x)
{
    uint32_t u = bits_of(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                      /* NaN: quiet, payload's top bits */
        return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u)                     /* >= 65520: rounds to infinity */
        return sign | 0x7c00u;
    if (a >= 0x38800000u) {                   /* >= 2^-14: a normal binary16 */
        /* Rebias the exponent (127 -> 15), then drop 13 mantissa bits,
         * rounding to nearest even as in gl_f32_to_bf16. */
        a -= (uint32_t)(127 - 15) << 23;
        return sign | (uint16_t)((a + 0x0fffu + ((a >> 13) & 1u)) >> 13);
    }
    if (a < 0x33000000u)                      /* < 2^-25: rounds to zero */
        return sign;
    /* Subnormal result: the value in units of 2^-24 is m x 2^(e - 126),
     * with m the 24-bit mantissa (implicit one included) and e the biased
     * exponent (102..112 here), so shift m right by 126 - e and round. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return sign | (uint16_t)r;
}

/* The 16-bit values of the _n conversions are little-endian byte pairs,
 * as safetensors stores them (buffers need no alignment). */
static inline uint16_t load_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline void store_le16(unsigned char *p, uint16_t h)
{
    p[0] = (unsigned char)(h & 0xff);
    p[1] = (unsigned char)(h >> 8);
}

void gl_bf16_to_f32_n(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = gl_bf16_to_f32(load_le16(s + 2 * i));
}

void gl_f16_to_f32_n(const void *src, float *dst, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = gl_f16_to_f32(load_le16(s + 2 * i));
}

void gl_f32_to_bf16_n(const float *src, void *dst, size_t n)
{
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        store_le16(d + 2 * i, gl_f32_to_bf16(src[i]));
}

void gl_f32_to_f16_n(const float *src, void *dst, size_t n)
{
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        store_le16(d + 2 * i, gl_f32_to_f16(src[i]));
}
