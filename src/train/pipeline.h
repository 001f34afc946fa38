/*
 * pipeline.h: run one iteration's pipeline schedule (sched.h) on this
 * rank's model: forwards, backwards, and the activation and gradient
 * exchanges with the neighbouring stages over the PP group, each round
 * bracketed by gl_comm_group_start/end and enqueued on the device's
 * point-to-point stream, overlapped with the compute stream (pipeline.c).
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

/* Evaluation: the forward of M micro-batches through every stage, no
 * backward, no gradients.  For each micro-batch j in turn and each local
 * chunk c in turn (model chunk mc = c PP + stage), the stage receives the
 * chunk's input from the previous stage (unless mc = 0), runs
 * gl_model_forward_only in slot 0, and sends the output on (unless mc is
 * the last model chunk, whose head adds the masked loss sum to loss_acc).
 * Every stage handles the messages in the same (j, mc) order, so each
 * send meets its receive, and a stage blocked on a receive waits only on
 * work that comes earlier in that order: no deadlock, and consecutive
 * micro-batches overlap across stages as in a 1F1B warm-up.  pp may be
 * NULL when PP = 1. */
void gl_pipeline_forward_only(gl_model *m, gl_comm *pp, const gl_mb *mbs, int M,
                              float *loss_acc);

#ifdef __cplusplus
}
#endif
#endif
