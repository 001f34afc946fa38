/*
 * run_config.h: everything a gridlm run is told, in one struct.
 *
 * Field names follow Megatron-LM's argument names (--hidden-size is
 * hidden_size).  gl_config_defaults() fills Megatron's defaults;
 * gl_config_parse() (run_config.c) reads the command line, applies a --model
 * preset first so that explicit flags override it, and validates every
 * value and every combination, reporting each usage error in one line
 * that names the flag, the value and the fix.  Derived values (padded vocabulary, layers
 * per stage, data-parallel size, ...) are filled by gl_config_finish()
 * once the world size is known.
 */
#ifndef GL_TRAIN_RUN_CONFIG_H
#define GL_TRAIN_RUN_CONFIG_H

#include <stddef.h>

#include "arch/arch.h"
#include "data/loader.h"
#include "model/layout.h"
#include "device/ops.h"   /* gl_device_kind */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GL_LR_CONSTANT = 0, GL_LR_LINEAR, GL_LR_COSINE, GL_LR_INVERSE_SQRT
} gl_lr_style;

/* The optimizer, its learning-rate schedule and how data parallelism shares its work. */
typedef struct gl_optim_opts {
    int use_distributed_optimizer;   /* --use-distributed-optimizer */
    int overlap_grad_reduce;         /* --overlap-grad-reduce */
    int overlap_param_gather;        /* --overlap-param-gather */
    int fp8_param_gather;            /* --fp8-param-gather: the distributed optimizer
                                      * gathers the FP8 layers' weights in FP8 */
    long ddp_bucket_size;            /* --ddp-bucket-size, elements (0: auto) */
    char optimizer[16];              /* --optimizer adam (AdamW) */
    double lr;                       /* --lr */
    double min_lr;                   /* --min-lr */
    long lr_warmup_iters;            /* --lr-warmup-iters */
    double lr_warmup_fraction;       /* --lr-warmup-fraction (0: unused) */
    long lr_decay_iters;             /* --lr-decay-iters (0: train_iters) */
    long lr_warmup_samples;          /* --lr-warmup-samples (with --train-samples) */
    long lr_decay_samples;           /* --lr-decay-samples (0: train_samples) */
    gl_lr_style lr_decay_style;      /* --lr-decay-style */
    double decoupled_lr;             /* --decoupled-lr: peak for the embedding
                                      * and the output layer (0: --lr) */
    double decoupled_min_lr;         /* --decoupled-min-lr (-1: --min-lr) */
    int use_checkpoint_opt_param_scheduler; /* --use-checkpoint-opt_param-scheduler */
    int override_opt_param_scheduler;       /* --override-opt_param-scheduler */
    double weight_decay;             /* --weight-decay (0.01) */
    double adam_beta1, adam_beta2;   /* --adam-beta1 (0.9) --adam-beta2 (0.999) */
    double adam_eps;                 /* --adam-eps (1e-8) */
    double clip_grad;                /* --clip-grad (1.0; 0 disables) */
} gl_optim_opts;

/* Checkpoints: where they go, where a run starts from, what they hold. */
typedef struct gl_ckpt_opts {
    char *save;                      /* --save DIR */
    char *load;                      /* --load DIR|FILE */
    long save_interval;              /* --save-interval */
    int no_save_optim, no_load_optim, no_load_rng; /* --no-save-optim ... */
    int finetune;                    /* --finetune */
    int use_checkpoint_args;         /* --use-checkpoint-args: the model's
                                      * shape from --load's "config" */
    int async_save;                  /* --async-save */
} gl_ckpt_opts;

/* What the run reports, and how often. */
typedef struct gl_log_opts {
    long log_interval;               /* --log-interval (100) */
    char *log_json;                  /* --log-json FILE (gridlm) */
    double peak_tflops;              /* --peak-tflops (0: from the GPU table) */
    double straggler_threshold;      /* --straggler-threshold (gridlm, 1.2) */
    /* TensorBoard (train.c, trainlog.h): the event file of base/tfevents.h,
     * written by the last rank, as Megatron-LM's */
    char *tensorboard_dir;           /* --tensorboard-dir DIR (none: no events) */
    long tensorboard_log_interval;   /* --tensorboard-log-interval (1) */
    int tensorboard_queue_size;      /* --tensorboard-queue-size (1000) */
    int log_timers_to_tensorboard;   /* --log-timers-to-tensorboard */
    int no_log_learning_rate_to_tensorboard; /* --no-log-learnig-rate-to-tensorboard */
    int no_log_loss_scale_to_tensorboard;    /* --no-log-loss-scale-to-tensorboard */
    int log_validation_ppl_to_tensorboard;   /* --log-validation-ppl-to-tensorboard */
    int log_memory_to_tensorboard;   /* --log-memory-to-tensorboard */
    int log_world_size_to_tensorboard;       /* --log-world-size-to-tensorboard */
} gl_log_opts;

/* When a run stops on its own, and what it tolerates. */
typedef struct gl_fault_opts {
    int exit_signal_handler;         /* --exit-signal-handler */
    double exit_duration_in_mins;    /* --exit-duration-in-mins */
    long exit_interval;              /* --exit-interval */
    double distributed_timeout_minutes; /* --distributed-timeout-minutes (10) */
    int max_nonfinite_iters;         /* --max-nonfinite-iters (gridlm, 5) */
} gl_fault_opts;

/* Where the vocabulary size comes from (Megatron: the tokenizer's, or
 * --vocab-size for the NullTokenizer; gridlm adds the checkpoint's under
 * --use-checkpoint-args). */
typedef enum {
    GL_VOCAB_FROM_TOKENIZER = 0,     /* --tokenizer-model (the default) */
    GL_VOCAB_FROM_FLAG,              /* --vocab-size, no tokenizer to read */
    GL_VOCAB_FROM_CHECKPOINT         /* --use-checkpoint-args */
} gl_vocab_source;

/* --attention-backend (Megatron's AttnBackend), before gridlm maps it to
 * an implementation (gl_config_attention_impl). */
typedef enum {
    GL_ATTN_BACKEND_UNSET = 0,       /* not given: GRIDLM_ATTENTION decides */
    GL_ATTN_BACKEND_FLASH, GL_ATTN_BACKEND_FUSED, GL_ATTN_BACKEND_UNFUSED,
    GL_ATTN_BACKEND_LOCAL, GL_ATTN_BACKEND_AUTO
} gl_attn_backend;

typedef struct gl_config {
    /* --- model (arch/arch.h) --- */
    gl_arch arch;

    /* --- layout (model/layout.h) --- */
    gl_layout layout;


    /* --- batch and schedule --- */
    int global_batch_size;           /* --global-batch-size (0: mbs x dp) */
    long train_iters;                /* --train-iters */
    long train_samples;              /* --train-samples (0: unused) */
    long rampup_batch_size[3];       /* --rampup-batch-size START INCREMENT
                                      * SAMPLES (START 0: no ramp-up) */
    int calculate_per_token_loss;    /* --calculate-per-token-loss */
    int seed;                        /* --seed (1234) */

    /* --- optimizer and learning rate --- */
    gl_optim_opts optim;

    /* --- precision, device, memory --- */
    gl_device_kind device;           /* --device cpu|cuda (auto) */
    int bf16;                        /* --bf16 */
    gl_fp8_opts fp8;                 /* --fp8-* (arch/arch.h) */
    gl_moe_opts moe;                 /* --moe-* training settings (arch/arch.h) */
    gl_attn_backend attention_backend; /* --attention-backend */
    int deterministic_mode;          /* --deterministic-mode */

    /* --- data --- */
    gl_data_opts data;               /* data/loader.h */
    long eval_interval;              /* --eval-interval (1000) */
    long eval_iters;                 /* --eval-iters (100) */

    /* --- checkpoints --- */
    gl_ckpt_opts ckpt;

    /* --- logging --- */
    gl_log_opts log;

    /* --- faults --- */
    gl_fault_opts faults;

    /* --- program --- */
    int dry_run;                     /* --dry-run (gridlm) */
    int openai_gelu;                 /* --openai-gelu: the tanh GeLU, which
                                      * gridlm's is (checked only) */
    int no_bias_gelu_fusion;         /* --no-bias-gelu-fusion: Megatron's
                                      * GeLU becomes exact (refused) */
    int dry_run_world_size;          /* --world-size (gridlm): with --dry-run,
                                      * plan for this many ranks in one
                                      * process (0: the launcher's world) */

    /* --- derived by gl_config_finish() --- */
    int world_size;
    int data_parallel_size;
    int expert_data_parallel_size;   /* EDP: world / (ETP x EP x PP), the
                                      * ranks that hold the same experts
                                      * (grid/grid.h's expert grid) */
    int num_micro_batches;           /* global / (mbs x dp): the most, after
                                      * any --rampup-batch-size */
    gl_vocab_source vocab_source;    /* set by gl_config_parse */
    int vocab_size_flag;             /* 1: --vocab-size was on the command
                                      * line (not only a --model preset's) */
} gl_config;

/* The global batch of the iteration that starts after `consumed`
 * training samples, as Megatron-LM's num-micro-batches calculator gives
 * it: --global-batch-size, or during --rampup-batch-size START INC
 * SAMPLES (consumed <= SAMPLES) START + INC floor(consumed / (SAMPLES /
 * ((global - START) / INC))).  Needs gl_config_finish(). */
int gl_config_global_batch(const gl_config *c, long consumed);

/* Megatron's defaults. */
void gl_config_defaults(gl_config *c);

/* Parse argv, after the model's shape is applied (a --model preset's,
 * or with --use-checkpoint-args the checkpoint's, which the flags must
 * agree with), then check every combination that needs only the command
 * line.  Prints --help or --version and exits 0 when asked.  Every usage
 * error is collected and reported together, one line each, then their
 * count (a lone one is one line); the program then exits 2.  A
 * checkpoint --use-checkpoint-args cannot read stops the parse at once. */
void gl_config_parse(gl_config *c, int argc, char **argv);

/* Fill the derived fields for a world of world_size ranks and check every
 * combination (grid.md's layout checks); ranks_per_node feeds the
 * TP-crosses-nodes warning.  Dies (exit 2) on an impossible layout. */
void gl_config_finish(gl_config *c, int world_size, int ranks_per_node);

/* Set the vocabulary size (from the tokenizer, when --vocab-size was not
 * given) and the padded size: the next multiple of
 * make_vocab_size_divisible_by x TP. */
void gl_config_set_vocab_size(gl_config *c, int vocab_size);

/* Where the vocabulary size came from, in words ("the tokenizer",
 * "--vocab-size", "the checkpoint (--use-checkpoint-args)"). */
const char *gl_config_vocab_source_text(const gl_config *c);

/* --attention-backend as the value of GRIDLM_ATTENTION it stands for
 * (cuda/attn_cudnn.h): fused -> "cudnn" (cuDNN's fused flash attention,
 * what Transformer Engine calls FusedAttention); flash, unfused and local
 * -> "native" (gridlm's own flash-attention kernels); auto -> "auto".  NULL when
 * the flag was not given. */
const char *gl_config_attention_impl(const gl_config *c);
/* The NCCL_ALGO gridlm-train sets before NCCL starts: ^NVLS,NVLSTree
 * under --deterministic-mode when the environment sets none, else NULL
 * (leave NCCL_ALGO alone). */
const char *gl_config_nccl_algo(const gl_config *c);

/* The flag's value as written ("fused"); "" for GL_ATTN_BACKEND_UNSET. */
const char *gl_config_attention_backend_name(gl_attn_backend b);
/* The attention implementation the run's attention ops will run, in
 * words, for the start-up summary, into buf[n] (returned): the CPU's
 * reference on a CPU device (on_gpu 0); on a GPU cuDNN's fused attention,
 * gridlm's flash-attention kernels, or, for auto, what auto resolves to
 * (gridlm's kernels without cuDNN in the build or with attention dropout,
 * else cuDNN where it builds a plan for the shape), followed by what
 * chose it (--attention-backend, GRIDLM_ATTENTION or the default). */
char *gl_config_attention_describe(const gl_config *c, int on_gpu, char *buf, size_t n);

/* What the run asks of the data loader: the sequence length, the
 * vocabulary, the seed, and the samples of the train split (--train-samples,
 * or --train-iters x global batch) and of the valid split
 * ((train_iters / eval_interval + 1) x eval_iters x global batch), as
 * Megatron counts them. */
void gl_config_loader_want(const gl_config *c, gl_loader_want *w);

/* Model FLOPs per trained token as ../shared/reference/flops.md counts. */
double gl_config_flops_per_token(const gl_config *c);

void gl_config_free(gl_config *c);

#ifdef __cplusplus
}
#endif
#endif
