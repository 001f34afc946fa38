/*
 * ckpt_h5.c: writing and reading checkpoints with parallel HDF5 (ckpt.h).
 *
 * Saving is collective: all ranks create the same groups, datasets and
 * attributes (HDF5 metadata operations are collective in parallel HDF5)
 * and write their slabs with one collective H5Dwrite per tensor.  Datasets
 * are contiguous fp32, allocated at creation and never filled (every
 * element is written).  Reading is independent: each rank opens the file
 * read-only with the default (POSIX) driver, so no rank waits for another.
 */
#include <config.h>
#include "ckpt/ckpt.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/log.h"

#include <hdf5.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* HDF5 prints its error stack on stderr by default; gridlm reports the
 * innermost message itself, in its own line. */
static void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* A message from HDF5's error stack. */
typedef struct { char text[512]; } h5_why;

static herr_t h5_first_desc(unsigned n, const H5E_error2_t *e, void *arg)
{
    h5_why *out = arg;
    if (n == 0 && e->desc)
        snprintf(out->text, sizeof out->text, "%s", e->desc);
    return 0;
}

/* The most specific message on HDF5's error stack, then clear it. */
static h5_why h5_msg(void)
{
    h5_why w = { "unknown HDF5 error" };
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_first_desc, &w);
    H5Eclear2(H5E_DEFAULT);
    return w;
}

/* Every rank of comm ends with the same status: the lowest failing rank's
 * message is broadcast to all (into err). */
static int agree(MPI_Comm comm, int status, gl_error *err)
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

/* ------------------------------------------------------------------ */
/* Names                                                               */
/* ------------------------------------------------------------------ */

/* "model/layers.3.attention.wq" -> "/model/layers/3/attention/wq".
 * Returns 0 when the name is empty, too long or has an empty component. */
static int h5_path(const char *name, char *out, size_t n)
{
    size_t len = strlen(name);
    if (len == 0 || len + 2 > n || len >= GL_CKPT_MAXNAME)
        return 0;
    out[0] = '/';
    for (size_t i = 0; i < len; i++) {
        char c = name[i] == '.' ? '/' : name[i];
        if (c == '/' && (i == 0 || i + 1 == len || out[i] == '/'))
            return 0;
        out[i + 1] = c;
    }
    out[len + 1] = '\0';
    return 1;
}

/* ------------------------------------------------------------------ */
/* Saving                                                              */
/* ------------------------------------------------------------------ */

static long numel(const gl_ckpt_tensor *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

static long slab_numel(const gl_ckpt_tensor *t)
{
    return t->ndim == 1 ? t->count[0] : t->count[0] * t->count[1];
}

/* Elements this rank holds: a part of its slab, or all of it. */
static long held(const gl_ckpt_tensor *t)
{
    return t->nelem > 0 ? t->nelem : slab_numel(t);
}

/* Visit the held elements as runs of consecutive linear indices of the
 * full tensor: fn(arg, values, n, index of the first). */
typedef void (*run_fn)(void *arg, const float *x, long n, long first);

static void each_run(const gl_ckpt_tensor *t, run_fn fn, void *arg)
{
    if (held(t) == 0)
        return;
    if (t->ndim == 1) {
        long first = t->nelem > 0 ? t->first : 0;
        fn(arg, t->data, held(t), t->offset[0] + first);
        return;
    }
    long C = t->count[1], W = t->shape[1];
    if (t->nelem == 0) {
        long ld = t->ld ? t->ld : C;
        for (long r = 0; r < t->count[0]; r++)
            fn(arg, t->data + r * ld, C, (t->offset[0] + r) * W + t->offset[1]);
        return;
    }
    /* A part: slab elements [first, first + nelem) in row-major order,
     * packed; split where the slab's rows end. */
    long e = t->first, end = t->first + t->nelem;
    const float *x = t->data;
    while (e < end) {
        long r = e / C, c = e % C;
        long n = C - c < end - e ? C - c : end - e;
        fn(arg, x, n, (t->offset[0] + r) * W + t->offset[1] + c);
        x += n;
        e += n;
    }
}

/* Select the held elements in the file space, and make the matching
 * memory space (the slab with its row stride, or the packed part). */
static hid_t select_held(const gl_ckpt_tensor *t, hid_t fspace)
{
    hsize_t o0 = (hsize_t)t->offset[0], o1 = (hsize_t)(t->ndim == 2 ? t->offset[1] : 0);
    if (t->nelem == 0) {
        hsize_t start[2] = { o0, o1 };
        hsize_t count[2] = { (hsize_t)t->count[0], (hsize_t)(t->ndim == 2 ? t->count[1] : 1) };
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        hsize_t mdims[2] = { count[0], (t->ndim == 2 && t->ld ? (hsize_t)t->ld : count[1]) };
        hsize_t zero[2] = { 0, 0 };
        hid_t m = H5Screate_simple(t->ndim, mdims, NULL);
        H5Sselect_hyperslab(m, H5S_SELECT_SET, zero, NULL, count, NULL);
        return m;
    }
    hsize_t n = (hsize_t)t->nelem;
    if (t->ndim == 1) {
        hsize_t start = o0 + (hsize_t)t->first;
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &n, NULL);
    } else {
        /* Up to three rectangles: the rest of the first row, whole rows,
         * the start of the last row.  HDF5 visits a union of hyperslabs
         * in row-major order, the order of the packed buffer. */
        long C = t->count[1], e0 = t->first, e1 = t->first + t->nelem - 1;
        long r0 = e0 / C, c0 = e0 % C, r1 = e1 / C, c1 = e1 % C;
        H5S_seloper_t op = H5S_SELECT_SET;
        hsize_t start[2], count[2];
#define ADD(r, c, nr, nc) do { \
            start[0] = o0 + (hsize_t)(r); start[1] = o1 + (hsize_t)(c); \
            count[0] = (hsize_t)(nr); count[1] = (hsize_t)(nc); \
            H5Sselect_hyperslab(fspace, op, start, NULL, count, NULL); \
            op = H5S_SELECT_OR; } while (0)
        if (r0 == r1) {
            ADD(r0, c0, 1, c1 - c0 + 1);
        } else {
            ADD(r0, c0, 1, C - c0);
            if (r1 > r0 + 1)
                ADD(r0 + 1, 0, r1 - r0 - 1, C);
            ADD(r1, 0, 1, c1 + 1);
        }
#undef ADD
    }
    return H5Screate_simple(1, &n, NULL);
}

/* A tensor description that makes sense on its own. */
static int check_tensor(const gl_ckpt_tensor *t, int for_read, gl_error *err)
{
    char path[GL_CKPT_MAXNAME + 2];
    if (!t->name || !h5_path(t->name, path, sizeof path))
        return gl_errprintf(err, "checkpoint tensor name '%s' is empty, longer than %d "
                            "characters, or has an empty component",
                            t->name ? t->name : "(null)", GL_CKPT_MAXNAME - 1);
    if (t->ndim != 1 && t->ndim != 2)
        return gl_errprintf(err, "checkpoint tensor %s has %d dimensions; 1 or 2 are "
                            "supported", t->name, t->ndim);
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 1)
            return gl_errprintf(err, "checkpoint tensor %s has dimension %d of size %ld",
                                t->name, d, t->shape[d]);
        if (t->offset[d] < 0 || t->count[d] < 0 ||
            t->offset[d] + t->count[d] > t->shape[d])
            return gl_errprintf(err, "checkpoint tensor %s: slab [%ld, %ld) of dimension "
                                "%d lies outside its size %ld", t->name, t->offset[d],
                                t->offset[d] + t->count[d], d, t->shape[d]);
    }
    if (t->ndim == 2 && t->ld != 0 && t->ld < t->count[1])
        return gl_errprintf(err, "checkpoint tensor %s: row stride %ld is less than the "
                            "slab's %ld columns", t->name, t->ld, t->count[1]);
    if (t->nelem < 0 || (t->nelem > 0 && (t->first < 0 || t->first + t->nelem > slab_numel(t))))
        return gl_errprintf(err, "checkpoint tensor %s: part [%ld, %ld) lies outside its "
                            "slab of %ld elements", t->name, t->first, t->first + t->nelem,
                            slab_numel(t));
    if ((for_read || t->writes) && held(t) > 0 && !t->data)
        return gl_errprintf(err, "checkpoint tensor %s: no buffer for the slab", t->name);
    return GL_CKPT_OK;
}

static void add_sum(void *arg, const float *x, long n, long first)
{
    *(uint64_t *)arg += gl_ckpt_sum_f32(x, n, first);
}

/* The checksum of what this rank writes. */
static uint64_t slab_sum(const gl_ckpt_tensor *t)
{
    uint64_t s = 0;
    if (t->writes)
        each_run(t, add_sum, &s);
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
    h5_why why = { "" };
    if (rc < 0)
        why = h5_msg();     /* before the closes clear it */
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
                return gl_errprintf(err, "cannot create group %s: %s", p, h5_msg().text);
            H5Gclose(g);
        } else if (e < 0) {
            return gl_errprintf(err, "cannot create group %s (a tensor has that name?): %s",
                                p, h5_msg().text);
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
    h5_path(t->name, path, sizeof path);
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
    h5_why why = { "" };
    if (ds < 0)
        why = h5_msg();     /* before H5Pclose clears it */
    H5Pclose(dcpl);
    if (ds < 0) {
        H5Sclose(fspace);
        return gl_errprintf(err, "cannot create dataset %s: %s", path, why.text);
    }

    hid_t mspace;
    float dummy = 0;
    const float *buf = &dummy;
    if (t->writes && held(t) > 0) {
        mspace = select_held(t, fspace);
        buf = t->data;
    } else {
        hsize_t one = 1;
        H5Sselect_none(fspace);
        mspace = H5Screate_simple(1, &one, NULL);
        H5Sselect_none(mspace);
    }
    herr_t rc = H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf);
    if (rc < 0)
        why = h5_msg();
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
    h5_quiet();
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
    if (agree(comm, st, err) != GL_CKPT_OK) {
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
                                    h5_msg().text)
                     : same_tmp(w, err);
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (agree(comm, st, err) != GL_CKPT_OK) {
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
    h5_quiet();
    int st = check_tensor(t, 0, why);
    if (agree(w->comm, st, why) != GL_CKPT_OK) {
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
    long cover = t->writes ? held(t) : 0;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_UINT64_T, MPI_SUM, w->comm);
    MPI_Allreduce(MPI_IN_PLACE, &cover, 1, MPI_LONG, MPI_SUM, w->comm);
    if (st == GL_CKPT_OK && cover != numel(t))
        st = gl_errprintf(why, "checkpoint tensor %s: the writing ranks' slabs hold %ld "
                          "elements, the tensor %ld (each element must be written "
                          "by exactly one rank)", t->name, cover, numel(t));
    if (agree(w->comm, st, why) == GL_CKPT_OK) {
        st = write_tensor(w->file, w->gcpl, w->dxpl, t, w->ntensors, sum, why);
        if (st != GL_CKPT_OK)
            note_if_full(w, 4.0 * numel(t), why);
        st = agree(w->comm, st, why);
    } else {
        st = GL_CKPT_ERR;
    }
    if (st != GL_CKPT_OK) {
        w->failed = 1;
        return gl_errprintf(err, "%s", why->text);
    }
    w->ntensors++;
    w->bytes += 4.0 * numel(t);
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
    h5_quiet();
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
    st = agree(w->comm, st, why);
    /* Last: the mark that the file is whole. */
    if (st == GL_CKPT_OK) {
        int one = 1;
        st = agree(w->comm, attr_write(w->file, "complete", H5T_STD_I32LE,
                                       H5T_NATIVE_INT, 1, &one, why), why);
    }
    H5Pclose(w->dxpl);
    H5Pclose(w->gcpl);
    w->dxpl = w->gcpl = -1;
    if (H5Fclose(w->file) < 0 && st == GL_CKPT_OK) {
        st = gl_errprintf(why, "cannot close checkpoint file %s: %s", w->tmp,
                          h5_msg().text);
        note_if_full(w, 65536, why);
    }
    w->file = -1;
    st = agree(w->comm, st, why);
    /* Each rank pushes what it wrote to disk (on a parallel file system,
     * each client holds its own dirty pages); then rank 0 publishes. */
    if (st == GL_CKPT_OK)
        st = agree(w->comm, fsync_file(w->tmp, why), why);
    if (st == GL_CKPT_OK && w->rank == 0)
        st = publish(w, why);
    st = agree(w->comm, st, why);
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
    h5_quiet();
    gl_error_clear(err);
    int st = GL_CKPT_OK;
    for (int i = 0; i < n && st == GL_CKPT_OK; i++)
        st = check_tensor(&ts[i], 0, err);
    for (int i = 0; i < nattrs && st == GL_CKPT_OK; i++)
        if (reserved(attrs[i].key))
            st = gl_errprintf(err, "checkpoint attribute name '%s' is reserved or empty",
                              attrs[i].key ? attrs[i].key : "(null)");
    if (agree(comm, st, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    uint64_t h[2];
    h[0] = list_hash(iteration, ts, n);
    h[1] = ~h[0];
    MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_UINT64_T, MPI_MAX, comm);
    if (h[0] != ~h[1])
        return agree(comm, gl_errprintf(err, "ranks describe different checkpoints (tensor "
                                        "names, shapes or iteration differ): a bug in "
                                        "the caller"), err);
    long *cover = gl_calloc(n ? n : 1, sizeof *cover);
    for (int i = 0; i < n; i++)
        cover[i] = ts[i].writes ? held(&ts[i]) : 0;
    MPI_Allreduce(MPI_IN_PLACE, cover, n, MPI_LONG, MPI_SUM, comm);
    for (int i = 0; i < n && st == GL_CKPT_OK; i++)
        if (cover[i] != numel(&ts[i]))
            st = gl_errprintf(err, "checkpoint tensor %s: the writing ranks' slabs hold "
                              "%ld elements, the tensor %ld (each element must be written "
                              "by exactly one rank)", ts[i].name, cover[i], numel(&ts[i]));
    free(cover);
    if (agree(comm, st, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;

    double need = 0;
    for (int i = 0; i < n; i++)
        need += 4.0 * numel(&ts[i]);
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

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

typedef struct entry {
    gl_ckpt_info info;
    char *path;              /* HDF5 path */
    long order;              /* the "index" attribute: position in the save */
} entry;

struct gl_ckpt {
    char *file;
    char *dir;
    long iteration;
    hid_t h5;
    int n, cap;
    entry *e;
};

const char *gl_ckpt_path(const gl_ckpt *ck) { return ck->file; }
long gl_ckpt_iteration(const gl_ckpt *ck) { return ck->iteration; }
int gl_ckpt_ntensors(const gl_ckpt *ck) { return ck->n; }
const gl_ckpt_info *gl_ckpt_tensor_info(const gl_ckpt *ck, int i)
{
    return i >= 0 && i < ck->n ? &ck->e[i].info : NULL;
}

int gl_ckpt_find(const gl_ckpt *ck, const char *name)
{
    for (int i = 0; i < ck->n; i++)
        if (!strcmp(ck->e[i].info.name, name))
            return i;
    return -1;
}

void gl_ckpt_close(gl_ckpt *ck)
{
    if (!ck)
        return;
    if (ck->h5 >= 0)
        H5Fclose(ck->h5);
    for (int i = 0; i < ck->n; i++) {
        free((char *)ck->e[i].info.name);
        free(ck->e[i].path);
    }
    free(ck->e);
    free(ck->file);
    free(ck->dir);
    free(ck);
}

/* A refusal: "FILE is WHY: remove it, or load PREV with --load". */
static int refuse(const char *dir, const char *file, long iteration, const char *why,
                  gl_error *err)
{
    char *prev = gl_ckpt_previous(dir, iteration >= 0 ? iteration : LONG_MAX);
    int there = access(file, F_OK) == 0;
    if (prev && strcmp(prev, file) != 0)
        gl_errprintf(err, "checkpoint %s %s: %sload the previous checkpoint with --load %s",
                     file, why, there ? "remove it, or " : "", prev);
    else
        gl_errprintf(err, "checkpoint %s %s, and %s holds no earlier checkpoint: %s", file,
                     why, dir, there ? "remove it to start afresh" :
                     "give --load a checkpoint that exists");
    free(prev);
    return GL_CKPT_ERR;
}

/* Read a string attribute of obj, fixed or variable length; malloc'd. */
static char *attr_str(hid_t obj, const char *key)
{
    if (H5Aexists(obj, key) <= 0)
        return NULL;
    hid_t a = H5Aopen(obj, key, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    char *out = NULL;
    if (H5Tget_class(t) == H5T_STRING) {
        if (H5Tis_variable_str(t) > 0) {
            char *s = NULL;
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (H5Aread(a, mt, &s) >= 0 && s) {
                out = gl_strdup(s);
                H5free_memory(s);
            }
            H5Tclose(mt);
        } else {
            size_t n = H5Tget_size(t);
            out = gl_calloc(n + 1, 1);
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, n);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (H5Aread(a, mt, out) < 0) {
                free(out);
                out = NULL;
            }
            H5Tclose(mt);
        }
    }
    H5Tclose(t);
    H5Aclose(a);
    return out;
}

/* Read up to n numbers of attribute key as mtype; *len gets its length.
 * cls is the class it must have. */
static int attr_nums(hid_t obj, const char *key, H5T_class_t cls, hid_t mtype,
                     void *v, size_t esize, int n, int *len, gl_error *err)
{
    if (H5Aexists(obj, key) <= 0)
        return gl_errprintf(err, "checkpoint attribute %s is missing", key);
    hid_t a = H5Aopen(obj, key, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    hid_t s = H5Aget_space(a);
    hssize_t m = H5Sget_simple_extent_npoints(s);
    int st = GL_CKPT_OK;
    if (H5Tget_class(t) != cls) {
        st = gl_errprintf(err, "checkpoint attribute %s is not %s", key,
                          cls == H5T_INTEGER ? "an integer" : "a number");
    } else {
        char *tmp = gl_malloc((size_t)(m > 0 ? m : 1) * esize);
        if (H5Aread(a, mtype, tmp) < 0)
            st = gl_errprintf(err, "cannot read checkpoint attribute %s: %s", key,
                              h5_msg().text);
        else
            memcpy(v, tmp, (size_t)(m < n ? m : n) * esize);
        free(tmp);
        if (len)
            *len = (int)m;
    }
    H5Sclose(s);
    H5Tclose(t);
    H5Aclose(a);
    return st;
}

int gl_ckpt_get_i64(gl_ckpt *ck, const char *key, long long *v, gl_error *err)
{
    return attr_nums(ck->h5, key, H5T_INTEGER, H5T_NATIVE_LLONG, v, sizeof *v, 1, NULL,
                     err);
}

int gl_ckpt_get_f64(gl_ckpt *ck, const char *key, double *v, gl_error *err)
{
    return attr_nums(ck->h5, key, H5T_FLOAT, H5T_NATIVE_DOUBLE, v, sizeof *v, 1, NULL, err);
}

int gl_ckpt_get_i64v(gl_ckpt *ck, const char *key, long long *v, int n, int *len,
                     gl_error *err)
{
    return attr_nums(ck->h5, key, H5T_INTEGER, H5T_NATIVE_LLONG, v, sizeof *v, n, len, err);
}

int gl_ckpt_get_f64v(gl_ckpt *ck, const char *key, double *v, int n, int *len,
                     gl_error *err)
{
    return attr_nums(ck->h5, key, H5T_FLOAT, H5T_NATIVE_DOUBLE, v, sizeof *v, n, len, err);
}

char *gl_ckpt_get_str(gl_ckpt *ck, const char *key)
{
    return attr_str(ck->h5, key);
}

/* Root attributes in creation order (name order for files written
 * without creation-order tracking). */
static H5_index_t attr_index(hid_t file)
{
    hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
    hid_t gcpl = root >= 0 ? H5Gget_create_plist(root) : -1;
    unsigned flags = 0;
    if (gcpl >= 0) {
        H5Pget_attr_creation_order(gcpl, &flags);
        H5Pclose(gcpl);
    }
    if (root >= 0)
        H5Gclose(root);
    return (flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
}

static herr_t count_attr(hid_t obj, const char *name, const H5A_info_t *ai, void *arg)
{
    (void)obj, (void)name, (void)ai;
    ++*(int *)arg;
    return 0;
}

int gl_ckpt_nattrs(gl_ckpt *ck)
{
    int n = 0;
    if (H5Aiterate2(ck->h5, H5_INDEX_NAME, H5_ITER_INC, NULL, count_attr, &n) < 0)
        return -1;
    return n;
}

/* Append printf output to a growing string. */
static void appendf(char **s, size_t *len, const char *fmt, ...) GL_PRINTF(3, 4);
static void appendf(char **s, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *s = gl_realloc(*s, *len + k + 1);
    va_start(ap, fmt);
    vsnprintf(*s + *len, k + 1, fmt, ap);
    va_end(ap);
    *len += k;
}

int gl_ckpt_attr_text(gl_ckpt *ck, int i, char **key, char **value, gl_error *err)
{
    hid_t a = H5Aopen_by_idx(ck->h5, ".", attr_index(ck->h5), H5_ITER_INC, i,
                             H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0)
        return gl_errprintf(err, "checkpoint %s has no attribute %d: %s", ck->file, i,
                            h5_msg().text);
    ssize_t kn = H5Aget_name(a, 0, NULL);
    *key = gl_malloc(kn + 1);
    H5Aget_name(a, kn + 1, *key);
    hid_t t = H5Aget_type(a);
    hid_t s = H5Aget_space(a);
    hssize_t m = H5Sget_simple_extent_npoints(s);
    int rank = H5Sget_simple_extent_ndims(s);
    H5T_class_t cls = H5Tget_class(t);
    char *out = NULL;
    size_t len = 0;
    appendf(&out, &len, "%s", "");
    if (cls == H5T_STRING) {
        H5Aclose(a);
        a = -1;
        free(out);
        out = attr_str(ck->h5, *key);
        if (!out)
            out = gl_strdup("(unreadable string)");
    } else if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
        int isint = cls == H5T_INTEGER;
        void *v = gl_malloc((size_t)(m > 0 ? m : 1) * 8);
        H5Aread(a, isint ? H5T_NATIVE_LLONG : H5T_NATIVE_DOUBLE, v);
        if (rank > 0)
            appendf(&out, &len, "[");
        for (hssize_t k = 0; k < m; k++) {
            if (isint)
                appendf(&out, &len, "%s%lld", k ? ", " : "", ((long long *)v)[k]);
            else
                appendf(&out, &len, "%s%.17g", k ? ", " : "", ((double *)v)[k]);
        }
        if (rank > 0)
            appendf(&out, &len, "]");
        free(v);
    } else {
        appendf(&out, &len, "(HDF5 class %d)", (int)cls);
    }
    H5Sclose(s);
    H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    *value = out;
    return GL_CKPT_OK;
}

/* H5Lvisit's state: the checkpoint whose table is read, and why a
 * dataset was refused ("" when HDF5 itself failed). */
typedef struct {
    gl_ckpt *ck;
    gl_error why;
} visit_state;

/* H5Lvisit callback: record each dataset with its name and checksum. */
static herr_t visit(hid_t g, const char *name, const H5L_info_t *li, void *arg)
{
    visit_state *vs = arg;
    gl_ckpt *ck = vs->ck;
    (void)li;
    hid_t ds = H5Oopen(g, name, H5P_DEFAULT);
    if (ds < 0)
        return -1;
    if (H5Iget_type(ds) != H5I_DATASET) {
        H5Oclose(ds);
        return 0;
    }
    if (ck->n == ck->cap) {
        ck->cap = ck->cap ? 2 * ck->cap : 64;
        ck->e = gl_realloc(ck->e, ck->cap * sizeof *ck->e);
    }
    entry *e = &ck->e[ck->n];
    memset(e, 0, sizeof *e);
    hid_t sp = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[8] = { 0 };
    if (nd >= 1 && nd <= 2)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    char *lname = attr_str(ds, "name");
    uint64_t sum = 0;
    int ok = nd >= 1 && nd <= 2 && lname &&
             H5Aexists(ds, "checksum") > 0;
    if (ok) {
        hid_t a = H5Aopen(ds, "checksum", H5P_DEFAULT);
        ok = H5Aread(a, H5T_NATIVE_UINT64, &sum) >= 0;
        H5Aclose(a);
    }
    H5Dclose(ds);
    if (!ok) {
        free(lname);
        gl_errprintf(&vs->why, "dataset /%s has no name or checksum attribute, or is not "
                     "1-D or 2-D", name);
        return -1;
    }
    e->info.name = lname;
    e->info.ndim = nd;
    e->info.shape[0] = (long)dims[0];
    e->info.shape[1] = nd == 2 ? (long)dims[1] : 0;
    e->info.checksum = sum;
    e->order = ck->n + (1L << 40);     /* files without "index": visit order */
    if (H5Aexists_by_name(g, name, "index", H5P_DEFAULT) > 0) {
        int index;
        hid_t a = H5Aopen_by_name(g, name, "index", H5P_DEFAULT, H5P_DEFAULT);
        if (H5Aread(a, H5T_NATIVE_INT, &index) >= 0)
            e->order = index;
        H5Aclose(a);
    }
    size_t pl = strlen(name) + 2;
    e->path = gl_malloc(pl);
    snprintf(e->path, pl, "/%s", name);
    ck->n++;
    return 0;
}

static int by_order(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int list_tensors(gl_ckpt *ck, gl_error *err)
{
    visit_state vs = { .ck = ck, .why = { "" } };
    hid_t root = H5Gopen2(ck->h5, "/", H5P_DEFAULT);
    hid_t gcpl = H5Gget_create_plist(root);
    unsigned flags = 0;
    H5Pget_link_creation_order(gcpl, &flags);
    H5Pclose(gcpl);
    H5Gclose(root);
    H5_index_t idx = (flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    if (H5Lvisit(ck->h5, idx, H5_ITER_INC, visit, &vs) < 0) {
        char why[sizeof vs.why.text];
        snprintf(why, sizeof why, "has a damaged tensor table (%s)",
                 vs.why.text[0] ? vs.why.text : h5_msg().text);
        return refuse(ck->dir, ck->file, ck->iteration, why, err);
    }
    qsort(ck->e, ck->n, sizeof *ck->e, by_order);
    return GL_CKPT_OK;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int open_local(const char *path, gl_ckpt **out, gl_error *err);

/* The newest checkpoint file in dir that opens whole (format, complete
 * mark, tensor table; checksums are not read): a malloc'd path, or NULL.
 * *count gets the number of checkpoint files there. */
static char *newest_complete(const char *dir, long *iteration, int *count)
{
    long *its;
    int n = gl_ckpt_list(dir, &its);
    char path[4096], *best = NULL;
    for (int i = 0; i < n && !best; i++) {
        gl_ckpt *ck;
        gl_ckpt_file_name(path, sizeof path, dir, its[i]);
        /* (why a file does not open is not this message) */
        if (open_local(path, &ck, NULL) == GL_CKPT_OK) {
            best = gl_strdup(path);
            *iteration = its[i];
            gl_ckpt_close(ck);
        }
    }
    free(its);
    *count = n;
    return best;
}

/* A --load directory whose tracker is missing or unreadable (why): with
 * checkpoint files there, resuming from the start would write over them,
 * so refuse and say how to resume from the newest complete one. */
static int tracker_refusal(const char *dir, const char *why, const char *fix_if_none,
                           gl_error *err)
{
    long it = -1;
    int n = 0;
    char *best = newest_complete(dir, &it, &n);
    if (best)
        gl_errprintf(err, "%s: the newest complete checkpoint there is %s: resume from it "
                     "with --load %s, or write %ld into %s/%s", why, best, best, it, dir,
                     GL_CKPT_TRACKER);
    else if (n)
        gl_errprintf(err, "%s, and none of the %d checkpoint files there is complete: "
                     "remove them to start from scratch, or give --load a whole checkpoint",
                     why, n);
    else
        gl_errprintf(err, "%s: %s", why, fix_if_none);
    free(best);
    return GL_CKPT_ERR;
}

/* Which checkpoint the directory PATH means: its tracker's, or none. */
static int resolve_dir(const char *path, char **file, char **dir, long *iteration,
                       gl_error *err)
{
    long it;
    gl_error why;
    int st = gl_ckpt_read_tracker(path, &it, &why);
    if (st == GL_CKPT_NONE) {
        long *its;
        int n = gl_ckpt_list(path, &its);
        free(its);
        if (n == 0) {
            gl_errprintf(err, "no checkpoint in %s (no %s there): starting from scratch",
                         path, GL_CKPT_TRACKER);
            return GL_CKPT_NONE;
        }
        char msg[sizeof err->text];
        snprintf(msg, sizeof msg, "%s holds checkpoint files but no %s naming the one to "
                 "resume from", path, GL_CKPT_TRACKER);
        return tracker_refusal(path, msg, "", err);
    }
    if (st == GL_CKPT_ERR)
        return tracker_refusal(path, why.text, "write the iteration to load into it, "
                               "or remove it to start from scratch", err);
    char buf[4096];
    gl_ckpt_file_name(buf, sizeof buf, path, it);
    *file = gl_strdup(buf);
    *dir = gl_strdup(path);
    *iteration = it;
    return GL_CKPT_OK;
}

/* Which file PATH means, its directory, and the iteration its name
 * carries (-1 when it carries none).  GL_CKPT_NONE: nothing to load. */
static int resolve(const char *path, char **file, char **dir, long *iteration,
                   gl_error *err)
{
    /* A directory, or a path that is not there and does not look like a
     * file: Megatron treats a --load directory without a tracker (and,
     * here, without checkpoint files) as "start from scratch". */
    size_t n = strlen(path);
    int looks_file = n > 3 && !strcmp(path + n - 3, ".h5");
    if (is_dir(path) || (access(path, F_OK) != 0 && !looks_file))
        return resolve_dir(path, file, dir, iteration, err);
    *file = gl_strdup(path);
    const char *slash = strrchr(path, '/');
    *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : gl_strdup(".");
    const char *base = slash ? slash + 1 : path;
    long it;
    char *end;
    *iteration = -1;
    if (!strncmp(base, "iter_", 5) && (it = strtol(base + 5, &end, 10)) >= 0 &&
        !strcmp(end, ".h5"))
        *iteration = it;
    return GL_CKPT_OK;
}

/* Open and check on this rank alone. */
static int open_local(const char *path, gl_ckpt **out, gl_error *err)
{
    gl_ckpt *ck = gl_calloc(1, sizeof *ck);
    ck->h5 = -1;
    long name_it = -1;
    int st = resolve(path, &ck->file, &ck->dir, &name_it, err);
    if (st != GL_CKPT_OK) {
        free(ck);
        return st;
    }
    ck->iteration = name_it;

    struct stat sb;
    if (stat(ck->file, &sb) != 0) {
        char why[600];
        snprintf(why, sizeof why, "does not exist%s%s%s",
                 is_dir(path) ? " (named by " : "", is_dir(path) ? path : "",
                 is_dir(path) ? "/" GL_CKPT_TRACKER ")" : "");
        refuse(ck->dir, ck->file, name_it, why, err);
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    if (!S_ISREG(sb.st_mode)) {
        /* HDF5 would block on a FIFO, and read a device. */
        refuse(ck->dir, ck->file, name_it, "is not a regular file", err);
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    ck->h5 = H5Fopen(ck->file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (ck->h5 < 0) {
        char why[800];
        h5_why m = h5_msg();
        if (strstr(m.text, "truncated"))
            snprintf(why, sizeof why, "is truncated (%lld bytes; HDF5: %s)",
                     (long long)sb.st_size, m.text);
        else
            snprintf(why, sizeof why, "is not a readable HDF5 file (%lld bytes; "
                     "HDF5: %s)", (long long)sb.st_size, m.text);
        refuse(ck->dir, ck->file, name_it, why, err);
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    char *fmt = attr_str(ck->h5, "format");
    int good = fmt && !strcmp(fmt, GL_CKPT_FORMAT);
    free(fmt);
    if (!good) {
        refuse(ck->dir, ck->file, name_it, "is not a gridlm checkpoint (no format "
               "attribute \"" GL_CKPT_FORMAT "\")", err);
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    int complete = 0;
    if (H5Aexists(ck->h5, "complete") > 0)
        attr_nums(ck->h5, "complete", H5T_INTEGER, H5T_NATIVE_INT, &complete,
                  sizeof complete, 1, NULL, err);
    long long it = -1;
    if (complete != 1 ||
        attr_nums(ck->h5, "iteration", H5T_INTEGER, H5T_NATIVE_LLONG, &it,
                  sizeof it, 1, NULL, err) != GL_CKPT_OK) {
        refuse(ck->dir, ck->file, name_it, "is incomplete (its save did not finish)", err);
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    if (name_it >= 0 && it != name_it) {
        char why[200];
        snprintf(why, sizeof why, "holds iteration %lld, not the %ld its name says",
                 it, name_it);
        refuse(ck->dir, ck->file, name_it, why, err);
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    ck->iteration = (long)it;
    if (list_tensors(ck, err) != GL_CKPT_OK) {
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    *out = ck;
    return GL_CKPT_OK;
}

int gl_ckpt_open(MPI_Comm comm, const char *path, int flags, gl_ckpt **out, gl_error *err)
{
    h5_quiet();
    gl_error_clear(err);
    *out = NULL;
    gl_ckpt *ck = NULL;
    int st = open_local(path, &ck, err);
    /* All ranks must agree: NONE on every rank, or all open, or error. */
    int none = st == GL_CKPT_NONE, all_none;
    MPI_Allreduce(&none, &all_none, 1, MPI_INT, MPI_MIN, comm);
    if (all_none) {
        gl_ckpt_close(ck);
        return GL_CKPT_NONE;
    }
    if (st == GL_CKPT_NONE)
        st = gl_errprintf(err, "some ranks see a checkpoint in %s and others do not", path);
    if (agree(comm, st, err) != GL_CKPT_OK) {
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    if ((flags & GL_CKPT_VERIFY) && gl_ckpt_verify(ck, comm, NULL, err) != GL_CKPT_OK) {
        gl_ckpt_close(ck);
        return GL_CKPT_ERR;
    }
    *out = ck;
    return GL_CKPT_OK;
}

/* Read rows [r0, r0 + nr) of entry e (all columns) into buf. */
static int read_rows(gl_ckpt *ck, const entry *e, long r0, long nr, float *buf,
                     gl_error *err)
{
    gl_ckpt_tensor t = {
        .name = e->info.name, .ndim = e->info.ndim,
        .shape = { e->info.shape[0], e->info.shape[1] },
        .offset = { r0, 0 }, .count = { nr, e->info.shape[1] },
        .data = buf,
    };
    return gl_ckpt_read(ck, &t, err);
}

int gl_ckpt_verify(gl_ckpt *ck, MPI_Comm comm, int *bad, gl_error *err)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    h5_quiet();
    const long block = 1L << 22;  /* elements per read: 16 MiB */
    uint64_t *sums = gl_calloc(ck->n ? ck->n : 1, sizeof *sums);
    float *buf = NULL;
    long bufn = 0;
    int st = GL_CKPT_OK;
    for (int i = 0; i < ck->n && st == GL_CKPT_OK; i++) {
        const entry *e = &ck->e[i];
        long rows = e->info.shape[0];
        long cols = e->info.ndim == 2 ? e->info.shape[1] : 1;
        long r0 = rows * rank / size, r1 = rows * (rank + 1) / size;
        long step = block / cols > 0 ? block / cols : 1;
        for (long r = r0; r < r1 && st == GL_CKPT_OK; r += step) {
            long nr = r1 - r < step ? r1 - r : step;
            if (nr * cols > bufn) {
                bufn = nr * cols;
                buf = gl_realloc(buf, bufn * sizeof *buf);
            }
            st = read_rows(ck, e, r, nr, buf, err);
            if (st == GL_CKPT_OK)
                sums[i] += gl_ckpt_sum_f32(buf, nr * cols, r * cols);
        }
    }
    free(buf);
    if (agree(comm, st, err) != GL_CKPT_OK) {
        free(sums);
        return GL_CKPT_ERR;
    }
    MPI_Allreduce(MPI_IN_PLACE, sums, ck->n, MPI_UINT64_T, MPI_SUM, comm);
    int first = -1, nbad = 0;
    for (int i = 0; i < ck->n; i++) {
        int b = sums[i] != ck->e[i].info.checksum;
        if (bad)
            bad[i] = b;
        if (b && first < 0)
            first = i;
        nbad += b;
    }
    free(sums);
    if (first >= 0) {
        char why[600];
        snprintf(why, sizeof why, "is corrupt (tensor %s%s fails its checksum)",
                 ck->e[first].info.name, nbad > 1 ? " and others" : "");
        if (nbad > 1)
            snprintf(why, sizeof why, "is corrupt (%d tensors fail their checksums, "
                     "the first %s)", nbad, ck->e[first].info.name);
        return refuse(ck->dir, ck->file, ck->iteration, why, err);
    }
    return GL_CKPT_OK;
}

static char *shape_text(char *buf, int ndim, const long *shape)
{
    if (ndim == 2)
        snprintf(buf, 64, "[%ld, %ld]", shape[0], shape[1]);
    else
        snprintf(buf, 64, "[%ld]", shape[0]);
    return buf;
}

int gl_ckpt_read(gl_ckpt *ck, const gl_ckpt_tensor *t, gl_error *err)
{
    h5_quiet();
    if (check_tensor(t, 1, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    int i = gl_ckpt_find(ck, t->name);
    if (i < 0)
        return gl_errprintf(err, "checkpoint %s has no tensor %s", ck->file, t->name);
    const gl_ckpt_info *in = &ck->e[i].info;
    if (in->ndim != t->ndim || in->shape[0] != t->shape[0] ||
        (t->ndim == 2 && in->shape[1] != t->shape[1]))
    {
        char a[64], b[64];
        return gl_errprintf(err, "checkpoint %s: tensor %s is %s there, but %s here: the "
                            "model's configuration differs from the checkpoint's",
                            ck->file, t->name, shape_text(a, in->ndim, in->shape),
                            shape_text(b, t->ndim, t->shape));
    }
    if (held(t) == 0)
        return GL_CKPT_OK;
    hid_t ds = H5Dopen2(ck->h5, ck->e[i].path, H5P_DEFAULT);
    if (ds < 0)
        return gl_errprintf(err, "checkpoint %s: cannot open tensor %s: %s", ck->file,
                            t->name, h5_msg().text);
    hid_t fspace = H5Dget_space(ds);
    hid_t mspace = select_held(t, fspace);
    herr_t rc = H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, t->data);
    char why[800];
    if (rc < 0)     /* before the closes clear HDF5's error stack */
        snprintf(why, sizeof why, "cannot be read (tensor %s: HDF5: %s)", t->name,
                 h5_msg().text);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(ds);
    if (rc < 0) {
        return refuse(ck->dir, ck->file, ck->iteration, why, err);
    }
    return GL_CKPT_OK;
}

int gl_ckpt_read_padded(gl_ckpt *ck, const gl_ckpt_tensor *t, gl_error *err)
{
    if (check_tensor(t, 1, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    int i = gl_ckpt_find(ck, t->name);
    if (i < 0)
        return gl_errprintf(err, "checkpoint %s has no tensor %s", ck->file, t->name);
    const gl_ckpt_info *in = &ck->e[i].info;
    if (t->nelem > 0)
        return gl_errprintf(err, "checkpoint tensor %s: a padded read takes a whole slab, "
                            "not a part", t->name);
    if (in->ndim != t->ndim || (t->ndim == 2 && in->shape[1] != t->shape[1]))
        return gl_ckpt_read(ck, t, err);    /* the shape error message */
    long stored = in->shape[0];
    long have = stored - t->offset[0];
    have = have < 0 ? 0 : have > t->count[0] ? t->count[0] : have;
    gl_ckpt_tensor part = *t;
    part.shape[0] = stored;
    part.count[0] = have;
    if (have > 0 && gl_ckpt_read(ck, &part, err) != GL_CKPT_OK)
        return GL_CKPT_ERR;
    long cols = t->ndim == 2 ? t->count[1] : 1;
    long ld = t->ndim == 2 ? (t->ld ? t->ld : t->count[1]) : 1;
    for (long r = have; r < t->count[0]; r++)
        memset(t->data + r * ld, 0, (size_t)cols * sizeof *t->data);
    return GL_CKPT_OK;
}
