# src/base: errors, logging, timers, options, counter-based RNG.
libgridlm_a_SOURCES += \
	%reldir%/log.c %reldir%/log.h
