/*
 * ops-test.h: helpers shared by the C tests of the CPU back end's ops
 * (t/ops-cpu.c, t/ops-moe.c, t/ops-blockattn.c).
 *
 * Random arrays in double, relative errors, float copies in the device's
 * memory, and central finite differences of a scalar loss.  Everything is
 * static inline, so that a test that does not use a helper gets no
 * warning for it.  The random stream is one per test program: define
 * OPS_TEST_SEED before including this header to start it elsewhere.
 * Each test keeps its own tolerances.
 */
#ifndef GL_T_OPS_TEST_H
#define GL_T_OPS_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "device/ops.h"

#ifndef OPS_TEST_SEED
#define OPS_TEST_SEED 0x13198a2e03707344ULL
#endif

/* Step of the central finite differences, in double. */
#define FD_STEP 1e-5

static uint64_t rng_state = OPS_TEST_SEED;

/* splitmix64: uniform in [-1, 1). */
static inline double rnd1(void)
{
    uint64_t z = gl_mix64(rng_state += GL_GOLDEN64);
    return (double)(z >> 11) / 9007199254740992.0 * 2 - 1;
}

/* n values uniform in [-scale, scale), malloc'ed. */
static inline double *rnd(size_t n, double scale)
{
    double *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * rnd1();
    return x;
}

static inline double *dzeros(size_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

static inline int32_t *izeros(size_t n)
{
    return calloc(n ? n : 1, sizeof(int32_t));
}

static inline double *dcopy(const double *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* ||a - b|| / ||b|| (or ||a - b|| when b is zero). */
static inline double relerr(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The same, a float result against a double reference. */
static inline double relerr_f(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A float copy of x in the device's memory (host memory on the CPU). */
static inline float *dev_f(gl_dev *d, const double *x, size_t n)
{
    float *y = d->ops->alloc(d, (n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = (float)x[i];
    return y;
}

/* x rounded to float and back, so a double reference sees the very
 * inputs the float operation saw. */
static inline double *rounded(const double *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = (float)x[i];
    return y;
}

/* Central finite differences of f with respect to each element of x,
 * compared with grad: ||grad - fd|| / ||fd||. */
typedef double (*loss_fn)(void *ctx);
static inline double fd_relerr(loss_fn f, void *ctx, double *x, size_t n,
                               const double *grad)
{
    double *fd = malloc((n ? n : 1) * sizeof *fd);
    for (size_t i = 0; i < n; i++) {
        double save = x[i];
        x[i] = save + FD_STEP;
        double lp = f(ctx);
        x[i] = save - FD_STEP;
        double lm = f(ctx);
        x[i] = save;
        fd[i] = (lp - lm) / (2 * FD_STEP);
    }
    double e = relerr(grad, fd, n);
    free(fd);
    return e;
}

#endif /* GL_T_OPS_TEST_H */
