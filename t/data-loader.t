#!/bin/sh
# data-loader.t: the training data loader on 4 ranks (2 under MPICH):
# layouts, the index cache built once, blending, resume, read-ahead,
# loss mask, validation split (t/data-loader-mpi.c).
n=4
test "$GL_MPI_FLAVOR" = mpich && n=2
d=t/data-loader.dir
rm -rf "$d"
mkdir -p "$d"
$MPIEXEC $MPIEXEC_FLAGS -n $n ./t/data-loader-mpi "$d"
rc=$?
test $rc -eq 0 && rm -rf "$d"
exit $rc
