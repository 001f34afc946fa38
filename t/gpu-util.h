/*
 * gpu-util.h: helpers shared by the GPU test programs (t/ops-cuda.c,
 * t/attn-cudnn.c), which compare the CUDA back end against the CPU
 * reference back end on the same numbers.
 *
 * Contract:
 *  - The test program opens both devices and stores them in G (the CUDA
 *    device) and C (the CPU reference) before it calls any buffer helper;
 *    the helpers use them and never open or close a device.
 *  - Random numbers come from one xorshift64 stream: the program seeds it
 *    with gpu_seed() first thing in main, so each test draws the same
 *    numbers on every run.
 *  - Every helper that returns host memory returns a gl_malloc()ed array
 *    that the caller frees with free(); device buffers are freed with the
 *    device's ops->free.  Out of memory ends the program (gl_malloc).
 *  - Values are bf16 on the GPU ("act" buffers, uint16_t) and fp32 on the
 *    CPU; rand_bf draws values that bf16 represents exactly, so both
 *    devices see the same numbers.
 */
#ifndef GL_T_GPU_UTIL_H
#define GL_T_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "device/ops.h"

extern gl_dev *G, *C;       /* the GPU and the CPU reference */

/* ---- numbers ---- */

/* Restart the random stream at a nonzero seed. */
void gpu_seed(uint64_t seed);

/* Uniform in [0, 1), from the stream. */
double urand(void);

/* fp32 -> bf16, rounding to nearest even; any NaN gives the quiet NaN. */
uint16_t f2bf(float f);

/* bf16 -> fp32 (exact). */
float bf2f(uint16_t b);

/* f rounded to the nearest bf16 value, as fp32. */
float round_bf(float f);

/* n bf16-representable values uniform in [lo, hi). */
float *rand_bf(size_t n, float lo, float hi);

/* ---- buffers on both devices ---- */

/* A new GPU act (bf16) buffer holding the n values h rounded to bf16. */
void *g_act(const float *h, size_t n);

/* A new GPU fp32 buffer of n elements, a copy of h (zeros when h is NULL). */
float *g_f32(const float *h, size_t n);

/* A new CPU buffer of n floats, a copy of h (zeros when h is NULL). */
float *c_buf(const float *h, size_t n);

/* Fill bytes of the GPU buffer p with 0xFF (NaN in bf16 and fp32), so an
 * element an operation fails to write shows up. */
void g_poison(void *p, size_t bytes);

/* GPU act buffer of n elements -> new host fp32 array. */
float *dl_act(const void *p, size_t n);

/* GPU fp32 buffer of n elements -> new host fp32 array. */
float *dl_f32(const float *p, size_t n);

/* Frees a test's buffers: the NULL-terminated list dev on the GPU, then
 * the NULL-terminated list host with free(); either list may be NULL.
 * Called as free_bufs((void *[]){gx, gy, NULL}, (void *[]){x, y, NULL}),
 * so no buffer may be NULL itself. */
void free_bufs(void *const *dev, void *const *host);

/* ---- comparison ---- */

/*
 * One TAP test, named what: rows x cols elements at row strides ldg (got)
 * and ldw (want) pass when every |got - want| <= atol max|want| +
 * rtol |want| and nothing is NaN on one side only.  max|want| is raised to
 * floor where it is smaller (0: no floor), and to 1 (the scale of the
 * tests' inputs) where the reference is all zeros.  Prints the worst
 * element on failure, and the error on success when the environment
 * variable verbose_env is set.  Returns 1 when it passed.
 */
int cmp2d_env(const char *verbose_env, const char *what, const float *got,
              long ldg, const float *want, long ldw, long rows, long cols,
              double rtol, double atol, double floor);

#endif
