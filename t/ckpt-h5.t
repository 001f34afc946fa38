#!/bin/sh
# ckpt-h5.t: checkpoints saved under one sharding and read under another,
# exactly, and bad checkpoints refused (t/ckpt-h5.c), on 1, 2 and 4 ranks
# (MPICH: 1 and 2, since it busy-polls).
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
case $GL_MPI_FLAVOR in
openmpi) sizes="1 2 4" ;;
*)       sizes="1 2" ;;
esac
. "$(dirname "$0")/mpi-fold.sh"
for n in $sizes; do
    d=t/ckpt-h5.dir.$n
    rm -rf "$d"
    mpi_fold "$n ranks" $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/ckpt-h5 "$d"
    rm -rf "$d"
done
done_testing
