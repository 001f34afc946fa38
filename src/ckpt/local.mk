# src/ckpt: HDF5 checkpoints of full logical tensors (resharding on load),
# safetensors files, and what the gridlm-ckpt tool does (info, import-hf,
# export-hf; its main() is listed by src/tools/local.mk).
libgridlm_a_SOURCES += \
	%reldir%/ckpt.h %reldir%/ckpt_h5.h %reldir%/ckpt_h5.c %reldir%/ckpt_slab.c \
	%reldir%/ckpt_write.c %reldir%/ckpt_read.c \
	%reldir%/ckpt_sum.c %reldir%/ckpt_dir.c \
	%reldir%/ckpt_async.c \
	%reldir%/half.h %reldir%/half.c \
	%reldir%/safetensors.h %reldir%/safetensors.c \
	%reldir%/hf.h %reldir%/hf.c

# t/ckpt-h5.t runs t/ckpt-h5 on 1, 2 and 4 ranks; t/ckpt-kill.t kills a
# save halfway.
check_PROGRAMS += t/ckpt-h5
t_ckpt_h5_SOURCES = t/ckpt-h5.c
t_ckpt_h5_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/ckpt-h5.t t/ckpt-kill.t
TESTS += t/ckpt-h5.t t/ckpt-kill.t

# t/ckpt-hf.t: import-hf and export-hf against the safetensors library.
check_PROGRAMS += t/ckpt-hf-check
t_ckpt_hf_check_SOURCES = t/ckpt-hf-check.c
t_ckpt_hf_check_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/ckpt-hf.t
EXTRA_DIST += t/ckpt-hf.py
TESTS += t/ckpt-hf.t

# t/ckpt-hf-files.t: what export-hf and import-hf leave on disk (stale
# exports, links, existing checkpoints, a tied lm_head); uses t/st-tool.
dist_check_SCRIPTS += t/ckpt-hf-files.t
TESTS += t/ckpt-hf-files.t

# Safetensors: conversions, files, and interchange with the Python library.
check_PROGRAMS += t/st-half.t t/st-file.t t/st-tool
t_st_half_t_SOURCES = t/st-half.c
t_st_half_t_LDADD = $(TAP_LIBS)
t_st_file_t_SOURCES = t/st-file.c
t_st_file_t_LDADD = $(TAP_LIBS)
t_st_tool_SOURCES = t/st-tool.c
t_st_tool_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/st-interop.t
EXTRA_DIST += t/st-interop.py
TESTS += t/st-half.t t/st-file.t t/st-interop.t

# The typed JSON reads of a checkpoint's "config" attribute (src/base/json.h).
check_PROGRAMS += t/ckpt-json.t
t_ckpt_json_t_SOURCES = t/ckpt-json.c
t_ckpt_json_t_LDADD = $(TAP_LIBS)
TESTS += t/ckpt-json.t
