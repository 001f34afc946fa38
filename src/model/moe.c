/*
 * moe.c: the mixture-of-experts MLP of a decoder layer (moe.h), written
 * against device/ops.h's MoE ops:
 *
 *   logits [n, E] = mg Wr^T                  (fp32 output)
 *   moe_route      -> the map: experts, weights, rows, offsets
 *   moe_permute    mg -> xp [R, h]           grouped by expert
 *   fc1            xp -> gu [R, 2 fel]       per expert, gate | up
 *   swiglu         gu -> a [R, fel]
 *   moe_gemm       a -> yp [R, h]            (w_down [E, h, fel])
 *   moe_unpermute  yp -> y [n, h]            partial over TP
 *   shared experts y += swiglu(mg Wsgu^T) Wsdown^T   (a dense MLP)
 *
 * R = offsets[E], the rows the routing dispatched.  The experts' w_gate
 * and w_up are two parameters, each one range of the flat buffer
 * ([E, fel, h] each, model.h), so fc1 is two grouped products whose
 * output row stride (ldY = 2 fel) writes gate and up into the two halves
 * of gu's rows, the layout swiglu reads; their data gradients add into
 * one dxp (accumulate_dx).  w_down's stacked [E, h, fel] is moe_gemm's
 * layout as it stands.
 *
 * The backward: unpermute's (dyp, and dweight, partial over TP: summed
 * before moe_route_bwd, as ops.h says), moe_gemm's dgrad and wgrad,
 * swiglu's, fc1's per expert, permute's (into dmg), the shared experts',
 * then the router: moe_route_bwd, the auxiliary and z losses' gradients
 * added into dlogits with the backward scale m->moe_loss_gscale, then
 * dlogits' own rows rounded to act (gemm's operand dtype: on CUDA bf16,
 * not the f32 of dlogits), the router's weight gradient and
 * (gl_moe_router_dx) its share of dmg.
 *
 * Expert parallelism (m->ep, EP ranks): the rank holds the experts
 * [e0, e0 + El) (model.h's dims), El = E / EP; its EP group's ranks hold the
 * others, in EP index order.  The routing is the rank's own, on its own
 * tokens, as without EP; the permuted rows xp, grouped by expert, are
 * then El-expert blocks, one per EP rank, and travel as Megatron's
 * all-to-all dispatcher moves them:
 *
 *   counts    the rows per expert, all-to-all over EP (El per peer),
 *             so each rank knows what it receives
 *   dispatch  xp's block j to EP rank j (all-to-allv): xa [Rl, h], by
 *             source rank, then by local expert within each source
 *   sort      xa -> xr grouped by local expert (by source within one)
 *   experts   fc1, activation, w_down on xr with the local map (El
 *             experts) -> yl [Rl, h] (in the scratch dyl)
 *   unsort    yl -> xa by source again
 *   combine   the reverse all-to-allv: yp [R, h] in xp's order, then
 *             moe_unpermute with the routing weights as without EP.
 *
 * The sort and unsort are moe_permute / moe_permute_bwd on a map of one
 * "expert" and one slot per row (smap), whose row_tok and rows are
 * the permutation and its inverse.  The backward runs the same steps in
 * reverse: dyp by the same dispatch and sort to the experts, their
 * backward (the weight gradients of the local experts, summed over every
 * EP rank's tokens), dxl unsorted and sent back, moe_permute_bwd into
 * dmg.  Every rank of an EP group runs the same layers' exchanges in the
 * same order (the schedule is the same on each), so the collectives
 * match; a forward-only pass (validation) and full recomputation run
 * the forward's exchanges on every rank of the group alike.
 *
 * At EP 1 the layers take the direct path (experts on xp, no exchange)
 * unless m->moe_dispatch (GRIDLM_MOE_DISPATCH=1) asks for the steps
 * above: El = E, the exchanges copies on the device, the sort the
 * identity; the numbers are the direct path's bit for bit, through the
 * dispatcher's code (so that one GPU runs it: t/train-cuda.c).
 *
 * Expert parallelism with tensor parallelism, the experts split (ETP =
 * TP, the default): the expert grid's ETP groups are the TP groups and each
 * EP group joins the ranks of one TP index, which hold the same F/TP
 * slice of their experts.  Every TP rank routes all n rows alike (mg is
 * gathered under SP) and exchanges them with its EP peers as above, so
 * that each slice sees every row routed to its experts; what comes back
 * is partial over TP, as without EP, and layer.c reduces it.  Megatron's
 * alltoall dispatcher moves the same rows in another order: each TP rank
 * sends its own n/TP tokens over EP, gathers the rows that arrived over
 * ETP before the experts and reduce-scatters their outputs over ETP
 * before the way back.  Routing is per token and the experts act per
 * row, so both give the same numbers (up to the order of the weight
 * gradients' sums); here the gather and the reduction are those layer.c
 * makes for any MLP, and each EP exchange carries all n rows, TP times
 * Megatron's n/TP.
 *
 * Unsplit experts under tensor parallelism (ETP 1 < TP, with EP > 1,
 * Megatron's common setting): each rank holds its El experts whole, and
 * an EP group may join ranks of one TP group.  Every TP rank still routes
 * all n rows alike (the drops are those of the whole micro-batch), but
 * dispatches only the rows of its share of the tokens (by_share: its own
 * rows under SP, else the TP index's n / TP of them), as Megatron's
 * ranks dispatch their own tokens: the share's rows of xp, still grouped
 * by expert, are gathered into a send buffer by a one-expert map (shmap,
 * built on the host from row_tok), and what comes back is scattered to
 * xp's order with zeros on the other shares' rows.  y is then whole on
 * the share's tokens and zero on the others', a partial sum over TP that
 * layer.c's reduction completes; so are dweight (summed over TP as
 * before) and dmg.
 *
 * With --moe-shared-expert-overlap (shared_overlap) the dispatch is
 * posted non-blocking (gl_all_to_allv_start) and the shared experts' fc1
 * and activation (forward) or backward run while it travels (by_share:
 * while the share's rows travel).
 *
 * The allgather dispatcher (--moe-token-dispatcher-type allgather, the
 * default; Megatron's MoEAllGatherTokenDispatcher) sends no token to
 * a chosen rank: every rank of the EP group gets every token of the
 * group and keeps the slots of its own experts.
 *
 *   gather    mg, the routing's experts, rows and weights, all-gathered
 *             over EP: xg [EP n, h] (EP index order), and the slots
 *   local map the gathered slots of the local experts, grouped by local
 *             expert in gathered token order (lmap: EP n tokens, El
 *             experts; the other experts' slots, and dropped ones, get
 *             row -1), built on the host
 *   experts   moe_permute of xg, fc1, activation, w_down -> x->yp [Rl, h]
 *   combine   moe_unpermute with the gathered weights -> [EP n, h], the
 *             local experts' part of every gathered token's output, then
 *             reduce-scattered (summed) over EP: y [n, h].
 *
 * Its backward is the transpose: dz all-gathered, moe_unpermute_bwd on
 * lmap (dyp of the local rows, and dweight of the gathered slots, zero
 * in the other ranks' slots, reduce-scattered to the own tokens'
 * dweight), the experts' backward, moe_permute_bwd into [EP n, h] and
 * its reduce-scatter into dmg.  The output is the same sum as without
 * EP, the partial sums of each rank's slots added over EP: equal to
 * EP 1 within rounding.  It is built and tested with TP 1 only
 * (run_config.c refuses TP > 1 with it; scratch() stops).
 *
 * Recomputation: every MoE layer keeps its own buffers (A->moe), which
 * no recomputation shares; selective recomputation rebuilds mg as for a
 * dense layer and nothing of the MoE block; full recomputation re-runs
 * gl_moe_fwd, which rebuilds the same buffers bit for bit (the routing
 * is a function of the logits), counting nothing again.  xp and a are
 * rebuilt in the backward from what is kept (a permutation and a
 * SwiGLU), so they live in shared scratch.
 *
 * FP8 (--fp8-format; model.h: gl_model_fp8_moe): an FP8 layer's experts
 * run fc1 and fc2 through fp8.c's gl_model_fp8_moe_fwd / _bwd in place of
 * moe_gemm, moe_gemm_dgrad and moe_gemm_wgrad, each expert with scales of
 * its own; the router and the shared experts stay as they are.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/layer.h"
#include "model/moe.h"

#define OPS (m->d->ops)
#define DIMS (&m->plan->dm)

/* What one MoE layer keeps for one micro-batch. */
struct gl_moe_acts {
    float *logits;              /* [n, E] */
    gl_moe_map map;             /* rows_max R_max */
    void *gu;                   /* [R_max, guw] fc1 outputs */
    void *yp;                   /* [R_max, h] expert outputs (partial) */
    void *sgu;                  /* [n, 2 fsl] shared experts' fc1 */
    float *counts;              /* [G, E] load-balancing counts (summed over TP) */
    /* expert parallelism only (see the top): */
    void *xr;                   /* [Rl_max, h] the received rows, sorted */
    gl_moe_map lmap;            /* the local experts' groups of xr; allgather:
                                 * the local map of the EP n gathered tokens */
    gl_moe_map smap;            /* xa (by source) <-> xr (by expert) */
    size_t *sendc, *sendd;      /* [EP] rows sent to each EP rank, displacements */
    size_t *recvc, *recvd;      /* [EP] rows received from each, displacements */
    /* by_share only (ETP 1 < TP): */
    gl_moe_map shmap;           /* xp's rows (n = R) <-> the share's (sent) */
    int32_t *soff;              /* [E + 1] host: the share's rows per expert */
    int gsteps;                 /* global_aux_loss: the micro-batches its counts
                                 * (the step's so far, this one included) add */
};

/* Shared by every layer: rebuilt or transient values. */
struct gl_moe_scratch {
    int rmax, guw;              /* permuted rows; fc1 width (2 fel or fel) */
    int rlmax;                  /* rows the local experts may get: rmax, or
                                 * EP rmax under expert parallelism */
    int sgw;                    /* shared fc1 width */
    void *xp, *a, *dyp, *da, *dgu, *dxp;
    void *ss, *dss, *dsgu;      /* shared experts: activation and gradients */
    float *dweight;             /* [n, k] */
    float *dlogits;             /* [n, E] */
    void *dlact;                /* [n, E]: its first nown rows, the own rows
                                   of dlogits in act, the router products'
                                   operand (gemm reads act, ops.h) */
    float *bias;                /* [E] the expert bias in f32 */
    float *tok;                 /* [E] tokens per expert of one call */
    /* expert parallelism only: */
    void *xa;                   /* [rlmax, h] rows by source rank */
    void *dyl, *dxl;            /* [rlmax, h] the local experts' gradients */
    int32_t *cnt;               /* [2 E] counts sent | received (device) */
    int32_t *cnt_host;          /* [2 E] the same on the host */
    int32_t *perm_host;         /* [2 rlmax] a sort and its inverse;
                                 * allgather: lmap's row_tok */
    int32_t *tok_host;          /* [rmax] row_tok on the host (by_share) */
    /* the allgather dispatcher only: */
    void *xg;                   /* [EP n, h] gathered tokens, their outputs
                                 * or gradients */
    void *xown;                 /* [n, h] the own tokens' reduced gradient */
    float *dwg;                 /* [EP n, k] dweight of the gathered slots */
    int32_t *slot_host;         /* [2 EP n k] gathered experts | rows */
    /* global_aux_loss's running state (Megatron's global_tokens_per_expert
     * and ga_steps), per global layer, zeroed at the end of every step
     * (gl_model_moe_step_end): this rank's own counts summed over the
     * step's micro-batches so far, and their number */
    float *gcount;              /* [L, E] */
    int *gsteps;                /* [L] (host) */
    int *checks;                /* [2 L] GRIDLM_MOE_CHECK: forwards and
                                   backwards checked per layer; NULL: off */
    int check_layer;            /* the layer gl_moe_bwd last checked */
};

static void *W(const gl_model *m, size_t off)
{
    return gl_model_weight(m, off);
}

static float *G(const gl_model *m, size_t off)
{
    return gl_model_grad(m, off);
}

/* moe_gemm_wgrad's accumulate_dw for the experts' gradient at
 * [off, off + count): written by the iteration's first product. */
static int wgrad_acc(gl_model *m, size_t off, size_t count)
{
    return gl_model_grad_beta(m, off, count) != 0.0f;
}

/* The routing options of ops.h from the model and the run's settings. */
static gl_moe_route_cfg route_cfg(const gl_model *m)
{
    const gl_model_dims *dm = DIMS;
    const gl_arch *a = &m->plan->arch;
    gl_moe_route_cfg c;
    memset(&c, 0, sizeof c);
    c.E = dm->E;
    c.k = dm->topk;
    c.score = a->moe_router_score_function == GL_ROUTER_SIGMOID ? GL_MOE_SIGMOID
                                                                 : GL_MOE_SOFTMAX;
    c.pre_softmax = a->moe_router_pre_softmax;
    c.scaling = (float)a->moe_router_topk_scaling_factor;
    if (m->moe_opts.capacity_factor > 0)
        c.capacity = gl_moe_capacity(dm->n, dm->topk, dm->E, m->moe_opts.capacity_factor);
    c.drop = m->moe_opts.token_drop_policy == GL_DROP_BY_POSITION ? GL_MOE_DROP_POSITION
                                                                   : GL_MOE_DROP_PROBS;
    c.pad = m->moe_opts.pad_expert_input_to_capacity;
    return c;
}

/* The rank's own rows of the router's terms: [r0, r0 + nown). */
static void own_range(const gl_model *m, int *r0, int *nown)
{
    const gl_model_dims *dm = DIMS;
    *r0 = dm->sp ? dm->tp_rank * dm->nl : 0;
    *nown = dm->sp ? dm->nl : dm->n;
}

/* Whether the rank dispatches only its share of the tokens: unsplit
 * experts (ETP 1) under TP > 1 with expert parallelism (see the top). */
static int by_share(const gl_model *m)
{
    return m->ep && DIMS->etp < DIMS->tp;
}

/* The rank's share of the tokens under by_share: [t0, t1), its own rows
 * under SP, else its TP index's part of the n. */
static void share_range(const gl_model *m, int *t0, int *t1)
{
    const gl_model_dims *dm = DIMS;
    if (dm->sp) {
        *t0 = dm->tp_rank * dm->nl;
        *t1 = *t0 + dm->nl;
    } else {
        *t0 = (int)((long)dm->tp_rank * dm->n / dm->tp);
        *t1 = (int)((long)(dm->tp_rank + 1) * dm->n / dm->tp);
    }
}

/* Groups of the auxiliary loss: B sequences (seq_aux_loss) or 1. */
static int aux_groups(const gl_model *m)
{
    return m->moe_opts.load_balancing_type == GL_MOE_LB_SEQ_AUX_LOSS ? DIMS->B : 1;
}

static int aux_on(const gl_model *m)
{
    return m->moe_opts.aux_loss_coeff > 0 &&
           m->moe_opts.load_balancing_type != GL_MOE_LB_NONE;
}

static int aux_global(const gl_model *m)
{
    return m->moe_opts.load_balancing_type == GL_MOE_LB_GLOBAL_AUX_LOSS;
}

/* Megatron's scales (ops.h: moe_aux_loss, moe_z_loss), the sums over
 * the TP x CP group's tokens: under context parallelism a rank holds
 * dm->S of each sequence's CP S and n of the micro-batch's CP n tokens
 * (its TP ranks' together).  aux_loss: T = the micro-batch's CP n
 * tokens whatever the layout; seq_aux_loss: per sequence of CP S.
 * global_aux_loss: T = the tokens of the micro-batch's counterparts on
 * every CP and DP rank, n CP DP, and the counts x->counts hold are the
 * running sum over x->gsteps micro-batches, whose mean is the loss's. */
static float aux_scale(const gl_model *m, const struct gl_moe_acts *x)
{
    const gl_model_dims *dm = DIMS;
    double c = m->moe_opts.aux_loss_coeff;
    if (m->moe_opts.load_balancing_type == GL_MOE_LB_SEQ_AUX_LOSS) {
        double S = (double)dm->S * dm->cp;
        return (float)(c * dm->E / ((double)dm->topk * S * S * dm->B));
    }
    if (aux_global(m)) {
        double T = (double)dm->n * dm->cp * (m->moe_dp ? gl_comm_size(m->moe_dp) : 1);
        return (float)(c * dm->E / ((double)dm->topk * T * T * x->gsteps));
    }
    double T = (double)dm->n * dm->cp;
    return (float)(c * dm->E / ((double)dm->topk * T * T));
}

/* Megatron's mean over the rank's tokens with the coefficient divided by
 * the TP x CP size: coeff / (n CP) on the own rows' sum. */
static float z_scale(const gl_model *m)
{
    return (float)(m->moe_opts.z_loss_coeff / ((double)DIMS->n * DIMS->cp));
}

/* ---- GRIDLM_MOE_CHECK=N: a diagnostic of non-finite values ----
 *
 * With N > 0, the first N forwards and the first N backwards of every
 * MoE layer download each buffer the block writes (and its inputs) after
 * the op that wrote it, and print to stderr, one line each,
 *   moe layer L fwd|bwd op NAME: n nonfinite of m (max |finite| x)
 * so that a NaN is traced to the first op that made it.  A debugging
 * aid: it waits for the device at every line.  Unset, 0 or empty: off,
 * one cached test per call. */
static int check_limit(void)
{
    static int limit = -1;
    if (limit < 0) {
        const char *e = getenv("GRIDLM_MOE_CHECK");
        limit = e && *e ? atoi(e) : 0;
        if (limit < 0)
            limit = 0;
    }
    return limit;
}

/* Whether this pass (0 forward, 1 backward) of the layer is checked,
 * counting it. */
static int check_now(gl_model *m, int layer, int bwd)
{
    struct gl_moe_scratch *s = m->moe_scratch;
    if (!s || !s->checks || layer < 0 || layer >= DIMS->L)
        return 0;
    int *c = &s->checks[2 * (size_t)layer + bwd];
    if (*c >= check_limit())
        return 0;
    (*c)++;
    return 1;
}

/* One line on count values at p: f32, or act (fp32 or bf16). */
static void check_buf(gl_model *m, int layer, int bwd, const char *op, const void *p,
                      size_t count, int f32)
{
    gl_dev *d = m->d;
    size_t es = f32 ? sizeof(float) : d->act_bytes;
    size_t bad = 0;
    double mx = 0;
    if (p && count) {
        unsigned char *h = gl_malloc(count * es);
        OPS->download(d, h, p, count * es);
        for (size_t i = 0; i < count; i++) {
            float v;
            if (es == sizeof(float)) {
                memcpy(&v, h + i * es, sizeof v);
            } else {            /* bf16: the high half of an fp32 */
                uint16_t u;
                memcpy(&u, h + i * es, sizeof u);
                uint32_t w = (uint32_t)u << 16;
                memcpy(&v, &w, sizeof v);
            }
            if (!isfinite(v))
                bad++;
            else if (fabs(v) > mx)
                mx = fabs(v);
        }
        free(h);
    }
    fprintf(stderr, "moe layer %d %s op %s: %zu nonfinite of %zu (max |finite| %g)\n", layer,
            bwd ? "bwd" : "fwd", op, bad, p ? count : 0, mx);
}

/* A check of the current pass: ck, layer and bwd in scope. */
#define CHECK(op, p, count, f32)                                               \
    do {                                                                       \
        if (ck)                                                                \
            check_buf(m, layer, bwd, op, p, (size_t)(count), f32);             \
    } while (0)

/* Whether the EP exchange is the allgather dispatcher's (see the top). */
static int ep_allgather(const gl_model *m)
{
    return m->ep && m->moe_opts.token_dispatcher == GL_DISPATCH_ALLGATHER;
}

/* ---- the buffers' sizes ----
 *
 * One fact for the three places that need them: scratch() and acts()
 * allocate each buffer with the bytes sizes() gives it, and
 * gl_model_moe_bytes adds the same numbers up.  A size of 0: the buffer
 * is not allocated (NULL).  Host arrays (offsets_host, the EP counts and
 * sort, the allgather's slots) are not device memory and are not listed. */

/* A layer's kept buffers (struct gl_moe_acts). */
enum {
    B_LOGITS, B_EXPERT, B_WEIGHT, B_ROWS, B_ROW_TOK, B_OFFSETS, B_GU, B_YP, B_SGU, B_COUNTS,
    B_XR, B_LOFFSETS, B_SROW_TOK, B_SROWS, B_SOFFSETS,         /* expert parallelism */
    B_HROW_TOK, B_HROWS, B_HOFFSETS,                            /* by_share's map */
    B_LEXPERT, B_LWEIGHT, B_LROWS, B_LROW_TOK,                  /* allgather's lmap */
    NB_LAYER
};

/* The shared scratch (struct gl_moe_scratch). */
enum {
    S_XP, S_A, S_DYP, S_DA, S_DGU, S_DXP, S_SS, S_DSS, S_DSGU, S_DWEIGHT, S_DLOGITS, S_DLACT,
    S_BIAS, S_TOK, S_GCOUNT,
    S_XA, S_DYL, S_DXL, S_CNT,                                  /* expert parallelism */
    S_XG, S_XOWN, S_DWG,                                        /* the allgather dispatcher */
    NB_SHARED
};

typedef struct {
    int rmax;                   /* the routing's rows (gl_moe_rows_max) */
    int rlmax;                  /* rows the local experts may get */
    int guw, sgw;               /* fc1 widths: routed and shared experts */
    size_t layer[NB_LAYER];     /* bytes of each */
    size_t shared[NB_SHARED];
} moe_sizes;

/* Whether the MoE layers run the expert-parallel dispatch (the EP
 * buffers exist): EP > 1, or at EP 1 when m->moe_dispatch asks for it
 * (m->ep is then NULL and the exchanges are copies). */
static int dispatched(const gl_model *m)
{
    return DIMS->ep > 1 || m->moe_dispatch;
}

static void sizes(const gl_model *m, moe_sizes *z)
{
    const gl_model_dims *dm = DIMS;
    gl_moe_route_cfg c = route_cfg(m);
    memset(z, 0, sizeof *z);
    z->rmax = gl_moe_rows_max(dm->n, &c);
    /* under EP every rank of the group may send all its rows here (the
     * allgather dispatcher: the group's n tokens each, as many) */
    z->rlmax = dispatched(m) ? dm->ep * z->rmax : z->rmax;
    z->guw = dm->swiglu ? 2 * dm->fel : dm->fel;
    z->sgw = dm->swiglu ? 2 * dm->fsl : dm->fsl;
    size_t ab = m->d->act_bytes, fb = sizeof(float), ib = sizeof(int32_t);
    size_t n = (size_t)dm->n, k = (size_t)dm->topk, E = (size_t)dm->E, h = (size_t)dm->h;
    size_t R = z->rmax ? (size_t)z->rmax : 1, Rl = z->rlmax ? (size_t)z->rlmax : 1;
    size_t fel = (size_t)dm->fel, fsl = dm->fs ? (size_t)dm->fsl : 0;
    size_t guw = (size_t)z->guw, sgw = dm->fs ? (size_t)z->sgw : 0;
    size_t *L = z->layer, *S = z->shared;
    int ag = ep_allgather(m);

    L[B_LOGITS] = n * E * fb;
    L[B_EXPERT] = n * k * ib;
    L[B_WEIGHT] = n * k * fb;
    L[B_ROWS] = n * k * ib;
    L[B_ROW_TOK] = R * ib;
    L[B_OFFSETS] = (E + 1) * ib;
    L[B_GU] = Rl * guw * ab;                /* the experts' rows here */
    L[B_YP] = (ag ? Rl : R) * h * ab;       /* allgather: the local rows' */
    L[B_SGU] = n * sgw * ab;
    L[B_COUNTS] = (size_t)aux_groups(m) * E * fb;

    S[S_XP] = R * h * ab;
    S[S_A] = Rl * fel * ab;
    S[S_DYP] = R * h * ab;
    S[S_DA] = Rl * fel * ab;
    S[S_DGU] = Rl * guw * ab;
    S[S_DXP] = R * h * ab;
    S[S_SS] = n * fsl * ab;
    S[S_DSS] = n * fsl * ab;
    S[S_DSGU] = n * sgw * ab;
    S[S_DWEIGHT] = n * k * fb;
    S[S_DLOGITS] = n * E * fb;
    S[S_DLACT] = n * E * ab;
    S[S_BIAS] = E * fb;
    S[S_TOK] = E * fb;
    S[S_GCOUNT] = aux_global(m) ? (size_t)dm->L * E * fb : 0;

    if (dispatched(m)) {
        L[B_XR] = Rl * h * ab;
        L[B_LOFFSETS] = ((size_t)dm->El + 1) * ib;
        L[B_SROW_TOK] = Rl * ib;
        L[B_SROWS] = Rl * ib;
        L[B_SOFFSETS] = 2 * ib;
        S[S_XA] = ag ? 0 : Rl * h * ab;     /* allgather: xg instead */
        S[S_DYL] = Rl * h * ab;
        S[S_DXL] = Rl * h * ab;
        S[S_CNT] = 2 * E * ib;
    }
    if (by_share(m)) {
        L[B_HROW_TOK] = R * ib;
        L[B_HROWS] = R * ib;
        L[B_HOFFSETS] = 2 * ib;
    }
    if (ag) {
        size_t ng = (size_t)dm->ep * n;     /* the gathered tokens */
        L[B_LEXPERT] = ng * k * ib;
        L[B_LWEIGHT] = ng * k * fb;
        L[B_LROWS] = ng * k * ib;
        L[B_LROW_TOK] = Rl * ib;
        S[S_XG] = ng * h * ab;
        S[S_XOWN] = n * h * ab;
        S[S_DWG] = ng * k * fb;
    }
}

/* A device buffer of `bytes` (sizes()), NULL for 0. */
static void *buf(gl_model *m, size_t bytes)
{
    return bytes ? OPS->alloc(m->d, bytes) : NULL;
}

void gl_model_moe_bytes(const gl_model *m, size_t *per_layer, size_t *shared)
{
    *per_layer = *shared = 0;
    if (!DIMS->E)
        return;
    moe_sizes z;
    sizes(m, &z);
    for (int i = 0; i < NB_LAYER; i++)
        *per_layer += z.layer[i];
    for (int i = 0; i < NB_SHARED; i++)
        *shared += z.shared[i];
}

/* The scratch, made at the first MoE forward. */
static struct gl_moe_scratch *scratch(gl_model *m)
{
    if (m->moe_scratch)
        return m->moe_scratch;
    const gl_model_dims *dm = DIMS;
    if (ep_allgather(m) && m->tp)
        gl_die("moe: the allgather dispatcher with EP %d and TP %d is not built", dm->ep, dm->tp);
    struct gl_moe_scratch *s = gl_calloc(1, sizeof *s);
    moe_sizes z;
    sizes(m, &z);
    const size_t *S = z.shared;
    s->rmax = z.rmax;
    s->rlmax = z.rlmax;
    s->guw = z.guw;
    s->sgw = z.sgw;
    s->xp = buf(m, S[S_XP]);
    s->a = buf(m, S[S_A]);
    s->dyp = buf(m, S[S_DYP]);
    s->da = buf(m, S[S_DA]);
    s->dgu = buf(m, S[S_DGU]);
    s->dxp = buf(m, S[S_DXP]);
    s->ss = buf(m, S[S_SS]);
    s->dss = buf(m, S[S_DSS]);
    s->dsgu = buf(m, S[S_DSGU]);
    s->dweight = buf(m, S[S_DWEIGHT]);
    s->dlogits = buf(m, S[S_DLOGITS]);
    s->dlact = buf(m, S[S_DLACT]);
    s->bias = buf(m, S[S_BIAS]);
    s->tok = buf(m, S[S_TOK]);
    s->gcount = buf(m, S[S_GCOUNT]);
    if (s->gcount) {
        OPS->zero(m->d, s->gcount, S[S_GCOUNT]);
        s->gsteps = gl_calloc((size_t)dm->L, sizeof *s->gsteps);
    }
    s->xa = buf(m, S[S_XA]);
    s->dyl = buf(m, S[S_DYL]);
    s->dxl = buf(m, S[S_DXL]);
    s->cnt = buf(m, S[S_CNT]);
    if (dispatched(m)) {
        s->cnt_host = gl_calloc(2 * (size_t)dm->E, sizeof(int32_t));
        s->perm_host = gl_calloc(2 * (size_t)(s->rlmax ? s->rlmax : 1), sizeof(int32_t));
        if (by_share(m))
            s->tok_host = gl_calloc((size_t)(s->rmax ? s->rmax : 1), sizeof(int32_t));
    }
    s->xg = buf(m, S[S_XG]);
    s->xown = buf(m, S[S_XOWN]);
    s->dwg = buf(m, S[S_DWG]);
    if (ep_allgather(m))        /* the gathered experts | rows */
        s->slot_host = gl_calloc(2 * (size_t)dm->ep * dm->n * dm->topk, sizeof(int32_t));
    if (check_limit() > 0)
        s->checks = gl_calloc(2 * (size_t)dm->L, sizeof(int));
    s->check_layer = -1;
    m->moe_scratch = s;
    return s;
}

/* A layer's kept buffers, made at its first forward. */
static struct gl_moe_acts *acts(gl_model *m, gl_layer_acts *A)
{
    if (A->moe)
        return A->moe;
    const gl_model_dims *dm = DIMS;
    struct gl_moe_scratch *s = scratch(m);
    gl_dev *d = m->d;
    moe_sizes z;
    sizes(m, &z);
    const size_t *L = z.layer;
    struct gl_moe_acts *x = gl_calloc(1, sizeof *x);
    x->logits = buf(m, L[B_LOGITS]);
    gl_moe_map *mp = &x->map;
    mp->n = dm->n;
    mp->k = dm->topk;
    mp->E = dm->E;
    mp->rows_max = s->rmax;
    mp->expert = buf(m, L[B_EXPERT]);
    mp->weight = buf(m, L[B_WEIGHT]);
    mp->rows = buf(m, L[B_ROWS]);
    mp->row_tok = buf(m, L[B_ROW_TOK]);
    mp->offsets = buf(m, L[B_OFFSETS]);
    mp->offsets_host = OPS->alloc_host(d, ((size_t)dm->E + 1) * sizeof(int32_t));
    x->gu = buf(m, L[B_GU]);
    x->yp = buf(m, L[B_YP]);
    x->sgu = buf(m, L[B_SGU]);
    x->counts = buf(m, L[B_COUNTS]);
    if (dispatched(m)) {
        int El = dm->El, P = dm->ep;
        x->xr = buf(m, L[B_XR]);
        x->lmap = (gl_moe_map){ .n = 0, .k = 1, .E = El, .rows_max = s->rlmax };
        x->lmap.offsets = buf(m, L[B_LOFFSETS]);
        x->lmap.offsets_host = OPS->alloc_host(d, ((size_t)El + 1) * sizeof(int32_t));
        if (ep_allgather(m)) {  /* the gathered tokens' slots */
            x->lmap.n = P * dm->n;
            x->lmap.k = dm->topk;
            x->lmap.expert = buf(m, L[B_LEXPERT]);
            x->lmap.weight = buf(m, L[B_LWEIGHT]);
            x->lmap.rows = buf(m, L[B_LROWS]);
            x->lmap.row_tok = buf(m, L[B_LROW_TOK]);
        }
        x->smap = (gl_moe_map){ .n = 0, .k = 1, .E = 1, .rows_max = s->rlmax };
        x->smap.row_tok = buf(m, L[B_SROW_TOK]);
        x->smap.rows = buf(m, L[B_SROWS]);
        x->smap.offsets = buf(m, L[B_SOFFSETS]);
        x->smap.offsets_host = OPS->alloc_host(d, 2 * sizeof(int32_t));
        x->sendc = gl_calloc(4 * (size_t)P, sizeof(size_t));
        x->sendd = x->sendc + P;
        x->recvc = x->sendc + 2 * P;
        x->recvd = x->sendc + 3 * P;
        if (by_share(m)) {
            x->shmap = (gl_moe_map){ .n = 0, .k = 1, .E = 1, .rows_max = s->rmax };
            x->shmap.row_tok = buf(m, L[B_HROW_TOK]);
            x->shmap.rows = buf(m, L[B_HROWS]);
            x->shmap.offsets = buf(m, L[B_HOFFSETS]);
            x->shmap.offsets_host = OPS->alloc_host(d, 2 * sizeof(int32_t));
            x->soff = gl_calloc((size_t)dm->E + 1, sizeof(int32_t));
        }
    }
    A->moe = x;
    return x;
}

/* Free what acts() allocated for a map: its device arrays and host
 * offsets, skipping those it has not (NULL). */
static void map_free(gl_dev *d, gl_moe_map *mp)
{
    void *dev[] = { mp->expert, mp->weight, mp->rows, mp->row_tok, mp->offsets };
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i])
            d->ops->free(d, dev[i]);
    if (mp->offsets_host)
        d->ops->free_host(d, mp->offsets_host);
    memset(mp, 0, sizeof *mp);
}

void gl_moe_acts_free(gl_model *m, gl_layer_acts *A)
{
    struct gl_moe_acts *x = A->moe;
    if (!x)
        return;
    gl_dev *d = m->d;
    void *bufs[] = { x->logits, x->gu, x->yp, x->sgu, x->counts, x->xr };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            OPS->free(d, bufs[i]);
    map_free(d, &x->map);
    map_free(d, &x->lmap);
    map_free(d, &x->smap);
    map_free(d, &x->shmap);
    free(x->soff);
    free(x->sendc);
    free(x);
    A->moe = NULL;
}

void gl_moe_free(gl_model *m)
{
    struct gl_moe_scratch *s = m->moe_scratch;
    gl_dev *d = m->d;
    if (m->moe_stats)
        OPS->free(d, m->moe_stats);
    m->moe_stats = NULL;
    if (!s)
        return;
    void *bufs[] = { s->xp, s->a, s->dyp, s->da, s->dgu, s->dxp, s->ss, s->dss, s->dsgu,
                     s->dweight, s->dlogits, s->dlact, s->bias, s->tok, s->gcount,
                     s->xa, s->dyl, s->dxl, s->cnt, s->xg, s->xown, s->dwg };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            OPS->free(d, bufs[i]);
    free(s->gsteps);
    free(s->checks);
    free(s->cnt_host);
    free(s->perm_host);
    free(s->tok_host);
    free(s->slot_host);
    free(s);
    m->moe_scratch = NULL;
}

void gl_model_moe_step_end(gl_model *m)
{
    struct gl_moe_scratch *s = m->moe_scratch;
    if (!s || !s->gcount)
        return;
    OPS->zero(m->d, s->gcount, (size_t)DIMS->L * DIMS->E * sizeof(float));
    memset(s->gsteps, 0, (size_t)DIMS->L * sizeof *s->gsteps);
}

/* global_aux_loss's counts of this micro-batch of global layer `layer`
 * (Megatron's _apply_global_aux_loss): the own rows' top-k counts join
 * the layer's running sum of the step; x->counts gets that sum over the
 * TP (under SP), CP and DP ranks -- every rank's micro-batches of the
 * step so far, each micro-batch's tokens counted once -- and x->gsteps
 * their number (aux_scale divides by it: the mean).  Megatron sums each
 * micro-batch's counts over TP x CP x DP before adding them up; the sum
 * of the running sums is the same integers. */
static void global_counts(gl_model *m, int layer, struct gl_moe_acts *x, const float *lg,
                          int nown, int r0, const gl_moe_route_cfg *cfg)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    struct gl_moe_scratch *s = m->moe_scratch;
    size_t E = (size_t)dm->E;
    float *run = s->gcount + (size_t)layer * E;
    OPS->moe_aux_counts(d, run, lg, nown, r0, 0, cfg);
    x->gsteps = ++s->gsteps[layer];
    gl_comm *over[] = { dm->sp ? m->tp : NULL, m->cp, m->moe_dp };
    const float *src = run;
    for (size_t i = 0; i < sizeof over / sizeof *over; i++)
        if (over[i]) {
            gl_all_reduce(over[i], src, x->counts, E, GL_DT_F32, GL_OP_SUM, d->stream);
            src = x->counts;
        }
    if (src == run)
        OPS->copy(d, x->counts, run, E * sizeof(float));
}

size_t gl_moe_split_end(const gl_model *m, const gl_layer_offs *lo)
{
    const gl_model_dims *dm = DIMS;
    if (dm->fs)
        return lo->sdown + (size_t)dm->h * dm->fsl;
    if (dm->ep > 1)             /* the experts are in region 3: wo ends it */
        return lo->wo + (size_t)dm->h * dm->hq * dm->D;
    return lo->edown + (size_t)dm->El * dm->h * dm->fel;
}

void gl_moe_need(gl_model *m, const gl_layer_offs *lo)
{
    const gl_model_dims *dm = DIMS;
    gl_need_weights(m, lo->router, (size_t)dm->E * dm->h);
    if (dm->ep > 1)             /* the experts in region 3 (model.h) */
        gl_need_weights(m, lo->egu, lo->edown + (size_t)dm->El * dm->h * dm->fel - lo->egu);
    if (m->plan->arch.moe_router_enable_expert_bias)
        gl_need_weights(m, lo->ebias, (size_t)dm->E);
}

size_t gl_moe_up_off(const gl_model *m, const gl_layer_offs *lo)
{
    const gl_model_dims *dm = DIMS;
    return lo->egu + (dm->swiglu ? (size_t)dm->El * dm->fel * dm->h : 0);
}

/* gu [R, guw] = xp [Wg_e; Wu_e]^T per expert: the gate and up products,
 * each from its own stacked weights, into the two halves of gu's rows. */
static void fc1_fwd(gl_model *m, const gl_layer_offs *lo, struct gl_moe_acts *x,
                    const gl_moe_map *map, const void *xp, int guw)
{
    const gl_model_dims *dm = DIMS;
    void *Y = x->gu;
    if (dm->swiglu) {
        OPS->moe_gemm(m->d, Y, guw, xp, W(m, lo->egu), dm->h, dm->fel, map);
        Y = gl_act_at(m, Y, (size_t)dm->fel);
    }
    OPS->moe_gemm(m->d, Y, guw, xp, W(m, gl_moe_up_off(m, lo)), dm->h, dm->fel, map);
}

/* fc1's backward: dW (+)= dgu_e^T xp_e, dxp = dgu_e [Wg_e; Wu_e] (the
 * up half's added to the gate half's). */
static void fc1_bwd(gl_model *m, const gl_layer_offs *lo, const gl_moe_map *map,
                    const void *xp, const void *dgu, void *dxp, int guw)
{
    const gl_model_dims *dm = DIMS;
    const void *dY = dgu;
    int acc = 0;
    if (dm->swiglu) {
        OPS->moe_gemm_wgrad(m->d, G(m, lo->egu), dY, guw, xp, dm->h, dm->fel, map,
                            wgrad_acc(m, lo->egu, (size_t)dm->El * dm->fel * dm->h));
        OPS->moe_gemm_dgrad(m->d, dxp, dY, guw, W(m, lo->egu), dm->h, dm->fel, map, 0);
        dY = gl_act_at(m, (void *)dY, (size_t)dm->fel);
        acc = 1;
    }
    size_t uo = gl_moe_up_off(m, lo);
    OPS->moe_gemm_wgrad(m->d, G(m, uo), dY, guw, xp, dm->h, dm->fel, map,
                        wgrad_acc(m, uo, (size_t)dm->El * dm->fel * dm->h));
    OPS->moe_gemm_dgrad(m->d, dxp, dY, guw, W(m, uo), dm->h, dm->fel, map, acc);
}

/* The experts' activation: a [rows, fel] of gu [rows, guw]. */
static void expert_act(gl_model *m, void *a, const void *gu, int rows, int f)
{
    if (rows <= 0)
        return;
    if (DIMS->swiglu)
        OPS->swiglu_fwd(m->d, a, gu, rows, f);
    else
        OPS->gelu_fwd(m->d, a, gu, NULL, rows, f);
}

/* ---- expert parallelism (see the top) ---- */

/* The exchange of the rows to send, grouped by expert at the host's
 * offsets off [E + 1] (x's routing, or by_share the share's): the rows
 * per expert over EP, then the host's send and receive counts and
 * displacements of x, the local experts' map and the sort map.  Returns
 * Rl, the rows received. */
static int ep_plan(gl_model *m, struct gl_moe_scratch *s, struct gl_moe_acts *x,
                   const int32_t *off)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int E = dm->E, El = dm->El, P = dm->ep;
    int32_t *sc = s->cnt_host, *rc = s->cnt_host + E;
    if (!m->ep && P > 1)
        gl_die("moe: expert parallelism %d without its EP group (m->ep)", P);
    for (int e = 0; e < E; e++)
        sc[e] = off[e + 1] - off[e];
    OPS->upload(d, s->cnt, sc, (size_t)E * sizeof(int32_t));
    if (m->ep)
        gl_all_to_all(m->ep, s->cnt, s->cnt + E, (size_t)El, GL_DT_I32, d->stream);
    else                        /* EP 1: what one rank sends itself */
        OPS->copy(d, s->cnt + E, s->cnt, (size_t)E * sizeof(int32_t));
    OPS->download(d, rc, s->cnt + E, (size_t)E * sizeof(int32_t));

    /* rows to and from each EP rank; xa is by source, then local expert */
    size_t rd = 0;
    for (int j = 0; j < P; j++) {
        x->sendc[j] = (size_t)(off[(j + 1) * El] - off[j * El]);
        x->sendd[j] = (size_t)off[j * El];
        x->recvc[j] = 0;
        for (int le = 0; le < El; le++)
            x->recvc[j] += (size_t)rc[j * El + le];
        x->recvd[j] = rd;
        rd += x->recvc[j];
    }
    int Rl = (int)rd;
    if (Rl > s->rlmax)
        gl_die("moe: %d rows arrived for %d local experts, room for %d", Rl, El, s->rlmax);

    /* the sort: row r of xr (by local expert, then source) is row
     * perm[r] of xa; inv the other way */
    int32_t *perm = s->perm_host, *inv = s->perm_host + s->rlmax;
    int32_t *lo = x->lmap.offsets_host;
    int r = 0;
    for (int le = 0; le < El; le++) {
        lo[le] = r;
        for (int j = 0; j < P; j++) {
            int first = (int)x->recvd[j];
            for (int q = 0; q < le; q++)
                first += rc[j * El + q];
            for (int i = 0; i < rc[j * El + le]; i++, r++) {
                perm[r] = first + i;
                inv[first + i] = r;
            }
        }
    }
    lo[El] = r;
    OPS->upload(d, x->lmap.offsets, lo, ((size_t)El + 1) * sizeof(int32_t));
    x->smap.n = Rl;
    x->smap.offsets_host[0] = 0;
    x->smap.offsets_host[1] = Rl;
    OPS->upload(d, x->smap.offsets, x->smap.offsets_host, 2 * sizeof(int32_t));
    if (Rl > 0) {
        OPS->upload(d, x->smap.row_tok, perm, (size_t)Rl * sizeof(int32_t));
        OPS->upload(d, x->smap.rows, inv, (size_t)Rl * sizeof(int32_t));
    }
    return Rl;
}

/* by_share: the rows of xp (x's routing, R rows) whose token is in the
 * rank's share, in xp's order (so still grouped by expert): x->soff
 * their offsets per expert, x->shmap the map from xp's rows to theirs
 * (row_tok: the xp row of each; rows: each xp row's, or -1).  Returns
 * their number. */
static int share_plan(gl_model *m, struct gl_moe_scratch *s, struct gl_moe_acts *x)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int E = dm->E, R = x->map.offsets_host[E], t0, t1;
    share_range(m, &t0, &t1);
    const int32_t *off = x->map.offsets_host;
    int32_t *tok = s->tok_host, *sel = s->perm_host, *at = s->perm_host + s->rlmax;
    if (R > 0)
        OPS->download(d, tok, x->map.row_tok, (size_t)R * sizeof(int32_t));
    int q = 0;
    for (int e = 0; e < E; e++) {
        x->soff[e] = q;
        for (int r = off[e]; r < off[e + 1]; r++) {
            int mine = tok[r] >= t0 && tok[r] < t1;
            at[r] = mine ? q : -1;
            if (mine)
                sel[q++] = r;
        }
    }
    x->soff[E] = q;
    x->shmap.n = R;
    x->shmap.offsets_host[0] = 0;
    x->shmap.offsets_host[1] = q;
    OPS->upload(d, x->shmap.offsets, x->shmap.offsets_host, 2 * sizeof(int32_t));
    if (q > 0)
        OPS->upload(d, x->shmap.row_tok, sel, (size_t)q * sizeof(int32_t));
    if (R > 0)
        OPS->upload(d, x->shmap.rows, at, (size_t)R * sizeof(int32_t));
    return q;
}

/* x's row counts and displacements in elements of rows of h [4 EP]:
 * sendc, sendd, recvc, recvd (the caller frees them). */
static size_t *ep_counts(const gl_model *m, const struct gl_moe_acts *x)
{
    int P = DIMS->ep;
    size_t h = (size_t)DIMS->h;
    size_t *c = gl_malloc(4 * (size_t)P * sizeof *c);
    for (int j = 0; j < 4 * P; j++)
        c[j] = x->sendc[j] * h;
    return c;
}

/* All-to-allv of rows of h: forward (send counts x->sendc, receive
 * x->recvc) or back (the reverse).  At EP 1 (m->moe_dispatch) the
 * rows a rank sends itself are a copy. */
static void ep_exchange(gl_model *m, const struct gl_moe_acts *x, const void *send, void *recv,
                        int back)
{
    int P = DIMS->ep;
    if (!m->ep) {
        if (x->sendc[0])
            OPS->copy(m->d, recv, send, x->sendc[0] * (size_t)DIMS->h * m->d->act_bytes);
        return;
    }
    size_t *c = ep_counts(m, x);
    size_t *sc = c, *sd = c + P, *rc = c + 2 * P, *rd = c + 3 * P;
    if (!back)
        gl_all_to_allv(m->ep, send, sc, sd, recv, rc, rd, m->d->act, m->d->stream);
    else
        gl_all_to_allv(m->ep, send, rc, rd, recv, sc, sd, m->d->act, m->d->stream);
    free(c);
}

/* ep_exchange's forward direction posted without waiting: the shared
 * experts' overlap (gl_comm_req_wait completes it). */
static gl_comm_req *ep_exchange_start(gl_model *m, const struct gl_moe_acts *x,
                                      const void *send, void *recv)
{
    int P = DIMS->ep;
    size_t *c = ep_counts(m, x);
    gl_comm_req *q = gl_all_to_allv_start(m->ep, send, c, c + P, recv, c + 2 * P, c + 3 * P,
                                          m->d->act, m->d->stream);
    free(c);
    return q;
}

/* --moe-shared-expert-overlap (Megatron's, with the alltoall dispatcher):
 * the shared experts' fc1 and activation run while the tokens travel to
 * the experts (the forward's dispatch), their backward while the output
 * gradients travel (the backward's dispatch).  The same products on the
 * same buffers as without it, in the same order per buffer: the same
 * numbers.  Without EP there is nothing to overlap. */
static int shared_overlap(const gl_model *m)
{
    return m->ep && DIMS->fs && m->moe_opts.shared_expert_overlap && !ep_allgather(m);
}

/* The shared experts' fc1 and activation: x->sgu, s->ss from mg. */
static void shared_fc1(gl_model *m, const gl_layer_offs *lo, struct gl_moe_scratch *s,
                       struct gl_moe_acts *x, const void *mg)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    OPS->gemm(d, 0, 1, dm->n, s->sgw, dm->h, 1.0f, mg, dm->h, W(m, lo->sgu), dm->h, 0.0f,
              x->sgu, d->act, s->sgw);
    expert_act(m, s->ss, x->sgu, dm->n, dm->fsl);
}

/* Their down product added to y. */
static void shared_fc2(gl_model *m, const gl_layer_offs *lo, struct gl_moe_scratch *s,
                       void *y)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    OPS->gemm(d, 0, 1, dm->n, dm->h, dm->fsl, 1.0f, s->ss, dm->fsl, W(m, lo->sdown), dm->fsl,
              1.0f, y, d->act, dm->h);
}

/* Their backward from dz: the weight gradients added, dmg = their input
 * gradient (partial over TP). */
static void shared_bwd(gl_model *m, const gl_layer_offs *lo, struct gl_moe_scratch *s,
                       struct gl_moe_acts *x, const void *mg, const void *dz, void *dmg)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int n = dm->n, h = dm->h, fsl = dm->fsl;
    expert_act(m, s->ss, x->sgu, n, fsl);
    OPS->gemm(d, 0, 0, n, fsl, h, 1.0f, dz, h, W(m, lo->sdown), fsl, 0.0f, s->dss, d->act,
              fsl);
    OPS->gemm(d, 1, 0, h, fsl, n, 1.0f, dz, h, s->ss, fsl,
              gl_model_grad_beta(m, lo->sdown, (size_t)h * fsl), G(m, lo->sdown), GL_DT_F32,
              fsl);
    gl_grads_ready(m, lo->sdown, (size_t)h * fsl);
    if (dm->swiglu)
        OPS->swiglu_bwd(d, s->dsgu, s->dss, x->sgu, n, fsl);
    else
        OPS->gelu_bwd(d, s->dsgu, NULL, s->dss, x->sgu, NULL, n, fsl);
    OPS->gemm(d, 1, 0, s->sgw, h, n, 1.0f, s->dsgu, s->sgw, mg, h,
              gl_model_grad_beta(m, lo->sgu, (size_t)s->sgw * h), G(m, lo->sgu), GL_DT_F32, h);
    gl_grads_ready(m, lo->sgu, (size_t)s->sgw * h);
    OPS->gemm(d, 0, 0, n, h, s->sgw, 1.0f, s->dsgu, s->sgw, W(m, lo->sgu), h, 0.0f, dmg,
              d->act, h);
}

/* The allgather dispatcher's routing (see the top): the own routing's
 * experts, rows and weights gathered over EP into x->lmap's arrays, and
 * x->lmap made the map of the local experts' slots of the EP n gathered
 * tokens.  Returns Rl, their rows. */
static int ag_plan(gl_model *m, struct gl_moe_scratch *s, struct gl_moe_acts *x)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    gl_moe_map *lm = &x->lmap;
    int El = dm->El, e0 = dm->e0;
    size_t slots = (size_t)dm->n * dm->topk, all = (size_t)dm->ep * slots;
    gl_all_gather(m->ep, x->map.expert, lm->expert, slots, GL_DT_I32, d->stream);
    gl_all_gather(m->ep, x->map.rows, lm->rows, slots, GL_DT_I32, d->stream);
    gl_all_gather(m->ep, x->map.weight, lm->weight, slots, GL_DT_F32, d->stream);
    int32_t *ex = s->slot_host, *rows = s->slot_host + all;
    OPS->download(d, ex, lm->expert, all * sizeof(int32_t));
    OPS->download(d, rows, lm->rows, all * sizeof(int32_t));

    /* a kept slot of a local expert: its local index; any other, -1 */
    int32_t *off = lm->offsets_host, *tok = s->perm_host;
    memset(off, 0, ((size_t)El + 1) * sizeof *off);
    for (size_t i = 0; i < all; i++) {
        int le = ex[i] - e0;
        ex[i] = rows[i] >= 0 && le >= 0 && le < El ? le : -1;
        if (ex[i] >= 0)
            off[ex[i] + 1]++;
    }
    for (int le = 0; le < El; le++)
        off[le + 1] += off[le];
    int Rl = off[El];
    if (Rl > s->rlmax)
        gl_die("moe: %d rows gathered for %d local experts, room for %d", Rl, El, s->rlmax);

    /* rows in gathered token order within each local expert */
    int32_t *next = gl_malloc((size_t)El * sizeof *next);
    memcpy(next, off, (size_t)El * sizeof *next);
    int k = dm->topk;
    for (size_t i = 0; i < all; i++) {
        rows[i] = ex[i] >= 0 ? next[ex[i]]++ : -1;
        if (rows[i] >= 0)
            tok[rows[i]] = (int32_t)(i / (size_t)k);
    }
    free(next);
    for (int r = Rl; r < s->rlmax; r++)
        tok[r] = -1;
    OPS->upload(d, lm->expert, ex, all * sizeof(int32_t));
    OPS->upload(d, lm->rows, rows, all * sizeof(int32_t));
    OPS->upload(d, lm->offsets, off, ((size_t)El + 1) * sizeof(int32_t));
    if (s->rlmax > 0)
        OPS->upload(d, lm->row_tok, tok, (size_t)s->rlmax * sizeof(int32_t));
    return Rl;
}

/* The local experts' forward on xr [Rl, h] (lmap) into yl [Rl, h]. */
static void experts_fwd(gl_model *m, int layer, const gl_layer_offs *lo,
                        struct gl_moe_acts *x, struct gl_moe_scratch *s, const gl_moe_map *map,
                        const void *xin, int rows, void *yout)
{
    const gl_model_dims *dm = DIMS;
    if (gl_model_fp8_moe(m, layer)) {       /* FP8 products (fp8.c) */
        gl_model_fp8_moe_fwd(m, layer, 0, x->gu, xin, map);
        expert_act(m, s->a, x->gu, rows, dm->fel);
        gl_model_fp8_moe_fwd(m, layer, 1, yout, s->a, map);
        return;
    }
    fc1_fwd(m, lo, x, map, xin, s->guw);
    expert_act(m, s->a, x->gu, rows, dm->fel);
    OPS->moe_gemm(m->d, yout, dm->h, s->a, W(m, lo->edown), dm->fel, dm->h, map);
}

/* Their backward from dyl [rows, h]: the weight gradients added, dxl. */
static void experts_bwd(gl_model *m, int layer, const gl_layer_offs *lo,
                        struct gl_moe_acts *x, struct gl_moe_scratch *s, const gl_moe_map *map,
                        const void *xin, int rows, const void *dyl, void *dxl)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    int h = dm->h, fel = dm->fel;
    int fp8 = gl_model_fp8_moe(m, layer);
    expert_act(m, s->a, x->gu, rows, fel);
    if (fp8) {
        gl_model_fp8_moe_bwd(m, layer, 1, s->da, G(m, lo->edown), NULL,
                             gl_model_grad_beta(m, lo->edown, (size_t)dm->El * h * fel), dyl,
                             s->a, map);
    } else {
        OPS->moe_gemm_dgrad(d, s->da, dyl, h, W(m, lo->edown), fel, h, map, 0);
        OPS->moe_gemm_wgrad(d, G(m, lo->edown), dyl, h, s->a, fel, h, map,
                            wgrad_acc(m, lo->edown, (size_t)dm->El * h * fel));
    }
    gl_grads_ready(m, lo->edown, (size_t)dm->El * h * fel);
    if (rows > 0) {
        if (dm->swiglu)
            OPS->swiglu_bwd(d, s->dgu, s->da, x->gu, rows, fel);
        else
            OPS->gelu_bwd(d, s->dgu, NULL, s->da, x->gu, NULL, rows, fel);
    }
    if (fp8)        /* gate's and up's gradients: the pieces of fc1's */
        gl_model_fp8_moe_bwd(m, layer, 0, dxl, G(m, lo->egu),
                             dm->swiglu ? G(m, gl_moe_up_off(m, lo)) : NULL,
                             gl_model_grad_beta(m, lo->egu, (size_t)dm->El * s->guw * h), s->dgu,
                             xin, map);
    else
        fc1_bwd(m, lo, map, xin, s->dgu, dxl, s->guw);
    gl_grads_ready(m, lo->egu, (size_t)dm->El * s->guw * h);
}

/* The allgather dispatcher's forward (see the top): y [n, h], the
 * routed experts' output of the own tokens, from mg [n, h] and the own
 * routing x->map. */
static void ag_fwd(gl_model *m, int layer, const gl_layer_offs *lo, struct gl_moe_scratch *s,
                   struct gl_moe_acts *x, const void *mg, void *y)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    size_t nh = (size_t)dm->n * dm->h;
    int Rl = ag_plan(m, s, x);
    gl_all_gather(m->ep, mg, s->xg, nh, d->act, d->stream);
    OPS->moe_permute(d, x->xr, s->xg, dm->h, &x->lmap);
    experts_fwd(m, layer, lo, x, s, &x->lmap, x->xr, Rl, x->yp);
    OPS->moe_unpermute(d, s->xg, x->yp, dm->h, &x->lmap);
    gl_reduce_scatter(m->ep, s->xg, y, nh, d->act, GL_OP_SUM, d->stream);
}

/* Its backward from dz [n, h]: the local experts' weight gradients
 * added, s->dweight [n, k] of the own slots, and dmg [n, h] the routed
 * experts' input gradient (added to dmg's value with accumulate). */
static void ag_bwd(gl_model *m, int layer, const gl_layer_offs *lo, struct gl_moe_scratch *s,
                   struct gl_moe_acts *x, const void *dz, void *dmg, int accumulate)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    size_t nh = (size_t)dm->n * dm->h;
    int Rl = x->lmap.offsets_host[dm->El];
    gl_all_gather(m->ep, dz, s->xg, nh, d->act, d->stream);
    OPS->moe_unpermute_bwd(d, s->dyl, s->dwg, s->xg, x->yp, dm->h, &x->lmap);
    gl_reduce_scatter(m->ep, s->dwg, s->dweight, (size_t)dm->n * dm->topk, GL_DT_F32,
                      GL_OP_SUM, d->stream);
    experts_bwd(m, layer, lo, x, s, &x->lmap, x->xr, Rl, s->dyl, s->dxl);
    OPS->moe_permute_bwd(d, s->xg, s->dxl, dm->h, &x->lmap, 0);
    if (!accumulate) {
        gl_reduce_scatter(m->ep, s->xg, dmg, nh, d->act, GL_OP_SUM, d->stream);
        return;
    }
    gl_reduce_scatter(m->ep, s->xg, s->xown, nh, d->act, GL_OP_SUM, d->stream);
    OPS->add(d, dmg, dmg, s->xown, nh);
}

void gl_moe_fwd(gl_model *m, const gl_mb *mb, int layer, const gl_layer_offs *lo,
                gl_layer_acts *A, const void *mg, void *y)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    struct gl_moe_scratch *s = scratch(m);
    struct gl_moe_acts *x = acts(m, A);
    gl_moe_route_cfg cfg = route_cfg(m);
    int n = dm->n, h = dm->h, E = dm->E;
    int count = !m->no_dropout && !m->in_recompute && m->moe_stats;
    float *st = count ? m->moe_stats + (size_t)layer * (GL_MOE_STATS + E) : NULL;
    int ck = check_now(m, layer, 0), bwd = 0;
    int overlap = shared_overlap(m);
    (void)mb;

    CHECK("input mg", mg, (size_t)n * h, 0);
    CHECK("weight router", W(m, lo->router), (size_t)E * h, 0);
    CHECK("weight experts fc1", W(m, lo->egu), (size_t)dm->El * s->guw * h, 0);
    CHECK("weight experts down", W(m, lo->edown), (size_t)dm->El * h * dm->fel, 0);

    if (gl_model_fp8_moe(m, layer))         /* once per step */
        gl_model_fp8_moe_weights(m, layer, dm->swiglu ? W(m, lo->egu) : NULL,
                                 W(m, gl_moe_up_off(m, lo)), W(m, lo->edown));

    /* router, in fp32 from its product on (ops.h) */
    OPS->gemm(d, 0, 1, n, E, h, 1.0f, mg, h, W(m, lo->router), h, 0.0f, x->logits,
              GL_DT_F32, E);
    CHECK("gemm logits", x->logits, (size_t)n * E, 1);
    const float *bias = NULL;
    if (m->plan->arch.moe_router_enable_expert_bias) {
        OPS->to_f32(d, s->bias, W(m, lo->ebias), (size_t)E);
        bias = s->bias;
    }
    OPS->moe_route(d, &x->map, x->logits, bias, &cfg, st ? st + GL_MOE_STATS : NULL,
                   st ? st + 2 : NULL);
    int R = x->map.offsets_host[E];
    CHECK("moe_route weight", x->map.weight, (size_t)n * dm->topk, 1);
    if (ck)
        fprintf(stderr, "moe layer %d fwd routing: %d rows of %d (rows_max)\n", layer, R,
                x->map.rows_max);

    /* the routed experts: here, or on their EP ranks and back */
    if (ep_allgather(m)) {
        ag_fwd(m, layer, lo, s, x, mg, y);
    } else {
        OPS->moe_permute(d, s->xp, mg, h, &x->map);
        if (!dispatched(m)) {
            experts_fwd(m, layer, lo, x, s, &x->map, s->xp, R, x->yp);
        } else {
            /* by_share: the share's rows of xp sent, what comes back
             * scattered to xp's order (dyp, dxp: scratch here) */
            int sh = by_share(m);
            if (sh) {
                share_plan(m, s, x);
                OPS->moe_permute(d, s->dyp, s->xp, h, &x->shmap);
            }
            const void *send = sh ? s->dyp : s->xp;
            int Rl = ep_plan(m, s, x, sh ? x->soff : x->map.offsets_host);
            if (overlap) {
                gl_comm_req *q = ep_exchange_start(m, x, send, s->xa);
                shared_fc1(m, lo, s, x, mg);
                gl_comm_req_wait(q);
            } else {
                ep_exchange(m, x, send, s->xa, 0);
            }
            OPS->moe_permute(d, x->xr, s->xa, h, &x->smap);
            experts_fwd(m, layer, lo, x, s, &x->lmap, x->xr, Rl, s->dyl);
            OPS->moe_permute_bwd(d, s->xa, s->dyl, h, &x->smap, 0);
            ep_exchange(m, x, s->xa, sh ? s->dxp : x->yp, 1);
            if (sh)
                OPS->moe_permute_bwd(d, x->yp, s->dxp, h, &x->shmap, 0);
        }
        OPS->moe_unpermute(d, y, x->yp, h, &x->map);
    }
    CHECK("moe_unpermute y", y, (size_t)n * h, 0);

    /* the shared experts: a dense MLP, its output added */
    if (dm->fs) {
        if (!overlap)           /* else run during the dispatch */
            shared_fc1(m, lo, s, x, mg);
        shared_fc2(m, lo, s, y);
        CHECK("shared experts y", y, (size_t)n * h, 0);
    }

    /* the load-balancing counts over the micro-batch (own rows, summed
     * over TP under SP), and the losses' values */
    if (m->no_dropout)
        return;                 /* a forward-only pass: no auxiliary terms */
    int r0, nown;
    own_range(m, &r0, &nown);
    const float *lg = x->logits + (size_t)r0 * E;
    if (aux_on(m) && aux_global(m)) {
        /* counted once per micro-batch: a recomputation keeps them */
        if (!m->in_recompute)
            global_counts(m, layer, x, lg, nown, r0, &cfg);
        if (st)
            OPS->moe_aux_loss(d, st, NULL, lg, x->counts, nown, r0, 0, aux_scale(m, x), 0.0f,
                              &cfg);
    } else if (aux_on(m)) {
        int G = aux_groups(m), seq = G > 1 ? dm->S : 0;
        OPS->zero(d, x->counts, (size_t)G * E * sizeof(float));
        OPS->moe_aux_counts(d, x->counts, lg, nown, r0, seq, &cfg);
        if (dm->sp && m->tp)
            gl_all_reduce(m->tp, x->counts, x->counts, (size_t)G * E, GL_DT_F32, GL_OP_SUM,
                          d->stream);
        if (m->cp)              /* each CP rank holds a part of every sequence */
            gl_all_reduce(m->cp, x->counts, x->counts, (size_t)G * E, GL_DT_F32, GL_OP_SUM,
                          d->stream);
        if (st)
            OPS->moe_aux_loss(d, st, NULL, lg, x->counts, nown, r0, seq, aux_scale(m, x), 0.0f,
                              &cfg);
    }
    if (st && m->moe_opts.z_loss_coeff > 0)
        OPS->moe_z_loss(d, st + 1, NULL, lg, nown, E, z_scale(m), 0.0f);
    if (aux_on(m))
        CHECK("moe_aux_counts counts", x->counts, (size_t)aux_groups(m) * E, 1);
    CHECK("stats (aux, z, dropped, tokens per expert)", st, GL_MOE_STATS + E, 1);
}

void gl_moe_bwd(gl_model *m, const gl_mb *mb, int layer, const gl_layer_offs *lo,
                gl_layer_acts *A, const void *mg, const void *dz, void *dmg)
{
    const gl_model_dims *dm = DIMS;
    gl_dev *d = m->d;
    struct gl_moe_scratch *s = scratch(m);
    struct gl_moe_acts *x = A->moe;
    gl_moe_route_cfg cfg = route_cfg(m);
    int n = dm->n, h = dm->h, E = dm->E;
    int R = x->map.offsets_host[E];
    int ck = check_now(m, layer, 1), bwd = 1;
    int overlap = shared_overlap(m);
    (void)mb;
    if (ck)
        s->check_layer = layer;

    CHECK("input dz", dz, (size_t)n * h, 0);
    CHECK("input mg", mg, (size_t)n * h, 0);

    /* the shared experts: dmg = their input gradient (partial); with
     * the overlap, during the dispatch below */
    if (dm->fs && !overlap) {
        shared_bwd(m, lo, s, x, mg, dz, dmg);
        CHECK("shared experts dmg", dmg, (size_t)n * h, 0);
    }

    /* the routed experts, back to dmg; dweight summed over TP (over EP
     * too under the allgather dispatcher) */
    if (ep_allgather(m)) {
        ag_bwd(m, layer, lo, s, x, dz, dmg, dm->fs > 0);
    } else {
        OPS->moe_unpermute_bwd(d, s->dyp, s->dweight, dz, x->yp, h, &x->map);
        CHECK("moe_unpermute_bwd dyp", s->dyp, (size_t)R * h, 0);
        if (m->tp)
            gl_all_reduce(m->tp, s->dweight, s->dweight, (size_t)n * dm->topk, GL_DT_F32,
                          GL_OP_SUM, d->stream);
        if (!dispatched(m)) {
            OPS->moe_permute(d, s->xp, mg, h, &x->map);
            experts_bwd(m, layer, lo, x, s, &x->map, s->xp, R, s->dyp, s->dxp);
        } else {
            /* by_share: the share's rows of dyp sent, dxp's scattered
             * back (xp: scratch here) */
            int Rl = x->lmap.offsets_host[dm->El], sh = by_share(m);
            if (sh)
                OPS->moe_permute(d, s->xp, s->dyp, h, &x->shmap);
            const void *send = sh ? s->xp : s->dyp;
            if (overlap) {
                gl_comm_req *q = ep_exchange_start(m, x, send, s->xa);
                shared_bwd(m, lo, s, x, mg, dz, dmg);
                CHECK("shared experts dmg", dmg, (size_t)n * h, 0);
                gl_comm_req_wait(q);
            } else {
                ep_exchange(m, x, send, s->xa, 0);
            }
            OPS->moe_permute(d, s->dyl, s->xa, h, &x->smap);
            experts_bwd(m, layer, lo, x, s, &x->lmap, x->xr, Rl, s->dyl, s->dxl);
            OPS->moe_permute_bwd(d, s->xa, s->dxl, h, &x->smap, 0);
            ep_exchange(m, x, s->xa, sh ? s->xp : s->dxp, 1);
            if (sh)
                OPS->moe_permute_bwd(d, s->dxp, s->xp, h, &x->shmap, 0);
        }
        OPS->moe_permute_bwd(d, dmg, s->dxp, h, &x->map, dm->fs > 0);
    }
    CHECK("moe_permute_bwd dmg", dmg, (size_t)n * h, 0);

    /* the router: dlogits from the weights, the auxiliary and z losses on
     * the own rows; its weight gradient from the own rows */
    OPS->moe_route_bwd(d, s->dlogits, s->dweight, x->logits, &x->map, &cfg);
    CHECK("moe_route_bwd dlogits", s->dlogits, (size_t)n * E, 1);
    int r0, nown;
    own_range(m, &r0, &nown);
    float *dl = s->dlogits + (size_t)r0 * E;
    const float *lg = x->logits + (size_t)r0 * E;
    float gs = (float)m->moe_loss_gscale;
    if (aux_on(m)) {
        int seq = aux_groups(m) > 1 ? dm->S : 0;
        float sc = aux_scale(m, x);
        OPS->moe_aux_loss(d, NULL, dl, lg, x->counts, nown, r0, seq, sc, sc * gs, &cfg);
    }
    if (m->moe_opts.z_loss_coeff > 0) {
        float sc = z_scale(m);
        OPS->moe_z_loss(d, NULL, dl, lg, nown, E, sc, sc * gs);
    }
    /* the router's products take act operands: dlogits' own rows
     * rounded to act, as Megatron's cast of the logits to fp32 hands
     * its gradient back in the router's dtype */
    CHECK("aux/z losses dlogits", dl, (size_t)nown * E, 1);
    OPS->to_act(d, s->dlact, dl, (size_t)nown * E);
    CHECK("to_act dlogits", s->dlact, (size_t)nown * E, 0);
    OPS->gemm(d, 1, 0, E, h, nown, 1.0f, s->dlact, E, gl_act_at(m, (void *)mg, (size_t)r0 * h),
              h, gl_model_grad_beta(m, lo->router, (size_t)E * h), G(m, lo->router), GL_DT_F32,
              h);
    CHECK("gemm router grad", G(m, lo->router), (size_t)E * h, 1);
    gl_grads_ready(m, lo->router, (size_t)E * h);
    if (m->plan->arch.moe_router_enable_expert_bias)
        gl_grads_ready(m, lo->ebias, (size_t)E);     /* a buffer: its zero gradient is final */
}

void gl_moe_router_dx(gl_model *m, const gl_layer_offs *lo, void *own)
{
    const gl_model_dims *dm = DIMS;
    int r0, nown;
    own_range(m, &r0, &nown);
    (void)r0;                   /* dlact holds the own rows from its row 0 */
    struct gl_moe_scratch *s = m->moe_scratch;
    OPS->gemm(m->d, 0, 0, nown, dm->h, dm->E, 1.0f, s->dlact, dm->E,
              W(m, lo->router), dm->h, 1.0f, own, m->d->act, dm->h);
    /* checked when gl_moe_bwd just checked this layer */
    int layer = s->check_layer, ck = layer >= 0, bwd = 1;
    CHECK("gemm router dx (own rows of dmg)", own, (size_t)nown * dm->h, 0);
    s->check_layer = -1;
}
