# src/base: errors, logging, timers, options, counter-based RNG, files.
libgridlm_a_SOURCES += \
	%reldir%/log.c %reldir%/log.h \
	%reldir%/error.c %reldir%/error.h %reldir%/hash.h \
	%reldir%/file.c %reldir%/file.h
libgridlm_a_SOURCES += %reldir%/rng.c %reldir%/rng.h
libgridlm_a_SOURCES += %reldir%/mapped.c %reldir%/mapped.h
libgridlm_a_SOURCES += \
	%reldir%/options.c %reldir%/options.h
libgridlm_a_SOURCES += \
	%reldir%/json.c %reldir%/json.h
libgridlm_a_SOURCES += \
	%reldir%/tfevents.c %reldir%/tfevents.h

# Regular files for reading, temporaries for writing, their cleanup.
check_PROGRAMS += t/base-file.t
t_base_file_t_SOURCES = t/base-file.c t/child.c t/child.h
t_base_file_t_LDADD = $(TAP_LIBS)
TESTS += t/base-file.t

# TensorBoard event files: CRC-32C, TFRecord frames, Event bytes, the writer.
check_PROGRAMS += t/base-tfevents.t
t_base_tfevents_t_SOURCES = t/base-tfevents.c
t_base_tfevents_t_LDADD = $(TAP_LIBS)
TESTS += t/base-tfevents.t

# Philox-4x32-10 against its known answers; dropout masks' statistics.
libgridlm_a_SOURCES += %reldir%/philox.h
check_PROGRAMS += t/philox.t
t_philox_t_SOURCES = t/philox.c
t_philox_t_LDADD = $(TAP_LIBS)
TESTS += t/philox.t
