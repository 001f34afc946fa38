/*
 * train.h: the training loop (src/train/train.c; how one iteration runs
 * is described there, the parts in sched.h, pipeline.h, optim.h, lr.h,
 * batch.h and trainlog.h, the model in ../model/model.h).
 */
#ifndef GL_TRAIN_TRAIN_H
#define GL_TRAIN_TRAIN_H

#include "boot/boot.h"
#include "boot/groups.h"
#include "device/ops.h"
#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Train the model c describes on this rank's device d, in the groups g,
 * from --load's checkpoint when given, until c->train_iters (or
 * --exit-interval, --exit-duration-in-mins, or SIGTERM/SIGUSR1 with
 * --exit-signal-handler: faults.h) is reached, validating every
 * --eval-interval and saving every --save-interval (and at the end, and
 * before a clean stop) when --save is given.  Groups of one rank may be
 * NULL.  Collective over the world.  Returns the program's exit status (0
 * on success, a clean stop included); fatal errors stop the job through
 * gl_die(). */
int gl_train_run(const gl_config *c, const gl_boot *b, gl_groups *g, gl_dev *d);

#ifdef __cplusplus
}
#endif
#endif
