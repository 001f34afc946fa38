/* safetensors.c: safetensors files and model directories (safetensors.h). */
#include <config.h>
#include "ckpt/safetensors.h"
#include "ckpt/half.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "base/mapped.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers above 100 MB. */
#define MAX_HEADER (100u * 1000 * 1000)

static const struct { const char *name; size_t size; } dtypes[GL_ST_NDTYPES] = {
    [GL_ST_BOOL] = { "BOOL", 1 },       [GL_ST_U8] = { "U8", 1 },
    [GL_ST_I8] = { "I8", 1 },           [GL_ST_F8_E5M2] = { "F8_E5M2", 1 },
    [GL_ST_F8_E4M3] = { "F8_E4M3", 1 }, [GL_ST_I16] = { "I16", 2 },
    [GL_ST_U16] = { "U16", 2 },         [GL_ST_F16] = { "F16", 2 },
    [GL_ST_BF16] = { "BF16", 2 },       [GL_ST_I32] = { "I32", 4 },
    [GL_ST_U32] = { "U32", 4 },         [GL_ST_F32] = { "F32", 4 },
    [GL_ST_I64] = { "I64", 8 },         [GL_ST_U64] = { "U64", 8 },
    [GL_ST_F64] = { "F64", 8 },
};

const char *gl_st_dtype_name(gl_st_dtype t)
{
    return (unsigned)t < GL_ST_NDTYPES ? dtypes[t].name : "?";
}

int gl_st_dtype_parse(const char *s)
{
    for (int i = 0; i < GL_ST_NDTYPES; i++)
        if (!strcmp(s, dtypes[i].name))
            return i;
    return -1;
}

size_t gl_st_dtype_size(gl_st_dtype t)
{
    return (unsigned)t < GL_ST_NDTYPES ? dtypes[t].size : 0;
}

long gl_st_numel(const gl_st_tensor *t)
{
    long n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

void gl_st_close(gl_st_file *f)
{
    if (!f)
        return;
    if (f->map && f->map != MAP_FAILED) {
        gl_mapped_remove(f->map);
        munmap(f->map, f->size);
    }
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_key[i]);
        free(f->meta_value[i]);
    }
    free(f->meta_key);
    free(f->meta_value);
    free(f->t);
    free(f->path);
    free(f);
}

/* A JSON integer >= 0 that fits a long. */
static int json_nonneg(json_t *v, long *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (long)json_integer_value(v);
    return 1;
}

/* One header entry: dtype, shape, data_offsets. */
static int parse_entry(const char *path, const char *name, json_t *v,
                       const unsigned char *data, size_t data_size,
                       gl_st_tensor *t, size_t *begin, gl_error *err)
{
    if (!json_is_object(v))
        return gl_errprintf(err, "%s: tensor %s: header entry is not an object", path, name);
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off))
        return gl_errprintf(err, "%s: tensor %s: header entry needs \"dtype\" (a string), "
                            "\"shape\" and \"data_offsets\" (arrays)", path, name);
    int d = gl_st_dtype_parse(json_string_value(dt));
    if (d < 0)
        return gl_errprintf(err, "%s: tensor %s has unknown dtype \"%s\" (known: BOOL, U8, I8, "
                            "F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, "
                            "U64, F64)", path, name, json_string_value(dt));
    t->dtype = d;
    if (json_array_size(sh) > GL_ST_MAXDIM)
        return gl_errprintf(err, "%s: tensor %s has %zu dimensions; at most %d are supported",
                            path, name, json_array_size(sh), GL_ST_MAXDIM);
    t->ndim = (int)json_array_size(sh);
    size_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (!json_nonneg(json_array_get(sh, i), &t->shape[i]))
            return gl_errprintf(err, "%s: tensor %s: shape entry %d is not a non-negative "
                                "integer", path, name, i);
        if (t->shape[i] && numel > SIZE_MAX / 16 / (size_t)t->shape[i])
            return gl_errprintf(err, "%s: tensor %s: shape is too large", path, name);
        numel *= (size_t)t->shape[i];
    }
    long b, e;
    if (json_array_size(off) != 2 || !json_nonneg(json_array_get(off, 0), &b) ||
        !json_nonneg(json_array_get(off, 1), &e) || e < b)
        return gl_errprintf(err, "%s: tensor %s: data_offsets must be [begin, end] with "
                            "0 <= begin <= end", path, name);
    size_t need = numel * dtypes[d].size;
    if ((size_t)(e - b) != need)
        return gl_errprintf(err, "%s: tensor %s: data_offsets [%ld, %ld] hold %ld bytes, but "
                            "dtype %s and its shape need %zu", path, name, b, e, e - b,
                            dtypes[d].name, need);
    if ((size_t)e > data_size)
        return gl_errprintf(err, "%s: tensor %s: data_offsets [%ld, %ld] run past the end of "
                            "the data (%zu bytes): the file is truncated or damaged",
                            path, name, b, e, data_size);
    t->nbytes = need;
    t->data = data + b;
    *begin = (size_t)b;
    return 0;
}

typedef struct { size_t begin; int index; } span;

static int by_begin(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The data ranges must tile [0, data_size) exactly: sorted by start,
 * each starts where the previous ended and the last ends at the end. */
static int check_tiling(gl_st_file *f, span *s, size_t data_size, gl_error *err)
{
    qsort(s, f->n, sizeof *s, by_begin);
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const gl_st_tensor *t = &f->t[s[i].index];
        if (s[i].begin < at)
            return gl_errprintf(err, "%s: tensors %s and %s overlap (data_offsets)", f->path,
                                f->t[s[i - 1].index].name, t->name);
        if (s[i].begin > at)
            return gl_errprintf(err, "%s: bytes [%zu, %zu) of the data belong to no tensor "
                                "(a hole before %s)", f->path, at, s[i].begin, t->name);
        at = s[i].begin + t->nbytes;
    }
    if (at != data_size)
        return gl_errprintf(err, "%s: the tensors end at byte %zu of the data, the file at "
                            "%zu: trailing bytes belong to no tensor", f->path, at, data_size);
    return 0;
}

static int parse_metadata(gl_st_file *f, json_t *m, gl_error *err)
{
    if (!json_is_object(m))
        return gl_errprintf(err, "%s: __metadata__ is not an object", f->path);
    size_t n = json_object_size(m);
    f->meta_key = gl_calloc(n ? n : 1, sizeof *f->meta_key);
    f->meta_value = gl_calloc(n ? n : 1, sizeof *f->meta_value);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return gl_errprintf(err, "%s: __metadata__ value of \"%s\" is not a string",
                                f->path, k);
        f->meta_key[f->nmeta] = gl_strdup(k);
        f->meta_value[f->nmeta] = gl_strdup(json_string_value(v));
        f->nmeta++;
    }
    return 0;
}

static int parse_header(gl_st_file *f, const char *text, size_t len,
                        const unsigned char *data, size_t data_size, gl_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gl_errprintf(err, "%s: the header is not valid JSON (%s at line %d, column %d)",
                            f->path, je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = gl_errprintf(err, "%s: the header is not a JSON object", f->path);
        goto out;
    }
    size_t cap = json_object_size(root);
    f->t = gl_calloc(cap ? cap : 1, sizeof *f->t);
    span *s = gl_calloc(cap ? cap : 1, sizeof *s);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (!strcmp(k, "__metadata__")) {
            if ((rc = parse_metadata(f, v, err)) != 0)
                break;
            continue;
        }
        gl_st_tensor *t = &f->t[f->n];
        if ((rc = parse_entry(f->path, k, v, data, data_size, t, &s[f->n].begin, err)) != 0)
            break;
        t->name = gl_strdup(k);
        s[f->n].index = f->n;
        f->n++;
    }
    if (rc == 0)
        rc = check_tiling(f, s, data_size, err);
    free(s);
out:
    json_decref(root);
    return rc;
}

int gl_st_open(const char *path, gl_st_file **out, gl_error *err)
{
    *out = NULL;
    gl_st_file *f = gl_calloc(1, sizeof *f);
    f->path = gl_strdup(path);
    gl_error e;
    int fd = gl_file_open_read(path, &e);
    if (fd < 0) {
        gl_errprintf(err, "%s", e.text);
        gl_st_close(f);
        return -1;
    }
    struct stat st;
    fstat(fd, &st);
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        close(fd);
        gl_errprintf(err, "%s is %zu bytes long: too short for a safetensors file (an 8-byte "
                     "header length, then the header)", path, f->size);
        gl_st_close(f);
        return -1;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        gl_errprintf(err, "cannot map %s: %s", path, strerror(errno));
        gl_st_close(f);
        return -1;
    }
    gl_mapped_add(f->map, f->size, path);   /* SIGBUS, if it shrinks, names it */
    const unsigned char *p = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | p[i];
    int rc;
    if (n > f->size - 8)
        rc = gl_errprintf(err, "%s: header length %llu runs past the end of the file (%zu "
                          "bytes): truncated, or not a safetensors file", path,
                          (unsigned long long)n, f->size);
    else if (n > MAX_HEADER)
        rc = gl_errprintf(err, "%s: header length %llu is above the limit of %u bytes", path,
                          (unsigned long long)n, MAX_HEADER);
    else if (n < 2 || p[8] != '{')
        rc = gl_errprintf(err, "%s: the header does not start with '{': not a safetensors file",
                          path);
    else
        rc = parse_header(f, (const char *)p + 8, (size_t)n, p + 8 + n,
                          f->size - 8 - n, err);
    if (rc) {
        gl_st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

const gl_st_tensor *gl_st_find(const gl_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

const char *gl_st_meta(const gl_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_key[i], key))
            return f->meta_value[i];
    return NULL;
}

int gl_st_to_f32(const gl_st_tensor *t, float *out, gl_error *err)
{
    size_t n = (size_t)gl_st_numel(t);
    switch (t->dtype) {
    case GL_ST_F32:
        memcpy(out, t->data, n * 4);
        return 0;
    case GL_ST_BF16:
        gl_bf16_to_f32_n(t->data, out, n);
        return 0;
    case GL_ST_F16:
        gl_f16_to_f32_n(t->data, out, n);
        return 0;
    default:
        return gl_errprintf(err, "tensor %s has dtype %s; gridlm reads F32, BF16 and F16",
                            t->name, gl_st_dtype_name(t->dtype));
    }
}

/* ------------------------------------------------------------------ */
/* Writing                                                             */
/* ------------------------------------------------------------------ */

static size_t out_numel(const gl_st_out *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

static size_t out_bytes(const gl_st_out *t)
{
    return out_numel(t) * dtypes[t->dtype].size;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Convert and write one tensor in pieces, so no second full copy exists. */
static int write_tensor(int fd, const gl_st_out *t)
{
    size_t n = out_numel(t), piece = 1u << 20;
    unsigned char *buf = gl_malloc(piece * 4);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += piece) {
        size_t k = n - i < piece ? n - i : piece;
        if (t->dtype == GL_ST_F32) {
            rc = write_all(fd, t->data + i, k * 4);
            continue;
        }
        if (t->dtype == GL_ST_BF16)
            gl_f32_to_bf16_n(t->data + i, buf, k);
        else
            gl_f32_to_f16_n(t->data + i, buf, k);
        rc = write_all(fd, buf, k * 2);
    }
    free(buf);
    return rc;
}

int gl_st_write(const char *path, const gl_st_out *t, int n,
                const char *const *meta, int nmeta, gl_error *err)
{
    json_t *root = json_object();
    if (nmeta > 0) {
        json_t *m = json_object();
        for (int i = 0; i < nmeta; i++)
            json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]));
        json_object_set_new(root, "__metadata__", m);
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].dtype != GL_ST_F32 && t[i].dtype != GL_ST_BF16 && t[i].dtype != GL_ST_F16) {
            json_decref(root);
            return gl_errprintf(err, "%s: tensor %s: gridlm writes F32, BF16 or F16, not %s",
                                path, t[i].name, gl_st_dtype_name(t[i].dtype));
        }
        if (json_object_get(root, t[i].name)) {
            json_decref(root);
            return gl_errprintf(err, "%s: tensor %s is named twice", path, t[i].name);
        }
        json_t *e = json_object(), *sh = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(sh, json_integer(t[i].shape[d]));
        json_object_set_new(e, "dtype", json_string(gl_st_dtype_name(t[i].dtype)));
        json_object_set_new(e, "shape", sh);
        json_t *off = json_array();
        json_array_append_new(off, json_integer((json_int_t)at));
        at += out_bytes(&t[i]);
        json_array_append_new(off, json_integer((json_int_t)at));
        json_object_set_new(e, "data_offsets", off);
        json_object_set_new(root, t[i].name, e);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    /* Pad the header with spaces so that the data starts 8-byte aligned. */
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    unsigned char head[8];
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)((uint64_t)padded >> (8 * i));

    gl_error e;
    gl_file_tmp *tmp = gl_file_tmp_create(path, 0, &e);
    if (!tmp) {
        free(text);
        return gl_errprintf(err, "%s", e.text);
    }
    int fd = gl_file_tmp_fd(tmp);
    int rc = write_all(fd, head, 8) || write_all(fd, text, len) ||
             write_all(fd, "        ", padded - len);
    free(text);
    for (int i = 0; i < n && rc == 0; i++)
        rc = write_tensor(fd, &t[i]);
    if (rc != 0) {
        gl_errprintf(err, "cannot write %s (through %s): %s", path, gl_file_tmp_path(tmp),
                     strerror(errno));
        gl_file_tmp_discard(tmp);
        return -1;
    }
    if (gl_file_tmp_publish(tmp, 0, &e) < 0)
        return gl_errprintf(err, "%s", e.text);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Model directories                                                   */
/* ------------------------------------------------------------------ */

void gl_st_model_close(gl_st_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nfiles; i++)
        gl_st_close(m->files[i]);
    free(m->files);
    free(m->dir);
    free(m);
}

const gl_st_tensor *gl_st_model_find(const gl_st_model *m, const char *name)
{
    for (int i = 0; i < m->nfiles; i++) {
        const gl_st_tensor *t = gl_st_find(m->files[i], name);
        if (t)
            return t;
    }
    return NULL;
}

static int open_index(gl_st_model *m, const char *index, gl_error *err)
{
    gl_error e;
    json_t *root = gl_json_load(index, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return gl_errprintf(err, "%s", e.text);
    json_t *wm = json_object_get(root, "weight_map");
    int rc = 0;
    if (!json_is_object(wm)) {
        rc = gl_errprintf(err, "%s has no \"weight_map\" object", index);
        goto out;
    }
    /* Open each distinct shard once, in the order first named. */
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *shard = json_string_value(v);
        if (!shard || strchr(shard, '/')) {
            rc = gl_errprintf(err, "%s: weight_map entry for %s is not a file name in %s",
                              index, k, m->dir);
            goto out;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", m->dir, shard);
        int have = -1;
        for (int i = 0; i < m->nfiles; i++)
            if (!strcmp(m->files[i]->path, path))
                have = i;
        if (have < 0) {
            m->files = gl_realloc(m->files, (m->nfiles + 1) * sizeof *m->files);
            if (gl_st_open(path, &m->files[m->nfiles], err) != 0) {
                rc = -1;
                goto out;
            }
            have = m->nfiles++;
        }
        if (!gl_st_find(m->files[have], k)) {
            rc = gl_errprintf(err, "%s names tensor %s in %s, which does not hold it", index,
                              k, path);
            goto out;
        }
    }
out:
    json_decref(root);
    return rc;
}

int gl_st_model_open(const char *dir, gl_st_model **out, gl_error *err)
{
    *out = NULL;
    gl_st_model *m = gl_calloc(1, sizeof *m);
    m->dir = gl_strdup(dir);
    char single[4096], index[4096];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    int rc;
    if (access(index, F_OK) == 0) {
        rc = open_index(m, index, err);
    } else if (access(single, F_OK) == 0) {
        m->files = gl_calloc(1, sizeof *m->files);
        rc = gl_st_open(single, &m->files[0], err);
        if (rc == 0)
            m->nfiles = 1;
    } else {
        rc = gl_errprintf(err, "%s holds neither model.safetensors nor "
                          "model.safetensors.index.json", dir);
    }
    if (rc) {
        gl_st_model_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

int gl_st_is_model_file(const char *name)
{
    if (!strcmp(name, "model.safetensors") || !strcmp(name, "model.safetensors.index.json"))
        return 1;
    /* model-00001-of-00002.safetensors */
    const char *p = name;
    if (strncmp(p, "model-", 6) != 0)
        return 0;
    p += 6;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (strncmp(p, "-of-", 4) != 0)
        return 0;
    p += 4;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    return !strcmp(p, ".safetensors");
}

/* Remove the weight files of DIR that are not in keep (NULL-terminated):
 * an earlier export's shards or index, which would describe another
 * model than the one just written.  Says which, in one line (counting
 * the earlier index, when the write began by removing one). */
static int remove_stale(const char *dir, const char *const *keep, int old_index, gl_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return gl_errprintf(err, "cannot list %s: %s", dir, strerror(errno));
    int removed = old_index;
    char names[400] = "";
    if (old_index)
        snprintf(names, sizeof names, "model.safetensors.index.json");
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d))) {
        if (!gl_st_is_model_file(e->d_name) || gl_file_name_in(e->d_name, (void *)keep) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) != 0) {
            int errnum = errno;
            closedir(d);
            return gl_errprintf(err, "cannot remove %s/%s, a weight file of an earlier write: %s",
                                dir, e->d_name, strerror(errnum));
        }
        gl_file_list_name(names, sizeof names, removed++, e->d_name);
    }
    closedir(d);
    if (removed)
        gl_info("%s: removed %d weight file%s of an earlier export that this one replaces: %s",
                dir, removed, removed == 1 ? "" : "s", names);
    return 0;
}

/* DIR/name, or a failure naming it. */
static int path_in(char *out, size_t n, const char *dir, const char *name, gl_error *err)
{
    if (snprintf(out, n, "%s/%s", dir, name) >= (int)n)
        return gl_errprintf(err, "path %s/%s is too long", dir, name);
    return 0;
}

int gl_st_model_write(const char *dir, const gl_st_out *t, int n,
                      size_t max_shard_bytes, const char *const *meta, int nmeta,
                      gl_error *err)
{
    gl_error e;
    if (gl_file_mkdirs(dir, &e) < 0)
        return gl_errprintf(err, "%s", e.text);
    /* An older index goes first: a directory caught halfway never pairs
     * it with new shards (readers prefer the index to model.safetensors). */
    char path[4096];
    if (path_in(path, sizeof path, dir, "model.safetensors.index.json", err))
        return -1;
    int old_index = unlink(path) == 0;
    if (!old_index && errno != ENOENT)
        return gl_errprintf(err, "cannot remove the earlier %s: %s", path, strerror(errno));
    /* Group consecutive tensors into shards of at most max_shard_bytes. */
    int *shard = gl_calloc(n ? n : 1, sizeof *shard);
    int nshards = n ? 1 : 0;
    size_t in_shard = 0, total = 0;
    for (int i = 0; i < n; i++) {
        size_t b = out_bytes(&t[i]);
        if (max_shard_bytes && in_shard > 0 && in_shard + b > max_shard_bytes) {
            nshards++;
            in_shard = 0;
        }
        shard[i] = nshards - 1;
        in_shard += b;
        total += b;
    }
    int rc = 0;
    if (nshards <= 1) {
        const char *keep[] = { "model.safetensors", NULL };
        rc = path_in(path, sizeof path, dir, keep[0], err);
        if (rc == 0)
            rc = gl_st_write(path, t, n, meta, nmeta, err);
        free(shard);
        return rc ? rc : remove_stale(dir, keep, old_index, err);
    }
    char **keep = gl_calloc((size_t)nshards + 2, sizeof *keep);
    json_t *wm = json_object();
    for (int s = 0, first = 0; s < nshards && rc == 0; s++) {
        int last = first;
        while (last < n && shard[last] == s)
            last++;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        keep[s] = gl_strdup(name);
        rc = path_in(path, sizeof path, dir, name, err);
        if (rc == 0)
            rc = gl_st_write(path, t + first, last - first, meta, nmeta, err);
        for (int i = first; i < last; i++)
            json_object_set_new(wm, t[i].name, json_string(name));
        first = last;
    }
    free(shard);
    keep[nshards] = gl_strdup("model.safetensors.index.json");
    if (rc == 0) {
        json_t *root = json_object(), *md = json_object();
        json_object_set_new(md, "total_size", json_integer((json_int_t)total));
        json_object_set_new(root, "metadata", md);
        json_object_set_new(root, "weight_map", wm);
        wm = NULL;
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(root);
        rc = path_in(path, sizeof path, dir, keep[nshards], err);
        if (rc == 0 && !text)
            rc = gl_errprintf(err, "cannot format %s (out of memory?)", path);
        if (rc == 0 && gl_file_write_all(path, text, strlen(text), 0, &e) < 0)
            rc = gl_errprintf(err, "%s", e.text);
        free(text);
    }
    json_decref(wm);
    if (rc == 0)
        rc = remove_stale(dir, (const char *const *)keep, 0, err);
    for (int s = 0; s <= nshards; s++)
        free(keep[s]);
    free(keep);
    return rc;
}
