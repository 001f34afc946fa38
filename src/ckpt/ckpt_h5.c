/*
 * ckpt_h5.c: what the HDF5 checkpoint writer and reader need from HDF5
 * and MPI besides the slab geometry (ckpt_h5.h): HDF5 kept quiet, its
 * error text, and the ranks agreeing on a status and its message.
 */
#include <config.h>
#include "ckpt/ckpt_h5.h"

#include <stdio.h>

/* HDF5 prints its error stack on stderr by default; gridlm reports the
 * innermost message itself, in its own line. */
void gl_ckpt_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

static herr_t h5_first_desc(unsigned n, const H5E_error2_t *e, void *arg)
{
    gl_ckpt_h5_why *out = arg;
    if (n == 0 && e->desc)
        snprintf(out->text, sizeof out->text, "%s", e->desc);
    return 0;
}

/* The most specific message on HDF5's error stack, then clear it. */
gl_ckpt_h5_why gl_ckpt_h5_msg(void)
{
    gl_ckpt_h5_why w = { "unknown HDF5 error" };
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_first_desc, &w);
    H5Eclear2(H5E_DEFAULT);
    return w;
}

/* Every rank of comm ends with the same status: the lowest failing rank's
 * message is broadcast to all (into err). */
int gl_ckpt_agree(MPI_Comm comm, int status, gl_error *err)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = status == GL_CKPT_OK ? size : rank, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == size)
        return GL_CKPT_OK;
    gl_error unwanted = { "" };         /* every rank takes part, err or not */
    gl_error *e = err ? err : &unwanted;
    MPI_Bcast(e->text, sizeof e->text, MPI_CHAR, first, comm);
    return GL_CKPT_ERR;
}
