#!/bin/sh
# fault-watchdog.t: the hang watchdog.  Rank 1 stalls (sleeps 100 s)
# before an MPI_Barrier on a group named "dp" that the other ranks wait
# in, bracketed by gl_watch_begin/end.  With a 2-second watchdog
# (GRIDLM_WATCHDOG_SECONDS=2, then --distributed-timeout-minutes 0.04 =
# 2.4 s) the job must stop within seconds -- exit status non-zero, never
# the 60 s bound of timeout(1) -- with a line naming the operation and the
# group, from a rank that waited, and no rank may pass the barrier.
# Before the stall, a compute phase longer than the timeout outside any
# bracket and bracketed collectives for as long must not fire it.
test -n "$MPIEXEC" || { echo "1..0 # SKIP no MPI launcher (MPIEXEC)"; exit 0; }
. "$top_srcdir/t/fault-lib.sh"
n=$fault_n
test $n -gt 3 && n=3

# check_stop LABEL TIMEOUT-TEXT: the results for the run just made
check_stop() {
    fault_show
    fault_ok "$1: the job stopped (exit status $fault_rc, not 0, not timeout's 124)" \
        test "$fault_rc" -ne 0 -a "$fault_rc" -ne 124
    # quiet phases take 2 x 1.3 T, startup a few s: 30 s is far from 100
    fault_ok "$1: ... within $fault_secs s of starting (bound: 30 s; the stall is 100 s)" \
        awk -v s="$fault_secs" 'BEGIN { exit !(s < 30) }'
    fault_ok "$1: the watchdog stayed quiet while nothing hung" \
        grep -q '^# quiet phase done' "$fault_out"
    fault_ok "$1: a waiting rank names the operation, the group and the limit" \
        grep -q "rank [02] on [^:]*: collective MPI_Barrier on group dp did not finish within $2 s (open [0-9.]* s); the peer ranks may have died or stalled" "$fault_err"
    fault_ok "$1: no rank passed the stalled barrier" \
        sh -c "! grep -q 'passed the stalled barrier' '$fault_out'"
}

fault_exec env GRIDLM_WATCHDOG_SECONDS=2 timeout 60 \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test watchdog --stall 1:100
check_stop "$n ranks, GRIDLM_WATCHDOG_SECONDS=2" 2
fault_ok "... and the line names GRIDLM_WATCHDOG_SECONDS" \
    grep -q '(GRIDLM_WATCHDOG_SECONDS=2)' "$fault_err"

fault_exec timeout 60 \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/fault-test watchdog --stall 1:100 --timeout-min 0.04
check_stop "2 ranks, --distributed-timeout-minutes 0.04" 2.4
fault_ok "... and the line names --distributed-timeout-minutes" \
    grep -q '(--distributed-timeout-minutes 0.04)' "$fault_err"
mpi_fold_done
