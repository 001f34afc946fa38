# benchmarks/project.mk: the iteration model and its projections
# (benchmarks/projection.md), installed beside the sweep harness.  Needs
# bench.mk first (benchdir, dist_bench_SCRIPTS).
dist_bench_SCRIPTS += %reldir%/project.sh
dist_bench_DATA += %reldir%/project.awk %reldir%/projection.md \
	%reldir%/project.sweep %reldir%/project-1-2-4.sweep

# The model on cases computed by hand, and its check mode on a synthetic
# results.csv.
dist_check_SCRIPTS += t/bench-project.t
EXTRA_DIST += t/bench-project-fixture.csv
TESTS += t/bench-project.t
