/*
 * st-half.c: bf16 and fp16 conversions (src/ckpt/half.h) against
 * independent references: the value of each 16-bit pattern computed with
 * ldexp from its fields, and rounding decided by comparing exact distances
 * in double precision to the two neighbouring 16-bit values.  Where the
 * compiler has _Float16, its conversions are a third reference.
 */
#include <config.h>
#include "ckpt/half.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float flt(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* The value of a binary16 pattern from its fields. */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* The value of a bf16 pattern from its fields. */
static double bf16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -133);
    else
        v = ldexp(128 + m, e - 134);
    return s ? -v : v;
}

/* Round |x| to the nearer of two neighbouring patterns lo < hi (ties to
 * the even one); hi_value is what hi stands for in the comparison (for
 * an infinity, the value one ulp beyond the largest finite). */
static uint16_t nearest(double ax, uint16_t lo, double lo_value, uint16_t hi,
                        double hi_value)
{
    double dl = ax - lo_value, dh = hi_value - ax;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

/* Reference fp32 -> fp16: binary search for the largest positive finite
 * half not above |x|. */
static uint16_t ref_f32_to_f16(float x)
{
    if (isnan(x))
        return 0xffff;   /* any NaN; compared by class below */
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double ax = fabs((double)x);
    if (ax >= 65520.0)
        return sign | 0x7c00;
    int lo = 0, hi = 0x7bff;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f16_value((uint16_t)mid) <= ax)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (f16_value((uint16_t)lo) == ax || lo == 0x7bff)   /* [65504, 65520): down */
        return sign | (uint16_t)lo;
    return sign | nearest(ax, (uint16_t)lo, f16_value((uint16_t)lo), (uint16_t)(lo + 1),
                          f16_value((uint16_t)(lo + 1)));
}

/* Reference fp32 -> bf16: the two candidates are the truncation and the
 * next pattern up in magnitude. */
static uint16_t ref_f32_to_bf16(float x)
{
    if (isnan(x))
        return 0xffff;
    uint32_t u = bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint16_t lo = (uint16_t)((u & 0x7fffffff) >> 16);
    if (lo == 0x7f80)
        return sign | lo;                       /* infinity */
    uint16_t hi = lo + 1;
    double hv = hi == 0x7f80 ? ldexp(1, 128) : bf16_value(hi);
    return sign | nearest(fabs((double)x), lo, bf16_value(lo), hi, hv);
}

static int same16(uint16_t got, uint16_t want, int is_f16)
{
    int nan_got = is_f16 ? ((got & 0x7c00) == 0x7c00 && (got & 0x3ff))
                         : ((got & 0x7f80) == 0x7f80 && (got & 0x7f));
    if (want == 0xffff)
        return nan_got;
    return got == want;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

int main(void)
{
    plan(NO_PLAN);

    /* Widening: every pattern. */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double w16 = f16_value((uint16_t)h), wbf = bf16_value((uint16_t)h);
        float g16 = gl_f16_to_f32((uint16_t)h), gbf = gl_bf16_to_f32((uint16_t)h);
        bad16 += isnan(w16) ? !isnan(g16) : ((double)g16 != w16 || !signbit(g16) != !signbit(w16));
        badbf += isnan(wbf) ? !isnan(gbf) : ((double)gbf != wbf || !signbit(gbf) != !signbit(wbf));
    }
    is_int(bad16, 0, "fp16 -> fp32 exact for all 65536 patterns");
    is_int(badbf, 0, "bf16 -> fp32 exact for all 65536 patterns");

    /* Narrowing what widening made: the identity on every non-NaN pattern. */
    bad16 = badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (!isnan(f16_value((uint16_t)h)))
            bad16 += gl_f32_to_f16(gl_f16_to_f32((uint16_t)h)) != h;
        if (!isnan(bf16_value((uint16_t)h)))
            badbf += gl_f32_to_bf16(gl_bf16_to_f32((uint16_t)h)) != h;
    }
    is_int(bad16, 0, "fp32 -> fp16 returns every fp16 value unchanged");
    is_int(badbf, 0, "fp32 -> bf16 returns every bf16 value unchanged");

    /* Midpoints between neighbours round to the even one; one fp32 ulp
     * either side rounds to the nearer. */
    int badmid = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double a = f16_value((uint16_t)h), b = f16_value((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        badmid += gl_f32_to_f16(mid) != even;
        badmid += gl_f32_to_f16(nextafterf(mid, 0)) != h;
        badmid += gl_f32_to_f16(nextafterf(mid, INFINITY)) != h + 1;
        badmid += gl_f32_to_f16(-mid) != (0x8000 | even);
    }
    is_int(badmid, 0, "fp16 rounding at every midpoint: ties to even");
    badmid = 0;
    for (uint32_t h = 0; h < 0x7f7f; h++) {
        double a = bf16_value((uint16_t)h), b = bf16_value((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        badmid += gl_f32_to_bf16(mid) != even;
        badmid += gl_f32_to_bf16(nextafterf(mid, 0)) != h;
        badmid += gl_f32_to_bf16(nextafterf(mid, INFINITY)) != h + 1;
    }
    is_int(badmid, 0, "bf16 rounding at every midpoint: ties to even");

    /* Edges. */
    is_int(gl_f32_to_f16(65504.0f), 0x7bff, "fp16 max stays");
    is_int(gl_f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff, "just below 65520 rounds down");
    is_int(gl_f32_to_f16(65520.0f), 0x7c00, "65520 rounds to infinity");
    is_int(gl_f32_to_f16(-1e9f), 0xfc00, "-1e9 becomes -infinity");
    is_int(gl_f32_to_f16(ldexpf(1, -25)), 0, "2^-25 (a tie) rounds to zero");
    is_int(gl_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 1, "just above 2^-25 rounds to the least subnormal");
    is_int(gl_f32_to_f16(-0.0f), 0x8000, "-0 keeps its sign");
    ok(isnan(gl_f16_to_f32(gl_f32_to_f16(NAN))), "fp16 NaN stays NaN");
    ok(isnan(gl_bf16_to_f32(gl_f32_to_bf16(flt(0x7f800001)))), "bf16: a NaN whose payload is in the low bits stays NaN");
    is_int(gl_f32_to_bf16(flt(0x7f7fffff)), 0x7f80, "bf16: the largest float rounds to infinity");
    is_int(gl_f32_to_bf16(INFINITY), 0x7f80, "bf16: infinity");
    is_int(gl_f32_to_bf16(flt(0x00008000)), 0x0000, "bf16: a subnormal tie rounds to even (0)");
    is_int(gl_f32_to_bf16(flt(0x00018000)), 0x0002, "bf16: a subnormal tie rounds to even (2)");

    /* Random fp32 patterns against the references. */
    int n = 2000000, bad_f = 0, bad_b = 0, bad_native = 0;
    for (int i = 0; i < n; i++) {
        float x = flt(next32());
        bad_f += !same16(gl_f32_to_f16(x), ref_f32_to_f16(x), 1);
        bad_b += !same16(gl_f32_to_bf16(x), ref_f32_to_bf16(x), 0);
#ifdef __FLT16_MANT_DIG__
        if (!isnan(x)) {
            _Float16 y = (_Float16)x;
            uint16_t yb;
            memcpy(&yb, &y, 2);
            bad_native += gl_f32_to_f16(x) != yb;
        }
#endif
    }
    is_int(bad_f, 0, "fp32 -> fp16 agrees with the nearest-value reference on %d random patterns", n);
    is_int(bad_b, 0, "fp32 -> bf16 agrees with the nearest-value reference on %d random patterns", n);
#ifdef __FLT16_MANT_DIG__
    is_int(bad_native, 0, "fp32 -> fp16 agrees with the compiler's _Float16 conversion");
#else
    skip(1, "no _Float16 in this compiler");
#endif

    /* Arrays through unaligned little-endian buffers. */
    float in[5] = { 1.0f, -2.5f, 3.14159265f, 65504.0f, 1e-6f }, out[5];
    unsigned char buf[11];
    gl_f32_to_f16_n(in, buf + 1, 5);
    ok(buf[1] == 0x00 && buf[2] == 0x3c, "fp16 1.0 is bytes 00 3c");
    gl_f16_to_f32_n(buf + 1, out, 5);
    int same = 1;
    for (int i = 0; i < 5; i++)
        same &= out[i] == gl_f16_to_f32(gl_f32_to_f16(in[i]));
    ok(same, "fp16 array round trip through an unaligned buffer");
    gl_f32_to_bf16_n(in, buf + 1, 5);
    ok(buf[1] == 0x80 && buf[2] == 0x3f, "bf16 1.0 is bytes 80 3f");
    gl_bf16_to_f32_n(buf + 1, out, 5);
    same = 1;
    for (int i = 0; i < 5; i++)
        same &= out[i] == gl_bf16_to_f32(gl_f32_to_bf16(in[i]));
    ok(same, "bf16 array round trip through an unaligned buffer");
    return done_testing();
}
