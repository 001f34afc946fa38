/*
 * ops_cpu.h: the CPU back end's kernels on plain host arrays, and its
 * operation table.
 *
 * Every kernel exists twice, compiled from the same source
 * (ops_cpu_impl.h): gl_cpu_NAME_f32 on float, which the CPU device runs,
 * and gl_cpu_NAME_f64 on double, which the tests run to check gradients
 * against finite differences without float rounding in the way.
 */
#ifndef GL_DEVICE_OPS_CPU_H
#define GL_DEVICE_OPS_CPU_H

#include <stddef.h>
#include <stdint.h>
#include "device/ops.h"

#define real float
#define GL_K(name) gl_cpu_##name##_f32
#include "device/ops_cpu_proto.h"
#undef GL_K
#undef real

#define real double
#define GL_K(name) gl_cpu_##name##_f64
#include "device/ops_cpu_proto.h"
#undef GL_K
#undef real

/* The CPU device's operation table (ops_cpu.c) and the state behind
 * d->impl: bytes allocated through ops->alloc now and at most. */
extern const gl_ops gl_ops_cpu;

typedef struct {
    size_t in_use, peak;
} gl_cpu_state;

#endif
