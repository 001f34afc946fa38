#!/bin/sh
# t/slurm.t: gridlm under a real Slurm, started here for the test.
#
# Starts a private munged, slurmctld and slurmd on localhost (one node,
# this machine's CPUs: t/slurm-lib.sh), so nothing of a system Slurm is
# used or disturbed and two runs at once do not collide.  Then, for this
# build's MPI (GL_MPI_FLAVOR, from t/env.sh):
#
#   openmpi  srun --mpi=pmix -n 2: two ranks of one job; gridlm-train
#            --dry-run takes the PMIx bootstrap path ("bootstrap: pmix").
#   mpich    srun --mpi=pmi2 -n 2: two ranks of one job; gridlm-train
#            --dry-run takes the MPI fallback path ("bootstrap: mpi").
#            srun --mpi=pmix -n 2 starts two singletons; gridlm-train
#            must stop and say to use srun --mpi=pmi2 (or a PMIx MPI).
#
# Then rank 1 of 3 dies (SIGKILL) while the others wait: srun lets them
# run on, and gridlm's side channel must stop the job, naming rank 1.
#
# t/slurm-preempt.t runs slurm/tiny.sbatch for real (train, checkpoint,
# preempt, requeue, resume).  The daemons (t/slurm-lib.sh) are stopped on
# exit, and any left by an earlier run that was killed are stopped before
# starting.  Skips without root or Slurm.  Set GL_SKIP_SLURM=1 to skip it.

: "${top_builddir:=.}"
: "${top_srcdir:=.}"

. "$top_srcdir/t/slurm-lib.sh"

hello=$top_builddir/t/slurm-hello
train=$top_builddir/src/tools/gridlm-train
[ -x "$hello" ] || skip_all "t/slurm-hello not built"
have_pmix=no
grep -q '^#define GL_HAVE_PMIX 1' "$top_builddir/config.h" 2>/dev/null && have_pmix=yes

slurm_start

# --- run -----------------------------------------------------------------
out=$slurm_dir/out
run() {             # run CMD...: output in $out, status in $rc
    timeout 120 "$@" >"$out" 2>&1
    rc=$?
}
show() { diag <"$out"; }

run srun -n 2 hostname
[ $rc -eq 0 ] && [ "$(wc -l <"$out")" -eq 2 ]
ok $? "srun -n 2 hostname runs two tasks"; [ $rc -eq 0 ] || show

# The tiny model, and a layout that two ranks can hold.
dry="--dry-run --model tiny --device cpu"

case $GL_MPI_FLAVOR in
openmpi)
    run srun --mpi=pmix -n 2 "$hello"
    grep -q '^rank 0 of 2 ' "$out" && grep -q '^rank 1 of 2 ' "$out"
    st=$?; ok $st "Open MPI under srun --mpi=pmix: one job of two ranks"; [ $st -eq 0 ] || show

    if [ -x "$train" ]; then
        want=mpi; [ $have_pmix = yes ] && want=pmix
        run srun --mpi=pmix -n 2 "$train" $dry
        [ $rc -eq 0 ]
        ok $? "srun --mpi=pmix -n 2 gridlm-train $dry exits 0"
        grep -q "bootstrap: $want" "$out"
        ok $? "gridlm-train reports 'bootstrap: $want' (PMIx found: $have_pmix)"
        grep -q "bootstrap: $want" "$out" && [ $rc -eq 0 ] || show
    else
        skip "gridlm-train under srun --mpi=pmix" "src/tools/gridlm-train not built"
    fi
    ;;
mpich)
    run srun --mpi=pmi2 -n 2 "$hello"
    grep -q '^rank 0 of 2 ' "$out" && grep -q '^rank 1 of 2 ' "$out"
    st=$?; ok $st "MPICH under srun --mpi=pmi2: one job of two ranks"; [ $st -eq 0 ] || show

    run srun --mpi=pmix -n 2 "$hello"
    [ "$(grep -c '^rank 0 of 1 ' "$out")" -eq 2 ]
    st=$?; ok $st "MPICH under srun --mpi=pmix: two singletons (what gridlm-train must catch)"
    [ $st -eq 0 ] || show

    if [ -x "$train" ]; then
        run srun --mpi=pmi2 -n 2 "$train" $dry
        [ $rc -eq 0 ]
        ok $? "srun --mpi=pmi2 -n 2 gridlm-train $dry exits 0"
        grep -q 'bootstrap: mpi' "$out"
        ok $? "gridlm-train reports 'bootstrap: mpi'"
        grep -q 'bootstrap: mpi' "$out" && [ $rc -eq 0 ] || show

        if [ $have_pmix = yes ]; then
            run srun --mpi=pmix -n 2 "$train" $dry
            [ $rc -ne 0 ] && [ $rc -ne 124 ]
            ok $? "srun --mpi=pmix with MPICH: gridlm-train stops (status $rc, 124 is a hang)"
            grep -q -- '--mpi=pmi2' "$out"
            ok $? "... and its message says to use srun --mpi=pmi2"
            if grep -q -- '--mpi=pmi2' "$out" && [ $rc -ne 0 ]; then
                grep -- '--mpi=pmi2' "$out" | sort -u | diag
            else
                show
            fi
        else
            skip "MPICH under srun --mpi=pmix" "built without PMIx: it cannot see the mismatch"
        fi
    else
        skip "gridlm-train under srun" "src/tools/gridlm-train not built"
    fi
    ;;
*)
    skip "MPI under srun" "unknown MPI flavour '$GL_MPI_FLAVOR'"
    ;;
esac

# --- a rank that dies ------------------------------------------------------
# Rank 1 of 3 sends itself SIGKILL while the others wait in a barrier
# (t/fault-test lost; its watchdog is 2 minutes away).  Who stops the job
# depends on the launcher: Slurm's PMIx plugin cancels the step as soon as
# a client dies ("Error handler invoked ... STEP CANCELLED"), and srun
# names the task itself; under PMI-2 srun lets the other tasks run on
# (KillOnBadExit=0, Slurm's default), and gridlm's side channel stops the
# job, a surviving neighbour naming rank 1, its host and pid (comm/peers.h)
# after its 2 s grace.  Either way the output must name rank 1: the test
# reads which of the two happened from the output, so it does not race.
fault=$top_builddir/t/fault-test
mpi=pmix; [ "$GL_MPI_FLAVOR" = mpich ] && mpi=pmi2
if [ -x "$fault" ]; then
    run srun --mpi=$mpi --overcommit -n 3 "$fault" lost --victim 1 --how kill
    p1=$(sed -n 's/^# pid of rank 1: //p' "$out" | head -n 1)
    [ $rc -ne 0 ] && [ $rc -ne 124 ]
    ok $? "srun -n 3, rank 1 killed: the job stopped (status $rc, 124 is a hang)"
    if grep -q 'STEP [0-9.]* ON .* CANCELLED' "$out"; then
        grep -q 'error: .*task 1: Killed' "$out"
        st=$?
        ok $st "... Slurm cancelled the step and srun named task 1 as killed"
        pat='task 1: Killed'
    else
        grep -q "error: rank [02] on [^:]*: rank 1 on $(uname -n) (pid ${p1:-none}) died: its side-channel connection to this rank" "$out"
        st=$?
        ok $st "... a surviving rank named rank 1, its host and pid (${p1:-none})"
        pat='died: its side-channel'
    fi
    if [ $st -eq 0 ]; then grep "$pat" "$out" | diag; else show; fi
else
    skip "a rank that dies under srun" "t/fault-test not built"
fi

done_testing
