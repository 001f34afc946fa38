#!/bin/sh
# train-ckpt: --save/--load through src/ckpt's HDF5 checkpoints, resharded.
#
# 1. Resharding: train the tiny model 10 iterations under (TP,PP,DP) =
#    (2,2,2) with --sequence-parallel and --use-distributed-optimizer,
#    saving at 5 and 10; resume from iteration 5 under (1,1,1), (1,2,4)
#    with and without the distributed optimizer, (2,1,1), and (1,2,2)
#    interleaved with the distributed optimizer, and from a checkpoint
#    saved by DP 2 under --overlap-param-gather on one rank; the losses
#    and gradient norms of iterations 6-10 must equal the uninterrupted
#    run's (relative difference < 1e-5); without the AdamW moments
#    (--no-load-optim) they must not.
# 2. --async-save writes the same checkpoint (a resume from it matches).
# 3. --no-save-optim: loading it without --no-load-optim stops with exit
#    2 and a message naming the fix; with --no-load-optim it trains on
#    from iteration 6; --finetune starts at iteration 1.
# 4. --exit-signal-handler: SIGTERM to one rank in the middle of a run
#    makes it save and exit 0; --load DIR (the tracker) resumes after the
#    saved iteration with the uninterrupted run's losses.
# 5. A checkpoint of another model is refused, naming the flag.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

: "${top_builddir:=.}"
train="$top_builddir/src/tools/gridlm-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train-ckpt.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/model-flags.sh"

tiny="$llama_form --device cpu --mock-data --seed 1234 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --seq-length 64 --vocab-size 512 --micro-batch-size 2 --global-batch-size 16
 --train-iters 10 --lr 1e-3 --lr-warmup-iters 2 --lr-decay-iters 400
 --log-interval 1 --eval-iters 0"
L222="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --sequence-parallel --use-distributed-optimizer"

# run NAME RANKS FLAGS...: train, leaving $tmp/NAME.jsonl and .log; 1 on
# failure.
run() {
    name=$1 ranks=$2
    shift 2
    # shellcheck disable=SC2086
    timeout 300 $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$train" $tiny "$@" \
        --log-json "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1
    rc=$?
    return $rc
}

# why NAME: what a failed run said -- its exit status (124: the 300 s
# timeout), gridlm's error lines and the launcher's lines about a process
# that died, then the last lines of its output.
why() {
    echo "$1: exit status $rc$([ "$rc" -eq 124 ] && echo ' (timed out after 300 s)')" | diag
    grep -E "error|signal|noticed|Killed|killed" "$tmp/$1.log" | head -n 8 | sed 's/^/  /' | diag
    tail -n 5 "$tmp/$1.log" | sed 's/^/  /' | diag
}

# worst REF GOT FROM: the largest relative difference of loss and grad
# norm between the records of GOT and those of REF with the same
# iteration, for iterations >= FROM; "mismatch" unless GOT has exactly
# REF's iterations from FROM on.
worst() {
    awk -v from="$3" '
    function val(line, key,   s) {
        if (!match(line, "\"" key "\": [^,}]*")) return "null"
        s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    function rel(a, b,   d) {
        if (a == "null" || b == "null" || b + 0 == 0) { bad = 1; return 0 }
        d = (a - b) / b; return d < 0 ? -d : d
    }
    FNR == NR { i = val($0, "iteration") + 0; if (i >= from) { rl[i] = val($0, "loss");
                rg[i] = val($0, "grad_norm"); nr++ } next }
    {
        i = val($0, "iteration") + 0
        if (!(i in rl)) { bad = 1; next }
        d = rel(val($0, "loss"), rl[i]); if (d > w) w = d
        d = rel(val($0, "grad_norm"), rg[i]); if (d > w) w = d
        ng++
    }
    END { if (bad || ng != nr || nr < 1) print "mismatch"; else printf "%.3g\n", w }
    ' "$1" "$2"
}

# resume NAME RANKS FLAGS...: resume from $ck5 and compare 6-10 with full.
resume() {
    name=$1 ranks=$2
    shift 2
    if [ "$ranks" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "$name" "$ranks ranks under MPICH"
        return
    fi
    if ! run "$name" "$ranks" --load "$ck5" "$@"; then
        why "$name"
        fail "$name: resuming failed"
        return
    fi
    w=$(worst "$tmp/full.jsonl" "$tmp/$name.jsonl" 6)
    first=$(head -1 "$tmp/$name.jsonl" | sed 's/.*"iteration": \([0-9]*\).*/\1/')
    if [ "$w" != mismatch ] && [ "$first" = 6 ] &&
       awk -v w="$w" 'BEGIN { exit !(w < 1e-5) }'; then
        pass "$name: iterations 6-10 within $w of the uninterrupted run"
    else
        fail "$name: first iteration '$first', worst relative difference $w"
    fi
}

plan 15
# shellcheck disable=SC2086
if [ "$GL_MPI_FLAVOR" = mpich ]; then
    # at most two ranks under MPICH: save under (2,1,1) instead
    L222="--tensor-model-parallel-size 2 --sequence-parallel"
    ranks=2
else
    ranks=8
fi
# shellcheck disable=SC2086
if ! run full $ranks $L222 --save "$tmp/ck" --save-interval 5; then
    why full
    bail_out "the saving run failed"
fi
ck5="$tmp/ck/iter_0000005.h5"
if [ -f "$ck5" ] && [ -f "$tmp/ck/iter_0000010.h5" ] &&
   [ "$(cat "$tmp/ck/latest_checkpointed_iteration.txt")" = 10 ] &&
   grep -q "successfully saved checkpoint from iteration       5 to" "$tmp/full.log"; then
    pass "saved at iterations 5 and 10, tracker at 10"
else
    ls -l "$tmp/ck" | sed 's/^/#   /'
    fail "checkpoints at 5 and 10 with the tracker at 10"
fi

# --- 1. resharding ---
resume one 1
resume 124-distopt 8 --pipeline-model-parallel-size 2 --use-distributed-optimizer
resume 124 8 --pipeline-model-parallel-size 2
resume 211 2 --tensor-model-parallel-size 2
resume 122-interleaved-distopt 4 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer

# Saved at iteration 5 under --overlap-param-gather (the new weights are
# still to be broadcast when the step ends), resumed on one rank.
if run gather 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
       --ddp-bucket-size 5000 --train-iters 5 --save "$tmp/ckg" --save-interval 5; then
    full5=$ck5
    ck5="$tmp/ckg/iter_0000005.h5"
    resume gather-one 1
    ck5=$full5
else
    why gather
    fail "gather-one: the saving run with --overlap-param-gather failed"
fi

# The comparison can fail: without the moments the run goes elsewhere.
if run nomoments 1 --load "$ck5" --no-load-optim; then
    w=$(worst "$tmp/full.jsonl" "$tmp/nomoments.jsonl" 6)
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w > 1e-3) }'; then
        pass "resumed without the AdamW moments: off by $w (the comparison can fail)"
    else
        fail "resumed without the AdamW moments yet within $w"
    fi
else
    fail "resume with --no-load-optim failed"
fi

# --- 2. --async-save ---
if run async 2 --tensor-model-parallel-size 2 --save "$tmp/ack" --save-interval 5 \
        --async-save && [ -f "$tmp/ack/iter_0000005.h5" ]; then
    ck5="$tmp/ack/iter_0000005.h5"
    resume async-resumed 1
    ck5="$tmp/ck/iter_0000005.h5"
else
    why async
    fail "--async-save run failed"
fi

# --- 3. without optimizer state ---
if run noopt 1 --train-iters 5 --save "$tmp/nck" --no-save-optim; then
    run noopt-load 1 --load "$tmp/nck"
    rc=$?
    if [ $rc = 2 ] && grep -q "no optimizer state.*--no-load-optim" "$tmp/noopt-load.log"; then
        pass "a checkpoint without optimizer state needs --no-load-optim (exit 2)"
    else
        tail -3 "$tmp/noopt-load.log" | sed 's/^/#   /'
        fail "loading without optimizer state: exit $rc"
    fi
    if run noopt-ok 1 --load "$tmp/nck" --no-load-optim &&
       [ "$(head -1 "$tmp/noopt-ok.jsonl" | sed 's/.*"iteration": \([0-9]*\).*/\1/')" = 6 ]; then
        pass "--no-load-optim: trains on from iteration 6"
    else
        tail -3 "$tmp/noopt-ok.log" | sed 's/^/#   /'
        fail "--no-load-optim"
    fi
else
    fail "--no-save-optim run failed"
    fail "--no-load-optim not tried"
fi
if run finetune 1 --load "$ck5" --finetune --train-iters 3 &&
   [ "$(head -1 "$tmp/finetune.jsonl" | sed 's/.*"iteration": \([0-9]*\).*/\1/')" = 1 ]; then
    pass "--finetune starts at iteration 1 from the loaded weights"
else
    tail -3 "$tmp/finetune.log" | sed 's/^/#   /'
    fail "--finetune"
fi

# --- 4. SIGTERM ---
# A run stopped by SIGTERM sent to one rank process once it trains, then
# the uninterrupted run for the comparison.  Each rank's pid comes from
# the shell that execs it (it writes $$ first), so no process is looked
# up by name (no ps or pgrep).  The signal goes after iteration 3 was
# logged; the run must stop at a later iteration, before its last, with
# the signal as the reason, and save there.
mkdir "$tmp/pids"
# shellcheck disable=SC2086,SC2016
timeout 300 $MPIEXEC $MPIEXEC_FLAGS -n 2 sh -c 'echo $$ >"$0/pid.$$"; exec "$@"' "$tmp/pids" \
    "$train" $tiny --pipeline-model-parallel-size 2 \
    --train-iters 400 --exit-signal-handler --save "$tmp/sck" --save-interval 1000 \
    --log-json "$tmp/sig.jsonl" >"$tmp/sig.log" 2>&1 &
job=$!
tries=0
while ! grep -q '"iteration": 3,' "$tmp/sig.jsonl" 2>/dev/null && [ $tries -lt 1200 ]; do
    kill -0 $job 2>/dev/null || break
    sleep 0.1
    tries=$((tries + 1))
done
victim=$(cat "$tmp"/pids/pid.* 2>/dev/null | head -n 1)
[ -n "$victim" ] && grep -q '"iteration": 3,' "$tmp/sig.jsonl" && kill -TERM "$victim"
wait $job
rc=$?
stopped=$(cat "$tmp/sck/latest_checkpointed_iteration.txt" 2>/dev/null)
if [ $rc = 0 ] && [ -n "$victim" ] && [ -n "$stopped" ] && [ "$stopped" -gt 3 ] &&
   [ "$stopped" -lt 400 ] && [ -f "$tmp/sck/iter_$(printf %07d "$stopped").h5" ] &&
   grep -q "exiting program after iteration *$stopped (SIGTERM received)" "$tmp/sig.log"; then
    pass "SIGTERM to one rank: saved at iteration $stopped, exit 0"
else
    why sig
    fail "SIGTERM: exit $rc, victim '$victim', saved '$stopped'"
fi
# The uninterrupted reference, as far as the resumed run goes (the
# schedule does not depend on --train-iters: --lr-decay-iters is fixed).
if [ -n "$stopped" ] && [ "$stopped" -lt 400 ] &&
   run long 2 --pipeline-model-parallel-size 2 --train-iters $((stopped + 5)) &&
   run sigres 2 --pipeline-model-parallel-size 2 --load "$tmp/sck" \
       --train-iters $((stopped + 5)); then
    w=$(worst "$tmp/long.jsonl" "$tmp/sigres.jsonl" $((stopped + 1)))
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w < 1e-5) }'; then
        pass "resumed from the SIGTERM checkpoint: iterations $((stopped + 1))-$((stopped + 5)) within $w"
    else
        fail "resumed from the SIGTERM checkpoint: $w"
    fi
else
    fail "no resume from the SIGTERM checkpoint"
fi

# --- 5. another model ---
run other 1 --load "$ck5" --hidden-size 128
rc=$?
if [ $rc = 2 ] && grep -q -- "--hidden-size 64 there, 128 here" "$tmp/other.log"; then
    pass "a checkpoint of another model is refused (exit 2, names --hidden-size)"
else
    tail -3 "$tmp/other.log" | sed 's/^/#   /'
    fail "another model's checkpoint: exit $rc"
fi
done_testing
