/* fp8.c: E4M3 and E5M2, exactly (see fp8.h). */
#include <config.h>
#include "device/fp8.h"

#include <math.h>

/* A format's shape: mantissa bits, exponent bias, the exponent of its
 * smallest normal binade, its largest finite value and that value's code. */
typedef struct {
    int mbits, bias, emin;
    double max;
    uint8_t max_code;
} fmt;

static const fmt formats[2] = {
    [GL_FP8_E4M3] = {.mbits = 3, .bias = 7, .emin = -6, .max = 448.0, .max_code = 0x7E},
    [GL_FP8_E5M2] = {.mbits = 2, .bias = 15, .emin = -14, .max = 57344.0, .max_code = 0x7B},
};

float gl_fp8_max(gl_fp8_format f)
{
    return (float)formats[f].max;
}

/* The exponent of a's binade (a = 1.xxx * 2^e), not below emin: the
 * subnormals share the smallest normal binade's spacing. */
static int binade(double a, int emin)
{
    int e;
    frexp(a, &e);               /* a = m * 2^e, m in [0.5, 1) */
    return e - 1 < emin ? emin : e - 1;
}

uint8_t gl_fp8_encode(float x, gl_fp8_format f)
{
    const fmt *F = &formats[f];
    if (isnan(x))
        return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    double a = fabs((double)x);
    if (a > F->max)                             /* saturate to finite */
        return sign | F->max_code;

    /* In its binade a value is k * 2^(e - mbits) with k an integer:
     * rounding k to the nearest integer, ties to even, is the format's
     * rounding.  k may round up to 2^(mbits+1), the next binade's first
     * value, which is representable too; a <= max keeps it finite. */
    int e = binade(a, F->emin);
    double k = nearbyint(ldexp(a, F->mbits - e));
    if (k == 0)
        return sign;                            /* underflow keeps the sign */
    if (k >= ldexp(1.0, F->mbits + 1)) {        /* carried into the next binade */
        k /= 2;
        e++;
    }
    int mant_one = 1 << F->mbits;
    if (k < mant_one)                           /* subnormal: exponent field 0 */
        return sign | (uint8_t)k;
    return sign | (uint8_t)((e + F->bias) << F->mbits) | (uint8_t)((int)k - mant_one);
}

float gl_fp8_decode(uint8_t v, gl_fp8_format f)
{
    const fmt *F = &formats[f];
    int field = (v & 0x7F) >> F->mbits, mant = v & ((1 << F->mbits) - 1);
    int top = (1 << (7 - F->mbits)) - 1;        /* the all-ones exponent field */
    double s = v & 0x80 ? -1.0 : 1.0;
    if (f == GL_FP8_E4M3 && field == top && mant == (1 << F->mbits) - 1)
        return NAN;
    if (f == GL_FP8_E5M2 && field == top)
        return mant ? NAN : (float)(s * INFINITY);
    if (field == 0)
        return (float)(s * ldexp(mant, F->emin - F->mbits));
    return (float)(s * ldexp((1 << F->mbits) + mant, field - F->bias - F->mbits));
}

float gl_fp8_round_trip(float x, float scale, gl_fp8_format f)
{
    float scale_inv = 1.0f / scale;
    return gl_fp8_decode(gl_fp8_encode(x * scale, f), f) * scale_inv;
}

float gl_fp8_quantize(uint8_t *q, const float *x, size_t n, float scale, gl_fp8_format f)
{
    float amax = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = isnan(a) || a > amax ? a : amax;     /* a NaN, once seen, stays */
        q[i] = gl_fp8_encode(x[i] * scale, f);
    }
    return amax;
}
