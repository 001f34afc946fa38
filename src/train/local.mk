# src/train: the training loop and its parts -- pipeline schedules
# (sched.c) and their runner (pipeline.c), learning-rate schedule (lr.c),
# gradient reduction, norm, clipping and AdamW, plain or distributed
# (optim.c), batches (batch.c), logging (trainlog.c) and the loop
# (train.c).  config.c is listed by src/tools/local.mk.
libgridlm_a_SOURCES += %reldir%/train.h %reldir%/train.c \
	%reldir%/sched.h %reldir%/sched.c %reldir%/pipeline.h %reldir%/pipeline.c \
	%reldir%/lr.h %reldir%/lr.c %reldir%/optim.h %reldir%/optim.c \
	%reldir%/batch.h %reldir%/batch.c %reldir%/trainlog.h %reldir%/trainlog.c

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

# The training loop on one GPU against the CPU (skips without a GPU).
check_PROGRAMS += t/train-cuda.t
t_train_cuda_t_SOURCES = t/train-cuda.c
t_train_cuda_t_LDADD = $(TAP_LIBS)
TESTS += t/train-cuda.t
