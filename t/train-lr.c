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

    /* Iteration-based, global batch 4: Megatron's scheduler counts
     * samples, W = 2 x 4 = 8, D = 20 x 4 = 80; after 11 steps (44
     * samples) r = (44 - 8) / 72 = 1/2: the same rates as above. */
    c = base();
    c.optim.lr_decay_style = GL_LR_LINEAR;
    c.global_batch_size = 4;
    gl_lr_init(&s, &c);
    ok(s.warmup == 8 && s.decay == 80, "iterations x global batch: W 8, D 80 samples");
    is_double(gl_lr_at(&s, 4), 5e-4, 1e-15, "one step of warm-up in samples");
    is_double(gl_lr_at(&s, 44), 1e-4 + 0.5 * 9e-4, 1e-15, "linear: halfway in samples");

    /* --lr-warmup-fraction is not rounded (Megatron): 0.15 x 80 = 12
     * samples = 3 steps; after 2 steps (8 samples) lr = 1e-3 x 8 / 12. */
    c.optim.lr_warmup_iters = 0;
    c.optim.lr_warmup_fraction = 0.15;
    gl_lr_init(&s, &c);
    is_double(s.warmup, 12.0, 1e-12, "fraction of the decay: 12 samples");
    is_double(gl_lr_at(&s, 8), 1e-3 * 8.0 / 12.0, 1e-15, "warm-up of a fractional length");
    c.optim.lr_warmup_fraction = 0.1;   /* 8.0 samples: step 2 ends it */
    gl_lr_init(&s, &c);
    is_double(gl_lr_at(&s, 8), 1e-3, 1e-15, "fraction 0.1: the warm-up ends at 8 samples");

    /* Sample-based: --train-samples 1000, --lr-warmup-samples 100,
     * --lr-decay-samples 600.  After 350 samples r = 250 / 500 = 1/2;
     * cosine coefficient (cos(pi/2) + 1) / 2 = 1/2. */
    c = base();
    c.train_iters = 0;
    c.train_samples = 1000;
    c.optim.lr_warmup_iters = 0;
    c.optim.lr_warmup_samples = 100;
    c.optim.lr_decay_samples = 600;
    c.global_batch_size = 32;
    c.optim.lr_decay_style = GL_LR_COSINE;
    gl_lr_init(&s, &c);
    ok(s.warmup == 100 && s.decay == 600, "samples: W 100, D 600");
    is_double(gl_lr_at(&s, 50), 5e-4, 1e-15, "samples: warm-up halfway at 50");
    is_double(gl_lr_at(&s, 350), 1e-4 + 0.5 * 9e-4, 1e-15, "samples: cosine halfway at 350");
    is_double(gl_lr_at(&s, 601), 1e-4, 1e-15, "samples: --min-lr past the decay");
    c.optim.lr_decay_samples = 0;       /* default: --train-samples */
    c.optim.lr_warmup_samples = 0;
    c.optim.lr_warmup_fraction = 0.01;  /* 10 samples */
    gl_lr_init(&s, &c);
    ok(s.decay == 1000 && s.warmup == 10, "samples: D defaults to --train-samples, W = 1%%");

    /* inverse-square-root: lr = max(min, max_lr sqrt(W / n)); W 100:
     * n 400 gives 1e-3 / 2, n 10^6 the floor 1e-4. */
    c.optim.lr_warmup_fraction = 0;
    c.optim.lr_warmup_samples = 100;
    c.optim.lr_decay_samples = 2000000;
    c.optim.lr_decay_style = GL_LR_INVERSE_SQRT;
    gl_lr_init(&s, &c);
    is_double(gl_lr_at(&s, 400), 5e-4, 1e-15, "inverse-square-root: sqrt(100 / 400)");
    is_double(gl_lr_at(&s, 1000000), 1e-4, 1e-15, "inverse-square-root: floored at --min-lr");

    /* --decoupled-lr 2e-3 --decoupled-min-lr 0: same shape, own ends.
     * Linear, W 100, D 600, after 350 samples: 0 + 0.5 x 2e-3. */
    c.optim.lr_decay_samples = 600;
    c.optim.lr_decay_style = GL_LR_LINEAR;
    c.optim.decoupled_lr = 2e-3;
    c.optim.decoupled_min_lr = 0;
    gl_lr_init(&s, &c);
    is_double(gl_lr_decoupled_at(&s, 50), 1e-3, 1e-15, "decoupled: warm-up to its own peak");
    is_double(gl_lr_decoupled_at(&s, 350), 1e-3, 1e-15, "decoupled: halfway to its own floor");
    is_double(gl_lr_at(&s, 350), 5.5e-4, 1e-15, "the other parameters keep --lr");
    c.optim.decoupled_min_lr = -1;      /* unset: --min-lr */
    gl_lr_init(&s, &c);
    is_double(gl_lr_decoupled_at(&s, 700), 1e-4, 1e-15, "decoupled floor defaults to --min-lr");
    c = base();

    /* Megatron's sampler: micro-batch j of DP rank r in iteration i. */
    c.layout.micro_batch_size = 2;
    c.global_batch_size = 16;
    c.data_parallel_size = 2;
    is_int(gl_batch_sample_index(&c, 0, 0, 0, 0), 0, "first sample");
    is_int(gl_batch_sample_index(&c, 0, 0, 1, 1), 3, "DP rank 1 takes the next micro-batch");
    is_int(gl_batch_sample_index(&c, 0, 1, 0, 0), 4, "then the next group");
    is_int(gl_batch_sample_index(&c, 2, 3, 1, 0), 32 + 12 + 2, "iteration 2");
    /* a ramp-up iteration starting after 20 consumed samples */
    is_int(gl_batch_sample_at(&c, 20, 1, 1, 1), 20 + 4 + 2 + 1, "from the consumed samples");
    return done_testing();
}
