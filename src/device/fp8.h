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

#ifdef __cplusplus
}
#endif
#endif
