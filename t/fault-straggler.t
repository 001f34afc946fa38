#!/bin/sh
# fault-straggler.t: the straggler report (--straggler-threshold).  Every
# check goes by the step times the ranks measured themselves (fault-test
# gathers them), so a loaded machine cannot make it fail:
#   - the last rank steps 10 + 190 ms, the others 10 ms, threshold 1.5:
#     at every log interval the extremes are the ranks with the longest
#     and shortest measured times, the verdict is "ratio > threshold" on
#     every rank, and the slow rank is reported; rank 0 prints
#     "stragglers: slowest rank R (HOST) ... fastest rank Q (HOST) ...
#     (ratio Z)" once per interval it reported, naming the slow rank and
#     its host;
#   - every rank steps 30 ms, threshold 2: the verdict again follows the
#     measured ratio (nothing is reported unless the measured times
#     really differ that much), and rank 0 prints a line exactly for the
#     intervals it reported.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
n=$fault_n
last=$((n - 1))

fault_run "$n ranks, rank $last slower by 190 ms" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test straggler --base-ms 10 --slow $last:190 --threshold 1.5
host=$(sed -n 's/^# host of rank 0: //p' "$fault_out")
fault_ok "rank 0 printed 3 straggler lines naming rank $last and its host ($host)" \
    test "$(grep -c "^stragglers: slowest rank $last ($host) [0-9.]* ms, fastest rank [0-9]* ($host) [0-9.]* ms (ratio [0-9.]*) at iteration [0-9]*\$" "$fault_out")" -eq 3
fault_ok "... and only rank 0 printed them" \
    test "$(grep -c '^stragglers:' "$fault_out")" -eq 3

fault_run "$n ranks, all alike" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test straggler --base-ms 30 --threshold 2
reported=$(grep -c '^# iteration [0-9]*: verdict 1$' "$fault_out")
fault_ok "a straggler line for each interval reported ($reported of 3, by the measured times)" \
    test "$(grep -c '^stragglers:' "$fault_out")" -eq "$reported"
done_testing
