/*
 * train-lr: the learning-rate schedule against values worked out by hand
 * from Megatron-LM's OptimizerParamScheduler, and the sampler's
 * arithmetic.
 */
#include <config.h>

#include <math.h>

#include "tap.h"
#include "train/batch.h"
#include "train/run_config.h"
#include "train/lr.h"

static gl_config base(void)
{
    gl_config c;
    gl_config_defaults(&c);
    c.optim.lr = 1e-3;
    c.optim.min_lr = 1e-4;
    c.train_iters = 20;
    c.optim.lr_warmup_iters = 2;
    c.optim.lr_decay_iters = 0;
    return c;
}

int main(void)
{
    gl_lr_sched s;
    gl_config c = base();
    plan(NO_PLAN);

    c.optim.lr_decay_style = GL_LR_LINEAR;
    gl_lr_init(&s, &c);
    is_double(gl_lr_at(&s, 0), 0.0, 1e-15, "warm-up starts at 0 (Megatron trains step 1 at lr 0)");
    is_double(gl_lr_at(&s, 1), 5e-4, 1e-15, "warm-up is linear");
    is_double(gl_lr_at(&s, 2), 1e-3, 1e-15, "warm-up ends at --lr");
    /* decay over steps 2..20: r = (s - 2) / 18 */
    is_double(gl_lr_at(&s, 11), 1e-4 + 0.5 * 9e-4, 1e-15, "linear: halfway");
    is_double(gl_lr_at(&s, 20), 1e-4, 1e-15, "linear: --min-lr at --lr-decay-iters");
    is_double(gl_lr_at(&s, 25), 1e-4, 1e-15, "--min-lr after decay");

    c.optim.lr_decay_style = GL_LR_COSINE;
    gl_lr_init(&s, &c);
    is_double(gl_lr_at(&s, 11), 1e-4 + 0.5 * 9e-4, 1e-15, "cosine: halfway is the mean");
    is_double(gl_lr_at(&s, 5), 1e-4 + 9e-4 * 0.5 * (cos(M_PI * 3.0 / 18.0) + 1), 1e-15,
              "cosine: a sixth of the way");
    c.optim.lr_decay_style = GL_LR_CONSTANT;
    gl_lr_init(&s, &c);
    is_double(gl_lr_at(&s, 1), 5e-4, 1e-15, "constant: still warms up");
    is_double(gl_lr_at(&s, 30), 1e-3, 1e-15, "constant: --lr after warm-up");

    c = base();
    c.optim.lr_decay_style = GL_LR_LINEAR;
    c.optim.lr_warmup_iters = 0;
    c.optim.lr_warmup_fraction = 0.25;
    c.optim.lr_decay_iters = 40;
    gl_lr_init(&s, &c);
    is_int(s.warmup, 10, "--lr-warmup-fraction 0.25 of --lr-decay-iters 40");
    is_double(gl_lr_at(&s, 25), 1e-4 + 0.5 * 9e-4, 1e-15, "decay measured from the warm-up's end");

    /* Megatron's sampler: micro-batch j of DP rank r in iteration i. */
    c.layout.micro_batch_size = 2;
    c.global_batch_size = 16;
    c.data_parallel_size = 2;
    is_int(gl_batch_sample_index(&c, 0, 0, 0, 0), 0, "first sample");
    is_int(gl_batch_sample_index(&c, 0, 0, 1, 1), 3, "DP rank 1 takes the next micro-batch");
    is_int(gl_batch_sample_index(&c, 0, 1, 0, 0), 4, "then the next group");
    is_int(gl_batch_sample_index(&c, 2, 3, 1, 0), 32 + 12 + 2, "iteration 2");
    return done_testing();
}
