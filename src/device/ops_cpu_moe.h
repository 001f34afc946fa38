/*
 * ops_cpu_moe.h: the CPU back end's mixture-of-experts kernels on plain
 * host arrays, each twice: gl_cpu_NAME_f32 on float, which the CPU device
 * runs (ops_cpu.c's table hands them its buffers), and gl_cpu_NAME_f64 on
 * double, which the tests run against finite differences.
 */
#ifndef GL_DEVICE_OPS_CPU_MOE_H
#define GL_DEVICE_OPS_CPU_MOE_H

#include <stddef.h>
#include <stdint.h>
#include "device/ops.h"

#define real float
#define GL_K(name) gl_cpu_##name##_f32
#include "device/ops_cpu_moe_proto.h"
#undef GL_K
#undef real

#define real double
#define GL_K(name) gl_cpu_##name##_f64
#include "device/ops_cpu_moe_proto.h"
#undef GL_K
#undef real

#endif
