# benchmarks/bench.mk: the sweep harness (see Makefile.am; gridlm-bench's
# microbenchmarks are src/bench's).

# The sweep harness: run gridlm-train over a sweep file, then summarise
# its --log-json records into CSV, a markdown table and plots.  Installed
# under $(pkgdatadir)/benchmarks with the example sweeps.
benchdir = $(pkgdatadir)/benchmarks
dist_bench_SCRIPTS = %reldir%/sweep.sh
dist_bench_DATA = %reldir%/find-train.sh %reldir%/summarize.awk %reldir%/table.awk %reldir%/plotdata.awk \
	%reldir%/plot.gp %reldir%/README.md \
	%reldir%/cpu-tiny.sweep %reldir%/llama3-8b-h100.sweep

# Tests: the summary stage on a synthetic log with known answers, the run
# stage with a stand-in trainer, and the harness end to end over
# gridlm-train on the CPU.
dist_check_SCRIPTS += t/bench-harness.t t/bench-sweep-cpu.t
EXTRA_DIST += t/bench-fixture.sweep t/bench-fixture-a1.jsonl t/bench-fixture-a2.jsonl \
	t/bench-fixture-a4.jsonl t/bench-fixture-b2.jsonl t/bench-fake-train.sh
TESTS += t/bench-harness.t t/bench-sweep-cpu.t
