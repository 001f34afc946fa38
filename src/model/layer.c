/*
 * layer.c: forward and backward of a chunk -- embedding, decoder layers,
 * final norm, LM head and cross-entropy -- on one micro-batch (model.h).
 *
 * Notation: n tokens of the micro-batch, nl of them in per-token regions
 * (n / TP under sequence parallelism), h hidden, W [out, in] and
 * Y = X W^T.  One decoder layer, with its tensor-parallel communication:
 *
 *   a   = rmsnorm(x) w_attn                [nl, h]  -> all-gather (SP)      [n, h]
 *   qkv = a Wqkv^T                         [n, (hq + 2 hkv) D]   column-parallel
 *   q,k = rope(q), rope(k)
 *   o   = softmax(q k^T / sqrt(D), causal) v      (GQA)  [n, hq D]
 *   y   = o Wo^T                           [n, h] partial sums   row-parallel
 *   xm  = x + reduce(y)      reduce = reduce-scatter (SP) or all-reduce
 *   mg  = rmsnorm(xm) w_mlp                -> all-gather (SP)
 *   gu  = mg Wgu^T                         [n, 2 fl]             column-parallel
 *   s   = silu(gate) * up                  [n, fl]
 *   out = xm + reduce(s Wdown^T)                                 row-parallel
 *
 * That is the Llama form.  Megatron's GPT form (model.h's dims: layernorm,
 * swiglu, lin_bias, qkv_bias, learned_pos) changes it in place:
 *
 *   - norm = LayerNorm (weight, or 1 + weight with 1p, and bias);
 *   - qkv gets its bias before RoPE (RoPE only with --position-embedding-type
 *     rope);
 *   - the MLP is gu = mg Wup^T [n, fl], s = gelu(gu + b_up) (tanh);
 *   - each sublayer ends in Megatron's bias-dropout-add on the own rows,
 *     xm = x + dropout(reduce(y) + bo): the row-parallel bias is added once,
 *     after the TP reduction, and hidden dropout's masks are keyed by the
 *     element's place in the iteration's global batch (hidden_dp);
 *   - the embedding's output gets the learned positions of its own rows,
 *     then dropout;
 *   - the attention's bias-dropout-add and the MLP's LayerNorm are one op,
 *     bda_layernorm (the same results as the two, one pass fewer on a GPU);
 *   - with biases, the MLP's first product, bias and GeLU are one op,
 *     linear_gelu_fwd, and gu is kept with its bias added; the backward
 *     from the down projection's input gradient through the GeLU is
 *     linear_dgelu_bwd (gelu_fused says when; cuBLASLt epilogues on a
 *     GPU).
 *
 * --qk-layernorm (Qwen3; Megatron's q_layernorm and k_layernorm) puts an
 * RMSNorm over each head of q and of k between the QKV product (and its
 * bias) and RoPE: qn = headnorm(q) w_q, kn = headnorm(k) w_k, written
 * apart from qkv (which keeps the normalised inputs for the backward)
 * into qkn [n, (hq + hkv) D]; RoPE turns qkn, and attention reads q and k
 * there, v in qkv.  The weights are replicated over TP, each rank's
 * heads adding their share of the gradients (summed over TP by the
 * caller: gl_model_tp_sum_range).
 *
 * Backward runs the same steps in reverse.  The gradient of a row-parallel
 * output is all-gathered (SP) or used as is (it is already the full
 * gradient on every TP rank); the gradient of a column-parallel input is
 * reduce-scattered (SP) or all-reduced; the residual's gradient is added
 * in place by rmsnorm_bwd (accumulate_dx).  Weight gradients (fp32) go
 * into the model's gradient buffer: the iteration's first product of a
 * weight writes it, later ones add (gl_model_grad_beta); the norms' and
 * biases' kernels add.
 *
 * Recomputation (model.h) re-runs the very same kernels on the very same
 * inputs, so what it rebuilds is bit for bit what the forward wrote:
 * selective rebuilds a, mg (norm, then all-gather under SP) and s inside
 * layer_bwd just before their use; full re-runs layer_fwd over a group
 * of layers from the group's kept input before the group's backward.
 */
#include <config.h>

#include <math.h>

#include "base/log.h"
#include "model/layer.h"
#include "model/model.h"
#include "model/moe.h"

#define OPS (m->d->ops)
#define DIMS (&m->plan->dm)

static void *W(const gl_model *m, size_t off)
{
    return gl_model_weight(m, off);
}

static float *G(const gl_model *m, size_t off)
{
    return gl_model_grad(m, off);
}

/* Where a rank's own nl rows of a gathered [n, h] buffer begin. */
static void *own_rows(const gl_model *m, void *full)
{
    const gl_model_dims *dm = DIMS;
    return dm->sp ? gl_act_at(m, full, (size_t)dm->tp_rank * dm->nl * dm->h) : full;
}

/* [nl, h] own rows already in place -> [n, h] on every TP rank (SP). */
static void gather_rows(gl_model *m, void *full)
{
    const gl_model_dims *dm = DIMS;
    if (!dm->sp)
        return;
    gl_all_gather(m->tp, own_rows(m, full), full, (size_t)dm->nl * dm->h,
                  m->d->act, m->d->stream);
}

/* Sum the TP partial sums of full [n, h]; returns where the rank's
 * [nl, h] rows of the sum are: dst under SP (reduce-scatter), full
 * itself otherwise (all-reduce in place; nothing when TP = 1). */
static void *reduce_rows(gl_model *m, void *full, void *dst)
{
    const gl_model_dims *dm = DIMS;
    if (dm->sp) {
        gl_reduce_scatter(m->tp, full, dst, (size_t)dm->nl * dm->h, m->d->act,
                          GL_OP_SUM, m->d->stream);
        return dst;
    }
    if (m->tp)
        gl_all_reduce(m->tp, full, full, (size_t)dm->n * dm->h, m->d->act,
                      GL_OP_SUM, m->d->stream);
    return full;
}

/* Y[n, out] = X[n, in] W^T. */
static void linear_fwd(gl_model *m, void *Y, const void *X, const void *Wt,
                       int n, int out, int in)
{
    OPS->gemm(m->d, 0, 1, n, out, in, 1.0f, X, in, Wt, in, 0.0f, Y, m->d->act, out);
}

/* dX[n, in] = dY[n, out] W;  dW[out, in] (+)= dY^T X (fp32), dW the
 * gradient at w_off, written by the iteration's first product
 * (gl_model_grad_beta). */
static void linear_bwd(gl_model *m, void *dX, size_t w_off, const void *dY,
                       const void *X, const void *Wt, int n, int out, int in)
{
    if (dX)
        OPS->gemm(m->d, 0, 0, n, in, out, 1.0f, dY, out, Wt, in, 0.0f, dX, m->d->act, in);
    OPS->gemm(m->d, 1, 0, out, in, n, 1.0f, dY, out, X, in,
              gl_model_grad_beta(m, w_off, (size_t)out * in), G(m, w_off), GL_DT_F32, in);
}

/* A decoder layer's linear `lin` (fp8.c's numbering: 0 QKV, 1 output
 * projection, 2 gate/up, 3 down): in FP8 when its layer is, else as
 * above. */
static void dec_fwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y, const void *X,
                    const void *Wt, int n, int out, int in)
{
    if (gl_model_fp8_layer(m, layer))
        gl_model_fp8_fwd(m, A, layer, lin, Y, X, n, out, in);
    else
        linear_fwd(m, Y, X, Wt, n, out, in);
}

static void dec_bwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX, size_t w_off,
                    const void *dY, const void *X, const void *Wt, int n, int out, int in)
{
    if (gl_model_fp8_layer(m, layer))     /* X^T kept by the forward */
        gl_model_fp8_bwd(m, A, layer, lin, dX, G(m, w_off),
                         gl_model_grad_beta(m, w_off, (size_t)out * in), dY, n, out, in);
    else
        linear_bwd(m, dX, w_off, dY, X, Wt, n, out, in);
}

/* y [rows, h] = norm(x): RMSNorm (weight at w_off), or LayerNorm (weight
 * at w_off, bias at b_off, mean kept); rstd [rows] is written too. */
static void norm_fwd(gl_model *m, void *y, float *mean, float *rstd, const void *x,
                     size_t w_off, size_t b_off, int rows)
{
    const gl_model_dims *dm = DIMS;
    if (dm->layernorm)
        OPS->layernorm_fwd(m->d, y, mean, rstd, x, W(m, w_off), W(m, b_off), rows, dm->h,
                           (float)dm->eps, dm->one_p);
    else
        OPS->rmsnorm_fwd(m->d, y, rstd, x, W(m, w_off), rows, dm->h, (float)dm->eps);
}

/* dx (+)= the gradient of norm_fwd's input (accumulate: added to dx, the
 * residual's gradient), its weight's (and bias's) gradients added. */
static void norm_bwd(gl_model *m, void *dx, const void *dy, const void *x, const float *mean,
                     const float *rstd, size_t w_off, size_t b_off, int rows, int accumulate)
{
    const gl_model_dims *dm = DIMS;
    if (dm->layernorm) {
        OPS->layernorm_bwd(m->d, dx, G(m, w_off), G(m, b_off), dy, x, W(m, w_off), mean, rstd,
                           rows, dm->h, dm->one_p, accumulate);
        gl_grads_ready(m, b_off, (size_t)dm->h);
    } else {
        OPS->rmsnorm_bwd(m->d, dx, G(m, w_off), dy, x, W(m, w_off), rstd, rows, dm->h,
                         accumulate);
    }
    gl_grads_ready(m, w_off, (size_t)dm->h);
}

/* Ask for a norm's weight (and LayerNorm's bias). */
static void need_norm(gl_model *m, size_t w_off, size_t b_off)
{
    gl_need_weights(m, w_off, (size_t)DIMS->h);
    if (DIMS->layernorm)
        gl_need_weights(m, b_off, (size_t)DIMS->h);
}

/* full [n, h] = norm(x [nl, h]), gathered over TP under SP; mean and
 * rstd [nl] are written too. */
static void norm_gathered(gl_model *m, void *full, float *mean, float *rstd, const void *x,
                          size_t w_off, size_t b_off)
{
    norm_fwd(m, own_rows(m, full), mean, rstd, x, w_off, b_off, DIMS->nl);
    gather_rows(m, full);
}

/* Dropout sites of a layer (gl_dropout's and gl_attn_dropout's site);
 * the embedding's output is site 0 of layer key 0, decoder layer l's are
 * of layer key l + 1. */
enum { SITE_ATTENTION_OUT = 0, SITE_MLP_OUT = 1, SITE_ATTENTION_PROBS = 2 };

/* Fill dp for hidden dropout on the rank's own [nl, h] rows of micro-
 * batch mb at (key, site); NULL when nothing is dropped (rate 0, or a
 * forward-only pass).
 *
 * The mask's element is (row, column) of the full logical tensor of the
 * iteration: rows are the tokens of the global batch, sample after sample
 * (the sampler's order: gl_batch_sample_index), columns the h features.
 * mb->row0 is the micro-batch's first token there, which already places
 * the micro-batch among the data-parallel ranks and the micro-batches of
 * the iteration (so DP size, the distributed optimizer and the number of
 * micro-batches do not move a token's row); under sequence parallelism
 * this rank holds rows tp_rank nl .. of the micro-batch's n; without it
 * every TP rank holds all n rows and draws the same mask; the key holds
 * the global layer, so PP stages and virtual chunks draw what one stage
 * would.  Recomputation calls this again with the same key: the same
 * mask.
 *
 * Under context parallelism the own rows are not one run of the full
 * tensor's: dp->row0 then numbers them as the rank's rows (its S of each
 * sample, sample after sample), and the ops are called piece by piece
 * (dp_piece), each piece a run of one chunk at its global rows. */
static const gl_dropout *hidden_dp(gl_model *m, const gl_mb *mb, int key, int site,
                                   gl_dropout *dp)
{
    const gl_model_dims *dm = DIMS;
    if (m->no_dropout || dm->hidden_dropout <= 0)
        return NULL;
    dp->seed = m->dropout_seed;
    dp->iteration = m->iteration;
    dp->layer = (uint32_t)key;
    dp->site = (uint32_t)site;
    dp->p = dm->hidden_dropout;
    dp->row0 = mb->row0 + (dm->sp ? (long)dm->tp_rank * dm->nl : 0);
    dp->col0 = 0;
    dp->width = dm->h;
    return dp;
}

/* Fill dp for attention dropout (--attention-dropout) on the softmax
 * probabilities of layer `layer` for micro-batch mb; NULL when nothing is
 * dropped (rate 0, or a forward-only pass).
 *
 * The mask's element is (sample, head, query, key) of the iteration's
 * full probability tensor (gl_attn_dropout): the micro-batch's first
 * sample is mb->row0 / S among the global batch's samples (placing it
 * among data-parallel ranks and micro-batches, as for hidden dropout),
 * and this rank's query heads are tp_rank hq .. of the model's tp hq.
 * Attention sees whole sequences (sequence parallelism gathers them
 * first), the key holds the global layer, and recomputation redraws the
 * same mask from the same key. */
static const gl_attn_dropout *attn_dp(gl_model *m, const gl_mb *mb, int layer,
                                      gl_attn_dropout *dp)
{
    const gl_model_dims *dm = DIMS;
    if (m->no_dropout || dm->attention_dropout <= 0)
        return NULL;
    dp->seed = m->dropout_seed;
    dp->iteration = m->iteration;
    dp->layer = (uint32_t)(layer + 1);
    dp->site = SITE_ATTENTION_PROBS;
    dp->p = dm->attention_dropout;
    dp->b0 = mb->row0 / dm->S;
    dp->h0 = (long)dm->tp_rank * dm->hq;
    dp->heads = (long)dm->tp * dm->hq;
    dp->seq = dm->Sfull;        /* for context parallelism's block ops */
    return dp;
}

/* The piece of hidden dropout dp (hidden_dp's) that begins at own row i
 * of a call over rows [0, n): *piece is dp placed at the piece's first
 * row in the full tensor; returns the piece's rows.  Without context
 * parallelism the rows from i on are one piece.  With it, own row i is
 * row t = R mod S of the rank's sample R / S (R = dp->row0 + i), at
 * global row (R / S) Sfull + position(t), and the piece runs to the end
 * of t's chunk (gl_model_cp_position). */
static int dp_piece(const gl_model *m, const gl_dropout *dp, int i, int n, gl_dropout *piece)
{
    const gl_model_dims *dm = DIMS;
    *piece = *dp;
    if (dm->cp <= 1) {
        piece->row0 = dp->row0 + i;
        return n - i;
    }
    long R = dp->row0 + i;
    int t = (int)(R % dm->S), c = dm->S / 2;
    piece->row0 = R / dm->S * dm->Sfull +
                  gl_model_cp_position(dm->Sfull, dm->cp, m->cp_rank, t);
    int len = c - t % c;
    return len < n - i ? len : n - i;
}

/* y = dropout(x) over the own [nl, h] rows (in place when y is x). */
static void dropout_rows(gl_model *m, void *y, const void *x, const gl_dropout *dp)
{
    const gl_model_dims *dm = DIMS;
    gl_dropout piece;
    for (int i = 0, len; i < dm->nl; i += len) {
        len = dp_piece(m, dp, i, dm->nl, &piece);
        size_t at = (size_t)i * dm->h;
        OPS->dropout(m->d, gl_act_at(m, y, at), gl_act_at(m, (void *)x, at), len, dm->h,
                     &piece);
    }
}

/* The end of a sublayer, on the rank's own rows: Megatron's
 * bias-dropout-add, out = residual + dropout(y + b), b the row-parallel
 * linear's bias at b_off (added once, after the TP reduction), when the
 * model has biases; plain out = residual + y when it has neither biases
 * nor dropout. */
static void sublayer_end(gl_model *m, void *out, const void *residual, const void *y,
                         size_t b_off, const gl_dropout *dp)
{
    const gl_model_dims *dm = DIMS;
    if (!dm->lin_bias && !dp) {
        OPS->add(m->d, out, y, residual, (size_t)dm->nl * dm->h);
        return;
    }
    gl_dropout piece, *pp = dp ? &piece : NULL;
    for (int i = 0, len; i < dm->nl; i += len) {    /* pieces: dp_piece */
        len = dp ? dp_piece(m, dp, i, dm->nl, &piece) : dm->nl;
        size_t at = (size_t)i * dm->h;
        OPS->bias_dropout_add(m->d, gl_act_at(m, out, at), gl_act_at(m, (void *)residual, at),
                              gl_act_at(m, (void *)y, at), dm->lin_bias ? W(m, b_off) : NULL,
                              len, dm->h, pp);
    }
}

/* sublayer_end into out, then norm_gathered of out into full (mean and
 * rstd written too): in one op, bda_layernorm, where the form has
 * LayerNorm and the end is a bias-dropout-add -- the same results as the
 * two steps, one pass fewer over the rows on a GPU. */
static void sublayer_end_norm(gl_model *m, void *out, const void *residual, const void *y,
                              size_t bias_off, const gl_dropout *dp, void *full, float *mean,
                              float *rstd, size_t w_off, size_t b_off)
{
    const gl_model_dims *dm = DIMS;
    if (!dm->layernorm || !(dm->lin_bias || dp)) {
        sublayer_end(m, out, residual, y, bias_off, dp);
        norm_gathered(m, full, mean, rstd, out, w_off, b_off);
        return;
    }
    gl_dropout piece, *pp = dp ? &piece : NULL;
    void *ln = own_rows(m, full);
    for (int i = 0, len; i < dm->nl; i += len) {    /* pieces: dp_piece */
        len = dp ? dp_piece(m, dp, i, dm->nl, &piece) : dm->nl;
        size_t at = (size_t)i * dm->h;
        OPS->bda_layernorm(m->d, gl_act_at(m, out, at), gl_act_at(m, ln, at), mean + i,
                           rstd + i, gl_act_at(m, (void *)residual, at),
                           gl_act_at(m, (void *)y, at), dm->lin_bias ? W(m, bias_off) : NULL,
                           pp, W(m, w_off), W(m, b_off), len, dm->h, (float)dm->eps,
                           dm->one_p);
    }
    gather_rows(m, full);
}

/* The backward of sublayer_end from dout [nl, h] (the residual's
 * gradient, which stays as it is): returns the gradient of y, dout itself
 * or dropout(dout) in m->tmp, and adds the bias's gradient. */
static const void *sublayer_end_bwd(gl_model *m, const void *dout, size_t b_off,
                                    const gl_dropout *dp)
{
    const gl_model_dims *dm = DIMS;
    const void *dy = dout;
    if (dp) {
        dropout_rows(m, m->tmp, dout, dp);
        dy = m->tmp;
    }
    if (dm->lin_bias) {
        OPS->bias_grad(m->d, G(m, b_off), dy, dm->nl, dm->h);
        gl_grads_ready(m, b_off, (size_t)dm->h);
    }
    return dy;
}

/* s [n, fl] = the MLP's activation of gu [n, guw]: SwiGLU (gu's bias was
 * added into gu by the forward), or GeLU of gu + bias. */
static void act_fwd(gl_model *m, const gl_layer_offs *lo, void *s, const void *gu)
{
    const gl_model_dims *dm = DIMS;
    if (dm->swiglu)
        OPS->swiglu_fwd(m->d, s, gu, dm->n, dm->fl);
    else
        OPS->gelu_fwd(m->d, s, gu, dm->lin_bias ? W(m, lo->bgu) : NULL, dm->n, dm->fl);
}

/* Whether the layer's GeLU MLP runs through linear_gelu_fwd and
 * linear_dgelu_bwd, its first product, bias and GeLU in one op (A->gu then
 * holds gu + bias): in the GeLU form with biases, unless the layer is in
 * FP8, or selective recomputation rebuilds s from A->gu with gelu_fwd
 * (whose bits a GPU's fused product need not give), or the model was
 * asked for the separate kernels (gelu_epilogue). */
static int gelu_fused(const gl_model *m, int layer)
{
    const gl_model_dims *dm = DIMS;
    return !dm->swiglu && dm->lin_bias && m->gelu_epilogue &&
           m->recompute != GL_RECOMPUTE_SELECTIVE && !gl_model_fp8_layer(m, layer);
}

/*
 * FP8 operands made by their producers (model.h: gl_model_fp8_fused):
 * under delayed scaling an FP8 layer's RMSNorms write the QKV and gate/up
 * products' X already quantized, and SwiGLU the down projection's X (and
 * in the backward the gate/up product's dY), instead of a bf16 tensor
 * that fp8_quantize reads again.  Those bf16 tensors (a, mg, s) are then
 * not written: an FP8 layer's backward reads the FP8 X^T its forward
 * kept, and selective recomputation rebuilds nothing for it.  The norms
 * fuse only without SP (under SP the bf16 rows are gathered between the
 * norm and the product); LayerNorm and GeLU models take the two passes.
 */
static int fused_norm(gl_model *m, int layer)
{
    return gl_model_fp8_fused(m, layer) && !DIMS->layernorm && !DIMS->sp;
}

static int fused_act(gl_model *m, int layer)
{
    return gl_model_fp8_fused(m, layer) && DIMS->swiglu;
}

/* Y [n, out] = linear lin of norm(x) (full [n, h] the norm's output,
 * gathered under SP; see norm_gathered and dec_fwd). */
static void norm_linear_fwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y,
                            void *full, float *mean, float *rstd, const void *x, size_t w_off,
                            size_t b_off, const void *Wt, int out)
{
    const gl_model_dims *dm = DIMS;
    if (fused_norm(m, layer)) {
        gl_fp8_out o;
        gl_model_fp8_x_out(m, A, layer, lin, 0, &o);
        OPS->rmsnorm_fwd_fp8(m->d, NULL, rstd, x, W(m, w_off), dm->nl, dm->h, (float)dm->eps,
                             &o);
        gl_model_fp8_fwd_made(m, A, layer, lin, Y, dm->n, out, dm->h);
        return;
    }
    norm_gathered(m, full, mean, rstd, x, w_off, b_off);
    dec_fwd(m, A, layer, lin, Y, full, Wt, dm->n, out, dm->h);
}

/* QK norm (the top of this file): A->qkn from the q and k heads of
 * A->qkv, q's rstd at A->rstd_qk [n, hq] and k's after them [n, hkv]. */
static void qk_norm_fwd(gl_model *m, const gl_layer_offs *lo, gl_layer_acts *A)
{
    const gl_model_dims *dm = DIMS;
    int n = dm->n, D = dm->D;
    size_t qw = (size_t)dm->hq * D;
    OPS->head_rmsnorm_fwd(m->d, A->qkn, dm->qkw, A->rstd_qk, A->qkv, dm->qkvw,
                          W(m, lo->qk_norm), n, dm->hq, D, (float)dm->eps);
    OPS->head_rmsnorm_fwd(m->d, gl_act_at(m, A->qkn, qw), dm->qkw,
                          A->rstd_qk + (size_t)n * dm->hq, gl_act_at(m, A->qkv, qw), dm->qkvw,
                          W(m, lo->qk_norm + D), n, dm->hkv, D, (float)dm->eps);
}

/* Its backward, in place on the q and k heads of m->dqkv (the gradient
 * w.r.t. qkn in, w.r.t. the norm's input out); the weights' gradients
 * are added. */
static void qk_norm_bwd(gl_model *m, const gl_layer_offs *lo, const gl_layer_acts *A)
{
    const gl_model_dims *dm = DIMS;
    int n = dm->n, D = dm->D;
    size_t qw = (size_t)dm->hq * D;
    OPS->head_rmsnorm_bwd(m->d, m->dqkv, dm->qkvw, G(m, lo->qk_norm), m->dqkv, A->qkv,
                          dm->qkvw, W(m, lo->qk_norm), A->rstd_qk, n, dm->hq, D);
    OPS->head_rmsnorm_bwd(m->d, gl_act_at(m, m->dqkv, qw), dm->qkvw, G(m, lo->qk_norm + D),
                          gl_act_at(m, m->dqkv, qw), gl_act_at(m, A->qkv, qw), dm->qkvw,
                          W(m, lo->qk_norm + D), A->rstd_qk + (size_t)n * dm->hq, n, dm->hkv,
                          D);
    gl_grads_ready(m, lo->qk_norm, 2 * (size_t)D);
}

/* One layer's forward: out [nl, h] from x [nl, h], keeping A.  With out
 * NULL (the last layer of a group that full recomputation re-runs) it
 * stops once A is complete: the down projection and its reduction only
 * make the output, which is already kept as the next group's input. */
static void layer_fwd(gl_model *m, const gl_mb *mb, int layer, const gl_layer_offs *lo,
                      gl_layer_acts *A, const void *x, void *out)
{
    gl_dropout dpa, dpm;
    gl_attn_dropout adp;
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int n = dm->n, h = dm->h, D = dm->D;
    int qw = dm->hq * D;

    need_norm(m, lo->attn_norm, lo->attn_norm_b);
    need_norm(m, lo->mlp_norm, lo->mlp_norm_b);
    /* the split tensors with their biases */
    gl_need_weights(m, lo->qkv,
                    (lo->moe ? gl_moe_split_end(m, lo) : lo->down + (size_t)h * dm->fl) -
                    lo->qkv);
    if (lo->moe)
        gl_moe_need(m, lo);
    if (dm->lin_bias) {
        gl_need_weights(m, lo->bo, (size_t)h);
        gl_need_weights(m, lo->bdown, (size_t)h);
    }
    if (dm->qk_norm)
        gl_need_weights(m, lo->qk_norm, 2 * (size_t)D);
    if (gl_model_fp8_layer(m, layer)) {
        /* an MoE layer's MLP weights are its experts' (moe.c) */
        const void *w4[4] = {W(m, lo->qkv), W(m, lo->wo), lo->moe ? NULL : W(m, lo->gate_up),
                             lo->moe ? NULL : W(m, lo->down)};
        gl_model_fp8_weights(m, layer, w4);
    }

    /* attention; the biases are added outside the products (FP8 ones
     * included) */
    norm_linear_fwd(m, A, layer, 0, A->qkv, A->a, A->mean1, A->rstd1, x, lo->attn_norm,
                    lo->attn_norm_b, W(m, lo->qkv), dm->qkvw);
    if (dm->qkv_bias)
        OPS->bias_add(d, A->qkv, W(m, lo->bqkv), n, dm->qkvw);
    void *q = A->qkv;               /* q and k heads, row stride ldq */
    int ldq = dm->qkvw;
    if (dm->qk_norm) {
        qk_norm_fwd(m, lo, A);
        q = A->qkn;
        ldq = dm->qkw;
    }
    if (dm->rope)
        OPS->rope_fwd(d, q, ldq, dm->B, dm->S, dm->hq + dm->hkv, D, m->cos, m->sin);
    if (m->cp) {                /* the other ranks' keys too (cp.c) */
        gl_attn_in in = { q, ldq, gl_act_at(m, A->qkv, (size_t)(dm->hq + dm->hkv) * D),
                          dm->qkvw };
        gl_model_cp_attn_fwd(m, A->o, A->lse, &in, attn_dp(m, mb, layer, &adp));
    } else
        OPS->attn_fwd(d, A->o, qw, A->lse, q, ldq, gl_act_at(m, q, (size_t)qw), ldq,
                      gl_act_at(m, A->qkv, (size_t)(dm->hq + dm->hkv) * D), dm->qkvw,
                      dm->B, dm->S, dm->hq, dm->hkv, D, (float)(1.0 / sqrt((double)D)),
                      attn_dp(m, mb, layer, &adp));
    dec_fwd(m, A, layer, 1, m->y, A->o, W(m, lo->wo), n, h, qw);
    /* ... its end and the MLP's norm: after the bias-dropout-add (one
     * kernel with it on GPUs in the GPT form), or, where the norm writes
     * the MLP's FP8 operand itself, with the MLP's first product */
    if (fused_norm(m, layer) && !lo->moe) {
        sublayer_end(m, A->xm, x, reduce_rows(m, m->y, A->xm), lo->bo,
                     hidden_dp(m, mb, layer + 1, SITE_ATTENTION_OUT, &dpa));
        norm_linear_fwd(m, A, layer, 2, A->gu, A->mg, A->mean2, A->rstd2, A->xm,
                        lo->mlp_norm, lo->mlp_norm_b, W(m, lo->gate_up), dm->guw);
    } else {
        sublayer_end_norm(m, A->xm, x, reduce_rows(m, m->y, A->xm), lo->bo,
                          hidden_dp(m, mb, layer + 1, SITE_ATTENTION_OUT, &dpa), A->mg,
                          A->mean2, A->rstd2, lo->mlp_norm, lo->mlp_norm_b);
        if (lo->moe) {          /* the experts' partial sums into y (moe.c) */
            gl_moe_fwd(m, mb, layer, lo, A, A->mg, m->y);
            if (out)
                sublayer_end(m, out, A->xm, reduce_rows(m, m->y, out), lo->bdown,
                             hidden_dp(m, mb, layer + 1, SITE_MLP_OUT, &dpm));
            return;
        }
        if (gelu_fused(m, layer))       /* the product, its bias and GeLU: s */
            OPS->linear_gelu_fwd(d, A->s, A->gu, A->mg, W(m, lo->gate_up), W(m, lo->bgu), n,
                                 dm->fl, h);
        else
            dec_fwd(m, A, layer, 2, A->gu, A->mg, W(m, lo->gate_up), n, dm->guw, h);
    }

    /* MLP */
    if (dm->swiglu && dm->lin_bias)
        OPS->bias_add(d, A->gu, W(m, lo->bgu), n, dm->guw);
    if (fused_act(m, layer)) {
        /* s made in FP8 only: X of the down projection, or (without out)
         * its X^T alone */
        gl_fp8_out o;
        gl_model_fp8_x_out(m, A, layer, 3, !out, &o);
        OPS->swiglu_fwd_fp8(d, NULL, A->gu, n, dm->fl, &o);
        if (!out)
            return;
        gl_model_fp8_fwd_made(m, A, layer, 3, m->y, n, h, dm->fl);
    } else {
        if (!gelu_fused(m, layer))
            act_fwd(m, lo, A->s, A->gu);
        if (!out) {
            /* an FP8 down projection's backward reads s as FP8 X^T */
            if (gl_model_fp8_layer(m, layer))
                gl_model_fp8_keep_x(m, A, layer, 3, A->s, n, dm->fl);
            return;
        }
        dec_fwd(m, A, layer, 3, m->y, A->s, W(m, lo->down), n, h, dm->fl);
    }
    sublayer_end(m, out, A->xm, reduce_rows(m, m->y, out), lo->bdown,
                 hidden_dp(m, mb, layer + 1, SITE_MLP_OUT, &dpm));
}

/* dy [nl, h]: gradient w.r.t. the layer's output in, w.r.t. its input out. */
static void layer_bwd(gl_model *m, const gl_mb *mb, int layer, const gl_layer_offs *lo,
                      gl_layer_acts *A, const void *x, void *dy)
{
    gl_dropout dp;
    gl_attn_dropout adp;
    const void *dsub;
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int n = dm->n, nl = dm->nl, h = dm->h, D = dm->D;
    int qw = dm->hq * D;
    void *dz;
    /* Selective recomputation rebuilds a, mg and s, which only the weight
     * gradients read: an FP8 layer's read the FP8 X^T its forward kept,
     * and rebuild nothing (two norms, a SwiGLU and, under SP, two
     * all-gathers saved per layer and micro-batch). */
    int sel = m->recompute == GL_RECOMPUTE_SELECTIVE && !gl_model_fp8_layer(m, layer);

    /* MLP; selective: s and mg again (rstd2 is rewritten with its own
     * value); an MoE layer's backward reads mg itself, FP8 or not */
    if (sel || (lo->moe && m->recompute == GL_RECOMPUTE_SELECTIVE)) {
        if (!lo->moe)           /* an MoE layer keeps its own (moe.c) */
            act_fwd(m, lo, A->s, A->gu);
        norm_gathered(m, A->mg, A->mean2, A->rstd2, A->xm, lo->mlp_norm, lo->mlp_norm_b);
    }
    dsub = sublayer_end_bwd(m, dy, lo->bdown, hidden_dp(m, mb, layer + 1, SITE_MLP_OUT, &dp));
    dz = (void *)dsub;
    if (dm->sp) {
        OPS->copy(d, own_rows(m, m->dfull), dsub, (size_t)nl * h * d->act_bytes);
        gather_rows(m, m->dfull);
        dz = m->dfull;
    }
    if (lo->moe) {
        gl_moe_bwd(m, mb, layer, lo, A, A->mg, dz, m->y);
        void *dmg = reduce_rows(m, m->y, m->tmp);
        gl_moe_router_dx(m, lo, dmg);
        norm_bwd(m, dy, dmg, A->xm, A->mean2, A->rstd2, lo->mlp_norm, lo->mlp_norm_b, nl, 1);
        goto attention;
    }
    /* the down projection; fused: its weight gradient alone here, its
     * input gradient with the GeLU's backward and the bias's next */
    int fused = gelu_fused(m, layer);
    dec_bwd(m, A, layer, 3, fused ? NULL : m->ds, lo->down, dz, A->s, W(m, lo->down), n, h,
            dm->fl);
    gl_grads_ready(m, lo->down, (size_t)h * dm->fl);
    if (fused) {
        OPS->linear_dgelu_bwd(d, m->dgu, G(m, lo->bgu), dz, W(m, lo->down), A->gu, n, dm->fl,
                              h);
    } else if (fused_act(m, layer)) {
        /* dgu made in FP8 (and in act only for its bias's gradient) */
        gl_fp8_out o;
        gl_model_fp8_dy_out(m, layer, 2, &o);
        OPS->swiglu_bwd_fp8(d, dm->lin_bias ? m->dgu : NULL, m->ds, A->gu, n, dm->fl, &o);
        if (dm->lin_bias)
            OPS->bias_grad(d, G(m, lo->bgu), m->dgu, n, dm->guw);
    } else if (dm->swiglu) {
        OPS->swiglu_bwd(d, m->dgu, m->ds, A->gu, n, dm->fl);
        if (dm->lin_bias)
            OPS->bias_grad(d, G(m, lo->bgu), m->dgu, n, dm->guw);
    } else {
        OPS->gelu_bwd(d, m->dgu, dm->lin_bias ? G(m, lo->bgu) : NULL, m->ds, A->gu,
                      dm->lin_bias ? W(m, lo->bgu) : NULL, n, dm->fl);
    }
    if (dm->lin_bias)
        gl_grads_ready(m, lo->bgu, (size_t)dm->guw);
    if (fused_act(m, layer))
        gl_model_fp8_bwd_made(m, A, layer, 2, m->y, G(m, lo->gate_up),
                              gl_model_grad_beta(m, lo->gate_up, (size_t)dm->guw * h), n,
                              dm->guw, h);
    else
        dec_bwd(m, A, layer, 2, m->y, lo->gate_up, m->dgu, A->mg, W(m, lo->gate_up), n,
                dm->guw, h);
    gl_grads_ready(m, lo->gate_up, (size_t)dm->guw * h);
    norm_bwd(m, dy, reduce_rows(m, m->y, m->tmp), A->xm, A->mean2, A->rstd2, lo->mlp_norm,
             lo->mlp_norm_b, nl, 1);

attention:
    /* attention; selective: a again */
    if (sel)
        norm_gathered(m, A->a, A->mean1, A->rstd1, x, lo->attn_norm, lo->attn_norm_b);
    dsub = sublayer_end_bwd(m, dy, lo->bo, hidden_dp(m, mb, layer + 1, SITE_ATTENTION_OUT, &dp));
    dz = (void *)dsub;
    if (dm->sp) {
        OPS->copy(d, own_rows(m, m->dfull), dsub, (size_t)nl * h * d->act_bytes);
        gather_rows(m, m->dfull);
        dz = m->dfull;
    }
    dec_bwd(m, A, layer, 1, m->d_o, lo->wo, dz, A->o, W(m, lo->wo), n, h, qw);
    gl_grads_ready(m, lo->wo, (size_t)h * qw);
    const void *q = dm->qk_norm ? A->qkn : A->qkv;     /* as the forward's */
    int ldq = dm->qk_norm ? dm->qkw : dm->qkvw;
    if (m->cp) {
        gl_attn_in in = { q, ldq, gl_act_at(m, A->qkv, (size_t)(dm->hq + dm->hkv) * D),
                          dm->qkvw };
        gl_model_cp_attn_bwd(m, m->dqkv, m->d_o, A->o, A->lse, &in,
                             attn_dp(m, mb, layer, &adp));
    } else
        OPS->attn_bwd(d, m->dqkv, gl_act_at(m, m->dqkv, (size_t)qw),
                      gl_act_at(m, m->dqkv, (size_t)(dm->hq + dm->hkv) * D), dm->qkvw,
                      m->d_o, qw, A->o, qw, A->lse,
                      q, ldq, gl_act_at(m, (void *)q, (size_t)qw), ldq,
                      gl_act_at(m, A->qkv, (size_t)(dm->hq + dm->hkv) * D), dm->qkvw,
                      dm->B, dm->S, dm->hq, dm->hkv, D, (float)(1.0 / sqrt((double)D)),
                      attn_dp(m, mb, layer, &adp));
    if (dm->rope)
        OPS->rope_bwd(d, m->dqkv, dm->qkvw, dm->B, dm->S, dm->hq + dm->hkv, D, m->cos,
                      m->sin);
    if (dm->qk_norm)
        qk_norm_bwd(m, lo, A);
    if (dm->qkv_bias) {
        OPS->bias_grad(d, G(m, lo->bqkv), m->dqkv, n, dm->qkvw);
        gl_grads_ready(m, lo->bqkv, (size_t)dm->qkvw);
    }
    dec_bwd(m, A, layer, 0, m->y, lo->qkv, m->dqkv, A->a, W(m, lo->qkv), n, dm->qkvw, h);
    gl_grads_ready(m, lo->qkv, (size_t)dm->qkvw * h);
    norm_bwd(m, dy, reduce_rows(m, m->y, m->tmp), x, A->mean1, A->rstd1, lo->attn_norm,
             lo->attn_norm_b, nl, 1);
}

/* Vocab-parallel lookup: each TP rank fills the rows of ids in its shard
 * (zeros elsewhere) and the sum over TP is the full lookup. */
static void embed_fwd(gl_model *m, const gl_chunk_plan *ch, const gl_mb *mb, void *x0)
{
    const gl_model_dims *dm = DIMS;
    void *full = dm->sp ? m->y : x0;
    gl_need_weights(m, ch->embed, (size_t)dm->vl * dm->h);
    OPS->embed_fwd(m->d, full, W(m, ch->embed), mb->ids, dm->n, dm->h,
                   dm->vocab_start, dm->vl);
    reduce_rows(m, full, x0);
    if (dm->learned_pos) {      /* on the own rows, after the reduction */
        gl_need_weights(m, ch->pos, (size_t)dm->P * dm->h);
        OPS->pos_embed_fwd(m->d, x0, W(m, ch->pos), m->positions, dm->nl, dm->h, dm->P);
    }
    gl_dropout dp;              /* Megatron drops the embedding's output too */
    const gl_dropout *dpp = hidden_dp(m, mb, 0, 0, &dp);
    if (dpp)
        dropout_rows(m, x0, x0, dpp);
}

static void embed_bwd(gl_model *m, const gl_chunk_plan *ch, const gl_mb *mb, void *dy)
{
    const gl_model_dims *dm = DIMS;
    gl_dropout dp;
    const gl_dropout *dpp = hidden_dp(m, mb, 0, 0, &dp);
    if (dpp)                    /* in place: nothing reads dy after this */
        dropout_rows(m, dy, dy, dpp);
    const void *dz = dy;
    if (dm->learned_pos) {
        OPS->embed_bwd(m->d, G(m, ch->pos), dy, m->positions, dm->nl, dm->h, 0, dm->P);
        gl_grads_ready(m, ch->pos, (size_t)dm->P * dm->h);
    }
    if (dm->sp) {
        OPS->copy(m->d, own_rows(m, m->dfull), dy, (size_t)dm->nl * dm->h * m->d->act_bytes);
        gather_rows(m, m->dfull);
        dz = m->dfull;
    }
    OPS->embed_bwd(m->d, G(m, ch->embed), dz, mb->ids, dm->n, dm->h, dm->vocab_start, dm->vl);
    gl_grads_ready(m, ch->embed, (size_t)dm->vl * dm->h);
}

/* Final norm, LM head (column-parallel over the vocabulary), vocab-
 * parallel cross-entropy, and at once the backward of all three: dy gets
 * the gradient w.r.t. x, the head's and the final norm's weight
 * gradients are added. */
/* Final norm, LM head and the loss of each token into m->loss, and, when
 * grad is set, the logits replaced by d loss / d logits (weighted by
 * gscale); sum(loss x lmask), or x gscale when the micro-batch has no
 * lmask, is added to *loss_acc when given. */
static void head_loss(gl_model *m, const gl_chunk_plan *ch, const gl_mb *mb,
                      const void *x, float *loss_acc, int grad)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int n = dm->n, nl = dm->nl, h = dm->h, vl = dm->vl;

    need_norm(m, ch->final_norm, ch->final_norm_b);
    gl_need_weights(m, ch->head, (size_t)vl * h);
    norm_fwd(m, own_rows(m, m->hf), m->mean_f, m->rstd_f, x, ch->final_norm, ch->final_norm_b,
             nl);
    gather_rows(m, m->hf);
    linear_fwd(m, m->logits, m->hf, W(m, ch->head), n, vl, h);
    OPS->ce_max(d, m->rowmax, m->logits, vl, n, dm->valid);
    if (m->tp)
        gl_all_reduce(m->tp, m->rowmax, m->rowmax, (size_t)n, GL_DT_F32, GL_OP_MAX, d->stream);
    OPS->ce_sum(d, m->stats, m->logits, vl, mb->targets, m->rowmax, n, dm->valid,
                dm->vocab_start);
    if (m->tp)
        gl_all_reduce(m->tp, m->stats, m->stats, 2 * (size_t)n, GL_DT_F32, GL_OP_SUM, d->stream);
    OPS->ce_bwd(d, m->loss, m->logits, vl, mb->targets, m->rowmax, m->stats,
                grad ? mb->gscale : NULL, n, vl, dm->valid, dm->vocab_start);
    if (loss_acc)
        OPS->dot_f32(d, loss_acc, m->loss, mb->lmask ? mb->lmask : mb->gscale, (size_t)n);
}

static void head_fwd_bwd(gl_model *m, const gl_chunk_plan *ch, const gl_mb *mb,
                         const void *x, void *dy, float *loss_acc)
{
    const gl_model_dims *dm = DIMS;
    int n = dm->n, nl = dm->nl, h = dm->h, vl = dm->vl;

    head_loss(m, ch, mb, x, loss_acc, 1);
    /* logits now hold d loss / d logits */
    linear_bwd(m, m->y, ch->head, m->logits, m->hf, W(m, ch->head), n, vl, h);
    if (m->plan->head_param >= 0)        /* a range shared with the embedding waits */
        gl_grads_ready(m, ch->head, (size_t)vl * h);
    norm_bwd(m, dy, reduce_rows(m, m->y, m->tmp), x, m->mean_f, m->rstd_f, ch->final_norm,
             ch->final_norm_b, nl, 0);
}

/* The forward of chunk c in slot s; the head computes the loss only, or
 * (train) its backward too. */
static void chunk_fwd(gl_model *m, int c, int s, const gl_mb *mb, float *loss_acc, int train)
{
    const gl_model_dims *dm = DIMS;
    const gl_chunk_plan *ch = &m->plan->chunk[c];
    gl_slot *sl = &m->slot[c][s];
    if (ch->has_embed)
        embed_fwd(m, ch, mb, sl->x[0]);
    for (int i = 0; i < dm->Lc; i++) {
        m->fp8_nokeep = m->rc_first[i] >= 0;
        layer_fwd(m, mb, ch->first_layer + i, &ch->layer[i], &sl->layer[i], sl->x[i],
                  sl->x[i + 1]);
    }
    m->fp8_nokeep = 0;
    if (ch->has_head && train)
        head_fwd_bwd(m, ch, mb, sl->x[dm->Lc], sl->dy, loss_acc);
    else if (ch->has_head)
        head_loss(m, ch, mb, sl->x[dm->Lc], loss_acc, 0);
}

void gl_model_forward_only(gl_model *m, int c, int s, const gl_mb *mb, float *loss_acc)
{
    m->fp8_eval = 1;
    m->no_dropout = 1;
    chunk_fwd(m, c, s, mb, loss_acc, 0);
    m->fp8_eval = 0;
    m->no_dropout = 0;
}

void gl_model_forward(gl_model *m, int c, int s, const gl_mb *mb, float *loss_acc)
{
    if (m->fwd_only)
        gl_die("internal error: gl_model_forward on a forward-only model");
    chunk_fwd(m, c, s, mb, loss_acc, 1);
}

void gl_model_backward(gl_model *m, int c, int s, const gl_mb *mb)
{
    if (m->fwd_only)
        gl_die("internal error: gl_model_backward on a forward-only model");
    const gl_model_dims *dm = DIMS;
    const gl_chunk_plan *ch = &m->plan->chunk[c];
    gl_slot *sl = &m->slot[c][s];
    /* From the last layer down, a group at a time: a layer that keeps its
     * activations is a group of its own; a recomputed group [f, i] first
     * runs its forward again from its kept input x[f], each layer writing
     * the next one's input (shared buffers, model.h), the last one
     * stopping before its output. */
    for (int i = dm->Lc - 1; i >= 0;) {
        int f = m->rc_first[i];
        m->in_recompute = 1;
        if (f >= 0)
            for (int k = f; k <= i; k++)
                layer_fwd(m, mb, ch->first_layer + k, &ch->layer[k], &sl->layer[k], sl->x[k],
                          k < i ? sl->x[k + 1] : NULL);
        m->in_recompute = 0;
        if (f < 0)
            f = i;
        for (int k = i; k >= f; k--)
            layer_bwd(m, mb, ch->first_layer + k, &ch->layer[k], &sl->layer[k], sl->x[k],
                      sl->dy);
        i = f - 1;
    }
    if (ch->has_embed)
        embed_bwd(m, ch, mb, sl->dy);
}
