/*
 * ops_cpu_moe.c: the CPU mixture-of-experts kernels of
 * ops_cpu_moe_impl.h, compiled once on float (what the CPU device runs)
 * and once on double (what the tests use for finite-difference checks).
 */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "base/log.h"
#include "device/ops_cpu.h"
#include "device/ops_cpu_moe.h"

#define real float
#define GL_K(name) gl_cpu_##name##_f32
#include "device/ops_cpu_moe_impl.h"
#undef GL_K
#undef real

#define real double
#define GL_K(name) gl_cpu_##name##_f64
#include "device/ops_cpu_moe_impl.h"
#undef GL_K
#undef real
