/*
 * lr.c: the learning-rate schedule (lr.h).
 */
#include <config.h>

#include <math.h>

#include "train/lr.h"

void gl_lr_init(gl_lr_sched *s, const gl_config *c)
{
    s->max_lr = c->optim.lr;
    s->min_lr = c->optim.min_lr;
    s->style = c->optim.lr_decay_style;
    s->decay = c->optim.lr_decay_iters > 0 ? c->optim.lr_decay_iters : c->train_iters;
    s->warmup = c->optim.lr_warmup_iters;
    if (c->optim.lr_warmup_fraction > 0)
        s->warmup = (long)(c->optim.lr_warmup_fraction * (double)s->decay);
}

double gl_lr_at(const gl_lr_sched *s, long steps)
{
    if (s->warmup > 0 && steps <= s->warmup)
        return s->max_lr * (double)steps / (double)s->warmup;
    if (s->style == GL_LR_CONSTANT)
        return s->max_lr;
    if (steps > s->decay)
        return s->min_lr;
    double r = s->decay > s->warmup
             ? (double)(steps - s->warmup) / (double)(s->decay - s->warmup) : 1.0;
    double coeff = s->style == GL_LR_COSINE ? 0.5 * (cos(M_PI * r) + 1.0) : 1.0 - r;
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}
