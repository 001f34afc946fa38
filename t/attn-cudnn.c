/*
 * attn-cudnn.c: cuDNN's fused attention (cuda/attn_cudnn.cu) against the
 * attention kernels written here and against the CPU reference back end,
 * and the CUDA op profiler (GRIDLM_PROFILE).
 *
 * Attention runs on a fused QKV buffer [B, S, (Hq + 2 Hkv) D], as the
 * model lays it out, so q, k, v (and dq, dk, dv) are strided views.  Both
 * GPU implementations see the same bf16 numbers, and the CPU sees them as
 * fp32.  Every output is poisoned with 0xFF bytes (NaN) before each run,
 * so an element an implementation fails to write shows up.  Tolerances
 * are those of t/ops-cuda.c: attention rounds its probabilities to bf16
 * before the second product, so o and the gradients are compared against
 * the largest reference value (1e-2 and 2e-2 of it); the log-sum-exp is
 * fp32 on every side (1e-5).
 *
 * Forward: cuDNN against the CPU on the heads the CPU computes (all of
 * them at small shapes, 4 at S = 4096) and against the native kernels on
 * every head.  Backward: from the CPU's o and lse on the CPU's heads, and
 * from the native forward's o and lse on every head against the native
 * backward.  A backward on some heads must leave the other heads' columns
 * of the fused gradient buffer alone.
 *
 * Context parallelism's blocks (attn_block_fwd, attn_block_bwd): cuDNN
 * must run every block of tile-sized shapes that gl_attn_block_split
 * cuts into full and causal-diagonal parts (every block of Megatron's CP
 * layout), the kernels of attn_block.cu the others (the counts of
 * gl_cuda_attn_counts tell which ran); each against the CPU, the
 * backward's += into f32 accumulators included (test_block).
 *
 * Deterministic mode (gl_cuda_deterministic): the backward runs cuDNN's
 * deterministic graph and repeats its bytes (test_deterministic), the
 * blocks' too (against the CPU); shapes whose workspace passes the limit
 * run in tiles, or on the kernels when no tile fits (test_det_tiles).
 *
 * GL_ATTN_CUDNN_QUICK=1 leaves out the S = 4096 shapes; GL_ATTN_CUDNN_BENCH=1
 * adds timings of both implementations at the 1.5B model's shapes.
 * Skips without a GPU or in a build without cuDNN.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "attn_cudnn.h"
#include "base/log.h"
#include "device/ops.h"
#include "gpu-util.h"
#include "tap.h"

/* ---- comparison ---- */

/* cmp2d_env (t/gpu-util.h): rows x cols elements at row strides ldg and
 * ldw within atol max|want| + rtol |want|, max|want| raised to `floor`
 * where it is smaller; with GL_ATTN_CUDNN_VERBOSE set it prints the error
 * of every comparison that passes. */
static int cmp2d_floor(const char *what, const float *got, long ldg,
                       const float *want, long ldw, long rows, long cols,
                       double rtol, double atol, double floor)
{
    return cmp2d_env("GL_ATTN_CUDNN_VERBOSE", what, got, ldg, want, ldw, rows,
                     cols, rtol, atol, floor);
}

static int cmp2d(const char *what, const float *got, long ldg,
                 const float *want, long ldw, long rows, long cols,
                 double rtol, double atol)
{
    return cmp2d_floor(what, got, ldg, want, ldw, rows, cols, rtol, atol, 0);
}

/* The largest |x| of rows x cols at row stride ld, 1 when all are 0. */
static double magnitude(const float *x, long ld, long rows, long cols)
{
    double m = 0;
    for (long r = 0; r < rows; r++)
        for (long c = 0; c < cols; c++)
            if (fabs(x[r * ld + c]) > m)
                m = fabs(x[r * ld + c]);
    return m > 0 ? m : 1.0;
}

/* A fused QKV buffer of rows x W bf16 values in [-1, 1], the first OD
 * columns (the queries) times 4 for a sharper softmax. */
static float *rand_qkv(long rows, int W, int OD)
{
    float *qkv = rand_bf((size_t)rows * W, -1, 1);
    for (long r = 0; r < rows; r++)
        for (int i = 0; i < OD; i++)
            qkv[r * W + i] = round_bf(qkv[r * W + i] * 4);
    return qkv;
}

/* ---- the implementations ---- */

static gl_attn_counts counts(void)
{
    gl_attn_counts c;
    gl_cuda_attn_counts(G, &c);
    return c;
}

/* Forward through ops->attn_fwd under implementation impl; returns 1 when
 * cuDNN ran it. */
static int run_fwd(int impl, void *o, int ldo, float *lse, const void *q,
                   const void *k, const void *v, int ld, int B, int S, int Hq,
                   int Hkv, int D, float scale)
{
    gl_cuda_attn_impl(G, impl);
    gl_attn_counts c0 = counts();
    G->ops->attn_fwd(G, o, ldo, lse, q, ld, k, ld, v, ld, B, S, Hq, Hkv, D,
                     scale, NULL);
    G->ops->sync(G);
    gl_attn_counts c1 = counts();
    gl_cuda_attn_impl(G, GL_ATTN_AUTO);
    return c1.fwd_cudnn == c0.fwd_cudnn + 1;
}

static int run_bwd(int impl, void *dq, void *dk, void *dv, int ld,
                   const void *dout, int lddo, const void *o, int ldo,
                   const float *lse, const void *q, const void *k,
                   const void *v, int B, int S, int Hq, int Hkv, int D,
                   float scale)
{
    gl_cuda_attn_impl(G, impl);
    gl_attn_counts c0 = counts();
    G->ops->attn_bwd(G, dq, dk, dv, ld, dout, lddo, o, ldo, lse, q, ld, k, ld,
                     v, ld, B, S, Hq, Hkv, D, scale, NULL);
    G->ops->sync(G);
    gl_attn_counts c1 = counts();
    gl_cuda_attn_impl(G, GL_ATTN_AUTO);
    return c1.bwd_cudnn == c0.bwd_cudnn + 1;
}

/* Columns [c0, c1) of rows x ld elements all still 0xFFFF (unwritten). */
static long written(const void *buf, long rows, int ld, int c0, int c1)
{
    uint16_t *h = gl_malloc((size_t)rows * ld * 2 + 2);
    G->ops->download(G, h, buf, (size_t)rows * ld * 2);
    long n = 0;
    for (long r = 0; r < rows; r++)
        for (int c = c0; c < c1; c++)
            n += h[r * ld + c] != 0xffff;
    free(h);
    return n;
}

/*
 * One shape.  cq of the Hq query heads (and cq / (Hq/Hkv) kv heads) are
 * computed on the CPU.  must: cuDNN has to run this shape (else a shape
 * it refuses is reported as a skip).
 */
static void test_attn(int B, int S, int Hq, int Hkv, int D, int cq, int must)
{
    int grp = Hq / Hkv, ckv = cq / grp;
    int W = (Hq + 2 * Hkv) * D, OD = Hq * D;
    long rows = (long)B * S;
    size_t nqkv = (size_t)rows * W, no = (size_t)rows * OD;
    size_t nl = (size_t)B * Hq * S, ncl = (size_t)B * cq * S;
    float scale = 1.0f / sqrtf((float)D);
    char shape[96], name[200];
    snprintf(shape, sizeof shape, "B=%d S=%d Hq=%d Hkv=%d D=%d", B, S, Hq, Hkv, D);

    float *qkv = rand_qkv(rows, W, OD), *dout = rand_bf(no, -1, 1);
    void *gqkv = g_act(qkv, nqkv), *gdo = g_act(dout, no);
    uint16_t *gq = gqkv, *gk = gq + OD, *gv = gk + Hkv * D;
    void *go_c = G->ops->alloc(G, no * 2), *go_n = G->ops->alloc(G, no * 2);
    float *gl_c = g_f32(NULL, nl), *gl_n = g_f32(NULL, nl);

    /* ---- forward ---- */
    g_poison(go_c, no * 2);
    g_poison(gl_c, nl * 4);
    int ran = run_fwd(GL_ATTN_AUTO, go_c, OD, gl_c, gq, gk, gv, W, B, S, Hq,
                      Hkv, D, scale);
    if (!ran && !must)          /* compared below as the fallback */
        skip(1, "cuDNN built no forward plan for this shape (see the warning)");
    else
        ok(ran, "attn_fwd %s runs through cuDNN", shape);
    const char *fwho = ran ? "cuDNN" : "native (cuDNN refused)";
    g_poison(go_n, no * 2);
    g_poison(gl_n, nl * 4);
    ok(!run_fwd(GL_ATTN_NATIVE, go_n, OD, gl_n, gq, gk, gv, W, B, S, Hq, Hkv,
                D, scale), "attn_fwd %s under GL_ATTN_NATIVE runs the kernels here",
       shape);

    float *cqkv = c_buf(qkv, nqkv), *co = c_buf(NULL, no);
    float *clse = c_buf(NULL, ncl);
    float *cq_ = cqkv, *ck = cq_ + OD, *cv = ck + Hkv * D;
    double t0 = gl_now();
    C->ops->attn_fwd(C, co, OD, clse, cq_, W, ck, W, cv, W, B, S, cq, ckv, D,
                     scale, NULL);
    double tc = gl_now() - t0;

    float *o_c = dl_act(go_c, no), *o_n = dl_act(go_n, no);
    float *l_c = dl_f32(gl_c, nl), *l_n = dl_f32(gl_n, nl);
    long nan = 0;
    for (size_t i = 0; i < no; i++)
        nan += isnan(o_c[i]);
    for (size_t i = 0; i < nl; i++)
        nan += isnan(l_c[i]);
    ok(nan == 0, "%s attn_fwd %s writes every element of o and lse (%ld "
       "unwritten)", fwho, shape, nan);
    snprintf(name, sizeof name, "%s attn_fwd o   %s vs CPU (%d heads)", fwho, shape, cq);
    cmp2d(name, o_c, OD, co, OD, rows, (long)cq * D, 0, 1e-2);
    /* lse [B, Hq, S]: the CPU's [B, cq, S] is the first cq S of each batch */
    snprintf(name, sizeof name, "%s attn_fwd lse %s vs CPU (%d heads)", fwho, shape, cq);
    cmp2d(name, l_c, (long)Hq * S, clse, (long)cq * S, B, (long)cq * S, 1e-5, 1e-5);
    if (ran) {
        snprintf(name, sizeof name, "cuDNN attn_fwd o   %s vs native (all heads)", shape);
        cmp2d(name, o_c, OD, o_n, OD, rows, OD, 0, 1e-2);
        snprintf(name, sizeof name, "cuDNN attn_fwd lse %s vs native (all heads)", shape);
        cmp2d(name, l_c, 0, l_n, 0, 1, (long)nl, 1e-5, 1e-5);
    }

    /* ---- backward on the CPU's heads, from the CPU's o and lse ---- */
    double gscale[3];           /* max |dq|, |dk|, |dv| of the CPU */
    {
        void *gd = G->ops->alloc(G, nqkv * 2);
        uint16_t *gdq = gd, *gdk = gdq + OD, *gdv = gdk + Hkv * D;
        float *lse2 = g_f32(clse, ncl);
        void *go2 = g_act(co, no);
        float *co_bf = dl_act(go2, no);          /* o as the GPU sees it */
        float *cdo = c_buf(dout, no), *cd = c_buf(NULL, nqkv);
        g_poison(gd, nqkv * 2);
        ran = run_bwd(GL_ATTN_AUTO, gdq, gdk, gdv, W, gdo, OD, go2, OD, lse2,
                      gq, gk, gv, B, S, cq, ckv, D, scale);
        if (ran || must)
            ok(ran, "attn_bwd %s (%d/%d heads) runs through cuDNN", shape, cq, ckv);
        t0 = gl_now();
        C->ops->attn_bwd(C, cd, cd + OD, cd + OD + Hkv * D, W, cdo, OD, co_bf,
                         OD, clse, cq_, W, ck, W, cv, W, B, S, cq, ckv, D, scale, NULL);
        tc += gl_now() - t0;
        float *dg = dl_act(gd, nqkv);
        if (!ran && !must)
            skip(1, "cuDNN built no backward plan for this shape (see the warning)");
        const char *who = ran ? "cuDNN" : "native (cuDNN refused)";
        snprintf(name, sizeof name, "%s attn_bwd dq %s vs CPU (%d heads)", who, shape, cq);
        cmp2d(name, dg, W, cd, W, rows, (long)cq * D, 0, 2e-2);
        snprintf(name, sizeof name, "%s attn_bwd dk %s vs CPU (%d kv heads)", who, shape, ckv);
        cmp2d(name, dg + OD, W, cd + OD, W, rows, (long)ckv * D, 0, 2e-2);
        snprintf(name, sizeof name, "%s attn_bwd dv %s vs CPU (%d kv heads)", who, shape, ckv);
        cmp2d(name, dg + OD + Hkv * D, W, cd + OD + Hkv * D, W, rows,
              (long)ckv * D, 0, 2e-2);
        if (cq < Hq) {
            long w = written(gd, rows, W, cq * D, OD) +
                     written(gd, rows, W, OD + ckv * D, OD + Hkv * D) +
                     written(gd, rows, W, OD + (Hkv + ckv) * D, W);
            ok(w == 0, "%s attn_bwd %s on %d of %d heads writes no other head's "
               "columns (%ld written)", who, shape, cq, Hq, w);
        }
        gscale[0] = magnitude(cd, W, rows, (long)cq * D);
        gscale[1] = magnitude(cd + OD, W, rows, (long)ckv * D);
        gscale[2] = magnitude(cd + OD + Hkv * D, W, rows, (long)ckv * D);
        diag("  (CPU reference took %.1f s)", tc);
        G->ops->free(G, gd);
        G->ops->free(G, lse2);
        G->ops->free(G, go2);
        C->ops->free(C, cdo);
        C->ops->free(C, cd);
        free(co_bf);
        free(dg);
    }

    /* ---- backward on every head: cuDNN against the kernels here ---- */
    {
        void *gd_c = G->ops->alloc(G, nqkv * 2), *gd_n = G->ops->alloc(G, nqkv * 2);
        uint16_t *a = gd_c, *b = gd_n;
        g_poison(gd_c, nqkv * 2);
        g_poison(gd_n, nqkv * 2);
        ran = run_bwd(GL_ATTN_AUTO, a, a + OD, a + OD + Hkv * D, W, gdo, OD,
                      go_n, OD, gl_n, gq, gk, gv, B, S, Hq, Hkv, D, scale);
        if (ran || must)
            ok(ran, "attn_bwd %s (all heads) runs through cuDNN", shape);
        run_bwd(GL_ATTN_NATIVE, b, b + OD, b + OD + Hkv * D, W, gdo, OD, go_n,
                OD, gl_n, gq, gk, gv, B, S, Hq, Hkv, D, scale);
        float *dc = dl_act(gd_c, nqkv), *dn = dl_act(gd_n, nqkv);
        /* Both GPU results carry fp32 cancellation noise (~1e-7 of the
         * inputs) where the exact gradient vanishes (dq and dk at S = 1,
         * where the CPU gives exact zeros): the tolerance is relative to
         * the true magnitude of each gradient, the CPU's, not to the
         * native kernels' noise. */
        if (ran) {
            snprintf(name, sizeof name, "cuDNN attn_bwd dq %s vs native", shape);
            cmp2d_floor(name, dc, W, dn, W, rows, OD, 0, 2e-2, gscale[0]);
            snprintf(name, sizeof name, "cuDNN attn_bwd dk %s vs native", shape);
            cmp2d_floor(name, dc + OD, W, dn + OD, W, rows, (long)Hkv * D, 0,
                        2e-2, gscale[1]);
            snprintf(name, sizeof name, "cuDNN attn_bwd dv %s vs native", shape);
            cmp2d_floor(name, dc + OD + Hkv * D, W, dn + OD + Hkv * D, W, rows,
                        (long)Hkv * D, 0, 2e-2, gscale[2]);
        }
        G->ops->free(G, gd_c);
        G->ops->free(G, gd_n);
        free(dc);
        free(dn);
    }

    C->ops->free(C, cqkv);
    C->ops->free(C, co);
    C->ops->free(C, clse);
    free(o_c);
    free(o_n);
    free(l_c);
    free(l_n);
    G->ops->free(G, gqkv);
    G->ops->free(G, gdo);
    G->ops->free(G, go_c);
    G->ops->free(G, go_n);
    G->ops->free(G, gl_c);
    G->ops->free(G, gl_n);
    free(qkv);
    free(dout);
}

/* ---- context parallelism's blocks ---- */

/* Rows [0, rows) x cols of a - b, at row strides lda and ldb, into a new
 * array of row stride cols: what a block backward added to its
 * accumulators. */
static float *added(const float *a, long lda, const float *b, long ldb,
                    long rows, long cols)
{
    float *x = gl_malloc((size_t)rows * cols * sizeof *x + 1);
    for (long r = 0; r < rows; r++)
        for (long c = 0; c < cols; c++)
            x[r * cols + c] = a[r * lda + c] - b[r * ldb + c];
    return x;
}

/* Block calls of each kind since c0: cudnn 1 for cuDNN's, 0 the kernels'. */
static long blk_ran(const gl_attn_counts *c0, int bwd, int cudnn)
{
    gl_attn_counts c1 = counts();
    if (bwd)
        return cudnn ? c1.blk_bwd_cudnn - c0->blk_bwd_cudnn
                     : c1.blk_bwd_native - c0->blk_bwd_native;
    return cudnn ? c1.blk_fwd_cudnn - c0->blk_fwd_cudnn
                 : c1.blk_fwd_native - c0->blk_fwd_native;
}

/*
 * One block of context parallelism (ops.h's attn_block_fwd and
 * attn_block_bwd) under GRIDLM_ATTENTION=auto against the CPU: Sq queries
 * (q, dout rows [B, Sq, Hq D] with a gap) against Sk keys of a fused K/V
 * buffer [B, Sk, 2 Hkv D], f32 outputs with a gap.  want: 1 when cuDNN
 * must run the block (a full or causal-diagonal block of a shape it
 * takes), 0 when the kernels of attn_block.cu must (any other block),
 * -1 when either may (a ragged shape cuDNN may refuse: a skip then).
 * The forward's o within 1e-2 of its largest value (attention's: the
 * probabilities meet v as bf16, and o passes through bf16), its lse 1e-5;
 * the backward, from the CPU's lse and delta into random f32
 * accumulators, must add what the CPU adds within 2e-2 of the largest
 * gradient (attention's), so an overwrite instead of += fails.
 */
static void test_block(const char *what, int B, int Sq, int Sk, int Hq,
                       int Hkv, int D, gl_attn_pos qpos, gl_attn_pos kpos,
                       gl_attn_mask mask, int want)
{
    int Wq = Hq * D + 8, Wkv = 2 * Hkv * D, Wo = Hq * D + 4;
    long rq = (long)B * Sq, rk = (long)B * Sk;
    size_t nq = (size_t)rq * Wq, nkv = (size_t)rk * Wkv;
    size_t no = (size_t)rq * Wo, nl = (size_t)B * Hq * Sq;
    size_t ndk = (size_t)rk * Hkv * D;
    float scale = 1.0f / sqrtf((float)D);
    char name[240];
    float *q = rand_bf(nq, -1, 1), *kv = rand_bf(nkv, -1, 1);
    float *dout = rand_bf(nq, -1, 1);
    for (size_t i = 0; i < nq; i++)              /* sharper softmax */
        q[i] = round_bf(q[i] * 4);
    void *gq = g_act(q, nq), *gkv = g_act(kv, nkv), *gdo = g_act(dout, nq);
    uint16_t *gk = gkv, *gv = gk + Hkv * D;
    float *go = g_f32(NULL, no), *glse = g_f32(NULL, nl);
    g_poison(go, no * 4);
    g_poison(glse, nl * 4);

    /* ---- forward ---- */
    gl_attn_counts c0 = counts();
    G->ops->attn_block_fwd(G, go, Wo, glse, gq, Wq, gk, Wkv, gv, Wkv, B, Sq,
                           Sk, Hq, Hkv, D, scale, &qpos, &kpos, mask, NULL);
    G->ops->sync(G);
    int ran = blk_ran(&c0, 0, 1) == 1;
    if (want == 0)
        ok(!ran && blk_ran(&c0, 0, 0) == 1, "attn_block_fwd %s runs the "
           "kernels of attn_block.cu", what);
    else if (want < 0 && !ran)
        skip(1, "cuDNN built no block forward plan for this shape");
    else
        ok(ran, "attn_block_fwd %s runs through cuDNN", what);
    const char *who = ran ? "cuDNN" : "native";

    float *cq = c_buf(q, nq), *ckv = c_buf(kv, nkv), *cdo = c_buf(dout, nq);
    float *ck = ckv, *cv = ckv + Hkv * D;
    float *co = c_buf(NULL, no), *clse = c_buf(NULL, nl);
    C->ops->attn_block_fwd(C, co, Wo, clse, cq, Wq, ck, Wkv, cv, Wkv, B, Sq,
                           Sk, Hq, Hkv, D, scale, &qpos, &kpos, mask, NULL);
    float *o = dl_f32(go, no), *lse = dl_f32(glse, nl);
    snprintf(name, sizeof name, "%s attn_block_fwd o   %s vs CPU", who, what);
    cmp2d(name, o, Wo, co, Wo, rq, (long)Hq * D, 0, 1e-2);
    /* rows without keys (-inf) must be so on both sides: compared as 0 */
    float *clse0 = gl_malloc(nl * sizeof *clse0);
    for (size_t i = 0; i < nl; i++) {
        clse0[i] = clse[i];
        if (isinf(lse[i]) && lse[i] < 0 && isinf(clse[i]) && clse[i] < 0)
            lse[i] = clse0[i] = 0;
    }
    snprintf(name, sizeof name, "%s attn_block_fwd lse %s vs CPU", who, what);
    cmp2d(name, lse, 0, clse0, 0, 1, (long)nl, 1e-5, 1e-5);
    free(clse0);

    /* ---- backward from the CPU's lse and delta (of o as act) ---- */
    float *co_bf = gl_malloc(no * sizeof *co_bf);
    for (size_t i = 0; i < no; i++)
        co_bf[i] = round_bf(co[i]);
    float *cdelta = c_buf(NULL, nl);
    C->ops->attn_delta(C, cdelta, cdo, Wq, co_bf, Wo, B, Sq, Hq, D);
    float *dq0 = rand_bf(no, -0.5f, 0.5f), *dk0 = rand_bf(ndk, -0.5f, 0.5f);
    float *dv0 = rand_bf(ndk, -0.5f, 0.5f);
    float *gdq = g_f32(dq0, no), *gdk = g_f32(dk0, ndk), *gdv = g_f32(dv0, ndk);
    float *glse2 = g_f32(clse, nl), *gdelta = g_f32(cdelta, nl);
    float *cdq = c_buf(dq0, no), *cdk = c_buf(dk0, ndk), *cdv = c_buf(dv0, ndk);
    c0 = counts();
    G->ops->attn_block_bwd(G, gdq, Wo, gdk, gdv, Hkv * D, gdo, Wq, glse2,
                           gdelta, gq, Wq, gk, Wkv, gv, Wkv, B, Sq, Sk, Hq,
                           Hkv, D, scale, &qpos, &kpos, mask, NULL);
    G->ops->sync(G);
    ran = blk_ran(&c0, 1, 1) == 1;
    if (want == 0)
        ok(!ran && blk_ran(&c0, 1, 0) == 1, "attn_block_bwd %s runs the "
           "kernels of attn_block.cu", what);
    else if (want < 0 && !ran)
        skip(1, "cuDNN built no block backward plan for this shape");
    else
        ok(ran, "attn_block_bwd %s runs through cuDNN", what);
    who = ran ? "cuDNN" : "native";
    C->ops->attn_block_bwd(C, cdq, Wo, cdk, cdv, Hkv * D, cdo, Wq, clse,
                           cdelta, cq, Wq, ck, Wkv, cv, Wkv, B, Sq, Sk, Hq,
                           Hkv, D, scale, &qpos, &kpos, mask, NULL);
    float *dq = dl_f32(gdq, no), *dk = dl_f32(gdk, ndk), *dv = dl_f32(gdv, ndk);
    long HD = (long)Hq * D, KD = (long)Hkv * D;
    float *a_dq = added(dq, Wo, dq0, Wo, rq, HD);
    float *w_dq = added(cdq, Wo, dq0, Wo, rq, HD);
    float *a_dk = added(dk, KD, dk0, KD, rk, KD);
    float *w_dk = added(cdk, KD, dk0, KD, rk, KD);
    float *a_dv = added(dv, KD, dv0, KD, rk, KD);
    float *w_dv = added(cdv, KD, dv0, KD, rk, KD);
    snprintf(name, sizeof name, "%s attn_block_bwd dq += %s vs CPU", who, what);
    cmp2d(name, a_dq, HD, w_dq, HD, rq, HD, 0, 2e-2);
    snprintf(name, sizeof name, "%s attn_block_bwd dk += %s vs CPU", who, what);
    cmp2d(name, a_dk, KD, w_dk, KD, rk, KD, 0, 2e-2);
    snprintf(name, sizeof name, "%s attn_block_bwd dv += %s vs CPU", who, what);
    cmp2d(name, a_dv, KD, w_dv, KD, rk, KD, 0, 2e-2);

    void *gb[] = {gq, gkv, gdo, go, glse, gdq, gdk, gdv, glse2, gdelta};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++)
        G->ops->free(G, gb[i]);
    float *cb[] = {cq, ckv, cdo, co, clse, cdelta, cdq, cdk, cdv};
    for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++)
        C->ops->free(C, cb[i]);
    float *hb[] = {q, kv, dout, o, lse, co_bf, dq0, dk0, dv0, dq, dk, dv,
                   a_dq, w_dq, a_dk, w_dk, a_dv, w_dv};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++)
        free(hb[i]);
}

/* The blocks of one head shape: Megatron's CP layout (2 CP chunks of c
 * tokens, rank r holding chunks r and 2 CP - 1 - r) at CP = 2, so that
 * rank r's own block is the causal diagonal in two runs, and the ring's
 * other blocks, cut into parts (gl_attn_block_split): rank 1's queries
 * against rank 0's keys (all queries, the first key chunk), rank 0's
 * against rank 1's (the second query chunk against every key, the first
 * against none), and the same at CP = 4 (parts of c rows that start
 * inside the block); one-run causal diagonals; full blocks (a full mask
 * with Sq != Sk, and a causal one whose keys all precede the queries);
 * a causal block with no keys (one empty part, cuDNN's side writes it);
 * with ragged set, ragged sizes cuDNN may refuse (two more plans each
 * way); and a block that must stay on the kernels, keys partly after
 * the queries off the diagonal. */
static void test_blocks(int B, int c, int Hq, int Hkv, int D, int ragged)
{
    char what[200];
    int CP = 2;
    for (int r = 0; r < CP; r++) {
        gl_attn_pos p = { .split = c, .start = { (long)r * c,
                                                 (long)(2 * CP - 1 - r) * c } };
        snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d CP 2 rank %d's "
                 "diagonal (causal, 2 x %d rows)", B, Hq, Hkv, D, r, c);
        test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, p, p, GL_ATTN_CAUSAL, 1);
    }
    gl_attn_pos q1 = { .split = 2 * c, .start = { 3 * c, 0 } };
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d one run at %d "
             "(causal diagonal)", B, Hq, Hkv, D, 3 * c);
    test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, q1, q1, GL_ATTN_CAUSAL, 1);
    gl_attn_pos k2 = { .split = 0, .start = { 0, 0 } };        /* run 1 only */
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d full",
             B, Hq, Hkv, D, 2 * c, 4 * c);
    test_block(what, B, 2 * c, 4 * c, Hq, Hkv, D, q1, k2, GL_ATTN_FULL, 1);
    k2.start[1] = c;                          /* keys [c, 3c) <= queries */
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d causal, "
             "every key at or before every query (full)", B, Hq, Hkv, D, 2 * c,
             2 * c);
    test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, q1, k2, GL_ATTN_CAUSAL, 1);
    gl_attn_pos qr = { .split = c + 3, .start = { 0, 0 } };
    gl_attn_pos kr = { .split = c - 5, .start = { 1000, 0 } };
    if (ragged) {
        snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=Sk=%d causal "
                 "diagonal (ragged)", B, Hq, Hkv, D, c + 3);
        test_block(what, B, c + 3, c + 3, Hq, Hkv, D, qr, qr, GL_ATTN_CAUSAL, -1);
        snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d full "
                 "(ragged)", B, Hq, Hkv, D, c + 3, c - 5);
        test_block(what, B, c + 3, c - 5, Hq, Hkv, D, qr, kr, GL_ATTN_FULL, -1);
    }

    gl_attn_pos p0 = { .split = c, .start = { 0, (long)3 * c } };
    gl_attn_pos p1 = { .split = c, .start = { c, (long)2 * c } };
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d CP 2 rank 1's queries "
             "against rank 0's keys (one part)", B, Hq, Hkv, D);
    test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, p1, p0, GL_ATTN_CAUSAL, 1);
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d CP 2 rank 0's queries "
             "against rank 1's keys (two parts, one empty)", B, Hq, Hkv, D);
    test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, p0, p1, GL_ATTN_CAUSAL, 1);
    for (int r = 1; r < 4; r += 2) {
        int s = 4 - r;                            /* ranks 1 and 3 of CP 4 */
        gl_attn_pos qp = { .split = c, .start = { (long)r * c, (long)(7 - r) * c } };
        gl_attn_pos kp = { .split = c, .start = { (long)s * c, (long)(7 - s) * c } };
        snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d CP 4 rank %d's "
                 "queries against rank %d's keys (parts)", B, Hq, Hkv, D, r, s);
        test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, qp, kp, GL_ATTN_CAUSAL, 1);
    }
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d causal, "
             "every key after every query (empty)", B, Hq, Hkv, D, c + 3, c - 5);
    test_block(what, B, c + 3, c - 5, Hq, Hkv, D, qr, kr, GL_ATTN_CAUSAL, 1);
    gl_attn_pos qm = { .split = 2 * c, .start = { 0, 0 } };
    gl_attn_pos km = { .split = 2 * c, .start = { c, 0 } };
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d keys at %d.. against "
             "queries at 0.. (no cut)", B, Hq, Hkv, D, c);
    test_block(what, B, 2 * c, 2 * c, Hq, Hkv, D, qm, km, GL_ATTN_CAUSAL, 0);
}

/* ---- the profiler ---- */

static void test_profile(void)
{
    setenv("GRIDLM_PROFILE", "1", 1);
    gl_dev *P = gl_dev_open_cuda(0);
    unsetenv("GRIDLM_PROFILE");
    int B = 1, S = 256, Hq = 4, Hkv = 2, D = 64, W = (Hq + 2 * Hkv) * D;
    void *qkv = P->ops->alloc(P, (size_t)S * W * 2);
    void *o = P->ops->alloc(P, (size_t)S * Hq * D * 2);
    float *lse = P->ops->alloc(P, (size_t)Hq * S * 4);
    uint16_t *q = qkv, *k = q + Hq * D, *v = k + Hkv * D;
    for (int i = 0; i < 3; i++)
        P->ops->attn_fwd(P, o, Hq * D, lse, q, W, k, W, v, W, B, S, Hq, Hkv, D,
                         0.125f, NULL);
    for (int i = 0; i < 2; i++)
        P->ops->gemm(P, 0, 1, S, S, Hq * D, 1, o, Hq * D, o, Hq * D, 0, qkv,
                     GL_DT_BF16, S);
    long calls = -1;
    double ms = -1;
    gl_cuda_profile_get(P, "attn_fwd", &calls, &ms);
    ok(calls == 0, "profile: nothing is read before a sync (%ld calls)", calls);
    P->ops->sync(P);
    int got = gl_cuda_profile_get(P, "attn_fwd", &calls, &ms);
    ok(got && calls == 3 && ms > 0, "profile: attn_fwd timed 3 times after sync "
       "(%ld calls, %.3f ms)", calls, ms);
    got = gl_cuda_profile_get(P, "gemm", &calls, &ms);
    ok(got && calls == 2 && ms > 0, "profile: gemm timed twice (%ld calls, %.3f ms)",
       calls, ms);
    ok(!gl_cuda_profile_get(P, "swiglu_fwd", &calls, &ms) && calls == 0,
       "profile: an op never called has no entry");
    ok(!gl_cuda_profile_get(G, "attn_fwd", &calls, &ms),
       "profile: a device opened without GRIDLM_PROFILE is not profiled");
    P->ops->free(P, qkv);
    P->ops->free(P, o);
    P->ops->free(P, lse);
    diag("the profiled device prints its table at close:");
    gl_dev_close(P);
    ok(1, "profile: the profiled device closes");
}

/* ---- timings (GL_ATTN_CUDNN_BENCH=1) ---- */

static void bench(int B, int S, int Hq, int Hkv, int D)
{
    int W = (Hq + 2 * Hkv) * D, OD = Hq * D;
    size_t nqkv = (size_t)B * S * W, no = (size_t)B * S * OD;
    float *h = rand_bf(nqkv, -1, 1);
    void *qkv = g_act(h, nqkv), *dqkv = G->ops->alloc(G, nqkv * 2);
    void *o = G->ops->alloc(G, no * 2), *dout = g_act(h, no);
    float *lse = G->ops->alloc(G, (size_t)B * Hq * S * 4);
    uint16_t *q = qkv, *k = q + OD, *v = k + Hkv * D;
    uint16_t *dq = dqkv, *dk = dq + OD, *dv = dk + Hkv * D;
    float sc = 1.0f / sqrtf((float)D);
    double flop = 4.0 * B * Hq * (double)S * S * D / 2;      /* causal */
    int reps = 20;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaStream_t st = (cudaStream_t)G->stream;
    for (int impl = GL_ATTN_CUDNN; impl <= GL_ATTN_NATIVE; impl++) {
        gl_cuda_attn_impl(G, impl);
        float fms = 0, bms = 0;
        G->ops->attn_fwd(G, o, OD, lse, q, W, k, W, v, W, B, S, Hq, Hkv, D, sc, NULL);
        cudaEventRecord(e0, st);
        for (int i = 0; i < reps; i++)
            G->ops->attn_fwd(G, o, OD, lse, q, W, k, W, v, W, B, S, Hq, Hkv, D, sc, NULL);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&fms, e0, e1);
        G->ops->attn_bwd(G, dq, dk, dv, W, dout, OD, o, OD, lse, q, W, k, W, v,
                         W, B, S, Hq, Hkv, D, sc, NULL);
        cudaEventRecord(e0, st);
        for (int i = 0; i < reps; i++)
            G->ops->attn_bwd(G, dq, dk, dv, W, dout, OD, o, OD, lse, q, W, k, W,
                             v, W, B, S, Hq, Hkv, D, sc, NULL);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&bms, e0, e1);
        double f = fms / reps, b = bms / reps;
        diag("bench %-6s B=%d S=%d Hq=%d Hkv=%d D=%d: fwd %.3f ms %.0f TFLOP/s, "
             "bwd %.3f ms %.0f TFLOP/s, fwd+bwd %.3f ms %.0f TFLOP/s",
             impl == GL_ATTN_CUDNN ? "cudnn" : "native", B, S, Hq, Hkv, D, f,
             flop / f / 1e9, b, 2.5 * flop / b / 1e9, f + b,
             3.5 * flop / (f + b) / 1e9);
    }
    gl_cuda_attn_impl(G, GL_ATTN_AUTO);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    G->ops->free(G, qkv);
    G->ops->free(G, dqkv);
    G->ops->free(G, o);
    G->ops->free(G, dout);
    G->ops->free(G, lse);
    free(h);
}

/* One rank's share of context parallelism's ring at CP = cp (rank r's
 * queries, 2 chunks of c rows, against every rank's K/V in turn, f32
 * outputs as cp.c keeps them): the blocks' forward and backward under
 * each implementation, and the whole-sequence attention of the same
 * 2 c rows for scale. */
static void bench_ring(int B, int c, int Hq, int Hkv, int D, int cp, int r)
{
    int S = 2 * c, W = (Hq + 2 * Hkv) * D, OD = Hq * D, KW = 2 * Hkv * D;
    size_t nqkv = (size_t)B * S * W, no = (size_t)B * S * OD;
    size_t nkv = (size_t)B * S * KW, nl = (size_t)B * Hq * S;
    float *h = rand_bf(nqkv, -1, 1);
    void *qkv = g_act(h, nqkv), *kv = g_act(h, nkv), *dout = g_act(h, no);
    float *o = G->ops->alloc(G, no * 4), *lse = G->ops->alloc(G, nl * 4);
    float *delta = G->ops->alloc(G, nl * 4), *dq = G->ops->alloc(G, no * 4);
    float *dkv = G->ops->alloc(G, (size_t)B * S * KW * 4);
    uint16_t *q = qkv, *k = kv, *v = k + Hkv * D;
    float sc = 1.0f / sqrtf((float)D);
    /* the rank's causal share of the whole sequence's pairs */
    double flop = 4.0 * B * Hq * (double)(2 * cp * c) * (2 * cp * c) * D / 2 / cp;
    int reps = 10;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaStream_t st = (cudaStream_t)G->stream;
    gl_attn_pos qp = { .split = c, .start = { (long)r * c, (long)(2 * cp - 1 - r) * c } };
    G->ops->attn_delta(G, delta, dout, OD, dout, OD, B, S, Hq, D);
    const int impls[] = { GL_ATTN_AUTO, GL_ATTN_NATIVE };
    for (int m = 0; m < 2; m++) {
        int impl = impls[m];
        gl_cuda_attn_impl(G, impl);
        float ms[2];
        for (int bwd = 0; bwd < 2; bwd++) {
            for (int i = -1; i < reps; i++) {
                if (i == 0)
                    cudaEventRecord(e0, st);
                for (int s = 0; s < cp; s++) {
                    gl_attn_pos kp = { .split = c, .start = { (long)s * c,
                                                              (long)(2 * cp - 1 - s) * c } };
                    if (bwd)
                        G->ops->attn_block_bwd(G, dq, OD, dkv, dkv + Hkv * D, KW, dout, OD,
                                               lse, delta, q, W, k, KW, v, KW, B, S, S, Hq,
                                               Hkv, D, sc, &qp, &kp, GL_ATTN_CAUSAL, NULL);
                    else
                        G->ops->attn_block_fwd(G, o, OD, lse, q, W, k, KW, v, KW, B, S, S,
                                               Hq, Hkv, D, sc, &qp, &kp, GL_ATTN_CAUSAL, NULL);
                }
            }
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms[bwd], e0, e1);
            ms[bwd] /= reps;
        }
        diag("bench ring %-6s%s B=%d CP=%d rank %d (2 x %d rows) Hq=%d Hkv=%d D=%d: "
             "blocks fwd %.3f ms %.0f TFLOP/s, bwd %.3f ms %.0f TFLOP/s",
             impl == GL_ATTN_AUTO ? "auto" : "native",
             gl_cuda_deterministic(G, -1) ? " deterministic" : "", B, cp, r, c, Hq, Hkv, D, ms[0],
             flop / ms[0] / 1e9, ms[1], 2.5 * flop / ms[1] / 1e9);
    }
    gl_cuda_attn_impl(G, GL_ATTN_AUTO);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    free_bufs((void *[]){ qkv, kv, dout, o, lse, delta, dq, dkv, NULL },
              (void *[]){ h, NULL });
}

/* The backward's fused gradient buffer after one run of it under the
 * current settings (impl, gl_cuda_deterministic), as raw bf16 bytes;
 * *cudnn: whether cuDNN ran it. */
static uint16_t *bwd_bytes(int impl, void *gd, size_t nqkv, void *gdo,
                           void *go, float *glse, const uint16_t *gq, int W,
                           int B, int S, int Hq, int Hkv, int D, float scale,
                           int *cudnn)
{
    const uint16_t *gk = gq + Hq * D, *gv = gk + Hkv * D;
    uint16_t *gdq = gd, *gdk = gdq + Hq * D, *gdv = gdk + Hkv * D;
    g_poison(gd, nqkv * 2);
    *cudnn = run_bwd(impl, gdq, gdk, gdv, W, gdo, Hq * D, go, Hq * D, glse, gq,
                     gk, gv, B, S, Hq, Hkv, D, scale);
    uint16_t *h = gl_malloc(nqkv * 2);
    G->ops->download(G, h, gd, nqkv * 2);
    return h;
}

/* The backward's time under the device's current determinism, through
 * auto (cuDNN where it takes the call) and through the kernels here. */
static void bench_bwd(const char *shape, void *gd, void *gdo, void *go, float *glse,
                      const uint16_t *gq, int W, int B, int S, int Hq, int Hkv, int D,
                      float scale)
{
    const uint16_t *gk = gq + Hq * D, *gv = gk + Hkv * D;
    uint16_t *gdq = gd, *gdk = gdq + Hq * D, *gdv = gdk + Hkv * D;
    double flop = 2.5 * 4.0 * B * Hq * (double)S * S * D / 2;
    const int impls[] = { GL_ATTN_AUTO, GL_ATTN_NATIVE };
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaStream_t st = (cudaStream_t)G->stream;
    int det = gl_cuda_deterministic(G, -1), reps = 10;
    for (int m = 0; m < 2; m++) {
        int cudnn = run_bwd(impls[m], gdq, gdk, gdv, W, gdo, Hq * D, go, Hq * D, glse,
                            gq, gk, gv, B, S, Hq, Hkv, D, scale);
        cudaEventRecord(e0, st);
        for (int i = 0; i < reps; i++)
            run_bwd(impls[m], gdq, gdk, gdv, W, gdo, Hq * D, go, Hq * D, glse, gq, gk,
                    gv, B, S, Hq, Hkv, D, scale);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        diag("bench bwd %s %s %s: %.3f ms, %.0f TFLOP/s", shape,
             det ? "deterministic" : "usual", cudnn ? "cuDNN" : "kernels here",
             ms / reps, flop / (ms / reps) / 1e9);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* A bf16 buffer of n elements as floats. */
static float *bf_floats(const uint16_t *x, size_t n)
{
    float *f = gl_malloc(n * sizeof *f + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&f[i], &u, 4);
    }
    return f;
}

/*
 * gl_cuda_deterministic (--deterministic-mode): the backward runs cuDNN's
 * deterministic graph (or, where cuDNN builds none, the kernels here), so
 * three runs from the same inputs give the same bytes; cuDNN's must match
 * the kernels' within attention's tolerance (2e-2 of the largest
 * gradient, as test_attn).  cuDNN's usual backward is run twice too;
 * whether its bytes repeat is only reported (at S = 4096 on an H200 they
 * did not: dq's sums over key blocks arrive in varying order).  With
 * bench set, the deterministic backward is timed against the usual one
 * and against the kernels here.  Returns 1 when cuDNN ran the
 * deterministic backward.
 */
static int test_deterministic(int B, int S, int Hq, int Hkv, int D, int bench)
{
    int W = (Hq + 2 * Hkv) * D, OD = Hq * D;
    long rows = (long)B * S;
    size_t nqkv = (size_t)rows * W, no = (size_t)rows * OD, nl = (size_t)B * Hq * S;
    float scale = 1.0f / sqrtf((float)D);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d S=%d Hq=%d Hkv=%d D=%d", B, S, Hq, Hkv, D);
    float *qkv = rand_qkv(rows, W, OD), *dout = rand_bf(no, -1, 1);
    void *gqkv = g_act(qkv, nqkv), *gdo = g_act(dout, no);
    uint16_t *gq = gqkv;
    void *go = G->ops->alloc(G, no * 2), *gd = G->ops->alloc(G, nqkv * 2);
    float *glse = g_f32(NULL, nl);

    ok(gl_cuda_deterministic(G, 1) == 0, "the device starts nondeterministic");
    int fwd_cudnn = run_fwd(GL_ATTN_AUTO, go, OD, glse, gq, gq + OD,
                            gq + OD + Hkv * D, W, B, S, Hq, Hkv, D, scale);
    diag("deterministic attn_fwd %s ran %s", shape,
         fwd_cudnn ? "cuDNN (an engine that declares no nondeterminism)"
                   : "the kernels here");
    int c1, c2, c3, cn;
    uint16_t *r1 = bwd_bytes(GL_ATTN_AUTO, gd, nqkv, gdo, go, glse, gq, W, B, S,
                             Hq, Hkv, D, scale, &c1);
    uint16_t *r2 = bwd_bytes(GL_ATTN_AUTO, gd, nqkv, gdo, go, glse, gq, W, B, S,
                             Hq, Hkv, D, scale, &c2);
    uint16_t *r3 = bwd_bytes(GL_ATTN_AUTO, gd, nqkv, gdo, go, glse, gq, W, B, S,
                             Hq, Hkv, D, scale, &c3);
    ok(c1 == c2 && c2 == c3, "deterministic attn_bwd %s: the three runs took one "
       "path (%s)", shape, c1 ? "cuDNN's deterministic graph" : "the kernels here");
    int det_cudnn = c1;
    ok(!memcmp(r1, r2, nqkv * 2) && !memcmp(r1, r3, nqkv * 2),
       "deterministic attn_bwd %s: three runs, the same bytes", shape);
    uint16_t *rn = bwd_bytes(GL_ATTN_NATIVE, gd, nqkv, gdo, go, glse, gq, W, B,
                             S, Hq, Hkv, D, scale, &cn);
    if (c1) {
        float *a = bf_floats(r1, nqkv), *w = bf_floats(rn, nqkv);
        char name[160];
        snprintf(name, sizeof name, "deterministic cuDNN attn_bwd %s = the kernels' "
                 "(dq, dk, dv)", shape);
        cmp2d(name, a, W, w, W, rows, W, 0, 2e-2);
        free(a), free(w);
    } else {
        ok(!memcmp(r1, rn, nqkv * 2), "deterministic attn_bwd %s: the bytes of "
           "GL_ATTN_NATIVE's", shape);
    }
    if (bench)
        bench_bwd(shape, gd, gdo, go, glse, gq, W, B, S, Hq, Hkv, D, scale);
    ok(gl_cuda_deterministic(G, 0) == 1, "the setting reads back");
    if (bench)
        bench_bwd(shape, gd, gdo, go, glse, gq, W, B, S, Hq, Hkv, D, scale);
    uint16_t *u1 = bwd_bytes(GL_ATTN_AUTO, gd, nqkv, gdo, go, glse, gq, W, B, S,
                             Hq, Hkv, D, scale, &c1);
    uint16_t *u2 = bwd_bytes(GL_ATTN_AUTO, gd, nqkv, gdo, go, glse, gq, W, B, S,
                             Hq, Hkv, D, scale, &c2);
    long differ = 0;
    for (size_t i = 0; i < nqkv; i++)
        differ += u1[i] != u2[i];
    diag("attn_bwd %s without --deterministic-mode (%s): two runs differ in "
         "%ld of %zu gradient elements", shape, c1 && c2 ? "cuDNN" : "the kernels here",
         differ, nqkv);
    free_bufs((void *[]){gqkv, gdo, go, gd, glse, NULL},
              (void *[]){qkv, dout, r1, r2, r3, rn, u1, u2, NULL});
    return det_cudnn;
}

/* test_block (B=2 Hq=8 Hkv=2 D=64, causal) on CP 2's layout with chunks
 * of c rows (rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2): rank
 * 0's queries against rank 1's keys, or (diagonal) against its own. */
static void test_cp2_block(const char *what, int c, int diagonal)
{
    gl_attn_pos p0 = { .split = c, .start = { 0, (long)3 * c } };
    gl_attn_pos p1 = { .split = c, .start = { c, (long)2 * c } };
    test_block(what, 2, 2 * c, 2 * c, 8, 2, 64, p0, diagonal ? p0 : p1,
               GL_ATTN_CAUSAL, 1);
}

/* A deterministic backward whose workspace passes the limit runs in
 * tiles (fewer samples, then whole key-head groups) on cuDNN, or, when
 * not even the smallest tile fits, on the kernels.  The limit comes down
 * through GRIDLM_TEST_DET_WS_MAX so that small shapes, checked against
 * the CPU or the kernels, take both paths; then a real shape past 4 GiB
 * at once (B 2, S 8192, 32 heads: 8 GiB of dS). */
static void test_det_tiles(int quick)
{
    setenv("GRIDLM_TEST_DET_WS_MAX", "3145728", 1);       /* 3 MiB */
    long t0 = counts().det_tiled;
    int ran = test_deterministic(2, 512, 8, 2, 64, 0);     /* 8 MiB of dS at once */
    ok(ran && counts().det_tiled > t0, "a deterministic backward past the workspace "
       "limit ran on cuDNN in tiles (B=2 S=512 Hq=8 Hkv=2 under a 3 MiB limit)");
    /* a part of 128 x 256 rows: 1.3 MB at once, 0.5 MB a tile of one
     * sample and one key head (cuDNN 9.19 on an H200) */
    setenv("GRIDLM_TEST_DET_WS_MAX", "655360", 1);         /* 640 KiB */
    gl_cuda_deterministic(G, 1);
    long b0 = counts().blk_bwd_cudnn;
    t0 = counts().det_tiled;
    test_cp2_block("deterministic in tiles, B=2 Hq=8 Hkv=2 D=64 CP 2 rank 0's queries "
                   "against rank 1's keys", 128, 0);
    ok(counts().blk_bwd_cudnn > b0 && counts().det_tiled > t0, "the block's "
       "deterministic backward ran on cuDNN in tiles under a 640 KiB limit");
    gl_cuda_deterministic(G, 0);
    setenv("GRIDLM_TEST_DET_WS_MAX", "1", 1);              /* nothing fits */
    ok(!test_deterministic(1, 256, 8, 2, 64, 0), "a deterministic backward whose "
       "smallest tile passes the limit runs on the kernels");
    unsetenv("GRIDLM_TEST_DET_WS_MAX");
    if (quick)
        return;
    t0 = counts().det_tiled;
    ran = test_deterministic(2, 8192, 32, 8, 64, 0);
    ok(ran && counts().det_tiled > t0, "B=2 S=8192 Hq=32 Hkv=8 D=64 (8 GiB of dS at "
       "once) ran on cuDNN's deterministic backward in tiles");
}

int main(void)
{
    gl_log_set_program("attn-cudnn.t");
    gpu_seed(0x9E3779B97F4A7C15ull);
    if (gl_cuda_device_count() == 0)
        skip_all("no CUDA device");
    if (gl_cuda_cudnn_version() == 0)
        skip_all("this gridlm was built without cuDNN");
    G = gl_dev_open_cuda(0);
    C = gl_dev_open_cpu();
    plan(NO_PLAN);
    int quick = getenv("GL_ATTN_CUDNN_QUICK") != NULL;
    diag("cuDNN %ld on %s", gl_cuda_cudnn_version(), G->name[0] ? G->name : "GPU 0");
    gl_cuda_attn_impl(G, GL_ATTN_AUTO);

    test_attn(2, 256, 8, 2, 64, 8, 1);             /* GQA 4, S a tile multiple */
    test_attn(1, 256, 4, 4, 128, 4, 1);            /* MHA, D = 128 */
    test_attn(2, 200, 8, 2, 64, 8, 0);             /* ragged S */
    test_attn(2, 130, 6, 3, 128, 6, 0);
    test_attn(1, 77, 4, 1, 64, 4, 0);              /* MQA, odd S */
    test_attn(1, 1, 2, 1, 64, 2, 0);               /* one token */
    if (!quick) {
        test_attn(2, 4096, 32, 8, 64, 4, 1);       /* the 1.5B model's shape */
        test_attn(1, 4096, 32, 8, 128, 4, 1);
    }

    /* context parallelism's blocks: D = 64 and 128, GQA 4 (MHA and MQA
     * share the graphs' grouping with the whole-sequence shapes above) */
    test_blocks(2, 64, 8, 2, 64, 1);
    test_blocks(1, 64, 8, 2, 128, 0);
    /* deterministic: the same blocks through cuDNN's deterministic graph */
    gl_cuda_deterministic(G, 1);
    test_cp2_block("deterministic, B=2 Hq=8 Hkv=2 D=64 CP 2 rank 0's queries against "
                   "rank 1's keys (two parts)", 64, 0);
    test_cp2_block("deterministic, B=2 Hq=8 Hkv=2 D=64 CP 2 rank 0's diagonal", 64, 1);
    gl_cuda_deterministic(G, 0);
    gl_attn_counts c = counts();
    diag("cuDNN plans built %ld, shapes refused %ld; blocks: cuDNN %ld "
         "forward %ld backward, kernels %ld forward %ld backward", c.plans,
         c.refused, c.blk_fwd_cudnn, c.blk_bwd_cudnn, c.blk_fwd_native,
         c.blk_bwd_native);

    test_deterministic(1, quick ? 1024 : 4096, 32, 8, 64,
                       getenv("GL_ATTN_CUDNN_BENCH") != NULL);
    test_det_tiles(quick);

    test_profile();

    if (getenv("GL_ATTN_CUDNN_BENCH")) {
        bench(2, 4096, 32, 8, 64);
        bench(2, 4096, 16, 4, 128);
        bench_ring(1, 2048, 32, 8, 64, 2, 0);     /* the 1.5B shape at 8k, CP 2 */
        bench_ring(1, 2048, 32, 8, 64, 2, 1);
        bench_ring(1, 4096, 32, 8, 64, 4, 0);     /* 32k, CP 4 */
        gl_cuda_deterministic(G, 1);
        bench_ring(1, 2048, 32, 8, 64, 2, 0);
        gl_cuda_deterministic(G, 0);
    }
    gl_dev_close(G);
    gl_dev_close(C);
    return done_testing();
}
