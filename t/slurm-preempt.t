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
# 2. The same job with a fresh checkpoint directory, preempted once its
#    JSON log is past iteration $k, in each of the two ways that reach
#    the ranks (see tiny.sbatch):
#      batch  `scancel --batch --signal=USR1 JOB`: the batch script's
#             trap, as at the time limit (--signal=B:USR1@120);
#      steps  `scancel --signal=USR1 JOB`: the ranks themselves.
#    The first run must stop early (its last iteration < $iters), save
#    that iteration's checkpoint and requeue the job; the job runs again
#    (Restarts=1), resumes from the checkpoint at the next iteration and
#    completes with exit 0; its final loss and validation loss equal the
#    uninterrupted run's, as text: CPU runs are deterministic and a
#    resume restores weights, AdamW moments, data position and RNG.
#
# Every wait is bounded; the daemons are stopped on exit.  About a
# minute.  Skips without root or Slurm; GL_SKIP_SLURM=1 skips it.

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

# submit DIR SBATCH-ARGS...: tiny.sbatch in DIR, checkpoints in DIR/ck,
# logs in DIR; sbatch's output in DIR/sbatch.out, its status in $rc
submit() {
    d=$1; shift
    mkdir -p "$d"
    (cd "$d" &&
     GRIDLM_TRAIN=$train GRIDLM_SRUN_MPI=$mpi GRIDLM_CKPT=$d/ck GRIDLM_LOG_DIR=$d \
     TRAIN_ITERS=$iters SAVE_INTERVAL=1000 LOG_INTERVAL=1 GRIDLM_EXTRA_ARGS="--eval-iters 4" \
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
preempt() {         # preempt NAME SCANCEL-ARGS...
    name=$1; shift
    d=$slurm_dir/$name
    submit "$d" --parsable
    job=$(head -n 1 "$d/sbatch.out")
    if [ $rc -ne 0 ] || [ -z "$job" ]; then
        ok 1 "$name: sbatch tiny.sbatch"; diag <"$d/sbatch.out"; return
    fi
    j0=$d/gridlm-tiny-$job.0.jsonl j1=$d/gridlm-tiny-$job.1.jsonl
    # until the first run's log is past iteration $k (at most 90 s)
    i=0 at=
    while [ $i -lt 450 ]; do
        at=$(json_last "$j0")
        [ -n "$at" ] && [ "$at" -gt $k ] && break
        st=$(job_field "$job" JobState)
        case $st in PENDING|RUNNING|CONFIGURING) ;; *) break ;; esac
        sleep 0.2; i=$((i + 1))
    done
    timeout 10 scancel "$@" "$job"
    ok $? "$name: job $job past iteration ${at:-none}: scancel $*"

    # the job must end, requeued once on the way (at most 120 s)
    slurm_wait_job "$job" 'COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED' 120
    [ "$slurm_state" = COMPLETED ] && [ "$slurm_exit" = 0:0 ] && [ "$slurm_restarts" = 1 ]
    st=$?
    ok $st "$name: the job requeued itself and completed (state ${slurm_state:-none}, exit ${slurm_exit:-none}, restarts ${slurm_restarts:-none})"

    stop=$(json_last "$j0")
    ck=$(printf 'iter_%07d.h5' "${stop:-0}")
    [ -n "$stop" ] && [ "$stop" -lt $iters ] && [ -f "$d/ck/$ck" ] &&
        grep -q "exiting program after iteration *$stop " "$d"/*.out
    st2=$?
    ok $st2 "$name: the first run stopped early at iteration ${stop:-none} of $iters and saved $ck"

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

slurm_done
