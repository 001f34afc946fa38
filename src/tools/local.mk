# src/tools: the main() of each installed program (thin: parse, call,
# report) and its manual; what a program does lives in its room's part of
# libgridlm.a (named below), and that room lists most of its tests.

# gridlm-eval: loss and perplexity of a checkpoint (or a freshly
# initialised model) over a dataset's documents, forward-only pipeline
# (src/train).
bin_PROGRAMS += %reldir%/gridlm-eval
%canon_reldir%_gridlm_eval_SOURCES = %reldir%/gridlm-eval.c
%canon_reldir%_gridlm_eval_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-eval.1

# gridlm-prep: corpora, tokenizers and Megatron datasets (src/data).
bin_PROGRAMS += %reldir%/gridlm-prep
%canon_reldir%_gridlm_prep_SOURCES = %reldir%/gridlm-prep.c
%canon_reldir%_gridlm_prep_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-prep.1

# gridlm-ckpt: info, import-hf, export-hf (src/ckpt).
bin_PROGRAMS += %reldir%/gridlm-ckpt
%canon_reldir%_gridlm_ckpt_SOURCES = %reldir%/gridlm-ckpt.c
%canon_reldir%_gridlm_ckpt_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-ckpt.1

# gridlm-train: parse, boot, build the groups, open the device, train
# (src/train).
bin_PROGRAMS += %reldir%/gridlm-train
%canon_reldir%_gridlm_train_SOURCES = %reldir%/gridlm-train.c
%canon_reldir%_gridlm_train_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-train.1

# gridlm-bench: microbenchmarks of gemm, collectives and attention
# (src/bench).
bin_PROGRAMS += %reldir%/gridlm-bench
%canon_reldir%_gridlm_bench_SOURCES = %reldir%/gridlm-bench.c
%canon_reldir%_gridlm_bench_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-bench.1

# Tests: the option parser, the configuration (checks, presets, FLOPs),
# and gridlm-train's answers to bad command lines.
check_PROGRAMS += t/options.t t/options-config.t
t_options_t_SOURCES = t/options.c t/child.c t/child.h
t_options_t_LDADD = $(TAP_LIBS)
t_options_config_t_SOURCES = t/options-config.c t/child.c t/child.h
t_options_config_t_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/train-args.t t/train-megatron.t
TESTS += t/options.t t/options-config.t t/train-args.t t/train-megatron.t
# Megatron-LM's example scripts' arguments (t/train-megatron.t), and the
# table of Megatron-LM's options that test holds gridlm-train to.
EXTRA_DIST += t/megatron-llama3-8b-fp8.args t/megatron-gpt3-175b.args \
	t/megatron-mixtral-8x7b.args doc/megatron-flags.md
