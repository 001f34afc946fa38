#!/bin/sh
# t/slurm-preempt.t: slurm/tiny.sbatch under a real Slurm (t/slurm-lib.sh
# starts a private one on localhost) trains, checkpoints, is preempted,
# requeues itself, resumes and ends where an uninterrupted run ends.
#
# 1. `sbatch --wait tiny.sbatch`: two CPU ranks (srun --mpi=pmix under
#    Open MPI, --mpi=pmi2 under MPICH: GL_MPI_FLAVOR), $iters iterations;
#    the job exits 0, the checkpoint of the last iteration and
#    latest_checkpointed_iteration.txt exist, and the JSON log holds the
#    final loss and validation loss.
# 2. The same job with a fresh checkpoint directory, preempted while its
#    ranks hold after iteration $k (GRIDLM_TEST_HOLD_AFTER: they wait
#    there for the signal, so it cannot come too late however loaded the
#    machine), in each of the two ways that reach the ranks (see
#    tiny.sbatch):
#      batch  `scancel --batch --signal=USR1 JOB`: the batch script's
#             trap, as at the time limit (--signal=B:USR1@120);
#      steps  `scancel --signal=USR1 JOB`: the ranks themselves;
#    and a third time through a launcher that exits 3 whatever the ranks
#    did (GRIDLM_TRAIN is a wrapper that does; so does Open MPI's mpirun
#    after it forwards a SIGTERM):
#      launcher  `scancel --signal=USR1 JOB`, srun exits 3.
#    The first run must stop after iteration $k + 1, save that
#    iteration's checkpoint, write its exit record and requeue the job;
#    the job runs again (Restarts=1), resumes from the checkpoint at the
#    next iteration and completes with exit 0 (with the launcher exiting
#    3: the script goes by gridlm-train's exit record); its final loss and
#    validation loss equal the uninterrupted run's, as text: CPU runs are
#    deterministic and a resume restores weights, AdamW moments, data
#    position and RNG.
# 3. Through the same failing launcher, a run that fails in training (a
#    planted NaN, --max-nonfinite-iters 0) writes no exit record: the job
#    fails and is not requeued.
#
# Every wait is bounded; the daemons are stopped on exit.  About two
# minutes.  Skips without root or Slurm; GL_SKIP_SLURM=1 skips it.

: "${top_builddir:=.}"
: "${top_srcdir:=.}"
. "$top_srcdir/t/slurm-lib.sh"

train=$top_builddir/src/tools/gridlm-train
tiny=$top_srcdir/slurm/tiny.sbatch
[ -x "$train" ] || skip_all "src/tools/gridlm-train not built"
[ -f "$tiny" ] || skip_all "no slurm/tiny.sbatch"
command -v bash >/dev/null 2>&1 || skip_all "no bash (tiny.sbatch is a bash script)"

slurm_start

mpi=pmix; [ "$GL_MPI_FLAVOR" = mpich ] && mpi=pmi2
iters=40 k=5

# json_get FILE ITER KEY: KEY's value, as text, in FILE's record of
# iteration ITER that has KEY (training or validation record)
json_get() {
    sed -n "s/^{\"iteration\": $2, .*\"$3\": \([^,}]*\).*/\1/p" "$1" 2>/dev/null | tail -n 1
}
# json_last FILE: the last iteration with a training (loss) record
json_last() {
    sed -n 's/^{"iteration": \([0-9]*\), .*"loss": .*/\1/p' "$1" 2>/dev/null | tail -n 1
}
json_first() {
    sed -n 's/^{"iteration": \([0-9]*\), .*"loss": .*/\1/p' "$1" 2>/dev/null | head -n 1
}
# job_field JOB KEY: a field of `scontrol show job`
job_field() {
    timeout 10 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"
}
# show_job DIR: the job's output and Slurm's view of it, as TAP comments
show_job() {
    { cat "$1"/*.out; ls -l "$1" "$1/ck"; } 2>&1 | diag
}

# A launcher that exits 3 whatever its ranks did: each task runs
# gridlm-train, then exits 3, so srun exits 3.
fail_launcher=$slurm_dir/exit3-train
{
    echo '#!/bin/sh'
    echo "\"$train\" \"\$@\""
    echo 'echo "exit3-train: gridlm-train exited $?; exiting 3" >&2'
    echo 'exit 3'
} >"$fail_launcher"
chmod +x "$fail_launcher"

# submit DIR SBATCH-ARGS...: tiny.sbatch in DIR, checkpoints in DIR/ck,
# logs in DIR; sbatch's output in DIR/sbatch.out, its status in $rc.
# $prog (default $train) is GRIDLM_TRAIN, $hold GRIDLM_TEST_HOLD_AFTER,
# $nan GRIDLM_TEST_NONFINITE and $extra more options.
submit() {
    d=$1; shift
    mkdir -p "$d"
    (cd "$d" &&
     GRIDLM_TRAIN=${prog:-$train} GRIDLM_SRUN_MPI=$mpi GRIDLM_CKPT=$d/ck GRIDLM_LOG_DIR=$d \
     TRAIN_ITERS=$iters SAVE_INTERVAL=1000 LOG_INTERVAL=1 \
     GRIDLM_EXTRA_ARGS="--eval-iters 4 ${extra:-}" \
     GRIDLM_TEST_HOLD_AFTER=${hold:-} GRIDLM_TEST_NONFINITE=${nan:-} \
     timeout 150 sbatch --time=5 "$@" "$tiny" >"$d/sbatch.out" 2>&1)
    rc=$?
}

# --- 1. uninterrupted ----------------------------------------------------
ref=$slurm_dir/ref
submit "$ref" --wait --parsable
job=$(head -n 1 "$ref/sbatch.out")
json=$ref/gridlm-tiny-$job.0.jsonl
[ $rc -eq 0 ]
ok $? "sbatch --wait tiny.sbatch ($iters iterations, srun --mpi=$mpi) exits 0"
[ $rc -eq 0 ] || show_job "$ref"
last=$(printf 'iter_%07d.h5' $iters)
[ -f "$ref/ck/$last" ] && [ "$(cat "$ref/ck/latest_checkpointed_iteration.txt" 2>/dev/null)" = $iters ]
ok $? "it saved $last and latest_checkpointed_iteration.txt says $iters"
ref_loss=$(json_get "$json" $iters loss)
ref_valid=$(json_get "$json" $iters valid_loss)
[ -n "$ref_loss" ] && [ "$ref_loss" != null ] && [ -n "$ref_valid" ] && [ "$ref_valid" != null ]
st=$?
ok $st "its JSON log has iteration $iters's loss ($ref_loss) and validation loss ($ref_valid)"
[ $st -eq 0 ] || { tail -n 3 "$json" 2>&1 | diag; show_job "$ref"; }

# --- 2. preempted, requeued, resumed --------------------------------------
preempt() {         # preempt NAME SCANCEL-ARGS... (GRIDLM_TRAIN: $prog)
    name=$1; shift
    d=$slurm_dir/$name
    hold=$k
    submit "$d" --parsable
    hold=
    job=$(head -n 1 "$d/sbatch.out")
    if [ $rc -ne 0 ] || [ -z "$job" ]; then
        ok 1 "$name: sbatch tiny.sbatch"; diag <"$d/sbatch.out"; return
    fi
    j0=$d/gridlm-tiny-$job.0.jsonl j1=$d/gridlm-tiny-$job.1.jsonl
    out=$d/gridlm-tiny-$job.out
    # until the first run holds after iteration $k (at most 90 s)
    i=0 held=no
    while [ $i -lt 450 ]; do
        grep -q "^holding after iteration $k " "$out" 2>/dev/null && { held=yes; break; }
        st=$(job_field "$job" JobState)
        case $st in PENDING|RUNNING|CONFIGURING) ;; *) break ;; esac
        sleep 0.2; i=$((i + 1))
    done
    [ $held = yes ] && timeout 10 scancel "$@" "$job"
    ok $? "$name: job $job holding after iteration $k ($held): scancel $*"

    # the job must end, requeued once on the way (at most 120 s)
    slurm_wait_job "$job" 'COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED' 120
    [ "$slurm_state" = COMPLETED ] && [ "$slurm_exit" = 0:0 ] && [ "$slurm_restarts" = 1 ]
    st=$?
    ok $st "$name: the job requeued itself and completed (state ${slurm_state:-none}, exit ${slurm_exit:-none}, restarts ${slurm_restarts:-none})"

    stop=$(json_last "$j0")
    ck=$(printf 'iter_%07d.h5' "${stop:-0}")
    [ "$stop" = $((k + 1)) ] && [ -f "$d/ck/$ck" ] &&
        grep -q "exiting program after iteration *$stop " "$out" &&
        grep -q "gridlm-train stopped cleanly after iteration $stop (signal: " "$out"
    st2=$?
    ok $st2 "$name: the first run stopped after iteration ${stop:-none} ($((k + 1)) expected), saved $ck and its exit record said so"

    first=$(json_first "$j1") end=$(json_last "$j1")
    [ -n "$stop" ] && [ "$first" = $((stop + 1)) ] && [ "$end" = $iters ]
    st3=$?
    ok $st3 "$name: the second run resumed at iteration ${first:-none} and ran to ${end:-none}"

    loss=$(json_get "$j1" $iters loss) valid=$(json_get "$j1" $iters valid_loss)
    [ -n "$ref_loss" ] && [ "$loss" = "$ref_loss" ] && [ "$valid" = "$ref_valid" ]
    st4=$?
    ok $st4 "$name: final loss $loss and validation loss $valid equal the uninterrupted run's"
    if [ $st -ne 0 ] || [ $st2 -ne 0 ] || [ $st3 -ne 0 ] || [ $st4 -ne 0 ]; then
        show_job "$d"
    fi
}
preempt batch --batch --signal=USR1
preempt steps --signal=USR1
prog=$fail_launcher
preempt launcher --signal=USR1
grep -q "srun's status 3 is the launcher's own" "$slurm_dir"/launcher/*.out
ok $? "launcher: the job script took srun's status 3 as the launcher's and went by the exit record"

# --- 3. a failure through the same launcher ---------------------------------
d=$slurm_dir/failure
nan=3 extra="--max-nonfinite-iters 0"
submit "$d" --wait --parsable
prog= nan= extra=
job=$(head -n 1 "$d/sbatch.out")
slurm_wait_job "$job" 'COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED' 60
[ $rc -ne 0 ] && [ "$slurm_state" = FAILED ] && [ "$slurm_restarts" = 0 ] &&
    [ ! -e "$d/ck/gridlm_exit.txt" ] && grep -q 'NaN or Inf in 1 iteration' "$d"/*.out
st=$?
ok $st "a run that fails in training writes no exit record: the job failed, not requeued (sbatch $rc, state ${slurm_state:-none}, restarts ${slurm_restarts:-none})"
[ $st -eq 0 ] || show_job "$d"

done_testing
