# src/bench: gridlm-bench's microbenchmarks of gemm, FP8 products,
# collectives and attention through the same ops.h and comm.h the model uses (bench.h;
# the program's main() is listed by src/tools/local.mk).
libgridlm_a_SOURCES += %reldir%/bench.h %reldir%/bench_util.c \
	%reldir%/bench_gemm.c %reldir%/bench_comm.c %reldir%/bench_attn.c \
	%reldir%/bench_fp8.c

# gridlm-bench on the CPU back end: what it prints and the checks it makes.
dist_check_SCRIPTS += t/bench-cpu.t
TESTS += t/bench-cpu.t
