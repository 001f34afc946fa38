#!/bin/sh
# fault-lost.t: a rank that dies while the others wait in a barrier (the
# watchdog is 2 minutes away, timeout(1) 60 s: only the side channel or
# the launcher can end the job in time).
#   1. rank 1 shuts its side-channel links as the kernel does for a
#      process that dies, and never reaches the barrier: its ring
#      neighbour stops the job with "rank 1 on HOST (pid P) died: its
#      side-channel connection to this rank ended (closed) without a
#      goodbye";
#      no rank passes the barrier.  This does not depend on the launcher.
#   2. rank 1 sends itself SIGKILL.  The job must stop (not hang), and
#      rank 1 must be named: by a surviving rank's line as above, or by
#      the launcher's own message, for Open MPI's mpirun and MPICH's
#      hydra kill the survivors within milliseconds of a death, often
#      before they can speak (gridlm-train(1), FAULTS).  No line may call
#      another rank dead.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
n=$fault_n
test $n -gt 3 && n=3
host=$(uname -n)
pid_of() { sed -n "s/^# pid of rank $1: //p" "$fault_out" | head -n 1; }
died_line="error: rank [0-9]* on [^:]*: rank 1 on $host (pid PID) died: its side-channel connection to this rank ended ([^)]*) without a goodbye"

fault_exec timeout 60 $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test lost --victim 1 --how drop
fault_show
p1=$(pid_of 1)
fault_ok "$n ranks, rank 1 drops its links: the job stopped (exit status $fault_rc, not 0, not 124)" \
    test "$fault_rc" -ne 0 -a "$fault_rc" -ne 124
fault_ok "... a neighbour named rank 1, its host and pid ($p1)" \
    grep -q "$(echo "$died_line" | sed "s/PID/${p1:-none}/")" "$fault_err"
fault_ok "... no rank passed the barrier" \
    sh -c "! grep -q 'passed the barrier' '$fault_out'"

fault_exec timeout 60 $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test lost --victim 1 --how kill
fault_show
p1=$(pid_of 1)
fault_ok "$n ranks, rank 1 killed (SIGKILL): the job stopped (exit status $fault_rc, not 0, not 124)" \
    test "$fault_rc" -ne 0 -a "$fault_rc" -ne 124
ours=no launcher=no
grep -q "$(echo "$died_line" | sed "s/PID/${p1:-none}/")" "$fault_err" && ours=yes
case $GL_MPI_FLAVOR in
openmpi) grep -q "process rank 1 with PID .* exited on signal 9" "$fault_out" "$fault_err" &&
             launcher=yes ;;
mpich)   grep -q "PID ${p1:-none} RUNNING AT" "$fault_out" "$fault_err" && launcher=yes ;;
esac
echo "# named by a surviving rank: $ours; by the launcher ($GL_MPI_FLAVOR): $launcher"
fault_ok "... rank 1 is named (by a survivor: $ours; by the launcher: $launcher)" \
    test $ours = yes -o $launcher = yes
fault_ok "... no line calls another rank dead" \
    sh -c "! grep 'died: its side-channel' '$fault_err' | grep -v ': rank 1 on ' | grep -q ."
done_testing
