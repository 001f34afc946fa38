/*
 * lr.h: the learning-rate schedule, as Megatron-LM's
 * OptimizerParamScheduler computes it.
 *
 * With s optimizer steps taken so far (s = 0 for the first iteration):
 *   warm-up   s <= W (W > 0):  lr = max_lr s / W        (from 0)
 *   constant  lr = max_lr
 *   s > Dsteps:                lr = min_lr
 *   otherwise r = (s - W) / (Dsteps - W) and
 *     linear  lr = min_lr + (max_lr - min_lr) (1 - r)
 *     cosine  lr = min_lr + (max_lr - min_lr) (cos(pi r) + 1) / 2
 * W = --lr-warmup-iters (or --lr-warmup-fraction x Dsteps), Dsteps =
 * --lr-decay-iters (default --train-iters).  Megatron counts these in
 * samples (x global batch); with a fixed global batch that is the same
 * thing.  So the first iteration of a warm-up trains with lr 0, as in
 * Megatron, and the "learning rate" a log line shows is, as in Megatron,
 * the one the NEXT step will use (the scheduler has already stepped).
 */
#ifndef GL_TRAIN_LR_H
#define GL_TRAIN_LR_H

#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double max_lr, min_lr;
    long warmup, decay;
    gl_lr_style style;
} gl_lr_sched;

void gl_lr_init(gl_lr_sched *s, const gl_config *c);

/* The learning rate after `steps` optimizer steps. */
double gl_lr_at(const gl_lr_sched *s, long steps);

#ifdef __cplusplus
}
#endif
#endif
