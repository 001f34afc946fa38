/*
 * fp8.c: src/device/fp8.c's E4M3 and E5M2 against exact arithmetic.
 *
 * The oracle is independent of the code under test: the list of every
 * finite value of a format, built from the definition (sign, exponent
 * field, mantissa, bias; subnormals at field 0), and a brute-force search
 * for the nearest one, ties going to the code with the even mantissa.
 * Checked: every code decodes to its value and encodes back; every
 * midpoint between neighbours rounds to the even one, and a hair either
 * side of it to the nearer one; saturation, infinities, NaN, signed zero,
 * underflow; a million random floats over the whole range; the scaled
 * round trip and the amax the quantizer returns.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/hash.h"
#include "device/fp8.h"
#include "tap.h"

/* The format from its definition: value of code c, NAN for NaN codes. */
static double defined_value(uint8_t c, int mbits, int bias, int e4m3)
{
    int ebits = 7 - mbits, field = (c & 0x7F) >> mbits, mant = c & ((1 << mbits) - 1);
    double s = c & 0x80 ? -1.0 : 1.0;
    int top = (1 << ebits) - 1;
    if (e4m3 && field == top && mant == (1 << mbits) - 1)
        return NAN;
    if (!e4m3 && field == top)
        return mant ? NAN : s * INFINITY;
    if (field == 0)
        return s * mant * pow(2.0, 1 - bias - mbits);
    return s * (1.0 + mant / (double)(1 << mbits)) * pow(2.0, field - bias);
}

typedef struct {
    const char *name;
    gl_fp8_format f;
    int mbits, bias, e4m3;
    double max;
    double val[256];
} fmt;

static fmt formats[2] = {
    {"E4M3", GL_FP8_E4M3, 3, 7, 1, 448.0, {0}},
    {"E5M2", GL_FP8_E5M2, 2, 15, 0, 57344.0, {0}},
};

/* Brute force: the code nearest to x among the finite ones; ties to the
 * even code (mantissa LSB 0); beyond the largest value, saturate. */
static uint8_t nearest(const fmt *F, double x)
{
    if (isnan(x))
        return 0x7F;
    int neg = signbit(x);
    double a = fabs(x);
    if (a > F->max)
        a = F->max;
    int best = -1;
    double bestd = INFINITY;
    for (int c = 0; c < 128; c++) {             /* non-negative codes */
        double v = F->val[c];
        if (!isfinite(v))
            continue;
        double d = fabs(a - v);
        if (d < bestd || (d == bestd && (c & 1) == 0)) {
            best = c;
            bestd = d;
        }
    }
    return (uint8_t)(best | (neg ? 0x80 : 0));
}

static int same_code(uint8_t a, uint8_t b)
{
    return a == b;
}

static void check_format(fmt *F)
{
    for (int c = 0; c < 256; c++)
        F->val[c] = defined_value((uint8_t)c, F->mbits, F->bias, F->e4m3);

    /* decode: every code */
    int bad = 0, finite = 0;
    for (int c = 0; c < 256; c++) {
        double want = F->val[c];
        float got = gl_fp8_decode((uint8_t)c, F->f);
        if (isnan(want) ? !isnan(got) : (double)got != want || !signbit(got) != !signbit(want))
            bad++;
        finite += isfinite(want);
    }
    ok(bad == 0, "%s: all 256 codes decode to their defined values", F->name);
    is_int(finite, F->e4m3 ? 254 : 248, "%s: finite codes", F->name);
    is_double(gl_fp8_max(F->f), F->max, 0, "%s: largest finite value", F->name);
    is_double(gl_fp8_decode(0x01, F->f), F->e4m3 ? ldexp(1, -9) : ldexp(1, -16), 0,
              "%s: smallest subnormal", F->name);

    /* encode(decode(c)) == c for every finite code, both zeros included */
    bad = 0;
    for (int c = 0; c < 256; c++)
        if (isfinite(F->val[c]) && gl_fp8_encode((float)F->val[c], F->f) != c)
            bad++;
    ok(bad == 0, "%s: every finite value encodes back to its code", F->name);

    /* midpoints between neighbours: ties to even; just off them, nearer */
    int ties = 0, near = 0, n = 0;
    for (int c = 0; c < 127; c++) {
        double lo = F->val[c], hi = F->val[c + 1];
        if (!isfinite(lo) || !isfinite(hi))
            continue;
        double mid = (lo + hi) / 2;             /* exact in double; a float too */
        for (int s = 0; s < 2; s++) {
            double sg = s ? -1 : 1;
            uint8_t even = (uint8_t)(((c & 1) ? c + 1 : c) | (s ? 0x80 : 0));
            ties += same_code(gl_fp8_encode((float)(sg * mid), F->f), even);
            near += same_code(gl_fp8_encode(nextafterf((float)(sg * mid), 0), F->f),
                              (uint8_t)(c | (s ? 0x80 : 0)));
            near += same_code(gl_fp8_encode(nextafterf((float)(sg * mid), (float)(sg * INFINITY)), F->f),
                              (uint8_t)((c + 1) | (s ? 0x80 : 0)));
            n++;
        }
    }
    is_int(ties, n, "%s: %d midpoints round to the even neighbour", F->name, n);
    is_int(near, 2 * n, "%s: one float either side of a midpoint rounds to the nearer", F->name);

    /* saturation, specials, signed zero, underflow */
    uint8_t maxc = F->e4m3 ? 0x7E : 0x7B;
    ok(gl_fp8_encode(INFINITY, F->f) == maxc && gl_fp8_encode(-INFINITY, F->f) == (0x80 | maxc),
       "%s: +-infinity saturate to +-%g", F->name, F->max);
    ok(gl_fp8_encode((float)(F->max * 1.06), F->f) == maxc &&
       gl_fp8_encode(1e30f, F->f) == maxc && gl_fp8_encode(-1e30f, F->f) == (0x80 | maxc),
       "%s: beyond the largest value saturates", F->name);
    ok(isnan(gl_fp8_decode(gl_fp8_encode(NAN, F->f), F->f)), "%s: NaN stays NaN", F->name);
    ok(gl_fp8_encode(-0.0f, F->f) == 0x80 && gl_fp8_encode(0.0f, F->f) == 0x00,
       "%s: zeros keep their sign", F->name);
    double sub = F->val[1];
    ok(gl_fp8_encode((float)(sub / 2), F->f) == 0x00 &&
       gl_fp8_encode((float)(-sub / 2), F->f) == 0x80 &&
       gl_fp8_encode(nextafterf((float)(sub / 2), 1.0f), F->f) == 0x01 &&
       gl_fp8_encode(1e-30f, F->f) == 0x00,
       "%s: half the smallest subnormal rounds to (signed) zero, a hair more to it", F->name);

    /* a million random floats over the whole range, against brute force */
    uint64_t st = 0x5eedULL + (uint64_t)F->f;
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint64_t z = gl_mix64(st += GL_GOLDEN64);
        /* log-uniform magnitude over [2^-20, 2^17), random sign */
        double e = -20.0 + 37.0 * (double)(z >> 11) / 9007199254740992.0;
        float x = (float)((z & 1 ? -1 : 1) * exp2(e));
        if (gl_fp8_encode(x, F->f) != nearest(F, x)) {
            if (bad++ < 3)
                diag("%s: %.9g encodes to 0x%02x, nearest is 0x%02x", F->name, x,
                     gl_fp8_encode(x, F->f), nearest(F, x));
        }
    }
    ok(bad == 0, "%s: 1,000,000 random floats encode to the nearest value (%d wrong)",
       F->name, bad);
}

int main(void)
{
    plan(NO_PLAN);
    check_format(&formats[0]);
    check_format(&formats[1]);

    /* scaled round trip: a power-of-two scale is exact; another goes
     * through float products as the GPU's do */
    ok(gl_fp8_round_trip(3.0f, 16.0f, GL_FP8_E4M3) == 3.0f,
       "round trip: 3 at scale 16 (48 is an E4M3 value) comes back exact");
    ok(gl_fp8_round_trip(0.3f, 100.0f, GL_FP8_E4M3) ==
       gl_fp8_decode(gl_fp8_encode(0.3f * 100.0f, GL_FP8_E4M3), GL_FP8_E4M3) * (1.0f / 100.0f),
       "round trip: encode(x * s), decoded, times the float 1/s");
    ok(gl_fp8_round_trip(1000.0f, 1.0f, GL_FP8_E4M3) == 448.0f,
       "round trip: saturates at 448 / scale");

    float x[5] = {0.5f, -7.5f, 3.0f, -0.0f, 1.0f};
    uint8_t q[5];
    float amax = gl_fp8_quantize(q, x, 5, 2.0f, GL_FP8_E5M2);
    ok(amax == 7.5f, "quantize returns the amax of the unscaled input (%g)", amax);
    ok(gl_fp8_decode(q[1], GL_FP8_E5M2) == -16.0f,
       "quantize: -7.5 x 2 = -15, midway between -14 (odd mantissa) and -16, gives -16");
    x[2] = NAN;
    ok(isnan(gl_fp8_quantize(q, x, 5, 2.0f, GL_FP8_E5M2)),
       "quantize: a NaN in the input makes the amax NaN");
    return done_testing();
}
