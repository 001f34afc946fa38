# src/device: the compute interface (ops.h) and its CPU reference back end.
libgridlm_a_SOURCES += \
	%reldir%/ops.h \
	%reldir%/dev.c \
	%reldir%/ops_cpu.c %reldir%/ops_cpu.h \
	%reldir%/ops_cpu_kern.c %reldir%/ops_cpu_impl.h %reldir%/ops_cpu_proto.h

# Every operation of the CPU back end against finite differences (in
# double) and direct formulas.
check_PROGRAMS += t/ops-cpu.t
t_ops_cpu_t_SOURCES = t/ops-cpu.c
t_ops_cpu_t_LDADD = $(TAP_LIBS)
TESTS += t/ops-cpu.t
