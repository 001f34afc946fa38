#!/bin/sh
# fault-signal.t: --exit-signal-handler.  A SIGUSR1 or SIGTERM that
# reaches ONE rank makes every rank stop after the same iteration, with
# exit status 0, while real all-reduces run (their sums are checked, so a
# signal landing inside MPI must not break them):
#   - raised by a rank itself at a known iteration (1, 2 and 4 ranks);
#   - sent from outside (kill) to one rank's pid, as Slurm's --signal does;
#   - sent to the launcher, which forwards it to every rank.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
n=$fault_n
last=$((n - 1))

fault_run "1 rank, SIGUSR1 raised at iteration 3" \
    $MPIEXEC $MPIEXEC_FLAGS -n 1 ./t/fault-test signal --raise 0:3
fault_run "$n ranks, rank $last raises SIGUSR1 at iteration 7" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test signal --raise $last:7
fault_run "2 ranks, rank 0 raises SIGTERM at iteration 5" \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/fault-test signal --raise 0:5:TERM

# kill_rank WHO: start the job in the background, wait until every rank
# wrote its pid (it does so after its first iteration, when its handler is
# in place), then send SIGUSR1 to rank WHO's pid ("launcher": to the
# launcher's), and wait for the job.  No process is looked up by name
# (no ps or pgrep): the ranks write their pids, and the launcher's is the
# pid of the shell that execs it, written before the exec.  The ranks
# train until the signal comes (bounded by timeout 120), so the test does
# not depend on how soon the signal arrives.
kill_rank() {
    who=$1
    rm -f "$fault_dir"/pid.* "$fault_dir"/launcher.pid
    timeout 120 sh -c 'echo $$ >"$0"; exec "$@"' "$fault_dir/launcher.pid" \
        $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test signal --pid-dir "$fault_dir" &
    job=$!
    tries=0
    while test "$(ls "$fault_dir" | grep -c '^pid\.[0-9]*$')" -lt $n && test $tries -lt 1200; do
        kill -0 $job 2>/dev/null || break        # the job ended early
        sleep 0.1
        tries=$((tries + 1))
    done
    if test "$who" = launcher; then
        pid=$(cat "$fault_dir/launcher.pid" 2>/dev/null)
    else
        pid=$(cat "$fault_dir/pid.$who" 2>/dev/null)
    fi
    if test -n "$pid" && test "$(ls "$fault_dir" | grep -c '^pid\.[0-9]*$')" -eq $n; then
        kill -USR1 "$pid"
    else
        echo "# not every rank wrote its pid: nothing was signalled" >&2
        kill $job 2>/dev/null
    fi
    wait $job
}
fault_run "$n ranks, SIGUSR1 sent to rank 1's pid from outside" kill_rank 1
fault_run "$n ranks, SIGUSR1 sent to the launcher ($GL_MPI_FLAVOR forwards it)" kill_rank launcher
done_testing
