#!/bin/sh
# fault-exit.t: --exit-interval and --exit-duration-in-mins.  Every rank
# stops after the same iteration with exit status 0:
#   - --exit-interval 5 from the start: after iteration 5;
#   - --exit-interval 7 on a run resumed at iteration 10: after 14 (the
#     iteration counts from the start of training, as in Megatron);
#   - --exit-duration-in-mins 0.01 (0.6 s) on rank 0's clock, with steps
#     of 20 ms on even ranks and 40 ms on odd ones: every rank decides on
#     the same reading of that clock, and the stop comes at the first
#     check whose reading is past 0.6 s (the program reports the readings;
#     no clock of the test's own is involved).
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
n=$fault_n

fault_run "$n ranks, --exit-interval 5" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test exit --interval 5 --start 0
fault_run "$n ranks, --exit-interval 7 resumed at 10" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test exit --interval 7 --start 10
fault_run "$n ranks, --exit-duration-in-mins 0.01" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test exit --duration 0.01 --step-ms 20
done_testing
