#!/bin/sh
# ckpt-kill.t: a save killed with SIGKILL halfway leaves the previous
# checkpoint and the tracker file that names it intact.
#
# Two ranks save iterations 100 and 200; then two ranks start saving 900,
# stalling after the first tensor (t/ckpt-h5 --slow-save); once the
# temporary file exists this script kills both rank processes, by the
# process ids they wrote, with SIGKILL; then iteration 200 must still load
# and verify, and no iter_0000900.h5 may exist.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/mpi-fold.sh"
d=t/ckpt-kill.dir
rm -rf "$d"
mkdir -p "$d/pids"
mpi_fold "setup" $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/ckpt-h5 --setup "$d/ckpt"

$MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/ckpt-h5 --slow-save "$d/ckpt" "$d/pids" >"$d/slow.log" 2>&1 &
launcher=$!
# Wait (up to 60 s) for both ranks' pids and the temporary file.
i=0
while test $i -lt 600; do
    if test -s "$d/pids/pid.0" && test -s "$d/pids/pid.1" &&
       ls "$d/ckpt/" | grep -q '^iter_0000900\.h5\.tmp\.'; then
        break
    fi
    kill -0 $launcher 2>/dev/null || break     # the job died early
    sleep 0.1
    i=$((i + 1))
done
test -s "$d/pids/pid.1" && ls "$d/ckpt/" | grep -q '^iter_0000900\.h5\.tmp\.'
ok $? "the slow save started and created its temporary file"
ls "$d/ckpt" | sed 's/^/# before kill: /'
for r in 0 1; do
    pid=$(cat "$d/pids/pid.$r" 2>/dev/null)
    test -n "$pid" && kill -KILL "$pid" 2>/dev/null
done
wait $launcher
rc=$?
test $rc -ne 0
ok $? "the killed job exited with status $rc"
ls "$d/ckpt" | grep -q '^iter_0000900\.h5\.tmp\.'
ok $? "the killed save left its temporary file, not a checkpoint"
mpi_fold "after kill" $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/ckpt-h5 --after-kill "$d/ckpt"
rm -rf "$d"
done_testing
