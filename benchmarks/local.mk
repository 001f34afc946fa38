# benchmarks: sources, programs and tests of this room (see Makefile.am).

# gridlm-prep's tokenizing throughput and its scaling with --workers
# (benchmarks/RESULTS.md).
EXTRA_DIST += %reldir%/prep-throughput.sh
EXTRA_DIST += %reldir%/gpu-lib.sh
EXTRA_DIST += %reldir%/gpu-trace.c
