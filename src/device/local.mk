# src/device: the compute interface (ops.h) and its CPU reference back end.
libgridlm_a_SOURCES += \
	%reldir%/ops.h \
	%reldir%/dev.c \
	%reldir%/ops_cpu.c %reldir%/ops_cpu.h \
	%reldir%/ops_cpu_kern.c %reldir%/ops_cpu_impl.h %reldir%/ops_cpu_proto.h \
	%reldir%/ops_cpu_moe.c %reldir%/ops_cpu_moe.h \
	%reldir%/ops_cpu_moe_impl.h %reldir%/ops_cpu_moe_proto.h \
	%reldir%/fp8.c %reldir%/fp8.h

# Every operation of the CPU back end against finite differences (in
# double) and direct formulas.
check_PROGRAMS += t/ops-cpu.t
t_ops_cpu_t_SOURCES = t/ops-cpu.c t/ops-test.h
t_ops_cpu_t_LDADD = $(TAP_LIBS)
TESTS += t/ops-cpu.t

# The mixture-of-experts ops: routing by hand, every backward against
# finite differences (in double), the float device against the double
# kernels.
check_PROGRAMS += t/ops-moe.t
t_ops_moe_t_SOURCES = t/ops-moe.c t/ops-test.h
t_ops_moe_t_LDADD = $(TAP_LIBS)
TESTS += t/ops-moe.t

# E4M3 and E5M2 against their definition and a brute-force nearest value.
check_PROGRAMS += t/fp8.t
t_fp8_t_SOURCES = t/fp8.c
t_fp8_t_LDADD = $(TAP_LIBS)
TESTS += t/fp8.t

# Context parallelism's block attention: blocks merged in ring order
# against attn_fwd / attn_bwd, the block backward against finite
# differences, causal, full and empty blocks.
check_PROGRAMS += t/ops-blockattn.t
t_ops_blockattn_t_SOURCES = t/ops-blockattn.c t/ops-test.h
t_ops_blockattn_t_LDADD = $(TAP_LIBS)
TESTS += t/ops-blockattn.t
