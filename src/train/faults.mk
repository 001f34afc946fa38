# src/train/faults.mk: surviving faults (faults.h): clean stops on a
# signal, a time limit or an iteration; NaN/Inf steps; the hang watchdog;
# the straggler report.  Included by Makefile.am.
libgridlm_a_SOURCES += %reldir%/faults.h %reldir%/faults.c

# t/fault-*.t run t/fault-test under $(MPIEXEC), one scenario each.
check_PROGRAMS += t/fault-test
t_fault_test_SOURCES = t/fault-test.c
t_fault_test_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/fault-signal.t t/fault-exit.t t/fault-nonfinite.t \
	t/fault-watchdog.t t/fault-straggler.t t/fault-record.t t/fault-lost.t
TESTS += t/fault-signal.t t/fault-exit.t t/fault-nonfinite.t \
	t/fault-watchdog.t t/fault-straggler.t t/fault-record.t t/fault-lost.t
EXTRA_DIST += t/fault-lib.sh
