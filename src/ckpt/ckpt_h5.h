/*
 * ckpt_h5.h: what the HDF5 checkpoint writer (ckpt_write.c) and reader
 * (ckpt_read.c) share; private to src/ckpt.
 *
 *   - ckpt_slab.c, the geometry of a gl_ckpt_tensor: the checks of its
 *     description, its element counts, its held elements as runs of the
 *     full tensor's linear indices, their HDF5 selection, and the HDF5
 *     path of its name;
 *   - ckpt_h5.c, HDF5 kept quiet, HDF5's error text, and the ranks of a
 *     communicator agreeing on a status and its message.
 */
#ifndef GL_CKPT_CKPT_H5_H
#define GL_CKPT_CKPT_H5_H

#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>

#include "base/error.h"
#include "ckpt/ckpt.h"

/* ---- the geometry of a slab (ckpt_slab.c) ---- */

/* "model/layers.3.attention.wq" -> "/model/layers/3/attention/wq" into
 * out (n bytes).  Returns 0 when the name is empty, too long or has an
 * empty component. */
int gl_ckpt_h5_path(const char *name, char *out, size_t n);

/* Elements of the full tensor, of this rank's slab, and of what this
 * rank holds (a part of its slab, or all of it). */
long gl_ckpt_numel(const gl_ckpt_tensor *t);
long gl_ckpt_slab_numel(const gl_ckpt_tensor *t);
long gl_ckpt_held(const gl_ckpt_tensor *t);

/* Visit the held elements as runs of consecutive linear indices of the
 * full tensor: fn(arg, values, n, index of the first). */
typedef void (*gl_ckpt_run_fn)(void *arg, const float *x, long n, long first);
void gl_ckpt_each_run(const gl_ckpt_tensor *t, gl_ckpt_run_fn fn, void *arg);

/* Select the held elements in the file space, and make the matching
 * memory space (the slab with its row stride, or the packed part). */
hid_t gl_ckpt_select_held(const gl_ckpt_tensor *t, hid_t fspace);

/* A tensor description that makes sense on its own (for_read: a buffer
 * is needed even where a writer would write nothing); GL_CKPT_OK, or
 * GL_CKPT_ERR with err. */
int gl_ckpt_check_tensor(const gl_ckpt_tensor *t, int for_read, gl_error *err);

/* ---- HDF5 and the ranks (ckpt_h5.c) ---- */

/* HDF5 prints its error stack on stderr by default; gridlm reports the
 * innermost message itself, in its own line: call before HDF5 calls. */
void gl_ckpt_h5_quiet(void);

/* The most specific message on HDF5's error stack (which is cleared). */
typedef struct { char text[512]; } gl_ckpt_h5_why;
gl_ckpt_h5_why gl_ckpt_h5_msg(void);

/* Collective: every rank of comm ends with the same status, and err
 * (may be NULL) with the lowest failing rank's message. */
int gl_ckpt_agree(MPI_Comm comm, int status, gl_error *err);

#endif
