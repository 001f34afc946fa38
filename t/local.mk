# t/: TAP tests.  A C test is t/NAME.t built from t/NAME.c with the TAP
# helper (t/tap.h); a shell test is a script t/NAME.t, often running a C
# program under $(MPIEXEC), that prints its TAP through t/tap.sh.
check_LIBRARIES = t/libtap.a
t_libtap_a_SOURCES = %reldir%/tap.c %reldir%/tap.h
TAP_LIBS = t/libtap.a $(GRIDLM_LIBS)
EXTRA_DIST += %reldir%/env.sh.in %reldir%/tap.sh %reldir%/model-flags.sh
