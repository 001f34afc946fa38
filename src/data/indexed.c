/* indexed.c: Megatron .bin/.idx reader (mmap, validated) and writer. */
#include <config.h>
#include "data/indexed.h"
#include "base/file.h"
#include "base/log.h"
#include "base/mapped.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char IDX_MAGIC[9] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };

int gl_idx_dtype_size(int code)
{
    switch (code) {
    case GL_IDX_UINT8: case GL_IDX_INT8: return 1;
    case GL_IDX_INT16: case GL_IDX_UINT16: return 2;
    case GL_IDX_INT32: case GL_IDX_FLOAT32: return 4;
    case GL_IDX_INT64: case GL_IDX_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *const dtype_names[] = {
    "unknown", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"
};

const char *gl_idx_dtype_name(int code)
{
    return code >= 1 && code <= 8 ? dtype_names[code] : dtype_names[0];
}

int gl_idx_dtype_from_name(const char *name)
{
    for (int c = 1; c <= 8; c++)
        if (strcmp(name, dtype_names[c]) == 0)
            return c;
    return 0;
}

int gl_idx_dtype_for_vocab(long vocab_size)
{
    return vocab_size < 65500 ? GL_IDX_UINT16 : GL_IDX_INT32;
}

/* Little-endian loads from possibly unaligned memory.  (gridlm runs on
 * little-endian hosts only; configure would be the place to check.) */
static uint64_t ld_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static int64_t ld_i64(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static int32_t ld_i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }

struct gl_idx {
    char *prefix;
    int dtype, itemsize, multimodal;
    int64_t n_seq, n_bound, n_tokens;
    const unsigned char *idx; size_t idx_size;   /* mmap of .idx */
    const unsigned char *bin; size_t bin_size;   /* mmap of .bin (NULL if empty) */
    const unsigned char *lengths, *offsets, *bounds; /* into idx */
};

/* mmap a whole file read-only; an empty file maps to NULL/0. */
static int map_file(const char *path, const unsigned char **p, size_t *size,
                    gl_error *err)
{
    gl_error e;
    int fd = gl_file_open_read(path, &e);
    if (fd < 0)
        return gl_errprintf(err, "%s", e.text);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        gl_errprintf(err, "%s is not a regular file", path);
        close(fd);
        return -1;
    }
    *size = (size_t)st.st_size;
    *p = NULL;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            gl_errprintf(err, "cannot mmap %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        *p = m;
        /* A file truncated while mapped faults with SIGBUS when read:
         * registered, the fault becomes a message naming the file. */
        gl_mapped_add(m, *size, path);
    }
    close(fd);
    return 0;
}

/* Header and structure checks, in the order a reader would trip on them.
 * Every size computation is done in a way that cannot overflow. */
static int check_index(gl_idx *x, const char *ipath, const char *bpath,
                       gl_error *err)
{
    const unsigned char *p = x->idx;
    if (x->idx_size < GL_IDX_HEADER_SIZE)
        return gl_errprintf(err, "%s: truncated: %zu bytes, shorter than the %d-byte header",
                            ipath, x->idx_size, GL_IDX_HEADER_SIZE);
    if (memcmp(p, IDX_MAGIC, 9) != 0)
        return gl_errprintf(err, "%s: bad magic (not a Megatron MMIDIDX index file)", ipath);
    uint64_t version = ld_u64(p + 9);
    if (version != 1) {
        gl_errprintf(err, "%s: unsupported index version %" PRIu64 " (gridlm reads version 1)",
                     ipath, version);
        return -1;
    }
    x->dtype = p[17];
    x->itemsize = gl_idx_dtype_size(x->dtype);
    if (!x->itemsize) {
        gl_errprintf(err, "%s: unknown dtype code %d (valid codes are 1-8)", ipath, x->dtype);
        return -1;
    }
    uint64_t n = ld_u64(p + 18), d = ld_u64(p + 26);
    size_t body = x->idx_size - GL_IDX_HEADER_SIZE;
    /* body must be 12n + 8d (+ n for modes); bound n and d first. */
    if (n > body / 12 || d > body / 8 || 12 * n + 8 * d > body) {
        gl_errprintf(err, "%s: truncated: the header says %" PRIu64 " sequences and %" PRIu64
                     " document boundaries, which need %.0f bytes, but the file has %zu",
                     ipath, n, d, GL_IDX_HEADER_SIZE + 12.0 * (double)n + 8.0 * (double)d,
                     x->idx_size);
        return -1;
    }
    size_t need = GL_IDX_HEADER_SIZE + 12 * n + 8 * d;
    if (x->idx_size == need)
        x->multimodal = 0;
    else if (x->idx_size == need + n)
        x->multimodal = 1;
    else {
        gl_errprintf(err, "%s: size %zu does not match the header (%" PRIu64 " sequences, %"
                     PRIu64 " boundaries: expected %zu bytes)", ipath, x->idx_size, n, d, need);
        return -1;
    }
    if (d < 1)
        return gl_errprintf(err, "%s: no document boundaries (the list must start with 0)", ipath);
    x->n_seq = (int64_t)n;
    x->n_bound = (int64_t)d;
    x->lengths = p + GL_IDX_HEADER_SIZE;
    x->offsets = x->lengths + 4 * n;
    x->bounds = x->offsets + 8 * n;

    /* Lengths non-negative, offsets exactly the running byte sums. */
    uint64_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t len = ld_i32(x->lengths + 4 * i);
        int64_t off = ld_i64(x->offsets + 8 * i);
        if (len < 0) {
            gl_errprintf(err, "%s: sequence %" PRIu64 " has negative length %d", ipath, i, len);
            return -1;
        }
        if (off < 0 || (uint64_t)off != pos)
            return gl_errprintf(err, "%s: sequence %" PRIu64 " starts at byte %" PRId64
                                " but the lengths before it end at byte %" PRIu64
                                " (lengths and offsets disagree)", ipath, i, off, pos);
        pos += (uint64_t)len * (uint64_t)x->itemsize;
    }
    if (pos != x->bin_size) {
        gl_errprintf(err, "%s: the index describes %" PRIu64 " bytes of tokens but %s has %zu"
                     " bytes (%s)", ipath, pos, bpath, x->bin_size,
                     pos > x->bin_size ? "truncated .bin" : ".bin does not belong to this index");
        return -1;
    }
    x->n_tokens = (int64_t)(pos / (uint64_t)x->itemsize);

    /* Document boundaries: 0, non-decreasing, ..., N. */
    int64_t prev = -1;
    for (uint64_t j = 0; j < d; j++) {
        int64_t b = ld_i64(x->bounds + 8 * j);
        if ((j == 0 && b != 0) || b < prev || b > (int64_t)n) {
            gl_errprintf(err, "%s: document boundary %" PRIu64 " is %" PRId64
                         " (boundaries must start at 0, never decrease, and stay within the %"
                         PRIu64 " sequences)", ipath, j, b, n);
            return -1;
        }
        prev = b;
    }
    if (prev != (int64_t)n)
        return gl_errprintf(err, "%s: the last document boundary is %" PRId64 ", not the number of"
                            " sequences %" PRIu64, ipath, prev, n);
    return 0;
}

gl_idx *gl_idx_open(const char *prefix, gl_error *err)
{
    size_t plen = strlen(prefix);
    char *ipath = gl_malloc(plen + 5), *bpath = gl_malloc(plen + 5);
    sprintf(ipath, "%s.idx", prefix);
    sprintf(bpath, "%s.bin", prefix);
    gl_idx *x = gl_calloc(1, sizeof *x);
    x->prefix = gl_strdup(prefix);
    if (map_file(ipath, &x->idx, &x->idx_size, err) != 0)
        goto fail;
    if (map_file(bpath, &x->bin, &x->bin_size, err) != 0)
        goto fail;
    if (check_index(x, ipath, bpath, err) != 0)
        goto fail;
    free(ipath);
    free(bpath);
    return x;
fail:
    free(ipath);
    free(bpath);
    gl_idx_close(x);
    return NULL;
}

gl_idx *gl_idx_open_or_die(const char *prefix)
{
    gl_error err;
    gl_idx *x = gl_idx_open(prefix, &err);
    if (!x)
        gl_die("--data-path: %s", err.text);
    return x;
}

void gl_idx_close(gl_idx *x)
{
    if (!x)
        return;
    if (x->idx) {
        gl_mapped_remove(x->idx);
        munmap((void *)x->idx, x->idx_size);
    }
    if (x->bin) {
        gl_mapped_remove(x->bin);
        munmap((void *)x->bin, x->bin_size);
    }
    free(x->prefix);
    free(x);
}

const char *gl_idx_prefix(const gl_idx *x) { return x->prefix; }
int gl_idx_dtype(const gl_idx *x) { return x->dtype; }
int64_t gl_idx_num_sequences(const gl_idx *x) { return x->n_seq; }
int64_t gl_idx_num_documents(const gl_idx *x) { return x->n_bound - 1; }
int64_t gl_idx_num_tokens(const gl_idx *x) { return x->n_tokens; }
int gl_idx_multimodal(const gl_idx *x) { return x->multimodal; }

int32_t gl_idx_seq_length(const gl_idx *x, int64_t i)
{
    if (i < 0 || i >= x->n_seq)
        gl_die("%s.idx: sequence %" PRId64 " requested, the dataset has %" PRId64,
               x->prefix, i, x->n_seq);
    return ld_i32(x->lengths + 4 * i);
}

int64_t gl_idx_doc_boundary(const gl_idx *x, int64_t j)
{
    if (j < 0 || j >= x->n_bound)
        gl_die("%s.idx: document boundary %" PRId64 " requested, the dataset has %" PRId64,
               x->prefix, j, x->n_bound);
    return ld_i64(x->bounds + 8 * j);
}

int32_t *gl_idx_lengths_copy(const gl_idx *x)
{
    int32_t *v = gl_malloc((size_t)(x->n_seq ? x->n_seq : 1) * sizeof *v);
    if (x->n_seq)
        memcpy(v, x->lengths, (size_t)x->n_seq * 4);
    return v;
}

/* Convert one item of the dataset's dtype to int64; *whole is cleared
 * when a floating value is not an integer. */
static int64_t load_item(const unsigned char *p, int dtype, int *whole)
{
    switch (dtype) {
    case GL_IDX_UINT8: return p[0];
    case GL_IDX_INT8: return (int8_t)p[0];
    case GL_IDX_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case GL_IDX_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case GL_IDX_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case GL_IDX_INT64: { int64_t v; memcpy(&v, p, 8); return v; }
    case GL_IDX_FLOAT32: {
        float v; memcpy(&v, p, 4);
        if (!(v == floorf(v)) || fabsf(v) > 2147483647.0f) { *whole = 0; return 0; }
        return (int64_t)v;
    }
    case GL_IDX_FLOAT64: {
        double v; memcpy(&v, p, 8);
        if (!(v == floor(v)) || fabs(v) > 2147483647.0) { *whole = 0; return 0; }
        return (int64_t)v;
    }
    }
    *whole = 0;
    return 0;
}

int gl_idx_read_tokens_checked(const gl_idx *x, int64_t i, int64_t offset, int64_t count,
                               int32_t *out, long vocab_size, gl_error *err)
{
    if (i < 0 || i >= x->n_seq)
        return gl_errprintf(err, "%s.bin: sequence %" PRId64 " requested, the dataset has %" PRId64,
                            x->prefix, i, x->n_seq);
    int64_t len = ld_i32(x->lengths + 4 * i);
    if (offset < 0 || count < 0 || offset > len || count > len - offset) {
        gl_errprintf(err, "%s.bin: tokens [%" PRId64 ", %" PRId64 ") of sequence %" PRId64
                     " requested, it has %" PRId64, x->prefix, offset, offset + count, i, len);
        return -1;
    }
    const unsigned char *p = x->bin + ld_i64(x->offsets + 8 * i) + offset * x->itemsize;
    for (int64_t k = 0; k < count; k++, p += x->itemsize) {
        int whole = 1;
        int64_t v = load_item(p, x->dtype, &whole);
        if (!whole || v < INT32_MIN || v > INT32_MAX || v < 0 ||
            (vocab_size > 0 && v >= vocab_size)) {
            if (whole)
                gl_errprintf(err, "%s.bin: token %" PRId64 " of sequence %" PRId64 " is %" PRId64
                             ", outside the vocabulary [0, %ld): was the dataset made with another"
                             " tokenizer?", x->prefix, offset + k, i, v, vocab_size > 0 ? vocab_size
                             : (long)INT32_MAX);
            else
                gl_errprintf(err, "%s.bin: token %" PRId64 " of sequence %" PRId64
                             " is not a whole number (%s data)", x->prefix, offset + k, i,
                             gl_idx_dtype_name(x->dtype));
            return -1;
        }
        out[k] = (int32_t)v;
    }
    return 0;
}

void gl_idx_read_tokens(const gl_idx *x, int64_t i, int64_t offset, int64_t count,
                        int32_t *out, long vocab_size)
{
    gl_error err;
    if (gl_idx_read_tokens_checked(x, i, offset, count, out, vocab_size, &err) != 0)
        gl_die("%s", err.text);
}

/* ------------------------------------------------------------------ */
/* Writer                                                              */

struct gl_idx_writer {
    char *prefix, *bin_tmp, *len_tmp, *doc_tmp;
    gl_file_tmp *tbin, *tlen, *tdoc;    /* base/file.h: removed unless published */
    FILE *bin, *len, *doc;
    int dtype, itemsize;
    int64_t n_seq, n_bound, n_tokens;
    unsigned char *buf; size_t bufcap;
};

/* A temporary beside PREFIX+EXT (base/file.h), its name and its stream. */
static FILE *open_tmp(const char *prefix, const char *ext, gl_file_tmp **t, char **path)
{
    size_t n = strlen(prefix) + strlen(ext) + 1;
    char *final = gl_malloc(n);
    snprintf(final, n, "%s%s", prefix, ext);
    gl_error e;
    *t = gl_file_tmp_create(final, 0, &e);
    free(final);
    if (!*t)
        gl_die("%s", e.text);
    *path = gl_strdup(gl_file_tmp_path(*t));
    return gl_file_tmp_stream(*t);
}

/* The writer's own leftovers from a killed run, beside PREFIX. */
static void clean_leftovers(const char *prefix)
{
    const char *slash = strrchr(prefix, '/');
    const char *base = slash ? slash + 1 : prefix;
    size_t n = strlen(base) + 16;
    char *names[5];
    const char *ext[4] = { ".bin", ".idx", ".idx-lengths", ".idx-docs" };
    for (int i = 0; i < 4; i++) {
        names[i] = gl_malloc(n);
        snprintf(names[i], n, "%s%s", base, ext[i]);
    }
    names[4] = NULL;
    char dir[4096];
    gl_file_dirname(prefix, dir, sizeof dir);
    gl_error e;
    if (gl_file_clean_temps(dir, gl_file_name_in, names, "run", &e) < 0)
        gl_warn("%s", e.text);
    for (int i = 0; i < 4; i++)
        free(names[i]);
}

static void wr(FILE *f, const void *p, size_t n, const char *path)
{
    if (n && fwrite(p, 1, n, f) != n)
        gl_die("cannot write %s: %s", path, strerror(errno));
}


gl_idx_writer *gl_idx_writer_open(const char *prefix, int dtype)
{
    if (!gl_idx_dtype_size(dtype))
        gl_die("cannot write %s: unknown dtype code %d", prefix, dtype);
    gl_idx_writer *w = gl_calloc(1, sizeof *w);
    w->prefix = gl_strdup(prefix);
    w->dtype = dtype;
    w->itemsize = gl_idx_dtype_size(dtype);
    clean_leftovers(prefix);
    w->bin = open_tmp(prefix, ".bin", &w->tbin, &w->bin_tmp);
    w->len = open_tmp(prefix, ".idx-lengths", &w->tlen, &w->len_tmp);
    w->doc = open_tmp(prefix, ".idx-docs", &w->tdoc, &w->doc_tmp);
    int64_t zero = 0;
    wr(w->doc, &zero, 8, w->doc_tmp);
    w->n_bound = 1;
    return w;
}

/* Store one token in the writer's dtype, checking that it fits. */
static void store_item(gl_idx_writer *w, unsigned char *p, int32_t v)
{
    int ok = 1;
    switch (w->dtype) {
    case GL_IDX_UINT8: ok = v >= 0 && v <= 255; p[0] = (unsigned char)v; break;
    case GL_IDX_INT8: ok = v >= -128 && v <= 127; p[0] = (unsigned char)(int8_t)v; break;
    case GL_IDX_INT16: { ok = v >= -32768 && v <= 32767; int16_t t = (int16_t)v; memcpy(p, &t, 2); break; }
    case GL_IDX_UINT16: { ok = v >= 0 && v <= 65535; uint16_t t = (uint16_t)v; memcpy(p, &t, 2); break; }
    case GL_IDX_INT32: memcpy(p, &v, 4); break;
    case GL_IDX_INT64: { int64_t t = v; memcpy(p, &t, 8); break; }
    case GL_IDX_FLOAT32: { float t = (float)v; ok = (int32_t)t == v; memcpy(p, &t, 4); break; }
    case GL_IDX_FLOAT64: { double t = v; memcpy(p, &t, 8); break; }
    }
    if (!ok)
        gl_die("%s.bin: token id %d does not fit dtype %s", w->prefix, v, gl_idx_dtype_name(w->dtype));
}

static void put_length(gl_idx_writer *w, int64_t n)
{
    if (n < 0 || n > INT32_MAX)
        gl_die("%s: a sequence of %" PRId64 " tokens does not fit the int32 length field",
               w->prefix, n);
    int32_t len = (int32_t)n;
    wr(w->len, &len, 4, w->len_tmp);
    w->n_seq++;
    w->n_tokens += n;
}

void gl_idx_writer_add_sequence(gl_idx_writer *w, const int32_t *tokens, int64_t n)
{
    size_t need = (size_t)n * (size_t)w->itemsize;
    if (need > w->bufcap) {
        w->bufcap = need * 2;
        w->buf = gl_realloc(w->buf, w->bufcap);
    }
    for (int64_t i = 0; i < n; i++)
        store_item(w, w->buf + i * w->itemsize, tokens[i]);
    put_length(w, n);
    wr(w->bin, w->buf, need, w->bin_tmp);
}

void gl_idx_writer_add_raw(gl_idx_writer *w, const void *bytes, int64_t n)
{
    put_length(w, n);
    wr(w->bin, bytes, (size_t)n * (size_t)w->itemsize, w->bin_tmp);
}

void gl_idx_writer_end_document(gl_idx_writer *w)
{
    int64_t b = w->n_seq;
    wr(w->doc, &b, 8, w->doc_tmp);
    w->n_bound++;
}

void gl_idx_writer_add_document(gl_idx_writer *w, const int32_t *tokens, int64_t n)
{
    gl_idx_writer_add_sequence(w, tokens, n);
    gl_idx_writer_end_document(w);
}

int64_t gl_idx_writer_tokens(const gl_idx_writer *w) { return w->n_tokens; }
int64_t gl_idx_writer_documents(const gl_idx_writer *w) { return w->n_bound - 1; }

void gl_idx_writer_append_dataset(gl_idx_writer *w, const gl_idx *src)
{
    if (src->dtype != w->dtype)
        gl_die("--merge: %s holds %s tokens but the output is %s; merge datasets of one dtype",
               src->prefix, gl_idx_dtype_name(src->dtype), gl_idx_dtype_name(w->dtype));
    /* Boundaries: skip src's leading 0, shift the rest by our count. */
    int64_t base = w->n_seq;
    for (int64_t i = 0; i < src->n_seq; i++) {
        int32_t len = ld_i32(src->lengths + 4 * i);
        int64_t off = ld_i64(src->offsets + 8 * i);
        gl_idx_writer_add_raw(w, src->bin + off, len);
    }
    for (int64_t j = 1; j < src->n_bound; j++) {
        int64_t b = base + ld_i64(src->bounds + 8 * j);
        wr(w->doc, &b, 8, w->doc_tmp);
        w->n_bound++;
    }
}

/* Copy a spooled array (the stream of a temporary, read from its start)
 * into the index, computing offsets on the way when `offsets` is set
 * (offset[i] = running byte sum of lengths). */
static void spool_copy(FILE *out, const char *opath, FILE *in, const char *spath, int offsets,
                       int itemsize)
{
    if (fflush(in) != 0 || fseek(in, 0, SEEK_SET) != 0)
        gl_die("cannot read back %s: %s", spath, strerror(errno));
    unsigned char buf[1 << 16];
    size_t n;
    int64_t pos = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        if (!offsets) {
            wr(out, buf, n, opath);
            continue;
        }
        /* 65536 is a multiple of 4, so a read holds whole lengths. */
        int64_t offs[1 << 14];
        size_t k = n / 4;
        for (size_t i = 0; i < k; i++) {
            offs[i] = pos;
            pos += (int64_t)ld_i32(buf + 4 * i) * itemsize;
        }
        wr(out, offs, k * 8, opath);
    }
    if (ferror(in))
        gl_die("cannot read %s: %s", spath, strerror(errno));
}

static void publish(gl_file_tmp *t)
{
    gl_error e;
    if (gl_file_tmp_publish(t, 0, &e) < 0)
        gl_die("%s", e.text);
}

void gl_idx_writer_finish(gl_idx_writer *w)
{
    gl_file_tmp *tidx;
    char *itmp;
    FILE *f = open_tmp(w->prefix, ".idx", &tidx, &itmp);
    unsigned char hdr[GL_IDX_HEADER_SIZE];
    uint64_t version = 1, n = (uint64_t)w->n_seq, d = (uint64_t)w->n_bound;
    memcpy(hdr, IDX_MAGIC, 9);
    memcpy(hdr + 9, &version, 8);
    hdr[17] = (unsigned char)w->dtype;
    memcpy(hdr + 18, &n, 8);
    memcpy(hdr + 26, &d, 8);
    wr(f, hdr, sizeof hdr, itmp);
    spool_copy(f, itmp, w->len, w->len_tmp, 0, w->itemsize);
    spool_copy(f, itmp, w->len, w->len_tmp, 1, w->itemsize);
    spool_copy(f, itmp, w->doc, w->doc_tmp, 0, w->itemsize);

    /* .bin first, then .idx: a reader that finds the new .idx finds the
     * matching .bin. */
    publish(w->tbin);
    publish(tidx);
    gl_file_tmp_discard(w->tlen);
    gl_file_tmp_discard(w->tdoc);
    free(itmp);
    free(w->prefix); free(w->bin_tmp); free(w->len_tmp); free(w->doc_tmp);
    free(w->buf);
    free(w);
}

void gl_idx_writer_abandon(gl_idx_writer *w)
{
    if (!w)
        return;
    gl_file_tmp_discard(w->tbin);
    gl_file_tmp_discard(w->tlen);
    gl_file_tmp_discard(w->tdoc);
    free(w->prefix); free(w->bin_tmp); free(w->len_tmp); free(w->doc_tmp);
    free(w->buf);
    free(w);
}
