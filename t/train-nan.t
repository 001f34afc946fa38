#!/bin/sh
# train-nan.t: a planted NaN in gridlm-train, end to end.
#
# GRIDLM_TEST_NONFINITE="ITER[,ITER...]" makes gridlm-train plant a NaN in
# rank 0's gradients at those iterations, before the gradients are
# reduced and their norm is taken (it prints "planted a NaN in the
# gradients at iteration N (GRIDLM_TEST_NONFINITE)").  Then:
#   - an iteration with a NaN is skipped and counted: the JSON log's
#     skipped_iterations and nan_iterations count it, its loss and
#     grad_norm are null, the learning rate does not advance (no
#     optimizer step), and the next iterations train on (finite loss);
#   - a skipped iteration leaves the weights exactly as they were: NaN at
#     iteration 3 of 3 saves the same weights as a clean run of 2, here
#     under DP 2 with the distributed optimizer (the NaN planted on rank
#     0 reaches every rank through the reduction and the norm);
#   - --max-nonfinite-iters N: N + 1 in a row stop the job (exit status
#     non-zero) with one error line naming the iterations, the count and
#     the flag, and no iteration after it runs; under TP 2 and on 1 rank
#     with N = 0.
# Skipped until gridlm-train has the hook (src/train/train.c), or without
# MPI.
: "${top_builddir:=.}"
. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/model-flags.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
train="$top_builddir/src/tools/gridlm-train"
ckpt="$top_builddir/src/tools/gridlm-ckpt"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train-nan.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

tiny="$llama_form --device cpu --mock-data --seed 1234 --num-layers 2 --hidden-size 32
 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 64
 --seq-length 16 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4
 --lr 1e-3 --lr-warmup-iters 20 --lr-decay-iters 100 --log-interval 1
 --eval-iters 0"

# train NAME RANKS PLANT FLAGS...: $tmp/NAME.jsonl, .out (stdout and
# stderr); returns gridlm-train's exit status.
train() {
    name=$1 ranks=$2 plant=$3
    shift 3
    # shellcheck disable=SC2086
    GRIDLM_TEST_NONFINITE=$plant timeout 300 $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$train" \
        $tiny --log-json "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>&1
}

show() { sed 's/^/#   /' "$tmp/$1.out" | tail -${2:-15}; }

# field NAME KEY: KEY of every record of NAME.jsonl, one per line
field() {
    sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$tmp/$1.jsonl" | tr '\n' ' ' | sed 's/ $//'
}

# Is the hook there?  One iteration with a NaN planted.
train probe 1 1 --train-iters 1 --max-nonfinite-iters 1
if ! grep -q 'planted a NaN in the gradients at iteration 1 (GRIDLM_TEST_NONFINITE)' \
        "$tmp/probe.out"; then
    show probe 5
    skip_all "gridlm-train has no GRIDLM_TEST_NONFINITE hook (src/train/train.c)"
fi

# --- skipped and counted ------------------------------------------------
train skip 1 3,5,6 --train-iters 8 --max-nonfinite-iters 2
rc=$?
test $rc -eq 0 || show skip
ok $rc "NaNs at 3, 5 and 6 with --max-nonfinite-iters 2: the run finishes"
test "$(grep -c 'planted a NaN' "$tmp/skip.out")" -eq 3
ok $? "three NaNs planted"
echo "# skipped_iterations: $(field skip skipped_iterations)"
test "$(field skip skipped_iterations)" = "0 0 1 1 2 3 3 3" &&
    test "$(field skip nan_iterations)" = "0 0 1 1 2 3 3 3"
ok $? "the JSON log counts them: skipped_iterations and nan_iterations 0 0 1 1 2 3 3 3"
echo "# loss: $(field skip loss)"
echo "# grad_norm: $(field skip grad_norm)"
field skip loss | awk '{ for (i = 1; i <= 8; i++)
    if ((i == 3 || i == 5 || i == 6) != ($i == "null")) exit 1; exit NF != 8 }' &&
field skip grad_norm | awk '{ for (i = 1; i <= 8; i++)
    if ((i == 3 || i == 5 || i == 6) != ($i == "null")) exit 1; exit NF != 8 }'
ok $? "loss and grad_norm are null at the skipped iterations, finite at the others"
# In warmup the learning rate grows with every optimizer step: it stays
# put exactly at the skipped iterations.
echo "# lr: $(field skip lr)"
field skip lr | awk '{ for (i = 2; i <= 8; i++) {
        skip = (i == 3 || i == 5 || i == 6)
        if (skip && $i != $(i - 1)) exit 1
        if (!skip && !($i > $(i - 1))) exit 1 }
    exit NF != 8 }'
ok $? "no optimizer step at the skipped iterations (the warmup learning rate stays put)"
grep 'iteration        8/' "$tmp/skip.out" | grep -q 'number of skipped iterations:   3 |'
ok $? "the progress line says 3 skipped iterations"

# --- the weights stay as they were ----------------------------------------
L="--use-distributed-optimizer"
train w3 2 3 --train-iters 3 --save "$tmp/w3" $L --save-interval 1000 &&
    train w2 2 "" --train-iters 2 --save "$tmp/w2" $L --save-interval 1000 &&
    "$ckpt" export-hf --dtype fp32 "$tmp/w3" "$tmp/w3.hf" >"$tmp/w3.out" 2>&1 &&
    "$ckpt" export-hf --dtype fp32 "$tmp/w2" "$tmp/w2.hf" >"$tmp/w2.out" 2>&1
rc=$?
test $rc -eq 0 || { show w3; show w2; }
ok $rc "DP 2, distributed optimizer: a NaN at iteration 3 of 3, and a clean run of 2, saved"
test "$(field w3 skipped_iterations)" = "0 0 1" &&
    cmp "$tmp/w3.hf/model.safetensors" "$tmp/w2.hf/model.safetensors"
ok $? "the skipped iteration left the weights bit for bit as after iteration 2"

# --- too many in a row stop the job ---------------------------------------
if train stop 2 2,3,4 --train-iters 8 --max-nonfinite-iters 2 --tensor-model-parallel-size 2; then
    rc=0
else
    rc=$?
fi
show stop 6
test $rc -ne 0 -a $rc -ne 124
ok $? "TP 2: NaNs at 2, 3 and 4 with --max-nonfinite-iters 2 stop the job (exit status $rc)"
grep -q 'error: .*NaN or Inf in 3 iterations in a row (iterations 2 to 4; 3 non-finite in all), more than --max-nonfinite-iters 2' "$tmp/stop.out" &&
    test "$(grep -c 'error:' "$tmp/stop.out")" -eq 1
ok $? "one error line names the iterations, the count and the flag"
test "$(field stop iteration)" = "1 2 3" && test "$(field stop skipped_iterations)" = "0 1 2"
ok $? "the log stops after iteration 3 (4 stopped the job before its log): $(field stop iteration)"

if train zero 1 2 --train-iters 4 --max-nonfinite-iters 0; then rc=0; else rc=$?; fi
show zero 4
test $rc -ne 0 -a $rc -ne 124 &&
    grep -q 'NaN or Inf in 1 iteration in a row (iteration 2; 1 non-finite in all), more than --max-nonfinite-iters 0' "$tmp/zero.out" &&
    ! grep -q 'iteration        3/' "$tmp/zero.out"
ok $? "--max-nonfinite-iters 0: the first NaN stops the job"

done_testing
