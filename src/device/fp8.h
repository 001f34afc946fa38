/*
 * fp8.h: the two 8-bit floating-point formats of Hopper's tensor cores,
 * exactly, on the host: the reference the CUDA kernels are checked against
 * and what the CPU back end computes with when FP8 training is asked for.
 *
 *            sign  exponent  mantissa  bias  largest finite  smallest subnormal
 *   E4M3      1       4         3        7        448             2^-9
 *   E5M2      1       5         2       15      57344             2^-16
 *
 * E4M3 (OCP's "E4M3FN") has no infinities: S.1111.111 is NaN and
 * S.1111.110 = 448 is the largest value.  E5M2 follows IEEE 754:
 * S.11111.00 is infinity, S.11111.xx (xx != 0) NaN.
 *
 * Conversion from float is the hardware's `cvt.rn.satfinite`: round to
 * the nearest representable value, ties to the even mantissa; magnitudes
 * above the largest finite value (infinity included) become that value
 * with their sign ("saturate to finite"); values that round to zero keep
 * their sign; NaN becomes NaN (0x7F in both formats).  Decoding is exact:
 * every FP8 value is a float.
 *
 * No MPI, no CUDA: plain C, usable from every room above device/.
 */
#ifndef GL_DEVICE_FP8_H
#define GL_DEVICE_FP8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GL_FP8_E4M3 = 0, GL_FP8_E5M2 = 1 } gl_fp8_format;

/* The largest finite magnitude: 448 (E4M3) or 57344 (E5M2). */
float gl_fp8_max(gl_fp8_format f);

/* float -> FP8 bits, as above. */
uint8_t gl_fp8_encode(float x, gl_fp8_format f);

/* FP8 bits -> float, exact. */
float gl_fp8_decode(uint8_t v, gl_fp8_format f);

/* The value x becomes once stored in FP8 with the given scale, as a
 * product of quantized operands sees it: x * scale (rounded to float),
 * rounded to FP8, decoded, times the dequantization scale 1 / scale
 * (rounded to float), in float arithmetic as the GPU does it. */
float gl_fp8_round_trip(float x, float scale, gl_fp8_format f);

/* q[i] = encode(x[i] * scale) for n elements; returns max |x[i]| (the amax
 * the next scale is computed from), NaN if any x[i] is NaN. */
float gl_fp8_quantize(uint8_t *q, const float *x, size_t n, float scale, gl_fp8_format f);

/* The same for x [rows, cols] row-major, writing the bytes in either or
 * both orientations: q[r * cols + c] (q [rows, cols]) and qt[c * rows + r]
 * (qt [cols, rows], the transpose); a NULL one is not written. */
float gl_fp8_quantize_2d(uint8_t *q, uint8_t *qt, const float *x, int rows, int cols,
                         float scale, gl_fp8_format f);

/* The same for [rows, cols] whose rows from xrows on are zero: x holds
 * the first xrows (<= rows) and nothing past them is read. */
float gl_fp8_quantize_2d_pad(uint8_t *q, uint8_t *qt, const float *x, int xrows, int rows,
                             int cols, float scale, gl_fp8_format f);

/* One amax folded into another: the larger, and NaN as soon as either is
 * NaN (a NaN, once seen, stays).  Amaxes are never negative. */
float gl_fp8_amax_fold(float acc, float a);

/*
 * Scale updates: Transformer Engine's formulas (Megatron's recipes), for n
 * tensors at once, in f32 with IEEE round-to-nearest division (the CUDA
 * back end divides the same way: bit for bit the same scales).  Each
 * writes scale[t] and scale_inv[t] = 1 / scale[t]; a scale that comes out
 * infinite (an amax below about fp8_max / FLT_MAX) becomes FLT_MAX.
 *
 * Delayed scaling (TE's amax_and_scale_update, DelayedScaling): hist is
 * [len, n] row-major.  Row 0 holds each tensor's amax of the step now
 * ending; rows 1 .. len-1 the amaxes of earlier steps, oldest first.  For
 * each tensor t, with h = column t of hist:
 *     a = max(h[0], ..., h[len-1])   (algo MAX; NaN entries are skipped,
 *                                     as fmaxf does)
 *       = h[0]                       (algo MOST_RECENT)
 *     scale[t] = fp8_max / 2^margin / a    when a is finite and > 0,
 *                left as it was             otherwise (no information);
 *     then h rolls one step: h'[i] = h[i+1] for i < len-1, h'[len-1] = h[0],
 *     and h'[0] = 0, the start of the next step's amax.
 * fp8_max / 2^margin is computed first (exact: a power-of-two scaling).
 *
 * Current scaling (TE's Float8CurrentScaling, Megatron's "tensorwise"):
 *     scale[t] = fp8_max / amax[t]   when amax[t] is finite and > 0,
 *                1                   otherwise.
 * No margin (Megatron passes none to this recipe).
 */
typedef enum { GL_FP8_AMAX_MAX = 0, GL_FP8_AMAX_MOST_RECENT = 1 } gl_fp8_amax_algo;

void gl_fp8_scale_delayed(float *hist, float *scale, float *scale_inv, int n, int len,
                          gl_fp8_amax_algo algo, int margin, gl_fp8_format f);
void gl_fp8_scale_current(const float *amax, float *scale, float *scale_inv, int n,
                          gl_fp8_format f);

/* fp8_max / 2^margin in f32: what delayed scaling maps the amax to. */
float gl_fp8_scaled_max(gl_fp8_format f, int margin);

/* Stops the job (gl_die) unless an FP8 product (ops.h's gemm_fp8) of these
 * shapes, formats and pointers can run on Hopper's tensor cores: m, n, k
 * and ldc multiples of 16, ldc >= n, A, B and C 16-byte aligned, not both
 * operands E5M2.  who names the caller in the message. */
void gl_fp8_gemm_check(const char *who, int m, int n, int k, int ldc, gl_fp8_format fa,
                       gl_fp8_format fb, const void *A, const void *B, const void *C);

/*
 * Block scaling (Megatron's --fp8-recipe blockwise: Transformer Engine's
 * Float8BlockScaling, DeepSeek-V3's recipe).  A tensor has one scale per
 * tile of GL_FP8_TILE values: 1 x 128 tiles (128 consecutive values of a
 * row: "1D", activations and gradients) or 128 x 128 blocks ("2D",
 * weights).  Tiles at a ragged edge are smaller.  Each tile's scale is
 * current (from its own amax, no history, no margin) and a power of two,
 * TE's default (compute_scale_from_amax with force_pow_2_scales and
 * epsilon 0):
 *     s = fp8_max / amax          (f32 division, round to nearest)
 *       = FLT_MAX                 when that overflows,
 *       = 1                       when amax is 0, infinite or NaN,
 *     then s rounded DOWN to a power of two (its mantissa bits cleared),
 * so the tile's largest value never saturates, and the dequantization
 * factor 1 / s is exact.  A tile's values are encode(x * s) as above.
 *
 * An FP8 operand of a product is [rows, k] with its tiles along k (the
 * product's inner dimension).  Its dequantization factors ("scale_inv",
 * 1 / s) are f32 in the layout cuBLASLt's block-scaling modes read
 * (Transformer Engine's "GEMM-ready" scales), with kt = ceil(k / 128):
 *     1D (VEC128):     [kt, pad4(rows)]:            the factor of row r's
 *                      tile j at j * pad4(rows) + r (one k-tile's rows
 *                      contiguous);
 *     2D (BLK128x128): [ceil(rows / 128), pad4(kt)]: block (b, j) at
 *                      b * pad4(kt) + j;
 * pad4(u) = u rounded up to a multiple of 4 (16-byte rows).
 * gl_fp8_tile_count() is the array's size, gl_fp8_tile_at() an index.
 */
enum { GL_FP8_TILE = 128 };

/* The power-of-two scale of a tile whose amax is a (above). */
float gl_fp8_tile_scale(float a, gl_fp8_format f);

/* Floats of the scale_inv array of a [rows, k] operand, 1D or 2D. */
size_t gl_fp8_tile_count(int rows, int k, int block2d);

/* Index of the scale_inv of element (r, c) of a [rows, k] operand. */
size_t gl_fp8_tile_at(int rows, int k, int r, int c, int block2d);

/*
 * Quantize x [rows, cols] (row-major f32) with block scales, into either
 * or both orientations (a NULL pair is not written):
 *   q [rows, cols] tiled along cols, scales q_sinv (operand [rows, cols]);
 *   qt [cols, rows], the transpose, tiled along rows of x, scales qt_sinv
 *      (operand [cols, rows]).
 * 1D (block2d 0): q's tiles are 1 x 128 pieces of x's rows, qt's 1 x 128
 * pieces of x's columns: the two orientations have different scales, and
 * may hold different bytes.  2D: 128 x 128 blocks of x; qt holds q's
 * bytes transposed and qt_sinv the same factors, in qt's layout.
 */
void gl_fp8_quantize_tiles(uint8_t *q, float *q_sinv, uint8_t *qt, float *qt_sinv,
                           const float *x, int rows, int cols, int block2d, gl_fp8_format f);

/*
 * 128 x 128 blocks of a tensor held in flat pieces: the distributed
 * optimizer's shards (--fp8-param-gather) cut a weight [rows, cols] at
 * any element, so a rank holds parts of blocks.  The piece [e0, e0 +
 * count) holds elements e = r cols + c, x[e - e0] being (r, c).  With
 * amax [gl_fp8_tile_count(rows, cols, 1)] zeroed and every piece's
 * gl_fp8_block_amax() folded into it (the ranks' arrays reduced with MAX),
 * gl_fp8_block_sinv() writes the factors and gl_fp8_quantize_block_range()
 * each piece's bytes of q, exactly those of gl_fp8_quantize_tiles(2D) of
 * the whole tensor (qt: q's bytes transposed).  amax has q_sinv's layout.
 */
void gl_fp8_block_amax(float *amax, const float *x, size_t e0, size_t count, int cols);
void gl_fp8_block_sinv(float *q_sinv, float *qt_sinv, const float *amax, int rows, int cols,
                       gl_fp8_format f);
void gl_fp8_quantize_block_range(uint8_t *q, const float *x, size_t e0, size_t count, int cols,
                                 const float *amax, gl_fp8_format f);

/* The value element (r, c) of a tiled operand stands for:
 * decode(q[r * k + c]) * sinv[gl_fp8_tile_at(rows, k, r, c, block2d)]. */
float gl_fp8_tile_value(const uint8_t *q, const float *sinv, int rows, int k, int r, int c,
                        int block2d, gl_fp8_format f);

#ifdef __cplusplus
}
#endif
#endif
