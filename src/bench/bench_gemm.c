/*
 * bench_gemm.c: matrix-product throughput through ops->gemm.
 *
 * For each shape m x n x k the product C[m,n] = op(A)[m,k] op(B)[k,n]
 * runs in one of the three layouts of a linear layer Y = X W^T:
 *   NT  forward:          Y[tok,out]  = X[tok,in]    W[out,in]^T
 *   NN  input gradient:   dX[tok,in]  = dY[tok,out]  W[out,in]
 *   TN  weight gradient:  dW[out,in] += dY[tok,out]^T X[tok,in]
 * so "m" is tokens for NT/NN and the output width for TN.  A product
 * costs 2 m n k floating-point operations; TFLOP/s = 2mnk / seconds / 1e12.
 *
 * Inputs are in the device's act dtype (bf16 on CUDA, fp32 on the CPU);
 * C is act, or fp32 with beta = 1 under --out-dtype f32 (how gridlm
 * accumulates weight gradients).  With --check 1 (the default) one
 * product is compared, before timing, with a double-precision host
 * reference at 64 sampled entries, so a fast wrong product is caught.
 * The time is that of the whole batch of calls divided by their number
 * (host clock around ops->sync), as bench.h describes.
 *
 * --llama replaces the shapes by the 15 products of one Llama layer and
 * the LM head as layer.c makes them (forward NT and input gradient NN
 * with act output, weight gradient TN in fp32 with beta 1), for a model
 * given by --hidden-size, --ffn-hidden-size, the heads, --vocab-size and
 * --tokens (defaults: a 1.5B Llama at 8192 tokens).  On a GPU the list
 * runs twice, on two devices opened for it, one whose plans take
 * cuBLASLt's first heuristic algorithm (GRIDLM_GEMM_TUNE=0) and one whose
 * plans are tuned (=1, see cuda/gemm.cu), and each product gets one line
 * with both rates, then a line for the whole list.  The operands are
 * allocated once for the largest product and filled with a period of 4M
 * elements (filling gigabytes from the host would take minutes); the
 * check knows the period.
 */
#include <config.h>
#include "bench/bench.h"
#include "base/log.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults: squares, and on GPUs the four products of a Llama-3-8B layer
 * at 8192 tokens (QKV, attention output, gate+up, down). */
#define SHAPES_CPU "128,256,512"
#define SHAPES_GPU "1024,2048,4096,8192,8192x6144x4096,8192x4096x4096," \
                   "8192x28672x4096,8192x4096x14336"


/* One call's arguments, for gl_bench_time(). */
typedef struct {
    gl_dev *d;
    int ta, tb, m, n, k, lda, ldb, ldc;
    float beta;
    void *A, *B, *C;
    gl_dtype ctype;
} gemm_call;

static void run_gemm(void *arg)
{
    gemm_call *g = arg;
    g->d->ops->gemm(g->d, g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->A, g->lda, g->B,
                    g->ldb, g->beta, g->C, g->ctype, g->ldc);
}

/* Element (i, l) of op(X), X stored row-major as [rows, cols] = op(X) or
 * its transpose, from the generator's stream; with period > 0 the
 * stream repeats every period elements (fill_periodic). */
static double op_value(long seed, int stream, int trans, long i, long l, long rows_op,
                       long cols_op, int bf16, size_t period)
{
    size_t idx = trans ? (size_t)l * rows_op + i : (size_t)i * cols_op + l;
    float v = gl_bench_value(seed, stream, period ? idx % period : idx);
    return bf16 ? gl_bench_round_bf16(v) : v;
}

/* Compare 64 sampled entries of C with a double-precision product of the
 * same (act-rounded) inputs.  The error allowed is relative to the
 * entry's natural scale sqrt(sum_l (a_il b_lj)^2): fp32 accumulation
 * and, for bf16, rounding of C to 8 significant bits stay far below it,
 * a wrong product (other layout, missing terms) lands near 1. */
static void check_gemm(const gemm_call *g, long seed, int bf16_in, int bf16_out,
                       size_t period)
{
    gl_dev *d = g->d;
    const int samples = 64;
    size_t csize = g->ctype == GL_DT_F32 ? sizeof(float) : d->act_bytes;
    float *tmp = d->ops->alloc(d, sizeof(float));
    double tol = bf16_out ? 1.0 / 64 : bf16_in ? 1e-3 : 1e-4;
    for (int s = 0; s < samples; s++) {
        long i = (long)((0.5 + 0.5 * gl_bench_value(seed, 100, s)) * g->m) % g->m;
        long j = (long)((0.5 + 0.5 * gl_bench_value(seed, 101, s)) * g->n) % g->n;
        double ref = 0, scale = 0;
        for (long l = 0; l < g->k; l++) {
            double p = op_value(seed, 1, g->ta, i, l, g->m, g->k, bf16_in, period) *
                       op_value(seed, 2, g->tb, l, j, g->k, g->n, bf16_in, period);
            ref += p;
            scale += p * p;
        }
        scale = sqrt(scale);
        const char *c = (const char *)g->C + ((size_t)i * g->ldc + j) * csize;
        float got;
        if (g->ctype == GL_DT_F32)
            d->ops->download(d, &got, c, sizeof got);
        else {
            d->ops->to_f32(d, tmp, c, 1);
            d->ops->download(d, &got, tmp, sizeof got);
        }
        if (!(fabs(got - ref) <= tol * scale))
            gl_die("gemm check failed for %dx%dx%d: C[%ld,%ld] = %.6g, the host reference "
                   "gives %.6g (allowed error %.3g): the device's gemm is wrong",
                   g->m, g->n, g->k, i, j, got, ref, tol * scale);
    }
    d->ops->free(d, tmp);
}

static const char *layout_name(int layout)
{
    return layout == GL_BENCH_NN ? "NN" : layout == GL_BENCH_TN ? "TN" : "NT";
}

/* ---- --llama: the products of one Llama layer and the LM head ---------- */

/* One product of the list. */
typedef struct {
    char name[24];         /* "gate_up.wgrad" */
    int layout;            /* GL_BENCH_NT, NN or TN */
    long m, n, k;
    int f32out;            /* fp32 output with beta 1 (a weight gradient) */
} llama_prod;

/* What one pass measured of one product: ms and TFLOP/s per call (mean
 * over ranks), and the time of its first call, plan and tuning included. */
typedef struct {
    double ms, tflops, first_ms;
} llama_time;

#define LLAMA_NPROD 15
#define FILL_PERIOD ((size_t)1 << 22)

/* --llama's heads: 32 query and 8 key/value heads of 64 unless given;
 * key/value heads = query heads when only the latter are given. */
static void llama_heads(const gl_bench_opts *o, long *hq, long *hkv, long *hd)
{
    *hq = o->heads ? o->heads : 32;
    *hkv = o->kv_heads ? o->kv_heads : o->heads ? o->heads : 8;
    *hd = o->head_dim ? o->head_dim : 64;
}

/* The products of layer.c's linear layers (W [out, in], t tokens), each
 * in its three layouts:
 *   fwd    NT  Y[t,out]    = X[t,in] W^T     bf16 out
 *   dgrad  NN  dX[t,in]    = dY[t,out] W     bf16 out
 *   wgrad  TN  dW[out,in] += dY^T X          fp32 out, beta 1
 * for qkv (fused q, k, v), wo (attention output), gate_up (fused), down,
 * and the LM head.  Returns LLAMA_NPROD. */
static int llama_list(const gl_bench_opts *o, llama_prod *v)
{
    long hq, hkv, hd, h = o->hidden, t = o->tokens;
    llama_heads(o, &hq, &hkv, &hd);
    const struct {
        const char *name;
        long out, in;
    } lin[] = {
        {"qkv", (hq + 2 * hkv) * hd, h},
        {"wo", h, hq * hd},
        {"gate_up", 2L * o->ffn, h},
        {"down", h, o->ffn},
        {"head", o->vocab, h},
    };
    int n = 0;
    for (int i = 0; i < 5; i++) {
        long out = lin[i].out, in = lin[i].in;
        llama_prod *p = &v[n];
        snprintf(p[0].name, sizeof p[0].name, "%s.fwd", lin[i].name);
        snprintf(p[1].name, sizeof p[1].name, "%s.dgrad", lin[i].name);
        snprintf(p[2].name, sizeof p[2].name, "%s.wgrad", lin[i].name);
        p[0].layout = GL_BENCH_NT, p[0].m = t, p[0].n = out, p[0].k = in, p[0].f32out = 0;
        p[1].layout = GL_BENCH_NN, p[1].m = t, p[1].n = in, p[1].k = out, p[1].f32out = 0;
        p[2].layout = GL_BENCH_TN, p[2].m = out, p[2].n = in, p[2].k = t, p[2].f32out = 1;
        n += 3;
    }
    return n;
}

static void llama_validate(const gl_bench_opts *o)
{
    llama_prod v[LLAMA_NPROD];
    if (o->shapes)
        gl_die_code(2, "--llama makes its own list of products: drop --shapes");
    int n = llama_list(o, v);
    for (int i = 0; i < n; i++)
        if (v[i].m > INT_MAX || v[i].n > INT_MAX || v[i].k > INT_MAX)
            gl_die_code(2, "--llama: product %s is %ldx%ldx%ld, beyond the %d of a "
                        "gemm dimension: give smaller sizes", v[i].name, v[i].m, v[i].n,
                        v[i].k, INT_MAX);
}

/* Fill count act elements with gl_bench_fill's first `period` values,
 * repeated: the host makes only those, the device copies them on, so
 * gigabytes of operands take no time to fill. */
static void fill_periodic(gl_dev *d, void *act, size_t count, long seed, int stream)
{
    size_t have = count < FILL_PERIOD ? count : FILL_PERIOD;
    gl_bench_fill(d, act, have, seed, stream, 1.0f);
    for (; have < count; have *= 2) {
        size_t n = count - have < have ? count - have : have;
        d->ops->copy(d, (char *)act + have * d->act_bytes, act, n * d->act_bytes);
    }
    d->ops->sync(d);
}

/* Run the list on device d: operands big enough for its largest product,
 * then for each product one call on its own (plan, and tuning when it is
 * on), one checked call (with --check 1; after tuning has chosen), and
 * the timed calls. */
static void llama_pass(gl_dev *d, const gl_bench_opts *o, const llama_prod *v, int np,
                       llama_time *t)
{
    size_t amax = 0, bmax = 0, cmax = 0;
    for (int i = 0; i < np; i++) {
        size_t cs = v[i].f32out ? sizeof(float) : d->act_bytes;
        size_t a = (size_t)v[i].m * v[i].k, b = (size_t)v[i].k * v[i].n;
        size_t c = (size_t)v[i].m * v[i].n * cs;
        amax = a > amax ? a : amax;
        bmax = b > bmax ? b : bmax;
        cmax = c > cmax ? c : cmax;
    }
    void *A = d->ops->alloc(d, amax * d->act_bytes), *B = d->ops->alloc(d, bmax * d->act_bytes);
    void *C = d->ops->alloc(d, cmax);
    fill_periodic(d, A, amax, o->seed, 1);
    fill_periodic(d, B, bmax, o->seed, 2);

    for (int i = 0; i < np; i++) {
        const llama_prod *p = &v[i];
        int ta = p->layout == GL_BENCH_TN, tb = p->layout == GL_BENCH_NT;
        gl_dtype ctype = p->f32out ? GL_DT_F32 : d->act;
        size_t cbytes = (size_t)p->m * p->n * (p->f32out ? sizeof(float) : d->act_bytes);
        gemm_call g = {
            .d = d, .ta = ta, .tb = tb, .m = (int)p->m, .n = (int)p->n, .k = (int)p->k,
            .lda = (int)(ta ? p->m : p->k), .ldb = (int)(tb ? p->k : p->n), .ldc = (int)p->n,
            .beta = p->f32out ? 1.0f : 0.0f, .A = A, .B = B, .C = C, .ctype = ctype,
        };
        double mn, mx;
        d->ops->zero(d, C, cbytes);
        d->ops->sync(d);
        double t0 = gl_now();
        run_gemm(&g);
        d->ops->sync(d);
        gl_bench_rank_stats((gl_now() - t0) * 1e3, &t[i].first_ms, &mn, &mx);
        if (o->check) {
            d->ops->zero(d, C, cbytes);          /* beta 1 adds to 0 */
            run_gemm(&g);
            d->ops->sync(d);
            check_gemm(&g, o->seed, d->act == GL_DT_BF16, ctype == GL_DT_BF16, FILL_PERIOD);
        }
        gl_bench_flops r = gl_bench_measure_flops(d, o, 2.0 * p->m * p->n * p->k, run_gemm, &g);
        t[i].ms = r.ms;
        t[i].tflops = r.tflops;
    }
    d->ops->free(d, A);
    d->ops->free(d, B);
    d->ops->free(d, C);
}

/* A fresh device on d's GPU whose gemm plans follow GRIDLM_GEMM_TUNE=val
 * (gemm.cu reads it whenever it makes a plan). */
static gl_dev *open_tuned(const gl_dev *d, const char *val)
{
    setenv("GRIDLM_GEMM_TUNE", val, 1);
    return gl_dev_open_cuda(d->index);
}

static void llama_print(const gl_dev *d, const gl_bench_opts *o, const llama_prod *v, int np,
                        const llama_time *h, const llama_time *t)
{
    int cpu = d->index < 0;
    double scale = cpu ? 1e3 : 1;        /* GFLOP/s on the CPU */
    double flops = 0, ms_h = 0, ms_t = 0, first_h = 0, first_t = 0;
    for (int i = 0; i < np; i++) {
        const llama_prod *p = &v[i];
        const char *out = p->f32out ? "f32" : gl_dtype_name(d->act);
        flops += 2.0 * p->m * p->n * p->k;
        ms_h += h[i].ms;
        first_h += h[i].first_ms;
        if (t) {
            ms_t += t[i].ms;
            first_t += t[i].first_ms;
        }
        if (o->json) {
            json_t *j = gl_bench_flops_record("gemm", d);
            json_object_set_new(j, "mode", json_string("llama"));
            json_object_set_new(j, "product", json_string(p->name));
            json_object_set_new(j, "layout", json_string(layout_name(p->layout)));
            json_object_set_new(j, "m", json_integer(p->m));
            json_object_set_new(j, "n", json_integer(p->n));
            json_object_set_new(j, "k", json_integer(p->k));
            json_object_set_new(j, "out_dtype", json_string(out));
            json_object_set_new(j, "ms", json_real(h[i].ms));
            json_object_set_new(j, "tflops", json_real(h[i].tflops));
            if (t) {
                json_object_set_new(j, "ms_tuned", json_real(t[i].ms));
                json_object_set_new(j, "tflops_tuned", json_real(t[i].tflops));
                json_object_set_new(j, "tune_ms", json_real(t[i].first_ms - h[i].first_ms));
            }
            json_object_set_new(j, "checked", json_boolean(o->check));
            gl_bench_emit(j);
        } else if (gl_bench_rank0()) {
            printf("%-14s %2s %7ld %7ld %7ld %4s %9.3f %8.1f", p->name, layout_name(p->layout),
                   p->m, p->n, p->k, out, h[i].ms, h[i].tflops * scale);
            if (t)
                printf(" %9.3f %8.1f %7.3f %8.1f\n", t[i].ms, t[i].tflops * scale,
                       h[i].ms / t[i].ms, t[i].first_ms - h[i].first_ms);
            else
                printf(" %9s %8s %7s %8s\n", "-", "-", "-", "-");
        }
    }
    double rate_h = flops / (ms_h * 1e-3) / 1e12, rate_t = t ? flops / (ms_t * 1e-3) / 1e12 : 0;
    if (o->json) {
        json_t *j = gl_bench_flops_record("gemm", d);
        json_object_set_new(j, "mode", json_string("llama"));
        json_object_set_new(j, "product", json_string("total"));
        json_object_set_new(j, "ms", json_real(ms_h));
        json_object_set_new(j, "tflops", json_real(rate_h));
        if (t) {
            json_object_set_new(j, "ms_tuned", json_real(ms_t));
            json_object_set_new(j, "tflops_tuned", json_real(rate_t));
            json_object_set_new(j, "tune_ms", json_real(first_t - first_h));
        }
        json_object_set_new(j, "checked", json_boolean(o->check));
        gl_bench_emit(j);
    } else if (gl_bench_rank0()) {
        printf("%-14s %2s %7s %7s %7s %4s %9.3f %8.1f", "total", "-", "-", "-", "-", "-", ms_h,
               rate_h * scale);
        if (t)
            printf(" %9.3f %8.1f %7.3f %8.1f\n", ms_t, rate_t * scale, ms_h / ms_t,
                   first_t - first_h);
        else
            printf(" %9s %8s %7s %8s\n", "-", "-", "-", "-");
    }
}

/* gemm --llama: the list on the CPU once; on a GPU twice, each on a
 * device of its own (so that every plan is new): GRIDLM_GEMM_TUNE=0,
 * then 1 (or 2, when it was set to 2, to print the choices).  The
 * environment is put back afterwards. */
static void bench_llama(gl_bench_ctx *ctx)
{
    const gl_bench_opts *o = ctx->o;
    gl_dev *d = ctx->dev;
    llama_prod v[LLAMA_NPROD];
    llama_time heur[LLAMA_NPROD], tuned[LLAMA_NPROD];
    int np = llama_list(o, v), cpu = d->index < 0;
    long hq, hkv, hd;
    llama_heads(o, &hq, &hkv, &hd);

    if (gl_bench_rank0() && !o->json) {
        int size;
        char dn[32];
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        printf("# gridlm-bench gemm --llama: device %s, %s inputs; hidden %d, ffn %d, heads "
               "%ld/%ld x %ld, vocab %d, %d tokens; %d rank(s), %d warm-up + %d timed calls\n",
               gl_bench_dev_name(d, dn, sizeof dn), gl_dtype_name(d->act), o->hidden, o->ffn,
               hq, hkv, hd, o->vocab, o->tokens, size, o->warmup, o->iters);
        if (cpu)
            printf("# ms, gflops: per call (mean over ranks); the CPU has no algorithm "
                   "tuning (the _t columns are for GPUs)\n");
        else
            printf("# ms, tflops: per call (mean over ranks) with cuBLASLt's first heuristic "
                   "algorithm (GRIDLM_GEMM_TUNE=0); ms_t, tflops_t: tuned (=1); speedup = "
                   "ms/ms_t; tune_ms: what tuning added to the first call\n");
        printf("%-14s %2s %7s %7s %7s %4s %9s %8s %9s %8s %7s %8s\n", "product", "L", "m", "n",
               "k", "out", "ms", cpu ? "gflops" : "tflops", "ms_t", cpu ? "gflops_t" : "tflops_t",
               "speedup", "tune_ms");
        fflush(stdout);
    }
    if (cpu) {
        llama_pass(d, o, v, np, heur);
        llama_print(d, o, v, np, heur, NULL);
        return;
    }
    const char *env = getenv("GRIDLM_GEMM_TUNE");
    char *saved = env ? gl_strdup(env) : NULL;
    gl_dev *dh = open_tuned(d, "0");
    llama_pass(dh, o, v, np, heur);
    gl_dev_close(dh);
    gl_dev *dt = open_tuned(d, saved && !strcmp(saved, "2") ? "2" : "1");
    llama_pass(dt, o, v, np, tuned);
    gl_dev_close(dt);
    if (saved)
        setenv("GRIDLM_GEMM_TUNE", saved, 1);
    else
        unsetenv("GRIDLM_GEMM_TUNE");
    free(saved);
    llama_print(d, o, v, np, heur, tuned);
}

void gl_bench_gemm_validate(const gl_bench_opts *o)
{
    if (o->llama) {
        llama_validate(o);
        return;
    }
    gl_bench_shape *sh;
    if (o->shapes) {
        gl_bench_parse_shapes(o->shapes, 1, 1L << 20, "", &sh);
        free(sh);
    }
}

void gl_bench_gemm(gl_bench_ctx *ctx)
{
    if (ctx->o->llama) {
        bench_llama(ctx);
        return;
    }
    const gl_bench_opts *o = ctx->o;
    gl_dev *d = ctx->dev;
    gl_bench_shape *sh;
    int ns = gl_bench_parse_shapes(o->shapes ? o->shapes : d->index < 0 ? SHAPES_CPU : SHAPES_GPU, 1,
                                   1L << 20, "", &sh);
    int ta = o->layout == GL_BENCH_TN, tb = o->layout == GL_BENCH_NT;
    int bf16 = d->act == GL_DT_BF16;
    gl_dtype ctype = o->out_f32 ? GL_DT_F32 : d->act;
    int cpu = d->index < 0;
    char dn[32];

    if (gl_bench_rank0() && !o->json) {
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        printf("# gridlm-bench gemm: device %s, %s inputs, %s output%s, layout %s, "
               "%d rank(s), %d warm-up + %d timed calls\n",
               gl_bench_dev_name(d, dn, sizeof dn), gl_dtype_name(d->act),
               gl_dtype_name(ctype), o->out_f32 ? " (beta 1)" : "", layout_name(o->layout),
               size, o->warmup, o->iters);
        printf("# %s per rank: mean over ranks, and the slowest and fastest rank\n",
               cpu ? "GFLOP/s" : "TFLOP/s");
        printf("%8s %8s %8s %10s %10s %10s %10s\n", "m", "n", "k", "ms", cpu ? "gflops" : "tflops",
               "min", "max");
    }

    for (int s = 0; s < ns; s++) {
        long m = sh[s].m, n = sh[s].n, k = sh[s].k;
        size_t csize = ctype == GL_DT_F32 ? sizeof(float) : d->act_bytes;
        gemm_call g = {
            .d = d, .ta = ta, .tb = tb, .m = (int)m, .n = (int)n, .k = (int)k,
            .lda = (int)(ta ? m : k), .ldb = (int)(tb ? k : n), .ldc = (int)n,
            .beta = o->out_f32 ? 1.0f : 0.0f, .ctype = ctype,
        };
        g.A = d->ops->alloc(d, (size_t)m * k * d->act_bytes);
        g.B = d->ops->alloc(d, (size_t)k * n * d->act_bytes);
        g.C = d->ops->alloc(d, (size_t)m * n * csize);
        gl_bench_fill(d, g.A, (size_t)m * k, o->seed, 1, 1.0f);
        gl_bench_fill(d, g.B, (size_t)k * n, o->seed, 2, 1.0f);

        if (o->check) {
            run_gemm(&g);            /* C was zeroed by alloc: beta 1 adds to 0 */
            d->ops->sync(d);
            check_gemm(&g, o->seed, bf16, ctype == GL_DT_BF16, 0);
        }
        gl_bench_flops r = gl_bench_measure_flops(d, o, 2.0 * m * n * k, run_gemm, &g);
        if (o->json) {
            json_t *j = gl_bench_flops_record("gemm", d);
            json_object_set_new(j, "out_dtype", json_string(gl_dtype_name(ctype)));
            json_object_set_new(j, "layout", json_string(layout_name(o->layout)));
            json_object_set_new(j, "m", json_integer(m));
            json_object_set_new(j, "n", json_integer(n));
            json_object_set_new(j, "k", json_integer(k));
            gl_bench_emit_flops(j, &r, o->check);
        } else {
            if (gl_bench_rank0())
                printf("%8ld %8ld %8ld", m, n, k);
            gl_bench_print_flops(d, &r);
        }
        d->ops->free(d, g.A);
        d->ops->free(d, g.B);
        d->ops->free(d, g.C);
    }
    free(sh);
}
