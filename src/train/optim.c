/*
 * optim.c: gradient reduction, norm and AdamW, plain or distributed
 * (optim.h).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "train/optim.h"

/* Ranges of the flat buffer with one flag value, from the parameter
 * table: each parameter's range is extended over the alignment gap after
 * it (zeros that change nothing), and neighbours with the same flag are
 * merged.  which: 0 = weight decay (1 = decay), 1 = counted. */
static gl_range *flag_ranges(const gl_model_plan *p, int which, int *nout)
{
    int n = p->nparams;
    int *order = gl_malloc((size_t)(n ? n : 1) * sizeof *order);
    for (int i = 0; i < n; i++)
        order[i] = i;
    /* insertion sort by offset: tables are short and nearly sorted */
    for (int i = 1; i < n; i++) {
        int k = order[i], j = i - 1;
        while (j >= 0 && p->param[order[j]].offset > p->param[k].offset) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = k;
    }
    gl_range *r = gl_malloc((size_t)(n ? n : 1) * sizeof *r);
    int nr = 0;
    for (int i = 0; i < n; i++) {
        const gl_param *q = &p->param[order[i]];
        size_t end = i + 1 < n ? p->param[order[i + 1]].offset : p->nflat;
        int flag = which == 0 ? !q->no_weight_decay : q->counted;
        if (nr && r[nr - 1].flag == flag && r[nr - 1].end == q->offset)
            r[nr - 1].end = end;
        else
            r[nr++] = (gl_range){ q->offset, end, flag };
    }
    free(order);
    *nout = nr;
    return r;
}

gl_optim *gl_optim_new(const gl_config *c, gl_model *m, gl_comm *dp, int dist)
{
    const gl_model_plan *p = m->plan;
    gl_dev *d = m->d;
    gl_optim *o = gl_calloc(1, sizeof *o);
    o->m = m;
    o->d = d;
    o->dp = (dp && gl_comm_size(dp) > 1) ? dp : NULL;
    o->dp_size = o->dp ? gl_comm_size(dp) : 1;
    o->dp_rank = o->dp ? gl_comm_rank(dp) : 0;
    o->dist = dist && o->dp_size > 1;
    o->beta1 = c->adam_beta1;
    o->beta2 = c->adam_beta2;
    o->eps = c->adam_eps;
    if (p->nflat % (size_t)o->dp_size)
        gl_die("optimizer: flat buffer of %zu elements does not split over DP %d",
               p->nflat, o->dp_size);
    size_t shard = p->nflat / (size_t)o->dp_size;
    o->shard_begin = shard * (size_t)o->dp_rank;
    o->shard_end = o->shard_begin + shard;
    o->upd_begin = o->dist ? o->shard_begin : 0;
    o->upd_end = o->dist ? o->shard_end : p->nflat;
    size_t nu = o->upd_end - o->upd_begin;

    o->master_is_w = !o->dist && d->act == GL_DT_F32;
    o->master = o->master_is_w ? (float *)m->w : d->ops->alloc(d, nu * sizeof(float));
    o->mom1 = d->ops->alloc(d, nu * sizeof(float));
    o->mom2 = d->ops->alloc(d, nu * sizeof(float));
    if (o->dist)
        o->gshard = d->ops->alloc(d, shard * sizeof(float));

    /* counted ranges within the shard */
    int nr;
    gl_range *r = flag_ranges(p, 1, &nr);
    o->norm = gl_malloc((size_t)(nr ? nr : 1) * sizeof *o->norm);
    for (int i = 0; i < nr; i++) {
        size_t a = r[i].begin > o->shard_begin ? r[i].begin : o->shard_begin;
        size_t b = r[i].end < o->shard_end ? r[i].end : o->shard_end;
        if (r[i].flag && b > a)
            o->norm[o->nnorm++] = (gl_range){ a, b, 1 };
    }
    free(r);

    /* AdamW segments within the update range */
    r = flag_ranges(p, 0, &nr);
    o->seg = gl_malloc((size_t)(nr ? nr : 1) * sizeof *o->seg);
    const float *grad = o->dist ? o->gshard : m->g;
    size_t gbase = o->dist ? o->shard_begin : 0;
    for (int i = 0; i < nr; i++) {
        size_t a = r[i].begin > o->upd_begin ? r[i].begin : o->upd_begin;
        size_t b = r[i].end < o->upd_end ? r[i].end : o->upd_end;
        if (b <= a)
            continue;
        gl_adamw_seg *s = &o->seg[o->nseg++];
        s->master = o->master + (a - o->upd_begin);
        s->grad = grad + (a - gbase);
        s->m = o->mom1 + (a - o->upd_begin);
        s->v = o->mom2 + (a - o->upd_begin);
        s->act_out = o->master_is_w ? NULL : gl_model_weight(m, a);
        s->count = b - a;
        s->weight_decay = r[i].flag ? (float)c->weight_decay : 0.0f;
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
    free(o->norm);
    free(o->seg);
    free(o);
}

float *gl_optim_master_target(gl_optim *o, size_t *begin, size_t *end)
{
    *begin = o->upd_begin;
    *end = o->upd_end;
    return o->master_is_w ? NULL : o->master;
}

void gl_optim_reduce(gl_optim *o)
{
    size_t n = o->m->plan->nflat;
    if (!o->dp)
        return;
    if (o->dist)
        gl_reduce_scatter(o->dp, o->m->g, o->gshard, n / (size_t)o->dp_size, GL_DT_F32,
                          GL_OP_SUM, o->d->stream);
    else
        gl_all_reduce(o->dp, o->m->g, o->m->g, n, GL_DT_F32, GL_OP_SUM, o->d->stream);
}

void gl_optim_sumsq(gl_optim *o, float *out)
{
    const float *grad = o->dist ? o->gshard : o->m->g;
    size_t gbase = o->dist ? o->shard_begin : 0;
    for (int i = 0; i < o->nnorm; i++)
        o->d->ops->sumsq_f32(o->d, out, grad + (o->norm[i].begin - gbase),
                             o->norm[i].end - o->norm[i].begin);
}

void gl_optim_step(gl_optim *o, double lr, double grad_scale)
{
    gl_adamw_hyper hp = {
        .lr = (float)lr, .beta1 = (float)o->beta1, .beta2 = (float)o->beta2,
        .eps = (float)o->eps, .grad_scale = (float)grad_scale, .step = ++o->steps,
    };
    o->d->ops->adamw(o->d, o->seg, o->nseg, &hp);
    if (o->dist) {
        size_t shard = o->shard_end - o->shard_begin;
        gl_all_gather(o->dp, gl_model_weight(o->m, o->shard_begin), o->m->w, shard,
                      o->d->act, o->d->stream);
    }
}
