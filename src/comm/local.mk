# src/comm: collectives and point-to-point on a group (comm.h); the MPI
# back end always, the NCCL back end with CUDA.
libgridlm_a_SOURCES += %reldir%/comm.c %reldir%/comm.h %reldir%/comm_impl.h \
	%reldir%/comm_mpi.c %reldir%/peers.c %reldir%/peers.h
if HAVE_CUDA
libgridlm_a_SOURCES += %reldir%/comm_nccl.c %reldir%/nccl_inc.h
endif

# t/comm.t runs t/comm-test on 1, 2, 4 and 8 ranks.
check_PROGRAMS += t/comm-test
t_comm_test_SOURCES = t/comm-test.c
t_comm_test_LDADD = $(TAP_LIBS)
dist_check_SCRIPTS += t/comm.t
TESTS += t/comm.t
EXTRA_DIST += t/mpi-fold.sh
