/*
 * bench_fp8.c: FP8 products against the device's own matrix products, and
 * the FP8 quantization kernel, through ops.h.
 *
 * For each shape m x n x k, the layout of FP8 products (ops.h's gemm_fp8):
 * C[m,n] = A[m,k] B[n,k]^T, a linear layer's forward Y = X W^T.  Timed:
 *   act   ops->gemm in the same layout (NT) on act-dtype operands (bf16 on
 *         CUDA: the product FP8 replaces), act output;
 *   fp8   ops->gemm_fp8, E4M3 x E4M3, act output, fp32 accumulation
 *         promoted along k (what the gradient products use);
 *   fast  the same with fast accumulation (what a forward may use);
 *   blk   ops->gemm_fp8_tiles, block scaling (--fp8-recipe blockwise's
 *         forward): A in 1 x 128 tiles, B in 128 x 128 blocks, E4M3, act
 *         output (on CUDA cuBLASLt's block-scaled modes: Hopper only);
 *   quant ops->fp8_quantize of A into both orientations with its amax,
 *         in GB/s of A read and q, qt written (4 bytes an element with
 *         bf16 A);
 *   tq    ops->fp8_quantize_tiles of A into both orientations, 1 x 128
 *         tiles, GB/s as quant's (the factors' bytes not counted).
 * TFLOP/s = 2 m n k / seconds / 1e12 (GFLOP/s on the CPU, where "fp8" is
 * the exact emulation: a correctness path, not a fast one).
 *
 * The FP8 operands are made as a recipe makes them: act values from
 * gl_bench_fill(), their amax and current scaling (ops->fp8_amax_scale,
 * as the model's tensorwise recipe), quantization (ops->fp8_quantize).  With
 * --check 1 one FP8 product of each kind is compared, before timing, at 16
 * sampled entries with a double-precision sum of the decoded FP8 operands
 * times their scales (the tensor's, or the tile's for blk): a wrong
 * layout or scale lands far off, the tensor cores' rounding within the
 * 1/64 of the entry's scale that bench_gemm.c allows bf16.
 */
#include <config.h>
#include "bench/bench.h"
#include "base/log.h"
#include "device/fp8.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults: a square, and on GPUs the 1.5B model's products at 8192
 * tokens (h 2048, 32/8 heads of 64, ffn 8192): QKV, gate+up, down. */
#define SHAPES_CPU "64,32x48x80"
#define SHAPES_GPU "8192,8192x3072x2048,8192x16384x2048,8192x2048x8192"

typedef struct {
    gl_dev *d;
    int m, n, k, fast;
    void *A, *B, *C;            /* act operands, act output */
    uint8_t *a8, *b8, *at8;     /* A and B in FP8, and A's transpose */
    float *sc;                  /* A's amax, scale at 0, 1, scale_inv at 4;
                                   B's at 8, 9, 12 (inverses 16-byte
                                   aligned: read in place by cuBLASLt) */
    uint8_t *ab8, *bb8;         /* A in 1 x 128 tiles, B in 128 x 128 blocks */
    float *as, *bs, *ats;       /* their factors, and those of A's transpose */
} fp8_call;

static void run_act(void *arg)
{
    fp8_call *g = arg;
    g->d->ops->gemm(g->d, 0, 1, g->m, g->n, g->k, 1.0f, g->A, g->k, g->B, g->k, 0.0f,
                    g->C, g->d->act, g->n);
}

static void run_fp8(void *arg)
{
    fp8_call *g = arg;
    g->d->ops->gemm_fp8(g->d, g->m, g->n, g->k, 1.0f, g->a8, GL_FP8_E4M3, g->sc + 4, g->b8,
                        GL_FP8_E4M3, g->sc + 12, 0.0f, g->C, g->d->act, g->n, g->fast);
}

static void run_blk(void *arg)
{
    fp8_call *g = arg;
    g->d->ops->gemm_fp8_tiles(g->d, g->m, g->n, g->k, 1.0f, g->ab8, GL_FP8_E4M3, g->as,
                              g->bb8, GL_FP8_E4M3, g->bs, 1, 0.0f, g->C, g->d->act, g->n);
}

static void run_tquant(void *arg)
{
    fp8_call *g = arg;
    g->d->ops->fp8_quantize_tiles(g->d, g->ab8, g->as, g->at8, g->ats, g->A, g->m, g->k, 0,
                                  GL_FP8_E4M3);
}

static void run_quant(void *arg)
{
    fp8_call *g = arg;
    g->d->ops->fp8_quantize(g->d, g->a8, g->at8, g->sc, g->A, g->m, g->k, g->sc + 1,
                            GL_FP8_E4M3);
}

void gl_bench_fp8_validate(const gl_bench_opts *o)
{
    gl_bench_shape *sh;
    if (o->shapes) {
        gl_bench_parse_shapes(o->shapes, 16, 1L << 18, " of FP8 products", &sh);
        free(sh);
    }
}

/* FP8 copy of act operand x [rows, k] by current scaling, with amax,
 * scale and scale_inv at sc, sc + 1 and sc + 4. */
static void make_fp8(gl_dev *d, uint8_t *q, uint8_t *qt, float *sc, const void *x, int rows,
                     int k)
{
    d->ops->fp8_amax_scale(d, sc, sc + 1, sc + 4, x, (size_t)rows * k, GL_FP8_E4M3);
    d->ops->fp8_quantize(d, q, qt, NULL, x, rows, k, sc + 1, GL_FP8_E4M3);
}

/* Host copies of the dequantization factors of a product's operands, for
 * check_fp8: per tensor (a, b) or, for the block-scaled product, per
 * tile (ta: A's 1 x 128 tiles, tb: B's 128 x 128 blocks). */
typedef struct {
    float a, b;
    float *ta, *tb;
} fp8_factors;

static fp8_factors factors_of(const fp8_call *g, int blk)
{
    gl_dev *d = g->d;
    fp8_factors f = {0};
    if (!blk) {
        float sc[16];
        d->ops->download(d, sc, g->sc, sizeof sc);
        f.a = sc[4];
        f.b = sc[12];
        return f;
    }
    size_t na = gl_fp8_tile_count(g->m, g->k, 0), nb = gl_fp8_tile_count(g->n, g->k, 1);
    f.ta = gl_malloc(na * sizeof(float));
    f.tb = gl_malloc(nb * sizeof(float));
    d->ops->download(d, f.ta, g->as, na * sizeof(float));
    d->ops->download(d, f.tb, g->bs, nb * sizeof(float));
    return f;
}

/* 16 sampled entries of the FP8 product in g->C (blk: the block-scaled
 * one) against a double sum of the decoded operands (see the top of the
 * file). */
static void check_fp8(const fp8_call *g, int blk)
{
    gl_dev *d = g->d;
    int k = g->k;
    const uint8_t *a8 = blk ? g->ab8 : g->a8, *b8 = blk ? g->bb8 : g->b8;
    uint8_t *ra = gl_malloc(k), *rb = gl_malloc(k);
    fp8_factors f = factors_of(g, blk);
    float got, *tmp = d->ops->alloc(d, sizeof(float));
    for (int s = 0; s < 16; s++) {
        long i = (long)((0.5 + 0.5 * gl_bench_value(7, 100, s)) * g->m) % g->m;
        long j = (long)((0.5 + 0.5 * gl_bench_value(7, 101, s)) * g->n) % g->n;
        d->ops->download(d, ra, a8 + (size_t)i * k, k);
        d->ops->download(d, rb, b8 + (size_t)j * k, k);
        double ref = 0, scale = 0;
        for (int l = 0; l < k; l++) {
            double fa = blk ? f.ta[gl_fp8_tile_at(g->m, k, (int)i, l, 0)] : f.a;
            double fb = blk ? f.tb[gl_fp8_tile_at(g->n, k, (int)j, l, 1)] : f.b;
            double p = (double)gl_fp8_decode(ra[l], GL_FP8_E4M3) * fa *
                       gl_fp8_decode(rb[l], GL_FP8_E4M3) * fb;
            ref += p;
            scale += p * p;
        }
        scale = sqrt(scale);
        const char *c = (const char *)g->C + ((size_t)i * g->n + j) * d->act_bytes;
        d->ops->to_f32(d, tmp, c, 1);
        d->ops->download(d, &got, tmp, sizeof got);
        if (!(fabs(got - ref) <= scale / 64))
            gl_die("fp8 check failed for %dx%dx%d%s: C[%ld,%ld] = %.6g, the host reference "
                   "gives %.6g (allowed error %.3g): the device's %s is wrong", g->m, g->n,
                   g->k, blk ? " (block scaling)" : g->fast ? " (fast accumulation)" : "", i,
                   j, got, ref, scale / 64, blk ? "gemm_fp8_tiles" : "gemm_fp8");
    }
    d->ops->free(d, tmp);
    free(f.ta);
    free(f.tb);
    free(ra);
    free(rb);
}

static void emit(const gl_dev *d, const char *what, long m, long n, long k,
                 const gl_bench_flops *r, int checked)
{
    json_t *j = gl_bench_flops_record("fp8", d);
    json_object_set_new(j, "case", json_string(what));
    json_object_set_new(j, "m", json_integer(m));
    json_object_set_new(j, "n", json_integer(n));
    json_object_set_new(j, "k", json_integer(k));
    if (!strcmp(what, "quant") || !strcmp(what, "quant_tiles")) {  /* GB/s, not FLOP/s */
        json_object_set_new(j, "ms", json_real(r->ms));
        json_object_set_new(j, "gbs", json_real(r->tflops * 1e3));
        json_object_set_new(j, "checked", json_boolean(0));
        gl_bench_emit(j);
        return;
    }
    gl_bench_emit_flops(j, r, checked);
}

void gl_bench_fp8(gl_bench_ctx *ctx)
{
    const gl_bench_opts *o = ctx->o;
    gl_dev *d = ctx->dev;
    gl_bench_shape *sh;
    int ns = gl_bench_parse_shapes(o->shapes ? o->shapes : d->index < 0 ? SHAPES_CPU : SHAPES_GPU, 16,
                                   1L << 18, " of FP8 products", &sh);
    int cpu = d->index < 0;
    double u = cpu ? 1e3 : 1;           /* GFLOP/s on the CPU */
    char dn[32];

    if (gl_bench_rank0() && !o->json) {
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        printf("# gridlm-bench fp8: device %s (%s), C = A B^T with A [m,k], B [n,k]; %d "
               "rank(s), %d warm-up + %d timed calls\n", gl_bench_dev_name(d, dn, sizeof dn),
               d->name, size, o->warmup, o->iters);
        printf("# %s: %s products; fp8: E4M3 x E4M3, %s out, fp32 accumulation; fast: "
               "with fast accumulation; blk: block scaling (A 1x128 tiles, B 128x128 "
               "blocks); x: speed-up over %s; quant: A to FP8 (q, qt, amax), tq: A to FP8 "
               "in 1x128 tiles (q, qt), GB/s of A read and q, qt written; rates: mean over "
               "ranks\n", gl_dtype_name(d->act), gl_dtype_name(d->act), gl_dtype_name(d->act),
               gl_dtype_name(d->act));
        printf("%6s %6s %6s %8s %8s %8s %8s %6s %8s %8s %6s %8s %8s %6s %8s %8s %8s %8s\n",
               "m", "n", "k", "act_ms", cpu ? "gflops" : "tflops", "fp8_ms",
               cpu ? "gflops" : "tflops", "x", "fast_ms", cpu ? "gflops" : "tflops", "x",
               "blk_ms", cpu ? "gflops" : "tflops", "x", "quant_ms", "GB/s", "tq_ms", "GB/s");
        fflush(stdout);
    }

    for (int s = 0; s < ns; s++) {
        long m = sh[s].m, n = sh[s].n, k = sh[s].k;
        fp8_call g = {.d = d, .m = (int)m, .n = (int)n, .k = (int)k};
        g.A = d->ops->alloc(d, (size_t)m * k * d->act_bytes);
        g.B = d->ops->alloc(d, (size_t)n * k * d->act_bytes);
        g.C = d->ops->alloc(d, (size_t)m * n * d->act_bytes);
        g.a8 = d->ops->alloc(d, (size_t)m * k);
        g.at8 = d->ops->alloc(d, (size_t)m * k);
        g.b8 = d->ops->alloc(d, (size_t)n * k);
        g.sc = d->ops->alloc(d, 16 * sizeof(float));
        g.ab8 = d->ops->alloc(d, (size_t)m * k);
        g.bb8 = d->ops->alloc(d, (size_t)n * k);
        g.as = d->ops->alloc(d, gl_fp8_tile_count((int)m, (int)k, 0) * sizeof(float));
        g.ats = d->ops->alloc(d, gl_fp8_tile_count((int)k, (int)m, 0) * sizeof(float));
        g.bs = d->ops->alloc(d, gl_fp8_tile_count((int)n, (int)k, 1) * sizeof(float));
        gl_bench_fill(d, g.A, (size_t)m * k, o->seed, 1, 1.0f);
        gl_bench_fill(d, g.B, (size_t)n * k, o->seed, 2, 1.0f);
        make_fp8(d, g.a8, NULL, g.sc, g.A, (int)m, (int)k);
        make_fp8(d, g.b8, NULL, g.sc + 8, g.B, (int)n, (int)k);
        d->ops->fp8_quantize_tiles(d, g.ab8, g.as, NULL, NULL, g.A, (int)m, (int)k, 0,
                                   GL_FP8_E4M3);
        d->ops->fp8_quantize_tiles(d, g.bb8, g.bs, NULL, NULL, g.B, (int)n, (int)k, 1,
                                   GL_FP8_E4M3);
        d->ops->sync(d);

        double flops = 2.0 * m * n * k, bytes = (d->act_bytes + 2.0) * m * k;
        gl_bench_flops ra = gl_bench_measure_flops(d, o, flops, run_act, &g);
        gl_bench_flops rf[2];
        for (g.fast = 0; g.fast < 2; g.fast++) {
            if (o->check) {
                run_fp8(&g);
                d->ops->sync(d);
                check_fp8(&g, 0);
            }
            rf[g.fast] = gl_bench_measure_flops(d, o, flops, run_fp8, &g);
        }
        g.fast = 0;
        if (o->check) {
            run_blk(&g);
            d->ops->sync(d);
            check_fp8(&g, 1);
        }
        gl_bench_flops rb = gl_bench_measure_flops(d, o, flops, run_blk, &g);
        gl_bench_flops rq = gl_bench_measure_flops(d, o, bytes, run_quant, &g);
        gl_bench_flops rt = gl_bench_measure_flops(d, o, bytes, run_tquant, &g);
        if (o->json) {
            emit(d, "act", m, n, k, &ra, 0);
            emit(d, "fp8", m, n, k, &rf[0], o->check);
            emit(d, "fp8_fast", m, n, k, &rf[1], o->check);
            emit(d, "fp8_block", m, n, k, &rb, o->check);
            emit(d, "quant", m, n, k, &rq, 0);
            emit(d, "quant_tiles", m, n, k, &rt, 0);
        } else if (gl_bench_rank0()) {
            printf("%6ld %6ld %6ld %8.3f %8.1f %8.3f %8.1f %6.2f %8.3f %8.1f %6.2f %8.3f %8.1f "
                   "%6.2f %8.3f %8.1f %8.3f %8.1f\n", m, n, k, ra.ms, ra.tflops * u, rf[0].ms,
                   rf[0].tflops * u, ra.ms / rf[0].ms, rf[1].ms, rf[1].tflops * u,
                   ra.ms / rf[1].ms, rb.ms, rb.tflops * u, ra.ms / rb.ms, rq.ms,
                   rq.tflops * 1e3, rt.ms, rt.tflops * 1e3);
            fflush(stdout);
        }
        void *bufs[] = {g.A, g.B, g.C, g.a8, g.at8, g.b8, g.sc, g.ab8, g.bb8, g.as, g.ats, g.bs};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            d->ops->free(d, bufs[i]);
    }
    free(sh);
}
