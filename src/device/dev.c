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

void gl_dropout_check(const gl_dropout *dp, int n, int w, const char *what)
{
    if (!dp)
        gl_die("%s: no dropout parameters (NULL)", what);
    if (!(dp->p >= 0 && dp->p < 1))
        gl_die("%s: dropout probability %g is not in [0, 1)", what,
               (double)dp->p);
    if (dp->site >= 16 || dp->layer >= (1u << 28))
        gl_die("%s: dropout site %u of layer %u is out of range (sites < 16, "
               "layers < 2^28)", what, dp->site, dp->layer);
    if (n < 0 || w < 0 || dp->row0 < 0 || dp->col0 < 0 ||
        dp->col0 + w > dp->width)
        gl_die("%s: a [%d, %d] piece at row %ld, column %ld does not fit in "
               "rows of width %ld", what, n, w, dp->row0, dp->col0,
               dp->width);
}

void gl_attn_dropout_check(const gl_attn_dropout *dp, int Hq, const char *what)
{
    if (!(dp->p >= 0 && dp->p < 1))
        gl_die("%s: attention dropout probability %g is not in [0, 1)", what,
               (double)dp->p);
    if (dp->site >= 16 || dp->layer >= (1u << 28))
        gl_die("%s: dropout site %u of layer %u is out of range (sites < 16, "
               "layers < 2^28)", what, dp->site, dp->layer);
    if (Hq < 0 || dp->b0 < 0 || dp->h0 < 0 || dp->h0 + Hq > dp->heads)
        gl_die("%s: heads %ld .. %ld (from sample %ld) are not among %ld heads",
               what, dp->h0, dp->h0 + Hq - 1, dp->b0, dp->heads);
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
