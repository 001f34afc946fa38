/*
 * checkpoint.h: the training loop's checkpoints (--save, --load) on top
 * of ckpt/ckpt.h's HDF5 files of full logical tensors.
 *
 * What a checkpoint holds (ckpt.h's conventions):
 *   model/<param>             fp32 master weights of every logical tensor
 *   optim/exp_avg/<param>     AdamW moments (not with --no-save-optim)
 *   optim/exp_avg_sq/<param>
 * <param> is the parameter table's name (model/model.h: "embedding.weight",
 * "layers.3.attention.wq.weight", ...), which is also the name ckpt/hf.h
 * maps to Hugging Face's: there is one table of names, model/plan.c's.
 * Root attributes: "iteration" (iterations completed), "config" (the run's
 * configuration as JSON, gl_config's field names), "consumed_train_samples",
 * "optimizer_steps" (AdamW's step count, which also places the learning-
 * rate schedule), "skipped_iterations", "nan_iterations", "rng_seed",
 * "has_optimizer_state", "saved_layout" (text, for people), and the
 * learning-rate scheduler's state as Megatron's OptimizerParamScheduler
 * keeps it, in samples: "opt_param_scheduler_num_steps" (samples of the
 * successful steps), "..._max_lr", "..._min_lr", "..._lr_warmup_steps",
 * "..._lr_decay_steps", "..._lr_decay_style", "..._weight_decay".
 *
 * The schedule on --load, as Megatron: the count is restored; the values
 * must match the command line's (else the load fails, naming them),
 * unless --use-checkpoint-opt_param-scheduler (the checkpoint's values
 * are taken) or --override-opt_param-scheduler (the command line's are).
 * Checkpoints older than these attributes resume with the command line's
 * schedule at optimizer_steps x --global-batch-size samples.
 *
 * Saving.  Every rank lists the same tensors in the same order (the
 * model's logical tensors, whatever this rank holds) and gives its slab:
 * its TP piece of the tensor, and within it the part that lies in its DP
 * shard of the flat buffer (optim.h) -- with the distributed optimizer
 * that is all the rank has; without it every DP rank has everything and
 * writes only that part, so each element is written by exactly one rank
 * either way.  TP-replicated tensors (the norms) are written by TP rank 0,
 * and the last stage's copy of a tied embedding by nobody (the first
 * stage writes the embedding).  --async-save hands the slabs to a writer
 * thread (ckpt.h) and training goes on; the next save, or the end of the
 * run, waits for it.
 *
 * Loading reshards: each rank reads the hyperslabs of its own pieces,
 * whatever layout wrote the file -- the whole TP piece for the compute
 * weights, the part in its update range for the master weights and
 * moments.  The vocabulary's padding may differ between layouts (it is a
 * multiple of --make-vocab-size-divisible-by x TP): the rows the file
 * lacks read as zeros; they are never looked up nor predicted.
 * --no-load-optim leaves the moments at zero and restarts AdamW's step
 * count and the learning-rate schedule (as Megatron, which then does not
 * load its scheduler either); --finetune loads the weights only and
 * starts at iteration 0; --no-load-rng: gridlm's randomness is counter-
 * based, keyed by --seed and positions (there is no generator state to
 * restore), so the flag only silences the warning given when --seed
 * differs from the checkpoint's.
 */
#ifndef GL_TRAIN_CHECKPOINT_H
#define GL_TRAIN_CHECKPOINT_H

#include <mpi.h>

#include "ckpt/ckpt.h"
#include "model/model.h"
#include "train/run_config.h"
#include "train/optim.h"
#include "train/lr.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where training stands: what a checkpoint carries besides tensors. */
typedef struct {
    long iteration;             /* iterations completed */
    long consumed_samples;
    long skipped, nan_iters;
    long lr_samples;            /* the scheduler's count, samples (lr.h) */
    gl_lr_sched sched;          /* the schedule in force */
} gl_train_progress;

/* Collective over world: save the model and (unless --no-save-optim) the
 * optimizer to --save at pr->iteration.  With --async-save, *pending gets
 * the running save (the previous one is waited for first); otherwise the
 * save is done on return.  Dies with ckpt's message on failure. */
void gl_train_save(const gl_config *c, MPI_Comm world, gl_model *m, gl_optim *o,
                   const gl_train_progress *pr, gl_ckpt_async **pending);

/* At the start of a run with --save DIR (called on every rank; the work
 * is rank 0's): create DIR when missing and check that a file can be
 * created there (a read-only or foreign directory stops the run now, not
 * at its first save), then remove the temporaries killed saves left
 * there, saying so in one line.  Dies (exit 2) naming DIR and the fix. */
void gl_train_save_prepare(const gl_config *c, MPI_Comm world);

/* Once the run knows where it starts (start: iterations completed, from
 * --load, or 0): a checkpoint file in --save beyond start is another
 * run's, which this run would write over (or leave the tracker behind);
 * stop (exit 2), naming it and the ways on.  Called on every rank (the
 * work is rank 0's). */
void gl_train_save_guard(const gl_config *c, MPI_Comm world, long start);

/* Wait for an --async-save still running (NULL: nothing to do), and
 * report it.  Collective over the world the save was started on. */
void gl_train_save_wait(gl_ckpt_async **pending);

/* Collective over world: resume from --load (a checkpoint file, or a
 * directory whose tracker names one).  Returns 0, with pr zeroed but for
 * the command line's schedule (pr->sched), when the directory holds no
 * checkpoint yet; 1 when loaded.  Dies naming the
 * file and the fix when the checkpoint does not fit this model. */
int gl_train_load(const gl_config *c, MPI_Comm world, gl_model *m, gl_optim *o,
                  gl_train_progress *pr);

/* Read every weight this rank's model holds from ck (fp32, converted to
 * the compute dtype); mr's ranges (mr may be NULL) receive the fp32
 * values.  Independent per rank.  Dies on error. */
void gl_ckpt_load_weights(gl_ckpt *ck, gl_model *m, const gl_master *mr);

/* The configuration as the JSON text of the "config" attribute
 * (malloc'd). */
char *gl_train_config_json(const gl_config *c);

/* Set the model's shape fields of c (layers, sizes, heads, vocabulary,
 * RoPE, norm epsilon, tied or not) from a checkpoint's "config" text, and
 * --seq-length too when c has none.  Returns 0, or -1 with a message in
 * err. */
int gl_train_config_from_json(const char *text, gl_config *c, gl_error *err);

/* What a checkpoint says about itself, before any model exists. */
typedef struct {
    char *config;               /* its "config" attribute (malloc'd) */
    char *file;                 /* the file's path (malloc'd) */
    long iteration;             /* iterations completed */
    int has_optimizer_state;    /* 1 when it holds AdamW's moments */
} gl_train_peek_info;

/* Without MPI and without reading tensors: what the checkpoint --load
 * names (load: a file, or a directory whose tracker names one) says
 * about itself.  Returns GL_CKPT_OK with *info filled (free with
 * gl_train_peek_free); GL_CKPT_NONE (info zeroed) when the directory
 * holds no checkpoint yet; GL_CKPT_ERR with err (a Megatron-LM
 * checkpoint, a missing, unreadable, incomplete or foreign file, no
 * "config"). */
int gl_train_peek(const char *load, gl_train_peek_info *info, gl_error *err);
void gl_train_peek_free(gl_train_peek_info *info);

/* Whether the model's weights and optimizer state of a checkpoint with
 * has_optimizer_state can start this run (--finetune and --no-load-optim
 * need no moments); dies (exit 2) naming file and the fix when not. */
void gl_train_check_optim_state(const gl_config *c, int has_optimizer_state,
                                const char *file);

/* The refusal of gl_train_save_guard, on this process alone (no MPI):
 * --save holding a checkpoint beyond start (the iteration this run starts
 * from) stops the run (exit 2), naming it and the ways on. */
void gl_train_check_save_dir(const gl_config *c, long start);

/* The model's architecture in c (layers, sizes, heads, query groups,
 * head size, vocabulary, tied or not, norm epsilon, RoPE base and
 * scaling) against a checkpoint's "config" text, one table of fields:
 * dies (exit 2) naming every flag that differs with both values, and
 * the file. */
void gl_train_check_model(const gl_config *c, const char *config_text, const char *file);

#ifdef __cplusplus
}
#endif
#endif
