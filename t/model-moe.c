/*
 * model-moe: the mixture-of-experts model on one rank of the CPU device,
 * its gradients against central finite differences of its objective --
 * the mean cross-entropy plus the auxiliary and z losses (their backward
 * scale, moe_loss_gscale, set to the mean's divisor so that the three
 * add with weight 1) -- along each tensor's gradient and for its largest
 * elements.
 *
 * Variants: Mixtral-like (softmax top 2 of 4, every layer MoE, aux_loss);
 * Qwen3-MoE-like (pre-softmax top 2 of 6, not renormalised, a dense first
 * layer, a shared expert, seq_aux_loss and z-loss); DeepSeek-like
 * (sigmoid scores, top-k scaling, the expert bias: a buffer whose
 * gradient stays zero); with a capacity factor (dropping by position)
 * and with padding.
 * The statistics (tokens per expert sum to n k less the dropped slots)
 * and full recomputation (the same gradients, bit for bit, and nothing
 * counted twice) are checked too.
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
    int E, k;
    int pre_softmax, sigmoid, bias;
    double scaling;
    const char *freq;           /* --moe-layer-freq, NULL: every layer */
    int shared;                 /* shared expert width */
    gl_moe_lb lb;
    double aux, z;              /* coefficients */
    double capacity;
    int pad;
    int by_position;            /* --moe-token-drop-policy position */
} variant;

static void micro_config(model_cfg *c, const variant *v)
{
    model_cfg_micro(c);
    c->arch.kv_channels = 4;
    c->arch.untie_embeddings_and_output_weights = 1;
    c->arch.num_experts = v->E;
    c->arch.moe_router_topk = v->k;
    c->arch.moe_ffn_hidden_size = 12;
    c->arch.moe_router_pre_softmax = v->pre_softmax;
    c->arch.moe_router_score_function = v->sigmoid ? GL_ROUTER_SIGMOID : GL_ROUTER_SOFTMAX;
    c->arch.moe_router_enable_expert_bias = v->bias;
    c->arch.moe_router_topk_scaling_factor = v->scaling;
    c->arch.moe_shared_expert_intermediate_size = v->shared;
    if (v->freq) {
        gl_error err;
        if (gl_moe_layer_freq_parse(v->freq, 2, c->arch.moe_layer_freq,
                                    sizeof c->arch.moe_layer_freq, &err))
            bail_out("%s", err.text);
    }
}

typedef struct {
    gl_dev *d;
    gl_model *m;
    gl_mb mb;
    float *lacc;
    double count;
} harness;

/* The objective: the mean cross-entropy plus the MoE losses; the
 * gradients of it in m->g when grads is set. */
static double model_loss(harness *H, int grads, double *aux)
{
    gl_dev *d = H->d;
    gl_model *m = H->m;
    const gl_model_dims *dm = &m->plan->dm;
    size_t ns = (size_t)dm->L * (GL_MOE_STATS + dm->E);
    float z = 0, l;
    d->ops->upload(d, H->lacc, &z, sizeof z);
    d->ops->zero(d, m->g, m->plan->nflat * sizeof(float));
    d->ops->zero(d, m->moe_stats, ns * sizeof(float));
    gl_model_forward(m, 0, 0, &H->mb, H->lacc);
    if (grads) {
        gl_model_backward(m, 0, 0, &H->mb);
        d->ops->scale_f32(d, m->g, (float)(1.0 / H->count), m->plan->nflat);
    }
    d->ops->download(d, &l, H->lacc, sizeof l);
    double extra = 0;
    for (int L = 0; L < dm->L; L++)
        extra += (double)m->moe_stats[(size_t)L * (GL_MOE_STATS + dm->E)] +
                 m->moe_stats[(size_t)L * (GL_MOE_STATS + dm->E) + 1];
    if (aux)
        *aux = extra;
    return l / H->count + extra;
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
    gl_model *m = H.m;
    m->moe_opts.load_balancing_type = v->lb;
    m->moe_opts.aux_loss_coeff = v->aux;
    m->moe_opts.z_loss_coeff = v->z;
    m->moe_opts.capacity_factor = v->capacity;
    m->moe_opts.pad_expert_input_to_capacity = v->pad;
    m->moe_opts.token_drop_policy = v->by_position ? GL_DROP_BY_POSITION : GL_DROP_BY_PROBS;
    gl_model_init_weights(m, 1234, NULL);
    float *w = m->w;
    for (int i = 0; i < p->nparams; i++)       /* an expert bias of its own */
        if (p->param[i].buffer)
            for (size_t e = 0; e < p->param[i].count; e++)
                w[p->param[i].offset + e] = (float)(0.05 * ((e * 7) % 5) - 0.1);

    int n = p->dm.n;
    ref_batch B;
    ref_batch_new(&B, d, n, c.arch.vocab_size);
    H.count = B.count;
    H.mb = (gl_mb){ .ids = B.dids, .targets = B.dtg, .gscale = B.dmask, .row0 = 0 };
    H.lacc = d->ops->alloc(d, sizeof(float));
    m->moe_loss_gscale = H.count;       /* the MoE losses with weight 1 */

    double aux;
    double got = model_loss(&H, 1, &aux);
    ok(isfinite(got) && (aux > 0) == (v->aux > 0 || v->z > 0),
       "%s: objective %.6f, MoE losses %.3g", v->what, got, aux);

    /* statistics: the MoE layers' tokens per expert add up to the n k
     * slots less the dropped ones (padding rows count as routed rows) */
    {
        const gl_model_dims *dm = &p->dm;
        int bad = 0, moe_layers = 0;
        double dropped = 0;
        for (int L = 0; L < dm->L; L++) {
            const float *st = m->moe_stats + (size_t)L * (GL_MOE_STATS + dm->E);
            double tok = 0;
            for (int e = 0; e < dm->E; e++)
                tok += st[GL_MOE_STATS + e];
            if (!gl_arch_is_moe_layer(&c.arch, L)) {
                bad |= tok != 0;
                continue;
            }
            moe_layers++;
            dropped += st[2];
            if (!v->pad && tok + st[2] != (double)n * dm->topk)
                bad = 1, diag("layer %d: %g tokens + %g dropped != %d", L, tok, st[2],
                              n * dm->topk);
        }
        ok(!bad && moe_layers == gl_arch_num_moe_layers(&c.arch) &&
           (v->capacity > 0 || dropped == 0) && (v->capacity == 0 || v->pad || dropped > 0),
           "%s: tokens per expert over %d MoE layers, %g dropped slots", v->what,
           moe_layers, dropped);
    }

    size_t N = p->nflat;
    float *g = malloc(N * sizeof(float)), *w0 = malloc(N * sizeof(float));
    memcpy(g, m->g, N * sizeof(float));
    memcpy(w0, w, N * sizeof(float));

    /* full recomputation gives the same gradients bit for bit */
    {
        gl_layout lay = c.layout;
        lay.recompute_granularity = GL_RECOMPUTE_FULL;
        snprintf(lay.recompute_method, sizeof lay.recompute_method, "uniform");
        lay.recompute_num_layers = 2;
        gl_model_plan *p2 = gl_model_plan_new(&c.arch, &lay, 0, 0, 0, 1);
        harness H2 = H;
        H2.m = gl_model_new(p2, d, NULL, &one);
        H2.m->moe_opts = m->moe_opts;
        H2.m->moe_loss_gscale = m->moe_loss_gscale;
        memcpy(H2.m->w, w, N * sizeof(float));
        double aux2, got2 = model_loss(&H2, 1, &aux2);
        ok(got2 == got && aux2 == aux && !memcmp(H2.m->g, g, N * sizeof(float)),
           "%s: full recomputation: the same objective (%.9g), MoE losses counted once "
           "(%.9g), the same gradients", v->what, got2, aux2);
        gl_model_free(H2.m);
        gl_model_plan_free(p2);
    }

    const double eps = 2e-3;
    double worst_el = 0;
    int nchecked = 0;
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        const float *gq = g + q->offset;
        double norm = 0;
        for (size_t e = 0; e < q->count; e++)
            norm += (double)gq[e] * gq[e];
        norm = sqrt(norm);
        if (q->buffer) {
            ok(norm == 0, "%s: %s: a buffer, no gradient", v->what, q->name);
            continue;
        }
        if (!(norm > 0)) {
            ok(0, "%s: %s has a zero gradient", v->what, q->name);
            continue;
        }
        double lp, lm;
        for (size_t e = 0; e < q->count; e++)
            w[q->offset + e] = (float)(w0[q->offset + e] + eps * gq[e] / norm);
        lp = model_loss(&H, 0, NULL);
        for (size_t e = 0; e < q->count; e++)
            w[q->offset + e] = (float)(w0[q->offset + e] - eps * gq[e] / norm);
        lm = model_loss(&H, 0, NULL);
        memcpy(w + q->offset, w0 + q->offset, q->count * sizeof(float));
        double fd = (lp - lm) / (2 * eps), rel = fabs(fd - norm) / norm;
        ok(rel < 2e-3, "%s: %s: directional derivative %.6g vs |grad| %.6g (rel %.1e)",
           v->what, q->name, fd, norm, rel);

        size_t best = 0;
        for (size_t e = 0; e < q->count; e++)
            if (fabsf(gq[e]) > fabsf(gq[best]))
                best = e;
        size_t e = q->offset + best;
        w[e] = (float)(w0[e] + eps);
        lp = model_loss(&H, 0, NULL);
        w[e] = (float)(w0[e] - eps);
        lm = model_loss(&H, 0, NULL);
        w[e] = w0[e];
        fd = (lp - lm) / (2 * eps);
        double err = fabs(fd - g[e]) / fabs(gq[best]);
        if (err > worst_el)
            worst_el = err;
        nchecked++;
        if (err >= 5e-3)
            ok(0, "%s: %s[%zu]: fd %.6g vs grad %.6g", v->what, q->name, best, fd,
               (double)g[e]);
    }
    ok(worst_el < 5e-3, "%s: %d largest elements match finite differences (worst %.1e)",
       v->what, nchecked, worst_el);

    free(g); free(w0);
    ref_batch_free(&B, d);
    d->ops->free(d, H.lacc);
    gl_model_free(m);
    gl_model_plan_free(p);
    gl_dev_close(d);
}

int main(void)
{
    static const variant vs[] = {
        { "Mixtral-like: softmax top 2 of 4, aux_loss", 4, 2, 0, 0, 0, 0, NULL, 0,
          GL_MOE_LB_AUX_LOSS, 0.1, 0, 0, 0, 0 },
        { "Qwen3-MoE-like: pre-softmax top 2 of 6, dense layer 0, shared expert, "
          "seq_aux_loss, z-loss", 6, 2, 1, 0, 0, 0, "[0,1]", 8,
          GL_MOE_LB_SEQ_AUX_LOSS, 0.1, 0.01, 0, 0, 0 },
        { "sigmoid top 2 of 4 with expert bias and scaling 2.5", 4, 2, 0, 1, 1, 2.5, NULL, 0,
          GL_MOE_LB_AUX_LOSS, 0.05, 0, 0, 0, 0 },
        /* dropping by position: a function of the selection alone (by
         * probs, a step of finite differences may move a token across
         * an expert's capacity line; t/ops-moe.c checks that policy) */
        { "softmax top 2 of 4, capacity factor 0.5 by position (dropping)", 4, 2, 0, 0, 0, 0,
          NULL, 0, GL_MOE_LB_AUX_LOSS, 0.1, 0, 0.5, 0, 1 },
        { "softmax top 1 of 4, capacity factor 1, padded", 4, 1, 0, 0, 0, 0, NULL, 6,
          GL_MOE_LB_NONE, 0, 0.01, 1.0, 1, 0 },
    };
    plan(NO_PLAN);
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
        run_variant(&vs[i]);
    return done_testing();
}
