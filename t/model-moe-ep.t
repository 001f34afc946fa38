#!/bin/sh
# model-moe-ep: the MoE buffers of expert parallelism, through
# t/model-moe.t --ep on two ranks (EP 2): what the first forward and
# backward allocate is gl_model_moe_bytes's figure.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/mpi-fold.sh"
# shellcheck disable=SC2086
mpi_fold "EP 2" $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/model-moe.t --ep
done_testing
