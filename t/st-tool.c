/*
 * st-tool.c: safetensors from the shell, for t/st-interop.t.
 *
 *   st-tool dump FILE|DIR       one line per tensor, sorted by name:
 *                               "NAME DTYPE d0,d1 HEX..." (each value as
 *                               fp32 bits; "-" for dtypes gridlm does not
 *                               convert), then "meta KEY=VALUE" lines
 *   st-tool write FILE          the fixed tensors below, one file
 *   st-tool write-dir DIR MAX   the same as a model directory, shards of
 *                               at most MAX bytes
 *   st-tool add-head FILE same|other
 *                               rewrite FILE (F32, BF16 or F16 tensors)
 *                               with an lm_head.weight that is a copy of
 *                               model.embed_tokens.weight ("same") or that
 *                               copy plus 1 ("other"), for t/ckpt-hf-files.t
 *
 * The written values are x_i = i / 7 - 3 in fp32 arithmetic, stored as
 * F32 ("f32"), BF16 ("bf16") and F16 ("f16"), shape [5, 7]; plus "big"
 * [4096] F16 values i * 0.37 - 700 that cover subnormal to large.
 */
#include <config.h>
#include "ckpt/safetensors.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b)
{
    const gl_st_tensor *x = *(const gl_st_tensor *const *)a;
    const gl_st_tensor *y = *(const gl_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static void dump_file(const gl_st_file *f, const gl_st_tensor **all, int *n)
{
    for (int i = 0; i < f->n; i++)
        all[(*n)++] = &f->t[i];
}

static int dump(const char *path)
{
    gl_st_file *f = NULL;
    gl_st_model *m = NULL;
    int n = 0, total = 0;
    gl_error err;
    if (gl_st_open(path, &f, &err) != 0 && gl_st_model_open(path, &m, &err) != 0) {
        fprintf(stderr, "st-tool: %s\n", err.text);
        return 1;
    }
    if (f)
        total = f->n;
    else
        for (int i = 0; i < m->nfiles; i++)
            total += m->files[i]->n;
    const gl_st_tensor **all = gl_calloc(total + 1, sizeof *all);
    if (f)
        dump_file(f, all, &n);
    else
        for (int i = 0; i < m->nfiles; i++)
            dump_file(m->files[i], all, &n);
    qsort(all, n, sizeof *all, by_name);
    for (int i = 0; i < n; i++) {
        const gl_st_tensor *t = all[i];
        printf("%s %s ", t->name, gl_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            printf("%s%ld", d ? "," : "", t->shape[d]);
        long k = gl_st_numel(t);
        float *v = gl_malloc((size_t)k * 4 + 4);
        if (gl_st_to_f32(t, v, NULL) != 0) {
            printf(" -\n");
        } else {
            for (long j = 0; j < k; j++) {
                unsigned u;
                memcpy(&u, &v[j], 4);
                printf(" %08x", u);
            }
            printf("\n");
        }
        free(v);
    }
    if (f)
        for (int i = 0; i < f->nmeta; i++)
            printf("meta %s=%s\n", f->meta_key[i], f->meta_value[i]);
    free(all);
    gl_st_close(f);
    gl_st_model_close(m);
    return 0;
}

static int write(const char *path, int as_dir, size_t max)
{
    static float x[35], big[4096];
    for (int i = 0; i < 35; i++)
        x[i] = (float)i / 7.0f - 3.0f;
    for (int i = 0; i < 4096; i++)
        big[i] = (float)i * 0.37f - 700.0f;
    big[0] = 1e-7f;        /* an fp16 subnormal */
    big[1] = -3e-8f;
    big[2] = 70000.0f;     /* beyond fp16: infinity */
    gl_st_out t[4] = {
        { "f32", GL_ST_F32, 2, { 5, 7 }, x },
        { "bf16", GL_ST_BF16, 2, { 5, 7 }, x },
        { "f16", GL_ST_F16, 2, { 5, 7 }, x },
        { "big", GL_ST_F16, 1, { 4096 }, big },
    };
    const char *meta[] = { "format", "pt" };
    gl_error err;
    int rc = as_dir ? gl_st_model_write(path, t, 4, max, meta, 1, &err)
                    : gl_st_write(path, t, 4, meta, 1, &err);
    if (rc != 0)
        fprintf(stderr, "st-tool: %s\n", err.text);
    return rc != 0;
}

static int add_head(const char *path, int other)
{
    gl_st_file *f;
    gl_error err;
    if (gl_st_open(path, &f, &err) != 0) {
        fprintf(stderr, "st-tool: %s\n", err.text);
        return 1;
    }
    const gl_st_tensor *emb = gl_st_find(f, "model.embed_tokens.weight");
    if (!emb) {
        fprintf(stderr, "st-tool: %s has no model.embed_tokens.weight\n", path);
        return 1;
    }
    gl_st_out *out = gl_calloc((size_t)f->n + 1, sizeof *out);
    float **vals = gl_calloc((size_t)f->n + 1, sizeof *vals);
    int n = 0;
    for (int i = 0; i <= f->n; i++) {
        const gl_st_tensor *t = i < f->n ? &f->t[i] : emb;
        if (i < f->n && !strcmp(t->name, "lm_head.weight"))
            continue;
        long k = gl_st_numel(t);
        vals[n] = gl_malloc((size_t)k * sizeof(float) + 4);
        if (gl_st_to_f32(t, vals[n], &err) != 0) {
            fprintf(stderr, "st-tool: %s\n", err.text);
            return 1;
        }
        if (i == f->n && other)
            for (long j = 0; j < k; j++)
                vals[n][j] += 1.0f;
        out[n] = (gl_st_out){ .name = i < f->n ? t->name : "lm_head.weight",
                              .dtype = t->dtype, .ndim = t->ndim, .data = vals[n] };
        memcpy(out[n].shape, t->shape, sizeof t->shape);
        n++;
    }
    const char *meta[] = { "format", "pt" };
    int rc = gl_st_write(path, out, n, meta, 1, &err);
    if (rc != 0)
        fprintf(stderr, "st-tool: %s\n", err.text);
    for (int i = 0; i < n; i++)
        free(vals[i]);
    free(vals);
    free(out);
    gl_st_close(f);
    return rc != 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "add-head"))
        return add_head(argv[2], !strcmp(argv[3], "other"));
    if (argc == 3 && !strcmp(argv[1], "dump"))
        return dump(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "write"))
        return write(argv[2], 0, 0);
    if (argc == 4 && !strcmp(argv[1], "write-dir"))
        return write(argv[2], 1, (size_t)atol(argv[3]));
    fprintf(stderr, "usage: st-tool dump FILE|DIR | write FILE | write-dir DIR MAX | "
            "add-head FILE same|other\n");
    return 2;
}
