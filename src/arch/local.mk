# src/arch: what the model is -- its description, presets, counts, the
# parameter table and the configs (a checkpoint's and Hugging Face's).
libgridlm_a_SOURCES += \
	%reldir%/arch.c %reldir%/arch.h \
	%reldir%/tensors.c %reldir%/tensors.h \
	%reldir%/hf_config.c %reldir%/hf_config.h
