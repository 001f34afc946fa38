#!/bin/sh
# comm.t: every call of comm.h, on the world and on grid sub-groups, on 1,
# 2, 4 and 8 ranks (MPICH: 1 and 2, since it busy-polls), through
# t/comm-test.  The NCCL half runs where each rank has a GPU and reports
# "# SKIP" elsewhere.
#
# Each run's TAP is folded into this script's stream: lines are renumbered
# and prefixed with the rank count, and a run that dies fails.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
case $GL_MPI_FLAVOR in
openmpi) sizes="1 2 4 8" ;;
*)       sizes="1 2" ;;
esac
. "$(dirname "$0")/mpi-fold.sh"
for n in $sizes; do
    mpi_fold "$n ranks" $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/comm-test
done
done_testing
