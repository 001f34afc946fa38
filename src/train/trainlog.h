/*
 * trainlog.h: the progress line and the JSON record of a logged
 * iteration.
 *
 * The line follows Megatron-LM's training_log (fields, order, number
 * formats), then adds gridlm's throughput fields:
 *
 *  [2025-01-01 12:00:00] iteration       10/      20 | consumed samples:          160 |
 *  elapsed time per iteration (ms): 41.2 | throughput per GPU (TFLOP/s/GPU): 0.1 |
 *  learning rate: 1.000000E-03 | global batch size:    16 | lm loss: 6.012345E+00 |
 *  grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |
 *  tokens per second per GPU: 12345.6 | MFU: 41.20% | memory (GiB): 0.02 |
 *
 * (one line).  On the CPU back end (on_cpu) the throughput is the rank's
 * own: "throughput per rank (GFLOP/s/rank)" and "tokens per second per
 * rank", and there is no MFU (the peaks are GPUs').  --log-json FILE gets one JSON object per logged iteration
 * with the keys iteration, consumed_samples, loss, grad_norm, lr,
 * elapsed_ms, tokens_per_sec_per_gpu, tflops_per_gpu, mfu, mem_gib,
 * skipped_iterations, nan_iterations, global_batch_size (and
 * decoupled_lr under --decoupled-lr, as Megatron's "decoupled learning
 * rate" after the learning rate on the line; and for a mixture-of-
 * experts model moe_aux_loss, moe_z_loss, moe_load_max, moe_dropped,
 * after the lm loss on the line as "load balancing loss", "z loss",
 * "expert load max/mean", "dropped tokens" -- each only when the run has
 * it); numbers that are
 * unknown or not finite are written as null.  Loss, grad norm and time
 * are averages over the iterations since the previous log, as Megatron
 * reports them.
 */
#ifndef GL_TRAIN_TRAINLOG_H
#define GL_TRAIN_TRAINLOG_H

#include <stdio.h>

#include "base/error.h"
#include "base/tfevents.h"
#include "train/run_config.h"   /* gl_log_opts: which scalars */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    long iteration, train_iters, consumed_samples;
    double elapsed_ms;              /* per iteration */
    double lr;
    double decoupled_lr;            /* --decoupled-lr's current rate; < 0: none */
    int global_batch_size;
    double loss, grad_norm;
    long skipped, nan_iters;
    double tokens_per_sec_per_gpu, tflops_per_gpu;
    double mfu;                     /* fraction of peak; < 0 when unknown */
    double mem_gib;                 /* peak device memory, max over ranks */
    int on_cpu;                     /* the CPU back end: per rank, no MFU */
    /* A mixture-of-experts model (moe set): averages over the logged
     * iterations of the load-balancing loss and the z-loss (each the
     * sum over the MoE layers of the mean over the iteration's micro-
     * batches, as added to the objective; < 0: not in the objective),
     * the largest ratio of an expert's tokens to its layer's mean (max
     * over layers and iterations), and the fraction of routed slots
     * dropped (< 0: no capacity). */
    int moe;
    double moe_aux_loss, moe_z_loss, moe_load_max, moe_dropped;
} gl_log_record;

/* Format the progress line (no newline) into buf. */
void gl_log_format_line(char *buf, size_t len, const gl_log_record *r);

/* Write one JSON object and a newline to f, and flush. */
void gl_log_write_json(FILE *f, const gl_log_record *r);

/* Validation, as Megatron-LM's evaluate_and_print_results prints it:
 *
 *  ------------------------------------------------------------------------
 *   validation loss at iteration 100 | lm loss value: 3.212345E+00 |
 *   lm loss PPL: 2.483706E+01 |
 *  ------------------------------------------------------------------------
 *
 * (the middle is one line; the rules are as long as it).  `where` is
 * "iteration 100", or "iteration 2000 on validation set" after the last
 * iteration.  PPL is exp(min(20, loss)), as in Megatron.  The JSON record
 * is {"iteration": 100, "valid_loss": ..., "valid_ppl": ...}. */
double gl_log_ppl(double loss);
void gl_log_format_valid(char *buf, size_t len, const char *where, double loss);
void gl_log_write_valid_json(FILE *f, long iteration, double loss);

/* TensorBoard (--tensorboard-dir): the scalars of Megatron-LM's
 * training_log and evaluate_and_print_results, with its tags, each also
 * as "TAG vs samples" with the consumed samples as its step:
 *
 *   every --tensorboard-log-interval iterations (gl_log_tb_iteration),
 *   the iteration's own values, not averages:
 *     learning-rate              unless --no-log-learnig-rate-to-tensorboard
 *     batch-size                 the global batch
 *     lm loss                    (NaN or Inf as they are, on a skipped step)
 *     loss-scale                 1, unless --no-log-loss-scale-to-tensorboard
 *     world-size                 with --log-world-size-to-tensorboard
 *     grad-norm                  left out on a skipped (non-finite) step
 *     mem-reserved-bytes, mem-allocated-bytes, mem-max-allocated-bytes
 *                                with --log-memory-to-tensorboard: the
 *                                writing rank's bytes in use and peak
 *                                (gridlm holds no cache: reserved = in use);
 *                                no "vs samples", as in Megatron
 *   at each logged iteration, with --log-timers-to-tensorboard
 *   (gl_log_tb_timers), no "vs samples":
 *     iteration-time             seconds per iteration since the last log
 *     throughput                 TFLOP/s per GPU (per rank on the CPU)
 *   after each validation (gl_log_tb_valid):
 *     lm loss validation
 *     lm loss validation ppl     with --log-validation-ppl-to-tensorboard
 *
 * Each returns -1 with err filled when the event file cannot be written. */
typedef struct {
    long iteration, consumed_samples;
    double lr, loss, grad_norm;      /* this iteration's */
    int global_batch_size, world_size;
    double mem_in_use, mem_peak;     /* bytes, the writing rank's device */
} gl_tb_iteration;

int gl_log_tb_iteration(gl_tfevents *w, const gl_log_opts *o, const gl_tb_iteration *s,
                        gl_error *err);
int gl_log_tb_timers(gl_tfevents *w, const gl_log_opts *o, const gl_log_record *r,
                     gl_error *err);
int gl_log_tb_valid(gl_tfevents *w, const gl_log_opts *o, long iteration,
                    long consumed_samples, double loss, gl_error *err);

#ifdef __cplusplus
}
#endif
#endif
