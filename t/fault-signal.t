#!/bin/sh
# fault-signal.t: --exit-signal-handler.  A SIGUSR1 or SIGTERM that
# reaches ONE rank makes every rank stop after the same iteration, with
# exit status 0, while real all-reduces run (their sums are checked, so a
# signal landing inside MPI must not break them):
#   - raised by a rank itself at a known iteration (1, 2 and 4 ranks);
#   - sent from outside (kill) to one rank's pid, as Slurm's --signal does;
#   - sent to the launcher, which forwards it to every rank.
test -n "$MPIEXEC" || { echo "1..0 # SKIP no MPI launcher (MPIEXEC)"; exit 0; }
. "$top_srcdir/t/fault-lib.sh"
n=$fault_n
last=$((n - 1))

fault_run "1 rank, SIGUSR1 raised at iteration 3" \
    $MPIEXEC $MPIEXEC_FLAGS -n 1 ./t/fault-test signal --raise 0:3
fault_run "$n ranks, rank $last raises SIGUSR1 at iteration 7" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test signal --raise $last:7
fault_run "2 ranks, rank 0 raises SIGTERM at iteration 5" \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/fault-test signal --raise 0:5:TERM

# kill_rank WHO CMD...: start CMD in the background, wait until every rank
# wrote its pid (the loop is running), then send SIGUSR1 to rank WHO's pid
# ("launcher": to the launcher's), and wait for CMD.
kill_rank() {
    who=$1; shift
    rm -f "$fault_dir"/pid.*
    "$@" &
    job=$!
    tries=0
    while test "$(ls "$fault_dir" | grep -c '^pid\.[0-9]*$')" -lt $n && test $tries -lt 600; do
        sleep 0.1
        tries=$((tries + 1))
    done
    sleep 0.3
    if test "$who" = launcher; then
        # $job is timeout(1); the launcher is its child
        kill -USR1 $(pgrep -P $job)
    else
        kill -USR1 "$(cat "$fault_dir/pid.$who")"
    fi
    wait $job
}
fault_run "$n ranks, SIGUSR1 sent to rank 1's pid from outside" \
    kill_rank 1 timeout 120 $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test signal --pid-dir "$fault_dir"
fault_run "$n ranks, SIGUSR1 sent to the launcher ($GL_MPI_FLAVOR forwards it)" \
    kill_rank launcher timeout 120 $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test signal --pid-dir "$fault_dir"
mpi_fold_done
