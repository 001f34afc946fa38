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
 */
#include <config.h>
#include "bench/bench.h"
#include "base/log.h"

#include <jansson.h>
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

typedef struct { long m, n, k; } shape;

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

/* "MxNxK" or "N" (N x N x N), comma-separated. */
static int parse_shapes(const char *list, shape **out)
{
    char *copy = gl_strdup(list), *save = NULL;
    int n = 0, cap = 8;
    shape *v = gl_malloc(cap * sizeof *v);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long a, b, c;
        char tail;
        int got = sscanf(tok, "%ldx%ldx%ld%c", &a, &b, &c, &tail);
        if (got == 1 && !strchr(tok, 'x'))
            b = c = a, got = 3;
        if (got != 3 || a <= 0 || b <= 0 || c <= 0 || a > 1L << 20 || b > 1L << 20 ||
            c > 1L << 20)
            gl_die_code(2, "--shapes '%s': '%s' is not a shape: give MxNxK (e.g. "
                        "8192x4096x4096) or N for a square, comma-separated", list, tok);
        if (n == cap)
            v = gl_realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = (shape){a, b, c};
    }
    free(copy);
    if (!n)
        gl_die_code(2, "--shapes '%s' lists nothing: give MxNxK or N, comma-separated", list);
    *out = v;
    return n;
}

/* Element (i, l) of op(X), X stored row-major as [rows, cols] = op(X) or
 * its transpose, from the generator's stream. */
static double op_value(long seed, int stream, int trans, long i, long l, long rows_op,
                       long cols_op, int bf16)
{
    size_t idx = trans ? (size_t)l * rows_op + i : (size_t)i * cols_op + l;
    float v = gl_bench_value(seed, stream, idx);
    return bf16 ? gl_bench_round_bf16(v) : v;
}

/* Compare 64 sampled entries of C with a double-precision product of the
 * same (act-rounded) inputs.  The error allowed is relative to the
 * entry's natural scale sqrt(sum_l (a_il b_lj)^2): fp32 accumulation
 * and, for bf16, rounding of C to 8 significant bits stay far below it,
 * a wrong product (other layout, missing terms) lands near 1. */
static void check_gemm(const gemm_call *g, long seed, int bf16_in, int bf16_out)
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
            double p = op_value(seed, 1, g->ta, i, l, g->m, g->k, bf16_in) *
                       op_value(seed, 2, g->tb, l, j, g->k, g->n, bf16_in);
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

void gl_bench_gemm_validate(const gl_bench_opts *o)
{
    shape *sh;
    if (o->shapes) {
        parse_shapes(o->shapes, &sh);
        free(sh);
    }
}

static const char *layout_name(int layout)
{
    return layout == GL_BENCH_NN ? "NN" : layout == GL_BENCH_TN ? "TN" : "NT";
}

void gl_bench_gemm(gl_bench_ctx *ctx)
{
    const gl_bench_opts *o = ctx->o;
    gl_dev *d = ctx->dev;
    shape *sh;
    int ns = parse_shapes(o->shapes ? o->shapes : d->index < 0 ? SHAPES_CPU : SHAPES_GPU, &sh);
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
            check_gemm(&g, o->seed, bf16, ctype == GL_DT_BF16);
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
