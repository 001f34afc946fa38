# benchmarks/bench.mk: gridlm-bench and the sweep harness (see Makefile.am).
