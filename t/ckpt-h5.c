/*
 * ckpt-h5.c: checkpoints written under one sharding read back under
 * another, and every way a checkpoint can be bad refused (src/ckpt/ckpt.h).
 * Run by t/ckpt-h5.t on 1, 2 and 4 ranks; t/ckpt-kill.t uses the
 * --slow-save and --after-kill modes.
 *
 *   ckpt-h5 DIR                     the tests, in a fresh DIR
 *   ckpt-h5 --setup DIR             save iterations 100 and 200
 *   ckpt-h5 --slow-save DIR PIDDIR  save iteration 900 slowly (each rank
 *                                   writes PIDDIR/pid.RANK first)
 *   ckpt-h5 --after-kill DIR        check DIR after that save was killed
 *
 * Values are exact functions of (tensor, iteration, element index), so a
 * read compares bit for bit against the function, not against what was
 * written by the same code path.
 */
#include <config.h>
#include "ckpt/ckpt.h"
#include "base/log.h"
#include "tap.h"

#include <hdf5.h>
#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, size;
static char dir[4096];
static gl_error err;        /* the last failure of the calls under test */

/* The tensors: A and D are matrices, B a vector, C an optimizer moment. */
enum { A, B, C, D, NT };
static const char *names[NT] = {
    "model/layers.0.attention.wq", "model/final_norm",
    "optim/exp_avg/layers.0.attention.wq", "model/embedding",
};
static const long shapes[NT][2] = { { 13, 7 }, { 10, 0 }, { 6, 5 }, { 37, 16 } };
static const int ndims[NT] = { 2, 1, 2, 2 };

/* Element idx of tensor t at iteration it: small integers over 64, some
 * negative, all exact in fp32. */
static float val(int t, long it, long idx)
{
    long v = (t * 7919 + it * 104729 + idx * 31) % 10007;
    return (float)(v - 5003) / 64.0f;
}

static void split(long n, int parts, int i, long *off, long *cnt)
{
    *off = n * i / parts;
    *cnt = n * (i + 1) / parts - *off;
}

static long cols(int t) { return ndims[t] == 2 ? shapes[t][1] : 1; }

/* A slab [r0, r0+nr) x [c0, c0+nc) of tensor t, in a buffer with row
 * stride ld (padding filled with NaN, which a write must not store and a
 * read must not touch). */
static gl_ckpt_tensor slab(int t, long r0, long nr, long c0, long nc, long ld,
                           long it, int writes, int fill)
{
    gl_ckpt_tensor x = { .name = names[t], .ndim = ndims[t], .writes = writes };
    x.shape[0] = shapes[t][0];
    x.shape[1] = shapes[t][1];
    x.offset[0] = r0;
    x.count[0] = nr;
    if (ndims[t] == 2) {
        x.offset[1] = c0;
        x.count[1] = nc;
        x.ld = ld;
    } else {
        ld = 1;
        nc = 1;
    }
    long stride = ndims[t] == 2 ? (ld ? ld : nc) : 1;
    x.data = gl_malloc((size_t)(nr * stride + 1) * sizeof(float));
    for (long k = 0; k < nr * stride + 1; k++)
        x.data[k] = NAN;
    if (fill)
        for (long r = 0; r < nr; r++)
            for (long c = 0; c < nc; c++)
                x.data[r * stride + c] = val(t, it, (r0 + r) * cols(t) + c0 + c);
    return x;
}

/* The whole of tensor t as one slab, of which this rank holds the
 * packed part [first, first + n) (row-major). */
static gl_ckpt_tensor part(int t, long first, long n, long it, int fill)
{
    gl_ckpt_tensor x = { .name = names[t], .ndim = ndims[t], .writes = 1 };
    x.shape[0] = x.count[0] = shapes[t][0];
    x.shape[1] = x.count[1] = shapes[t][1];
    x.first = first;
    x.nelem = n;
    x.data = gl_malloc((size_t)(n + 1) * sizeof(float));
    for (long k = 0; k <= n; k++)
        x.data[k] = fill && k < n ? val(t, it, first + k) : NAN;
    return x;
}

/* Every element of the slab equals val(); padding is still NaN. */
static int slab_is(const gl_ckpt_tensor *x, int t, long it)
{
    if (x->nelem > 0) {
        /* The slab is the whole tensor here, so slab order is tensor order. */
        for (long k = 0; k < x->nelem; k++) {
            float want = val(t, it, x->first + k);
            if (memcmp(&x->data[k], &want, sizeof want) != 0)
                return 0;
        }
        return isnan(x->data[x->nelem]);
    }
    long stride = x->ndim == 2 ? (x->ld ? x->ld : x->count[1]) : 1;
    long nc = x->ndim == 2 ? x->count[1] : 1, c0 = x->ndim == 2 ? x->offset[1] : 0;
    for (long r = 0; r < x->count[0]; r++)
        for (long c = 0; c < stride; c++) {
            float got = x->data[r * stride + c];
            if (c >= nc) {
                if (!isnan(got))
                    return 0;
                continue;
            }
            float want = val(t, it, (x->offset[0] + r) * cols(t) + c0 + c);
            if (memcmp(&got, &want, sizeof got) != 0)
                return 0;
        }
    return 1;
}

/* Layout 1: A row-split (strided buffer), B in reversed blocks, C
 * replicated and written by the last rank, D on a pr x pc block grid. */
static void layout1(gl_ckpt_tensor *ts, long it, int fill)
{
    long o, n, o2, n2;
    split(shapes[A][0], size, rank, &o, &n);
    ts[A] = slab(A, o, n, 0, 7, 10, it, 1, fill);
    split(shapes[B][0], size, size - 1 - rank, &o, &n);
    ts[B] = slab(B, o, n, 0, 0, 0, it, 1, fill);
    ts[C] = slab(C, 0, 6, 0, 5, 0, it, rank == size - 1, fill);
    int pc = size >= 2 ? 2 : 1, pr = size / pc;
    split(shapes[D][0], pr, rank / pc, &o, &n);
    split(shapes[D][1], pc, rank % pc, &o2, &n2);
    ts[D] = slab(D, o, n, o2, n2, n2 + 3, it, 1, fill);
}

/* Layout 2: A column-split, B whole on every rank (rank 0 writes), C
 * row-split, D row-split. */
static void layout2(gl_ckpt_tensor *ts, long it, int fill)
{
    long o, n;
    split(shapes[A][1], size, rank, &o, &n);
    ts[A] = slab(A, 0, 13, o, n, n + 1, it, 1, fill);
    ts[B] = slab(B, 0, 10, 0, 0, 0, it, rank == 0, fill);
    split(shapes[C][0], size, rank, &o, &n);
    ts[C] = slab(C, o, n, 0, 5, 0, it, 1, fill);
    split(shapes[D][0], size, rank, &o, &n);
    ts[D] = slab(D, o, n, 0, 16, 0, it, 1, fill);
}

/* Layout 3, a distributed optimizer's: each tensor flattened and cut into
 * uneven element ranges, one per rank, that start and end mid-row; C is
 * still replicated. */
static void layout3(gl_ckpt_tensor *ts, long it, int fill)
{
    for (int t = 0; t < NT; t++) {
        if (t == C) {
            ts[C] = slab(C, 0, 6, 0, 5, 0, it, rank == 0, fill);
            continue;
        }
        long n = shapes[t][0] * cols(t);
        /* Cut points at 1/3-ish fractions, so pieces differ in size. */
        long lo = n * rank / size + (rank ? 1 : 0);
        long hi = n * (rank + 1) / size + (rank + 1 < size ? 1 : 0);
        ts[t] = part(t, lo, hi - lo, it, fill);
    }
}

static void free_all(gl_ckpt_tensor *ts)
{
    for (int t = 0; t < NT; t++)
        free(ts[t].data);
}

static const long long rng_state[3] = { 1234, 42, -7 };
static const double sched[2] = { 3e-4, 0.125 };

static int save(long it, void (*layout)(gl_ckpt_tensor *, long, int),
                const gl_ckpt_save_opts *opts)
{
    gl_ckpt_tensor ts[NT];
    layout(ts, it, 1);
    gl_ckpt_attr attrs[] = {
        { .key = "consumed_train_samples", .type = GL_CKPT_I64, .i = it * 64 },
        { .key = "lr", .type = GL_CKPT_F64, .f = 2.5e-4 },
        { .key = "config", .type = GL_CKPT_STR, .s = "{\"hidden_size\": 16}" },
        { .key = "rng_state", .type = GL_CKPT_I64, .n = 3, .iv = rng_state },
        { .key = "scheduler", .type = GL_CKPT_F64, .n = 2, .fv = sched },
    };
    gl_ckpt_save_stats st;
    int rc = gl_ckpt_save(MPI_COMM_WORLD, dir, it, ts, NT, attrs, 5, opts, &st, &err);
    free_all(ts);
    return rc;
}

/* Read every tensor under a layout and compare with val(). */
static int read_back(gl_ckpt *ck, long it, void (*layout)(gl_ckpt_tensor *, long, int))
{
    gl_ckpt_tensor ts[NT];
    layout(ts, it, 0);
    int good = 1;
    for (int t = 0; t < NT; t++) {
        if (gl_ckpt_read(ck, &ts[t], &err) != GL_CKPT_OK) {
            diag("rank %d: %s", rank, err.text);
            good = 0;
        } else if (!slab_is(&ts[t], t, it)) {
            diag("rank %d: tensor %s differs", rank, names[t]);
            good = 0;
        }
    }
    free_all(ts);
    int all;
    MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static int has(const char *msg, const char *what)
{
    if (strstr(msg, what))
        return 1;
    diag("message \"%s\" lacks \"%s\"", msg, what);
    return 0;
}

static void copy_file(const char *from, const char *to, long limit)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    if (!in || !out)
        bail_out("cannot copy %s to %s", from, to);
    char buf[65536];
    size_t n;
    long done = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0 && (limit < 0 || done < limit)) {
        if (limit >= 0 && done + (long)n > limit)
            n = (size_t)(limit - done);
        fwrite(buf, 1, n, out);
        done += (long)n;
    }
    fclose(in);
    fclose(out);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        bail_out("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void file_in(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* Open DIR expecting a refusal whose message has both substrings. */
static void refused(const char *what, const char *s1, const char *s2)
{
    gl_ckpt *ck;
    int rc = gl_ckpt_open(MPI_COMM_WORLD, dir, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_ERR && !ck && has(err.text, s1) && has(err.text, s2),
       "%s: refused: %s", what, err.text);
    if (ck)
        gl_ckpt_close(ck);
}

/* The file offset of a contiguous dataset's data. */
static long data_offset(const char *file, const char *path)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    haddr_t a = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    if (f < 0 || d < 0 || a == HADDR_UNDEF)
        bail_out("cannot find the data of %s in %s", path, file);
    return (long)a;
}

static void flip_bit(const char *file, long at)
{
    FILE *f = fopen(file, "r+b");
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void drop_complete(const char *file)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0 || H5Adelete(f, "complete") < 0 || H5Fclose(f) < 0)
        bail_out("cannot remove the complete mark of %s", file);
}

static void set_iteration(const char *file, long long it)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = f < 0 ? -1 : H5Aopen(f, "iteration", H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_LLONG, &it) < 0 || H5Aclose(a) < 0 ||
        H5Fclose(f) < 0)
        bail_out("cannot set the iteration of %s", file);
}

static void sync_all(void) { MPI_Barrier(MPI_COMM_WORLD); }

static void test_roundtrip(void)
{
    ok(save(100, layout1, NULL) == GL_CKPT_OK, "save iteration 100 under layout 1: %s",
       err.text);
    long it = -1;
    int trc = gl_ckpt_read_tracker(dir, &it, NULL);
    ok(trc == GL_CKPT_OK && it == 100, "tracker names iteration %ld", it);

    gl_ckpt *ck;
    int rc = gl_ckpt_open(MPI_COMM_WORLD, dir, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK, "open and verify %s: %s", dir, err.text);
    if (rc != GL_CKPT_OK)
        bail_out("cannot go on");
    is_int(gl_ckpt_iteration(ck), 100, "iteration");
    is_int(gl_ckpt_ntensors(ck), NT, "tensor count");
    int order = 1;
    for (int t = 0; t < NT && t < gl_ckpt_ntensors(ck); t++) {
        const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, t);
        order &= !strcmp(in->name, names[t]) && in->ndim == ndims[t] &&
                 in->shape[0] == shapes[t][0] &&
                 (ndims[t] == 1 || in->shape[1] == shapes[t][1]);
    }
    ok(order, "tensors listed in saved order with their shapes");
    ok(read_back(ck, 100, layout2), "layout 1 -> layout 2: every element exact");
    ok(read_back(ck, 100, layout1), "layout 1 -> layout 1: every element exact");

    long long i64 = 0, iv[4] = { 0 };
    double f64 = 0, fv[2] = { 0 };
    int len = 0;
    ok(gl_ckpt_get_i64(ck, "consumed_train_samples", &i64, &err) == 0 && i64 == 6400,
       "consumed_train_samples");
    ok(gl_ckpt_get_f64(ck, "lr", &f64, &err) == 0 && f64 == 2.5e-4, "lr");
    ok(gl_ckpt_get_i64v(ck, "rng_state", iv, 4, &len, &err) == 0 && len == 3 &&
       iv[0] == 1234 && iv[1] == 42 && iv[2] == -7, "rng_state array");
    ok(gl_ckpt_get_f64v(ck, "scheduler", fv, 2, &len, &err) == 0 && len == 2 &&
       fv[0] == 3e-4 && fv[1] == 0.125, "scheduler array");
    char *cfg = gl_ckpt_get_str(ck, "config");
    is_string(cfg, "{\"hidden_size\": 16}", "config string");
    free(cfg);
    ok(gl_ckpt_get_i64(ck, "lr", &i64, &err) == GL_CKPT_ERR, "lr is not an integer: %s",
       err.text);
    ok(gl_ckpt_get_i64(ck, "nope", &i64, &err) == GL_CKPT_ERR && has(err.text, "nope"),
       "missing attribute refused");
    int na = gl_ckpt_nattrs(ck);
    char *k = NULL, *v = NULL;
    int arc = gl_ckpt_attr_text(ck, 6, &k, &v, &err);
    ok(na == 8 && arc == 0 && !strcmp(k, "scheduler") &&
       !strcmp(v, "[0.00029999999999999997, 0.125]"),
       "attributes in order as text (%d; %s = %s)", na, k ? k : "-", v ? v : "-");
    free(k);
    free(v);

    /* Reads that do not fit. */
    gl_ckpt_tensor bad = slab(A, 0, 13, 0, 7, 0, 100, 0, 0);
    bad.shape[1] = 8;
    ok(gl_ckpt_read(ck, &bad, &err) == GL_CKPT_ERR &&
       has(err.text, "[13, 7] there, but [13, 8] here"),
       "shape mismatch refused: %s", err.text);
    bad.shape[1] = 7;
    bad.name = "model/nope";
    ok(gl_ckpt_read(ck, &bad, &err) == GL_CKPT_ERR && has(err.text, "no tensor model/nope"),
       "unknown tensor refused");
    bad.name = names[A];
    bad.offset[0] = 10;
    bad.count[0] = 4;
    ok(gl_ckpt_read(ck, &bad, &err) == GL_CKPT_ERR && has(err.text, "outside"),
       "slab outside the tensor refused: %s", err.text);
    free(bad.data);
    gl_ckpt_close(ck);

    /* The other way round, and the tracker follows. */
    ok(save(200, layout2, NULL) == GL_CKPT_OK, "save iteration 200 under layout 2");
    rc = gl_ckpt_open(MPI_COMM_WORLD, dir, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK && gl_ckpt_iteration(ck) == 200, "DIR now opens iteration 200");
    ok(rc == GL_CKPT_OK && read_back(ck, 200, layout1), "layout 2 -> layout 1: every element exact");
    gl_ckpt_close(ck);

    /* Vocabulary-style padding: D read as [40, 16] and as [32, 16]. */
    rc = gl_ckpt_open(MPI_COMM_WORLD, dir, 0, &ck, &err);
    int pad_ok = rc == GL_CKPT_OK;
    for (int variant = 0; pad_ok && variant < 2; variant++) {
        long rows = variant ? 32 : 40, o, n;
        split(rows, size, size - 1 - rank, &o, &n);
        gl_ckpt_tensor t = slab(D, o, n, 0, 16, 0, 200, 0, 0);
        t.shape[0] = rows;
        pad_ok &= gl_ckpt_read_padded(ck, &t, &err) == GL_CKPT_OK;
        for (long r = 0; pad_ok && r < n; r++)
            for (long c = 0; c < 16; c++) {
                float want = o + r < 37 ? val(D, 200, (o + r) * 16 + c) : 0.0f;
                pad_ok &= memcmp(&t.data[r * 16 + c], &want, 4) == 0;
            }
        free(t.data);
    }
    MPI_Allreduce(MPI_IN_PLACE, &pad_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ok(pad_ok, "padded reads: rows beyond the stored 37 are zero, rows beyond 32 dropped");
    gl_ckpt_tensor t16 = slab(D, 0, 1, 0, 16, 0, 200, 0, 0);
    t16.shape[0] = 40;
    t16.shape[1] = 17;
    t16.count[1] = 17;
    ok(ck && gl_ckpt_read_padded(ck, &t16, &err) == GL_CKPT_ERR && has(err.text, "[37, 16] there"),
       "padded reads still need the same columns");
    free(t16.data);
    gl_ckpt_close(ck);

    /* One tensor at a time, into a file of its own. */
    char single[4200];
    snprintf(single, sizeof single, "%s/single.h5", dir);
    gl_ckpt_writer *w;
    gl_ckpt_tensor ts[NT];
    layout1(ts, 7, 1);
    rc = gl_ckpt_begin(MPI_COMM_WORLD, NULL, single, 7, &w, &err);
    if (rc == GL_CKPT_OK)
        rc = gl_ckpt_put(w, &ts[D], &err);
    if (rc == GL_CKPT_OK)
        rc = gl_ckpt_put(w, &ts[B], &err);
    gl_ckpt_attr note = { .key = "note", .type = GL_CKPT_STR, .s = "streamed" };
    gl_ckpt_save_stats stats;
    if (rc == GL_CKPT_OK)
        rc = gl_ckpt_finish(w, &note, 1, &stats, &err);
    ok(rc == GL_CKPT_OK && !strcmp(stats.path, single) && stats.bytes == 4.0 * (37 * 16 + 10),
       "begin/put/finish writes %s (%.0f bytes)", single, stats.bytes);
    long it2 = -1;
    gl_ckpt_read_tracker(dir, &it2, NULL);
    is_int(it2, 200, "a file of its own leaves the tracker alone");
    rc = gl_ckpt_open(MPI_COMM_WORLD, single, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK && gl_ckpt_ntensors(ck) == 2 && gl_ckpt_iteration(ck) == 7 &&
       !strcmp(gl_ckpt_tensor_info(ck, 0)->name, names[D]), "it opens, verifies, in put order");
    gl_ckpt_close(ck);
    rc = gl_ckpt_begin(MPI_COMM_WORLD, dir, NULL, 8, &w, &err);
    if (rc == GL_CKPT_OK)
        rc = gl_ckpt_put(w, &ts[A], &err);
    gl_ckpt_abort(w);
    free_all(ts);
    sync_all();
    char f8[4096];
    gl_ckpt_file_name(f8, sizeof f8, dir, 8);
    char *left = gl_ckpt_previous(dir, 100);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q 'iter_0000008.h5.tmp'", dir);
    int tmp_left = system(cmd) == 0;
    ok(rc == GL_CKPT_OK && access(f8, F_OK) != 0 && !left && !tmp_left,
       "an aborted save leaves no file (previous below 100: %s)", left ? left : "none");
    free(left);

    char f100[4096];
    gl_ckpt_file_name(f100, sizeof f100, dir, 100);
    rc = gl_ckpt_open(MPI_COMM_WORLD, f100, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK && gl_ckpt_iteration(ck) == 100 && read_back(ck, 100, layout2),
       "a file path opens that file");
    ok(rc == GL_CKPT_OK && read_back(ck, 100, layout3),
       "layout 1 -> layout 3 (element ranges cut mid-row): every element exact");
    gl_ckpt_close(ck);

    /* Written in element ranges, read as blocks. */
    char parts[4200];
    snprintf(parts, sizeof parts, "%s/parts", dir);
    gl_ckpt_tensor p3[NT];
    layout3(p3, 300, 1);
    rc = gl_ckpt_save(MPI_COMM_WORLD, parts, 300, p3, NT, NULL, 0, NULL, NULL, &err);
    free_all(p3);
    ok(rc == GL_CKPT_OK, "save under layout 3: %s", rc ? err.text : "");
    rc = gl_ckpt_open(MPI_COMM_WORLD, parts, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK && read_back(ck, 300, layout1) && read_back(ck, 300, layout2) &&
       read_back(ck, 300, layout3), "layout 3 -> layouts 1, 2 and 3: every element exact");
    gl_ckpt_close(ck);
    gl_ckpt_tensor bp = part(A, 90, 2, 300, 0);
    rc = gl_ckpt_open(MPI_COMM_WORLD, parts, 0, &ck, &err);
    ok(gl_ckpt_read(ck, &bp, &err) == GL_CKPT_ERR && has(err.text, "part [90, 92) lies outside"),
       "a part beyond its slab is refused: %s", err.text);
    free(bp.data);
    gl_ckpt_close(ck);
}

static void test_refusals(void)
{
    char f200[4096], f300[4096], tracker[4200], tmp[4200];
    gl_ckpt_file_name(f200, sizeof f200, dir, 200);
    gl_ckpt_file_name(f300, sizeof f300, dir, 300);
    file_in(tracker, sizeof tracker, GL_CKPT_TRACKER);
    char prev[4200];
    snprintf(prev, sizeof prev, "--load %s", f200);
    struct stat sb;
    stat(f200, &sb);

    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        copy_file(f200, f300, sb.st_size / 2);
        write_text(tracker, "300\n");
    }
    sync_all();
    refused("truncated", "iter_0000300.h5 is truncated", prev);

    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        copy_file(f200, f300, -1);
        /* Change iteration 300's name: copy holds iteration 200. */
    }
    sync_all();
    refused("renamed copy", "holds iteration 200, not the 300", prev);

    /* A bit flipped in the data of one tensor. */
    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        copy_file(f200, f300, -1);
        flip_bit(f300, data_offset(f300, "/model/embedding") + 4 * 300 + 1);
        set_iteration(f300, 300);
    }
    sync_all();
    refused("bit flip", "is corrupt (tensor model/embedding fails its checksum)", prev);
    gl_ckpt *ck;
    int rc = gl_ckpt_open(MPI_COMM_WORLD, dir, 0, &ck, &err);
    ok(rc == GL_CKPT_OK, "without GL_CKPT_VERIFY the same file opens (the check costs a read)");
    if (ck) {
        int badv[NT] = { 0 };
        ok(gl_ckpt_verify(ck, MPI_COMM_WORLD, badv, &err) == GL_CKPT_ERR &&
           !badv[0] && !badv[1] && !badv[2] && badv[3], "gl_ckpt_verify flags exactly the flipped tensor");
        gl_ckpt_close(ck);
    }

    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        copy_file(f200, f300, -1);
        set_iteration(f300, 300);
        drop_complete(f300);
    }
    sync_all();
    refused("no complete mark", "iter_0000300.h5 is incomplete", prev);

    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        FILE *f = fopen(f300, "wb");
        for (int i = 0; i < 4096; i++)
            fputc((i * 131 + 7) & 0xff, f);
        fclose(f);
    }
    sync_all();
    refused("garbage", "is not a readable HDF5 file", prev);

    sync_all();
    if (rank == 0)
        unlink(f300);
    sync_all();
    refused("missing", "iter_0000300.h5 does not exist (named by", prev);

    sync_all();
    if (rank == 0)
        write_text(tracker, "three hundred\n");
    sync_all();
    refused("bad tracker", "does not hold an iteration number", "--load ");

    /* A stale temporary file from a crashed save is ignored. */
    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        snprintf(tmp, sizeof tmp, "%s.tmp.12345", f300);
        copy_file(f200, tmp, sb.st_size / 3);
        write_text(tracker, "200");
    }
    sync_all();
    rc = gl_ckpt_open(MPI_COMM_WORLD, dir, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK && gl_ckpt_iteration(ck) == 200,
       "a stale iter_0000300.h5.tmp.* is ignored: iteration 200 loads");
    gl_ckpt_close(ck);
    char *p = gl_ckpt_previous(dir, 1000);
    ok(p && !strcmp(p, f200), "previous-checkpoint search skips temporaries (%s)", p);
    free(p);

    /* Checkpoint files without a readable tracker: resuming "from the
     * start" would write over them, so the directory is refused, naming
     * the newest complete checkpoint and the two ways to resume. */
    char want[9000];
    snprintf(want, sizeof want, "--load %s, or write 200 into %s", f200, tracker);
    sync_all();
    if (rank == 0) {
        unlink(tracker);
        copy_file(f200, f300, sb.st_size / 2);      /* a newer, broken one */
    }
    sync_all();
    refused("no tracker", "holds checkpoint files but no latest_checkpointed_iteration.txt",
            want);
    sync_all();
    if (rank == 0) {
        unlink(f300);
        char gone[4300];
        snprintf(gone, sizeof gone, "%s/gone/latest", dir);
        symlink(gone, tracker);
    }
    sync_all();
    refused("a dangling tracker link", "which does not exist", want);
    sync_all();
    if (rank == 0) {
        unlink(tracker);
        mkfifo(tracker, 0600);
    }
    sync_all();
    refused("a FIFO for a tracker (never read, so never blocks)", "is a FIFO", want);
    sync_all();
    if (rank == 0) {
        unlink(tracker);
        write_text(tracker, "200");
    }
    sync_all();

    /* Nothing to load. */
    char none[4200];
    snprintf(none, sizeof none, "%s/never-saved", dir);
    rc = gl_ckpt_open(MPI_COMM_WORLD, none, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_NONE && !ck && has(err.text, "starting from scratch"),
       "a missing --load directory means no checkpoint: %s", err.text);
    snprintf(none, sizeof none, "%s/iter_0000777.h5", dir);
    rc = gl_ckpt_open(MPI_COMM_WORLD, none, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_ERR && has(err.text, "iter_0000777.h5 does not exist") &&
       has(err.text, prev), "a missing file is refused: %s", err.text);

    /* The only checkpoint of a directory is bad. */
    char solo[4200];
    snprintf(solo, sizeof solo, "%s/solo", dir);
    gl_ckpt_tensor ts[NT];
    layout1(ts, 5, 1);
    rc = gl_ckpt_save(MPI_COMM_WORLD, solo, 5, ts, NT, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    char f5[4096];
    gl_ckpt_file_name(f5, sizeof f5, solo, 5);
    sync_all();     /* HDF5 locks open files: all ranks must have closed it */
    if (rank == 0) {
        stat(f5, &sb);
        truncate(f5, sb.st_size - 100);
    }
    sync_all();
    rc = gl_ckpt_open(MPI_COMM_WORLD, solo, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_ERR && has(err.text, "holds no earlier checkpoint"),
       "a bad only checkpoint: %s", err.text);
}

static void test_bad_saves(void)
{
    char tracker_before[64] = "", f[4096];
    long it = -1;
    gl_ckpt_read_tracker(dir, &it, NULL);
    snprintf(tracker_before, sizeof tracker_before, "%ld", it);

    /* Slabs that leave a hole: one row of A unwritten. */
    gl_ckpt_tensor ts[NT];
    layout1(ts, 400, 1);
    if (rank == 0 && ts[A].count[0] > 0)
        ts[A].count[0]--;
    else if (rank == 0)
        ts[A].writes = 0;
    int rc = gl_ckpt_save(MPI_COMM_WORLD, dir, 400, ts, NT, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    ok(rc == GL_CKPT_ERR && has(err.text, "exactly one rank"),
       "a hole in the written slabs is refused: %s", err.text);
    gl_ckpt_file_name(f, sizeof f, dir, 400);
    ok(access(f, F_OK) != 0, "and no iter_0000400.h5 appears");
    gl_ckpt_read_tracker(dir, &it, NULL);
    is_int(it, 200, "and the tracker still names 200");

    /* Replicas that all write (with one rank, the one replica must). */
    layout1(ts, 400, 1);
    ts[C].writes = size > 1;
    rc = gl_ckpt_save(MPI_COMM_WORLD, dir, 400, ts, NT, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    ok(rc == GL_CKPT_ERR && has(err.text, "exactly one rank"),
       "%s is refused", size > 1 ? "every replica writing its slab" : "a slab nobody writes");

    /* Ranks that disagree on a shape. */
    layout1(ts, 410, 1);
    if (rank == size - 1)
        ts[B].shape[0] = 11, ts[B].count[0] = 0;
    rc = gl_ckpt_save(MPI_COMM_WORLD, dir, 410, ts, NT, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    if (size > 1)
        ok(rc == GL_CKPT_ERR && has(err.text, "ranks describe different"),
           "ranks that disagree are refused: %s", err.text);
    else
        ok(rc == GL_CKPT_ERR, "a shape that the slabs do not cover is refused");

    gl_ckpt_attr reserved = { .key = "iteration", .type = GL_CKPT_I64, .i = 1 };
    layout1(ts, 420, 1);
    rc = gl_ckpt_save(MPI_COMM_WORLD, dir, 420, ts, NT, &reserved, 1, NULL, NULL, &err);
    free_all(ts);
    ok(rc == GL_CKPT_ERR && has(err.text, "reserved"), "a reserved attribute name is refused");

    /* Two names for one HDF5 path. */
    layout1(ts, 430, 1);
    gl_ckpt_tensor two[2] = { ts[B], ts[B] };
    two[1].name = "model.final_norm";
    rc = gl_ckpt_save(MPI_COMM_WORLD, dir, 430, two, 2, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    ok(rc == GL_CKPT_ERR && has(err.text, "already taken"),
       "two names for one path are refused: %s", err.text);
    if (rank == 0) {
        char tmpname[4200];
        gl_ckpt_file_name(f, sizeof f, dir, 430);
        snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", f, (long)getpid());
        ok(access(tmpname, F_OK) != 0 && access(f, F_OK) != 0,
           "a failed save leaves no file behind");
    } else {
        ok(1, "a failed save leaves no file behind");
    }
    gl_ckpt_read_tracker(dir, &it, NULL);
    is_int(it, 200, "the tracker still names 200");

    /* A checkpoint file is never written over, whoever wrote it. */
    gl_ckpt_file_name(f, sizeof f, dir, 200);
    struct stat before, after;
    stat(f, &before);
    layout1(ts, 200, 1);
    rc = gl_ckpt_save(MPI_COMM_WORLD, dir, 200, ts, NT, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    stat(f, &after);
    ok(rc == GL_CKPT_ERR && has(err.text, "iter_0000200.h5 already exists") &&
       has(err.text, "move it away") && before.st_ino == after.st_ino &&
       before.st_mtime == after.st_mtime, "a save onto an existing checkpoint is refused: %s",
       err.text);
    char single[4200];
    snprintf(single, sizeof single, "%s/single.h5", dir);
    layout1(ts, 9, 1);
    rc = gl_ckpt_save_file(MPI_COMM_WORLD, single, 9, ts, NT, NULL, 0, NULL, NULL, &err);
    free_all(ts);
    ok(rc == GL_CKPT_ERR && has(err.text, "single.h5 already exists"),
       "so is a single-file save onto an existing file");
    gl_ckpt_read_tracker(dir, &it, NULL);
    is_int(it, 200, "and the tracker stays at 200");
}

/* --async-save: the copy is taken at once, the caller's thread goes on
 * with MPI, the result is the same checkpoint. */
static void test_async(int provided)
{
    gl_ckpt_tensor ts[NT];
    layout1(ts, 600, 1);
    long long seeds[2] = { 5, 6 };
    gl_ckpt_attr attrs[] = {
        { .key = "config", .type = GL_CKPT_STR, .s = "{\"async\": true}" },
        { .key = "rng_state", .type = GL_CKPT_I64, .n = 2, .iv = seeds },
    };
    gl_ckpt_async *a;
    int rc = gl_ckpt_save_async(MPI_COMM_WORLD, dir, 600, ts, NT, attrs, 2, &a, &err);
    /* The caller's buffers change at once... */
    for (int t = 0; t < NT; t++) {
        long len = ts[t].count[0] * (ts[t].ndim == 2 ? (ts[t].ld ? ts[t].ld : ts[t].count[1]) : 1);
        for (long k = 0; k < len; k++)
            ts[t].data[k] = -1.0f;
    }
    seeds[0] = 99;
    free_all(ts);
    /* ...and its thread keeps talking on the world communicator. */
    long sum = 0;
    for (int i = 0; i < 200; i++) {
        long one = 1, got;
        MPI_Allreduce(&one, &got, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        sum += got;
    }
    is_int(sum, 200L * size, "training-thread collectives during the save");
    is_int(gl_ckpt_async_threaded(a), provided == MPI_THREAD_MULTIPLE,
           "a writer thread runs exactly when MPI gives MPI_THREAD_MULTIPLE (%d)", provided);
    gl_ckpt_save_stats st;
    rc = rc == GL_CKPT_OK ? gl_ckpt_async_wait(a, &st, &err) : rc;
    ok(rc == GL_CKPT_OK, "async save of iteration 600%s%s", rc ? ": " : "",
       rc ? err.text : "");
    diag("async save: %.0f bytes in %.3f s", st.bytes, st.seconds);
    long it = -1;
    gl_ckpt_read_tracker(dir, &it, NULL);
    is_int(it, 600, "the tracker names 600 once the save is waited for");
    gl_ckpt *ck;
    rc = gl_ckpt_open(MPI_COMM_WORLD, dir, GL_CKPT_VERIFY, &ck, &err);
    long long iv[2] = { 0, 0 };
    int len = 0;
    ok(rc == GL_CKPT_OK && read_back(ck, 600, layout2) &&
       gl_ckpt_get_i64v(ck, "rng_state", iv, 2, &len, &err) == 0 && iv[0] == 5 && iv[1] == 6,
       "it holds the values and attributes as they were at the call");
    gl_ckpt_close(ck);
}

/* --slow-save: stall after the first tensor so the test can kill us. */
static void stall(void *arg, int i, int n)
{
    (void)arg, (void)n;
    if (i == 0)
        sleep(60);
}

static int slow_save(const char *piddir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/pid.%d", piddir, rank);
    FILE *f = fopen(p, "w");
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    gl_ckpt_save_opts o = { .after_tensor = stall };
    save(900, layout1, &o);
    return 1;   /* never reached when killed */
}

static int after_kill(void)
{
    plan(NO_PLAN);
    long it = -1;
    int trc = gl_ckpt_read_tracker(dir, &it, NULL);
    ok(trc == GL_CKPT_OK && it == 200,
       "after the kill the tracker still names 200 (%ld)", it);
    char f[4096];
    gl_ckpt_file_name(f, sizeof f, dir, 900);
    ok(access(f, F_OK) != 0, "no iter_0000900.h5 appeared");
    gl_ckpt *ck;
    int rc = gl_ckpt_open(MPI_COMM_WORLD, dir, GL_CKPT_VERIFY, &ck, &err);
    ok(rc == GL_CKPT_OK && gl_ckpt_iteration(ck) == 200 && read_back(ck, 200, layout2),
       "iteration 200 loads and verifies: %s", err.text);
    gl_ckpt_close(ck);
    return done_testing();
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tap_quiet(rank != 0);
    const char *mode = argc > 1 ? argv[1] : "";
    int rc;
    if (!strcmp(mode, "--slow-save") && argc == 4) {
        snprintf(dir, sizeof dir, "%s", argv[2]);
        rc = slow_save(argv[3]);
    } else if (!strcmp(mode, "--setup") && argc == 3) {
        snprintf(dir, sizeof dir, "%s", argv[2]);
        plan(2);
        ok(save(100, layout1, NULL) == GL_CKPT_OK, "save iteration 100");
        ok(save(200, layout2, NULL) == GL_CKPT_OK, "save iteration 200");
        rc = done_testing();
    } else if (!strcmp(mode, "--after-kill") && argc == 3) {
        snprintf(dir, sizeof dir, "%s", argv[2]);
        rc = after_kill();
    } else if (argc == 2) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
        plan(NO_PLAN);
        test_roundtrip();
        test_refusals();
        test_bad_saves();
        test_async(provided);
        rc = done_testing();
    } else {
        fprintf(stderr, "usage: ckpt-h5 DIR | --setup DIR | --slow-save DIR PIDDIR | --after-kill DIR\n");
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
