/*
 * lr.h: the learning-rate schedule, as Megatron-LM's
 * OptimizerParamScheduler computes it.
 *
 * The scheduler counts SAMPLES, as Megatron's does: after each successful
 * optimizer step it advances by that iteration's global batch (skipped
 * steps do not count).  With n samples counted so far (0 for the first
 * iteration), W the warm-up and D the decay length, in samples:
 *   warm-up   n <= W (W > 0):  lr = max_lr n / W        (from 0)
 *   constant  lr = max_lr
 *   n > D:                     lr = min_lr
 *   inverse-square-root        lr = max(min_lr, max_lr sqrt(max(W,1) / max(n,1)))
 *   otherwise r = (n - W) / (D - W) and
 *     linear  lr = min_lr + (max_lr - min_lr) (1 - r)
 *     cosine  lr = min_lr + (max_lr - min_lr) (cos(pi r) + 1) / 2
 * Iteration-based runs (--train-iters): D = --lr-decay-iters (default
 * --train-iters) x G, W = --lr-warmup-iters x G, G the global batch.
 * Sample-based runs (--train-samples): D = --lr-decay-samples (default
 * --train-samples), W = --lr-warmup-samples.  Either way
 * --lr-warmup-fraction f gives W = f D, a real number, not rounded (as
 * Megatron).  So the first iteration of a warm-up trains with lr 0, as in
 * Megatron, and the "learning rate" a log line shows is, as in Megatron,
 * the one the NEXT step will use (the scheduler has already stepped).
 *
 * --decoupled-lr / --decoupled-min-lr replace max_lr / min_lr for the
 * embedding and the output layer (Megatron's is_embedding_or_output
 * parameters); the warm-up and decay are the same.
 */
#ifndef GL_TRAIN_LR_H
#define GL_TRAIN_LR_H

#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double max_lr, min_lr;
    double dec_max_lr, dec_min_lr;  /* the embedding's and output layer's */
    double warmup;                  /* W, samples (a fraction of D may be fractional) */
    long decay;                     /* D, samples */
    gl_lr_style style;
} gl_lr_sched;

/* The schedule of c; the global batch counts as 1 when c has none yet. */
void gl_lr_init(gl_lr_sched *s, const gl_config *c);

/* The learning rate after `samples` samples' worth of optimizer steps. */
double gl_lr_at(const gl_lr_sched *s, long samples);

/* The same for the embedding and the output layer (--decoupled-lr). */
double gl_lr_decoupled_at(const gl_lr_sched *s, long samples);

#ifdef __cplusplus
}
#endif
#endif
