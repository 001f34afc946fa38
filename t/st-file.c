/*
 * st-file.c: safetensors files (src/ckpt/safetensors.h): a written file
 * reads back with its names, dtypes, shapes, metadata and values; model
 * directories shard and reassemble; and bad files -- hand-made ones for
 * each rule, every truncation of a good file, and thousands of files with
 * bytes of the header changed -- are refused with a message, never read
 * out of bounds.
 */
#include <config.h>
#include "ckpt/safetensors.h"
#include "ckpt/half.h"
#include "base/log.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];
static gl_error err;        /* the last failure of the calls under test */

static void path_in(char *buf, const char *name)
{
    snprintf(buf, 4200, "%.256s/%.256s", dir, name);
}

/* Write a file from a header string and n data bytes (value i & 0xff). */
static void raw_file(const char *path, const char *header, long declared, size_t ndata)
{
    FILE *f = fopen(path, "wb");
    size_t len = strlen(header);
    unsigned long long n = declared >= 0 ? (unsigned long long)declared : len;
    for (int i = 0; i < 8; i++)
        fputc((int)((n >> (8 * i)) & 0xff), f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < ndata; i++)
        fputc((int)(i & 0xff), f);
    fclose(f);
}

static int refused(const char *name, const char *header, long declared, size_t ndata,
                   const char *want)
{
    char p[4200];
    path_in(p, name);
    raw_file(p, header, declared, ndata);
    gl_st_file *f = NULL;
    int rc = gl_st_open(p, &f, &err);
    int good = rc == -1 && !f && strstr(err.text, want) && strstr(err.text, p);
    ok(good, "%s refused: %s", name, err.text);
    if (!good)
        diag("wanted a message with \"%s\"", want);
    gl_st_close(f);
    return good;
}

static uint64_t rng = 88172645463325252ULL;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Everything a file claims must lie inside it. */
static int in_bounds(const gl_st_file *f)
{
    const unsigned char *lo = f->map, *hi = lo + f->size;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].data < lo || f->t[i].data + f->t[i].nbytes > hi ||
            f->t[i].nbytes != (size_t)gl_st_numel(&f->t[i]) * gl_st_dtype_size(f->t[i].dtype))
            return 0;
    return 1;
}

int main(void)
{
    plan(NO_PLAN);
    snprintf(dir, sizeof dir, "t/st-file.dir");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/model", dir, dir);
    if (system(cmd) != 0)
        bail_out("cannot make %s", dir);

    /* --- a round trip --- */
    enum { R = 3, K = 5 };
    float w[R * K], v[7], e[4];
    for (int i = 0; i < R * K; i++)
        w[i] = (float)i / 3.0f - 2.0f;            /* needs rounding in BF16 */
    for (int i = 0; i < 7; i++)
        v[i] = (float)(i * i) - 0.5f;              /* exact in F16 */
    for (int i = 0; i < 4; i++)
        e[i] = 1.0f / (float)(i + 1);
    gl_st_out outs[3] = {
        { "model.layers.0.self_attn.q_proj.weight", GL_ST_BF16, 2, { R, K }, w },
        { "model.norm.weight", GL_ST_F16, 1, { 7 }, v },
        { "lm_head.weight", GL_ST_F32, 2, { 2, 2 }, e },
    };
    const char *meta[] = { "format", "pt", "producer", "gridlm" };
    char p[4200];
    path_in(p, "one.safetensors");
    ok(gl_st_write(p, outs, 3, meta, 2, &err) == 0, "write %s: %s", p, err.text);
    gl_st_file *f = NULL;
    ok(gl_st_open(p, &f, &err) == 0, "open it again: %s", err.text);
    if (!f)
        bail_out("cannot go on");
    is_int(f->n, 3, "three tensors");
    const gl_st_tensor *q = gl_st_find(f, "model.layers.0.self_attn.q_proj.weight");
    ok(q && q->dtype == GL_ST_BF16 && q->ndim == 2 && q->shape[0] == R && q->shape[1] == K,
       "q_proj: BF16 [3, 5]");
    float got[R * K];
    int same = q && gl_st_to_f32(q, got, &err) == 0;
    for (int i = 0; same && i < R * K; i++)
        same = got[i] == gl_bf16_to_f32(gl_f32_to_bf16(w[i]));
    ok(same, "q_proj values are the bf16 roundings of what was written");
    const gl_st_tensor *nw = gl_st_find(f, "model.norm.weight");
    same = nw && nw->dtype == GL_ST_F16 && gl_st_to_f32(nw, got, &err) == 0;
    for (int i = 0; same && i < 7; i++)
        same = got[i] == v[i];
    ok(same, "norm: F16 values exact");
    const gl_st_tensor *lm = gl_st_find(f, "lm_head.weight");
    same = lm && lm->dtype == GL_ST_F32 && gl_st_to_f32(lm, got, &err) == 0;
    for (int i = 0; same && i < 4; i++)
        same = got[i] == e[i];
    ok(same, "lm_head: F32 values exact");
    is_string(gl_st_meta(f, "format"), "pt", "metadata format");
    is_string(gl_st_meta(f, "producer"), "gridlm", "metadata producer");
    ok(gl_st_meta(f, "nope") == NULL, "missing metadata is NULL");
    const unsigned char *m = f->map;
    unsigned long long hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | m[i];
    ok((8 + hl) % 8 == 0, "data starts 8-byte aligned (header %llu bytes)", hl);
    gl_st_close(f);

    /* Conversion refuses what it cannot do. */
    path_in(p, "ints.safetensors");
    raw_file(p, "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", -1, 16);
    ok(gl_st_open(p, &f, &err) == 0, "an I64 tensor opens");
    ok(f && gl_st_to_f32(&f->t[0], got, &err) == -1 && strstr(err.text, "I64"),
       "but does not convert: %s", err.text);
    gl_st_close(f);
    gl_st_out bad_out = { "x", GL_ST_I32, 1, { 1 }, e };
    path_in(p, "nope.safetensors");
    ok(gl_st_write(p, &bad_out, 1, NULL, 0, &err) == -1 && access(p, F_OK) != 0,
       "writing I32 is refused: %s", err.text);

    /* --- model directories --- */
    char md[4200];
    path_in(md, "model");
    ok(gl_st_model_write(md, outs, 3, 20, NULL, 0, &err) == 0, "sharded write (20-byte shards)");
    char idx[4300];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", md);
    snprintf(p, sizeof p, "%.4000s/model-00002-of-00003.safetensors", md);
    ok(access(idx, F_OK) == 0 && access(p, F_OK) == 0, "index and three shards exist");
    gl_st_model *mo = NULL;
    ok(gl_st_model_open(md, &mo, &err) == 0 && mo->nfiles == 3, "sharded model opens: %s",
       err.text);
    nw = mo ? gl_st_model_find(mo, "model.norm.weight") : NULL;
    same = nw && gl_st_to_f32(nw, got, &err) == 0;
    for (int i = 0; same && i < 7; i++)
        same = got[i] == v[i];
    ok(same, "a tensor found through the index reads exactly");
    gl_st_model_close(mo);
    /* The index names a tensor that its shard lacks. */
    FILE *fi = fopen(idx, "w");
    fprintf(fi, "{\"metadata\":{},\"weight_map\":{\"ghost\":\"model-00001-of-00003.safetensors\"}}");
    fclose(fi);
    ok(gl_st_model_open(md, &mo, &err) == -1 && strstr(err.text, "ghost"),
       "an index entry without its tensor: %s", err.text);
    fi = fopen(idx, "w");
    fprintf(fi, "{\"metadata\":{},\"weight_map\":{\"x\":\"missing.safetensors\"}}");
    fclose(fi);
    ok(gl_st_model_open(md, &mo, &err) == -1 && strstr(err.text, "missing.safetensors"),
       "an index naming a missing shard: %s", err.text);
    unlink(idx);
    ok(gl_st_model_open(md, &mo, &err) == -1 && strstr(err.text, "neither"),
       "a directory with no model: %s", err.text);
    ok(gl_st_model_write(md, outs, 3, 0, NULL, 0, &err) == 0 &&
       gl_st_model_open(md, &mo, &err) == 0 &&
       mo->nfiles == 1, "unsharded write gives model.safetensors");
    gl_st_model_close(mo);

    /* --- bad files, one rule each --- */
    const char *okt = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    refused("empty header", "", 0, 0, "does not start with '{'");
    {
        char sp[4200];
        path_in(sp, "tiny");
        FILE *t = fopen(sp, "wb");
        fwrite("abc", 1, 3, t);
        fclose(t);
        ok(gl_st_open(sp, &f, &err) == -1 && strstr(err.text, "too short"), "a 3-byte file: %s",
           err.text);
    }
    refused("beyond", okt, 100000, 8, "runs past the end of the file");
    refused("huge", okt, 1LL << 62, 8, "runs past the end of the file");
    refused("notjson", "{\"a\": [1, 2}", -1, 0, "not valid JSON");
    refused("array", "[1, 2, 3]", -1, 0, "does not start with '{'");
    refused("dtype", "{\"a\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8,
            "unknown dtype \"Q8\"");
    refused("size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8,
            "hold 8 bytes, but dtype F32 and its shape need 12");
    refused("past", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 8,
            "run past the end of the data");
    refused("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 12, "overlap");
    refused("hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", -1, 12, "a hole before b");
    refused("trailing", okt, -1, 12, "trailing bytes");
    refused("dup", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, "duplicate");
    refused("negshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8,
            "shape entry 0");
    refused("backwards", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", -1, 8,
            "begin <= end");
    refused("meta", "{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
            "\"data_offsets\":[0,8]}}", -1, 8, "__metadata__ value of \"k\"");
    refused("entry", "{\"a\":[1]}", -1, 0, "not an object");
    refused("fields", "{\"a\":{\"dtype\":\"F32\"}}", -1, 0, "needs \"dtype\"");
    refused("bigshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
            "\"data_offsets\":[0,8]}}", -1, 8, "too large");
    {
        char ep[4200];
        path_in(ep, "empty-ok");
        raw_file(ep, "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", -1, 0);
        ok(gl_st_open(ep, &f, &err) == 0 && f->n == 1 && gl_st_numel(&f->t[0]) == 0,
           "a zero-element tensor is fine");
        gl_st_close(f);
    }

    /* --- every truncation of a good file is refused --- */
    path_in(p, "one.safetensors");
    struct stat sb;
    stat(p, &sb);
    FILE *in = fopen(p, "rb");
    unsigned char *good = gl_malloc((size_t)sb.st_size);
    if (fread(good, 1, (size_t)sb.st_size, in) != (size_t)sb.st_size)
        bail_out("cannot read %s", p);
    fclose(in);
    char fz[4200];
    path_in(fz, "fuzz.safetensors");
    int accepted = 0;
    for (long len = 0; len < sb.st_size; len++) {
        FILE *o = fopen(fz, "wb");
        fwrite(good, 1, (size_t)len, o);
        fclose(o);
        if (gl_st_open(fz, &f, &err) == 0) {
            accepted++;
            gl_st_close(f);
        }
    }
    is_int(accepted, 0, "all %ld truncations of a %ld-byte file are refused",
           (long)sb.st_size, (long)sb.st_size);

    /* --- changed header bytes: refused, or consistent and in bounds --- */
    int trials = 5000, opened = 0, out_of_bounds = 0;
    unsigned char *mut = gl_malloc((size_t)sb.st_size);
    for (int t = 0; t < trials; t++) {
        memcpy(mut, good, (size_t)sb.st_size);
        int flips = 1 + (int)(rnd() % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = rnd() % (8 + hl);
            static const char pool[] = "0123456789{}[],:\"- abFIU";
            mut[at] = (rnd() & 1) ? (unsigned char)pool[rnd() % (sizeof pool - 1)]
                                  : (unsigned char)rnd();
        }
        FILE *o = fopen(fz, "wb");
        fwrite(mut, 1, (size_t)sb.st_size, o);
        fclose(o);
        if (gl_st_open(fz, &f, &err) == 0) {
            opened++;
            out_of_bounds += !in_bounds(f);
            for (int i = 0; i < f->n; i++)
                if (f->t[i].dtype == GL_ST_F32 || f->t[i].dtype == GL_ST_BF16 ||
                    f->t[i].dtype == GL_ST_F16) {
                    float *buf = gl_malloc((size_t)gl_st_numel(&f->t[i]) * 4 + 4);
                    gl_st_to_f32(&f->t[i], buf, &err);
                    free(buf);
                }
            gl_st_close(f);
        } else if (!strstr(err.text, fz)) {
            out_of_bounds++;   /* a message that does not name the file */
        }
    }
    is_int(out_of_bounds, 0, "%d mutated headers: each refused naming the file, or "
           "in bounds (%d still valid)", trials, opened);
    free(mut);
    free(good);

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!tap_failed() && system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
