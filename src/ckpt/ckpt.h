/*
 * ckpt.h: checkpoints as one HDF5 file of full logical tensors.
 *
 * A checkpoint is DIR/iter_0000100.h5 (Megatron's iteration numbering):
 * every tensor is stored at its full, unsharded shape, so a checkpoint
 * written under one layout (TP, PP, DP, virtual pipeline, sequence
 * parallel, distributed optimizer) loads under any other: each rank reads
 * the hyperslab its own shard covers.
 *
 * Saving (collective over a communicator, parallel HDF5 over MPI-IO):
 *   1. every rank describes the same list of tensors, in the same order,
 *      each with its own slab (offset, count) and local buffer; ranks that
 *      hold a replica of a slab another rank writes set writes = 0;
 *   2. rank 0 creates DIR/iter_0000100.h5.tmp.XXXXXX exclusively
 *      (base/file.h: a random name, never through a link) and gives its
 *      name to the others; every rank opens it with HDF5 and checks that
 *      the name still leads to the file rank 0 created (same inode); each
 *      tensor is written with a checksum attribute, then a "complete"
 *      attribute last;
 *   3. every rank fsyncs, rank 0 renames the file to DIR/iter_0000100.h5
 *      -- only if no file has that name: a checkpoint is never written
 *      over, whoever wrote it -- then replaces
 *      DIR/latest_checkpointed_iteration.txt (the iteration as text,
 *      Megatron's tracker file) through a temporary file and a rename.  A
 *      crash at any point leaves the previous checkpoint and the tracker
 *      that names it untouched; the temporary a killed save leaves behind
 *      is removed by gl_ckpt_clean_temps (the next gridlm-train --save
 *      calls it), one that fails or is stopped (gl_die, SIGTERM without
 *      --exit-signal-handler) removes its own.
 *
 * Loading: gl_ckpt_open() takes a file or a directory (whose tracker file
 * names the file; a directory that holds checkpoint files but no
 * readable tracker is refused, naming the newest complete checkpoint and
 * how to resume from it), checks that the file is whole (HDF5 refuses a
 * truncated file; the "complete" mark must be there; with GL_CKPT_VERIFY
 * every tensor's checksum is recomputed, the reading shared out over the
 * communicator), and refuses a bad one with a message that names it and
 * the previous checkpoint in its directory.  Reads are independent: each
 * rank opens the file read-only on its own (no collective calls), so a
 * pipeline stage reads only its own layers, in any order.
 *
 * Checksums: per tensor, the sum modulo 2^64 of mix(bits(x_i) ^ mix(i))
 * over all elements i of the full tensor (mix: the SplitMix64 finaliser,
 * a bijection of 64-bit words).  Unlike a CRC it does not depend on the
 * order the elements are visited in, so any sharding computes it from its
 * own slabs and one MPI_Allreduce; a changed element always changes the
 * sum, and several changed elements escape with probability ~2^-64.  HDF5's
 * own Fletcher32 filter is not used: filters need chunked datasets, which
 * parallel HDF5 1.10 writes only with restrictions and much slower.  HDF5
 * metadata (object headers, superblock) carries HDF5's own checksums
 * (file format of HDF5 1.8 and later is requested).
 *
 * Names: a tensor's logical name ("model/layers.3.attention.wq.weight")
 * becomes the HDF5 path /model/layers/3/attention/wq/weight ('/' and '.'
 * both separate groups, so h5dump -H shows a tree); the logical name is
 * kept in the dataset's "name" attribute, and its position in the save in
 * "index".  Conventions for the training loop, <param> being the model's
 * parameter name (src/model/model.h, e.g. "embedding.weight"):
 *   model/<param>              fp32 master weights
 *   optim/exp_avg/<param>      AdamW first moments
 *   optim/exp_avg_sq/<param>   AdamW second moments
 * and root attributes "iteration", "consumed_train_samples", "config"
 * (the run's configuration as JSON with gl_config's field names; ckpt/hf.h
 * lists the keys export-hf needs), scheduler and RNG state.  Attribute
 * values must be the same on every rank; per-rank state (RNG streams)
 * belongs in a tensor with one row per rank.
 *
 * Errors: functions return GL_CKPT_OK (0) or GL_CKPT_ERR (-1) with the
 * message in err, their last argument (base/error.h: one line, naming the
 * file and what to do; err may be NULL).  Collective calls return the
 * same status, and the same message, on every rank.  gl_ckpt_save,
 * gl_ckpt_save_file, gl_ckpt_begin and gl_ckpt_open empty err first.  The
 * caller decides whether to die (gl_die) or carry on.
 */
#ifndef GL_CKPT_CKPT_H
#define GL_CKPT_CKPT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    GL_CKPT_OK = 0,
    GL_CKPT_ERR = -1,
    GL_CKPT_NONE = 1,      /* gl_ckpt_open: a directory with no checkpoint yet */
};

#define GL_CKPT_TRACKER "latest_checkpointed_iteration.txt"
#define GL_CKPT_FORMAT "gridlm-checkpoint-1"
#define GL_CKPT_MAXNAME 256

/* One tensor and this rank's part of it.  Storage is fp32. */
typedef struct gl_ckpt_tensor {
    const char *name;   /* logical name, e.g. "model/layers.3.attention.wq.weight" */
    int ndim;           /* 1 or 2 */
    long shape[2];      /* full logical shape (rows, cols) */
    long offset[2];     /* this rank's slab: first row (and column) */
    long count[2];      /* this rank's slab: rows (and columns); 0 rows: none */
    long ld;            /* 2-D: elements between rows of data (0: count[1]) */
    float *data;        /* host buffer holding (save) or receiving (read) the slab */
    int writes;         /* save: 1 when this rank writes its slab, 0 for a replica */
    long first, nelem;  /* nelem > 0: only elements [first, first + nelem) of the
                         * slab, counted row-major, packed in data (ld unused):
                         * a distributed optimizer's contiguous shard of a
                         * flattened local piece, which may start and end
                         * mid-row.  nelem 0: the whole slab. */
} gl_ckpt_tensor;

/* Root attributes: a scalar (n <= 1) or an array of n numbers, or text. */
typedef enum { GL_CKPT_I64 = 0, GL_CKPT_F64, GL_CKPT_STR } gl_ckpt_attr_type;

typedef struct gl_ckpt_attr {
    const char *key;
    gl_ckpt_attr_type type;
    long long i;             /* GL_CKPT_I64 scalar */
    double f;                /* GL_CKPT_F64 scalar */
    const char *s;           /* GL_CKPT_STR */
    int n;                   /* > 1: an array, read from iv or fv */
    const long long *iv;
    const double *fv;
} gl_ckpt_attr;

typedef struct gl_ckpt_save_opts {
    /* Called on every rank after tensor i of n is written (progress
     * reports; tests use it to stretch a save and kill it midway). */
    void (*after_tensor)(void *arg, int i, int n);
    void *arg;
} gl_ckpt_save_opts;

typedef struct gl_ckpt_save_stats {
    char path[4096];         /* the final file name */
    double bytes;            /* tensor bytes in the file */
    double seconds;          /* wall time of the whole save, rename included */
} gl_ckpt_save_stats;

/* DIR/iter_%07ld.h5 into buf (size n). */
void gl_ckpt_file_name(char *buf, size_t n, const char *dir, long iteration);

/* Collective over comm: write DIR/iter_%07ld.h5 and point the tracker at
 * it.  DIR is created when missing.  "iteration" and "format" attributes
 * are added here; attrs must not repeat them.  opts and stats may be NULL. */
int gl_ckpt_save(MPI_Comm comm, const char *dir, long iteration,
                 const gl_ckpt_tensor *tensors, int ntensors,
                 const gl_ckpt_attr *attrs, int nattrs,
                 const gl_ckpt_save_opts *opts, gl_ckpt_save_stats *stats,
                 gl_error *err);

/* The same, collective, into the file PATH alone (through
 * PATH.tmp.XXXXXX and a rename; no tracker file; PATH must not exist):
 * for tools that write one checkpoint. */
int gl_ckpt_save_file(MPI_Comm comm, const char *path, long iteration,
                      const gl_ckpt_tensor *tensors, int ntensors,
                      const gl_ckpt_attr *attrs, int nattrs,
                      const gl_ckpt_save_opts *opts, gl_ckpt_save_stats *stats,
                      gl_error *err);

/* The same in steps, for callers that produce one tensor at a time (a
 * converter that should not hold a whole model in memory).  All three
 * are collective; each tensor is checked as in gl_ckpt_save.  begin
 * creates the temporary file (file NULL: DIR/iter_%07ld.h5 and the
 * tracker, else FILE alone); put writes one tensor; finish writes the
 * attributes and the complete mark and publishes the file.  After a
 * failed put, put and finish fail again with its message, and finish
 * removes the temporary file; abort removes it without finishing. */
typedef struct gl_ckpt_writer gl_ckpt_writer;
int gl_ckpt_begin(MPI_Comm comm, const char *dir, const char *file, long iteration,
                  gl_ckpt_writer **w, gl_error *err);
int gl_ckpt_put(gl_ckpt_writer *w, const gl_ckpt_tensor *t, gl_error *err);
int gl_ckpt_finish(gl_ckpt_writer *w, const gl_ckpt_attr *attrs, int nattrs,
                   gl_ckpt_save_stats *stats, gl_error *err);
void gl_ckpt_abort(gl_ckpt_writer *w);

/* ---- --async-save (ckpt_async.c) ----
 *
 * gl_ckpt_save_async (collective) copies this rank's slabs and the
 * attributes, so the caller may change its buffers as soon as it returns,
 * and starts a thread that runs gl_ckpt_save on a duplicate of comm.
 * The caller's thread may go on using MPI on other communicators: this
 * needs MPI initialised with MPI_THREAD_MULTIPLE; at a lower level the
 * save runs at once in the caller's thread (gl_ckpt_async_threaded says
 * which).  HDF5 is not thread-safe: nothing else may call HDF5 until
 * gl_ckpt_async_wait (collective) has joined the writer; it returns the
 * save's status (message in err) and its stats, and frees the handle.
 * gl_ckpt_save_async itself does not fail today (the save's failure is
 * wait's); it takes err for the day it can.  Wait for one save before
 * starting the next. */
typedef struct gl_ckpt_async gl_ckpt_async;
int gl_ckpt_save_async(MPI_Comm comm, const char *dir, long iteration,
                       const gl_ckpt_tensor *tensors, int ntensors,
                       const gl_ckpt_attr *attrs, int nattrs, gl_ckpt_async **out,
                       gl_error *err);
int gl_ckpt_async_threaded(const gl_ckpt_async *a);
int gl_ckpt_async_wait(gl_ckpt_async *a, gl_ckpt_save_stats *stats, gl_error *err);

/* ---- reading ---- */

typedef struct gl_ckpt gl_ckpt;

enum { GL_CKPT_VERIFY = 1 };

typedef struct gl_ckpt_info {
    const char *name;        /* logical name */
    int ndim;
    long shape[2];
    uint64_t checksum;       /* as stored */
} gl_ckpt_info;

/* Collective over comm (which only shares out the verification and makes
 * every rank agree): open PATH, a checkpoint file or a directory.  For a
 * directory without a tracker file and without checkpoint files (or a
 * missing directory) returns GL_CKPT_NONE and *out = NULL: nothing to
 * resume from.  flags:
 * GL_CKPT_VERIFY recomputes every checksum (one read of the file in all,
 * shared out over comm). */
int gl_ckpt_open(MPI_Comm comm, const char *path, int flags, gl_ckpt **out, gl_error *err);
/* The same on this process alone, without verification: not collective,
 * and usable before MPI starts (to read the attributes of a checkpoint
 * while the command line is checked). */
int gl_ckpt_open_alone(const char *path, gl_ckpt **out, gl_error *err);
void gl_ckpt_close(gl_ckpt *ck);

const char *gl_ckpt_path(const gl_ckpt *ck);
long gl_ckpt_iteration(const gl_ckpt *ck);

/* Tensors in the order they were saved. */
int gl_ckpt_ntensors(const gl_ckpt *ck);
const gl_ckpt_info *gl_ckpt_tensor_info(const gl_ckpt *ck, int i);
/* Index of a logical name, or -1. */
int gl_ckpt_find(const gl_ckpt *ck, const char *name);

/* Independent (not collective): read the slab t->offset/count of tensor
 * t->name into t->data (row stride t->ld).  t->shape and t->ndim must
 * match the stored tensor (a mismatch is an error naming both shapes). */
int gl_ckpt_read(gl_ckpt *ck, const gl_ckpt_tensor *t, gl_error *err);

/* gl_ckpt_read for a tensor whose rows are padded (the vocabulary: the
 * padded size depends on --make-vocab-size-divisible-by and TP): the
 * stored tensor may have more or fewer rows than t->shape[0] (columns
 * must match).  Rows of the slab the file holds are read; the rest of the
 * slab is set to zero.  Callers must know that the rows beyond the real
 * vocabulary are padding. */
int gl_ckpt_read_padded(gl_ckpt *ck, const gl_ckpt_tensor *t, gl_error *err);

/* Collective over comm: recompute the checksums of all tensors, each rank
 * reading a share of each tensor's rows.  bad (may be NULL) receives one
 * flag per tensor.  Returns GL_CKPT_ERR naming the first bad tensor. */
int gl_ckpt_verify(gl_ckpt *ck, MPI_Comm comm, int *bad, gl_error *err);

/* Root attributes.  Each returns GL_CKPT_OK, or GL_CKPT_ERR when the key is
 * missing or of another type.  _i64v/_f64v fill up to n values and store
 * the attribute's length in *len. */
int gl_ckpt_get_i64(gl_ckpt *ck, const char *key, long long *v, gl_error *err);
int gl_ckpt_get_f64(gl_ckpt *ck, const char *key, double *v, gl_error *err);
int gl_ckpt_get_i64v(gl_ckpt *ck, const char *key, long long *v, int n, int *len,
                     gl_error *err);
int gl_ckpt_get_f64v(gl_ckpt *ck, const char *key, double *v, int n, int *len,
                     gl_error *err);
char *gl_ckpt_get_str(gl_ckpt *ck, const char *key);   /* malloc'd, or NULL */

/* Root attributes in the order they were written, as printable text:
 * key and value are malloc'd; returns the number of attributes, or -1. */
int gl_ckpt_nattrs(gl_ckpt *ck);
int gl_ckpt_attr_text(gl_ckpt *ck, int i, char **key, char **value, gl_error *err);

/* ---- checksums (ckpt_sum.c) ---- */

/* The checksum contribution of n consecutive elements of a tensor whose
 * first element has linear index first in the full tensor. */
uint64_t gl_ckpt_sum_f32(const float *x, long n, long first);

/* ---- directories (ckpt_dir.c) ---- */

/* The iteration named by DIR's tracker file: GL_CKPT_OK and *iteration;
 * GL_CKPT_NONE when there is no tracker file; GL_CKPT_ERR, with the
 * reason in err (may be NULL), when it cannot be read (not a regular
 * file, a link to nothing, no permission) or does not hold a number. */
int gl_ckpt_read_tracker(const char *dir, long *iteration, gl_error *err);

/* Whether DIR holds a Megatron-LM checkpoint: a subdirectory iter_N (or
 * "release") with torch_dist shards (*.distcp) or legacy mp_rank_*
 * entries.  Returns 1 and the subdirectory's name and the kind of files
 * found in what (n bytes: "iter_0000100/ holds .distcp files"), else 0.
 * gl_ckpt_open refuses such a directory, saying how to convert it. */
int gl_ckpt_is_megatron(const char *dir, char *what, size_t n);

/* The iterations of the checkpoint files (iter_N.h5, not temporaries)
 * in DIR, largest first, as a malloc'd array (NULL when none); returns
 * how many. */
int gl_ckpt_list(const char *dir, long **iterations);

/* The checkpoint file in DIR with the largest iteration below `below`
 * (LONG_MAX: any), as a malloc'd path; NULL when there is none. */
char *gl_ckpt_previous(const char *dir, long below);

/* Remove what killed saves left in DIR (temporaries of checkpoints and
 * of the tracker), saying so in one line (base/file.h); returns how
 * many, or -1 with err. */
int gl_ckpt_clean_temps(const char *dir, gl_error *err);

#ifdef __cplusplus
}
#endif
#endif
