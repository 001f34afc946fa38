/*
 * model.c: buffers, initial weights and RoPE tables of one rank's model
 * (model.h).  The passes themselves are in layer.c.
 */
#include <config.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/rng.h"
#include "model/model.h"
#include "model/moe.h"

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Carving buffers out of one allocation: run once with base == NULL to
 * measure, then with the allocation.  256-byte alignment suits every
 * vector unit and cuBLAS. */
typedef struct {
    char *base;
    size_t off;
} carver;

static void *carve(carver *cv, size_t bytes)
{
    size_t o = align_up(cv->off, 256);
    cv->off = o + bytes;
    return cv->base ? cv->base + o : NULL;
}

/* One layer's activations (what its forward writes).  Under selective
 * recomputation (sel not NULL) the norm outputs and the SwiGLU output are
 * sel's, shared by every layer (model.h).  An MoE layer (moe set) has no
 * dense MLP: no gu or s (its experts' buffers are moe.c's). */
static void layout_layer_acts(gl_model *m, carver *cv, gl_layer_acts *A,
                              const gl_layer_acts *sel, int moe)
{
    const gl_model_dims *dm = &m->plan->dm;
    size_t ab = m->d->act_bytes, fb = sizeof(float);
    size_t n = (size_t)dm->n, nl = (size_t)dm->nl, h = (size_t)dm->h;
    A->xm = carve(cv, nl * h * ab);
    A->a = sel ? sel->a : carve(cv, n * h * ab);
    A->qkv = carve(cv, n * (size_t)dm->qkvw * ab);
    if (dm->qk_norm) {
        A->qkn = carve(cv, n * (size_t)dm->qkw * ab);
        A->rstd_qk = carve(cv, n * (size_t)(dm->hq + dm->hkv) * fb);
    }
    A->o = carve(cv, n * (size_t)(dm->hq * dm->D) * ab);
    A->mg = sel ? sel->mg : carve(cv, n * h * ab);
    A->gu = moe ? NULL : carve(cv, n * (size_t)dm->guw * ab);
    A->s = moe ? NULL : sel ? sel->s : carve(cv, n * (size_t)dm->fl * ab);
    A->rstd1 = carve(cv, nl * fb);
    A->rstd2 = carve(cv, nl * fb);
    A->mean1 = carve(cv, nl * fb);
    A->mean2 = carve(cv, nl * fb);
    A->lse = carve(cv, n * (size_t)dm->hq * fb);
}

/* The head's scratch, on ranks that hold it. */
static void layout_head(gl_model *m, carver *cv)
{
    const gl_model_dims *dm = &m->plan->dm;
    size_t ab = m->d->act_bytes, fb = sizeof(float);
    size_t n = (size_t)dm->n, nl = (size_t)dm->nl, h = (size_t)dm->h;
    int has_head = 0;
    for (int c = 0; c < m->plan->nchunks; c++)
        has_head |= m->plan->chunk[c].has_head;
    if (has_head) {
        m->hf = carve(cv, n * h * ab);
        m->logits = carve(cv, n * (size_t)dm->vl * ab);
        m->rowmax = carve(cv, n * fb);
        m->stats = carve(cv, 2 * n * fb);
        m->loss = carve(cv, n * fb);
        m->rstd_f = carve(cv, nl * fb);
        m->mean_f = carve(cv, nl * fb);
    }
}

/* Forward only (model.h): per chunk two residual-stream buffers used in
 * turn, one set of layer activations for all layers, no backward
 * scratch. */
static void layout_forward_only(gl_model *m, carver *cv)
{
    const gl_model_dims *dm = &m->plan->dm;
    size_t nlh = (size_t)dm->nl * (size_t)dm->h * m->d->act_bytes;
    gl_layer_acts shared = { 0 };   /* (no FP8 or MoE buffers of its own yet) */
    layout_layer_acts(m, cv, &shared, NULL, 0);
    for (int c = 0; c < m->plan->nchunks; c++) {
        gl_slot *sl = &m->slot[c][0];
        void *xb[2] = { carve(cv, nlh), carve(cv, nlh) };
        for (int i = 0; i <= dm->Lc; i++)
            sl->x[i] = xb[i % 2];
        sl->dy = NULL;
        for (int i = 0; i < dm->Lc; i++)
            sl->layer[i] = shared;
    }
    m->y = carve(cv, (size_t)dm->n * (size_t)dm->h * m->d->act_bytes);
    layout_head(m, cv);
}

/* Which layers full recomputation re-runs (model.h): rc_first[i] is the
 * first layer of layer i's group, or -1 when layer i keeps its
 * activations; rc_group is the size of the largest group. */
static void plan_recompute(gl_model *m, const gl_layout *l)
{
    int Lc = m->plan->dm.Lc;
    m->rc_first = gl_calloc((size_t)Lc, sizeof(int));
    m->rc_group = 0;
    for (int i = 0; i < Lc; i++)
        m->rc_first[i] = -1;
    if (m->recompute != GL_RECOMPUTE_FULL)
        return;
    if (l->recompute_num_layers < 1)
        gl_die("--recompute-granularity full needs --recompute-num-layers N (1 or more)");
    int N = l->recompute_num_layers < Lc ? l->recompute_num_layers : Lc;
    int block = strcmp(l->recompute_method, "block") == 0;
    for (int i = 0; i < Lc; i++)
        m->rc_first[i] = block ? (i < N ? i : -1) : i / N * N;
    m->rc_group = block ? 1 : N;
}

/* Lay out every activation and scratch buffer (see model.h).  What
 * recomputation rebuilds comes first, shared by every slot: one a / mg /
 * s (selective), or the layer activations of one group and the residuals
 * between its layers (full); then the slots, whose recomputed parts point
 * there. */
static void layout(gl_model *m, carver *cv)
{
    const gl_model_dims *dm = &m->plan->dm;
    size_t ab = m->d->act_bytes, fb = sizeof(float);
    size_t n = (size_t)dm->n, nl = (size_t)dm->nl, h = (size_t)dm->h;

    m->cos = carve(cv, (size_t)dm->S * (size_t)(dm->D / 2) * fb);
    m->sin = carve(cv, (size_t)dm->S * (size_t)(dm->D / 2) * fb);
    m->positions = carve(cv, nl * sizeof(int32_t));
    if (m->fwd_only) {
        layout_forward_only(m, cv);
        return;
    }
    size_t shared0 = cv->off;
    gl_layer_acts sel = { 0 }, *psel = NULL;
    if (m->recompute == GL_RECOMPUTE_SELECTIVE) {
        sel.a = carve(cv, n * h * ab);
        sel.mg = carve(cv, n * h * ab);
        sel.s = carve(cv, n * (size_t)dm->fl * ab);
        psel = &sel;
    }
    int G = m->rc_group;
    gl_layer_acts *racts = gl_calloc((size_t)G + 1, sizeof *racts);
    void **rx = gl_calloc((size_t)G + 1, sizeof *rx);
    for (int k = 0; k < G; k++)
        layout_layer_acts(m, cv, &racts[k], NULL, 0);
    for (int k = 0; k + 1 < G; k++)           /* inputs of a group's layers 1.. */
        rx[k] = carve(cv, nl * h * ab);
    m->act_shared_bytes = cv->off - shared0;

    for (int c = 0; c < m->plan->nchunks; c++) {
        for (int s = 0; s < m->nslots[c]; s++) {
            gl_slot *sl = &m->slot[c][s];
            size_t slot0 = cv->off;
            for (int i = 0; i <= dm->Lc; i++) {
                int f = i < dm->Lc ? m->rc_first[i] : -1;
                sl->x[i] = f >= 0 && f != i ? rx[i - f - 1] : carve(cv, nl * h * ab);
            }
            sl->dy = carve(cv, nl * h * ab);
            for (int i = 0; i < dm->Lc; i++) {
                int f = m->rc_first[i];
                if (f >= 0)
                    sl->layer[i] = racts[i - f];
                else
                    layout_layer_acts(m, cv, &sl->layer[i], psel,
                                      m->plan->chunk[c].layer[i].moe);
            }
            m->act_slot_bytes = cv->off - slot0;
        }
    }
    free(racts);
    free(rx);
    m->y = carve(cv, n * h * ab);
    m->dfull = carve(cv, n * h * ab);
    m->tmp = carve(cv, nl * h * ab);
    m->dqkv = carve(cv, n * (size_t)dm->qkvw * ab);
    m->d_o = carve(cv, n * (size_t)(dm->hq * dm->D) * ab);
    m->dgu = carve(cv, n * (size_t)dm->guw * ab);
    m->ds = carve(cv, n * (size_t)dm->fl * ab);
    layout_head(m, cv);
}

static gl_model *model_new(const gl_model_plan *p, gl_dev *d,
                           gl_comm *tp, const int *nslots, int fwd_only)
{
    const gl_model_dims *dm = &p->dm;
    gl_model *m = gl_calloc(1, sizeof *m);
    m->plan = p;
    m->d = d;
    m->fwd_only = fwd_only;
    m->tp = (tp && gl_comm_size(tp) > 1) ? tp : NULL;
    if (dm->tp > 1 && !m->tp)
        gl_die("model: tensor parallelism %d needs a TP group of that size", dm->tp);
    m->recompute = fwd_only ? GL_RECOMPUTE_NONE : p->layout.recompute_granularity;
    const char *epi = getenv("GRIDLM_GEMM_EPILOGUE");
    m->gelu_epilogue = epi && !strcmp(epi, "1");
    const char *disp = getenv("GRIDLM_MOE_DISPATCH");
    m->moe_dispatch = disp && !strcmp(disp, "1");
    plan_recompute(m, &p->layout);
    m->nslots = gl_calloc((size_t)p->nchunks, sizeof *m->nslots);
    m->slot = gl_calloc((size_t)p->nchunks, sizeof *m->slot);
    for (int ci = 0; ci < p->nchunks; ci++) {
        m->nslots[ci] = nslots ? nslots[ci] : 1;
        if (m->nslots[ci] < 1)
            m->nslots[ci] = 1;
        m->slot[ci] = gl_calloc((size_t)m->nslots[ci], sizeof(gl_slot));
        for (int s = 0; s < m->nslots[ci]; s++) {
            m->slot[ci][s].x = gl_calloc((size_t)dm->Lc + 1, sizeof(void *));
            m->slot[ci][s].layer = gl_calloc((size_t)dm->Lc, sizeof(gl_layer_acts));
        }
    }
    carver cv = { NULL, 0 };
    layout(m, &cv);
    m->arena_bytes = cv.off;
    m->arena = d->ops->alloc(d, m->arena_bytes);
    cv.base = m->arena;
    cv.off = 0;
    layout(m, &cv);

    m->w = d->ops->alloc(d, p->nflat * d->act_bytes);
    m->g = fwd_only ? NULL : d->ops->alloc(d, p->nflat * sizeof(float));
    gl_moe_defaults(&m->moe_opts);
    m->moe_loss_gscale = dm->n;
    if (dm->E)
        m->moe_stats = d->ops->alloc(d, (size_t)dm->L * (GL_MOE_STATS + dm->E) * sizeof(float));

    size_t nt = (size_t)dm->S * (size_t)(dm->D / 2);
    float *cosv = gl_malloc(nt * sizeof(float)), *sinv = gl_malloc(nt * sizeof(float));
    gl_rope_tables(&p->arch, dm->D, dm->S, cosv, sinv);
    d->ops->upload(d, m->cos, cosv, nt * sizeof(float));
    d->ops->upload(d, m->sin, sinv, nt * sizeof(float));
    /* The positions of this rank's own rows of a micro-batch [B, S]: the
     * rows are the micro-batch's tokens, sample after sample, and under
     * sequence parallelism the rank holds rows tp_rank nl .. + nl - 1 of
     * them (per-token regions); each sample starts at position 0. */
    int32_t *posv = gl_malloc((size_t)dm->nl * sizeof(int32_t));
    long row0 = dm->sp ? (long)dm->tp_rank * dm->nl : 0;
    for (int j = 0; j < dm->nl; j++)
        posv[j] = (int32_t)((row0 + j) % dm->S);
    d->ops->upload(d, m->positions, posv, (size_t)dm->nl * sizeof(int32_t));
    d->ops->sync(d);
    free(posv);
    free(cosv);
    free(sinv);
    return m;
}

gl_model *gl_model_new(const gl_model_plan *p, gl_dev *d, gl_comm *tp, const int *nslots)
{
    return model_new(p, d, tp, nslots, 0);
}

gl_model *gl_model_new_forward_only(const gl_model_plan *p, gl_dev *d, gl_comm *tp)
{
    return model_new(p, d, tp, NULL, 1);
}

void gl_model_free(gl_model *m)
{
    if (!m)
        return;
    gl_dev *d = m->d;
    gl_model_fp8_free(m);
    /* context parallelism's scratch (cp.c; NULL without it) */
    void *cpbuf[] = { m->kv[0], m->kv[1], m->dkv[0], m->dkv[1], m->dkv_blk, m->o_acc,
                      m->o_blk, m->lse_blk, m->dq_acc, m->delta };
    for (size_t i = 0; i < sizeof cpbuf / sizeof cpbuf[0]; i++)
        if (cpbuf[i])
            d->ops->free(d, cpbuf[i]);
    gl_moe_free(m);
    d->ops->free(d, m->arena);
    d->ops->free(d, m->w);
    d->ops->free(d, m->g);
    for (int ci = 0; ci < m->plan->nchunks; ci++) {
        for (int s = 0; s < m->nslots[ci]; s++) {
            for (int i = 0; i < m->plan->dm.Lc; i++)
                gl_moe_acts_free(m, &m->slot[ci][s].layer[i]);
            free(m->slot[ci][s].x);
            free(m->slot[ci][s].layer);
        }
        free(m->slot[ci]);
    }
    free(m->slot);
    free(m->nslots);
    free(m->rc_first);
    free(m->gfresh);
    free(m->gzero);
    free(m);
}

void *gl_model_weight(const gl_model *m, size_t offset)
{
    return (char *)m->w + offset * m->d->act_bytes;
}

float *gl_model_grad(const gl_model *m, size_t offset)
{
    return m->g + offset;
}

void *gl_model_input(const gl_model *m, int c, int s)
{
    return m->slot[c][s].x[0];
}

void *gl_model_output(const gl_model *m, int c, int s)
{
    return m->slot[c][s].x[m->plan->dm.Lc];
}

void *gl_model_dgrad(const gl_model *m, int c, int s)
{
    return m->slot[c][s].dy;
}

/* Values of rows [r0, r1) of a parameter's local piece into host. */
typedef struct {
    const gl_param *q;
    uint64_t seed, key;
    float *host;
    long r0, r1;
} init_job;

/* Each element from the full tensor's index, so every layout draws the
 * same numbers. */
static void *init_rows(void *arg)
{
    const init_job *jb = arg;
    const gl_param *q = jb->q;
    long view[2], local[2], off[2];
    gl_param_view(q, view, local, off);     /* stacked experts as a matrix */
    long cols = view[1], lc = local[1];
    for (long r = jb->r0; r < jb->r1; r++)
        for (long j = 0; j < lc; j++) {
            long e = (off[0] + r) * cols + off[1] + j;
            jb->host[r * lc + j] = q->init_ones ? 1.0f
                : (float)(q->init_std * gl_rng_normal(jb->seed, jb->key, (uint64_t)e));
        }
    return NULL;
}

/* Large tensors are drawn by several threads (a billion normals take
 * half a minute on one core); the numbers do not depend on how many. */
static void init_host(const gl_param *q, uint64_t seed, float *host)
{
    enum { MAX_THREADS = 16 };
    init_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = q->count < (1u << 20) || ncpu < 2 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;
    long view[2], local[2];
    gl_param_view(q, view, local, NULL);
    long rows = local[0];
    if (nt > rows)
        nt = (int)rows;
    for (int t = 0; t < nt; t++)
        jobs[t] = (init_job){ q, seed, gl_rng_key(q->name), host,
                              rows * t / nt, rows * (t + 1) / nt };
    int started = 0;
    for (int t = 1; t < nt; t++)
        if (pthread_create(&th[t], NULL, init_rows, &jobs[t]) == 0)
            started = t;
        else
            break;
    for (int t = started + 1; t < nt; t++)       /* threads refused: do it here */
        init_rows(&jobs[t]);
    init_rows(&jobs[0]);
    for (int t = 1; t <= started; t++)
        pthread_join(th[t], NULL);
}

void gl_master_put(gl_dev *d, const gl_master *mr, size_t off, const float *src, size_t count)
{
    for (int i = 0; mr && i < mr->n; i++) {
        size_t a = off > mr->begin[i] ? off : mr->begin[i];
        size_t b = off + count < mr->end[i] ? off + count : mr->end[i];
        if (b > a)
            d->ops->copy(d, mr->at[i] + (a - mr->begin[i]), src + (a - off),
                         (b - a) * sizeof(float));
    }
}

void gl_model_set_weights(gl_model *m, gl_weights_fill *fill, void *arg, const gl_master *mr)
{
    const gl_model_plan *p = m->plan;
    gl_dev *d = m->d;
    size_t maxc = 1;
    for (int i = 0; i < p->nparams; i++)
        if (p->param[i].count > maxc)
            maxc = p->param[i].count;
    float *host = gl_malloc(maxc * sizeof(float));
    float *stage = d->ops->alloc(d, maxc * sizeof(float));
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        fill(arg, q, host);
        d->ops->upload(d, stage, host, q->count * sizeof(float));
        d->ops->to_act(d, gl_model_weight(m, q->offset), stage, q->count);
        gl_master_put(d, mr, q->offset, stage, q->count);
        d->ops->sync(d);          /* host and stage are reused */
    }
    d->ops->free(d, stage);
    free(host);
}

static void init_fill(void *arg, const gl_param *q, float *host)
{
    init_host(q, *(const uint64_t *)arg, host);
}

void gl_model_init_weights(gl_model *m, uint64_t seed, const gl_master *mr)
{
    gl_dev *d = m->d;
    d->ops->zero(d, m->w, m->plan->nflat * d->act_bytes);
    for (int i = 0; mr && i < mr->n; i++)
        if (mr->end[i] > mr->begin[i])
            d->ops->zero(d, mr->at[i], (mr->end[i] - mr->begin[i]) * sizeof(float));
    gl_model_set_weights(m, init_fill, &seed, mr);
}

/* RoPE frequencies theta_i = base^(-2i/D), i < D/2.  With llama3
 * scaling (--use-rope-scaling, the rule of Llama 3.1 and 3.2), each
 * frequency's wavelength 2 pi / theta is compared with the original
 * context length L (--rope-scaling-original-max-position-embeddings):
 * wavelengths longer than L / low (--rope-scaling-low-freq-factor) turn
 * too slowly to have been seen whole in training and are stretched,
 * theta / factor (--rope-scaling-factor); those shorter than L / high
 * (--rope-scaling-high-freq-factor) are kept; those between blend the
 * two, theta ((1 - s) / factor + s) with s = (L / wavelength - low) /
 * (high - low) going from 0 at L / low to 1 at L / high.  Llama 3.1 uses
 * factor 8, low 1, high 4, L 8192.  A zero field (a configuration not
 * filled by gl_arch_defaults) means that default. */
void gl_rope_inv_freq(const gl_arch *a, int D, double *inv_freq)
{
    double factor = a->rope_scaling_factor > 0 ? a->rope_scaling_factor : 8.0;
    double low = a->rope_scaling_low_freq_factor > 0 ? a->rope_scaling_low_freq_factor : 1.0;
    double high = a->rope_scaling_high_freq_factor > 0 ? a->rope_scaling_high_freq_factor : 4.0;
    double old_ctx = a->rope_scaling_original_max_position_embeddings > 0
                         ? a->rope_scaling_original_max_position_embeddings : 8192.0;
    double base = a->rotary_base > 0 ? a->rotary_base : 10000.0;
    for (int i = 0; i < D / 2; i++) {
        double f = pow(base, -2.0 * i / D);
        if (a->use_rope_scaling) {
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > old_ctx / low) {
                f = f / factor;
            } else if (wavelen >= old_ctx / high) {
                double smooth = (old_ctx / wavelen - low) / (high - low);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

/* cos and sin of position t times each frequency, [S, D/2]. */
void gl_rope_tables(const gl_arch *ar, int D, int S, float *cosv, float *sinv)
{
    double *fr = gl_malloc((size_t)(D / 2) * sizeof(double));
    gl_rope_inv_freq(ar, D, fr);
    for (int t = 0; t < S; t++)
        for (int i = 0; i < D / 2; i++) {
            double a = (double)t * fr[i];
            cosv[(size_t)t * (D / 2) + i] = (float)cos(a);
            sinv[(size_t)t * (D / 2) + i] = (float)sin(a);
        }
    free(fr);
}
