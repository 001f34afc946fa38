/*
 * model-grad: the whole model on one rank of the CPU device, checked two
 * independent ways.
 *
 *  1. Forward: the loss of gl_model_forward() against a plain double-
 *     precision Llama forward written here from the formulas (embedding,
 *     RMSNorm, GQA attention with rotate-half RoPE, SwiGLU, final norm,
 *     LM head over the real vocabulary only, cross-entropy), reading the
 *     same logical weights through the parameter table.
 *  2. Backward: the gradient of every parameter tensor against central
 *     finite differences of the model's own loss, along the gradient's
 *     direction (which must give its norm) and for the largest elements
 *     one at a time.
 *
 * Both for tied and untied embeddings, with a padded vocabulary, GQA, a
 * loss mask, and Llama 3.1 RoPE scaling in one case; and for Megatron's
 * GPT form (LayerNorm with its bias and 1p, GeLU, biases on every linear,
 * learned positions), Qwen2's (QKV biases) and Qwen3's (RMSNorm over each
 * head of q and k: --qk-layernorm).
 */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "device/ops.h"
#include "model/model.h"
#include "tap.h"
#include "model-cfg.h"


typedef struct {
    const char *what;
    int tied, rope_scaling;
    int gpt;            /* 1: Megatron's GPT form (LayerNorm 1p, GeLU, every
                         * bias, learned positions); 2: Qwen2's (RMSNorm,
                         * SwiGLU, RoPE, QKV biases); 3: Qwen3's (the
                         * Llama form with --qk-layernorm) */
    double dropout;     /* --hidden-dropout: the masks are fixed by their key,
                         * so finite differences see one function */
} variant;

static void micro_config(model_cfg *c, const variant *v)
{
    model_cfg_micro(c);
    c->arch.kv_channels = 6;               /* D != h / heads on purpose */
    c->arch.rotary_base = 10000;
    c->arch.use_rope_scaling = v->rope_scaling;
    c->arch.rope_scaling_factor = 8;
    c->arch.untie_embeddings_and_output_weights = !v->tied;
    c->layout.tensor_model_parallel_size = 1;
    c->layout.pipeline_model_parallel_size = 1;
    c->layout.virtual_pipeline_size = 1;
    c->layout.sequence_parallel = 0;
    if (v->gpt == 1) {
        c->arch.normalization = GL_NORM_LAYERNORM;
        c->arch.apply_layernorm_1p = 1;
        c->arch.swiglu = 0;
        c->arch.position_embedding_type = GL_POS_LEARNED_ABSOLUTE;
        c->arch.max_position_embeddings = 11;  /* more rows than positions used */
        c->arch.add_bias_linear = 1;
    } else if (v->gpt == 2) {
        c->arch.add_qkv_bias = 1;
    } else if (v->gpt == 3) {
        c->arch.qk_layernorm = 1;
    }
    c->arch.hidden_dropout = v->dropout;
}

#include "model-ref.h"


/* ---- the model under test ---- */

typedef struct {
    gl_dev *d;
    gl_model *m;
    gl_mb mb;
    float *lacc;
    double count;
} harness;

/* The model's loss (mean over unmasked tokens); leaves weight gradients of
 * the mean in m->g when grads is set. */
static double model_loss(harness *H, int grads)
{
    gl_dev *d = H->d;
    float z = 0, l;
    d->ops->upload(d, H->lacc, &z, sizeof z);
    d->ops->zero(d, H->m->g, H->m->plan->nflat * sizeof(float));
    gl_model_forward(H->m, 0, 0, &H->mb, H->lacc);
    if (grads) {
        gl_model_backward(H->m, 0, 0, &H->mb);
        d->ops->scale_f32(d, H->m->g, (float)(1.0 / H->count), H->m->plan->nflat);
    }
    d->ops->download(d, &l, H->lacc, sizeof l);
    return l / H->count;
}

static void run_variant(const variant *v)
{
    model_cfg c;
    micro_config(&c, v);
    gl_model_plan *p = gl_model_plan_new(&c.arch, &c.layout, 0, 0, 0, 1);
    gl_dev *d = gl_dev_open_cpu();
    int one = 1;
    harness H = { .d = d };
    H.m = gl_model_new(p, d, NULL, &one);
    H.m->dropout_seed = 99;
    H.m->iteration = 7;
    gl_model_init_weights(H.m, 1234, NULL);
    float *w = H.m->w;                 /* CPU device: host memory, fp32 */
    /* Biases and 1p norm weights start at zero: give them, and the
     * positions, values of their own, so that the forward and the
     * gradients see them do something. */
    for (int i = 0; v->gpt && i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        if (strstr(q->name, "bias") || strstr(q->name, "position") ||
            (q->ndim == 1 && c.arch.apply_layernorm_1p))
            for (size_t e = 0; e < q->count; e++)
                w[q->offset + e] = (float)(0.2 * sin(1.0 + 0.7 * (double)(e + 13 * i)));
        if (strstr(q->name, "q_norm") || strstr(q->name, "k_norm"))   /* not all ones */
            for (size_t e = 0; e < q->count; e++)
                w[q->offset + e] = (float)(1.0 + 0.5 * sin(1.0 + 0.7 * (double)(e + 13 * i)));
    }

    int n = p->dm.n;
    ref_batch B;
    ref_batch_new(&B, d, n, c.arch.vocab_size);
    H.count = B.count;
    H.mb = (gl_mb){ .ids = B.dids, .targets = B.dtg, .gscale = B.dmask,
                    .row0 = 3 * n };    /* the 4th micro-batch */
    H.lacc = d->ops->alloc(d, sizeof(float));

    /* 1. forward against the reference */
    ref_model R = { p, w };
    double want = ref_loss(&c.arch, &R, B.ids, B.tg, B.mask);
    double got = model_loss(&H, 1);
    if (!v->dropout)
        ok(fabs(got - want) <= 2e-6 * fabs(want), "%s: loss %.7f matches the double "
           "reference %.7f", v->what, got, want);

    /* 1b. forward only: on the training model (no gradient may appear),
     * and on a forward-only model (one set of layer activations shared
     * by the layers, no gradient buffer): the same loss, bit for bit, as
     * the training forward */
    {
        float z = 0, l1, l2;
        d->ops->zero(d, H.m->g, p->nflat * sizeof(float));
        d->ops->upload(d, H.lacc, &z, sizeof z);
        gl_model_forward_only(H.m, 0, 0, &H.mb, H.lacc);
        d->ops->download(d, &l1, H.lacc, sizeof l1);
        size_t nz = 0;
        for (size_t e = 0; e < p->nflat; e++)
            nz += H.m->g[e] != 0.0f;
        gl_model *fm = gl_model_new_forward_only(p, d, NULL);
        gl_model_init_weights(fm, 1234, NULL);
        memcpy(fm->w, w, p->nflat * sizeof(float));     /* with the values set above */
        ok(fm->g == NULL, "%s: a forward-only model has no gradient buffer", v->what);
        d->ops->upload(d, H.lacc, &z, sizeof z);
        gl_model_forward_only(fm, 0, 0, &H.mb, H.lacc);
        d->ops->download(d, &l2, H.lacc, sizeof l2);
        ok(nz == 0, "%s: forward only leaves the gradients alone (%zu non-zero)", v->what, nz);
        if (!v->dropout) {
            ok(l1 / H.count == got && l2 / H.count == got,
               "%s: forward-only loss %.9g (training model) and %.9g (forward-only model) "
               "equal the training forward's %.9g", v->what, l1 / H.count, l2 / H.count,
               got);
        } else {
            /* evaluation drops nothing: the reference's loss, not the
             * training forward's */
            double e1 = l1 / H.count, e2 = l2 / H.count;
            ok(fabs(e1 - want) <= 2e-6 * fabs(want) && e1 == e2 &&
               fabs(got - want) > 1e-3 * fabs(want),
               "%s: forward-only losses %.9g and %.9g are the reference's %.9g without "
               "dropout; training's is %.9g", v->what, e1, e2, want, got);
        }
        ok(fm->arena_bytes < H.m->arena_bytes, "%s: the forward-only model's buffers "
           "(%zu bytes) are smaller than the training model's (%zu)", v->what,
           fm->arena_bytes, H.m->arena_bytes);
        gl_model_free(fm);
        model_loss(&H, 1);              /* the gradients again, for part 2 */
    }

    /* 2. gradients against finite differences */
    size_t N = p->nflat;
    float *g = malloc(N * sizeof(float)), *w0 = malloc(N * sizeof(float));
    memcpy(g, H.m->g, N * sizeof(float));
    memcpy(w0, w, N * sizeof(float));
    const double eps = 2e-3;
    double worst_dir = 0, worst_el = 0;
    int nchecked = 0;
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        const float *gq = g + q->offset;
        double norm = 0;
        for (size_t e = 0; e < q->count; e++)
            norm += (double)gq[e] * gq[e];
        norm = sqrt(norm);
        if (strstr(q->name, "attention.wk.bias") &&
            c.arch.position_embedding_type != GL_POS_ROPE) {
            /* Without RoPE, K's bias adds q . bk to every score of a
             * query's row, which the softmax takes away: its gradient is
             * zero, up to rounding.  (RoPE turns it by each key's
             * position: then it counts, and is checked below.) */
            ok(norm < 1e-6, "%s: %s: gradient zero up to rounding (%.1e), as the softmax's "
               "invariance says", v->what, q->name, norm);
            continue;
        }
        if (!(norm > 0)) {
            ok(0, "%s: %s has a zero gradient", v->what, q->name);
            continue;
        }
        /* along u = g / |g|: (L(w + eps u) - L(w - eps u)) / 2 eps = |g| */
        double lp, lm;
        for (size_t e = 0; e < q->count; e++)
            w[q->offset + e] = (float)(w0[q->offset + e] + eps * gq[e] / norm);
        lp = model_loss(&H, 0);
        for (size_t e = 0; e < q->count; e++)
            w[q->offset + e] = (float)(w0[q->offset + e] - eps * gq[e] / norm);
        lm = model_loss(&H, 0);
        memcpy(w + q->offset, w0 + q->offset, q->count * sizeof(float));
        double fd = (lp - lm) / (2 * eps), rel = fabs(fd - norm) / norm;
        if (rel > worst_dir)
            worst_dir = rel;
        ok(rel < 2e-3, "%s: %s: directional derivative %.6g vs |grad| %.6g (rel %.1e)",
           v->what, q->name, fd, norm, rel);

        /* the two largest elements, one at a time */
        size_t best[2] = { 0, 0 };
        for (size_t e = 0; e < q->count; e++)
            if (fabsf(gq[e]) > fabsf(gq[best[0]])) {
                best[1] = best[0];
                best[0] = e;
            } else if (e != best[0] && fabsf(gq[e]) > fabsf(gq[best[1]])) {
                best[1] = e;
            }
        for (int b = 0; b < 2 && b < (int)q->count; b++) {
            size_t e = q->offset + best[b];
            w[e] = (float)(w0[e] + eps);
            lp = model_loss(&H, 0);
            w[e] = (float)(w0[e] - eps);
            lm = model_loss(&H, 0);
            w[e] = w0[e];
            fd = (lp - lm) / (2 * eps);
            /* absolute error relative to the tensor's largest entry:
             * float rounding of the loss is ~1e-7 / eps */
            double err = fabs(fd - g[e]) / fabs(gq[best[0]]);
            if (err > worst_el)
                worst_el = err;
            nchecked++;
            if (err >= 5e-3)
                ok(0, "%s: %s[%zu]: fd %.6g vs grad %.6g", v->what, q->name,
                   best[b], fd, (double)g[e]);
        }
    }
    ok(worst_el < 5e-3, "%s: %d single elements match finite differences "
       "(worst %.1e)", v->what, nchecked, worst_el);
    diag("%s: worst relative error along gradients %.1e, elements %.1e",
         v->what, worst_dir, worst_el);

    free(g); free(w0);
    ref_batch_free(&B, d);
    d->ops->free(d, H.lacc);
    gl_model_free(H.m);
    gl_model_plan_free(p);
    gl_dev_close(d);
}

int main(void)
{
    static const variant vs[] = {
        { "untied", 0, 0, 0, 0 },
        { "tied, rope scaling", 1, 1, 0, 0 },
        { "GPT: LayerNorm 1p, GeLU, biases, learned positions, tied", 1, 0, 1, 0 },
        { "GPT, untied", 0, 0, 1, 0 },
        { "Qwen2: QKV biases", 0, 0, 2, 0 },
        { "Qwen3: QK norm, head size != hidden / heads", 0, 0, 3, 0 },
        { "Qwen3, tied, rope scaling", 1, 1, 3, 0 },
        { "GPT, hidden dropout 0.3", 0, 0, 1, 0.3 },
        { "Llama form, hidden dropout 0.2", 1, 0, 0, 0.2 },
    };
    plan(NO_PLAN);
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
        run_variant(&vs[i]);
    return done_testing();
}
