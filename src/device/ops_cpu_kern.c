/*
 * ops_cpu_kern.c: the CPU kernels of ops_cpu_impl.h, compiled once on
 * float (what the CPU device runs) and once on double (what the tests use
 * for finite-difference checks).
 */
#include <config.h>

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "base/log.h"
#include "base/philox.h"
#include "device/ops_cpu.h"

#define real float
#define GL_K(name) gl_cpu_##name##_f32
#define GL_K_GEMM cblas_sgemm
#include "device/ops_cpu_impl.h"
#undef GL_K_GEMM
#undef GL_K
#undef real

#define real double
#define GL_K(name) gl_cpu_##name##_f64
#define GL_K_GEMM cblas_dgemm
#include "device/ops_cpu_impl.h"
#undef GL_K_GEMM
#undef GL_K
#undef real
