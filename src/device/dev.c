/*
 * dev.c: opening and closing compute devices.  The CPU device is always
 * here; the CUDA entry points live in cuda/ when this build has CUDA and
 * are answered below ("none") when it does not.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "device/ops_cpu.h"

gl_dev *gl_dev_open_cpu(void)
{
    gl_dev *d = gl_calloc(1, sizeof *d);
    d->ops = &gl_ops_cpu;
    d->act = GL_DT_F32;
    d->act_bytes = sizeof(float);     /* gl_dtype_size(GL_DT_F32) */
    d->comm = GL_COMM_MPI;            /* host memory: MPI reaches it */
    d->stream = NULL;
    d->index = -1;
    snprintf(d->name, sizeof d->name, "cpu");
    d->impl = gl_calloc(1, sizeof(gl_cpu_state));
    return d;
}

void gl_dropout_check(const gl_dropout *dp, int n, int w, const char *what)
{
    if (!dp)
        gl_die("%s: no dropout parameters (NULL)", what);
    if (!(dp->p >= 0 && dp->p < 1))
        gl_die("%s: dropout probability %g is not in [0, 1)", what,
               (double)dp->p);
    if (dp->site >= 16 || dp->layer >= (1u << 28))
        gl_die("%s: dropout site %u of layer %u is out of range (sites < 16, "
               "layers < 2^28)", what, dp->site, dp->layer);
    if (n < 0 || w < 0 || dp->row0 < 0 || dp->col0 < 0 ||
        dp->col0 + w > dp->width)
        gl_die("%s: a [%d, %d] piece at row %ld, column %ld does not fit in "
               "rows of width %ld", what, n, w, dp->row0, dp->col0,
               dp->width);
}

void gl_attn_dropout_check(const gl_attn_dropout *dp, int Hq, const char *what)
{
    if (!(dp->p >= 0 && dp->p < 1))
        gl_die("%s: attention dropout probability %g is not in [0, 1)", what,
               (double)dp->p);
    if (dp->site >= 16 || dp->layer >= (1u << 28))
        gl_die("%s: dropout site %u of layer %u is out of range (sites < 16, "
               "layers < 2^28)", what, dp->site, dp->layer);
    if (Hq < 0 || dp->b0 < 0 || dp->h0 < 0 || dp->h0 + Hq > dp->heads)
        gl_die("%s: heads %ld .. %ld (from sample %ld) are not among %ld heads",
               what, dp->h0, dp->h0 + Hq - 1, dp->b0, dp->heads);
}

/* The last position of a block's runs (n rows), -1 without rows. */
static long last_pos(const gl_attn_pos *p, int n)
{
    if (n <= 0)
        return -1;
    long a = p->split > 0 ? p->start[0] + p->split - 1 : -1;
    long b = p->split < n ? p->start[1] + (n - p->split) - 1 : -1;
    return a > b ? a : b;
}

void gl_attn_block_dropout_check(const gl_attn_dropout *dp, int Hq,
                                 const gl_attn_pos *qpos, int Sq,
                                 const gl_attn_pos *kpos, int Sk, const char *what)
{
    gl_attn_dropout_check(dp, Hq, what);
    long lq = last_pos(qpos, Sq), lk = last_pos(kpos, Sk);
    if ((qpos->split > 0 && qpos->start[0] < 0) ||
        (qpos->split < Sq && qpos->start[1] < 0) ||
        (kpos->split > 0 && kpos->start[0] < 0) ||
        (kpos->split < Sk && kpos->start[1] < 0) || lq >= dp->seq || lk >= dp->seq)
        gl_die("%s: query positions up to %ld and key positions up to %ld do not lie "
               "in the dropout's sequence of %ld", what, lq, lk, dp->seq);
}

/* ---- cutting a block into parts (gl_attn_block_split) ---- */

/* A run of a block: rows [row, row + n) at positions [pos, pos + n). */
typedef struct {
    int row, n;
    long pos;
} run;

/* The block's non-empty runs, in row order; returns how many. */
static int runs_of(const gl_attn_pos *p, int n, run r[2])
{
    int k = 0;
    if (p->split > 0)
        r[k++] = (run){ 0, p->split, p->start[0] };
    if (p->split < n)
        r[k++] = (run){ p->split, n - p->split, p->start[1] };
    return k;
}

/* Which pairs of query run q and key run k a causal mask allows:
 * 'a' all, '0' none, 'd' the diagonal (same first position: key j for
 * query i iff j <= i), 'x' some other share. */
static char pair_kind(run q, run k)
{
    if (k.pos + k.n - 1 <= q.pos)
        return 'a';
    if (k.pos > q.pos + q.n - 1)
        return '0';
    return k.pos == q.pos ? 'd' : 'x';
}

/* The part of query run q against every key run kr[0 .. nk); 0 when its
 * keys are no single part. */
static int run_part(run q, const run *kr, int nk, int Sk, gl_attn_part *out)
{
    char kind[2];
    int seen = 0, which = -1;
    for (int j = 0; j < nk; j++) {
        kind[j] = pair_kind(q, kr[j]);
        if (kind[j] == 'x')
            return 0;
        if (kind[j] != '0') {
            seen++;
            which = j;
        }
    }
    *out = (gl_attn_part){ q.row, q.n, 0, 0, 0 };
    if (seen == 0)
        return 1;                       /* no keys at all */
    if (seen == 1) {
        out->k0 = kr[which].row;
        out->nk = kr[which].n;
        out->causal = kind[which] == 'd';
        return 1;
    }
    if (kind[0] != 'a' || kind[1] != 'a')
        return 0;                       /* two pieces of different kinds */
    out->nk = Sk;                       /* both runs: the rows [0, Sk) */
    return 1;
}

int gl_attn_block_split(const gl_attn_pos *qpos, int Sq, const gl_attn_pos *kpos,
                        int Sk, gl_attn_mask mask, gl_attn_part part[GL_ATTN_PARTS])
{
    if (Sq <= 0 || Sk <= 0 || qpos->split < 0 || qpos->split > Sq ||
        kpos->split < 0 || kpos->split > Sk)
        return 0;
    if (mask == GL_ATTN_FULL) {
        part[0] = (gl_attn_part){ 0, Sq, 0, Sk, 0 };
        return 1;
    }
    if (mask != GL_ATTN_CAUSAL)
        return 0;
    /* The whole block as one diagonal: the same strictly increasing
     * positions on both sides, so position order is row order. */
    if (Sq == Sk && qpos->split == kpos->split &&
        (qpos->split == 0 || qpos->start[0] == kpos->start[0]) &&
        (qpos->split == Sq || qpos->start[1] == kpos->start[1]) &&
        (qpos->split == 0 || qpos->split == Sq ||
         qpos->start[1] >= qpos->start[0] + qpos->split)) {
        part[0] = (gl_attn_part){ 0, Sq, 0, Sk, 1 };
        return 1;
    }
    run qr[2], kr[2];
    int nq = runs_of(qpos, Sq, qr), nk = runs_of(kpos, Sk, kr), n = 0;
    for (int i = 0; i < nq; i++) {
        gl_attn_part p;
        if (!run_part(qr[i], kr, nk, Sk, &p))
            return 0;
        gl_attn_part *last = n ? &part[n - 1] : NULL;
        if (last && !last->causal && !p.causal && last->k0 == p.k0 &&
            last->nk == p.nk)
            last->nq += p.nq;           /* the runs share their keys */
        else
            part[n++] = p;
    }
    return n;
}

/* Megatron's get_capacity(n k, E, factor): ceil((n k / E) factor) in
 * double, as Python computes it. */
int gl_moe_capacity(int n, int k, int E, double factor)
{
    if (n < 0 || k < 1 || E < 1 || !(factor > 0))
        gl_die("expert capacity of %d tokens, top-%d of %d experts, factor "
               "%g: the sizes must be positive", n, k, E, factor);
    double c = ceil((double)n * k / E * factor);
    if (c > INT32_MAX)
        gl_die("expert capacity %.0f (%d tokens, top-%d of %d experts, "
               "factor %g) does not fit in 32 bits", c, n, k, E, factor);
    return (int)c;
}

int gl_moe_rows_max(int n, const gl_moe_route_cfg *cfg)
{
    long all = (long)n * cfg->k;
    if (cfg->capacity > 0) {
        long c = cfg->capacity < n ? cfg->capacity : n;
        long cap = (long)cfg->E * c;
        all = cfg->pad ? cap : (cap < all ? cap : all);
    }
    if (all > INT32_MAX)
        gl_die("%d tokens routed to %d of %d experts make %ld rows, more "
               "than 32-bit indices hold; shorten the micro-batch",
               n, cfg->k, cfg->E, all);
    return (int)all;
}

void gl_moe_route_check(const gl_moe_route_cfg *cfg, const char *what)
{
    if (!cfg)
        gl_die("%s: no routing options (NULL)", what);
    if (cfg->E < 1 || cfg->k < 1 || cfg->k > cfg->E)
        gl_die("%s: top-%d of %d experts; --moe-router-topk must be between "
               "1 and --num-experts", what, cfg->k, cfg->E);
    if (cfg->score != GL_MOE_SOFTMAX && cfg->score != GL_MOE_SIGMOID)
        gl_die("%s: unknown score function %d", what, (int)cfg->score);
    if (cfg->drop != GL_MOE_DROP_PROBS && cfg->drop != GL_MOE_DROP_POSITION)
        gl_die("%s: unknown token drop policy %d", what, (int)cfg->drop);
    if (cfg->capacity < 0)
        gl_die("%s: negative expert capacity %d", what, cfg->capacity);
}

void gl_dev_close(gl_dev *d)
{
    if (d)
        d->ops->close(d);
}

#ifndef GL_HAVE_CUDA
gl_dev *gl_dev_open_cuda(int ordinal)
{
    (void)ordinal;
    return NULL;
}

int gl_cuda_device_count(void)
{
    return 0;
}
#endif
