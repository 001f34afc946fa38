/*
 * ckpt_slab.c: the geometry of a gl_ckpt_tensor, shared by the HDF5
 * checkpoint writer and reader (ckpt_h5.h): the checks of its
 * description, its element counts, its held elements as runs of the full
 * tensor's linear indices, their HDF5 selection, and the HDF5 path of
 * its name.
 */
#include <config.h>
#include "ckpt/ckpt_h5.h"

#include <string.h>

/* "model/layers.3.attention.wq" -> "/model/layers/3/attention/wq".
 * Returns 0 when the name is empty, too long or has an empty component. */
int gl_ckpt_h5_path(const char *name, char *out, size_t n)
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

long gl_ckpt_numel(const gl_ckpt_tensor *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

long gl_ckpt_slab_numel(const gl_ckpt_tensor *t)
{
    return t->ndim == 1 ? t->count[0] : t->count[0] * t->count[1];
}

/* Elements this rank holds: a part of its slab, or all of it. */
long gl_ckpt_held(const gl_ckpt_tensor *t)
{
    return t->nelem > 0 ? t->nelem : gl_ckpt_slab_numel(t);
}

void gl_ckpt_each_run(const gl_ckpt_tensor *t, gl_ckpt_run_fn fn, void *arg)
{
    if (gl_ckpt_held(t) == 0)
        return;
    if (t->ndim == 1) {
        long first = t->nelem > 0 ? t->first : 0;
        fn(arg, t->data, gl_ckpt_held(t), t->offset[0] + first);
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
hid_t gl_ckpt_select_held(const gl_ckpt_tensor *t, hid_t fspace)
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
int gl_ckpt_check_tensor(const gl_ckpt_tensor *t, int for_read, gl_error *err)
{
    char path[GL_CKPT_MAXNAME + 2];
    if (!t->name || !gl_ckpt_h5_path(t->name, path, sizeof path))
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
    if (t->nelem < 0 ||
        (t->nelem > 0 && (t->first < 0 || t->first + t->nelem > gl_ckpt_slab_numel(t))))
        return gl_errprintf(err, "checkpoint tensor %s: part [%ld, %ld) lies outside its "
                            "slab of %ld elements", t->name, t->first, t->first + t->nelem,
                            gl_ckpt_slab_numel(t));
    if ((for_read || t->writes) && gl_ckpt_held(t) > 0 && !t->data)
        return gl_errprintf(err, "checkpoint tensor %s: no buffer for the slab", t->name);
    return GL_CKPT_OK;
}
