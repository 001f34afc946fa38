# src/boot: MPI start, PMIx locality, GPU choice, communicators of the grid.
libgridlm_a_SOURCES += %reldir%/boot.c %reldir%/boot.h \
	%reldir%/groups.c %reldir%/groups.h

# t/boot.t runs t/boot-test under mpiexec -n 2 and -n 4.
check_PROGRAMS += t/boot-test
t_boot_test_SOURCES = t/boot-test.c
t_boot_test_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/boot.t
TESTS += t/boot.t
