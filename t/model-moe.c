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
 * and with padding; global_aux_loss (one micro-batch a step: the running
 * counts are the micro-batch's, the gradient through them as aux_loss's;
 * t/train-moe.t checks several micro-batches and the layouts).
 * The statistics (tokens per expert sum to n k less the dropped slots),
 * full recomputation (the same gradients, bit for bit, and nothing
 * counted twice) and the expert-parallel dispatch path at EP 1
 * (m->moe_dispatch: the same numbers bit for bit) are checked too.
 *
 * With --ep, under MPI (t/model-moe-ep.t: two ranks), the first, second
 * and fourth variants run one forward and backward with expert
 * parallelism over the world (EP = the world's size), with the alltoall
 * and the allgather dispatchers, and the MoE
 * buffers they allocate are checked against gl_model_moe_bytes (and by
 * hand for the first); rank 0 prints, a failure on another rank fails
 * its exit status.
 */
#include <config.h>

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comm/comm.h"
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

static const variant variants[] = {
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
    { "softmax top 2 of 4, global_aux_loss", 4, 2, 0, 0, 0, 0, NULL, 0,
      GL_MOE_LB_GLOBAL_AUX_LOSS, 0.1, 0, 0, 0, 0 },
};

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

/* The MoE layers' buffers (gl_model_moe_bytes) are what the first
 * forward and backward allocated on the device; for the first variant,
 * by hand too (at EP = P: the rows the local experts may get are P R;
 * the dispatch's buffers at EP > 1 or with m->moe_dispatch). */
static void check_moe_bytes(const variant *v, gl_model *m, size_t before)
{
    size_t after, per_layer, shared;
    size_t P = (size_t)m->plan->dm.ep;
    int disp = P > 1 || m->moe_dispatch;       /* the EP buffers */
    m->d->ops->mem_info(m->d, &after, NULL, NULL);
    gl_model_moe_bytes(m, &per_layer, &shared);
    size_t layers = (size_t)gl_arch_num_moe_layers(&m->plan->arch);
    char ep[32] = "";
    int ag = P > 1 && m->moe_opts.token_dispatcher == GL_DISPATCH_ALLGATHER;
    if (disp)
        snprintf(ep, sizeof ep, " (EP %zu, %s)", P, ag ? "allgather" : "dispatched");
    ok(after - before == layers * per_layer + shared,
       "%s%s: the MoE buffers, %zu MoE layers x %zu + %zu shared bytes, are the %zu bytes "
       "allocated", v->what, ep, layers, per_layer, shared, after - before);
    if (v != &variants[0])
        return;
    /* n = 2 x 8 tokens, h 16, E 4, top 2, expert FFN 12 (SwiGLU: fc1 24
     * wide), f32 activations, no capacity: 32 routed rows (each token
     * twice), aux_loss's one group of counts; Rl rows for the El local
     * experts */
    size_t n = 16, h = 16, E = 4, k = 2, R = 32, f = 12, fc1 = 24, b = 4;
    size_t El = E / P, Rl = P * R;
    size_t want_layer = n * E * b                   /* logits */
                        + n * k * 3 * b             /* experts, weights, rows */
                        + R * b + (E + 1) * b       /* row_tok, offsets */
                        + Rl * fc1 * b + R * h * b  /* gu, yp */
                        + E * b;                    /* counts */
    size_t want_shared = R * 3 * h * b              /* xp, dyp, dxp */
                         + Rl * (2 * f + fc1) * b   /* a, da, dgu */
                         + n * k * b + 2 * n * E * b    /* dweight, dlogits, dlact */
                         + 2 * E * b;                   /* bias, tok */
    if (disp) {
        want_layer += Rl * h * b                    /* xr */
                      + (El + 1) * b                /* the local experts' offsets */
                      + 2 * Rl * b + 2 * b;         /* the sort: rows both ways, offsets */
        want_shared += 3 * Rl * h * b               /* xa, dyl, dxl */
                       + 2 * E * b;                 /* the counts sent and received */
    }
    if (ag) {                   /* the EP n gathered tokens instead of xa */
        size_t ng = P * n;
        want_layer += (Rl - R) * h * b              /* yp: the local rows' */
                      + ng * k * 3 * b + Rl * b;    /* lmap: experts, weights, rows; row_tok */
        want_shared += ng * h * b - Rl * h * b      /* xg, no xa */
                       + n * h * b + ng * k * b;    /* xown, dwg */
    }
    ok(per_layer == want_layer && shared == want_shared,
       "%s%s: by hand, %zu bytes per MoE layer (got %zu) and %zu shared (got %zu)", v->what,
       ep, want_layer, per_layer, want_shared, shared);
}

/* The run's MoE options of variant v. */
static void set_moe_opts(gl_model *m, const variant *v)
{
    m->moe_opts.load_balancing_type = v->lb;
    m->moe_opts.aux_loss_coeff = v->aux;
    m->moe_opts.z_loss_coeff = v->z;
    m->moe_opts.capacity_factor = v->capacity;
    m->moe_opts.pad_expert_input_to_capacity = v->pad;
    m->moe_opts.token_drop_policy = v->by_position ? GL_DROP_BY_POSITION : GL_DROP_BY_PROBS;
}

static void run_variant(const variant *v)
{
    model_cfg c;
    micro_config(&c, v);
    ref_harness H;
    ref_harness_new(&H, &c.arch, &c.layout, 0);
    gl_model_plan *p = H.p;
    gl_model *m = H.m;
    set_moe_opts(m, v);
    float *w = m->w;
    for (int i = 0; i < p->nparams; i++)       /* an expert bias of its own */
        if (p->param[i].buffer)
            for (size_t e = 0; e < p->param[i].count; e++)
                w[p->param[i].offset + e] = (float)(0.05 * ((e * 7) % 5) - 0.1);
    m->moe_loss_gscale = H.count;       /* the MoE losses with weight 1 */

    int n = p->dm.n;
    size_t before;
    H.d->ops->mem_info(H.d, &before, NULL, NULL);
    double aux;
    double got = ref_harness_loss(&H, 1, &aux);
    check_moe_bytes(v, m, before);
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
        int one = 1;
        ref_harness H2 = H;
        H2.m = gl_model_new(p2, H.d, NULL, &one);
        H2.m->moe_opts = m->moe_opts;
        H2.m->moe_loss_gscale = m->moe_loss_gscale;
        memcpy(H2.m->w, w, N * sizeof(float));
        double aux2, got2 = ref_harness_loss(&H2, 1, &aux2);
        ok(got2 == got && aux2 == aux && !memcmp(H2.m->g, g, N * sizeof(float)),
           "%s: full recomputation: the same objective (%.9g), MoE losses counted once "
           "(%.9g), the same gradients", v->what, got2, aux2);
        gl_model_free(H2.m);
        gl_model_plan_free(p2);
    }

    /* the expert-parallel dispatch at EP 1 (m->moe_dispatch: the path
     * one GPU runs with GRIDLM_MOE_DISPATCH=1): the same numbers bit for
     * bit, and its buffers as gl_model_moe_bytes counts them */
    {
        ref_harness H3;
        ref_harness_new(&H3, &c.arch, &c.layout, 0);
        H3.m->moe_dispatch = 1;
        set_moe_opts(H3.m, v);
        H3.m->moe_loss_gscale = m->moe_loss_gscale;
        memcpy(H3.m->w, w0, N * sizeof(float));
        size_t before3;
        H3.d->ops->mem_info(H3.d, &before3, NULL, NULL);
        double aux3, got3 = ref_harness_loss(&H3, 1, &aux3);
        check_moe_bytes(v, H3.m, before3);
        ok(got3 == got && aux3 == aux && !memcmp(H3.m->g, g, N * sizeof(float)),
           "%s: the dispatch path at EP 1: the same objective (%.9g), MoE losses (%.9g) "
           "and gradients", v->what, got3, aux3);
        char what[160];
        snprintf(what, sizeof what, "%s, dispatch path", v->what);
        ref_harness_written(&H3, what);
        ref_harness_free(&H3);
    }

    ref_harness_written(&H, v->what);

    /* each tensor along its gradient and at its largest element */
    ref_fd_stats st = { 0, 0, 0 };
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        double norm = ref_grad_norm(q, g);
        if (q->buffer) {
            ok(norm == 0, "%s: %s: a buffer, no gradient", v->what, q->name);
            continue;
        }
        ref_fd_tensor(&H, v->what, q, norm, g, w0, 1, &st);
    }
    ok(st.worst_el < 5e-3, "%s: %d largest elements match finite differences (worst %.1e)",
       v->what, st.nchecked, st.worst_el);

    free(g); free(w0);
    ref_harness_free(&H);
}

/* --ep: variant v with expert parallelism over the world (see the top),
 * with the token dispatcher disp (the buffers differ). */
static void run_variant_ep(const variant *v, int rank, int size, gl_moe_dispatcher disp)
{
    model_cfg c;
    micro_config(&c, v);
    c.layout.expert_model_parallel_size = size;
    ref_harness H;
    ref_harness_new_ep(&H, &c.arch, &c.layout, 0, rank);
    gl_model *m = H.m;
    m->ep = gl_comm_mpi(MPI_COMM_WORLD, "ep");
    set_moe_opts(m, v);
    m->moe_opts.token_dispatcher = disp;
    m->moe_loss_gscale = H.count;
    size_t before;
    H.d->ops->mem_info(H.d, &before, NULL, NULL);
    double aux, got = ref_harness_loss(&H, 1, &aux);
    check_moe_bytes(v, m, before);
    ok(isfinite(got), "%s (EP %d, %s): objective %.6f", v->what, size,
       disp == GL_DISPATCH_ALLGATHER ? "allgather" : "alltoall", got);
    gl_comm_free(m->ep);
    m->ep = NULL;
    ref_harness_free(&H);
}

static int main_ep(int *argc, char ***argv)
{
    int rank, size;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tap_quiet(rank != 0);
    plan(NO_PLAN);
    if (size < 2)
        bail_out("--ep: run on 2 ranks or more (mpiexec -n 2)");
    const variant *ep_variants[] = { &variants[0], &variants[1], &variants[3] };
    for (size_t i = 0; i < sizeof ep_variants / sizeof *ep_variants; i++)
        if (ep_variants[i]->E % size == 0) {
            run_variant_ep(ep_variants[i], rank, size, GL_DISPATCH_ALLTOALL);
            run_variant_ep(ep_variants[i], rank, size, GL_DISPATCH_ALLGATHER);
        }
    int rc = done_testing();
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--ep"))
        return main_ep(&argc, &argv);
    plan(NO_PLAN);
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        run_variant(&variants[i]);
    return done_testing();
}
