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
#include "model-ref.h"

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

static void run_variant(const variant *v)
{
    model_cfg c;
    micro_config(&c, v);
    ref_harness H;
    ref_harness_new(&H, &c.arch, &c.layout, 3);     /* the 4th micro-batch */
    gl_model_plan *p = H.p;
    gl_dev *d = H.d;
    H.m->dropout_seed = 99;
    H.m->iteration = 7;
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
    const ref_batch *B = &H.B;

    /* 1. forward against the reference */
    ref_model R = { p, w };
    double want = ref_loss(&c.arch, &R, B->ids, B->tg, B->mask);
    double got = ref_harness_loss(&H, 1, NULL);
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
        ref_harness_loss(&H, 1, NULL);  /* the gradients again, for part 2 */
    }

    ref_harness_written(&H, v->what);
    ref_harness_loss(&H, 1, NULL);      /* one pass's gradients again */

    /* 2. gradients against finite differences */
    size_t N = p->nflat;
    float *g = malloc(N * sizeof(float)), *w0 = malloc(N * sizeof(float));
    memcpy(g, H.m->g, N * sizeof(float));
    memcpy(w0, w, N * sizeof(float));
    ref_fd_stats st = { 0, 0, 0 };
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        double norm = ref_grad_norm(q, g);
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
        /* along the gradient, then the two largest elements */
        ref_fd_tensor(&H, v->what, q, norm, g, w0, 2, &st);
    }
    ok(st.worst_el < 5e-3, "%s: %d single elements match finite differences "
       "(worst %.1e)", v->what, st.nchecked, st.worst_el);
    diag("%s: worst relative error along gradients %.1e, elements %.1e",
         v->what, st.worst_dir, st.worst_el);

    free(g); free(w0);
    ref_harness_free(&H);
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
