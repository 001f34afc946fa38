/*
 * dev.c: opening and closing compute devices.  The CPU device is always
 * here; the CUDA entry points live in cuda/ when this build has CUDA and
 * are answered below ("none") when it does not.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "device/ops_cpu.h"

gl_dev *gl_dev_open_cpu(void)
{
    gl_dev *d = gl_calloc(1, sizeof *d);
    d->ops = &gl_ops_cpu;
    d->act = GL_DT_F32;
    d->act_bytes = sizeof(float);     /* gl_dtype_size(GL_DT_F32) */
    d->comm = GL_COMM_MPI;            /* host memory: MPI reaches it */
    d->stream = NULL;
    d->index = -1;
    snprintf(d->name, sizeof d->name, "cpu");
    d->impl = gl_calloc(1, sizeof(gl_cpu_state));
    return d;
}

void gl_dev_close(gl_dev *d)
{
    if (d)
        d->ops->close(d);
}

#ifndef GL_HAVE_CUDA
gl_dev *gl_dev_open_cuda(int ordinal)
{
    (void)ordinal;
    return NULL;
}

int gl_cuda_device_count(void)
{
    return 0;
}
#endif
