#!/bin/sh
# fault-watchdog.t: the hang watchdog, and whom it blames.  Every run
# starts with a quiet phase (a compute phase longer than the timeout
# outside any bracket, then bracketed collectives for as long) in which
# the watchdog must stay silent.  Then rank 1 stalls before a collective
# the other ranks wait in, and the job must stop -- exit status non-zero,
# never timeout(1)'s 124 -- with one line from a waiting rank that names
# the wait and, asked through the side channel, rank 1 with its host and
# pid (which every rank prints first) and what it does:
#   1. rank 1 computes (sleeps 100 s) before an all-reduce on the gl_comm
#      group "dp" (GRIDLM_WATCHDOG_SECONDS=2): "collective MPI_Allreduce
#      #K on group dp (N ranks) ... not arrived: rank 1 on HOST (pid P)
#      has made K-1 of the group's collectives and computes: ..."; no rank
#      gets past the all-reduce;
#   2. rank 1 stops itself (SIGSTOP) there: "... is stopped (process
#      state T: SIGSTOP, or a debugger) and does not answer" (or, without
#      a readable /proc, "did not answer within 3 s");
#   3. rank 1 computes before an MPI_Barrier bracketed by name only
#      (--distributed-timeout-minutes 0.04 = 2.4 s, 2 ranks):
#      "collective MPI_Barrier on group dp ... not arrived: rank 1 ...
#      computes"; the line names --distributed-timeout-minutes;
#   4. one rank stops itself (SIGSTOP) inside an open bracket (timeout
#      4 s), and the script sends SIGCONT once it has been stopped for
#      more than the timeout: the watchdog must stay quiet -- that time was the rank's
#      own stop, nobody's wait -- and the run ends with exit status 0.  The
#      program measures the stop itself and the test requires it to exceed
#      the timeout.
# The timing is the program's own: the lines report how long the wait was
# open (never less than the timeout), the stalls last 100 s or forever,
# and timeout(1) (60 s) only catches a hang.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
n=$fault_n
test $n -gt 3 && n=3
host=$(uname -n)

pid_of() { sed -n "s/^# pid of rank $1: //p" "$fault_out" | head -n 1; }

# check_stop LABEL LIMIT WHAT DOING: the results for the run just made;
# WHAT and DOING are regular expressions for the wait and rank 1's state
check_stop() {
    fault_show
    p1=$(pid_of 1)
    fault_ok "$1: the job stopped (exit status $fault_rc, not 0, not timeout's 124)" \
        test "$fault_rc" -ne 0 -a "$fault_rc" -ne 124
    fault_ok "$1: the watchdog stayed quiet while nothing hung" \
        grep -q '^# quiet phase done' "$fault_out"
    line=$(grep "error: rank [0-9]* on [^:]*: $3 did not finish within $2 s (open [0-9.]* s): not arrived: rank 1 on $host (pid ${p1:-none}) $4" "$fault_err" | head -n 1)
    fault_ok "$1: a waiting rank names the wait, the limit and rank 1 with its host and pid ($p1) and what it does" \
        test -n "$line"
    open=$(echo "$line" | sed -n 's/.*(open \([0-9.]*\) s).*/\1/p')
    fault_ok "$1: ... after the wait was open at least the limit ($open s >= $2 s)" \
        awk -v o="${open:-0}" -v l="$2" 'BEGIN { exit !(o >= l) }'
}

# 1. compute stall before a counted collective
fault_exec env GRIDLM_WATCHDOG_SECONDS=2 timeout 60 \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test watchdog --stall 1:100
check_stop "$n ranks, compute stall, GRIDLM_WATCHDOG_SECONDS=2" 2 \
    "collective MPI_Allreduce #[0-9]* on group dp ($n ranks)" \
    "has made [0-9]* of the group's collectives and computes: [0-9.]* s since its last wait"
k=$(echo "$line" | sed -n 's/.*MPI_Allreduce #\([0-9]*\) on group dp.*/\1/p')
j=$(echo "$line" | sed -n "s/.*has made \([0-9]*\) of the group's collectives.*/\1/p")
fault_ok "... rank 1 has made one collective fewer than the one waited for ($j, #$k)" \
    test -n "$k" -a -n "$j" -a "$((${j:-0} + 1))" = "${k:-x}"
fault_ok "... no rank passed the stalled all-reduce" \
    sh -c "! grep -q 'passed the stalled collective' '$fault_out'"
fault_ok "... and the line names GRIDLM_WATCHDOG_SECONDS" \
    grep -q '(GRIDLM_WATCHDOG_SECONDS=2)' "$fault_err"

# 2. SIGSTOP before the collective (the launcher resumes and kills it
# when the job is stopped; it may then pass the all-reduce first)
fault_exec env GRIDLM_WATCHDOG_SECONDS=2 timeout 60 \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test watchdog --stop 1
check_stop "$n ranks, rank 1 stopped by SIGSTOP" 2 \
    "collective MPI_Allreduce #[0-9]* on group dp ($n ranks)" \
    "\(is stopped (process state T: SIGSTOP, or a debugger)\|did not answer within\)"

# 3. a bracket named only, and --distributed-timeout-minutes
fault_exec timeout 60 \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/fault-test watchdog --stall 1:100 --named --timeout-min 0.04
check_stop "2 ranks, named bracket, --distributed-timeout-minutes 0.04" 2.4 \
    "collective MPI_Barrier on group dp" "computes: "
fault_ok "... and the line names --distributed-timeout-minutes" \
    grep -q '(--distributed-timeout-minutes 0.04)' "$fault_err"

# 4. a rank's own stop is nobody's wait (GRIDLM_WATCHDOG_SECONDS=4).  The
# script sends SIGCONT every half second once the rank said it stops
# itself and 1.5 timeouts have passed, until the run ends (a SIGCONT that
# came before the stop would be lost; the next one is not).
selfstop() {
    GRIDLM_WATCHDOG_SECONDS=4 timeout 60 $MPIEXEC $MPIEXEC_FLAGS -n 1 \
        ./t/fault-test selfstop &
    job=$!
    i=0
    while ! grep -q 'stopping itself' "$fault_out" 2>/dev/null && test $i -lt 600; do
        kill -0 $job 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    pid=$(sed -n 's/^# rank 0 pid \([0-9]*\): stopping itself.*/\1/p' "$fault_out")
    if test -n "$pid"; then
        sleep 6
        while kill -0 $job 2>/dev/null; do
            kill -CONT "$pid" 2>/dev/null
            sleep 0.5
        done
    fi
    wait $job
}
fault_run "1 rank stopped by SIGSTOP inside a bracket, then continued" selfstop
fault_ok "... no watchdog line" sh -c "! grep -q 'did not finish' '$fault_err'"
done_testing
