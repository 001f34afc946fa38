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
 * round trip and the amax the quantizer returns.  Then the two
 * orientations of gl_fp8_quantize_2d, and the scale updates of both
 * recipes against values worked out by hand (history, margin, zero, NaN
 * and infinite amaxes, overflow of the scale, the roll of the history).
 * Block scaling: the power-of-two tile scales, the k-tile-major layout of
 * the factors, and gl_fp8_quantize_tiles in both orientations (1D and 2D,
 * ragged edges) against a tile-by-tile recomputation with the scalar
 * functions.
 */
#include <config.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- quantization in both orientations ---- */

static void check_quantize_2d(void)
{
    enum { R = 5, C = 7 };
    float x[R * C];
    uint8_t flat[R * C], q[R * C], qt[C * R];
    for (int i = 0; i < R * C; i++)
        x[i] = (float)((i * 37) % 23 - 11) * 0.37f;
    x[8] = -1000.0f;                            /* saturates at scale 2 in E4M3 */
    float want = gl_fp8_quantize(flat, x, R * C, 2.0f, GL_FP8_E4M3);
    float got = gl_fp8_quantize_2d(q, qt, x, R, C, 2.0f, GL_FP8_E4M3);
    int same = memcmp(q, flat, sizeof q) == 0, trans = 1;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            trans &= qt[c * R + r] == flat[r * C + c];
    ok(same && trans && got == want && got == 1000.0f,
       "quantize_2d: q row-major, qt its transpose, the same bytes and amax (%g)", got);
    ok(q[8] == 0xFE, "quantize_2d: -2000 saturates to -448 (0xFE)");
    memset(q, 0xAA, sizeof q);
    got = gl_fp8_quantize_2d(NULL, qt, x, R, C, 2.0f, GL_FP8_E4M3);
    ok(got == want && q[0] == 0xAA, "quantize_2d: q NULL writes only qt");

    /* padded with zero rows: rows 0-2 are x's, 3-4 zero (x's rows 3-4
     * hold -1000 and others, which must not be read) */
    float xz[R * C];
    uint8_t pq[R * C], pqt[C * R];
    memcpy(xz, x, sizeof xz);
    for (int i = 3 * C; i < R * C; i++)
        xz[i] = 0.0f;
    want = gl_fp8_quantize_2d(q, qt, xz, R, C, 2.0f, GL_FP8_E4M3);
    got = gl_fp8_quantize_2d_pad(pq, pqt, x, 3, R, C, 2.0f, GL_FP8_E4M3);
    ok(got == want && memcmp(pq, q, sizeof q) == 0 && memcmp(pqt, qt, sizeof qt) == 0 &&
       pq[4 * C] == 0 && pqt[R - 1] == 0,
       "quantize_2d_pad: 3 rows of x and 2 zero rows give the bytes and amax (%g) of the "
       "zero-padded copy", got);

    ok(gl_fp8_amax_fold(2, 3) == 3 && gl_fp8_amax_fold(3, 2) == 3 &&
       isnan(gl_fp8_amax_fold(NAN, 5)) && isnan(gl_fp8_amax_fold(5, NAN)) &&
       gl_fp8_amax_fold(0, 0) == 0,
       "amax_fold: the larger; NaN wins either way round");
}

/* ---- scale updates, against values worked out by hand ---- */

static void check_scale_delayed(void)
{
    /* three tensors, history of 4, [len, n] row-major: row 0 is the step
     * now ending, rows 1..3 earlier steps, oldest first */
    enum { N = 3, L = 4 };
    float hist[L * N] = {
        /* row 0 */ 2.0f, 0.0f, 8.0f,
        /* row 1 */ 1.0f, 0.0f, NAN,
        /* row 2 */ 7.0f, 0.0f, 1.0f,
        /* row 3 */ 0.5f, 0.0f, 3.0f,
    };
    float scale[N] = {1, 5, 1}, inv[N];
    gl_fp8_scale_delayed(hist, scale, inv, N, L, GL_FP8_AMAX_MAX, 0, GL_FP8_E4M3);
    /* t0: max(2, 1, 7, 0.5) = 7 -> 448 / 7 = 64 exactly */
    ok(scale[0] == 64.0f && inv[0] == 1.0f / 64,
       "delayed max: amax 7 over the history gives scale 448/7 = 64 (%g)", scale[0]);
    ok(scale[1] == 5.0f && inv[1] == 0.2f,
       "delayed: an all-zero history keeps the old scale (5), inverse 1/5");
    ok(scale[2] == 56.0f,
       "delayed max: a NaN entry is skipped (max(8, 1, 3) = 8 -> 56; got %g)", scale[2]);
    /* the roll: h'[i] = h[i+1] (i < 3), h'[3] = h[0], then h'[0] = 0 */
    float want[L * N] = {
        0.0f, 0.0f, 0.0f,
        7.0f, 0.0f, 1.0f,
        0.5f, 0.0f, 3.0f,
        2.0f, 0.0f, 8.0f,
    };
    ok(memcmp(hist, want, sizeof want) == 0,
       "delayed: the history rolls (oldest dropped, newest to the end, row 0 zeroed)");

    /* margin 2: 448 / 4 / 7 = 16; E5M2: 57344 / 7 = 8192 */
    float h2[L * N] = {7, 2, 0.25f, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    float s2[N] = {1, 1, 1}, i2[N];
    gl_fp8_scale_delayed(h2, s2, i2, N, L, GL_FP8_AMAX_MAX, 2, GL_FP8_E4M3);
    ok(s2[0] == 16.0f && s2[1] == 112.0f / 2 && s2[2] == 112.0f,
       "delayed, margin 2: 448 / 2^2 / amax (7 -> 16, 2 -> 56, 1 -> 112)");
    float h3[N] = {7, 0.001f, 3e-36f}, s3[N] = {1, 1, 1}, i3[N];
    gl_fp8_scale_delayed(h3, s3, i3, N, 1, GL_FP8_AMAX_MAX, 0, GL_FP8_E5M2);
    ok(s3[0] == 8192.0f && s3[1] == 57344.0f / 0.001f && s3[2] == FLT_MAX &&
       i3[2] == 1.0f / FLT_MAX && h3[0] == 0 && h3[1] == 0,
       "delayed, E5M2, history of 1: 57344/amax, FLT_MAX where it overflows, history zeroed");

    /* most_recent: row 0 alone; infinity or NaN there keeps the scale */
    float h4[2 * N] = {4, INFINITY, NAN, 100, 100, 100};
    float s4[N] = {3, 3, 3}, i4[N];
    gl_fp8_scale_delayed(h4, s4, i4, N, 2, GL_FP8_AMAX_MOST_RECENT, 0, GL_FP8_E4M3);
    ok(s4[0] == 112.0f && s4[1] == 3 && s4[2] == 3 && i4[1] == 1.0f / 3,
       "delayed most_recent: 448/4 from row 0 alone; Inf or NaN there keeps the scale");
    ok(h4[0] == 0 && h4[3] == 4 && isinf(h4[4]) && isnan(h4[5]),
       "delayed most_recent: the history still rolls");
    float h5[2] = {INFINITY, 2};
    float s5 = 3, i5;
    gl_fp8_scale_delayed(h5, &s5, &i5, 1, 2, GL_FP8_AMAX_MAX, 0, GL_FP8_E4M3);
    ok(s5 == 3, "delayed max: an infinite amax in the history keeps the scale");
    ok(gl_fp8_scaled_max(GL_FP8_E4M3, 3) == 56.0f &&
       gl_fp8_scaled_max(GL_FP8_E5M2, 0) == 57344.0f,
       "scaled_max: fp8_max / 2^margin");
}

static void check_scale_current(void)
{
    float amax[6] = {7, 0, NAN, INFINITY, 448, 1e-37f}, s[6], inv[6];
    gl_fp8_scale_current(amax, s, inv, 6, GL_FP8_E4M3);
    ok(s[0] == 64 && s[1] == 1 && s[2] == 1 && s[3] == 1 && s[4] == 1 &&
       s[5] == FLT_MAX && inv[0] == 1.0f / 64 && inv[1] == 1,
       "current: 448/amax; 1 for a zero, NaN or infinite amax; FLT_MAX on overflow");
    gl_fp8_scale_current(amax, s, inv, 1, GL_FP8_E5M2);
    ok(s[0] == 8192, "current E5M2: 57344 / 7 = 8192");
    float odd = 3.0f;
    gl_fp8_scale_current(&odd, s, inv, 1, GL_FP8_E4M3);
    ok(s[0] == 448.0f / 3.0f && inv[0] == 1.0f / (448.0f / 3.0f),
       "current: the f32 quotient and its f32 reciprocal (%.9g, %.9g)", s[0], inv[0]);
}

/* ---- block scaling ---- */

static void check_tile_scale(void)
{
    ok(gl_fp8_tile_scale(7, GL_FP8_E4M3) == 64 && gl_fp8_tile_scale(3, GL_FP8_E4M3) == 128 &&
       gl_fp8_tile_scale(448, GL_FP8_E4M3) == 1 && gl_fp8_tile_scale(500, GL_FP8_E4M3) == 0.5f,
       "tile scale: 448/amax rounded down to a power of two (7 -> 64, 3 -> 128, 500 -> 0.5)");
    ok(gl_fp8_tile_scale(7, GL_FP8_E5M2) == 8192 && gl_fp8_tile_scale(5, GL_FP8_E5M2) == 8192,
       "tile scale E5M2: 57344/7 = 8192 stays, 57344/5 = 11468.8 -> 8192");
    ok(gl_fp8_tile_scale(0, GL_FP8_E4M3) == 1 && gl_fp8_tile_scale(NAN, GL_FP8_E4M3) == 1 &&
       gl_fp8_tile_scale(INFINITY, GL_FP8_E4M3) == 1,
       "tile scale: 1 for a zero, NaN or infinite amax");
    ok(gl_fp8_tile_scale(1e-40f, GL_FP8_E4M3) == 0x1p127f,
       "tile scale: an overflowing quotient is FLT_MAX, down to 2^127");
    ok(gl_fp8_tile_count(5, 300, 0) == 24 && gl_fp8_tile_count(8, 300, 0) == 24 &&
       gl_fp8_tile_count(300, 5, 1) == 12 && gl_fp8_tile_at(5, 300, 3, 260, 0) == 19 &&
       gl_fp8_tile_at(300, 300, 299, 130, 1) == 9,
       "tile layout: 1D [k-tiles, pad4(rows)], 2D [row blocks, pad4(k-blocks)]");
}

/* x [R, C] quantized by tiles against each tile recomputed with
 * gl_fp8_quantize on a copy of its values: bytes and factors. */
static int tiles_match(const float *x, int R, int C, int block2d, gl_fp8_format f)
{
    const int T = GL_FP8_TILE;
    uint8_t *q = malloc((size_t)R * C), *qt = malloc((size_t)R * C);
    float *qs = malloc(gl_fp8_tile_count(R, C, block2d) * sizeof(float));
    float *qts = malloc(gl_fp8_tile_count(C, R, block2d) * sizeof(float));
    float *tile = malloc((size_t)T * T * sizeof(float));
    uint8_t *tq = malloc((size_t)T * T);
    gl_fp8_quantize_tiles(q, qs, qt, qts, x, R, C, block2d, f);
    int good = 1;
    /* o = 0: q's tiles (rows of x), o = 1: qt's (columns of x) */
    for (int o = 0; o < 2; o++) {
        int tr = block2d ? T : o ? T : 1, tc = block2d ? T : o ? 1 : T;
        for (int r0 = 0; r0 < R; r0 += tr)
            for (int c0 = 0; c0 < C; c0 += tc) {
                int n = 0;
                for (int r = r0; r < r0 + tr && r < R; r++)
                    for (int c = c0; c < c0 + tc && c < C; c++)
                        tile[n++] = x[(size_t)r * C + c];
                float a = 0;
                for (int i = 0; i < n; i++)
                    a = gl_fp8_amax_fold(a, fabsf(tile[i]));
                float s = gl_fp8_tile_scale(a, f);
                gl_fp8_quantize(tq, tile, (size_t)n, s, f);
                n = 0;
                for (int r = r0; r < r0 + tr && r < R; r++)
                    for (int c = c0; c < c0 + tc && c < C; c++, n++) {
                        uint8_t got = o ? qt[(size_t)c * R + r] : q[(size_t)r * C + c];
                        float inv = o ? qts[gl_fp8_tile_at(C, R, c, r, block2d)]
                                      : qs[gl_fp8_tile_at(R, C, r, c, block2d)];
                        good &= got == tq[n] && inv == 1.0f / s;
                    }
            }
    }
    free(q), free(qt), free(qs), free(qts), free(tile), free(tq);
    return good;
}

static void check_quantize_tiles(void)
{
    enum { R = 200, C = 300 };                  /* ragged edges both ways */
    float *x = malloc((size_t)R * C * sizeof *x);
    uint64_t h = 12345;
    for (int i = 0; i < R * C; i++) {
        h = gl_mix64(h + (uint64_t)i);
        /* magnitudes over 2^-20 .. 2^12: tiles with very different amaxes */
        x[i] = ldexpf((float)(h >> 40) / (float)(1 << 24) - 0.5f, (int)(h % 33) - 20);
    }
    x[5] = 0;
    for (int c = 128; c < 256; c++)             /* one all-zero 1D tile of row 7 */
        x[(size_t)7 * C + c] = 0;
    x[(size_t)150 * C + 10] = 1e30f;            /* one block with a huge amax */
    for (int f = 0; f < 2; f++) {
        ok(tiles_match(x, R, C, 0, (gl_fp8_format)f),
           "quantize_tiles 1D (%s): 1x128 tiles of rows in q, of columns in qt, each its own "
           "power-of-two scale", f ? "E5M2" : "E4M3");
        ok(tiles_match(x, R, C, 1, (gl_fp8_format)f),
           "quantize_tiles 2D (%s): 128x128 blocks, qt the transposed bytes, the same factors",
           f ? "E5M2" : "E4M3");
    }
    uint8_t *q = malloc((size_t)R * C), *qt = malloc((size_t)R * C);
    float *qs = malloc(gl_fp8_tile_count(R, C, 1) * sizeof(float));
    float *qts = malloc(gl_fp8_tile_count(C, R, 1) * sizeof(float));
    gl_fp8_quantize_tiles(q, qs, qt, qts, x, R, C, 1, GL_FP8_E4M3);
    int trans = 1;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            trans &= q[(size_t)r * C + c] == qt[(size_t)c * R + r] &&
                     gl_fp8_tile_value(q, qs, R, C, r, c, 1, GL_FP8_E4M3) ==
                     gl_fp8_tile_value(qt, qts, C, R, c, r, 1, GL_FP8_E4M3);
    ok(trans, "quantize_tiles 2D: W and W^T stand for the same values");
    float v = gl_fp8_tile_value(q, qs, R, C, 150, 10, 1, GL_FP8_E4M3);
    ok(fabsf(v - 1e30f) <= 1e30f * 0x1p-4f,
       "quantize_tiles: a tile's largest value does not saturate (1e30 -> %g)", v);
    free(q), free(qt), free(qs), free(qts), free(x);
}

/* x [R, C] quantized in 128 x 128 blocks from the flat pieces cut at
 * cuts[0 .. ncut) (gl_fp8_block_amax of each, gl_fp8_block_sinv, then
 * gl_fp8_quantize_block_range of each) against gl_fp8_quantize_tiles 2D
 * of the whole: q's bytes, and both layouts' factors. */
static int pieces_match(const float *x, int R, int C, const size_t *cuts, int ncut,
                        gl_fp8_format f)
{
    size_t n = (size_t)R * C, nq = gl_fp8_tile_count(R, C, 1), nt = gl_fp8_tile_count(C, R, 1);
    uint8_t *q = malloc(n), *qt = malloc(n), *p = malloc(n);
    float *qs = calloc(nq, sizeof(float)), *qts = calloc(nt, sizeof(float));
    float *ps = calloc(nq, sizeof(float)), *pts = calloc(nt, sizeof(float));
    float *amax = calloc(nq, sizeof(float));
    gl_fp8_quantize_tiles(q, qs, qt, qts, x, R, C, 1, f);
    for (int i = 0; i <= ncut; i++) {           /* pieces in reverse: order is free */
        size_t b = i == 0 ? n : cuts[ncut - i], a = i == ncut ? 0 : cuts[ncut - i - 1];
        gl_fp8_block_amax(amax, x + a, a, b - a, C);
    }
    gl_fp8_block_sinv(ps, pts, amax, R, C, f);
    for (int i = 0; i <= ncut; i++) {
        size_t a = i == 0 ? 0 : cuts[i - 1], b = i == ncut ? n : cuts[i];
        gl_fp8_quantize_block_range(p + a, x + a, a, b - a, C, amax, f);
    }
    int good = memcmp(p, q, n) == 0 && memcmp(ps, qs, nq * sizeof(float)) == 0 &&
               memcmp(pts, qts, nt * sizeof(float)) == 0;
    free(q), free(qt), free(p), free(qs), free(qts), free(ps), free(pts), free(amax);
    return good;
}

static void check_block_pieces(void)
{
    enum { R = 200, C = 300 };
    float *x = malloc((size_t)R * C * sizeof *x);
    uint64_t h = 777;
    for (int i = 0; i < R * C; i++) {
        h = gl_mix64(h + (uint64_t)i);
        x[i] = ldexpf((float)(h >> 40) / (float)(1 << 24) - 0.5f, (int)(h % 33) - 20);
    }
    /* the largest value of block (1, 0) in the piece after the first cut,
     * so that the block's other pieces alone would give another scale */
    x[(size_t)130 * C + 5] = 3e4f;
    size_t cuts[] = {(size_t)129 * C + 77, (size_t)130 * C + 6, (size_t)150 * C + 299};
    for (int f = 0; f < 2; f++)
        ok(pieces_match(x, R, C, cuts, 3, (gl_fp8_format)f),
           "block pieces (%s): blocks quantized from flat pieces cut inside rows and blocks "
           "give quantize_tiles 2D's bytes and factors", f ? "E5M2" : "E4M3");
    ok(pieces_match(x, R, C, cuts, 0, GL_FP8_E4M3),
       "block pieces: one piece, the whole tensor, gives quantize_tiles 2D's");
    free(x);
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

    check_quantize_2d();
    check_scale_delayed();
    check_scale_current();
    check_tile_scale();
    check_quantize_tiles();
    check_block_pieces();
    return done_testing();
}
