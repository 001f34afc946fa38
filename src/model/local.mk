# src/model: the Llama decoder of one rank -- how it is laid out
# (layout.h), parameter table and flat layout (plan.c), buffers, initial
# weights and RoPE tables (model.c), how an iteration's gradients
# start (grads.c), the forward/backward passes
# (layer.c; layer.h, the helpers it shares with moe.c), the
# mixture-of-experts MLP (moe.c) and their FP8 products (fp8.c), written
# against ops.h and comm.h.
libgridlm_a_SOURCES += %reldir%/model.h %reldir%/layout.h %reldir%/plan.c %reldir%/model.c \
	%reldir%/grads.c \
	%reldir%/layer.h %reldir%/layer.c %reldir%/moe.h %reldir%/moe.c %reldir%/fp8.c %reldir%/cp.c

# The model against an independent double-precision forward and against
# finite differences of its loss (one rank, CPU device).
check_PROGRAMS += t/model-grad.t
t_model_grad_t_SOURCES = t/model-grad.c t/model-ref.h t/model-cfg.h
t_model_grad_t_LDADD = $(TAP_LIBS)
TESTS += t/model-grad.t

# The counter-based RNG and the parameter table of every rank of a layout.
check_PROGRAMS += t/model-plan.t
t_model_plan_t_SOURCES = t/model-plan.c t/model-cfg.h
t_model_plan_t_LDADD = $(TAP_LIBS)
TESTS += t/model-plan.t

# Activation recomputation: the same losses as without it in every layout,
# less peak memory (shell; the comparison helpers are t/train-lib.sh,
# shared with t/train-equiv.t).
dist_check_SCRIPTS += t/train-recompute.t
TESTS += t/train-recompute.t
EXTRA_DIST += t/train-lib.sh

# The mixture-of-experts layer: gradients against finite differences of
# the objective with its auxiliary and z losses, its statistics, full
# recomputation (one rank, CPU device).
check_PROGRAMS += t/model-moe.t
t_model_moe_t_SOURCES = t/model-moe.c t/model-cfg.h t/model-ref.h
t_model_moe_t_LDADD = $(TAP_LIBS)
TESTS += t/model-moe.t
# The same program's allocated-bytes check under expert parallelism
# (t/model-moe.t --ep on two ranks).
dist_check_SCRIPTS += t/model-moe-ep.t
TESTS += t/model-moe-ep.t

# Mixture-of-experts training: Mixtral-, Qwen3-MoE- and DeepSeek-like
# models give the single-rank numbers under TP, SP, PP, DP and the
# distributed optimizer, with and without dropping; a TP 2 checkpoint
# resumes at TP 1 (shell; t/train-lib.sh, t/train-moe-lib.sh).
dist_check_SCRIPTS += t/train-moe.t t/train-moe-qwen.t
TESTS += t/train-moe.t t/train-moe-qwen.t
EXTRA_DIST += t/train-moe-lib.sh

# Expert parallelism: EP 2 and 4, with EDP and PP, give the single-rank
# numbers for the Mixtral- and Qwen3-like models; an EP 4 checkpoint
# resumes at EP 1 and 2 (shell; t/train-lib.sh, t/train-moe-lib.sh).
dist_check_SCRIPTS += t/train-ep.t
TESTS += t/train-ep.t

# FP8 experts: delayed and tensorwise scaling per expert give the
# single-rank numbers under TP 2, DP 2, ETP 1 under TP 2 (and EP 2 with
# either dispatcher, delayed); --fp8-param-gather trains bit for bit as
# without; resuming is exact (shell; t/train-lib.sh).
dist_check_SCRIPTS += t/train-moe-fp8.t
TESTS += t/train-moe-fp8.t
