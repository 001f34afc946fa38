/*
 * ckpt_write.c: writing checkpoints with parallel HDF5 (ckpt.h:
 * gl_ckpt_save, gl_ckpt_save_file, and gl_ckpt_begin/put/finish/abort).
 *
 * Saving is collective: all ranks create the same groups, datasets and
 * attributes (HDF5 metadata operations are collective in parallel HDF5)
 * and write their slabs with one collective H5Dwrite per tensor.  Datasets
 * are contiguous fp32, allocated at creation and never filled (every
 * element is written).  The file is a temporary that rank 0 creates and,
 * once it is whole and on disk, renames to its final name.
 */
#include <config.h>
#include "ckpt/ckpt_h5.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static void add_sum(void *arg, const float *x, long n, long first)
{
    *(uint64_t *)arg += gl_ckpt_sum_f32(x, n, first);
}

/* The checksum of what this rank writes. */
static uint64_t slab_sum(const gl_ckpt_tensor *t)
{
    uint64_t s = 0;
    if (t->writes)
        gl_ckpt_each_run(t, add_sum, &s);
    return s;
}

/* FNV-1a over the bytes of the tensor list, so that ranks can check they
 * all describe the same checkpoint before any collective HDF5 call. */
static uint64_t list_hash(long iteration, const gl_ckpt_tensor *ts, int n)
{
    uint64_t h = gl_fnv1a64(&iteration, sizeof iteration, GL_FNV1A64_INIT);
    h = gl_fnv1a64(&n, sizeof n, h);
    for (int i = 0; i < n; i++) {
        h = gl_fnv1a64(ts[i].name, strlen(ts[i].name) + 1, h);
        h = gl_fnv1a64(&ts[i].ndim, sizeof ts[i].ndim, h);
        h = gl_fnv1a64(ts[i].shape, sizeof ts[i].shape[0] * ts[i].ndim, h);
    }
    return h;
}

/* A file's data to disk, from this rank: on a parallel file system each
 * client holds its own dirty pages.  Never through a link: the name is
 * the temporary rank 0 created. */
static int fsync_file(const char *path, gl_error *err)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return gl_errprintf(err, "cannot open %s to sync it: %s", path, strerror(errno));
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return gl_errprintf(err, "cannot sync %s to disk: %s", path, strerror(e));
    }
    close(fd);
    return GL_CKPT_OK;
}

/* Attribute writers: on every rank, same values (collective metadata). */
static int attr_write(hid_t obj, const char *key, hid_t ftype, hid_t mtype,
                      int n, const void *v, gl_error *err)
{
    hsize_t dim = n;
    hid_t space = n > 1 ? H5Screate_simple(1, &dim, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, mtype, v);
    gl_ckpt_h5_why why = { "" };
    if (rc < 0)
        why = gl_ckpt_h5_msg();     /* before the closes clear it */
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(space);
    if (rc < 0)
        return gl_errprintf(err, "cannot write checkpoint attribute %s: %s", key, why.text);
    return GL_CKPT_OK;
}

static int attr_write_str(hid_t obj, const char *key, const char *s, gl_error *err)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(s) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    H5Tset_cset(t, H5T_CSET_UTF8);
    int rc = attr_write(obj, key, t, t, 1, s, err);
    H5Tclose(t);
    return rc;
}

static int attr_write_one(hid_t obj, const gl_ckpt_attr *a, gl_error *err)
{
    int n = a->n > 1 ? a->n : 1;
    switch (a->type) {
    case GL_CKPT_I64:
        return attr_write(obj, a->key, H5T_STD_I64LE, H5T_NATIVE_LLONG, n,
                          a->n > 1 ? (const void *)a->iv : (const void *)&a->i, err);
    case GL_CKPT_F64:
        return attr_write(obj, a->key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n,
                          a->n > 1 ? (const void *)a->fv : (const void *)&a->f, err);
    case GL_CKPT_STR:
        return attr_write_str(obj, a->key, a->s ? a->s : "", err);
    }
    return gl_errprintf(err, "checkpoint attribute %s has an unknown type", a->key);
}

/* Create the groups above an HDF5 path ("/a/b/c" creates /a and /a/b),
 * each tracking the creation order of its links so that tools list
 * tensors in the order they were saved. */
static int make_groups(hid_t file, const char *path, hid_t gcpl, gl_error *err)
{
    char p[GL_CKPT_MAXNAME + 2];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        htri_t e = H5Lexists(file, p, H5P_DEFAULT);
        if (e == 0) {
            hid_t g = H5Gcreate2(file, p, H5P_DEFAULT, gcpl, H5P_DEFAULT);
            if (g < 0)
                return gl_errprintf(err, "cannot create group %s: %s", p,
                                    gl_ckpt_h5_msg().text);
            H5Gclose(g);
        } else if (e < 0) {
            return gl_errprintf(err, "cannot create group %s (a tensor has that name?): %s",
                                p, gl_ckpt_h5_msg().text);
        }
        *s = '/';
    }
    return GL_CKPT_OK;
}

/* One tensor: create the dataset, write this rank's slab (or nothing) in
 * one collective transfer, then its name and checksum attributes. */
static int write_tensor(hid_t file, hid_t gcpl, hid_t dxpl, const gl_ckpt_tensor *t,
                        int index, uint64_t checksum, gl_error *err)
{
    char path[GL_CKPT_MAXNAME + 2];
    gl_ckpt_h5_path(t->name, path, sizeof path);
    if (make_groups(file, path, gcpl, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    if (H5Lexists(file, path, H5P_DEFAULT) != 0)
        return gl_errprintf(err, "checkpoint tensor %s: HDF5 path %s is already taken "
                            "(two tensors map to the same path?)", t->name, path);

    hsize_t dims[2] = { (hsize_t)t->shape[0], (hsize_t)(t->ndim == 2 ? t->shape[1] : 1) };
    hid_t fspace = H5Screate_simple(t->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    hid_t ds = H5Dcreate2(file, path, H5T_IEEE_F32LE, fspace, H5P_DEFAULT, dcpl,
                          H5P_DEFAULT);
    gl_ckpt_h5_why why = { "" };
    if (ds < 0)
        why = gl_ckpt_h5_msg();     /* before H5Pclose clears it */
    H5Pclose(dcpl);
    if (ds < 0) {
        H5Sclose(fspace);
        return gl_errprintf(err, "cannot create dataset %s: %s", path, why.text);
    }

    hid_t mspace;
    float dummy = 0;
    const float *buf = &dummy;
    if (t->writes && gl_ckpt_held(t) > 0) {
        mspace = gl_ckpt_select_held(t, fspace);
        buf = t->data;
    } else {
        hsize_t one = 1;
        H5Sselect_none(fspace);
        mspace = H5Screate_simple(1, &one, NULL);
        H5Sselect_none(mspace);
    }
    herr_t rc = H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf);
    if (rc < 0)
        why = gl_ckpt_h5_msg();
    H5Sclose(mspace);
    H5Sclose(fspace);
    int st = GL_CKPT_OK;
    if (rc < 0)
        st = gl_errprintf(err, "cannot write tensor %s: %s", t->name, why.text);
    if (st == GL_CKPT_OK)
        st = attr_write_str(ds, "name", t->name, err);
    if (st == GL_CKPT_OK)
        st = attr_write(ds, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, &checksum,
                        err);
    if (st == GL_CKPT_OK)
        st = attr_write(ds, "index", H5T_STD_I32LE, H5T_NATIVE_INT, 1, &index, err);
    H5Dclose(ds);
    return st;
}

static void writer_free(gl_ckpt_writer *w, int remove);

/* A checkpoint being written: the temporary file, open on every rank. */
struct gl_ckpt_writer {
    MPI_Comm comm;
    int rank, failed, ntensors;
    long iteration;
    int tracker_too;
    char dir[4096], final[4096], tmp[4200];
    gl_file_tmp *t;                 /* rank 0: the temporary it created */
    double need;                    /* bytes of tensors to come; 0: unknown */
    unsigned long long dev, ino;    /* its identity, from rank 0 */
    hid_t file, gcpl, dxpl;
    double t0, bytes;
    gl_error why;                   /* why it failed: what put and finish report */
};

/* Bytes free to this user in dir's file system; -1 when unknown. */
static double free_bytes(const char *dir)
{
    struct statvfs v;
    return statvfs(dir, &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : -1;
}

/* After a write failed: MPI-IO reports a full disk as a short write
 * (HDF5's "file write failed"), with no errno to look at, so look at the
 * file system: when it has less room than the write needed, say so. */
static void note_if_full(const gl_ckpt_writer *w, double need, gl_error *err)
{
    double avail = free_bytes(w->dir);
    if (!err || avail < 0 || avail >= need)
        return;
    size_t n = strlen(err->text);
    snprintf(err->text + n, sizeof err->text - n, " (No space left on device: %.400s has "
             "%.1f MB free: free some space, or save elsewhere)", w->dir, avail / 1e6);
}

/* Rank 0: the directory, then the temporary beside the final name,
 * created exclusively (base/file.h), and its identity.  A final name
 * that is taken, or a file system without room for the tensors, stops
 * the save here, before anything is written. */
static int create_tmp(gl_ckpt_writer *w, gl_error *err)
{
    gl_error e;
    if (gl_file_mkdirs(w->dir, &e) < 0)
        return gl_errprintf(err, "cannot create checkpoint directory %s: %s", w->dir,
                            e.text);
    struct stat st;
    if (lstat(w->final, &st) == 0)
        return gl_errprintf(err, "%s already exists: a checkpoint file this run did not "
                            "write; gridlm never writes over one: move it away (or remove "
                            "it), or save to another directory", w->final);
    double avail = free_bytes(w->dir);
    if (avail >= 0 && avail < w->need)
        return gl_errprintf(err, "%s: No space left on device: %.1f MB free, the "
                            "checkpoint needs %.1f MB: free some space, or save elsewhere",
                            w->dir, avail / 1e6, w->need / 1e6);
    w->t = gl_file_tmp_create(w->final, GL_FILE_TMP_NOLOCK, &e);
    if (!w->t)
        return gl_errprintf(err, "%s", e.text);
    if (fstat(gl_file_tmp_fd(w->t), &st) != 0)
        return gl_errprintf(err, "cannot stat %s: %s", gl_file_tmp_path(w->t),
                            strerror(errno));
    snprintf(w->tmp, sizeof w->tmp, "%s", gl_file_tmp_path(w->t));
    w->dev = (unsigned long long)st.st_dev;
    w->ino = (unsigned long long)st.st_ino;
    return GL_CKPT_OK;
}

/* After HDF5 opened the temporary by name on every rank: is it still the
 * file rank 0 created?  The inode on every rank; the device only on
 * rank 0, since a network file system numbers its mount per node. */
static int same_tmp(const gl_ckpt_writer *w, gl_error *err)
{
    struct stat st;
    if (lstat(w->tmp, &st) != 0 || !S_ISREG(st.st_mode) ||
        (unsigned long long)st.st_ino != w->ino ||
        (w->rank == 0 && (unsigned long long)st.st_dev != w->dev))
        return gl_errprintf(err, "checkpoint temporary %s is no longer the file rank 0 "
                            "created (another process replaced or removed it): make sure "
                            "one job at a time saves to %s", w->tmp, w->dir);
    return GL_CKPT_OK;
}

/* Rank 0: the file under its final name (never over an existing one),
 * then, for a directory, the tracker that names it. */
static int publish(gl_ckpt_writer *w, gl_error *err)
{
    gl_error e;
    gl_file_tmp *t = w->t;
    w->t = NULL;
    if (gl_file_tmp_publish(t, GL_FILE_NOREPLACE, &e) < 0)
        return gl_errprintf(err, "%s", e.text);
    if (!w->tracker_too)
        return GL_CKPT_OK;
    char tracker[4200], text[32];
    snprintf(tracker, sizeof tracker, "%s/%s", w->dir, GL_CKPT_TRACKER);
    int n = snprintf(text, sizeof text, "%ld\n", w->iteration);
    if (gl_file_write_all(tracker, text, (size_t)n, 0, &e) < 0)
        return gl_errprintf(err, "%s (the checkpoint itself is saved as %s)", e.text,
                            w->final);
    return GL_CKPT_OK;
}

/* gl_ckpt_begin, knowing (need > 0) how many bytes of tensors follow. */
static int begin(MPI_Comm comm, const char *dir, const char *file, long iteration,
                 double need, gl_ckpt_writer **out, gl_error *err)
{
    gl_ckpt_h5_quiet();
    gl_error_clear(err);
    *out = NULL;
    gl_ckpt_writer *w = gl_calloc(1, sizeof *w);
    w->need = need;
    w->t0 = MPI_Wtime();
    w->comm = comm;
    MPI_Comm_rank(comm, &w->rank);
    w->iteration = iteration;
    w->file = w->gcpl = w->dxpl = -1;
    if (file) {
        gl_file_dirname(file, w->dir, sizeof w->dir);
        snprintf(w->final, sizeof w->final, "%s", file);
    } else {
        snprintf(w->dir, sizeof w->dir, "%s", dir);
        gl_ckpt_file_name(w->final, sizeof w->final, dir, iteration);
        w->tracker_too = 1;
    }
    int st = GL_CKPT_OK;
    if (iteration < 0)
        st = gl_errprintf(err, "checkpoint iteration %ld is negative", iteration);
    long h[2] = { iteration, -iteration };
    MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_LONG, MPI_MAX, comm);
    if (st == GL_CKPT_OK && h[0] != -h[1])
        st = gl_errprintf(err, "ranks save different iterations: a bug in the caller");
    if (st == GL_CKPT_OK && w->rank == 0)
        st = create_tmp(w, err);
    if (gl_ckpt_agree(comm, st, err) != GL_CKPT_OK) {
        writer_free(w, 1);
        return GL_CKPT_ERR;
    }
    MPI_Bcast(w->tmp, sizeof w->tmp, MPI_CHAR, 0, comm);
    unsigned long long id[2] = { w->dev, w->ino };
    MPI_Bcast(id, 2, MPI_UNSIGNED_LONG_LONG, 0, comm);
    w->dev = id[0];
    w->ino = id[1];

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5Pset_all_coll_metadata_ops(fapl, 1);
    H5Pset_coll_metadata_write(fapl, 1);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    /* TRUNC: the file exists (rank 0 made it, empty) and is ours. */
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, fcpl, fapl);
    st = w->file < 0 ? gl_errprintf(err, "cannot create checkpoint file %s: %s", w->tmp,
                                    gl_ckpt_h5_msg().text)
                     : same_tmp(w, err);
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (gl_ckpt_agree(comm, st, err) != GL_CKPT_OK) {
        writer_free(w, 1);
        return GL_CKPT_ERR;
    }
    w->gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_link_creation_order(w->gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    w->dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(w->dxpl, H5FD_MPIO_COLLECTIVE);
    *out = w;
    return GL_CKPT_OK;
}

int gl_ckpt_begin(MPI_Comm comm, const char *dir, const char *file, long iteration,
                  gl_ckpt_writer **out, gl_error *err)
{
    return begin(comm, dir, file, iteration, 0, out, err);
}

int gl_ckpt_put(gl_ckpt_writer *w, const gl_ckpt_tensor *t, gl_error *err)
{
    gl_error *why = &w->why;        /* kept: a failed writer says why again */
    if (w->failed)
        return gl_errprintf(err, "%s", why->text);
    gl_ckpt_h5_quiet();
    int st = gl_ckpt_check_tensor(t, 0, why);
    if (gl_ckpt_agree(w->comm, st, why) != GL_CKPT_OK) {
        w->failed = 1;
        return gl_errprintf(err, "%s", why->text);
    }
    /* All ranks describe the same tensor; the writing slabs cover it once. */
    uint64_t h[2];
    h[0] = list_hash(w->iteration, t, 1);
    h[1] = ~h[0];
    MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_UINT64_T, MPI_MAX, w->comm);
    if (h[0] != ~h[1])
        st = gl_errprintf(why, "ranks describe different tensors at position %d (%s here): "
                          "a bug in the caller", w->ntensors, t->name);
    uint64_t sum = slab_sum(t);
    long cover = t->writes ? gl_ckpt_held(t) : 0;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_UINT64_T, MPI_SUM, w->comm);
    MPI_Allreduce(MPI_IN_PLACE, &cover, 1, MPI_LONG, MPI_SUM, w->comm);
    if (st == GL_CKPT_OK && cover != gl_ckpt_numel(t))
        st = gl_errprintf(why, "checkpoint tensor %s: the writing ranks' slabs hold %ld "
                          "elements, the tensor %ld (each element must be written "
                          "by exactly one rank)", t->name, cover, gl_ckpt_numel(t));
    if (gl_ckpt_agree(w->comm, st, why) == GL_CKPT_OK) {
        st = write_tensor(w->file, w->gcpl, w->dxpl, t, w->ntensors, sum, why);
        if (st != GL_CKPT_OK)
            note_if_full(w, 4.0 * gl_ckpt_numel(t), why);
        st = gl_ckpt_agree(w->comm, st, why);
    } else {
        st = GL_CKPT_ERR;
    }
    if (st != GL_CKPT_OK) {
        w->failed = 1;
        return gl_errprintf(err, "%s", why->text);
    }
    w->ntensors++;
    w->bytes += 4.0 * gl_ckpt_numel(t);
    return GL_CKPT_OK;
}

/* Close the file on every rank; rank 0 removes the temporary unless it
 * was published (remove: the caller's wish; a failed save removes it). */
static void writer_free(gl_ckpt_writer *w, int remove)
{
    if (w->dxpl >= 0)
        H5Pclose(w->dxpl);
    if (w->gcpl >= 0)
        H5Pclose(w->gcpl);
    if (w->file >= 0)
        H5Fclose(w->file);
    if (remove && w->t)
        gl_file_tmp_discard(w->t);
    free(w);
}

void gl_ckpt_abort(gl_ckpt_writer *w)
{
    if (w)
        writer_free(w, 1);
}

static int reserved(const char *key)
{
    return !key || !*key || !strcmp(key, "iteration") || !strcmp(key, "format") ||
           !strcmp(key, "complete");
}

int gl_ckpt_finish(gl_ckpt_writer *w, const gl_ckpt_attr *attrs, int nattrs,
                   gl_ckpt_save_stats *stats, gl_error *err)
{
    gl_error *why = &w->why;        /* kept: a failed writer says why again */
    gl_ckpt_h5_quiet();
    int st = w->failed ? GL_CKPT_ERR : GL_CKPT_OK;
    for (int i = 0; i < nattrs && st == GL_CKPT_OK; i++)
        if (reserved(attrs[i].key))
            st = gl_errprintf(why, "checkpoint attribute name '%s' is reserved or empty",
                              attrs[i].key ? attrs[i].key : "(null)");
    if (st == GL_CKPT_OK)
        st = attr_write_str(w->file, "format", GL_CKPT_FORMAT, why);
    long long it = w->iteration;
    if (st == GL_CKPT_OK)
        st = attr_write(w->file, "iteration", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, &it, why);
    for (int i = 0; i < nattrs && st == GL_CKPT_OK; i++)
        st = attr_write_one(w->file, &attrs[i], why);
    if (st != GL_CKPT_OK && !w->failed)
        note_if_full(w, 65536, why);
    st = gl_ckpt_agree(w->comm, st, why);
    /* Last: the mark that the file is whole. */
    if (st == GL_CKPT_OK) {
        int one = 1;
        st = gl_ckpt_agree(w->comm, attr_write(w->file, "complete", H5T_STD_I32LE,
                                               H5T_NATIVE_INT, 1, &one, why), why);
    }
    H5Pclose(w->dxpl);
    H5Pclose(w->gcpl);
    w->dxpl = w->gcpl = -1;
    if (H5Fclose(w->file) < 0 && st == GL_CKPT_OK) {
        st = gl_errprintf(why, "cannot close checkpoint file %s: %s", w->tmp,
                          gl_ckpt_h5_msg().text);
        note_if_full(w, 65536, why);
    }
    w->file = -1;
    st = gl_ckpt_agree(w->comm, st, why);
    /* Each rank pushes what it wrote to disk (on a parallel file system,
     * each client holds its own dirty pages); then rank 0 publishes. */
    if (st == GL_CKPT_OK)
        st = gl_ckpt_agree(w->comm, fsync_file(w->tmp, why), why);
    if (st == GL_CKPT_OK && w->rank == 0)
        st = publish(w, why);
    st = gl_ckpt_agree(w->comm, st, why);
    if (st == GL_CKPT_OK && stats) {
        snprintf(stats->path, sizeof stats->path, "%s", w->final);
        stats->bytes = w->bytes;
        stats->seconds = MPI_Wtime() - w->t0;
    }
    if (st != GL_CKPT_OK)
        gl_errprintf(err, "%s", why->text);
    writer_free(w, st != GL_CKPT_OK);
    return st;
}

/* The save: into DIR/iter_%07ld.h5 and the tracker (file NULL), or into
 * FILE alone.  The whole list is checked before the file is created, so
 * that a caller's mistake leaves nothing behind. */
static int save(MPI_Comm comm, const char *dir, const char *file, long iteration,
                const gl_ckpt_tensor *ts, int n,
                const gl_ckpt_attr *attrs, int nattrs,
                const gl_ckpt_save_opts *opts, gl_ckpt_save_stats *stats,
                gl_error *err)
{
    gl_ckpt_h5_quiet();
    gl_error_clear(err);
    int st = GL_CKPT_OK;
    for (int i = 0; i < n && st == GL_CKPT_OK; i++)
        st = gl_ckpt_check_tensor(&ts[i], 0, err);
    for (int i = 0; i < nattrs && st == GL_CKPT_OK; i++)
        if (reserved(attrs[i].key))
            st = gl_errprintf(err, "checkpoint attribute name '%s' is reserved or empty",
                              attrs[i].key ? attrs[i].key : "(null)");
    if (gl_ckpt_agree(comm, st, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    uint64_t h[2];
    h[0] = list_hash(iteration, ts, n);
    h[1] = ~h[0];
    MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_UINT64_T, MPI_MAX, comm);
    if (h[0] != ~h[1]) {
        st = gl_errprintf(err, "ranks describe different checkpoints (tensor names, shapes or "
                          "iteration differ): a bug in the caller");
        return gl_ckpt_agree(comm, st, err);
    }
    long *cover = gl_calloc(n ? n : 1, sizeof *cover);
    for (int i = 0; i < n; i++)
        cover[i] = ts[i].writes ? gl_ckpt_held(&ts[i]) : 0;
    MPI_Allreduce(MPI_IN_PLACE, cover, n, MPI_LONG, MPI_SUM, comm);
    for (int i = 0; i < n && st == GL_CKPT_OK; i++)
        if (cover[i] != gl_ckpt_numel(&ts[i]))
            st = gl_errprintf(err, "checkpoint tensor %s: the writing ranks' slabs hold "
                              "%ld elements, the tensor %ld (each element must be written "
                              "by exactly one rank)", ts[i].name, cover[i],
                              gl_ckpt_numel(&ts[i]));
    free(cover);
    if (gl_ckpt_agree(comm, st, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;

    double need = 0;
    for (int i = 0; i < n; i++)
        need += 4.0 * gl_ckpt_numel(&ts[i]);
    gl_ckpt_writer *w;
    if (begin(comm, dir, file, iteration, need, &w, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    for (int i = 0; i < n; i++) {
        if (gl_ckpt_put(w, &ts[i], err) != GL_CKPT_OK)
            break;
        if (opts && opts->after_tensor)
            opts->after_tensor(opts->arg, i, n);
    }
    return gl_ckpt_finish(w, attrs, nattrs, stats, err);
}

int gl_ckpt_save(MPI_Comm comm, const char *dir, long iteration,
                 const gl_ckpt_tensor *ts, int n,
                 const gl_ckpt_attr *attrs, int nattrs,
                 const gl_ckpt_save_opts *opts, gl_ckpt_save_stats *stats,
                 gl_error *err)
{
    return save(comm, dir, NULL, iteration, ts, n, attrs, nattrs, opts, stats, err);
}

int gl_ckpt_save_file(MPI_Comm comm, const char *path, long iteration,
                      const gl_ckpt_tensor *ts, int n,
                      const gl_ckpt_attr *attrs, int nattrs,
                      const gl_ckpt_save_opts *opts, gl_ckpt_save_stats *stats,
                      gl_error *err)
{
    return save(comm, NULL, path, iteration, ts, n, attrs, nattrs, opts, stats, err);
}
