#!/bin/sh
# fault-straggler.t: the straggler report (--straggler-threshold).
#   - the last rank steps 20 + 60 ms, the others 20 ms, threshold 1.5:
#     every log interval rank 0 prints "stragglers: slowest rank R (HOST)
#     ... fastest rank Q (HOST) ... (ratio Z)" naming the slow rank and its
#     host, and every rank gets the same verdict;
#   - every rank steps 30 ms, threshold 2: nothing is printed.
test -n "$MPIEXEC" || { echo "1..0 # SKIP no MPI launcher (MPIEXEC)"; exit 0; }
. "$top_srcdir/t/fault-lib.sh"
n=$fault_n
last=$((n - 1))

fault_run "$n ranks, rank $last slower by 60 ms" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test straggler --base-ms 20 --slow $last:60 --threshold 1.5
host=$(sed -n 's/^# host of rank 0: //p' "$fault_out")
fault_ok "rank 0 printed 3 straggler lines naming rank $last and its host ($host)" \
    test "$(grep -c "^stragglers: slowest rank $last ($host) [0-9.]* ms, fastest rank [0-9]* ($host) [0-9.]* ms (ratio [0-9.]*) at iteration [0-9]*\$" "$fault_out")" -eq 3
fault_ok "... and only rank 0 printed them" \
    test "$(grep -c '^stragglers:' "$fault_out")" -eq 3

fault_run "$n ranks, all alike" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test straggler --base-ms 30 --threshold 2
fault_ok "no straggler line" \
    sh -c "! grep -q '^stragglers:' '$fault_out'"
mpi_fold_done
