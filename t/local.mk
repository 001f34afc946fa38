# t/: TAP tests.  A C test is t/NAME.t built from t/NAME.c with the TAP
# helper; a multi-rank test is a shell script t/NAME.t that runs a C
# program under $(MPIEXEC).
check_LIBRARIES = t/libtap.a
t_libtap_a_SOURCES = %reldir%/tap.c %reldir%/tap.h
TAP_LIBS = t/libtap.a $(GRIDLM_LIBS)
EXTRA_DIST += %reldir%/env.sh.in
