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
 * a table of scales on the device: one record of REC = 4 floats per
 * tensor, {scale_inv, scale, -, -}, so that every scale_inv is 16-byte
 * aligned and goes to cuBLASLt as it is (gemm_fp8 on CUDA copies an
 * unaligned one to an aligned place first: one launch per product saved).
 * A checkpoint sees the packed arrays of model.h (state_get / state_set
 * convert).
 *
 * Weights are quantized once per step, into both orientations (W for the
 * forward, W^T for the data gradient), the four of a layer together
 * (gl_model_fp8_weights(): under tensorwise scaling and TP one 16-byte
 * all-reduce of their amaxes and one scale launch, not four of each), the
 * first time the layer's forward runs after gl_model_fp8_step_end();
 * activations and gradients at every call.  X is quantized once, in the forward, into both orientations in
 * one pass: its rows into scratch for the forward product, its transpose
 * into the layer's activations (A->xt) for the weight gradient, as
 * Transformer Engine keeps it: n x in bytes per linear and micro-batch,
 * and the backward's second pass over X (and, under selective
 * recomputation, the rebuilding of X) is gone.  Under delayed scaling
 * the scale of X is the step's; under tensorwise scaling it is this
 * micro-batch's own, kept with A->xt in A->xrec (another micro-batch's
 * forward may run before this one's backward).
 *
 * Under delayed scaling the kernels that make some of these operands
 * write them quantized themselves (model.h: gl_model_fp8_fused; layer.c
 * says which): gl_model_fp8_x_out() and gl_model_fp8_dy_out() give them
 * the places, scales and amaxes that quant() would use, and
 * gl_model_fp8_fwd_made() / gl_model_fp8_bwd_made() run the products.
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
 *
 * Blockwise scaling (device/fp8.h: "Block scaling") has no scale records
 * and no amaxes: every operand carries its own block factors.  X and dY
 * are quantized in 1 x 128 tiles, each orientation from the bf16 values
 * (the rows for the forward and data-gradient products, the transposes,
 * tiled along the tokens, for the weight gradient); W in 128 x 128
 * blocks, shared by W and W^T.  Nothing is reduced: a tile lies inside
 * one rank's slice, and when the slices are whole tiles (run_config.c
 * checks it under TP) a TP rank's tiles are the tiles that TP = 1 makes
 * of the same values, as Transformer Engine says of this recipe.  The
 * one exception is --fp8-param-gather, whose shards cut blocks: there the
 * blocks' amaxes are reduced over the data-parallel group
 * (gl_model_fp8_shard_scales).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/layer.h"
#include "model/model.h"
#include "model/moe.h"

enum { LIN_QKV = 0, LIN_WO, LIN_GU, LIN_DOWN, NLIN };
enum { MLIN_FC1 = 0, MLIN_FC2 = 1 };     /* an expert's two linears */

static void w_shape(const gl_model_dims *dm, int lin, int *out, int *in);

/* A scale record: {scale_inv, scale, amax (A->xrec only), -}. */
enum { REC = 4, R_SINV = 0, R_SCALE = 1, R_AMAX = 2 };

/* One lane's scratch for an expert's products (moe_scratch): each lane
 * runs its experts' products beside the others', so none is shared. */
struct escratch {
    void *out;                  /* act [erows, widest]: an expert's padded
                                 * product */
    uint8_t *q, *qt;            /* [erows x widest]: its FP8 operands */
    /* blockwise only: an expert's padded operand (act [erows, widest]),
     * the 1D factors of q and qt (the larger of the two orientations of
     * [erows, widest]), and one expert's fc1 weight gradient [guw, in]
     * (f32) */
    void *pad;
    float *qs, *qts, *wg;
};

struct gl_fp8_state {
    gl_fp8_opts o;
    int L;                      /* layers of the whole model */
    int len;                    /* history rows (1 for tensorwise) */
    gl_fp8_format ffwd, fbwd;   /* formats of the two groups */
    int nf, nb;                 /* tensors per group: 8 L, 4 L */
    float *rec_f, *rec_b;       /* [nf, REC], [nb, REC]: scale tables */
    float *hist_f, *hist_b;     /* [len, nf], [len, nb] */
    uint8_t **wq, **wqt;        /* [4 L]: this rank's quantized weights
                                 * (NULL: layer not here or not in FP8) */
    int *fresh;                 /* [L]: wq / wqt hold this step's W */
    float *wamax;               /* [L, 4]: tensorwise, the W amaxes */
    gl_fp8_wrange *wr;          /* [nwr]: this rank's FP8 weights in the
                                 * flat buffer, by offset */
    int nwr;
    struct wpiece *wp;          /* [nwr]: where wr[i]'s bytes go */
    struct wtensor *wt;         /* [nwt]: the FP8 weights they make up */
    int nwt;
    int *wcount, *wleft;        /* [2 L]: of layer l's dense (2 l) and
                                 * experts' (2 l + 1) tensors here, all,
                                 * and those not whole since the step's end */
    float *wtamax;              /* [nwt]: tensorwise, their amaxes */
    float *wbamax;              /* [nwb]: blockwise, their blocks' amaxes
                                 * (wt[k].boff on), NULL otherwise */
    size_t nwb;
    uint8_t *xq, *dyq, *dyqt;   /* scratch [n x widest] */
    /* blockwise only (NULL otherwise): the block factors of wq / wqt, and
     * of the scratch operands xq, dyq (1D, [n, widest]) and dyqt ([widest,
     * n]) */
    float **wsv, **wsvt;
    float *xsv, *dysv, *dytsv;
    void **kept;                /* [nkept]: the allocations behind A->xt */
    int nkept;
    /* MoE layers' experts (the end of this file; E 0 in a dense model) */
    int E;                      /* experts per MoE layer (global) */
    uint8_t **ewq, **ewqt;      /* [L]: the local experts' quantized fc1
                                 * and fc2 weights, both orientations
                                 * (NULL: not an FP8 MoE layer here) */
    int *efresh;                /* [L]: ewq / ewqt hold this step's W */
    int erows;                  /* rows of each lane's padded scratch
                                 * (0: none allocated yet) */
    int nes;                    /* lanes whose scratch es[] holds */
    struct escratch es[GL_LANES_MAX];
    /* blockwise only: the experts' weights' block factors ([L], laid out
     * as ewq / ewqt) */
    float **ewsv, **ewsvt;
    void *ewcat;                /* act [2 fel, h]: one expert's gate and up */
};

/* --fp8-param-gather: an FP8 weight W [out, in] of this rank (a dense
 * layer's linear, or one routed expert's fc1 or fc2), made whole in q and
 * qt from the pieces of its flat ranges. */
struct wtensor {
    uint8_t *q, *qt;
    int out, in;
    int layer, expert;          /* expert: a routed expert's weight */
    int t;                      /* its forward scale record */
    float *sv, *svt;            /* blockwise: the block factors of q, qt */
    size_t boff;                /* blockwise: its blocks in st->wbamax */
    size_t placed;              /* elements placed since the step's end */
};

/* Where flat range wr[i] goes: tensor `tensor`'s q from element `at`; its
 * source rows are `in` wide. */
struct wpiece {
    int tensor;
    size_t at;
    int in;
};

static int fwd_x(int layer, int lin) { return 2 * (4 * layer + lin); }
static int moe_layer(const gl_model *m, int layer)
{
    return gl_arch_is_moe_layer(&m->plan->arch, layer);
}

/* Whether the experts are split over TP (ETP = TP > 1): their weights are
 * TP slices.  Whole on each rank otherwise (ETP 1, or TP 1), where a TP
 * peer holds other experts and nothing of them is reduced over TP. */
static int experts_split(const gl_model *m) { return m->tp && m->plan->dm.etp > 1; }

static int fwd_w(int layer, int lin) { return 2 * (4 * layer + lin) + 1; }
static int bwd_dy(int layer, int lin) { return 4 * layer + lin; }

static void moe_alloc(gl_model *m, gl_fp8_state *st);
static void moe_free(gl_model *m, gl_fp8_state *st);
static int mfwd_w(const gl_fp8_state *st, int layer, int e, int j);
static void mshape(const gl_model_dims *dm, int j, int *out, int *in);
static uint8_t *mw(const gl_fp8_state *st, const gl_model_dims *dm, int layer, int j, int le,
                   int transposed);
static float *msv(const gl_fp8_state *st, const gl_model_dims *dm, int layer, int j, int le,
                  int transposed);

/* Tensor t's record in a scale table. */
static float *rec(float *table, int t) { return table + (size_t)REC * t; }

/* Give back a device buffer made here, if it was (NULL: nothing). */
static void free_dev(gl_dev *d, void *p)
{
    if (p)
        d->ops->free(d, p);
}

int gl_model_fp8_layer(const gl_model *m, int layer)
{
    return m->fp8 && m->fp8->wq[4 * layer] != NULL;
}

/* The inputs' widths of the four linears. */
static void x_widths(const gl_model_dims *dm, int in[NLIN])
{
    in[LIN_QKV] = dm->h;
    in[LIN_WO] = dm->hq * dm->D;
    in[LIN_GU] = dm->h;
    in[LIN_DOWN] = dm->fl;
}

/* A->xt and A->xrec for every FP8 layer's activations.  Activations that
 * recomputation shares between slots (model.c) share these too: acts
 * with the same xm are the same buffers. */
static void keep_buffers(gl_model *m, gl_fp8_state *st)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    gl_dev *d = m->d;
    int in[NLIN];
    x_widths(dm, in);
    /* xt[0..3], xrec, then (blockwise) xts[0..3]: each 256-byte aligned */
    int blk = st->o.recipe == GL_FP8_BLOCKWISE;
    size_t off[2 * NLIN + 1], at = 0;
    for (int k = 0; k < 2 * NLIN + 1; k++) {
        size_t bytes = k < NLIN ? (size_t)dm->n * in[k]
                     : k == NLIN ? REC * NLIN * sizeof(float)
                     : blk ? gl_fp8_tile_count(in[k - NLIN - 1], dm->n, 0) * sizeof(float)
                     : 0;
        off[k] = at;
        at += (bytes + 255) / 256 * 256;
    }
    int total = 0;
    for (int c = 0; c < p->nchunks; c++)
        total += m->nslots[c] * dm->Lc;
    st->kept = gl_calloc((size_t)total, sizeof *st->kept);
    gl_layer_acts **done = gl_calloc((size_t)total, sizeof *done);
    int ndone = 0;
    for (int c = 0; c < p->nchunks; c++)
        for (int s = 0; s < m->nslots[c]; s++)
            for (int i = 0; i < dm->Lc; i++) {
                gl_layer_acts *A = &m->slot[c][s].layer[i];
                if (!gl_fp8_layer_on(&st->o, p->chunk[c].first_layer + i, dm->L))
                    continue;
                int j = 0;
                while (j < ndone && done[j]->xm != A->xm)
                    j++;
                if (j < ndone) {            /* shared: the same buffers */
                    memcpy(A->xt, done[j]->xt, sizeof A->xt);
                    memcpy(A->xts, done[j]->xts, sizeof A->xts);
                    A->xrec = done[j]->xrec;
                    continue;
                }
                char *b = d->ops->alloc(d, at);
                st->kept[st->nkept++] = b;
                for (int k = 0; k < NLIN; k++) {
                    A->xt[k] = (uint8_t *)b + off[k];
                    A->xts[k] = blk ? (float *)(b + off[NLIN + 1 + k]) : NULL;
                }
                A->xrec = (float *)(b + off[NLIN]);
                float one[REC * NLIN] = {0};
                for (int k = 0; k < NLIN; k++)
                    one[REC * k + R_SINV] = one[REC * k + R_SCALE] = 1.0f;
                d->ops->upload(d, A->xrec, one, sizeof one);
                done[ndone++] = A;
            }
    free(done);
}

/* A flat range of an FP8 weight with where its bytes go, while the
 * ranges are collected and sorted. */
struct wrange_at {
    gl_fp8_wrange r;
    struct wpiece p;
};

static int by_begin(const void *a, const void *b)
{
    const struct wrange_at *x = a, *y = b;
    return x->r.begin < y->r.begin ? -1 : x->r.begin > y->r.begin;
}

/* Tensor k of st->wt: W [out, in] into q and qt, forward record t. */
static int add_tensor(gl_fp8_state *st, uint8_t *q, uint8_t *qt, int out, int in, int layer,
                      int expert, int t)
{
    st->wt[st->nwt] = (struct wtensor){ .q = q, .qt = qt, .out = out, .in = in,
                                        .layer = layer, .expert = expert, .t = t };
    return st->nwt++;
}

/* Blockwise: tensor k's block factors sv, svt, and its blocks' place in
 * st->wbamax. */
static void add_blocks(gl_fp8_state *st, int k, float *sv, float *svt)
{
    struct wtensor *w = &st->wt[k];
    w->sv = sv;
    w->svt = svt;
    w->boff = st->nwb;
    st->nwb += gl_fp8_tile_count(w->out, w->in, 1);
}

/* Range [begin, begin + count) of the flat buffer into tensor k from its
 * element at, the source rows in wide; lin as gl_fp8_wrange's. */
static void add_range(struct wrange_at *ra, int *n, size_t begin, size_t count, int layer,
                      int lin, int k, size_t at, int in)
{
    ra[(*n)++] = (struct wrange_at){ .r = { begin, begin + count, layer, lin },
                                     .p = { k, at, in } };
}

/* Nothing of the FP8 weights placed yet (--fp8-param-gather): at the
 * start, and at each step's end. */
static void gather_reset(gl_fp8_state *st)
{
    for (int k = 0; k < st->nwt; k++)
        st->wt[k].placed = 0;
    memcpy(st->wleft, st->wcount, (size_t)2 * st->L * sizeof *st->wleft);
}

/* st->wr, st->wp and st->wt: this rank's FP8 weights, their flat ranges
 * in flat order and where each goes -- the dense linears' W [out, in],
 * and each local routed expert's fc1 [w_gate; w_up] (two ranges: its rows
 * of the stacked w_gate and of the stacked w_up) and fc2 w_down. */
static void weight_ranges(gl_model *m, gl_fp8_state *st)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    size_t most = (size_t)dm->L * (NLIN + 3 * (size_t)dm->El) + 1;
    struct wrange_at *ra = gl_calloc(most, sizeof *ra);
    int n = 0;
    st->wt = gl_calloc(most, sizeof *st->wt);
    for (int c = 0; c < p->nchunks; c++)
        for (int i = 0; i < dm->Lc; i++) {
            int l = p->chunk[c].first_layer + i;
            const gl_layer_offs *lo = &p->chunk[c].layer[i];
            size_t at[NLIN] = {lo->qkv, lo->wo, lo->gate_up, lo->down};
            for (int k = 0; k < NLIN; k++) {
                int out, in, w = 4 * l + k;
                if (!st->wq[w])
                    continue;
                w_shape(dm, k, &out, &in);
                int t = add_tensor(st, st->wq[w], st->wqt[w], out, in, l, 0, fwd_w(l, k));
                if (st->wsv)
                    add_blocks(st, t, st->wsv[w], st->wsvt[w]);
                add_range(ra, &n, at[k], (size_t)out * in, l, k, t, 0, in);
            }
            if (!st->ewq[l])
                continue;
            size_t piece = (size_t)dm->fel * dm->h;     /* one expert's w_gate, w_up, w_down */
            for (int le = 0; le < dm->El; le++) {
                for (int j = 0; j < 2; j++) {
                    int out, in;
                    mshape(dm, j, &out, &in);
                    int t = add_tensor(st, mw(st, dm, l, j, le, 0), mw(st, dm, l, j, le, 1), out,
                                       in, l, 1, mfwd_w(st, l, dm->e0 + le, j));
                    if (st->ewsv)
                        add_blocks(st, t, msv(st, dm, l, j, le, 0), msv(st, dm, l, j, le, 1));
                    if (j == MLIN_FC2) {
                        add_range(ra, &n, lo->edown + le * piece, piece, l, LIN_DOWN, t, 0,
                                  dm->fel);
                        continue;
                    }
                    if (dm->swiglu)
                        add_range(ra, &n, lo->egu + le * piece, piece, l, LIN_GU, t, 0, dm->h);
                    add_range(ra, &n, gl_moe_up_off(m, lo) + le * piece, piece, l, LIN_GU, t,
                              dm->swiglu ? piece : 0, dm->h);
                }
            }
        }
    qsort(ra, (size_t)n, sizeof *ra, by_begin);
    st->wr = gl_calloc((size_t)n + 1, sizeof *st->wr);
    st->wp = gl_calloc((size_t)n + 1, sizeof *st->wp);
    for (int i = 0; i < n; i++) {
        st->wr[i] = ra[i].r;
        st->wp[i] = ra[i].p;
    }
    st->nwr = n;
    free(ra);
    st->wcount = gl_calloc((size_t)2 * dm->L, sizeof *st->wcount);
    st->wleft = gl_calloc((size_t)2 * dm->L, sizeof *st->wleft);
    for (int k = 0; k < st->nwt; k++)
        st->wcount[2 * st->wt[k].layer + st->wt[k].expert]++;
    gather_reset(st);
    st->wtamax = m->d->ops->alloc(m->d, (size_t)(st->nwt + 1) * sizeof(float));
    if (st->nwb)
        st->wbamax = m->d->ops->alloc(m->d, st->nwb * sizeof(float));
}

/* Blockwise: the block factors of the quantized weights and of the
 * scratch operands (widest: the widest operand's width). */
static void block_buffers(gl_model *m, gl_fp8_state *st, int widest)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    st->wsv = gl_calloc((size_t)4 * dm->L, sizeof *st->wsv);
    st->wsvt = gl_calloc((size_t)4 * dm->L, sizeof *st->wsvt);
    for (int i = 0; i < 4 * dm->L; i++) {
        if (!st->wq[i])
            continue;
        int out, in;
        w_shape(dm, i % 4, &out, &in);
        st->wsv[i] = d->ops->alloc(d, gl_fp8_tile_count(out, in, 1) * sizeof(float));
        st->wsvt[i] = d->ops->alloc(d, gl_fp8_tile_count(in, out, 1) * sizeof(float));
    }
    size_t rows = gl_fp8_tile_count(dm->n, widest, 0) * sizeof(float);
    size_t cols = gl_fp8_tile_count(widest, dm->n, 0) * sizeof(float);
    st->xsv = d->ops->alloc(d, rows);
    st->dysv = d->ops->alloc(d, rows);
    st->dytsv = d->ops->alloc(d, cols);
}

void gl_model_fp8_enable(gl_model *m, const gl_fp8_opts *o)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    gl_dev *d = m->d;
    if (o->format == GL_FP8_OFF)
        return;
    if (o->recipe != GL_FP8_DELAYED && o->recipe != GL_FP8_TENSORWISE &&
        o->recipe != GL_FP8_BLOCKWISE)
        gl_die("internal error: FP8 recipe %d is not built", (int)o->recipe);
    if (o->recipe == GL_FP8_BLOCKWISE && (!d->ops->fp8_quantize_tiles || !d->ops->gemm_fp8_tiles))
        gl_die("internal error: --fp8-recipe blockwise on a device without block-scaled "
               "FP8 ops (ops.h: fp8_quantize_tiles, gemm_fp8_tiles)");
    gl_fp8_state *st = gl_calloc(1, sizeof *st);
    st->o = *o;
    st->L = dm->L;
    st->len = o->recipe == GL_FP8_DELAYED ? o->amax_history_len : 1;
    st->ffwd = GL_FP8_E4M3;
    st->fbwd = o->format == GL_FP8_FMT_HYBRID ? GL_FP8_E5M2 : GL_FP8_E4M3;
    st->E = dm->E;
    st->nf = 8 * dm->L + 4 * dm->L * dm->E;    /* the experts' after the dense ones */
    st->nb = 4 * dm->L + 2 * dm->L * dm->E;

    /* the scale tables first (the allocation is aligned, and REC floats
     * are 16 bytes), then the histories */
    size_t nfl = (size_t)(REC + st->len) * (st->nf + st->nb);
    float *all = d->ops->alloc(d, nfl * sizeof(float));
    st->rec_f = all;
    st->rec_b = st->rec_f + (size_t)REC * st->nf;
    st->hist_f = st->rec_b + (size_t)REC * st->nb;
    st->hist_b = st->hist_f + (size_t)st->len * st->nf;
    /* histories 0, scales and their inverses 1 (Transformer Engine's
     * start) */
    float *host = gl_calloc(nfl, sizeof(float));
    for (int t = 0; t < st->nf + st->nb; t++)
        host[(size_t)REC * t + R_SINV] = host[(size_t)REC * t + R_SCALE] = 1.0f;
    d->ops->upload(d, all, host, nfl * sizeof(float));
    free(host);

    /* the widest operand: in and out of the four linears */
    int widths[] = {dm->h, dm->qkvw, dm->hq * dm->D, dm->guw, dm->fl};
    int widest = 0;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        widest = widths[i] > widest ? widths[i] : widest;
    size_t scratch = (size_t)dm->n * widest;
    st->xq = d->ops->alloc(d, scratch);
    st->dyq = d->ops->alloc(d, scratch);
    st->dyqt = d->ops->alloc(d, scratch);

    st->wq = gl_calloc((size_t)4 * dm->L, sizeof *st->wq);
    st->wqt = gl_calloc((size_t)4 * dm->L, sizeof *st->wqt);
    st->fresh = gl_calloc((size_t)dm->L, sizeof *st->fresh);
    st->wamax = d->ops->alloc(d, (size_t)4 * dm->L * sizeof(float));
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
            /* an MoE layer's MLP is its experts' (moe_alloc) */
            int nlin = moe_layer(m, l) ? LIN_GU : NLIN;
            for (int k = 0; k < nlin; k++) {
                st->wq[4 * l + k] = d->ops->alloc(d, wsize[k]);
                st->wqt[4 * l + k] = d->ops->alloc(d, wsize[k]);
            }
        }
    if (o->recipe == GL_FP8_BLOCKWISE)
        block_buffers(m, st, widest);
    keep_buffers(m, st);
    moe_alloc(m, st);
    m->fp8 = st;
    weight_ranges(m, st);
}

void gl_model_fp8_free(gl_model *m)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (!st)
        return;
    for (int i = 0; i < 4 * st->L; i++) {
        free_dev(d, st->wq[i]);
        free_dev(d, st->wqt[i]);
    }
    for (int i = 0; st->wsv && i < 4 * st->L; i++) {
        free_dev(d, st->wsv[i]);
        free_dev(d, st->wsvt[i]);
    }
    free(st->wsv);
    free(st->wsvt);
    free_dev(d, st->xsv);
    free_dev(d, st->dysv);
    free_dev(d, st->dytsv);
    for (int i = 0; i < st->nkept; i++)
        d->ops->free(d, st->kept[i]);
    moe_free(m, st);
    free(st->kept);
    free(st->wq);
    free(st->wqt);
    free(st->fresh);
    free(st->wr);
    free(st->wp);
    free(st->wt);
    free(st->wcount);
    free(st->wleft);
    d->ops->free(d, st->wtamax);
    free_dev(d, st->wbamax);
    d->ops->free(d, st->wamax);
    d->ops->free(d, st->xq);
    d->ops->free(d, st->dyq);
    d->ops->free(d, st->dyqt);
    d->ops->free(d, st->rec_f);
    free(st);
    m->fp8 = NULL;
}

/* fp8_quantize of x [xrows, cols] padded with zero rows to rows
 * (fp8_quantize_pad where there is padding). */
static void quantize_rows(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax, const void *x,
                          int xrows, int rows, int cols, const float *scale, gl_fp8_format f)
{
    if (xrows < rows)
        d->ops->fp8_quantize_pad(d, q, qt, amax, x, xrows, rows, cols, scale, f);
    else
        d->ops->fp8_quantize(d, q, qt, amax, x, rows, cols, scale, f);
}

/* Quantize x [xrows, cols], padded with zero rows to rows, with the
 * scale record r (format f) into q and / or qt.  tensorwise: the scale
 * from x's own amax (into *amax), reduced over TP when x is a TP slice.
 * delayed: the scale of the step, x's amax folded into *amax (the
 * history's row 0) when collect is set.  Zero rows change no amax, so the
 * amaxes are taken over x's own rows. */
static void quant_rows(gl_model *m, float *amax, float *r, gl_fp8_format f, uint8_t *q,
                       uint8_t *qt, const void *x, int xrows, int rows, int cols, int sliced,
                       int collect)
{
    const gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (st->o.recipe == GL_FP8_TENSORWISE) {
        /* amax and scale in one launch; a TP slice's amax is reduced
         * between the two */
        size_t count = (size_t)xrows * cols;
        if (sliced && m->tp) {
            d->ops->fp8_amax_scale(d, amax, NULL, NULL, x, count, f);
            gl_all_reduce(m->tp, amax, amax, 1, GL_DT_F32, GL_OP_MAX, d->stream);
            d->ops->fp8_scale_current(d, amax, r + R_SCALE, r + R_SINV, REC, 1, f);
        } else {
            d->ops->fp8_amax_scale(d, amax, r + R_SCALE, r + R_SINV, x, count, f);
        }
        quantize_rows(d, q, qt, NULL, x, xrows, rows, cols, r + R_SCALE, f);
    } else {
        quantize_rows(d, q, qt, collect ? amax : NULL, x, xrows, rows, cols, r + R_SCALE, f);
    }
}

/* quant_rows of x [rows, cols] without padding. */
static void quant(gl_model *m, float *amax, float *r, gl_fp8_format f, uint8_t *q,
                  uint8_t *qt, const void *x, int rows, int cols, int sliced, int collect)
{
    quant_rows(m, amax, r, f, q, qt, x, rows, rows, cols, sliced, collect);
}

/* W [out, in] of each linear. */
static void w_shape(const gl_model_dims *dm, int lin, int *out, int *in)
{
    int o[NLIN] = {dm->qkvw, dm->h, dm->guw, dm->h};
    int x[NLIN];
    x_widths(dm, x);
    *out = o[lin];
    *in = x[lin];
}

void gl_model_fp8_weights(gl_model *m, int layer, const void *const W[4])
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    if (st->fresh[layer])
        return;
    int out[NLIN], in[NLIN];
    for (int k = 0; k < NLIN; k++)
        w_shape(dm, k, &out[k], &in[k]);
    if (st->o.recipe == GL_FP8_BLOCKWISE) {
        /* 128 x 128 blocks, W and W^T with the same factors */
        for (int k = 0; k < NLIN; k++) {
            int i = 4 * layer + k;
            if (!st->wq[i])         /* an MoE layer's MLP: its experts' */
                continue;
            d->ops->fp8_quantize_tiles(d, st->wq[i], st->wsv[i], st->wqt[i], st->wsvt[i], W[k],
                                       out[k], in[k], 1, st->ffwd);
        }
        st->fresh[layer] = 1;
        return;
    }
    float *r0 = rec(st->rec_f, fwd_w(layer, 0));    /* W's records, 2 apart */
    const int rstride = REC * (fwd_w(layer, 1) - fwd_w(layer, 0));
    if (st->o.recipe == GL_FP8_TENSORWISE) {
        /* the four amaxes (and, without TP, scales) first; under TP one
         * all-reduce of the four and one scale launch for them */
        float *am = st->wamax + (size_t)4 * layer;
        for (int k = 0; k < NLIN; k++) {
            float *r = r0 + (size_t)rstride * k;
            if (!W[k])
                continue;
            d->ops->fp8_amax_scale(d, am + k, m->tp ? NULL : r + R_SCALE,
                                   m->tp ? NULL : r + R_SINV, W[k],
                                   (size_t)out[k] * in[k], st->ffwd);
        }
        if (m->tp) {
            gl_all_reduce(m->tp, am, am, NLIN, GL_DT_F32, GL_OP_MAX, d->stream);
            d->ops->fp8_scale_current(d, am, r0 + R_SCALE, r0 + R_SINV, rstride, NLIN,
                                      st->ffwd);
        }
    }
    for (int k = 0; k < NLIN; k++) {
        int t = fwd_w(layer, k);
        if (!W[k])
            continue;
        float *amax = st->o.recipe == GL_FP8_DELAYED ? st->hist_f + t : NULL;
        d->ops->fp8_quantize(d, st->wq[4 * layer + k], st->wqt[4 * layer + k], amax, W[k],
                             out[k], in[k], rec(st->rec_f, t) + R_SCALE, st->ffwd);
    }
    st->fresh[layer] = 1;
}

/* A layer's FP8 products run after gl_model_fp8_weights() in its step. */
static void check_fresh(const gl_fp8_state *st, int layer)
{
    if (!st->fresh[layer])
        gl_die("internal error: FP8 layer %d runs before its weights are quantized",
               layer);
}

/* The row-parallel linears' inputs are TP slices (o, s); the
 * column-parallel ones' inputs are whole (a, mg). */
static int x_sliced(int lin) { return lin == LIN_WO || lin == LIN_DOWN; }
/* The column-parallel linears' output gradients are TP slices. */
static int dy_sliced(int lin) { return lin == LIN_QKV || lin == LIN_GU; }

/* X's scale record and amax: under tensorwise the micro-batch's own, in
 * A->xrec; under delayed the step's, in the tables. */
static float *x_rec(gl_model *m, gl_layer_acts *A, int layer, int lin)
{
    gl_fp8_state *st = m->fp8;
    if (st->o.recipe == GL_FP8_TENSORWISE)
        return A->xrec + (size_t)REC * lin;
    return rec(st->rec_f, fwd_x(layer, lin));
}

static float *x_amax(gl_model *m, gl_layer_acts *A, int layer, int lin)
{
    gl_fp8_state *st = m->fp8;
    if (st->o.recipe == GL_FP8_TENSORWISE)
        return A->xrec + (size_t)REC * lin + R_AMAX;
    return st->hist_f + fwd_x(layer, lin);
}

/* Y = X W^T from the X that st->xq holds (quantized with x_rec's scale). */
static void fwd_product(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y, int n,
                        int out, int in)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    int wi = fwd_w(layer, lin);
    check_fresh(st, layer);
    d->ops->gemm_fp8(d, n, out, in, 1.0f, st->xq, st->ffwd, x_rec(m, A, layer, lin) + R_SINV,
                     st->wq[4 * layer + lin], st->ffwd, rec(st->rec_f, wi) + R_SINV, 0.0f, Y,
                     d->act, out, 1);
}

/* X^T for the weight gradient in the forward's pass; not for evaluation,
 * nor when recomputation will write it again */
static uint8_t *x_keep(gl_model *m, gl_layer_acts *A, int lin)
{
    return m->fp8_eval || m->fp8_nokeep ? NULL : A->xt[lin];
}

/* ---- blockwise scaling: the operands with their block factors ---- */

/* Y = X W^T: X in 1 x 128 tiles (its transpose, tiled along the tokens,
 * kept for the weight gradient), W in 128 x 128 blocks.  Fast
 * accumulation is not used: block-scaled products promote each k-tile's
 * partial sum to fp32 anyway. */
static void block_fwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y,
                      const void *X, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    int wi = 4 * layer + lin;
    uint8_t *xt = x_keep(m, A, lin);
    check_fresh(st, layer);
    d->ops->fp8_quantize_tiles(d, st->xq, st->xsv, xt, xt ? A->xts[lin] : NULL, X, n, in, 0,
                               st->ffwd);
    d->ops->gemm_fp8_tiles(d, n, out, in, 1.0f, st->xq, st->ffwd, st->xsv, st->wq[wi],
                           st->ffwd, st->wsv[wi], 1, 0.0f, Y, d->act, out);
}

/* dX = dY W (dY 1D, W^T 2D) and dW = dY^T X + beta dW (both 1D along the
 * tokens). */
static void block_bwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX, float *dW,
                      float beta, const void *dY, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    int wi = 4 * layer + lin;
    check_fresh(st, layer);
    d->ops->fp8_quantize_tiles(d, dX ? st->dyq : NULL, dX ? st->dysv : NULL, st->dyqt,
                               st->dytsv, dY, n, out, 0, st->fbwd);
    if (dX)
        d->ops->gemm_fp8_tiles(d, n, in, out, 1.0f, st->dyq, st->fbwd, st->dysv, st->wqt[wi],
                               st->ffwd, st->wsvt[wi], 1, 0.0f, dX, d->act, in);
    d->ops->gemm_fp8_tiles(d, out, in, n, 1.0f, st->dyqt, st->fbwd, st->dytsv, A->xt[lin],
                           st->ffwd, A->xts[lin], 0, beta, dW, GL_DT_F32, in);
}

void gl_model_fp8_fwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y,
                      const void *X, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    if (st->o.recipe == GL_FP8_BLOCKWISE) {
        block_fwd(m, A, layer, lin, Y, X, n, out, in);
        return;
    }
    quant(m, x_amax(m, A, layer, lin), x_rec(m, A, layer, lin), st->ffwd, st->xq,
          x_keep(m, A, lin), X, n, in, x_sliced(lin), !m->fp8_eval);
    fwd_product(m, A, layer, lin, Y, n, out, in);
}

void gl_model_fp8_keep_x(gl_model *m, gl_layer_acts *A, int layer, int lin, const void *X,
                         int n, int in)
{
    gl_fp8_state *st = m->fp8;
    if (st->o.recipe == GL_FP8_BLOCKWISE) {
        m->d->ops->fp8_quantize_tiles(m->d, NULL, NULL, A->xt[lin], A->xts[lin], X, n, in, 0,
                                      st->ffwd);
        return;
    }
    quant(m, x_amax(m, A, layer, lin), x_rec(m, A, layer, lin), st->ffwd, NULL, A->xt[lin], X,
          n, in, x_sliced(lin), !m->fp8_eval);
}

/* dX = dY W and dW = dY^T X + beta dW from the dY that st->dyq, st->dyqt
 * hold. */
static void bwd_products(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX,
                         float *dW, float beta, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    int wi = fwd_w(layer, lin);
    float *gr = rec(st->rec_b, bwd_dy(layer, lin));
    check_fresh(st, layer);
    if (dX)     /* dX [n, in] = dY [n, out] W: A = dY, B = W^T [in, out] */
        d->ops->gemm_fp8(d, n, in, out, 1.0f, st->dyq, st->fbwd, gr + R_SINV,
                         st->wqt[4 * layer + lin], st->ffwd, rec(st->rec_f, wi) + R_SINV, 0.0f,
                         dX, d->act, in, 0);
    /* dW [out, in] += dY^T X: A = dY^T [out, n], B = X^T [in, n], kept by
     * the forward with X's scale */
    d->ops->gemm_fp8(d, out, in, n, 1.0f, st->dyqt, st->fbwd, gr + R_SINV, A->xt[lin],
                     st->ffwd, x_rec(m, A, layer, lin) + R_SINV, beta, dW, GL_DT_F32, in, 0);
}

void gl_model_fp8_bwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX, float *dW,
                      float beta, const void *dY, int n, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    if (st->o.recipe == GL_FP8_BLOCKWISE) {
        block_bwd(m, A, layer, lin, dX, dW, beta, dY, n, out, in);
        return;
    }
    int gi = bwd_dy(layer, lin);
    quant(m, st->hist_b + gi, rec(st->rec_b, gi), st->fbwd, st->dyq, st->dyqt, dY, n, out,
          dy_sliced(lin), 1);
    bwd_products(m, A, layer, lin, dX, dW, beta, n, out, in);
}

/* ---- operands quantized by the kernels that make them ---- */

int gl_model_fp8_fused(const gl_model *m, int layer)
{
    return gl_model_fp8_layer(m, layer) && m->fp8->o.recipe == GL_FP8_DELAYED;
}

/* Delayed scaling only: the step's scale is in the table before the
 * producer runs, and the amaxes go to the history's row 0, reduced over
 * TP and DP at the step's end, so a TP slice needs nothing more here. */
static void check_fused(const gl_model *m, int layer)
{
    if (!gl_model_fp8_fused(m, layer))
        gl_die("internal error: FP8 operands of layer %d made fused without delayed "
               "scaling", layer);
}

void gl_model_fp8_x_out(gl_model *m, gl_layer_acts *A, int layer, int lin, int keep_only,
                        gl_fp8_out *o)
{
    gl_fp8_state *st = m->fp8;
    check_fused(m, layer);
    /* as gl_model_fp8_fwd's quant, or gl_model_fp8_keep_x's */
    o->q = keep_only ? NULL : st->xq;
    o->qt = keep_only ? A->xt[lin] : x_keep(m, A, lin);
    o->amax = m->fp8_eval ? NULL : x_amax(m, A, layer, lin);
    o->scale = x_rec(m, A, layer, lin) + R_SCALE;
    o->f = st->ffwd;
}

void gl_model_fp8_fwd_made(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y, int n,
                           int out, int in)
{
    check_fused(m, layer);
    fwd_product(m, A, layer, lin, Y, n, out, in);
}

void gl_model_fp8_dy_out(gl_model *m, int layer, int lin, gl_fp8_out *o)
{
    gl_fp8_state *st = m->fp8;
    int gi = bwd_dy(layer, lin);
    check_fused(m, layer);
    o->q = st->dyq;
    o->qt = st->dyqt;
    o->amax = st->hist_b + gi;
    o->scale = rec(st->rec_b, gi) + R_SCALE;
    o->f = st->fbwd;
}

void gl_model_fp8_bwd_made(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX,
                           float *dW, float beta, int n, int out, int in)
{
    check_fused(m, layer);
    bwd_products(m, A, layer, lin, dX, dW, beta, n, out, in);
}

void gl_model_fp8_step_end(gl_model *m, gl_comm *dp)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (!st)
        return;
    memset(st->fresh, 0, (size_t)st->L * sizeof *st->fresh);
    memset(st->efresh, 0, (size_t)st->L * sizeof *st->efresh);
    gather_reset(st);
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
    d->ops->fp8_scale_delayed(d, st->hist_f, st->rec_f + R_SCALE, st->rec_f + R_SINV, REC,
                              st->nf, st->len, algo, st->o.margin, st->ffwd);
    d->ops->fp8_scale_delayed(d, st->hist_b, st->rec_b + R_SCALE, st->rec_b + R_SINV, REC,
                              st->nb, st->len, algo, st->o.margin, st->fbwd);
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
    int dense = group == 0 ? 8 * st->L : 4 * st->L;
    int per = group == 0 ? 8 : 4;
    int layer = t < dense ? t / per : (t - dense) / (per / 2 * st->E);
    return st->wq[4 * layer] != NULL;
}

/* The device's tables and histories <-> the checkpoint's block (model.h):
 * per group hist [len, n], scale [n], scale_inv [n].  dir 0: dev (as
 * downloaded) into blk; 1: blk into dev (to upload). */
static void convert(const gl_fp8_state *st, float *dev, float *blk, int dir)
{
    float *p = blk;
    for (int g = 0; g < 2; g++) {
        int n = g == 0 ? st->nf : st->nb;
        size_t dr = g == 0 ? 0 : (size_t)REC * st->nf;          /* records */
        size_t dh = (size_t)REC * (st->nf + st->nb) + (g == 0 ? 0 : (size_t)st->len * st->nf);
        size_t nh = (size_t)st->len * n;
        for (size_t i = 0; i < nh; i++, p++) {
            if (dir == 0)
                *p = dev[dh + i];
            else
                dev[dh + i] = *p;
        }
        for (int k = 0; k < 2; k++)             /* scale, then scale_inv */
            for (int t = 0; t < n; t++, p++) {
                float *r = dev + dr + (size_t)REC * t + (k == 0 ? R_SCALE : R_SINV);
                if (dir == 0)
                    *p = *r;
                else
                    *r = *p;
            }
    }
}

float *gl_model_fp8_state_get(gl_model *m)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    size_t nfl = (size_t)(st->len + 2) * (st->nf + st->nb);
    size_t ndev = (size_t)(st->len + REC) * (st->nf + st->nb);
    float *dev = gl_malloc(ndev * sizeof(float));
    d->ops->download(d, dev, st->rec_f, ndev * sizeof(float));
    float *host = gl_malloc(nfl * sizeof(float));
    convert(st, dev, host, 0);
    free(dev);
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
    size_t ndev = (size_t)(st->len + REC) * (st->nf + st->nb);
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
    float *dev = gl_calloc(ndev, sizeof(float));
    convert(st, dev, fix, 1);
    d->ops->upload(d, st->rec_f, dev, ndev * sizeof(float));
    free(dev);
    free(fix);
}

/* ---- --fp8-param-gather: weights quantized by shard, gathered in FP8 ---- */

const gl_fp8_wrange *gl_model_fp8_wranges(const gl_model *m, int *n)
{
    *n = m->fp8 ? m->fp8->nwr : 0;
    return m->fp8 ? m->fp8->wr : NULL;
}

/* Quantize the elements [a, b) of weight range i (a piece of a tensor
 * whose rows are wp[i].in wide, in row-major order) into q: the part row
 * before the first whole row, the whole rows as one [rows, in] tensor,
 * the part row after, so that the kernel sees rows where it can. */
static void quant_piece(gl_model *m, int i, size_t a, size_t b, uint8_t *q, float *amax,
                        const float *scale)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    const gl_fp8_wrange *r = &st->wr[i];
    size_t in = (size_t)st->wp[i].in;
    size_t e0 = a - r->begin, e1 = b - r->begin;        /* elements of the range */
    size_t r0 = (e0 + in - 1) / in, r1 = e1 / in;       /* whole rows [r0, r1) */
    if (r0 >= r1) {                                     /* no whole row: flat */
        d->ops->fp8_quantize(d, q, NULL, amax, gl_model_weight(m, a), 1, (int)(b - a), scale,
                             st->ffwd);
        return;
    }
    size_t head = r0 * in - e0, tail = e1 - r1 * in;
    if (head)
        d->ops->fp8_quantize(d, q, NULL, amax, gl_model_weight(m, a), 1, (int)head, scale,
                             st->ffwd);
    d->ops->fp8_quantize(d, q + head, NULL, amax, gl_model_weight(m, a + head), (int)(r1 - r0),
                         (int)in, scale, st->ffwd);
    if (tail)
        d->ops->fp8_quantize(d, q + (b - a) - tail, NULL, amax,
                             gl_model_weight(m, b - tail), 1, (int)tail, scale, st->ffwd);
}

/* The piece of range r inside [begin, end): *a, *b; 0 when empty. */
static int piece(const gl_fp8_wrange *r, size_t begin, size_t end, size_t *a, size_t *b)
{
    *a = r->begin > begin ? r->begin : begin;
    *b = r->end < end ? r->end : end;
    return *a < *b;
}

/* Element a of the flat buffer (inside range i) as an element of its
 * tensor, row-major. */
static size_t tensor_at(const gl_fp8_state *st, int i, size_t a)
{
    return st->wp[i].at + (a - st->wr[i].begin);
}

/* Fold into st->wtamax (tensorwise) or st->wbamax (blockwise) the amaxes
 * of the FP8 weights' pieces inside [begin, end). */
static void fold_amaxes(gl_model *m, size_t begin, size_t end)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    size_t a, b;
    for (int i = 0; i < st->nwr; i++) {
        if (!piece(&st->wr[i], begin, end, &a, &b))
            continue;
        const struct wtensor *w = &st->wt[st->wp[i].tensor];
        if (st->wbamax)
            d->ops->fp8_block_amax(d, st->wbamax + w->boff, gl_model_weight(m, a),
                                   tensor_at(st, i, a), b - a, w->in);
        else
            d->ops->fp8_amax(d, st->wtamax + st->wp[i].tensor, gl_model_weight(m, a), b - a);
    }
}

void gl_model_fp8_shard_scales(gl_model *m, size_t begin, size_t end, gl_comm *dp,
                               size_t xbegin, size_t xend, gl_comm *edp)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    if (st->o.recipe == GL_FP8_DELAYED)
        return;
    /* each weight's amax (blockwise: each of its blocks') over its pieces
     * on every rank of its group: that of the whole tensor, from which
     * every rank computes the same scales.  The ranks of a group list the
     * same tensors in the same order; the experts' slots are still zero
     * while DP reduces the others (under expert parallelism DP holds
     * other experts in those slots), and EDP's MAX leaves the others as
     * they are (the same on every rank of it).  Tensorwise then reduces
     * over TP (a TP rank holds a slice of the tensor); blockwise does not
     * (a TP rank's blocks are its own: the top of this file). */
    int blk = st->wbamax != NULL;
    float *am = blk ? st->wbamax : st->wtamax;
    size_t n = blk ? st->nwb : (size_t)st->nwt;
    d->ops->zero(d, am, n * sizeof(float));
    fold_amaxes(m, begin, end);
    if (dp)
        gl_all_reduce(dp, am, am, n, GL_DT_F32, GL_OP_MAX, d->stream);
    int tp_first = m->tp && !blk && m->ep && !experts_split(m);
    if (tp_first)           /* whole experts (ETP 1): their slots still zero */
        gl_all_reduce(m->tp, am, am, n, GL_DT_F32, GL_OP_MAX, d->stream);
    fold_amaxes(m, xbegin, xend);
    if (edp && xend > xbegin)
        gl_all_reduce(edp, am, am, n, GL_DT_F32, GL_OP_MAX, d->stream);
    if (m->tp && !blk && !tp_first)
        gl_all_reduce(m->tp, am, am, n, GL_DT_F32, GL_OP_MAX, d->stream);
    for (int k = 0; k < st->nwt; k++) {
        const struct wtensor *w = &st->wt[k];
        float *r = rec(st->rec_f, w->t);
        if (blk)
            d->ops->fp8_block_sinv(d, w->sv, w->svt, am + w->boff, w->out, w->in, st->ffwd);
        else
            d->ops->fp8_scale_current(d, am + k, r + R_SCALE, r + R_SINV, REC, 1, st->ffwd);
    }
}

size_t gl_model_fp8_quantize_range(gl_model *m, size_t begin, size_t end, uint8_t *q)
{
    gl_fp8_state *st = m->fp8;
    size_t a, b, n = 0;
    for (int i = 0; i < st->nwr; i++) {
        if (!piece(&st->wr[i], begin, end, &a, &b))
            continue;
        const struct wtensor *w = &st->wt[st->wp[i].tensor];
        float *amax = st->o.recipe == GL_FP8_DELAYED ? st->hist_f + w->t : NULL;
        if (q && st->wbamax)
            m->d->ops->fp8_quantize_block_range(m->d, q + n, gl_model_weight(m, a),
                                                tensor_at(st, i, a), b - a, w->in,
                                                st->wbamax + w->boff, st->ffwd);
        else if (q)
            quant_piece(m, i, a, b, q + n, amax, rec(st->rec_f, w->t) + R_SCALE);
        n += b - a;
    }
    return n;
}

void gl_model_fp8_place(gl_model *m, size_t begin, size_t end, const uint8_t *q)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    size_t a, b;
    for (int i = 0; i < st->nwr; i++) {
        if (!piece(&st->wr[i], begin, end, &a, &b))
            continue;
        struct wtensor *w = &st->wt[st->wp[i].tensor];
        size_t whole = (size_t)w->out * w->in;
        d->ops->copy(d, w->q + tensor_at(st, i, a), q, b - a);
        q += b - a;
        w->placed += b - a;
        if (w->placed > whole)
            gl_die("internal error: an FP8 weight of layer %d placed twice in a step",
                   w->layer);
        if (w->placed < whole)
            continue;
        d->ops->fp8_transpose(d, w->qt, w->q, w->out, w->in);
        if (--st->wleft[2 * w->layer + w->expert] == 0)
            (w->expert ? st->efresh : st->fresh)[w->layer] = 1;
    }
}

/* ---- the experts of MoE layers ----
 *
 * An MoE layer's experts run their products in FP8 as Transformer
 * Engine's GroupedLinear does under Megatron's --fp8-format: two grouped
 * linears, fc1 (each expert's [w_gate; w_up], one weight of guw rows) and
 * fc2 (its w_down), and every expert's product with scales of its own:
 * its rows of X, its weight and its rows of dY are three FP8 tensors per
 * expert and linear.  The router (and the shared experts, a dense MLP of
 * their own) stay in the model's precision.  Numbering, after the dense
 * tensors, by global layer l, global expert e and linear j (0 fc1, 1 fc2):
 *     forward  tensor 8 L + 4 (E l + e) + 2 j + 0 (X) or + 1 (W)
 *     backward tensor 4 L + 2 (E l + e) + j
 * so the tables, histories, step_end's reductions and the checkpoint's
 * block cover them with the dense ones (a dense layer's entries, and an
 * MoE layer's dense gate/up and down entries, are never used).
 *
 * The rows an expert gets vary; FP8 products want multiples of 16 rows.
 * Each expert's rows are copied into a padded scratch, the pad zeroed
 * (zeros change no amax and add exact zeros to every product), unless
 * their number is a multiple of 16 already; so no padding reaches the
 * router or the routing (Megatron's --moe-router-padding-for-fp8 pads the
 * routing instead: the same products, the padding elsewhere).  One
 * product per expert with the host's offsets (the map's offsets_host).
 *
 * Blockwise scaling: as the dense layers' (the top of this file), per
 * expert -- its rows of X and dY in 1 x 128 tiles (dY^T and X^T tiled
 * along its rows for the weight gradient), its weights in 128 x 128
 * blocks -- with its rows padded to whole 128-row tiles, so that the
 * tiles along the rows are the same whatever the padding.
 *
 * Reductions: with the experts split over TP (ETP = TP) fc1's W and dY
 * and fc2's X and W are TP slices, their amaxes reduced with MAX over
 * TP; fc1's X and fc2's dY are the same on every TP rank.  With whole
 * experts under TP (ETP 1, expert parallelism) nothing is reduced over
 * TP per product: a TP peer holds other experts, and an expert's rows
 * from every TP rank's share arrive at its rank.  Under delayed scaling
 * step_end reduces every amax over TP and DP as for the dense tensors;
 * with expert parallelism an expert's rows from every rank of its EP
 * group arrive at the one rank that holds it, which sees its whole amax,
 * and the MAX over TP and DP (which hold the EP group) gives it to every
 * rank.
 *
 * The backward needs X again: moe.c rebuilds xp and the activation (a
 * permutation and a SwiGLU, bit for bit the forward's), and X is
 * quantized again with the same scale (delayed: the step's; tensorwise:
 * recomputed from the same rows, so the same), so nothing FP8 is kept
 * between forward and backward. */

static int mfwd_x(const gl_fp8_state *st, int layer, int e, int j)
{
    return 8 * st->L + 4 * (st->E * layer + e) + 2 * j;
}
static int mfwd_w(const gl_fp8_state *st, int layer, int e, int j)
{
    return mfwd_x(st, layer, e, j) + 1;
}
static int mbwd_dy(const gl_fp8_state *st, int layer, int e, int j)
{
    return 4 * st->L + 2 * (st->E * layer + e) + j;
}

/* Linear j's W [out, in] per expert. */
static void mshape(const gl_model_dims *dm, int j, int *out, int *in)
{
    *out = j == MLIN_FC1 ? (dm->swiglu ? 2 : 1) * dm->fel : dm->h;    /* not the dense guw */
    *in = j == MLIN_FC1 ? dm->h : dm->fel;
}

static size_t mwsize(const gl_model_dims *dm, int j)
{
    int out, in;
    mshape(dm, j, &out, &in);
    return (size_t)out * in;
}

/* A layer's expert weights: fc1's El blocks, then fc2's (q and qt each). */
static uint8_t *mw(const gl_fp8_state *st, const gl_model_dims *dm, int layer, int j, int le,
                   int transposed)
{
    uint8_t *base = transposed ? st->ewqt[layer] : st->ewq[layer];
    size_t at = j == MLIN_FC1 ? 0 : (size_t)dm->El * mwsize(dm, MLIN_FC1);
    return base + at + (size_t)le * mwsize(dm, j);
}

/* Floats of linear j's block factors per expert (q's, or transposed qt's). */
static size_t msvsize(const gl_model_dims *dm, int j, int transposed)
{
    int out, in;
    mshape(dm, j, &out, &in);
    return transposed ? gl_fp8_tile_count(in, out, 1) : gl_fp8_tile_count(out, in, 1);
}

/* Blockwise: a layer's expert weights' block factors, laid out as mw's
 * (every size a multiple of 4 floats: 16-byte aligned). */
static float *msv(const gl_fp8_state *st, const gl_model_dims *dm, int layer, int j, int le,
                  int transposed)
{
    float *base = transposed ? st->ewsvt[layer] : st->ewsv[layer];
    size_t at = j == MLIN_FC1 ? 0 : (size_t)dm->El * msvsize(dm, MLIN_FC1, transposed);
    return base + at + (size_t)le * msvsize(dm, j, transposed);
}

static void moe_alloc(gl_model *m, gl_fp8_state *st)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    gl_dev *d = m->d;
    st->ewq = gl_calloc((size_t)dm->L, sizeof *st->ewq);
    st->ewqt = gl_calloc((size_t)dm->L, sizeof *st->ewqt);
    st->efresh = gl_calloc((size_t)dm->L, sizeof *st->efresh);
    if (!dm->E)
        return;
    size_t bytes = (size_t)dm->El * (mwsize(dm, MLIN_FC1) + mwsize(dm, MLIN_FC2));
    for (int c = 0; c < p->nchunks; c++)
        for (int i = 0; i < dm->Lc; i++) {
            int l = p->chunk[c].first_layer + i;
            if (!moe_layer(m, l) || !st->wq[4 * l])
                continue;
            st->ewq[l] = d->ops->alloc(d, bytes);
            st->ewqt[l] = d->ops->alloc(d, bytes);
            if (st->o.recipe != GL_FP8_BLOCKWISE)
                continue;
            if (!st->ewsv) {
                st->ewsv = gl_calloc((size_t)dm->L, sizeof *st->ewsv);
                st->ewsvt = gl_calloc((size_t)dm->L, sizeof *st->ewsvt);
            }
            for (int t = 0; t < 2; t++)
                (t ? st->ewsvt : st->ewsv)[l] = d->ops->alloc(
                    d, (size_t)dm->El * (msvsize(dm, MLIN_FC1, t) + msvsize(dm, MLIN_FC2, t)) *
                           sizeof(float));
        }
}

/* The lanes' padded expert scratch of moe_scratch (none before its
 * first call). */
static void moe_scratch_free(gl_dev *d, gl_fp8_state *st)
{
    for (int i = 0; i < st->nes; i++) {
        struct escratch *es = &st->es[i];
        free_dev(d, es->pad);
        free_dev(d, es->out);
        free_dev(d, es->q);
        free_dev(d, es->qt);
        free_dev(d, es->qs);
        free_dev(d, es->qts);
        free_dev(d, es->wg);
        *es = (struct escratch){ 0 };
    }
    st->nes = 0;
    st->erows = 0;
}

static void moe_free(gl_model *m, gl_fp8_state *st)
{
    gl_dev *d = m->d;
    for (int l = 0; l < st->L; l++) {
        free_dev(d, st->ewq[l]);
        free_dev(d, st->ewqt[l]);
    }
    for (int l = 0; st->ewsv && l < st->L; l++) {
        free_dev(d, st->ewsv[l]);
        free_dev(d, st->ewsvt[l]);
    }
    free(st->ewsv);
    free(st->ewsvt);
    free(st->ewq);
    free(st->ewqt);
    free(st->efresh);
    moe_scratch_free(d, st);
    free_dev(d, st->ewcat);
}

int gl_model_fp8_moe(const gl_model *m, int layer)
{
    return m->fp8 && m->fp8->ewq && m->fp8->ewq[layer] != NULL;
}

/* An expert's rows padded: to 16 for the FP8 products, to whole 128-row
 * tiles under blockwise scaling (the weight gradient's operands are
 * tiled along the rows; zero rows change no tile's amax). */
static int epad_rows(const gl_fp8_state *st, int rows)
{
    int to = st->o.recipe == GL_FP8_BLOCKWISE ? GL_FP8_TILE : 16;
    return (rows + to - 1) / to * to;
}

/* The padded scratch of lanes lanes, each for experts of up to `rows`
 * rows (the map's rows_max bounds every expert's). */
static void moe_scratch(gl_model *m, int rows, int lanes)
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int need = epad_rows(st, rows);
    if (need <= st->erows && lanes <= st->nes)
        return;
    if (need < st->erows)
        need = st->erows;
    if (lanes < st->nes)
        lanes = st->nes;
    moe_scratch_free(d, st);
    int guw, h;
    mshape(dm, MLIN_FC1, &guw, &h);
    int widest = guw > h ? guw : h;     /* fel <= guw */
    size_t cells = (size_t)need * widest;
    for (int i = 0; i < lanes; i++) {
        struct escratch *es = &st->es[i];
        es->out = d->ops->alloc(d, cells * d->act_bytes);
        es->q = d->ops->alloc(d, cells);
        es->qt = d->ops->alloc(d, cells);
        if (st->o.recipe == GL_FP8_BLOCKWISE) {     /* 1D factors of either orientation */
            es->pad = d->ops->alloc(d, cells * d->act_bytes);
            size_t a = gl_fp8_tile_count(need, widest, 0);
            size_t b = gl_fp8_tile_count(widest, need, 0);
            es->qs = d->ops->alloc(d, (a > b ? a : b) * sizeof(float));
            es->qts = d->ops->alloc(d, (a > b ? a : b) * sizeof(float));
            es->wg = d->ops->alloc(d, mwsize(dm, MLIN_FC1) * sizeof(float));
        }
    }
    st->erows = need;
    st->nes = lanes;
}

/* How many lanes an MoE layer's FP8 experts may spread over (ops.h's
 * lanes): one an expert, but a single lane where quantizing an expert's
 * operand takes a collective (tensorwise scaling of experts split over
 * TP reduces a slice's amax over TP), since collectives stay on lane 0. */
static int moe_lanes(const gl_model *m, int experts)
{
    int collective = m->fp8->o.recipe == GL_FP8_TENSORWISE && experts_split(m);
    return collective ? 1 : experts;
}

/* Rows [r0, r0 + rows) of x [.., cols] (act), padded with zero rows to
 * epad_rows(rows): in place when no padding is needed, else in es->pad
 * (blockwise scaling's operands; the others are quantized with their
 * padding by quant_rows, without a padded copy). */
static const void *padded(gl_model *m, struct escratch *es, const void *x, int r0, int rows,
                          int cols)
{
    gl_fp8_state *st = m->fp8;
    gl_dev *d = m->d;
    const char *src = (const char *)x + (size_t)r0 * cols * d->act_bytes;
    int rp = epad_rows(st, rows);
    if (rp == rows)
        return src;
    size_t row = (size_t)cols * d->act_bytes;
    d->ops->copy(d, es->pad, src, (size_t)rows * row);
    d->ops->zero(d, (char *)es->pad + (size_t)rows * row, (size_t)(rp - rows) * row);
    return es->pad;
}

void gl_model_fp8_moe_weights(gl_model *m, int layer, const void *gate, const void *up,
                              const void *down)
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    if (st->efresh[layer])
        return;
    size_t piece = (size_t)dm->fel * dm->h;     /* one expert's w_gate or w_up */
    for (int le = 0; le < dm->El; le++) {
        int e = dm->e0 + le;
        for (int j = 0; j < 2; j++) {
            int out, in;
            mshape(dm, j, &out, &in);
            const void *w;
            if (j == MLIN_FC2) {
                w = gl_act_at(m, down, (size_t)le * mwsize(dm, j));
            } else if (!gate) {
                w = gl_act_at(m, up, (size_t)le * piece);
            } else {        /* [w_gate_e; w_up_e], one weight as TE's fc1 */
                if (!st->ewcat)
                    st->ewcat = d->ops->alloc(d, mwsize(dm, MLIN_FC1) * d->act_bytes);
                d->ops->copy(d, st->ewcat, gl_act_at(m, gate, (size_t)le * piece),
                             piece * d->act_bytes);
                d->ops->copy(d, (char *)st->ewcat + piece * d->act_bytes,
                             gl_act_at(m, up, (size_t)le * piece), piece * d->act_bytes);
                w = st->ewcat;
            }
            int t = mfwd_w(st, layer, e, j);
            if (st->ewsv)           /* blockwise: 128 x 128 blocks, W and W^T */
                d->ops->fp8_quantize_tiles(d, mw(st, dm, layer, j, le, 0),
                                           msv(st, dm, layer, j, le, 0),
                                           mw(st, dm, layer, j, le, 1),
                                           msv(st, dm, layer, j, le, 1), w, out, in, 1, st->ffwd);
            else
                quant(m, st->hist_f + t, rec(st->rec_f, t), st->ffwd, mw(st, dm, layer, j, le, 0),
                      mw(st, dm, layer, j, le, 1), w, out, in, experts_split(m), 1);
        }
    }
    st->efresh[layer] = 1;
}

/* Which of linear j's operands are TP slices when the experts are split:
 * fc1's dY, fc2's X (and both weights). */
static int mx_sliced(const gl_model *m, int j) { return experts_split(m) && j == MLIN_FC2; }
static int mdy_sliced(const gl_model *m, int j) { return experts_split(m) && j == MLIN_FC1; }

/* Expert le's rows of X quantized with their record (q and / or qt),
 * padded to epad_rows. */
static void mquant_x(gl_model *m, int layer, int j, int e, const void *X, int r0, int rows,
                     int in, uint8_t *q, uint8_t *qt)
{
    gl_fp8_state *st = m->fp8;
    int t = mfwd_x(st, layer, e, j);
    quant_rows(m, st->hist_f + t, rec(st->rec_f, t), st->ffwd, q, qt,
               gl_act_at(m, X, (size_t)r0 * in), rows, epad_rows(st, rows), in, mx_sliced(m, j),
               !m->fp8_eval);
}

/* Blockwise: expert le's forward product into y [rp, out], its rows
 * [r0, r0 + rows) of X in 1 x 128 tiles, its weight in 128 x 128 blocks. */
static void block_moe_fwd(gl_model *m, struct escratch *es, int layer, int j, int le, void *y,
                          const void *X, int r0, int rows, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int rp = epad_rows(st, rows);
    d->ops->fp8_quantize_tiles(d, es->q, es->qs, NULL, NULL, padded(m, es, X, r0, rows, in), rp,
                               in, 0, st->ffwd);
    d->ops->gemm_fp8_tiles(d, rp, out, in, 1.0f, es->q, st->ffwd, es->qs,
                           mw(st, dm, layer, j, le, 0), st->ffwd, msv(st, dm, layer, j, le, 0),
                           1, 0.0f, y, d->act, out);
}

/* Blockwise: expert le's data gradient into dx [rp, in] and weight
 * gradient into its dW pieces (as gl_model_fp8_moe_bwd's: fc1's gate and
 * up rows apart, through one f32 scratch, since the 1 x 128 factors of
 * dY^T's rows are not two operands' at an offset). */
static void block_moe_bwd(gl_model *m, struct escratch *es, int layer, int j, int le, void *dx,
                          float *dW0, float *dW1, float beta, const void *dY, const void *X,
                          int r0, int rows, int out, int in)
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int rp = epad_rows(st, rows), np = dW1 ? 2 : 1;
    size_t piece = (size_t)out / np * in;
    /* dY_e in 1 x 128 tiles: along its rows for the data gradient, along
     * the tokens (dY_e^T) for the weight's; dX_e = dY_e W_e */
    d->ops->fp8_quantize_tiles(d, es->q, es->qs, es->qt, es->qts,
                               padded(m, es, dY, r0, rows, out), rp, out, 0, st->fbwd);
    d->ops->gemm_fp8_tiles(d, rp, in, out, 1.0f, es->q, st->fbwd, es->qs,
                           mw(st, dm, layer, j, le, 1), st->ffwd, msv(st, dm, layer, j, le, 1),
                           1, 0.0f, dx, d->act, in);
    /* dW_e (+)= dY_e^T X_e, X_e^T tiled along the tokens */
    d->ops->fp8_quantize_tiles(d, NULL, NULL, es->q, es->qs, padded(m, es, X, r0, rows, in), rp,
                               in, 0, st->ffwd);
    float *dw = np == 1 ? dW0 + (size_t)le * piece : es->wg;
    d->ops->gemm_fp8_tiles(d, out, in, rp, 1.0f, es->qt, st->fbwd, es->qts, es->q, st->ffwd,
                           es->qs, 0, np == 1 ? beta : 0.0f, dw, GL_DT_F32, in);
    for (int k = 0; np == 2 && k < 2; k++) {
        float *to = (k ? dW1 : dW0) + (size_t)le * piece;
        if (beta == 0)
            d->ops->copy(d, to, es->wg + k * piece, piece * sizeof(float));
        else
            d->ops->add_f32(d, to, es->wg + k * piece, piece);
    }
}

/* The number of experts of the map with rows (those a loop visits). */
static int routed_experts(const gl_moe_map *map)
{
    int n = 0;
    for (int le = 0; le < map->E; le++)
        n += map->offsets_host[le + 1] > map->offsets_host[le];
    return n;
}

/*
 * Where an MoE layer's expert products run (gl_model_fp8_moe_fwd, _bwd):
 * on the lanes of ops.h (moe_lanes says how many), the routed experts in
 * contiguous blocks, one a lane, balanced by rows (an expert goes to the
 * lane its middle row falls in), each lane taking its experts in order.
 * Each lane quantizes into its own scratch, and each expert's tensors
 * (records, amax slots, rows of Y, dX and dW) are its own.
 *
 * An expert's product has its padded rows, rp, the last rp - rows of
 * them exact zeros (its operand's padding rows are zero).  It is written in
 * place, the zero rows spilling onto the next experts' first rows, when
 * those rows are its lane's: the lane writes them again afterwards, with
 * their own products.  Otherwise (the spill would pass the lane's last
 * row: the last expert of a block) the product goes to the lane's scratch
 * and its rows are copied out.  Y and dX are never the operands' buffers
 * (moe.c), so a spill clobbers no input.
 */
typedef struct {
    int n;                      /* lanes granted */
    int end[GL_LANES_MAX];      /* the row after each lane's last expert's */
    const int32_t *off;         /* the map's host offsets */
    int64_t first, total;       /* off[0], and the rows of every expert */
} lane_plan;

/* The lane of expert le (which has rows). */
static int plan_lane(const lane_plan *lp, int le)
{
    int64_t rows = lp->off[le + 1] - lp->off[le];
    int64_t mid = lp->off[le] - lp->first + rows / 2;
    int lane = (int)(lp->n * mid / lp->total);
    return lane < lp->n ? lane : lp->n - 1;
}

/* Fork the lanes for the map's experts and make their scratch. */
static lane_plan lanes_begin(gl_model *m, const gl_moe_map *map)
{
    gl_dev *d = m->d;
    const int32_t *off = map->offsets_host;
    lane_plan lp = { .off = off, .first = off[0], .total = off[map->E] - off[0] };
    lp.n = d->ops->lanes_fork(d, moe_lanes(m, routed_experts(map)));
    moe_scratch(m, map->rows_max, lp.n);
    for (int le = 0; le < map->E; le++)
        if (off[le + 1] > off[le])
            lp.end[plan_lane(&lp, le)] = off[le + 1];
    return lp;
}

/* Where expert le's product [rp, cols] goes: its rows of Y [.., cols]
 * when its padding rows spill onto its lane's rows only, else the lane's
 * scratch es->out. */
static void *lane_out(gl_model *m, const lane_plan *lp, int le, int lane, void *Y, int cols,
                      const struct escratch *es)
{
    int r0 = lp->off[le], rows = lp->off[le + 1] - r0;
    if (r0 + epad_rows(m->fp8, rows) <= lp->end[lane])
        return gl_act_at(m, Y, (size_t)r0 * cols);
    return es->out;
}

void gl_model_fp8_moe_fwd(gl_model *m, int layer, int j, void *Y, const void *X,
                          const gl_moe_map *map)
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int out, in;
    mshape(dm, j, &out, &in);
    if (!st->efresh[layer])
        gl_die("internal error: FP8 experts of layer %d run before their weights are "
               "quantized", layer);
    lane_plan lp = lanes_begin(m, map);
    const int32_t *off = map->offsets_host;
    for (int le = 0; le < map->E; le++) {
        int e = dm->e0 + le, r0 = off[le], rows = off[le + 1] - off[le];
        int rp = epad_rows(st, rows);
        if (rows <= 0)
            continue;
        int lane = plan_lane(&lp, le);
        struct escratch *es = &st->es[lane];
        d->ops->lane_use(d, lane);
        /* Y_e [rp, out] = X_e W_e^T */
        void *y = lane_out(m, &lp, le, lane, Y, out, es);
        if (st->ewsv) {
            block_moe_fwd(m, es, layer, j, le, y, X, r0, rows, out, in);
        } else {
            mquant_x(m, layer, j, e, X, r0, rows, in, es->q, NULL);
            d->ops->gemm_fp8_ragged(d, 0, rp, out, in, 1.0f, es->q, st->ffwd,
                                    rec(st->rec_f, mfwd_x(st, layer, e, j)) + R_SINV,
                                    mw(st, dm, layer, j, le, 0), st->ffwd,
                                    rec(st->rec_f, mfwd_w(st, layer, e, j)) + R_SINV, 0.0f, y,
                                    d->act, out, 1);
        }
        if (y == es->out)
            d->ops->copy(d, gl_act_at(m, Y, (size_t)r0 * out), y,
                         (size_t)rows * out * d->act_bytes);
    }
    d->ops->lanes_join(d, lp.n);
}

void gl_model_fp8_moe_bwd(gl_model *m, int layer, int j, void *dX, float *dW0, float *dW1,
                          float beta, const void *dY, const void *X, const gl_moe_map *map)
{
    gl_fp8_state *st = m->fp8;
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int out, in;
    mshape(dm, j, &out, &in);
    if (!st->efresh[layer])
        gl_die("internal error: FP8 experts of layer %d run before their weights are "
               "quantized", layer);
    int np = dW1 ? 2 : 1, po = out / np;        /* dW in pieces of po rows */
    const int32_t *off = map->offsets_host;
    for (int le = 0; le < map->E && beta == 0; le++) {
        if (off[le + 1] > off[le])
            continue;
        /* no rows, no gradient: a written one is zero */
        for (int k = 0; k < np; k++)
            d->ops->zero(d, (k == 0 ? dW0 : dW1) + (size_t)le * po * in,
                         (size_t)po * in * sizeof(float));
    }
    lane_plan lp = lanes_begin(m, map);
    for (int le = 0; le < map->E; le++) {
        int e = dm->e0 + le, r0 = off[le], rows = off[le + 1] - off[le];
        int rp = epad_rows(st, rows);
        if (rows <= 0)
            continue;
        int lane = plan_lane(&lp, le);
        struct escratch *es = &st->es[lane];
        d->ops->lane_use(d, lane);
        void *dx = lane_out(m, &lp, le, lane, dX, in, es);
        if (st->ewsv) {
            block_moe_bwd(m, es, layer, j, le, dx, dW0, dW1, beta, dY, X, r0, rows, out, in);
            if (dx == es->out)
                d->ops->copy(d, gl_act_at(m, dX, (size_t)r0 * in), dx,
                             (size_t)rows * in * d->act_bytes);
            continue;
        }
        int g = mbwd_dy(st, layer, e, j);
        float *gsinv = rec(st->rec_b, g) + R_SINV;
        /* dY_e: rows for the data gradient, transposed for the weight's */
        quant_rows(m, st->hist_b + g, rec(st->rec_b, g), st->fbwd, es->q, es->qt,
                   gl_act_at(m, dY, (size_t)r0 * out), rows, rp, out, mdy_sliced(m, j), 1);
        /* dX_e [rp, in] = dY_e W_e: A = dY_e, B = W_e^T [in, out] */
        d->ops->gemm_fp8_ragged(d, 0, rp, in, out, 1.0f, es->q, st->fbwd, gsinv,
                                mw(st, dm, layer, j, le, 1), st->ffwd,
                                rec(st->rec_f, mfwd_w(st, layer, e, j)) + R_SINV, 0.0f, dx,
                                d->act, in, 0);
        if (dx == es->out)
            d->ops->copy(d, gl_act_at(m, dX, (size_t)r0 * in), dx,
                         (size_t)rows * in * d->act_bytes);
        /* dW_e (+)= dY_e^T X_e, piece by piece (fc1's gate rows, then up's):
         * A = rows of dY_e^T [out, rp], B = X_e^T [in, rp] */
        mquant_x(m, layer, j, e, X, r0, rows, in, NULL, es->q);
        for (int k = 0; k < np; k++) {
            float *dw = (k == 0 ? dW0 : dW1) + (size_t)le * po * in;
            d->ops->gemm_fp8_ragged(d, 1, po, in, rp, 1.0f, es->qt + (size_t)k * po * rp,
                                    st->fbwd, gsinv, es->q, st->ffwd,
                                    rec(st->rec_f, mfwd_x(st, layer, e, j)) + R_SINV, beta,
                                    dw, GL_DT_F32, in, 0);
        }
    }
    d->ops->lanes_join(d, lp.n);
}
