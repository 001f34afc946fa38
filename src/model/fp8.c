/*
 * fp8.c: FP8 products of the decoder layers' linears (--fp8-format,
 * --fp8-recipe; model.h: FP8), on the per-tensor ops of device/ops.h.
 *
 * Every FP8 layer has four linears (QKV, output projection, gate/up,
 * down) and each linear three FP8 tensors: its input X and weight W
 * (E4M3, "forward" tensors) and its output gradient dY (E4M3, or E5M2
 * under hybrid: "backward" tensors).  The tensors are numbered by global
 * layer, so that every pipeline stage uses the same numbers for the same
 * logical tensor (the checkpoint merges them with MAX):
 *     forward tensor  2 (4 layer + lin) + 0 (X) or + 1 (W)
 *     backward tensor    4 layer + lin
 * Each group has an amax history [len, n] (row 0 the current step), and
 * a scale and its inverse [n], on the device.
 *
 * Weights are quantized once per step, into both orientations (W for the
 * forward, W^T for the data gradient), the first time a layer's forward
 * runs after gl_model_fp8_step_end(); activations and gradients at every
 * call.  X is quantized twice: along its rows for the forward product and
 * transposed for the weight gradient in the backward (it is kept in act
 * dtype between the two, as without FP8); both times with the same scale,
 * so into the same bytes.
 *
 * Tensor parallelism: a TP rank holds a slice of W, of the output
 * projection's and the down projection's inputs (o, s) and of the QKV
 * and gate/up output gradients; their amaxes are reduced with MAX over
 * the TP group, so every TP rank uses the scale that TP = 1 would.  The
 * other tensors (the normalised inputs of QKV and gate/up, gathered
 * under SP, and the gradients of the row-parallel outputs) are the same
 * on every TP rank.  Delayed scaling also reduces the step's amaxes over
 * the data-parallel group (an amax of a step covers every micro-batch of
 * the global batch, as on one rank), in gl_model_fp8_step_end().
 */
#include <config.h>

#include <string.h>

#include "base/log.h"
#include "model/model.h"

enum { LIN_QKV = 0, LIN_WO, LIN_GU, LIN_DOWN, NLIN };

struct gl_fp8_state {
    gl_fp8_opts o;
    int L;                      /* layers of the whole model */
    int len;                    /* history rows (1 for tensorwise) */
    gl_fp8_format ffwd, fbwd;   /* formats of the two groups */
    int nf, nb;                 /* tensors per group: 8 L, 4 L */
    float *hist_f, *scale_f, *sinv_f;   /* [len, nf], [nf], [nf] */
    float *hist_b, *scale_b, *sinv_b;   /* [len, nb], [nb], [nb] */
    uint8_t **wq, **wqt;        /* [4 L]: this rank's quantized weights
                                 * (NULL: layer not here or not in FP8) */
    int *fresh;                 /* [4 L]: wq / wqt hold this step's W */
    uint8_t *xq, *xqt, *dyq, *dyqt; /* scratch [n x widest] */
};

static int fwd_x(int layer, int lin) { return 2 * (4 * layer + lin); }
static int fwd_w(int layer, int lin) { return 2 * (4 * layer + lin) + 1; }
static int bwd_dy(int layer, int lin) { return 4 * layer + lin; }

int gl_model_fp8_layer(const gl_model *m, int layer)
{
    return m->fp8 && m->fp8->wq[4 * layer] != NULL;
}

void gl_model_fp8_enable(gl_model *m, const gl_fp8_opts *o)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    gl_dev *d = m->d;
    if (o->format == GL_FP8_OFF)
        return;
    if (o->recipe != GL_FP8_DELAYED && o->recipe != GL_FP8_TENSORWISE)
        gl_die("internal error: FP8 recipe %d is not built", (int)o->recipe);
    gl_fp8_state *st = gl_calloc(1, sizeof *st);
    st->o = *o;
    st->L = dm->L;
    st->len = o->recipe == GL_FP8_DELAYED ? o->amax_history_len : 1;
    st->ffwd = GL_FP8_E4M3;
    st->fbwd = o->format == GL_FP8_FMT_HYBRID ? GL_FP8_E5M2 : GL_FP8_E4M3;
    st->nf = 8 * dm->L;
    st->nb = 4 * dm->L;

    size_t nfl = (size_t)(st->len + 2) * st->nf + (size_t)(st->len + 2) * st->nb;
    float *all = d->ops->alloc(d, nfl * sizeof(float));
    float *host = gl_calloc(nfl, sizeof(float));
    st->hist_f = all;
    st->scale_f = st->hist_f + (size_t)st->len * st->nf;
    st->sinv_f = st->scale_f + st->nf;
    st->hist_b = st->sinv_f + st->nf;
    st->scale_b = st->hist_b + (size_t)st->len * st->nb;
    st->sinv_b = st->scale_b + st->nb;
    /* histories 0, scales and their inverses 1 (Transformer Engine's
     * start) */
    for (size_t i = (size_t)st->len * st->nf; i < (size_t)(st->len + 2) * st->nf; i++)
        host[i] = 1.0f;
    for (size_t i = (size_t)(st->len + 2) * st->nf + (size_t)st->len * st->nb; i < nfl; i++)
        host[i] = 1.0f;
    d->ops->upload(d, all, host, nfl * sizeof(float));
    free(host);

    /* the widest operand: in and out of the four linears */
    int widths[] = {dm->h, dm->qkvw, dm->hq * dm->D, dm->guw, dm->fl};
    int widest = 0;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        widest = widths[i] > widest ? widths[i] : widest;
    size_t scratch = (size_t)dm->n * widest;
    st->xq = d->ops->alloc(d, scratch);
    st->xqt = d->ops->alloc(d, scratch);
    st->dyq = d->ops->alloc(d, scratch);
    st->dyqt = d->ops->alloc(d, scratch);

    st->wq = gl_calloc((size_t)4 * dm->L, sizeof *st->wq);
    st->wqt = gl_calloc((size_t)4 * dm->L, sizeof *st->wqt);
    st->fresh = gl_calloc((size_t)4 * dm->L, sizeof *st->fresh);
    size_t wsize[NLIN];
    wsize[LIN_QKV] = (size_t)dm->qkvw * dm->h;
    wsize[LIN_WO] = (size_t)dm->h * dm->hq * dm->D;
    wsize[LIN_GU] = (size_t)dm->guw * dm->h;
    wsize[LIN_DOWN] = (size_t)dm->h * dm->fl;
    for (int c = 0; c < p->nchunks; c++)
        for (int i = 0; i < dm->Lc; i++) {
            int l = p->chunk[c].first_layer + i;
            if (!gl_fp8_layer_on(o, l, dm->L))
                continue;
            for (int k = 0; k < NLIN; k++) {
                st->wq[4 * l + k] = d->ops->alloc(d, wsize[k]);
                st->wqt[4 * l + k] = d->ops->alloc(d, wsize[k]);
            }
        }
    m->fp8 = st;
}

void gl_model_fp8_free(gl_model *m)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (!st)
        return;
    for (int i = 0; i < 4 * st->L; i++) {
        if (st->wq[i])
            d->ops->free(d, st->wq[i]);
        if (st->wqt[i])
            d->ops->free(d, st->wqt[i]);
    }
    free(st->wq);
    free(st->wqt);
    free(st->fresh);
    d->ops->free(d, st->xq);
    d->ops->free(d, st->xqt);
    d->ops->free(d, st->dyq);
    d->ops->free(d, st->dyqt);
    d->ops->free(d, st->hist_f);
    free(st);
    m->fp8 = NULL;
}

/* Quantize x [rows, cols] (tensor t of a group: hist, scale, sinv, format
 * f) into q and / or qt.  tensorwise: the scale from x's own amax,
 * reduced over TP when x is a TP slice.  delayed: the scale of the step,
 * x's amax folded into the history's row 0 when collect is set. */
static void quant(gl_model *m, float *hist, float *scale, float *sinv, gl_fp8_format f,
                  int t, uint8_t *q, uint8_t *qt, const void *x, int rows, int cols,
                  int sliced, int collect)
{
    const gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (st->o.recipe == GL_FP8_TENSORWISE) {
        d->ops->zero(d, hist + t, sizeof(float));
        d->ops->fp8_amax(d, hist + t, x, (size_t)rows * cols);
        if (sliced && m->tp)
            gl_all_reduce(m->tp, hist + t, hist + t, 1, GL_DT_F32, GL_OP_MAX, d->stream);
        d->ops->fp8_scale_current(d, hist + t, scale + t, sinv + t, 1, f);
        d->ops->fp8_quantize(d, q, qt, NULL, x, rows, cols, scale + t, f);
    } else {
        d->ops->fp8_quantize(d, q, qt, collect ? hist + t : NULL, x, rows, cols, scale + t, f);
    }
}

/* W [out, in] of (layer, lin) into wq and wqt, once per step. */
static void weights(gl_model *m, int layer, int lin, const void *Wt, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    int i = 4 * layer + lin;
    if (st->fresh[i])
        return;
    quant(m, st->hist_f, st->scale_f, st->sinv_f, st->ffwd, fwd_w(layer, lin), st->wq[i],
          st->wqt[i], Wt, out, in, 1, 1);
    st->fresh[i] = 1;
}

/* The row-parallel linears' inputs are TP slices (o, s); the
 * column-parallel ones' inputs are whole (a, mg). */
static int x_sliced(int lin) { return lin == LIN_WO || lin == LIN_DOWN; }
/* The column-parallel linears' output gradients are TP slices. */
static int dy_sliced(int lin) { return lin == LIN_QKV || lin == LIN_GU; }

void gl_model_fp8_fwd(gl_model *m, int layer, int lin, void *Y, const void *X,
                      const void *Wt, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    int xi = fwd_x(layer, lin), wi = fwd_w(layer, lin);
    weights(m, layer, lin, Wt, out, in);
    quant(m, st->hist_f, st->scale_f, st->sinv_f, st->ffwd, xi, st->xq, NULL, X, n, in,
          x_sliced(lin), !m->fp8_eval);
    d->ops->gemm_fp8(d, n, out, in, 1.0f, st->xq, st->ffwd, st->sinv_f + xi,
                     st->wq[4 * layer + lin], st->ffwd, st->sinv_f + wi, 0.0f, Y, d->act, out,
                     1);
}

void gl_model_fp8_bwd(gl_model *m, int layer, int lin, void *dX, float *dW, const void *dY,
                      const void *X, const void *Wt, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    int xi = fwd_x(layer, lin), wi = fwd_w(layer, lin), gi = bwd_dy(layer, lin);
    weights(m, layer, lin, Wt, out, in);
    quant(m, st->hist_b, st->scale_b, st->sinv_b, st->fbwd, gi, st->dyq, st->dyqt, dY, n, out,
          dy_sliced(lin), 1);
    if (dX)     /* dX [n, in] = dY [n, out] W: A = dY, B = W^T [in, out] */
        d->ops->gemm_fp8(d, n, in, out, 1.0f, st->dyq, st->fbwd, st->sinv_b + gi,
                         st->wqt[4 * layer + lin], st->ffwd, st->sinv_f + wi, 0.0f, dX, d->act,
                         in, 0);
    /* dW [out, in] += dY^T X: A = dY^T [out, n], B = X^T [in, n] */
    quant(m, st->hist_f, st->scale_f, st->sinv_f, st->ffwd, xi, NULL, st->xqt, X, n, in,
          x_sliced(lin), 1);
    d->ops->gemm_fp8(d, out, in, n, 1.0f, st->dyqt, st->fbwd, st->sinv_b + gi, st->xqt,
                     st->ffwd, st->sinv_f + xi, 1.0f, dW, GL_DT_F32, in, 0);
}

void gl_model_fp8_step_end(gl_model *m, gl_comm *dp)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (!st)
        return;
    memset(st->fresh, 0, (size_t)4 * st->L * sizeof *st->fresh);
    if (st->o.recipe != GL_FP8_DELAYED)
        return;
    gl_comm *groups[2] = {m->tp, dp};
    for (int g = 0; g < 2; g++) {
        if (!groups[g])
            continue;
        gl_all_reduce(groups[g], st->hist_f, st->hist_f, (size_t)st->nf, GL_DT_F32, GL_OP_MAX,
                      d->stream);
        gl_all_reduce(groups[g], st->hist_b, st->hist_b, (size_t)st->nb, GL_DT_F32, GL_OP_MAX,
                      d->stream);
    }
    gl_fp8_amax_algo algo = st->o.amax_compute_algo == GL_FP8_ALGO_MAX ? GL_FP8_AMAX_MAX
                                                                       : GL_FP8_AMAX_MOST_RECENT;
    d->ops->fp8_scale_delayed(d, st->hist_f, st->scale_f, st->sinv_f, st->nf, st->len, algo,
                              st->o.margin, st->ffwd);
    d->ops->fp8_scale_delayed(d, st->hist_b, st->scale_b, st->sinv_b, st->nb, st->len, algo,
                              st->o.margin, st->fbwd);
}

int gl_model_fp8_state_dims(const gl_model *m, int *len, int *nf, int *nb)
{
    const gl_fp8_state *st = m->fp8;
    if (!st || st->o.recipe != GL_FP8_DELAYED)
        return 0;
    *len = st->len;
    *nf = st->nf;
    *nb = st->nb;
    return 1;
}

/* Whether this rank runs the FP8 layer of forward (group 0) or backward
 * (group 1) tensor t. */
static int held(const gl_fp8_state *st, int group, int t)
{
    int layer = group == 0 ? t / 8 : t / 4;
    return st->wq[4 * layer] != NULL;
}

float *gl_model_fp8_state_get(gl_model *m)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    size_t nfl = (size_t)(st->len + 2) * (st->nf + st->nb);
    float *host = gl_malloc(nfl * sizeof(float));
    d->ops->download(d, host, st->hist_f, nfl * sizeof(float));
    float *p = host;
    for (int g = 0; g < 2; g++) {
        int n = g == 0 ? st->nf : st->nb;
        for (int r = 0; r < st->len + 2; r++, p += n)
            for (int t = 0; t < n; t++)
                if (!held(st, g, t))
                    p[t] = 0.0f;
    }
    return host;
}

void gl_model_fp8_state_set(gl_model *m, const float *host)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    size_t nfl = (size_t)(st->len + 2) * (st->nf + st->nb);
    /* entries of layers held elsewhere arrive as 0: keep scales at 1 */
    float *fix = gl_malloc(nfl * sizeof(float));
    memcpy(fix, host, nfl * sizeof(float));
    float *p = fix;
    for (int g = 0; g < 2; g++) {
        int n = g == 0 ? st->nf : st->nb;
        p += (size_t)st->len * n;
        for (int r = 0; r < 2; r++, p += n)
            for (int t = 0; t < n; t++)
                if (!(p[t] > 0.0f))
                    p[t] = 1.0f;
    }
    d->ops->upload(d, st->hist_f, fix, nfl * sizeof(float));
    free(fix);
}
