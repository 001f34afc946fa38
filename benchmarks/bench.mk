# benchmarks/bench.mk: gridlm-bench and the sweep harness (see Makefile.am).

# gridlm-bench: microbenchmarks of gemm, collectives and attention through
# the same ops.h and comm.h the model uses (src/bench/bench.h).
bin_PROGRAMS += src/tools/gridlm-bench
src_tools_gridlm_bench_SOURCES = src/tools/gridlm-bench.c \
	src/bench/bench.h src/bench/bench_util.c src/bench/bench_gemm.c \
	src/bench/bench_comm.c src/bench/bench_attn.c src/bench/bench_fp8.c
src_tools_gridlm_bench_LDADD = $(GRIDLM_LIBS)
dist_man_MANS += doc/gridlm-bench.1

# The sweep harness: run gridlm-train over a sweep file, then summarise
# its --log-json records into CSV, a markdown table and plots.  Installed
# under $(pkgdatadir)/benchmarks with the example sweeps.
benchdir = $(pkgdatadir)/benchmarks
dist_bench_SCRIPTS = %reldir%/sweep.sh
dist_bench_DATA = %reldir%/summarize.awk %reldir%/table.awk %reldir%/plotdata.awk \
	%reldir%/plot.gp %reldir%/README.md \
	%reldir%/cpu-tiny.sweep %reldir%/llama3-8b-h100.sweep

# Tests: the summary stage on a synthetic log with known answers, the run
# stage with a stand-in trainer, and gridlm-bench's output on the CPU.
dist_check_SCRIPTS += t/bench-harness.t t/bench-cpu.t t/bench-sweep-cpu.t
EXTRA_DIST += t/bench-fixture.sweep t/bench-fixture-a1.jsonl t/bench-fixture-a2.jsonl \
	t/bench-fixture-a4.jsonl t/bench-fixture-b2.jsonl t/bench-fake-train.sh
TESTS += t/bench-harness.t t/bench-cpu.t t/bench-sweep-cpu.t
