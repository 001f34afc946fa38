/*
 * half.h: 16-bit floating point formats <-> fp32, bit-exact.
 *
 * bf16 is the top half of an fp32 word (8 exponent bits, 7 mantissa bits);
 * fp16 is IEEE binary16 (5 exponent bits, 10 mantissa bits, subnormals).
 * Widening to fp32 is exact for both.  Narrowing rounds to nearest, ties
 * to even, as IEEE 754 and PyTorch do; values beyond the format's range
 * become infinities; NaNs stay NaNs (quiet, sign kept).
 */
#ifndef GL_CKPT_HALF_H
#define GL_CKPT_HALF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

float gl_bf16_to_f32(uint16_t h);
uint16_t gl_f32_to_bf16(float x);
float gl_f16_to_f32(uint16_t h);
uint16_t gl_f32_to_f16(float x);

/* Arrays; src and dst may be unaligned byte buffers in little-endian
 * order (as in a safetensors file). */
void gl_bf16_to_f32_n(const void *src, float *dst, size_t n);
void gl_f16_to_f32_n(const void *src, float *dst, size_t n);
void gl_f32_to_bf16_n(const float *src, void *dst, size_t n);
void gl_f32_to_f16_n(const float *src, void *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
