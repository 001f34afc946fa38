/*
 * model-ref.h: an independent forward in double precision, written from
 * the formulas (embedding, RMSNorm, GQA attention with rotate-half RoPE,
 * SwiGLU, final norm, LM head over the real vocabulary only,
 * cross-entropy; and the GPT form's LayerNorm with its bias and 1p,
 * linear biases, GeLU with the tanh approximation, learned positions;
 * Qwen3's RMSNorm over each head of q and k before RoPE), reading the logical weights of a single-rank model
 * (TP = PP = 1, CPU device: the flat buffer is fp32 host memory) through
 * its parameter table; the test batch the gradient tests feed both
 * the model and the reference; and the model under test with its
 * finite-difference checks (ref_harness, ref_fd_tensor).  Shared by t/model-grad.c, t/model-moe.c,
 * t/train-eval-ref.c and t/eval-ref.c; functions are static (one copy per
 * test program).
 */
#ifndef T_MODEL_REF_H
#define T_MODEL_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tap.h"

/* ---- the independent reference forward, in double ---- */

typedef struct {
    const gl_model_plan *p;
    const float *w;
} ref_model;

static inline const float *ref_param(const ref_model *r, const char *name)
{
    for (int i = 0; i < r->p->nparams; i++)
        if (!strcmp(r->p->param[i].name, name))
            return r->w + r->p->param[i].offset;
    bail_out("no parameter %s", name);
}

/* The parameter called name, or NULL when the model has none. */
static inline const float *ref_param_opt(const ref_model *r, const char *name)
{
    for (int i = 0; i < r->p->nparams; i++)
        if (!strcmp(r->p->param[i].name, name))
            return r->w + r->p->param[i].offset;
    return NULL;
}

/* y = LayerNorm(x) (w or 1 + w) + b, the variance biased. */
static inline void ref_layernorm(double *y, const double *x, const float *w, const float *b,
                                 int h, double eps, int one_p)
{
    double mean = 0, var = 0;
    for (int i = 0; i < h; i++)
        mean += x[i];
    mean /= h;
    for (int i = 0; i < h; i++)
        var += (x[i] - mean) * (x[i] - mean);
    double r = 1.0 / sqrt(var / h + eps);
    for (int i = 0; i < h; i++)
        y[i] = (x[i] - mean) * r * (w[i] + (one_p ? 1.0 : 0.0)) + b[i];
}

/* y += bias (NULL: none) over n. */
static inline void ref_bias(double *y, const float *bias, int n)
{
    for (int i = 0; bias && i < n; i++)
        y[i] += bias[i];
}

/* GeLU, tanh approximation. */
static inline double ref_gelu(double u)
{
    return 0.5 * u * (1.0 + tanh(sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
}

static inline void ref_rmsnorm(double *y, const double *x, const float *w, int h, double eps)
{
    double ss = 0;
    for (int i = 0; i < h; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / h + eps);
    for (int i = 0; i < h; i++)
        y[i] = x[i] * r * w[i];
}

/* y[out] = W[out, in] x[in] */
static inline void ref_matvec(double *y, const float *Wt, const double *x, int out, int in)
{
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++)
            s += (double)Wt[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

/* Rotate-half RoPE of one head at position t. */
static inline void ref_rope(double *x, int D, int t, const double *fr)
{
    for (int i = 0; i < D / 2; i++) {
        double a = t * fr[i], c = cos(a), s = sin(a);
        double x1 = x[i], x2 = x[i + D / 2];
        x[i] = x1 * c - x2 * s;
        x[i + D / 2] = x2 * c + x1 * s;
    }
}

/* Sum of the cross-entropy over the unmasked tokens of one micro-batch
 * (B sequences of S tokens, as the plan says); *count gets their number. */
static inline double ref_loss_sum(const gl_arch *arch, const ref_model *r, const int32_t *ids,
                           const int32_t *tg, const float *mask, double *count_out)
{
    const gl_model_dims *dm = &r->p->dm;
    int B = dm->B, S = dm->S, h = dm->h, Hq = dm->Hq, Hkv = dm->Hkv, D = dm->D, f = dm->f;
    int n = B * S;
    double *x = calloc((size_t)n * h, sizeof(double));
    double *a = calloc((size_t)n * h, sizeof(double));
    double *q = calloc((size_t)n * Hq * D, sizeof(double));
    double *k = calloc((size_t)n * Hkv * D, sizeof(double));
    double *v = calloc((size_t)n * Hkv * D, sizeof(double));
    double *o = calloc((size_t)n * Hq * D, sizeof(double));
    double *tmp = calloc((size_t)(h > f ? h : f) * 4 + (size_t)Hq * D, sizeof(double));
    double *fr = calloc((size_t)D, sizeof(double));
    double *p = calloc((size_t)S, sizeof(double));
    char name[80];
    gl_rope_inv_freq(arch, D, fr);

    const float *emb = ref_param(r, "embedding.weight");
    const float *pos = ref_param_opt(r, "position_embeddings.weight");
    for (int t = 0; t < n; t++)
        for (int i = 0; i < h; i++)
            x[(size_t)t * h + i] = emb[(size_t)ids[t] * h + i] +
                                   (pos ? pos[(size_t)(t % S) * h + i] : 0.0);
    int ln = arch->normalization == GL_NORM_LAYERNORM, one_p = arch->apply_layernorm_1p;
    int rope = arch->position_embedding_type == GL_POS_ROPE;
#define NORM(y, xx, w, b)                                                                  \
    (ln ? ref_layernorm(y, xx, w, b, h, dm->eps, one_p) : ref_rmsnorm(y, xx, w, h, dm->eps))

    for (int l = 0; l < dm->L; l++) {
#define P(s) (snprintf(name, sizeof name, "layers.%d." s ".weight", l), ref_param(r, name))
        const float *wn1 = P("attention_norm"), *wq = P("attention.wq"), *wk = P("attention.wk");
        const float *wv = P("attention.wv"), *wo = P("attention.wo"), *wn2 = P("mlp_norm");
        const float *wu = P("mlp.w_up"), *wd = P("mlp.w_down");
#undef P
#define B(s) (snprintf(name, sizeof name, "layers.%d." s, l), ref_param_opt(r, name))
        const float *wg = B("mlp.w_gate.weight");
        const float *bn1 = B("attention_norm.bias"), *bn2 = B("mlp_norm.bias");
        const float *bq = B("attention.wq.bias"), *bk = B("attention.wk.bias");
        const float *bv = B("attention.wv.bias"), *bo = B("attention.wo.bias");
        const float *bg = B("mlp.w_gate.bias"), *bu = B("mlp.w_up.bias");
        const float *bd = B("mlp.w_down.bias");
        const float *qn = B("attention.q_norm.weight"), *kn = B("attention.k_norm.weight");
#undef B
        for (int t = 0; t < n; t++) {
            NORM(&a[(size_t)t * h], &x[(size_t)t * h], wn1, bn1);
            ref_matvec(&q[(size_t)t * Hq * D], wq, &a[(size_t)t * h], Hq * D, h);
            ref_matvec(&k[(size_t)t * Hkv * D], wk, &a[(size_t)t * h], Hkv * D, h);
            ref_matvec(&v[(size_t)t * Hkv * D], wv, &a[(size_t)t * h], Hkv * D, h);
            ref_bias(&q[(size_t)t * Hq * D], bq, Hq * D);
            ref_bias(&k[(size_t)t * Hkv * D], bk, Hkv * D);
            ref_bias(&v[(size_t)t * Hkv * D], bv, Hkv * D);
            for (int j = 0; qn && j < Hq; j++)         /* QK norm, before RoPE */
                ref_rmsnorm(&q[((size_t)t * Hq + j) * D], &q[((size_t)t * Hq + j) * D], qn, D,
                            dm->eps);
            for (int j = 0; kn && j < Hkv; j++)
                ref_rmsnorm(&k[((size_t)t * Hkv + j) * D], &k[((size_t)t * Hkv + j) * D], kn, D,
                            dm->eps);
            for (int j = 0; rope && j < Hq; j++)
                ref_rope(&q[((size_t)t * Hq + j) * D], D, t % S, fr);
            for (int j = 0; rope && j < Hkv; j++)
                ref_rope(&k[((size_t)t * Hkv + j) * D], D, t % S, fr);
        }
        for (int b = 0; b < B; b++)
            for (int j = 0; j < Hq; j++) {
                int g = j / (Hq / Hkv);
                for (int t = 0; t < S; t++) {
                    const double *qq = &q[((size_t)(b * S + t) * Hq + j) * D];
                    double mx = -1e300, sum = 0;
                    for (int u = 0; u <= t; u++) {
                        const double *kk = &k[((size_t)(b * S + u) * Hkv + g) * D];
                        double s = 0;
                        for (int e = 0; e < D; e++)
                            s += qq[e] * kk[e];
                        p[u] = s / sqrt((double)D);
                        if (p[u] > mx)
                            mx = p[u];
                    }
                    for (int u = 0; u <= t; u++)
                        sum += (p[u] = exp(p[u] - mx));
                    double *oo = &o[((size_t)(b * S + t) * Hq + j) * D];
                    for (int e = 0; e < D; e++) {
                        double s = 0;
                        for (int u = 0; u <= t; u++)
                            s += p[u] / sum * v[((size_t)(b * S + u) * Hkv + g) * D + e];
                        oo[e] = s;
                    }
                }
            }
        for (int t = 0; t < n; t++) {
            double *xt = &x[(size_t)t * h];
            ref_matvec(tmp, wo, &o[(size_t)t * Hq * D], h, Hq * D);
            ref_bias(tmp, bo, h);
            for (int i = 0; i < h; i++)
                xt[i] += tmp[i];
            double *mg = tmp, *gt = tmp + h, *ut = gt + f, *dn = ut + f;
            NORM(mg, xt, wn2, bn2);
            ref_matvec(ut, wu, mg, f, h);
            ref_bias(ut, bu, f);
            if (wg) {
                ref_matvec(gt, wg, mg, f, h);
                ref_bias(gt, bg, f);
                for (int i = 0; i < f; i++)
                    gt[i] = gt[i] / (1.0 + exp(-gt[i])) * ut[i];
            } else {
                for (int i = 0; i < f; i++)
                    gt[i] = ref_gelu(ut[i]);
            }
            ref_matvec(dn, wd, gt, h, f);
            ref_bias(dn, bd, h);
            for (int i = 0; i < h; i++)
                xt[i] += dn[i];
        }
    }
    const float *wf = ref_param(r, "final_norm.weight");
    const float *bf = ref_param_opt(r, "final_norm.bias");
    const float *head = ref_param(r, dm->tied ? "embedding.weight" : "lm_head.weight");
    double total = 0, count = 0;
    double *logit = calloc((size_t)dm->V, sizeof(double));
    for (int t = 0; t < n; t++) {
        NORM(a, &x[(size_t)t * h], wf, bf);
        ref_matvec(logit, head, a, dm->V, h);       /* real vocabulary only */
        double mx = -1e300, sum = 0;
        for (int i = 0; i < dm->V; i++)
            if (logit[i] > mx)
                mx = logit[i];
        for (int i = 0; i < dm->V; i++)
            sum += exp(logit[i] - mx);
        total += mask[t] * (log(sum) + mx - logit[tg[t]]);
        count += mask[t];
    }
#undef NORM
    free(logit); free(x); free(a); free(q); free(k); free(v); free(o);
    free(tmp); free(fr); free(p);
    *count_out = count;
    return total;
}

/* Mean cross-entropy over the unmasked tokens. */
static inline double ref_loss(const gl_arch *arch, const ref_model *r, const int32_t *ids,
                       const int32_t *tg, const float *mask)
{
    double count;
    double total = ref_loss_sum(arch, r, ids, tg, mask, &count);
    return total / count;
}

/* ---- the test batch ---- */

/* One micro-batch of n tokens, the same for every gradient test: ids and
 * targets from fixed patterns, a few tokens masked out (t % 5 == 2); the
 * host arrays (for the reference) and their copies in the device's memory
 * (for the model, through a gl_mb), and the number of unmasked tokens. */
typedef struct {
    int n;
    int32_t *ids, *tg;          /* host */
    float *mask;
    int32_t *dids, *dtg;        /* device */
    float *dmask;
    double count;
} ref_batch;

static inline void ref_batch_new(ref_batch *b, gl_dev *d, int n, int vocab)
{
    b->n = n;
    b->ids = malloc((size_t)n * sizeof *b->ids);
    b->tg = malloc((size_t)n * sizeof *b->tg);
    b->mask = malloc((size_t)n * sizeof *b->mask);
    b->count = 0;
    for (int t = 0; t < n; t++) {
        b->ids[t] = (int32_t)((t * 7 + 3) % vocab);
        b->tg[t] = (int32_t)((t * 5 + 11) % vocab);
        b->mask[t] = (t % 5 == 2) ? 0.0f : 1.0f;
        b->count += b->mask[t];
    }
    b->dids = d->ops->alloc(d, (size_t)n * sizeof *b->ids);
    b->dtg = d->ops->alloc(d, (size_t)n * sizeof *b->tg);
    b->dmask = d->ops->alloc(d, (size_t)n * sizeof *b->mask);
    d->ops->upload(d, b->dids, b->ids, (size_t)n * sizeof *b->ids);
    d->ops->upload(d, b->dtg, b->tg, (size_t)n * sizeof *b->tg);
    d->ops->upload(d, b->dmask, b->mask, (size_t)n * sizeof *b->mask);
}

static inline void ref_batch_free(ref_batch *b, gl_dev *d)
{
    free(b->ids);
    free(b->tg);
    free(b->mask);
    d->ops->free(d, b->dids);
    d->ops->free(d, b->dtg);
    d->ops->free(d, b->dmask);
}

/* ---- the model under test ---- */

/* One model of a gradient test on one rank of the CPU device (host
 * memory, fp32): its plan, the model with the weights of
 * gl_model_init_weights(seed 1234), the test batch as micro-batch
 * number `index` (its first token row0 = index n), and a device float
 * for the summed loss.
 * The test sets the model's options (dropout, MoE) and any weights of
 * its own afterwards. */
typedef struct {
    gl_model_plan *p;
    gl_dev *d;
    gl_model *m;
    ref_batch B;
    gl_mb mb;
    float *lacc;
    double count;               /* the batch's unmasked tokens */
} ref_harness;

/* The same for EP index ep_rank of layout's expert parallelism (the
 * caller sets m->ep, the EP group). */
static inline void ref_harness_new_ep(ref_harness *H, const gl_arch *arch,
                                      const gl_layout *layout, int index, int ep_rank)
{
    int one = 1;
    H->p = gl_model_plan_new(arch, layout, 0, 0, ep_rank, 1);
    H->d = gl_dev_open_cpu();
    H->m = gl_model_new(H->p, H->d, NULL, &one);
    gl_model_init_weights(H->m, 1234, NULL);
    ref_batch_new(&H->B, H->d, H->p->dm.n, arch->vocab_size);
    H->count = H->B.count;
    H->mb = (gl_mb){ .ids = H->B.dids, .targets = H->B.dtg, .gscale = H->B.dmask,
                     .row0 = (long)index * H->p->dm.n };
    H->lacc = H->d->ops->alloc(H->d, sizeof(float));
}

static inline void ref_harness_new(ref_harness *H, const gl_arch *arch,
                                   const gl_layout *layout, int index)
{
    ref_harness_new_ep(H, arch, layout, index, 0);
}

static inline void ref_harness_free(ref_harness *H)
{
    ref_batch_free(&H->B, H->d);
    H->d->ops->free(H->d, H->lacc);
    gl_model_free(H->m);
    gl_model_plan_free(H->p);
    gl_dev_close(H->d);
}

/* The objective: the mean cross-entropy over the unmasked tokens plus,
 * in a mixture-of-experts model, the MoE losses (*moe, when not NULL,
 * gets their sum; 0 in a dense model).  Leaves the gradients of the
 * objective in m->g when grads is set (the MoE losses' backward scale,
 * m->moe_loss_gscale, is the test's). */
static inline double ref_harness_loss(ref_harness *H, int grads, double *moe)
{
    gl_dev *d = H->d;
    gl_model *m = H->m;
    const gl_model_dims *dm = &m->plan->dm;
    size_t per_layer = (size_t)GL_MOE_STATS + dm->E;
    float z = 0, l;
    d->ops->upload(d, H->lacc, &z, sizeof z);
    d->ops->zero(d, m->g, m->plan->nflat * sizeof(float));
    if (dm->E) {
        d->ops->zero(d, m->moe_stats, dm->L * per_layer * sizeof(float));
        gl_model_moe_step_end(m);   /* each call a step of one micro-batch */
    }
    gl_model_forward(m, 0, 0, &H->mb, H->lacc);
    if (grads) {
        gl_model_backward(m, 0, 0, &H->mb);
        d->ops->scale_f32(d, m->g, (float)(1.0 / H->count), m->plan->nflat);
    }
    d->ops->download(d, &l, H->lacc, sizeof l);
    double extra = 0;               /* the auxiliary and z losses */
    for (int L = 0; dm->E && L < dm->L; L++)
        extra += (double)m->moe_stats[L * per_layer] + m->moe_stats[L * per_layer + 1];
    if (moe)
        *moe = extra;
    return l / H->count + extra;
}

/* The gradients of two backward passes of the micro-batch made the
 * trainer's way -- gl_model_grads_begin() over a buffer of NaN, the
 * products' first write, gl_model_grads_end() -- against the buffer
 * zeroed and every contribution added: bit for bit the same (a product
 * writing over nothing and one adding to zeros give the same sum).  Each
 * way starts a MoE step afresh and zeroes the statistics before each
 * pass, so that both ways route alike.  The buffer is left with the
 * sums. */
static inline void ref_harness_written(ref_harness *H, const char *what)
{
    gl_dev *d = H->d;
    gl_model *m = H->m;
    const gl_model_dims *dm = &m->plan->dm;
    size_t N = m->plan->nflat, stats = (size_t)dm->L * (GL_MOE_STATS + dm->E);
    float *want = malloc(N * sizeof(float));
    for (int way = 0; way < 2; way++) {
        if (way == 0) {
            d->ops->zero(d, m->g, N * sizeof(float));
        } else {
            for (size_t e = 0; e < N; e++)      /* CPU device: host memory */
                m->g[e] = NAN;
            gl_model_grads_begin(m);
        }
        if (dm->E)
            gl_model_moe_step_end(m);       /* global_aux_loss's running counts */
        for (int pass = 0; pass < 2; pass++) {
            float z = 0;
            d->ops->upload(d, H->lacc, &z, sizeof z);
            if (dm->E)
                d->ops->zero(d, m->moe_stats, stats * sizeof(float));
            gl_model_forward(m, 0, 0, &H->mb, H->lacc);
            gl_model_backward(m, 0, 0, &H->mb);
        }
        if (way == 0)
            memcpy(want, m->g, N * sizeof(float));
        else
            gl_model_grads_end(m);
    }
    size_t differ = 0;
    for (size_t e = 0; e < N; e++)
        differ += memcmp(&want[e], &m->g[e], sizeof(float)) != 0;
    ok(differ == 0, "%s: gradients written by each weight's first product over NaN equal "
       "zeros plus sums, bit for bit (%zu of %zu differ)", what, differ, N);
    free(want);
}

/* What the finite-difference checks found, over the tensors checked. */
typedef struct {
    double worst_dir;           /* worst relative error along a gradient */
    double worst_el;            /* worst error of a single element */
    int nchecked;               /* single elements checked */
} ref_fd_stats;

/* The gradient norm of parameter q in the gradients g. */
static inline double ref_grad_norm(const gl_param *q, const float *g)
{
    double norm = 0;
    for (size_t e = 0; e < q->count; e++)
        norm += (double)g[q->offset + e] * g[q->offset + e];
    return sqrt(norm);
}

/* Check parameter q's gradient (in g, of the weights w0, both copies of
 * the whole flat buffer; norm its ref_grad_norm) against central finite
 * differences of ref_harness_loss with step eps: along u = g / |g|,
 * (L(w + eps u) - L(w - eps u)) / 2 eps must give |g| (one result), then
 * its nbest largest elements one at a time (a result only when one is
 * off: the caller reports st->worst_el).  A zero gradient fails.  The
 * model's weights are w0 again on return. */
static inline void ref_fd_tensor(ref_harness *H, const char *what, const gl_param *q,
                                 double norm, const float *g, const float *w0, int nbest,
                                 ref_fd_stats *st)
{
    const double eps = 2e-3;
    float *w = H->m->w;
    const float *gq = g + q->offset;
    if (!(norm > 0)) {
        ok(0, "%s: %s has a zero gradient", what, q->name);
        return;
    }
    double lp, lm;
    for (size_t e = 0; e < q->count; e++)
        w[q->offset + e] = (float)(w0[q->offset + e] + eps * gq[e] / norm);
    lp = ref_harness_loss(H, 0, NULL);
    for (size_t e = 0; e < q->count; e++)
        w[q->offset + e] = (float)(w0[q->offset + e] - eps * gq[e] / norm);
    lm = ref_harness_loss(H, 0, NULL);
    memcpy(w + q->offset, w0 + q->offset, q->count * sizeof(float));
    double fd = (lp - lm) / (2 * eps), rel = fabs(fd - norm) / norm;
    if (rel > st->worst_dir)
        st->worst_dir = rel;
    ok(rel < 2e-3, "%s: %s: directional derivative %.6g vs |grad| %.6g (rel %.1e)",
       what, q->name, fd, norm, rel);

    /* the largest elements (at most two), one at a time */
    size_t best[2] = { 0, 0 };
    for (size_t e = 0; e < q->count; e++)
        if (fabsf(gq[e]) > fabsf(gq[best[0]])) {
            best[1] = best[0];
            best[0] = e;
        } else if (e != best[0] && fabsf(gq[e]) > fabsf(gq[best[1]])) {
            best[1] = e;
        }
    for (int b = 0; b < nbest && b < 2 && b < (int)q->count; b++) {
        size_t e = q->offset + best[b];
        w[e] = (float)(w0[e] + eps);
        lp = ref_harness_loss(H, 0, NULL);
        w[e] = (float)(w0[e] - eps);
        lm = ref_harness_loss(H, 0, NULL);
        w[e] = w0[e];
        fd = (lp - lm) / (2 * eps);
        /* absolute error relative to the tensor's largest entry: float
         * rounding of the loss is ~1e-7 / eps */
        double err = fabs(fd - g[e]) / fabs(gq[best[0]]);
        if (err > st->worst_el)
            st->worst_el = err;
        st->nchecked++;
        if (err >= 5e-3)
            ok(0, "%s: %s[%zu]: fd %.6g vs grad %.6g", what, q->name, best[b], fd,
               (double)g[e]);
    }
}

#endif
