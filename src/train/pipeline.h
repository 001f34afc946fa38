/*
 * pipeline.h: run one iteration's pipeline schedule (sched.h) on this
 * rank's model: forwards, backwards, and the activation and gradient
 * exchanges with the neighbouring stages over the PP group, each round
 * bracketed by gl_comm_group_start/end and enqueued on the device stream.
 */
#ifndef GL_TRAIN_PIPELINE_H
#define GL_TRAIN_PIPELINE_H

#include "comm/comm.h"
#include "model/model.h"
#include "train/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mbs[j] is micro-batch j's data (only the chunks with the embedding or
 * the head read it); loss_acc (device fp32, may be NULL) collects the
 * head's sum of masked token losses.  pp may be NULL when PP = 1. */
void gl_pipeline_run(const gl_sched *s, gl_model *m, gl_comm *pp, const gl_mb *mbs,
                     float *loss_acc);

#ifdef __cplusplus
}
#endif
#endif
