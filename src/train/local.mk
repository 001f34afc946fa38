# src/train: the training loop and its parts -- pipeline schedules
# (sched.c) and their runner (pipeline.c), learning-rate schedule (lr.c),
# gradient reduction, norm, clipping and AdamW, plain or distributed
# (optim.c), batches (batch.c), logging (trainlog.c), the loop
# (train.c), the run's configuration (run_config.c: the options, their
# checks), the checks of the files it names before anything is built
# (preflight.c) and the plan --dry-run --world-size prints (run_plan.c).
libgridlm_a_SOURCES += %reldir%/train.h %reldir%/train.c \
	%reldir%/run_config.h %reldir%/run_config.c \
	%reldir%/sched.h %reldir%/sched.c %reldir%/pipeline.h %reldir%/pipeline.c \
	%reldir%/lr.h %reldir%/lr.c %reldir%/optim.h %reldir%/optim.c \
	%reldir%/batch.h %reldir%/batch.c %reldir%/trainlog.h %reldir%/trainlog.c \
	%reldir%/run_plan.h %reldir%/run_plan.c \
	%reldir%/preflight.h %reldir%/preflight.c

# The schedules simulated for every stage at once.
check_PROGRAMS += t/train-sched.t
t_train_sched_t_SOURCES = t/train-sched.c
t_train_sched_t_LDADD = $(TAP_LIBS)
TESTS += t/train-sched.t

# The learning-rate schedule and the sampler's arithmetic.
check_PROGRAMS += t/train-lr.t
t_train_lr_t_SOURCES = t/train-lr.c
t_train_lr_t_LDADD = $(TAP_LIBS)
TESTS += t/train-lr.t

# Parallel equivalence: the tiny model under every layout (shell, mpiexec).
dist_check_SCRIPTS += t/train-equiv.t
TESTS += t/train-equiv.t
dist_check_SCRIPTS += t/train-gpt.t
TESTS += t/train-gpt.t
# --qk-layernorm (Qwen3) under every layout and recomputation.
dist_check_SCRIPTS += t/train-qknorm.t
TESTS += t/train-qknorm.t

# Context parallelism (CP 2 and 4, p2p and all_gather, with TP + SP, PP,
# DP, the distributed optimizer, checkpoints) against one rank (shell).
dist_check_SCRIPTS += t/train-cp.t
TESTS += t/train-cp.t

# Megatron's loss normalisations (per micro-batch by default, per token)
# across layouts, and the batch-size ramp-up across a checkpoint (shell).
dist_check_SCRIPTS += t/train-norm.t
TESTS += t/train-norm.t

# FP8 training on CPU ranks: each recipe in every layout against one rank,
# against bf16, and the refusals of bad flags (shell; t/train-lib.sh).
dist_check_SCRIPTS += t/train-fp8.t
TESTS += t/train-fp8.t

# The training loop on one GPU against the CPU (skips without a GPU).
check_PROGRAMS += t/train-cuda.t
t_train_cuda_t_SOURCES = t/train-cuda.c
t_train_cuda_t_LDADD = $(TAP_LIBS)
TESTS += t/train-cuda.t

# The peak-FLOP table behind MFU, and --save/--load.
libgridlm_a_SOURCES += %reldir%/peak.h %reldir%/peak.c \
	%reldir%/checkpoint.h %reldir%/checkpoint.c

# Validation against a direct computation (t/train-eval-ref: the double
# reference forward of t/model-ref.h), and its log lines.
check_PROGRAMS += t/train-eval-ref
t_train_eval_ref_SOURCES = t/train-eval-ref.c t/model-ref.h
t_train_eval_ref_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/train-eval.t
TESTS += t/train-eval.t

# The peak-FLOP table behind MFU.
check_PROGRAMS += t/train-peak.t
t_train_peak_t_SOURCES = t/train-peak.c
t_train_peak_t_LDADD = $(TAP_LIBS)
TESTS += t/train-peak.t

# Checkpoints: resharding resumes, --async-save, optimizer-state flags,
# SIGTERM save-and-exit.
dist_check_SCRIPTS += t/train-ckpt.t
TESTS += t/train-ckpt.t

# What runs do to the files in --save and --load: leftovers, a save
# stopped midway, links, trackers, other runs' checkpoints, read-only and
# full file systems, another architecture.
dist_check_SCRIPTS += t/train-files.t
TESTS += t/train-files.t

# What runs check before anything is built (preflight.c), --dry-run
# included: data files, tokenizer, --load (Megatron-LM checkpoints,
# another model), --use-checkpoint-args, the vocabulary's source,
# --attention-backend.
dist_check_SCRIPTS += t/train-load.t
TESTS += t/train-load.t

# gridlm-eval (src/tools) against a direct computation (t/eval-ref).
check_PROGRAMS += t/eval-ref
t_eval_ref_SOURCES = t/eval-ref.c t/model-ref.h
t_eval_ref_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/eval-loss.t
TESTS += t/eval-loss.t

# --tensorboard-dir: the event files read back by the tensorboard Python
# package's readers against --log-json; the --wandb-* refusals.
dist_check_SCRIPTS += t/train-tensorboard.t
EXTRA_DIST += t/train-tensorboard.py
TESTS += t/train-tensorboard.t
