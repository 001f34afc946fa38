/*
 * ckpt_read.c: reading checkpoints (ckpt.h: gl_ckpt_open, and the reads,
 * checks and attribute queries of a gl_ckpt).
 *
 * Reading is independent: each rank opens the file read-only with the
 * default (POSIX) driver, so no rank waits for another; only opening
 * (where the ranks agree) and verifying (which shares the checksums out)
 * are collective.  A file that is missing, damaged or incomplete is
 * refused with a message that names the previous checkpoint.
 */
#include <config.h>
#include "ckpt/ckpt_h5.h"
#include "base/log.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
                              gl_ckpt_h5_msg().text);
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
                            gl_ckpt_h5_msg().text);
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
                 vs.why.text[0] ? vs.why.text : gl_ckpt_h5_msg().text);
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
    char what[PATH_MAX];
    if (gl_ckpt_is_megatron(path, what, sizeof what))
        return gl_errprintf(err, "%s is a Megatron-LM checkpoint (%s), which gridlm does not "
                            "read: convert it to Hugging Face with Megatron-Bridge "
                            "(AutoBridge.export_ckpt), then run gridlm-ckpt import-hf "
                            "HF_DIR OUT and give --load OUT", path, what);
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
        gl_ckpt_h5_why m = gl_ckpt_h5_msg();
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
    gl_ckpt_h5_quiet();
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
    if (gl_ckpt_agree(comm, st, err) != GL_CKPT_OK) {
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

int gl_ckpt_open_alone(const char *path, gl_ckpt **out, gl_error *err)
{
    gl_ckpt_h5_quiet();
    gl_error_clear(err);
    *out = NULL;
    return open_local(path, out, err);
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
    gl_ckpt_h5_quiet();
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
    if (gl_ckpt_agree(comm, st, err) != GL_CKPT_OK) {
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

/* The stored tensor a read of t reads: NULL, with err, when t's
 * description makes no sense or the checkpoint has no tensor of its name. */
static const entry *entry_to_read(gl_ckpt *ck, const gl_ckpt_tensor *t, gl_error *err)
{
    if (gl_ckpt_check_tensor(t, 1, err) != GL_CKPT_OK)
        return NULL;
    int i = gl_ckpt_find(ck, t->name);
    if (i < 0) {
        gl_errprintf(err, "checkpoint %s has no tensor %s", ck->file, t->name);
        return NULL;
    }
    return &ck->e[i];
}

int gl_ckpt_read(gl_ckpt *ck, const gl_ckpt_tensor *t, gl_error *err)
{
    gl_ckpt_h5_quiet();
    const entry *e = entry_to_read(ck, t, err);
    if (!e)
        return GL_CKPT_ERR;
    const gl_ckpt_info *in = &e->info;
    if (in->ndim != t->ndim || in->shape[0] != t->shape[0] ||
        (t->ndim == 2 && in->shape[1] != t->shape[1]))
    {
        char a[64], b[64];
        return gl_errprintf(err, "checkpoint %s: tensor %s is %s there, but %s here: the "
                            "model's configuration differs from the checkpoint's",
                            ck->file, t->name, shape_text(a, in->ndim, in->shape),
                            shape_text(b, t->ndim, t->shape));
    }
    if (gl_ckpt_held(t) == 0)
        return GL_CKPT_OK;
    hid_t ds = H5Dopen2(ck->h5, e->path, H5P_DEFAULT);
    if (ds < 0)
        return gl_errprintf(err, "checkpoint %s: cannot open tensor %s: %s", ck->file,
                            t->name, gl_ckpt_h5_msg().text);
    hid_t fspace = H5Dget_space(ds);
    hid_t mspace = gl_ckpt_select_held(t, fspace);
    herr_t rc = H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, t->data);
    char why[800];
    if (rc < 0)     /* before the closes clear HDF5's error stack */
        snprintf(why, sizeof why, "cannot be read (tensor %s: HDF5: %s)", t->name,
                 gl_ckpt_h5_msg().text);
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
    const entry *e = entry_to_read(ck, t, err);
    if (!e)
        return GL_CKPT_ERR;
    const gl_ckpt_info *in = &e->info;
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
