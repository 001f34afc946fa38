/*
 * ops-blockattn.c: context parallelism's block attention on the CPU
 * (ops.h: attn_block_fwd, attn_merge, attn_delta, attn_block_bwd,
 * convert_2d).
 *
 * The double kernels (gl_cpu_NAME_f64) are checked against the whole
 * sequence's attn_fwd / attn_bwd: queries and keys cut as Megatron's
 * context parallelism cuts them (2 CP chunks, rank r holding chunks r and
 * 2 CP - 1 - r, two runs of positions each), one block per (query rank,
 * key rank), merged in ring order, must give attn_fwd's output and lse,
 * and the blocks' backwards from the final lse must add up to attn_bwd's
 * gradients.  The ring's gradient, and the block backward alone (on a
 * block with rows that see no key), are checked against central finite
 * differences in double.  Causal,
 * full and empty blocks, head dims 64 and 128, GQA.  Then the CPU
 * device's float ops against the double kernels, and convert_2d with
 * strides past 2^31 elements.  With attention dropout too: blocks keyed
 * by their rows' positions draw the whole sequence's mask (the ring =
 * attn_fwd / attn_bwd with the same gl_attn_dropout), and the block
 * backward with a mask matches finite differences.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/hash.h"
#include "device/ops.h"
#include "device/ops_cpu.h"
#include "ops-test.h"
#include "tap.h"

#define FD_TOL 1e-6      /* finite differences in double */
#define EQ_TOL 1e-12     /* two exact computations in double */
#define F32_TOL 1e-5     /* float ops against the double kernels */

/* The attention problem: fused rows [q (Hq D) | k (Hkv D) | v (Hkv D) |
 * pad] of stride ld, B samples of S tokens. */
typedef struct {
    int B, S, Hq, Hkv, D, ld;
    double scale;
    double *qkv;      /* [B S, ld] */
    double *dout;     /* [B S, Hq D] */
} problem;

static problem make_problem(int B, int S, int Hq, int Hkv, int D)
{
    problem p = { .B = B, .S = S, .Hq = Hq, .Hkv = Hkv, .D = D };
    p.ld = (Hq + 2 * Hkv) * D + 3;
    p.scale = 1 / sqrt((double)D);
    p.qkv = rnd((size_t)B * S * p.ld, 1.5);
    p.dout = rnd((size_t)B * S * Hq * D, 1);
    return p;
}

/* Rows of CP rank r under Megatron's layout: chunks r and 2 CP - 1 - r of
 * S / (2 CP) tokens; their positions as two runs. */
static gl_attn_pos cp_pos(int S, int cp, int r)
{
    int c = S / (2 * cp);
    gl_attn_pos p = { .split = c, .start = { (long)r * c, (long)(2 * cp - 1 - r) * c } };
    return p;
}

/* Gather the rows of positions pos (n rows, width w, stride ld) of each
 * sample of x [B S, ld] into y [B n, w]; scatter is the reverse (+=). */
static long pos_of(const gl_attn_pos *p, int i)
{
    return i < p->split ? p->start[0] + i : p->start[1] + (i - p->split);
}

static void gather(double *y, const double *x, int ld, int B, int S, int n, int w,
                   const gl_attn_pos *p)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            memcpy(y + ((size_t)b * n + i) * w, x + ((size_t)b * S + pos_of(p, i)) * ld,
                   (size_t)w * sizeof *y);
}

static void scatter_add(double *x, int ld, const double *y, int B, int S, int n, int w,
                        const gl_attn_pos *p)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            for (int e = 0; e < w; e++)
                x[((size_t)b * S + pos_of(p, i)) * ld + e] += y[((size_t)b * n + i) * w + e];
}

/* Ring attention of the whole problem at context parallelism cp, in
 * double, with the block kernels: every rank's output, lse and
 * gradients are scattered back to full-sequence order into o [B S, Hq D],
 * lse [B, Hq, S] and g [B S, (Hq + 2 Hkv) D] (dq | dk | dv). */
static void ring(const problem *p, int cp, const gl_attn_dropout *dp, double *o, double *lse,
                 double *g)
{
    int B = p->B, S = p->S, Hq = p->Hq, Hkv = p->Hkv, D = p->D;
    int n = S / cp, qw = Hq * D, kw = Hkv * D, gw = qw + 2 * kw;
    double *q = dzeros((size_t)B * n * qw), *dq = dzeros((size_t)B * n * qw);
    double *kv = dzeros((size_t)B * n * 2 * kw), *dkv = dzeros((size_t)B * n * 2 * kw);
    double *ob = dzeros((size_t)B * n * qw), *lb = dzeros((size_t)B * Hq * n);
    double *orun = dzeros((size_t)B * n * qw), *lrun = dzeros((size_t)B * Hq * n);
    double *dout = dzeros((size_t)B * n * qw), *delta = dzeros((size_t)B * Hq * n);
    double *tmp = dzeros((size_t)B * n * gw);

    memset(g, 0, (size_t)B * S * gw * sizeof *g);
    for (int r = 0; r < cp; r++) {
        gl_attn_pos qp = cp_pos(S, cp, r);
        gather(q, p->qkv, p->ld, B, S, n, qw, &qp);
        gather(dout, p->dout, qw, B, S, n, qw, &qp);
        /* forward: the K/V of rank r, r - 1, ... as they arrive round the
         * ring */
        for (int step = 0; step < cp; step++) {
            int kr = ((r - step) % cp + cp) % cp;
            gl_attn_pos kp = cp_pos(S, cp, kr);
            gather(tmp, p->qkv, p->ld, B, S, n, gw, &kp);
            for (size_t i = 0; i < (size_t)B * n; i++)
                memcpy(kv + i * 2 * kw, tmp + i * gw + qw, (size_t)2 * kw * sizeof *kv);
            gl_cpu_attn_block_fwd_f64(ob, qw, lb, q, qw, kv, 2 * kw, kv + kw, 2 * kw, B, n, n,
                                      Hq, Hkv, D, p->scale, &qp, &kp, GL_ATTN_CAUSAL, dp);
            gl_cpu_attn_merge_f64(orun, lrun, ob, lb, B, n, Hq, D, step == 0);
        }
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n; i++) {
                memcpy(o + ((size_t)b * S + pos_of(&qp, i)) * qw, orun + ((size_t)b * n + i) * qw,
                       (size_t)qw * sizeof *o);
                for (int j = 0; j < Hq; j++)
                    lse[((size_t)b * Hq + j) * S + pos_of(&qp, i)] = lrun[((size_t)b * Hq + j) * n + i];
            }
        /* backward: each K/V block's dk, dv scattered to its owner */
        gl_cpu_attn_delta_f64(delta, dout, qw, orun, qw, B, n, Hq, D);
        memset(dq, 0, (size_t)B * n * qw * sizeof *dq);
        for (int step = 0; step < cp; step++) {
            int kr = ((r - step) % cp + cp) % cp;
            gl_attn_pos kp = cp_pos(S, cp, kr);
            gather(tmp, p->qkv, p->ld, B, S, n, gw, &kp);
            for (size_t i = 0; i < (size_t)B * n; i++)
                memcpy(kv + i * 2 * kw, tmp + i * gw + qw, (size_t)2 * kw * sizeof *kv);
            memset(dkv, 0, (size_t)B * n * 2 * kw * sizeof *dkv);
            gl_cpu_attn_block_bwd_f64(dq, qw, dkv, dkv + kw, 2 * kw, dout, qw, lrun, delta,
                                      q, qw, kv, 2 * kw, kv + kw, 2 * kw, B, n, n, Hq, Hkv, D,
                                      p->scale, &qp, &kp, GL_ATTN_CAUSAL, dp);
            scatter_add(g + qw, gw, dkv, B, S, n, 2 * kw, &kp);
        }
        scatter_add(g, gw, dq, B, S, n, qw, &qp);
    }
    free(q); free(dq); free(kv); free(dkv); free(ob); free(lb);
    free(orun); free(lrun); free(dout); free(delta); free(tmp);
}

/* The whole sequence with attn_fwd / attn_bwd: the reference. */
static void whole(const problem *p, const gl_attn_dropout *dp, double *o, double *lse,
                  double *g)
{
    int qw = p->Hq * p->D, kw = p->Hkv * p->D, gw = qw + 2 * kw;
    const double *q = p->qkv, *k = q + qw, *v = k + kw;
    gl_cpu_attn_fwd_f64(o, qw, lse, q, p->ld, k, p->ld, v, p->ld, p->B, p->S, p->Hq,
                        p->Hkv, p->D, p->scale, dp);
    gl_cpu_attn_bwd_f64(g, g + qw, g + qw + kw, gw, p->dout, qw, o, qw, lse, q, p->ld,
                        k, p->ld, v, p->ld, p->B, p->S, p->Hq, p->Hkv, p->D, p->scale,
                        dp);
}

/* An attention dropout of rate 0.3 for a call of Hq heads over sequences
 * of S, placed inside a larger tensor (from sample 3 and head 1). */
static gl_attn_dropout test_dropout(int Hq, long S)
{
    gl_attn_dropout dp = { .seed = 1234, .iteration = 7, .layer = 3, .site = 2, .p = 0.3f,
                           .b0 = 3, .h0 = 1, .heads = Hq + 2, .seq = S };
    return dp;
}

static void check_ring(int B, int S, int Hq, int Hkv, int D, int cp, int drop)
{
    problem p = make_problem(B, S, Hq, Hkv, D);
    gl_attn_dropout dpv = test_dropout(Hq, S);
    const gl_attn_dropout *dp = drop ? &dpv : NULL;
    const char *with = drop ? ", dropout 0.3" : "";
    size_t no = (size_t)B * S * Hq * D, nl = (size_t)B * Hq * S;
    size_t ng = (size_t)B * S * (Hq + 2 * Hkv) * D;
    double *o = dzeros(no), *l = dzeros(nl), *g = dzeros(ng);
    double *ro = dzeros(no), *rl = dzeros(nl), *rg = dzeros(ng);
    whole(&p, dp, o, l, g);
    ring(&p, cp, dp, ro, rl, rg);
    double eo = relerr(ro, o, no), el = relerr(rl, l, nl), eg = relerr(rg, g, ng);
    ok(eo < EQ_TOL && el < EQ_TOL,
       "D %d, %d/%d heads, S %d, CP %d%s: blocks merged in ring order = attn_fwd (o %.2g, "
       "lse %.2g)", D, Hq, Hkv, S, cp, with, eo, el);
    ok(eg < EQ_TOL, "D %d, %d/%d heads, S %d, CP %d%s: block backwards summed = attn_bwd (%.2g)",
       D, Hq, Hkv, S, cp, with, eg);
    if (drop) {         /* the mask is really there */
        double *uo = dzeros(no), *ul = dzeros(nl), *ug = dzeros(ng);
        whole(&p, NULL, uo, ul, ug);
        ok(relerr(uo, o, no) > 0.1, "D %d, S %d, CP %d: dropout changes attn_fwd's output "
           "(%.2g)", D, S, cp, relerr(uo, o, no));
        free(uo); free(ul); free(ug);
    }
    free(o); free(l); free(g); free(ro); free(rl); free(rg);
    free(p.qkv); free(p.dout);
}

/* ---- the ring's gradient against finite differences --------------------
 *
 * The gradient that the ring's backward gives (each rank's blocks from
 * the final lse, dk and dv taken back to their owners) against central
 * finite differences of the ring's own forward, L = sum dout . o, over
 * every element of the fused q | k | v rows (the padding's gradient is
 * zero).  A check of the ring itself, not through attn_bwd. */

typedef struct {
    const problem *p;
    int cp;
    const gl_attn_dropout *dp;
    double *o, *lse, *g;
} ring_ctx;

static double ring_loss(void *vc)
{
    ring_ctx *c = vc;
    size_t no = (size_t)c->p->B * c->p->S * c->p->Hq * c->p->D;
    ring(c->p, c->cp, c->dp, c->o, c->lse, c->g);
    double s = 0;
    for (size_t i = 0; i < no; i++)
        s += c->p->dout[i] * c->o[i];
    return s;
}

static void check_ring_fd(int B, int S, int Hq, int Hkv, int D, int cp, int drop)
{
    problem p = make_problem(B, S, Hq, Hkv, D);
    gl_attn_dropout dpv = test_dropout(Hq, S);
    int gw = (Hq + 2 * Hkv) * D;
    size_t rows = (size_t)B * S, nx = rows * p.ld;
    ring_ctx c = { &p, cp, drop ? &dpv : NULL, dzeros(rows * Hq * D),
                   dzeros((size_t)B * Hq * S), dzeros(rows * gw) };
    ring_loss(&c);
    double *grad = dzeros(nx);      /* the ring's gradient in the rows' layout */
    for (size_t i = 0; i < rows; i++)
        memcpy(grad + i * p.ld, c.g + i * gw, (size_t)gw * sizeof *grad);
    double e = fd_relerr(ring_loss, &c, p.qkv, nx, grad);
    ok(e < FD_TOL, "the ring's dq, dk, dv at CP %d, D %d, %d/%d heads, S %d%s vs finite "
       "differences of its forward (%.2g)", cp, D, Hq, Hkv, S, drop ? ", dropout 0.3" : "", e);
    free(grad); free(c.o); free(c.lse); free(c.g);
    free(p.qkv); free(p.dout);
}

/* ---- one block against finite differences ---------------------------- */

typedef struct {
    int B, Sq, Sk, Hq, Hkv, D;
    double scale;
    gl_attn_pos qp, kp;
    gl_attn_mask mask;
    double *q, *k, *v, *r;        /* r: the loss weights, L = sum r . o */
    double *o, *lse;
    const gl_attn_dropout *dp;
} block_ctx;

static double block_loss(void *vc)
{
    block_ctx *c = vc;
    size_t no = (size_t)c->B * c->Sq * c->Hq * c->D;
    gl_cpu_attn_block_fwd_f64(c->o, c->Hq * c->D, c->lse, c->q, c->Hq * c->D, c->k,
                              c->Hkv * c->D, c->v, c->Hkv * c->D, c->B, c->Sq, c->Sk,
                              c->Hq, c->Hkv, c->D, c->scale, &c->qp, &c->kp, c->mask,
                              c->dp);
    double s = 0;
    for (size_t i = 0; i < no; i++)
        s += c->r[i] * c->o[i];
    return s;
}

/* Queries at positions 4..7 and 20..23, keys at 6..11 and 0..1 (out of
 * order): causal rows 4 and 5 see keys 0 and 1 only, the later rows more;
 * with qp starting before every key some rows see none.  drop: with
 * attention dropout over a sequence of 24 (q0 >= 0). */
static void check_block_fd(int D, gl_attn_mask mask, long q0, int drop)
{
    gl_attn_dropout dpv = test_dropout(4, 24);
    block_ctx c = { .B = 2, .Sq = 8, .Sk = 8, .Hq = 4, .Hkv = 2, .D = D, .mask = mask,
                    .dp = drop ? &dpv : NULL };
    c.scale = 1 / sqrt((double)D);
    c.qp = (gl_attn_pos){ .split = 4, .start = { q0, 20 } };
    c.kp = (gl_attn_pos){ .split = 6, .start = { 6, 0 } };
    size_t nq = (size_t)c.B * c.Sq * c.Hq * D, nk = (size_t)c.B * c.Sk * c.Hkv * D;
    c.q = rnd(nq, 1.5); c.k = rnd(nk, 1.5); c.v = rnd(nk, 1);
    c.r = rnd(nq, 1);
    c.o = dzeros(nq); c.lse = dzeros((size_t)c.B * c.Hq * c.Sq);
    block_loss(&c);
    int empty_rows = 0;
    for (size_t i = 0; i < (size_t)c.B * c.Hq * c.Sq; i++)
        empty_rows += c.lse[i] == -INFINITY;
    double *delta = dzeros((size_t)c.B * c.Hq * c.Sq);
    double *dq = dzeros(nq), *dk = dzeros(nk), *dv = dzeros(nk);
    gl_cpu_attn_delta_f64(delta, c.r, c.Hq * D, c.o, c.Hq * D, c.B, c.Sq, c.Hq, D);
    gl_cpu_attn_block_bwd_f64(dq, c.Hq * D, dk, dv, c.Hkv * D, c.r, c.Hq * D, c.lse, delta,
                              c.q, c.Hq * D, c.k, c.Hkv * D, c.v, c.Hkv * D, c.B, c.Sq,
                              c.Sk, c.Hq, c.Hkv, D, c.scale, &c.qp, &c.kp, mask, c.dp);
    const char *m = mask == GL_ATTN_CAUSAL ? "causal" : "full";
    double eq = fd_relerr(block_loss, &c, c.q, nq, dq);
    double ek = fd_relerr(block_loss, &c, c.k, nk, dk);
    double ev = fd_relerr(block_loss, &c, c.v, nk, dv);
    ok(eq < FD_TOL && ek < FD_TOL && ev < FD_TOL,
       "attn_block_bwd f64, %s%s, D %d, queries from %ld (%d rows without keys): dq %.2g, "
       "dk %.2g, dv %.2g vs finite differences", m, drop ? ", dropout 0.3" : "", D, q0,
       empty_rows, eq, ek, ev);
    free(c.q); free(c.k); free(c.v); free(c.r); free(c.o); free(c.lse);
    free(delta); free(dq); free(dk); free(dv);
}

/* ---- causal, full and empty blocks ------------------------------------ */

static void check_masks(void)
{
    int B = 1, S = 6, Hq = 2, Hkv = 1, D = 64;
    size_t nq = (size_t)B * S * Hq * D, nk = (size_t)B * S * Hkv * D, nl = (size_t)B * Hq * S;
    double *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1);
    double *o1 = dzeros(nq), *l1 = dzeros(nl), *o2 = dzeros(nq), *l2 = dzeros(nl);
    double scale = 0.125;
    gl_attn_pos qp = { .split = S, .start = { 100, 0 } };
    gl_attn_pos before = { .split = S, .start = { 10, 0 } };    /* all keys earlier */
    gl_attn_pos after = { .split = 3, .start = { 200, 300 } };  /* all keys later */

    /* keys all before the queries: causal = full */
    gl_cpu_attn_block_fwd_f64(o1, Hq * D, l1, q, Hq * D, k, Hkv * D, v, Hkv * D, B, S, S,
                              Hq, Hkv, D, scale, &qp, &before, GL_ATTN_CAUSAL, NULL);
    gl_cpu_attn_block_fwd_f64(o2, Hq * D, l2, q, Hq * D, k, Hkv * D, v, Hkv * D, B, S, S,
                              Hq, Hkv, D, scale, &qp, &before, GL_ATTN_FULL, NULL);
    ok(relerr(o1, o2, nq) == 0 && relerr(l1, l2, nl) == 0,
       "a causal block whose keys all precede its queries is a full block");

    /* keys all after the queries: causal is empty (o 0, lse -inf), full
     * is not */
    gl_cpu_attn_block_fwd_f64(o1, Hq * D, l1, q, Hq * D, k, Hkv * D, v, Hkv * D, B, S, S,
                              Hq, Hkv, D, scale, &qp, &after, GL_ATTN_CAUSAL, NULL);
    int empty = 1;
    for (size_t i = 0; i < nq; i++)
        empty &= o1[i] == 0;
    for (size_t i = 0; i < nl; i++)
        empty &= l1[i] == -INFINITY;
    ok(empty, "a causal block whose keys all follow its queries: o = 0, lse = -inf");
    gl_cpu_attn_block_fwd_f64(o2, Hq * D, l2, q, Hq * D, k, Hkv * D, v, Hkv * D, B, S, S,
                              Hq, Hkv, D, scale, &qp, &after, GL_ATTN_FULL, NULL);
    int finite = 1;
    for (size_t i = 0; i < nl; i++)
        finite &= isfinite(l2[i]);
    ok(finite, "the same keys in a full block are all attended");

    /* merging an empty block changes nothing; merging into an empty
     * running pair takes the block; two empties stay empty, no NaN */
    double *mo = malloc(nq * sizeof *mo), *ml = malloc(nl * sizeof *ml);
    memcpy(mo, o2, nq * sizeof *mo);
    memcpy(ml, l2, nl * sizeof *ml);
    gl_cpu_attn_merge_f64(mo, ml, o1, l1, B, S, Hq, D, 0);
    ok(relerr(mo, o2, nq) == 0 && relerr(ml, l2, nl) == 0, "merging an empty block changes nothing");
    memcpy(mo, o1, nq * sizeof *mo);
    memcpy(ml, l1, nl * sizeof *ml);
    gl_cpu_attn_merge_f64(mo, ml, o2, l2, B, S, Hq, D, 0);
    ok(relerr(mo, o2, nq) == 0 && relerr(ml, l2, nl) == 0,
       "merging a block into an empty running pair takes the block");
    gl_cpu_attn_merge_f64(o1, l1, o1, l1, B, S, Hq, D, 0);
    int clean = 1;
    for (size_t i = 0; i < nq; i++)
        clean &= o1[i] == 0;
    for (size_t i = 0; i < nl; i++)
        clean &= l1[i] == -INFINITY;
    ok(clean, "two empty blocks merge to o = 0, lse = -inf (no NaN)");

    /* the backward of an empty block adds nothing */
    double *dq = dzeros(nq), *dk = dzeros(nk), *dv = dzeros(nk), *delta = dzeros(nl);
    double *dout = rnd(nq, 1);
    gl_cpu_attn_block_bwd_f64(dq, Hq * D, dk, dv, Hkv * D, dout, Hq * D, l2, delta, q, Hq * D,
                              k, Hkv * D, v, Hkv * D, B, S, S, Hq, Hkv, D, scale, &qp, &after,
                              GL_ATTN_CAUSAL, NULL);
    int zero = 1;
    for (size_t i = 0; i < nq; i++)
        zero &= dq[i] == 0;
    for (size_t i = 0; i < nk; i++)
        zero &= dk[i] == 0 && dv[i] == 0;
    ok(zero, "the backward of an empty causal block adds nothing");
    free(q); free(k); free(v); free(o1); free(l1); free(o2); free(l2); free(mo); free(ml);
    free(dq); free(dk); free(dv); free(delta); free(dout);
}

/* ---- cutting blocks into parts (gl_attn_block_split) ---------------- */

/* 1 when parts[0 .. n) cover the block exactly: every query row in one
 * part, and key u in query i's part (causal parts: by row index) iff the
 * mask allows the pair by position. */
static int parts_exact(const gl_attn_part *part, int n, const gl_attn_pos *qp, int Sq,
                       const gl_attn_pos *kp, int Sk, gl_attn_mask mask)
{
    if (n < 1 || n > GL_ATTN_PARTS)
        return 0;
    for (int i = 0; i < Sq; i++) {
        const gl_attn_part *t = NULL;
        for (int j = 0; j < n; j++)
            if (i >= part[j].q0 && i < part[j].q0 + part[j].nq) {
                if (t)
                    return 0;             /* in two parts */
                t = &part[j];
            }
        if (!t || t->k0 < 0 || t->nk < 0 || t->k0 + t->nk > Sk)
            return 0;
        for (int u = 0; u < Sk; u++) {
            int want = mask == GL_ATTN_FULL || pos_of(kp, u) <= pos_of(qp, i);
            int in = u >= t->k0 && u < t->k0 + t->nk &&
                     (!t->causal || u - t->k0 <= i - t->q0);
            if (want != in)
                return 0;
        }
    }
    return 1;
}

/* Every block of Megatron's ring at CP 1 to 8 (chunks of c tokens) is cut,
 * exactly, into one or two parts; random runs are either cut exactly or
 * refused, and the refusals include the pairs that are partly allowed. */
static void check_split(void)
{
    gl_attn_part part[GL_ATTN_PARTS];
    int bad = 0, cases = 0, two = 0;
    for (int cp = 1; cp <= 8; cp++)
        for (int c = 1; c <= 5; c += 2)
            for (int r = 0; r < cp; r++)
                for (int s = 0; s < cp; s++) {
                    int S = 2 * cp * c;
                    gl_attn_pos qp = cp_pos(S, cp, r), kp = cp_pos(S, cp, s);
                    int n = gl_attn_block_split(&qp, 2 * c, &kp, 2 * c, GL_ATTN_CAUSAL, part);
                    bad += !parts_exact(part, n, &qp, 2 * c, &kp, 2 * c, GL_ATTN_CAUSAL);
                    two += n == 2;
                    cases++;
                }
    ok(bad == 0, "the %d blocks of Megatron's ring at CP 1-8 are cut exactly (%d bad, "
       "%d in two parts)", cases, bad, two);

    int cut = 0, refused = 0, wrong = 0;
    for (int it = 0; it < 20000; it++) {
        int Sq = 1 + (int)((rnd1() + 1) * 4), Sk = 1 + (int)((rnd1() + 1) * 4);
        gl_attn_pos qp = { .split = (int)((rnd1() + 1) / 2 * (Sq + 1)),
                           .start = { (long)((rnd1() + 1) * 6), (long)((rnd1() + 1) * 6) } };
        gl_attn_pos kp = { .split = (int)((rnd1() + 1) / 2 * (Sk + 1)),
                           .start = { (long)((rnd1() + 1) * 6), (long)((rnd1() + 1) * 6) } };
        gl_attn_mask mask = it % 4 ? GL_ATTN_CAUSAL : GL_ATTN_FULL;
        int n = gl_attn_block_split(&qp, Sq, &kp, Sk, mask, part);
        if (n == 0) {
            refused++;
            wrong += mask == GL_ATTN_FULL;
        } else {
            cut++;
            wrong += !parts_exact(part, n, &qp, Sq, &kp, Sk, mask);
        }
    }
    ok(wrong == 0 && cut > 1000 && refused > 100, "random blocks: %d cut exactly, %d refused, "
       "%d wrong", cut, refused, wrong);

    /* the refusals that must be: a key run partly before one query run
     * (not the diagonal), and a query run that would need a full and a
     * diagonal piece at once */
    gl_attn_pos q1 = { .split = 4, .start = { 0, 0 } }, k1 = { .split = 4, .start = { 2, 0 } };
    ok(gl_attn_block_split(&q1, 4, &k1, 4, GL_ATTN_CAUSAL, part) == 0,
       "keys at 2..5 against queries at 0..3: no cut");
    gl_attn_pos q2 = { .split = 2, .start = { 4, 0 } }, k2 = { .split = 2, .start = { 0, 4 } };
    ok(gl_attn_block_split(&q2, 4, &k2, 4, GL_ATTN_CAUSAL, part) == 0,
       "queries at 4..7 against keys at 0..1 and 4..5: no cut (full and diagonal)");
    gl_attn_pos bad_split = { .split = 5, .start = { 0, 0 } };
    ok(gl_attn_block_split(&bad_split, 4, &k1, 4, GL_ATTN_CAUSAL, part) == 0 &&
       gl_attn_block_split(&q1, 0, &k1, 4, GL_ATTN_FULL, part) == 0,
       "a split past the rows, or no rows: no cut");

    /* the ring's three kinds at CP 2, chunks of 3: the own diagonal is one
     * causal part; rank 1 against rank 0's K/V, all queries against the
     * first chunk; rank 0 against rank 1's, the second query chunk
     * against every key and the first against none */
    gl_attn_pos r0 = cp_pos(12, 2, 0), r1 = cp_pos(12, 2, 1);
    int n = gl_attn_block_split(&r0, 6, &r0, 6, GL_ATTN_CAUSAL, part);
    ok(n == 1 && part[0].q0 == 0 && part[0].nq == 6 && part[0].nk == 6 && part[0].causal,
       "CP 2 rank 0's own block: one causal part of 6 x 6");
    n = gl_attn_block_split(&r1, 6, &r0, 6, GL_ATTN_CAUSAL, part);
    ok(n == 1 && part[0].q0 == 0 && part[0].nq == 6 && part[0].k0 == 0 && part[0].nk == 3 &&
       !part[0].causal, "CP 2 rank 1 against rank 0's K/V: every query, keys 0..2, full");
    n = gl_attn_block_split(&r0, 6, &r1, 6, GL_ATTN_CAUSAL, part);
    ok(n == 2 && part[0].q0 == 0 && part[0].nq == 3 && part[0].nk == 0 && part[1].q0 == 3 &&
       part[1].nq == 3 && part[1].k0 == 0 && part[1].nk == 6 && !part[1].causal,
       "CP 2 rank 0 against rank 1's K/V: queries 0..2 see nothing, 3..5 every key");
}

/* ---- the CPU device's float ops against the double kernels ------------ */

static float *to_f(const double *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = (float)x[i];
    return y;
}

static double *to_d(const float *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

/* convert_2d with strides past 2^31 elements (ops.h's limits): two rows
 * 2^31 + 64 floats apart in an 8 GiB view (mapped without reserving it:
 * only the two rows' pages are touched) copied out to a contiguous
 * block, then other values copied back in from one.  Skipped where the
 * view cannot be mapped. */
static void convert_2d_wide(gl_dev *d)
{
    enum { rows = 2, cols = 100 };
    const long ld = (1L << 31) + 64;
    size_t bytes = ((size_t)(rows - 1) * ld + cols) * sizeof(float);
    float *wide = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (wide == MAP_FAILED) {
        skip(2, "convert_2d past 2^31 elements: cannot map an 8 GiB view");
        return;
    }
    float blk[rows * cols];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            wide[r * ld + c] = (float)(r * 1000 + c);
    d->ops->convert_2d(d, blk, GL_DT_F32, cols, wide, GL_DT_F32, ld, rows, cols);
    int right = 1;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            right &= blk[r * cols + c] == (float)(r * 1000 + c);
    ok(right, "device convert_2d reads rows %ld elements apart", ld);

    for (int i = 0; i < rows * cols; i++)
        blk[i] = -blk[i];
    d->ops->convert_2d(d, wide, GL_DT_F32, ld, blk, GL_DT_F32, cols, rows, cols);
    right = 1;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            right &= wide[r * ld + c] == -(float)(r * 1000 + c);
    ok(right, "device convert_2d writes rows %ld elements apart", ld);
    munmap(wide, bytes);
}

static void check_device(int drop)
{
    gl_dev *d = gl_dev_open_cpu();
    gl_attn_dropout dpv = test_dropout(4, 12);
    const gl_attn_dropout *dp = drop ? &dpv : NULL;
    const char *with = drop ? " with dropout" : "";
    const gl_ops *ops = d->ops;
    int B = 2, Sq = 6, Sk = 6, Hq = 4, Hkv = 2, D = 64, qw = Hq * D, kw = Hkv * D;
    size_t nq = (size_t)B * Sq * qw, nk = (size_t)B * Sk * kw, nl = (size_t)B * Hq * Sq;
    gl_attn_pos qp = { .split = 3, .start = { 3, 9 } }, kp = { .split = 3, .start = { 0, 9 } };
    float scale = 0.125f;
    /* inputs rounded to float, so that both sides see the same values */
    double *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *dout = rnd(nq, 1);
    float *fq = to_f(q, nq), *fk = to_f(k, nk), *fv = to_f(v, nk), *fdo = to_f(dout, nq);
    double *rq = to_d(fq, nq), *rk = to_d(fk, nk), *rv = to_d(fv, nk), *rdo = to_d(fdo, nq);

    double *o = dzeros(nq), *l = dzeros(nl), *delta = dzeros(nl);
    double *dq = dzeros(nq), *dk = dzeros(nk), *dv = dzeros(nk);
    gl_cpu_attn_block_fwd_f64(o, qw, l, rq, qw, rk, kw, rv, kw, B, Sq, Sk, Hq, Hkv, D, scale,
                              &qp, &kp, GL_ATTN_CAUSAL, dp);
    gl_cpu_attn_delta_f64(delta, rdo, qw, o, qw, B, Sq, Hq, D);
    gl_cpu_attn_block_bwd_f64(dq, qw, dk, dv, kw, rdo, qw, l, delta, rq, qw, rk, kw, rv, kw,
                              B, Sq, Sk, Hq, Hkv, D, scale, &qp, &kp, GL_ATTN_CAUSAL, dp);

    float *fo = calloc(nq, sizeof *fo), *fl = calloc(nl, sizeof *fl);
    float *fdelta = calloc(nl, sizeof *fdelta);
    float *fdq = calloc(nq, sizeof *fdq), *fdk = calloc(nk, sizeof *fdk);
    float *fdv = calloc(nk, sizeof *fdv);
    ops->attn_block_fwd(d, fo, qw, fl, fq, qw, fk, kw, fv, kw, B, Sq, Sk, Hq, Hkv, D, scale,
                        &qp, &kp, GL_ATTN_CAUSAL, dp);
    ops->attn_delta(d, fdelta, fdo, qw, fo, qw, B, Sq, Hq, D);
    ops->attn_block_bwd(d, fdq, qw, fdk, fdv, kw, fdo, qw, fl, fdelta, fq, qw, fk, kw, fv, kw,
                        B, Sq, Sk, Hq, Hkv, D, scale, &qp, &kp, GL_ATTN_CAUSAL, dp);
    double *go = to_d(fo, nq), *gl = to_d(fl, nl), *gdq = to_d(fdq, nq);
    double *gdk = to_d(fdk, nk), *gdv = to_d(fdv, nk);
    ok(relerr(go, o, nq) < F32_TOL && relerr(gl, l, nl) < F32_TOL,
       "device attn_block_fwd (float)%s = the double kernel", with);
    ok(relerr(gdq, dq, nq) < F32_TOL && relerr(gdk, dk, nk) < F32_TOL &&
       relerr(gdv, dv, nk) < F32_TOL,
       "device attn_delta + attn_block_bwd (float)%s = the double kernels", with);

    /* merge: the float op against the double kernel on the same pair */
    float *fo2 = to_f(o, nq), *fl2 = to_f(l, nl);
    double *mo = to_d(fo2, nq), *ml = to_d(fl2, nl);
    double *bo = rnd(nq, 1), *bl = rnd(nl, 2);
    float *fbo = to_f(bo, nq), *fbl = to_f(bl, nl);
    double *rbo = to_d(fbo, nq), *rbl = to_d(fbl, nl);
    gl_cpu_attn_merge_f64(mo, ml, rbo, rbl, B, Sq, Hq, D, 0);
    ops->attn_merge(d, fo2, fl2, fbo, fbl, B, Sq, Hq, D, 0);
    double *gmo = to_d(fo2, nq), *gml = to_d(fl2, nl);
    ok(relerr(gmo, mo, nq) < F32_TOL && relerr(gml, ml, nl) < F32_TOL,
       "device attn_merge (float) = the double kernel");

    /* convert_2d: a strided block copy */
    float src[4 * 7], dst[3 * 5];
    for (int i = 0; i < 4 * 7; i++)
        src[i] = (float)i;
    for (int i = 0; i < 3 * 5; i++)
        dst[i] = -1;
    ops->convert_2d(d, dst, GL_DT_F32, 5, src + 2, GL_DT_F32, 7, 3, 4);
    int right = 1;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++)
            right &= dst[r * 5 + c] == (c < 4 ? (float)(r * 7 + 2 + c) : -1.0f);
    ok(right, "device convert_2d copies rows x cols between strides, nothing more");
    if (!drop)                  /* the wide copy once: it owes nothing to dp */
        convert_2d_wide(d);

    free(q); free(k); free(v); free(dout); free(fq); free(fk); free(fv); free(fdo);
    free(rq); free(rk); free(rv); free(rdo); free(o); free(l); free(delta);
    free(dq); free(dk); free(dv); free(fo); free(fl); free(fdelta); free(fdq); free(fdk);
    free(fdv); free(go); free(gl); free(gdq); free(gdk); free(gdv); free(fo2); free(fl2);
    free(mo); free(ml); free(bo); free(bl); free(fbo); free(fbl); free(rbo); free(rbl);
    free(gmo); free(gml);
    gl_dev_close(d);
}

int main(void)
{
    plan(NO_PLAN);
    /* Megatron's layout at CP 2 and 4, head dims 64 and 128, GQA and not */
    check_ring(2, 8, 4, 2, 64, 2, 0);
    check_ring(1, 16, 4, 2, 64, 4, 0);
    check_ring(2, 8, 2, 2, 128, 2, 0);
    check_ring(1, 24, 4, 1, 128, 4, 0);
    check_ring(1, 4, 2, 1, 64, 2, 0);   /* chunks of one token */
    /* with attention dropout keyed by positions */
    check_ring(2, 8, 4, 2, 64, 2, 1);
    check_ring(1, 16, 4, 2, 64, 4, 1);
    check_ring(2, 24, 4, 1, 128, 4, 1);
    /* the ring's gradient by finite differences: chunks of one token at
     * CP 4, GQA; chunks of two at CP 2 with dropout */
    check_ring_fd(1, 8, 4, 2, 8, 4, 0);
    check_ring_fd(1, 8, 2, 1, 8, 2, 1);
    /* the block backward alone, causal (some rows see no key) and full */
    check_block_fd(8, GL_ATTN_CAUSAL, 4, 0);
    check_block_fd(8, GL_ATTN_CAUSAL, -3, 0);
    check_block_fd(8, GL_ATTN_FULL, 4, 0);
    check_block_fd(64, GL_ATTN_CAUSAL, 4, 0);
    check_block_fd(8, GL_ATTN_CAUSAL, 4, 1);
    check_block_fd(8, GL_ATTN_FULL, 4, 1);
    check_masks();
    check_split();
    check_device(0);
    check_device(1);
    return done_testing();
}
