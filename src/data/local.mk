# src/data: Megatron indexed datasets, sample index, blending, the BPE
# tokenizer, and what gridlm-prep does (see DESIGN.md; its main() is
# listed by src/tools/local.mk).
libgridlm_a_SOURCES += \
	%reldir%/indexed.c %reldir%/indexed.h \
	%reldir%/strmap.c %reldir%/strmap.h \
	%reldir%/utf8.c %reldir%/utf8.h \
	%reldir%/tokenizer.h %reldir%/tokenizer_impl.h \
	%reldir%/tokenizer_load.c %reldir%/tokenizer_pipeline.c \
	%reldir%/lines.c %reldir%/lines.h \
	%reldir%/prep.c %reldir%/prep.h \
	%reldir%/bpe_train.c %reldir%/bpe_train.h \
	%reldir%/rng.c %reldir%/rng.h \
	%reldir%/synth.c %reldir%/synth.h \
	%reldir%/samples.c %reldir%/samples.h \
	%reldir%/loader.c %reldir%/loader.h

check_PROGRAMS += t/data-indexed.t
t_data_indexed_t_SOURCES = t/data-indexed.c
t_data_indexed_t_LDADD = $(TAP_LIBS)
TESTS += t/data-indexed.t

check_PROGRAMS += t/data-lines.t
t_data_lines_t_SOURCES = t/data-lines.c
t_data_lines_t_LDADD = $(TAP_LIBS)
TESTS += t/data-lines.t

check_PROGRAMS += t/tok-load.t
t_tok_load_t_SOURCES = t/tok-load.c t/child.c t/child.h
t_tok_load_t_LDADD = $(TAP_LIBS)
TESTS += t/tok-load.t

check_PROGRAMS += t/data-sigbus.t
t_data_sigbus_t_SOURCES = t/data-sigbus.c t/child.c t/child.h
t_data_sigbus_t_LDADD = $(TAP_LIBS)
TESTS += t/data-sigbus.t

check_PROGRAMS += t/data-fuzz.t
t_data_fuzz_t_SOURCES = t/data-fuzz.c
t_data_fuzz_t_LDADD = $(TAP_LIBS)
TESTS += t/data-fuzz.t

# helper of t/tok-hf.t: encodes records with a tokenizer.json
check_PROGRAMS += t/tok-encode
t_tok_encode_SOURCES = t/tok-encode.c
t_tok_encode_LDADD = $(GRIDLM_LIBS)

dist_check_SCRIPTS += t/tok-hf.t t/tok-ids.t t/prep-basic.t t/prep-numpy.t t/prep-input.t
TESTS += t/tok-hf.t t/tok-ids.t t/prep-basic.t t/prep-numpy.t t/prep-input.t
EXTRA_DIST += t/tok-hf.py t/tok-ids.py t/prep-numpy.py
# what gridlm-prep reads and writes: links, leftovers, FIFOs
dist_check_SCRIPTS += t/prep-files.t
TESTS += t/prep-files.t

check_PROGRAMS += t/data-samples.t
t_data_samples_t_SOURCES = t/data-samples.c
t_data_samples_t_LDADD = $(TAP_LIBS)
TESTS += t/data-samples.t

# helper of t/data-megatron.t
check_PROGRAMS += t/data-index-build
t_data_index_build_SOURCES = t/data-index-build.c
t_data_index_build_LDADD = $(GRIDLM_LIBS)
dist_check_SCRIPTS += t/data-megatron.t
TESTS += t/data-megatron.t
EXTRA_DIST += t/data-megatron.py

check_PROGRAMS += t/data-loader-mpi
t_data_loader_mpi_SOURCES = t/data-loader-mpi.c
t_data_loader_mpi_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/data-loader.t
TESTS += t/data-loader.t
