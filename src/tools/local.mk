# src/tools: sources, programs and tests of this room (see Makefile.am).

# The run's configuration (src/train/run_config.c) is listed here, beside the
# program that reads it (src/train/local.mk leaves it to this file).
libgridlm_a_SOURCES += src/train/run_config.c src/train/run_config.h

# gridlm-train: parse, boot, build the groups, open the device, train.
bin_PROGRAMS += %reldir%/gridlm-train
%canon_reldir%_gridlm_train_SOURCES = %reldir%/gridlm-train.c
%canon_reldir%_gridlm_train_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-train.1

# Tests: the option parser, the configuration (checks, presets, FLOPs),
# and the program's answers to bad command lines.
check_PROGRAMS += t/options.t t/options-config.t
t_options_t_SOURCES = t/options.c t/child.c t/child.h
t_options_t_LDADD = $(TAP_LIBS)
t_options_config_t_SOURCES = t/options-config.c t/child.c t/child.h
t_options_config_t_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/train-args.t
TESTS += t/options.t t/options-config.t t/train-args.t
