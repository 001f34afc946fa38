/*
 * nccl_inc.h: <nccl.h> and <cuda_runtime.h> for C files of gridlm.
 * nccl.h declares a few functions as f() rather than f(void), which
 * -Wstrict-prototypes flags; the warning is silenced for it alone.
 * Include only under GL_HAVE_NCCL.
 */
#ifndef GL_COMM_NCCL_INC_H
#define GL_COMM_NCCL_INC_H
#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif
