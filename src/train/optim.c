/*
 * optim.c: gradient reduction, norm and AdamW, plain or distributed
 * (optim.h).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "train/optim.h"

/* Megatron's is_embedding_or_output_parameter: the input embedding (and
 * the last stage's tied copy of it) and the output layer, which
 * --decoupled-lr gives their own learning rate. */
static int embedding_or_output(const gl_param *q)
{
    return !strcmp(q->name, "embedding.weight") || !strcmp(q->name, "lm_head.weight");
}

/* Ranges of the flat buffer with one flag value, from the parameter
 * table: each parameter's range is extended over the alignment gap after
 * it (zeros that change nothing), and neighbours with the same flag are
 * merged.  which: 0 = weight decay (1 = decay), 1 = counted, 2 = weight
 * decay plus 2 for the embedding and the output layer (decoupled_lr). */
static gl_range *flag_ranges(const gl_model_plan *p, int which, int *nout)
{
    int n = p->nparams;
    gl_range *r = gl_malloc((size_t)(n ? n : 1) * sizeof *r);
    int nr = 0;
    for (int i = 0; i < n; i++) {
        const gl_param *q = &p->param[i];
        size_t end = i + 1 < n ? p->param[i + 1].offset : p->nflat;
        int flag = which == 1 ? q->counted
                 : !q->no_weight_decay + (which == 2 && embedding_or_output(q) ? 2 : 0);
        if (nr && r[nr - 1].flag == flag && r[nr - 1].end == q->offset)
            r[nr - 1].end = end;
        else
            r[nr++] = (gl_range){ q->offset, end, flag };
    }
    *nout = nr;
    return r;
}

/* ---- overlapped reduction (optim.h) ---- */

/* The group that sums flat element a's gradient (NULL: no other rank),
 * and the rank of that group whose shard holds a. */
static gl_comm *group_at(const gl_optim *o, size_t a)
{
    return a >= o->xbegin ? o->edp : o->dp;
}

static int owner_at(const gl_optim *o, size_t a)
{
    if (a >= o->xbegin)
        return (int)((a - o->xbegin) / (o->xshard_end - o->xshard_begin));
    return (int)(a / (o->shard_end - o->shard_begin));
}

/* The extent of parameter k: its range and the alignment gap after it. */
static void extent(const gl_optim *o, int k, size_t *a, size_t *b)
{
    const gl_model_plan *p = o->m->plan;
    *a = p->param[k].offset;
    *b = k + 1 < p->nparams ? p->param[k + 1].offset : p->nflat;
}

/* The first bucket whose range ends after x. */
static int bucket_at(const gl_optim *o, size_t x)
{
    int lo = 0, hi = o->nbucket - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (o->bucket[mid].end > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Enqueue bucket b's sum over its group (DP; EDP for the experts' region)
 * on the communication stream, after what the compute stream has
 * enqueued so far (the gradients it holds). */
static void launch(gl_optim *o, gl_bucket *b)
{
    gl_dev *d = o->d;
    float *g = o->m->g + b->begin;
    gl_comm *grp = group_at(o, b->begin);  /* the experts': EDP, maybe none */
    b->launched = 1;
    if (!grp)
        return;
    d->ops->comm_wait_compute(d);
    if (o->dist)
        gl_reduce(grp, g, g, b->end - b->begin, GL_DT_F32, GL_OP_SUM, b->owner,
                  d->comm_stream);
    else
        gl_all_reduce(grp, g, g, b->end - b->begin, GL_DT_F32, GL_OP_SUM, d->comm_stream);
}

/* model.h's grad_ready: the parameters starting in [begin, end) are
 * complete; a bucket whose last parameter this was starts its sum. */
static void on_grad_ready(void *arg, size_t begin, size_t end)
{
    gl_optim *o = arg;
    const gl_model_plan *p = o->m->plan;
    for (int k = gl_model_plan_first_at(p, begin);
         k < p->nparams && p->param[k].offset < end; k++) {
        if (o->pdone[k])
            continue;
        o->pdone[k] = 1;
        size_t a, b;
        extent(o, k, &a, &b);
        for (int j = bucket_at(o, a); j < o->nbucket && o->bucket[j].begin < b; j++) {
            gl_bucket *bk = &o->bucket[j];
            if (--bk->pending == 0 && !bk->deferred && !bk->launched)
                launch(o, bk);
        }
    }
}

static void fp8_gather_init(gl_optim *o);

/* ---- overlapped weight gathering (optim.h) ---- */

/* Enqueue the broadcast of the next bucket in the order of use. */
static void dispatch_next(gl_optim *o)
{
    gl_bucket *b = &o->bucket[o->gorder[o->gnext++]];
    gl_comm *grp = group_at(o, b->begin);
    if (grp && o->fp8g)
        gl_broadcast(grp, o->fp8_recv + b->pk_at, b->pk_len, GL_DT_U8, b->owner,
                     o->d->comm_stream);
    else if (grp)
        gl_broadcast(grp, gl_model_weight(o->m, b->begin), b->end - b->begin, o->d->act,
                     b->owner, o->d->comm_stream);
    b->gather = GL_GATHER_SENT;
}

static void fp8_unpack(gl_optim *o, size_t sb, size_t se, uint8_t *pk, size_t rest_at,
                       int own);

/* Whether this rank owns bucket b: its rank in b's group is the owner. */
static int mine(const gl_optim *o, const gl_bucket *b)
{
    return b->owner == (b->begin >= o->xbegin ? o->edp_rank : o->dp_rank);
}

/* The compute stream waits for every broadcast enqueued so far (and
 * unpacks the FP8 packets among them). */
static void wait_sent(gl_optim *o)
{
    o->d->ops->compute_wait_comm(o->d);
    for (int k = 0; k < o->gnext; k++) {
        gl_bucket *b = &o->bucket[o->gorder[k]];
        if (b->gather == GL_GATHER_SENT) {
            if (o->fp8g)
                fp8_unpack(o, b->begin, b->end, o->fp8_recv + b->pk_at, b->pk_rest,
                           mine(o, b));
            b->gather = GL_GATHER_DONE;
            o->gleft--;
        }
    }
}

/* model.h's weights_needed: dispatch, in the order of use, up to the last
 * bucket that [begin, end) reaches into, wait for them, then dispatch the
 * next buckets, as many elements as this request (the next one is most
 * likely the same kind: a layer after a layer), so that they travel while
 * these weights are used. */
static void on_weights_needed(void *arg, size_t begin, size_t end)
{
    gl_optim *o = arg;
    if (!o->gleft || end <= begin)
        return;
    int wait = 0;
    for (int j = bucket_at(o, begin); j < o->nbucket && o->bucket[j].begin < end; j++) {
        while (o->bucket[j].gather == GL_GATHER_STALE)
            dispatch_next(o);
        if (o->bucket[j].gather == GL_GATHER_SENT)
            wait = 1;
    }
    if (!wait)
        return;
    wait_sent(o);
    for (size_t ahead = 0; ahead < end - begin && o->gnext < o->nbucket;) {
        const gl_bucket *b = &o->bucket[o->gorder[o->gnext]];
        ahead += b->end - b->begin;
        dispatch_next(o);
    }
}

void gl_optim_weights_ready(gl_optim *o)
{
    if (!o->gather || !o->gleft)
        return;
    while (o->gnext < o->nbucket)
        dispatch_next(o);
    wait_sent(o);
}

/* The buckets in the order the forward first reads them (optim.h). */
static void build_gather_order(gl_optim *o)
{
    const gl_model_plan *p = o->m->plan;
    int n = 0;
    o->gorder = gl_malloc((size_t)o->nbucket * sizeof *o->gorder);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < o->nbucket; j++) {
            const gl_bucket *b = &o->bucket[j];
            int rep = b->begin < p->rep_end && p->rep_begin < b->end;
            if (rep == (pass == 0))
                o->gorder[n++] = j;
        }
    o->m->weights_needed = on_weights_needed;
    o->m->weights_needed_arg = o;
}

/* Cut the flat buffer into buckets (optim.h) and count each bucket's
 * parameters. */
static void build_buckets(gl_optim *o, const gl_config *c)
{
    const gl_model_plan *p = o->m->plan;
    const gl_model_dims *dm = &p->dm;
    size_t size = c->optim.ddp_bucket_size > 0 ? (size_t)c->optim.ddp_bucket_size
                                         : (size_t)1000000 * (size_t)o->dp_size;
    if (c->optim.ddp_bucket_size <= 0 && size < 40000000)
        size = 40000000;

    /* forced cuts, ascending: the shard boundaries, the replicated range,
     * the experts' region (expert parallelism) and its EDP shards */
    size_t *forced = gl_malloc((size_t)(o->dp_size + o->edp_size + 2) * sizeof *forced);
    int nf = 0;
    size_t shard = o->shard_end - o->shard_begin, xshard = o->xshard_end - o->xshard_begin;
    for (int r = 1; o->dist && r < o->dp_size; r++)
        forced[nf++] = shard * (size_t)r;
    if (p->rep_end > p->rep_begin && p->rep_begin > 0)
        forced[nf++] = p->rep_begin;
    if (o->xbegin < p->nflat) {
        forced[nf++] = o->xbegin;
        for (int r = 1; o->dist && r < o->edp_size; r++)
            forced[nf++] = o->xbegin + xshard * (size_t)r;
    }
    for (int i = 1; i < nf; i++)
        for (int k = i; k > 0 && forced[k - 1] > forced[k]; k--) {
            size_t t = forced[k];
            forced[k] = forced[k - 1];
            forced[k - 1] = t;
        }

    size_t *cut = gl_malloc((size_t)(p->nparams + nf + 2) * sizeof *cut);
    int ncut = 0, fi = 0;
    size_t cur = 0;
    for (int k = 0; k < p->nparams; k++) {
        size_t a, b;
        extent(o, k, &a, &b);
        while (fi < nf && forced[fi] < b) {      /* at or inside this parameter */
            if (forced[fi] > cur)
                cut[ncut++] = cur = forced[fi];
            fi++;
        }
        if (b - cur >= size && b > cur)
            cut[ncut++] = cur = b;
    }
    if (cur < p->nflat)
        cut[ncut++] = p->nflat;

    o->bucket = gl_calloc((size_t)(ncut ? ncut : 1), sizeof *o->bucket);
    o->nbucket = ncut;
    for (int j = 0; j < ncut; j++) {
        o->bucket[j].begin = j ? cut[j - 1] : 0;
        o->bucket[j].end = cut[j];
        o->bucket[j].owner = owner_at(o, o->bucket[j].begin);
    }
    free(cut);
    free(forced);

    /* buckets reduced only after finish_grads' other sums (train.c) */
    size_t dbeg[2], dend[2];
    int nd = 0;
    gl_model_tp_sum_range(p, &dbeg[nd], &dend[nd]);
    if (dend[nd] > dbeg[nd])
        nd++;
    if (dm->tied && dm->pp > 1) {
        int i = p->embed_param >= 0 ? p->embed_param : p->head_param;
        if (i >= 0) {
            dbeg[nd] = p->param[i].offset;
            dend[nd++] = p->param[i].offset + p->param[i].count;
        }
    }
    for (int k = 0; k < p->nparams; k++) {
        size_t a, b;
        extent(o, k, &a, &b);
        for (int j = bucket_at(o, a); j < o->nbucket && o->bucket[j].begin < b; j++)
            o->bucket[j].total++;
    }
    for (int j = 0; j < o->nbucket; j++) {
        gl_bucket *bk = &o->bucket[j];
        bk->pending = bk->total;
        for (int q = 0; q < nd; q++)
            if (bk->begin < dend[q] && dbeg[q] < bk->end)
                bk->deferred = 1;
    }
    o->pdone = gl_calloc((size_t)(p->nparams ? p->nparams : 1), 1);
    o->m->grad_ready = on_grad_ready;
    o->m->grad_ready_arg = o;
}

/* ---- expert parallelism (optim.h) ---- */

size_t gl_optim_index(const gl_optim *o, size_t a)
{
    size_t base = 0;
    for (int i = 0; i < o->mr.n; i++) {
        if (a >= o->mr.begin[i] && a < o->mr.end[i])
            return base + (a - o->mr.begin[i]);
        base += o->mr.end[i] - o->mr.begin[i];
    }
    gl_die("optimizer: flat element %zu is not in this rank's update range", a);
}

void gl_optim_owned(const gl_optim *o, const gl_param *q, size_t *a, size_t *b)
{
    int x = q->offset >= o->xbegin;        /* region 3: summed over EDP */
    size_t sb = x ? o->xshard_begin : o->shard_begin;
    size_t se = x ? o->xshard_end : o->shard_end;
    *a = q->offset > sb ? q->offset : sb;
    *b = q->offset + q->count < se ? q->offset + q->count : se;
    if (*b < *a)
        *b = *a;
}

void gl_optim_owned_span(const gl_optim *o, size_t *i0, size_t *i1)
{
    if (o->dist) {
        *i0 = 0;
        *i1 = o->nu;
    } else {
        *i0 = o->shard_begin;
        *i1 = o->xbegin < o->m->plan->nflat ? o->xshard_end : o->shard_end;
    }
}

gl_optim *gl_optim_new(const gl_config *c, gl_model *m, gl_comm *dp, gl_comm *edp, int dist)
{
    const gl_model_plan *p = m->plan;
    gl_dev *d = m->d;
    gl_optim *o = gl_calloc(1, sizeof *o);
    o->m = m;
    o->d = d;
    o->dp = (dp && gl_comm_size(dp) > 1) ? dp : NULL;
    o->dp_size = o->dp ? gl_comm_size(dp) : 1;
    o->dp_rank = o->dp ? gl_comm_rank(dp) : 0;
    o->dist = gl_optim_is_distributed(dist, o->dp_size);
    o->edp = (edp && gl_comm_size(edp) > 1) ? edp : NULL;
    o->edp_size = o->edp ? gl_comm_size(edp) : 1;
    o->edp_rank = o->edp ? gl_comm_rank(edp) : 0;
    o->beta1 = c->optim.adam_beta1;
    o->beta2 = c->optim.adam_beta2;
    o->eps = c->optim.adam_eps;

    /* the shards: [0, xbegin) over DP, [xbegin, nflat) over EDP */
    o->xbegin = p->exp_begin;
    size_t nx = p->nflat - o->xbegin;
    if (o->xbegin % (size_t)o->dp_size || nx % (size_t)o->edp_size)
        gl_die("optimizer: flat buffer of %zu + %zu elements does not split over DP %d "
               "and EDP %d", o->xbegin, nx, o->dp_size, o->edp_size);
    size_t shard = o->xbegin / (size_t)o->dp_size, xshard = nx / (size_t)o->edp_size;
    o->shard_begin = shard * (size_t)o->dp_rank;
    o->shard_end = o->shard_begin + shard;
    o->xshard_begin = o->xbegin + xshard * (size_t)o->edp_rank;
    o->xshard_end = o->xshard_begin + xshard;

    o->master_is_w = !o->dist && d->act == GL_DT_F32;
    if (o->dist) {
        o->nu = shard + xshard;
        o->mr = (gl_master){ .n = nx ? 2 : 1,
                             .begin = { o->shard_begin, o->xshard_begin },
                             .end = { o->shard_end, o->xshard_end } };
    } else {
        o->nu = p->nflat;
        o->mr = (gl_master){ .n = 1, .begin = { 0 }, .end = { p->nflat } };
    }
    o->master = o->master_is_w ? (float *)m->w : d->ops->alloc(d, o->nu * sizeof(float));
    o->mr.at[0] = o->master;
    o->mr.at[1] = o->master + shard;
    o->mom1 = d->ops->alloc(d, o->nu * sizeof(float));
    o->mom2 = d->ops->alloc(d, o->nu * sizeof(float));
    o->overlap = c->optim.overlap_grad_reduce && o->dp;
    if (o->dist && !o->overlap)
        o->gshard = d->ops->alloc(d, o->nu * sizeof(float));
    if (o->overlap)
        build_buckets(o, c);
    o->gather = o->overlap && o->dist && c->optim.overlap_param_gather;
    if (o->gather)
        build_gather_order(o);
    o->fp8g = o->dist && c->optim.fp8_param_gather && m->fp8;
    if (o->fp8g)
        fp8_gather_init(o);

    /* counted ranges within the shard (under expert parallelism each
     * parameter's owned part: gl_optim_owned) */
    int nr;
    gl_range *r;
    if (nx) {
        o->norm = gl_malloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *o->norm);
        for (int k = 0; k < p->nparams; k++) {
            const gl_param *q = &p->param[k];
            size_t a, b;
            gl_optim_owned(o, q, &a, &b);
            if (q->counted && b > a)
                o->norm[o->nnorm++] = (gl_range){ a, b, 1 };
        }
    } else {
        r = flag_ranges(p, 1, &nr);
        o->norm = gl_malloc((size_t)(nr ? nr : 1) * sizeof *o->norm);
        for (int i = 0; i < nr; i++) {
            size_t a = r[i].begin > o->shard_begin ? r[i].begin : o->shard_begin;
            size_t b = r[i].end < o->shard_end ? r[i].end : o->shard_end;
            if (r[i].flag && b > a)
                o->norm[o->nnorm++] = (gl_range){ a, b, 1 };
        }
        free(r);
    }

    /* AdamW segments within the update ranges: those of the embedding
     * and output layer after the others when they have their own rate */
    int decoupled = c->optim.decoupled_lr > 0;
    r = flag_ranges(p, decoupled ? 2 : 0, &nr);
    if (decoupled) {
        gl_range *sorted = gl_malloc((size_t)(nr ? nr : 1) * sizeof *sorted);
        int k = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < nr; i++)
                if ((r[i].flag >= 2) == pass)
                    sorted[k++] = r[i];
        free(r);
        r = sorted;
    }
    o->seg = gl_malloc((size_t)(2 * nr + 1) * sizeof *o->seg);
    for (int i = 0; i < nr; i++)
        for (int u = 0; u < o->mr.n; u++) {
            size_t a = r[i].begin > o->mr.begin[u] ? r[i].begin : o->mr.begin[u];
            size_t b = r[i].end < o->mr.end[u] ? r[i].end : o->mr.end[u];
            if (b <= a)
                continue;
            size_t ix = gl_optim_index(o, a);
            gl_adamw_seg *sg = &o->seg[o->nseg++];
            sg->master = o->master + ix;
            sg->grad = o->gshard ? o->gshard + ix : m->g + a;
            sg->m = o->mom1 + ix;
            sg->v = o->mom2 + ix;
            sg->act_out = o->master_is_w ? NULL : gl_model_weight(m, a);
            sg->count = b - a;
            sg->weight_decay = r[i].flag & 1 ? (float)c->optim.weight_decay : 0.0f;
            if (r[i].flag < 2)
                o->nseg_main = o->nseg;
        }
    free(r);
    return o;
}

void gl_optim_free(gl_optim *o)
{
    if (!o)
        return;
    gl_dev *d = o->d;
    if (!o->master_is_w)
        d->ops->free(d, o->master);
    d->ops->free(d, o->mom1);
    d->ops->free(d, o->mom2);
    d->ops->free(d, o->gshard);
    for (int k = 0; k < o->nfr; k++) {
        d->ops->free(d, o->fr[k].send);
        d->ops->free(d, o->fr[k].recv);
        free(o->fr[k].rest_at);
    }
    d->ops->free(d, o->fp8_recv);
    free(o->norm);
    free(o->seg);
    free(o->bucket);
    free(o->pdone);
    free(o->gorder);
    if (o->m->weights_needed_arg == o) {
        o->m->weights_needed = NULL;
        o->m->weights_needed_arg = NULL;
    }
    if (o->m->grad_ready_arg == o) {
        o->m->grad_ready = NULL;
        o->m->grad_ready_arg = NULL;
    }
    free(o);
}

const gl_master *gl_optim_master_target(gl_optim *o)
{
    return o->master_is_w ? NULL : &o->mr;
}

void gl_optim_reduce(gl_optim *o)
{
    size_t n = o->m->plan->nflat, xb = o->xbegin;
    if (!o->dp)
        return;
    gl_optim_weights_ready(o);
    if (o->overlap) {
        for (int j = 0; j < o->nbucket; j++)
            if (!o->bucket[j].launched)
                launch(o, &o->bucket[j]);
        o->d->ops->compute_wait_comm(o->d);
        for (int j = 0; j < o->nbucket; j++) {
            o->bucket[j].pending = o->bucket[j].total;
            o->bucket[j].launched = 0;
        }
        memset(o->pdone, 0, (size_t)o->m->plan->nparams);
        return;
    }
    /* [0, xb) over DP; the experts' [xb, n) over EDP (expert parallelism) */
    float *g = o->m->g;
    size_t shard = o->shard_end - o->shard_begin, xshard = o->xshard_end - o->xshard_begin;
    if (o->dist) {
        gl_reduce_scatter(o->dp, g, o->gshard, shard, GL_DT_F32, GL_OP_SUM, o->d->stream);
        if (xb < n && o->edp)
            gl_reduce_scatter(o->edp, g + xb, o->gshard + shard, xshard, GL_DT_F32, GL_OP_SUM,
                              o->d->stream);
        else if (xb < n)
            o->d->ops->copy(o->d, o->gshard + shard, g + xb, xshard * sizeof(float));
    } else {
        gl_all_reduce(o->dp, g, g, xb, GL_DT_F32, GL_OP_SUM, o->d->stream);
        if (xb < n && o->edp)
            gl_all_reduce(o->edp, g + xb, g + xb, n - xb, GL_DT_F32, GL_OP_SUM, o->d->stream);
    }
}

void gl_optim_sumsq(gl_optim *o, float *out)
{
    for (int i = 0; i < o->nnorm; i++) {
        size_t a = o->norm[i].begin;
        const float *g = o->gshard ? o->gshard + gl_optim_index(o, a) : o->m->g + a;
        o->d->ops->sumsq_f32(o->d, out, g, o->norm[i].end - a);
    }
}

/* ---- FP8 weights gathered in FP8 (--fp8-param-gather; optim.h) ---- */

/* The elements of [sb, se) outside the FP8 weights, in flat order,
 * between the flat weights and buf (packed): dir 0 copies the weights
 * into buf, 1 buf into the weights, -1 neither.  Returns their count. */
static size_t fp8_rest(gl_optim *o, size_t sb, size_t se, uint8_t *buf, int dir)
{
    gl_dev *d = o->d;
    int nr;
    const gl_fp8_wrange *r = gl_model_fp8_wranges(o->m, &nr);
    size_t at = sb, n = 0;
    for (int i = 0; i <= nr && at < se; i++) {
        size_t stop = i < nr && r[i].begin < se ? r[i].begin : se;
        if (i < nr && r[i].end <= at)
            continue;
        if (stop > at) {
            void *w = gl_model_weight(o->m, at);
            size_t bytes = (stop - at) * d->act_bytes;
            if (dir == 0)
                d->ops->copy(d, buf + n * d->act_bytes, w, bytes);
            else if (dir == 1)
                d->ops->copy(d, w, buf + n * d->act_bytes, bytes);
            n += stop - at;
        }
        if (i < nr && r[i].end > at)
            at = r[i].end;
    }
    return n;
}

/* The layout of the packet of [sb, se) (optim.h): its FP8 bytes, then
 * from *rest_at (a multiple of 16) its other elements; its length. */
static size_t fp8_layout(gl_optim *o, size_t sb, size_t se, size_t *rest_at)
{
    size_t nq = gl_model_fp8_quantize_range(o->m, sb, se, NULL);
    size_t nrest = fp8_rest(o, sb, se, NULL, -1);
    *rest_at = (nq + 15) / 16 * 16;
    return *rest_at + (nrest * o->d->act_bytes + 15) / 16 * 16;
}

/* Pack [sb, se) of this rank's shard into pk, quantized with the scales
 * of gl_model_fp8_shard_scales. */
static void fp8_pack(gl_optim *o, size_t sb, size_t se, uint8_t *pk, size_t rest_at)
{
    gl_model_fp8_quantize_range(o->m, sb, se, pk);
    fp8_rest(o, sb, se, pk + rest_at, 0);
}

/* Unpack the packet of [sb, se): the FP8 bytes into the FP8 weights, the
 * rest into the flat weights (own: this rank's, whose rest is there). */
static void fp8_unpack(gl_optim *o, size_t sb, size_t se, uint8_t *pk, size_t rest_at,
                       int own)
{
    gl_model_fp8_place(o->m, sb, se, pk);
    if (!own)
        fp8_rest(o, sb, se, pk + rest_at, 1);
}

/* Region k's packets (optim.h): n shards of `shard` elements from base,
 * gathered over g (NULL: this rank's shard is the whole region). */
static void fp8_region_init(gl_optim *o, gl_fp8_region *f, size_t base, size_t shard,
                            gl_comm *g)
{
    *f = (gl_fp8_region){ .base = base, .shard = shard, .group = g,
                          .n = g ? gl_comm_size(g) : 1, .me = g ? gl_comm_rank(g) : 0 };
    f->rest_at = gl_calloc((size_t)f->n, sizeof *f->rest_at);
    for (int r = 0; r < f->n; r++) {
        size_t sb = base + shard * (size_t)r;
        size_t len = fp8_layout(o, sb, sb + shard, &f->rest_at[r]);
        f->packet = len > f->packet ? len : f->packet;
    }
    f->send = o->d->ops->alloc(o->d, f->packet ? f->packet : 1);
    if (g)
        f->recv = o->d->ops->alloc(o->d, f->packet * (size_t)f->n);
}

/* Pack this rank's shard of region f, gather every rank's, unpack them. */
static void fp8_region_gather(gl_optim *o, const gl_fp8_region *f)
{
    size_t sb = f->base + f->shard * (size_t)f->me;
    fp8_pack(o, sb, sb + f->shard, f->send, f->rest_at[f->me]);
    if (!f->group) {
        fp8_unpack(o, sb, sb + f->shard, f->send, f->rest_at[f->me], 1);
        return;
    }
    gl_all_gather(f->group, f->send, f->recv, f->packet, GL_DT_U8, o->d->stream);
    for (int r = 0; r < f->n; r++) {
        size_t rb = f->base + f->shard * (size_t)r;
        fp8_unpack(o, rb, rb + f->shard, f->recv + f->packet * (size_t)r, f->rest_at[r],
                   r == f->me);
    }
}

/* The packets (optim.h): one per DP shard (and EDP shard of the experts'
 * region), or with gather one per bucket. */
static void fp8_gather_init(gl_optim *o)
{
    if (o->gather) {
        size_t total = 0, sends[2] = {0, 0};
        for (int j = 0; j < o->nbucket; j++) {
            gl_bucket *b = &o->bucket[j];
            b->pk_at = total;
            b->pk_len = fp8_layout(o, b->begin, b->end, &b->pk_rest);
            total += b->pk_len;
            if (mine(o, b))
                sends[b->begin >= o->xbegin] += b->pk_len;
        }
        o->fp8_packet = sends[0] + sends[1];
        o->fp8_recv = o->d->ops->alloc(o->d, total ? total : 1);
        return;
    }
    fp8_region_init(o, &o->fr[o->nfr++], 0, o->shard_end - o->shard_begin, o->dp);
    if (o->xbegin < o->m->plan->nflat)
        fp8_region_init(o, &o->fr[o->nfr++], o->xbegin, o->xshard_end - o->xshard_begin,
                        o->edp);
    for (int k = 0; k < o->nfr; k++)
        o->fp8_packet += o->fr[k].packet;
}

/* Quantize and pack this rank's shards, then gather every rank's: in one
 * all-gather a region, or (gather) leave the buckets stale for the next
 * forward to broadcast (optim.h). */
static void fp8_gather(gl_optim *o)
{
    gl_model_fp8_shard_scales(o->m, o->shard_begin, o->shard_end, o->dp, o->xshard_begin,
                              o->xshard_end, o->edp);
    if (o->gather) {
        for (int j = 0; j < o->nbucket; j++) {
            const gl_bucket *b = &o->bucket[j];
            if (mine(o, b))
                fp8_pack(o, b->begin, b->end, o->fp8_recv + b->pk_at, b->pk_rest);
        }
        return;
    }
    for (int k = 0; k < o->nfr; k++)
        fp8_region_gather(o, &o->fr[k]);
}

/* With gather: every bucket stale, to be broadcast during the next
 * forward (after what the compute stream has enqueued: the new weights,
 * their packets). */
static void gather_later(gl_optim *o)
{
    o->d->ops->comm_wait_compute(o->d);
    for (int j = 0; j < o->nbucket; j++)
        o->bucket[j].gather = GL_GATHER_STALE;
    o->gnext = 0;
    o->gleft = o->nbucket;
}

void gl_optim_no_step(gl_optim *o)
{
    if (!o->fp8g)
        return;
    fp8_gather(o);
    if (o->gather)
        gather_later(o);
}

void gl_optim_step(gl_optim *o, double lr, double lr_decoupled, double grad_scale)
{
    gl_adamw_hyper hp = {
        .lr = (float)lr, .beta1 = (float)o->beta1, .beta2 = (float)o->beta2,
        .eps = (float)o->eps, .grad_scale = (float)grad_scale, .step = ++o->steps,
    };
    o->d->ops->adamw(o->d, o->seg, o->nseg_main, &hp);
    if (o->nseg > o->nseg_main) {          /* --decoupled-lr: same step, own rate */
        hp.lr = (float)lr_decoupled;
        o->d->ops->adamw(o->d, o->seg + o->nseg_main, o->nseg - o->nseg_main, &hp);
    }
    if (o->fp8g)
        fp8_gather(o);
    if (o->gather) {
        /* broadcast bucket by bucket when the forward asks (optim.h) */
        gather_later(o);
        return;
    }
    if (!o->fp8g && o->dist) {
        size_t shard = o->shard_end - o->shard_begin;
        gl_all_gather(o->dp, gl_model_weight(o->m, o->shard_begin), o->m->w, shard,
                      o->d->act, o->d->stream);
        if (o->edp && o->xbegin < o->m->plan->nflat)     /* the experts over EDP */
            gl_all_gather(o->edp, gl_model_weight(o->m, o->xshard_begin),
                          gl_model_weight(o->m, o->xbegin), o->xshard_end - o->xshard_begin,
                          o->d->act, o->d->stream);
    }
}
