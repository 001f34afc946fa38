/* fp8.c: E4M3 and E5M2, exactly (see fp8.h). */
#include <config.h>
#include "device/fp8.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/log.h"

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

float gl_fp8_amax_fold(float acc, float a)
{
    return isnan(a) || a > acc ? a : acc;       /* a NaN acc stays: a > NaN is false */
}

float gl_fp8_quantize(uint8_t *q, const float *x, size_t n, float scale, gl_fp8_format f)
{
    float amax = 0;
    for (size_t i = 0; i < n; i++) {
        amax = gl_fp8_amax_fold(amax, fabsf(x[i]));
        q[i] = gl_fp8_encode(x[i] * scale, f);
    }
    return amax;
}

float gl_fp8_quantize_2d(uint8_t *q, uint8_t *qt, const float *x, int rows, int cols,
                         float scale, gl_fp8_format f)
{
    return gl_fp8_quantize_2d_pad(q, qt, x, rows, rows, cols, scale, f);
}

float gl_fp8_quantize_2d_pad(uint8_t *q, uint8_t *qt, const float *x, int xrows, int rows,
                             int cols, float scale, gl_fp8_format f)
{
    float amax = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float v = r < xrows ? x[(size_t)r * cols + c] : 0.0f;
            uint8_t b = gl_fp8_encode(v * scale, f);
            amax = gl_fp8_amax_fold(amax, fabsf(v));
            if (q)
                q[(size_t)r * cols + c] = b;
            if (qt)
                qt[(size_t)c * rows + r] = b;
        }
    return amax;
}

float gl_fp8_scaled_max(gl_fp8_format f, int margin)
{
    return ldexpf(gl_fp8_max(f), -margin);
}

/* The scale that maps amax a to top, given that a is finite and > 0: an
 * f32 quotient, FLT_MAX where it overflows. */
static float scale_for(float top, float a)
{
    float s = top / a;
    return isinf(s) ? FLT_MAX : s;
}

void gl_fp8_scale_delayed(float *hist, float *scale, float *scale_inv, int n, int len,
                          gl_fp8_amax_algo algo, int margin, gl_fp8_format f)
{
    float top = gl_fp8_scaled_max(f, margin);
    for (int t = 0; t < n; t++) {
        float *h = hist + t;                    /* h[i * n]: entry i of column t */
        float newest = h[0], a = 0;
        for (int i = 0; i < len; i++) {
            float v = h[(size_t)i * n];
            if (!isnan(v) && v > a)             /* fmaxf's rule: NaN skipped */
                a = v;
        }
        if (algo == GL_FP8_AMAX_MOST_RECENT)
            a = newest;
        if (isfinite(a) && a > 0)
            scale[t] = scale_for(top, a);
        scale_inv[t] = 1.0f / scale[t];
        for (int i = 0; i + 1 < len; i++)       /* roll: drop h[1], h[0] to the end */
            h[(size_t)i * n] = h[(size_t)(i + 1) * n];
        h[(size_t)(len - 1) * n] = newest;
        h[0] = 0;
    }
}

void gl_fp8_scale_current(const float *amax, float *scale, float *scale_inv, int n,
                          gl_fp8_format f)
{
    float top = gl_fp8_max(f);
    for (int t = 0; t < n; t++) {
        float a = amax[t];
        scale[t] = isfinite(a) && a > 0 ? scale_for(top, a) : 1.0f;
        scale_inv[t] = 1.0f / scale[t];
    }
}

void gl_fp8_gemm_check(const char *who, int m, int n, int k, int ldc, gl_fp8_format fa,
                       gl_fp8_format fb, const void *A, const void *B, const void *C)
{
    if (fa == GL_FP8_E5M2 && fb == GL_FP8_E5M2)
        gl_die("%s: both operands are E5M2; FP8 tensor cores multiply E4M3 by E4M3 "
               "or E4M3 and E5M2 in either order, never E5M2 by E5M2 (gradients in "
               "E5M2 meet weights or activations in E4M3)", who);
    if (m <= 0 || n <= 0 || k <= 0 || m % 16 || n % 16 || k % 16 || ldc % 16 || ldc < n)
        gl_die("%s: m=%d n=%d k=%d ldc=%d; FP8 products need m, n, k and ldc positive "
               "multiples of 16 (16-byte rows of FP8) and ldc >= n: pad the layer's "
               "sizes or the tokens of a micro-batch", who, m, n, k, ldc);
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) % 16)
        gl_die("%s: A=%p B=%p C=%p; FP8 products need 16-byte aligned operands", who,
               A, B, C);
}

/* ---- block scaling (fp8.h: "Block scaling") ---- */

float gl_fp8_tile_scale(float a, gl_fp8_format f)
{
    if (!(a > 0) || isinf(a))                   /* 0, NaN or infinite: no information */
        return 1.0f;
    float s = scale_for(gl_fp8_max(f), a);
    uint32_t bits;                              /* down to a power of two: keep the */
    memcpy(&bits, &s, sizeof bits);             /* sign and exponent bits only */
    bits &= 0xFF800000u;
    memcpy(&s, &bits, sizeof s);
    return s;
}

static int tiles(int count)
{
    return (count + GL_FP8_TILE - 1) / GL_FP8_TILE;
}

static int pad4(int u)
{
    return (u + 3) / 4 * 4;
}

size_t gl_fp8_tile_count(int rows, int k, int block2d)
{
    if (block2d)
        return (size_t)tiles(rows) * pad4(tiles(k));
    return (size_t)tiles(k) * pad4(rows);
}

size_t gl_fp8_tile_at(int rows, int k, int r, int c, int block2d)
{
    if (block2d)
        return (size_t)(r / GL_FP8_TILE) * pad4(tiles(k)) + c / GL_FP8_TILE;
    return (size_t)(c / GL_FP8_TILE) * pad4(rows) + r;
}

float gl_fp8_tile_value(const uint8_t *q, const float *sinv, int rows, int k, int r, int c,
                        int block2d, gl_fp8_format f)
{
    return gl_fp8_decode(q[(size_t)r * k + c], f) * sinv[gl_fp8_tile_at(rows, k, r, c, block2d)];
}

void gl_fp8_block_amax(float *amax, const float *x, size_t e0, size_t count, int cols)
{
    for (size_t i = 0; i < count; i++) {
        size_t e = e0 + i;
        float *a = amax + gl_fp8_tile_at(0, cols, (int)(e / cols), (int)(e % cols), 1);
        *a = gl_fp8_amax_fold(*a, fabsf(x[i]));
    }
}

void gl_fp8_block_sinv(float *q_sinv, float *qt_sinv, const float *amax, int rows, int cols,
                       gl_fp8_format f)
{
    for (int r0 = 0; r0 < rows; r0 += GL_FP8_TILE)
        for (int c0 = 0; c0 < cols; c0 += GL_FP8_TILE) {
            size_t at = gl_fp8_tile_at(rows, cols, r0, c0, 1);
            float inv = 1.0f / gl_fp8_tile_scale(amax[at], f);
            q_sinv[at] = inv;
            qt_sinv[gl_fp8_tile_at(cols, rows, c0, r0, 1)] = inv;
        }
}

void gl_fp8_quantize_block_range(uint8_t *q, const float *x, size_t e0, size_t count, int cols,
                                 const float *amax, gl_fp8_format f)
{
    for (size_t i = 0; i < count; i++) {
        size_t e = e0 + i;
        float a = amax[gl_fp8_tile_at(0, cols, (int)(e / cols), (int)(e % cols), 1)];
        q[i] = gl_fp8_encode(x[i] * gl_fp8_tile_scale(a, f), f);
    }
}

/* The amax of x's rectangle [r0, r1) x [c0, c1) (x has cols columns). */
static float rect_amax(const float *x, int cols, int r0, int r1, int c0, int c1)
{
    float a = 0;
    for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++)
            a = gl_fp8_amax_fold(a, fabsf(x[(size_t)r * cols + c]));
    return a;
}

/* The rectangle quantized with scale s into q ([rows, cols]) and / or qt
 * ([cols, rows]); NULL ones are skipped. */
static void rect_encode(uint8_t *q, uint8_t *qt, const float *x, int rows, int cols, int r0,
                        int r1, int c0, int c1, float s, gl_fp8_format f)
{
    for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++) {
            uint8_t b = gl_fp8_encode(x[(size_t)r * cols + c] * s, f);
            if (q)
                q[(size_t)r * cols + c] = b;
            if (qt)
                qt[(size_t)c * rows + r] = b;
        }
}

static int min_int(int a, int b) { return a < b ? a : b; }

void gl_fp8_quantize_tiles(uint8_t *q, float *q_sinv, uint8_t *qt, float *qt_sinv,
                           const float *x, int rows, int cols, int block2d, gl_fp8_format f)
{
    const int T = GL_FP8_TILE;
    if (block2d) {
        for (int r0 = 0; r0 < rows; r0 += T)
            for (int c0 = 0; c0 < cols; c0 += T) {
                int r1 = min_int(r0 + T, rows), c1 = min_int(c0 + T, cols);
                float s = gl_fp8_tile_scale(rect_amax(x, cols, r0, r1, c0, c1), f);
                rect_encode(q, qt, x, rows, cols, r0, r1, c0, c1, s, f);
                if (q)
                    q_sinv[gl_fp8_tile_at(rows, cols, r0, c0, 1)] = 1.0f / s;
                if (qt)
                    qt_sinv[gl_fp8_tile_at(cols, rows, c0, r0, 1)] = 1.0f / s;
            }
        return;
    }
    if (q)      /* 1 x 128 pieces of rows */
        for (int r = 0; r < rows; r++)
            for (int c0 = 0; c0 < cols; c0 += T) {
                int c1 = min_int(c0 + T, cols);
                float s = gl_fp8_tile_scale(rect_amax(x, cols, r, r + 1, c0, c1), f);
                rect_encode(q, NULL, x, rows, cols, r, r + 1, c0, c1, s, f);
                q_sinv[gl_fp8_tile_at(rows, cols, r, c0, 0)] = 1.0f / s;
            }
    if (qt)     /* 128 x 1 pieces of columns */
        for (int c = 0; c < cols; c++)
            for (int r0 = 0; r0 < rows; r0 += T) {
                int r1 = min_int(r0 + T, rows);
                float s = gl_fp8_tile_scale(rect_amax(x, cols, r0, r1, c, c + 1), f);
                rect_encode(NULL, qt, x, rows, cols, r0, r1, c, c + 1, s, f);
                qt_sinv[gl_fp8_tile_at(cols, rows, c, r0, 0)] = 1.0f / s;
            }
}
