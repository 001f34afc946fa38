# src/base: errors, logging, timers, options, counter-based RNG.
libgridlm_a_SOURCES += \
	%reldir%/log.c %reldir%/log.h \
	%reldir%/error.c %reldir%/error.h %reldir%/hash.h
libgridlm_a_SOURCES += %reldir%/rng.c %reldir%/rng.h
libgridlm_a_SOURCES += %reldir%/mapped.c %reldir%/mapped.h
libgridlm_a_SOURCES += \
	%reldir%/options.c %reldir%/options.h
libgridlm_a_SOURCES += \
	%reldir%/json.c %reldir%/json.h
