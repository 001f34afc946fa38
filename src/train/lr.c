/*
 * lr.c: the learning-rate schedule (lr.h).
 */
#include <config.h>

#include <math.h>

#include "train/lr.h"

void gl_lr_init(gl_lr_sched *s, const gl_config *c)
{
    const gl_optim_opts *o = &c->optim;
    long G = c->global_batch_size > 0 ? c->global_batch_size : 1;
    s->max_lr = o->lr;
    s->min_lr = o->min_lr;
    s->dec_max_lr = o->decoupled_lr > 0 ? o->decoupled_lr : o->lr;
    s->dec_min_lr = o->decoupled_lr > 0 && o->decoupled_min_lr >= 0 ? o->decoupled_min_lr
                                                                    : o->min_lr;
    s->style = o->lr_decay_style;
    if (c->train_samples > 0) {
        s->decay = o->lr_decay_samples > 0 ? o->lr_decay_samples : c->train_samples;
        s->warmup = (double)o->lr_warmup_samples;
    } else {
        s->decay = (o->lr_decay_iters > 0 ? o->lr_decay_iters : c->train_iters) * G;
        s->warmup = (double)(o->lr_warmup_iters * G);
    }
    if (o->lr_warmup_fraction > 0)
        s->warmup = o->lr_warmup_fraction * (double)s->decay;
}

/* Megatron's get_lr for a group with peak max_lr and floor min_lr. */
static double lr_for(const gl_lr_sched *s, double max_lr, double min_lr, long samples)
{
    double n = (double)samples;
    if (s->warmup > 0 && n <= s->warmup)
        return max_lr * n / s->warmup;
    if (s->style == GL_LR_CONSTANT)
        return max_lr;
    if (samples > s->decay)
        return min_lr;
    if (s->style == GL_LR_INVERSE_SQRT) {
        double w = s->warmup > 1 ? s->warmup : 1, k = n > 1 ? n : 1;
        double lr = max_lr * sqrt(w) / sqrt(k);
        return lr > min_lr ? lr : min_lr;
    }
    double r = (double)s->decay > s->warmup ? (n - s->warmup) / ((double)s->decay - s->warmup)
                                            : 1.0;
    double coeff = s->style == GL_LR_COSINE ? 0.5 * (cos(M_PI * r) + 1.0) : 1.0 - r;
    return min_lr + coeff * (max_lr - min_lr);
}

double gl_lr_at(const gl_lr_sched *s, long samples)
{
    return lr_for(s, s->max_lr, s->min_lr, samples);
}

double gl_lr_decoupled_at(const gl_lr_sched *s, long samples)
{
    return lr_for(s, s->dec_max_lr, s->dec_min_lr, samples);
}
