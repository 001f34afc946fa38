#!/bin/sh
# train-eval: validation (--eval-interval, --eval-iters) through the
# forward-only pipeline.
#
# 1. Against a direct computation: one training iteration in a learning-
#    rate warm-up trains with lr 0 (lr.h), so the validation after it sees
#    the initial weights; its loss must equal t/train-eval-ref's, an
#    independent double-precision forward (t/model-ref.h) over the same
#    --mock-data valid samples, within 1e-5 -- on one rank and under
#    (TP,PP,DP) = (2,2,2) with sequence parallelism and the distributed
#    optimizer, PP 2 interleaved, and TP 2 x DP 2.
# 2. The log: Megatron's "validation loss at iteration N | lm loss value:
#    ... | lm loss PPL: ... |" line between two rules, the JSON record
#    {"iteration", "valid_loss", "valid_ppl"} with valid_ppl = exp(loss),
#    periodic evaluations at every --eval-interval and one at the end of
#    training, each on its own valid batches (different losses).
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

: "${top_builddir:=.}"
train="$top_builddir/src/tools/gridlm-train"
ref="$top_builddir/t/train-eval-ref"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train-eval.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/model-flags.sh"

tiny="$llama_form --device cpu --mock-data --seed 77 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --seq-length 64 --vocab-size 512 --micro-batch-size 2 --global-batch-size 8
 --lr 1e-3 --log-interval 1"

# jval FILE KEY N: KEY of the N-th record of FILE that has it.
jval() {
    grep "\"$2\"" "$1" | sed -n "$3p" | sed "s/.*\"$2\": \([^,}]*\).*/\1/"
}

plan 10

# --- 1. against the direct computation ---
# shellcheck disable=SC2086
want=$("$ref" 0 $tiny --train-iters 1 --lr-warmup-iters 1 --eval-interval 1 \
       --eval-iters 2 2>"$tmp/ref.err")
if [ -z "$want" ]; then
    sed 's/^/#   /' "$tmp/ref.err"
    bail_out "train-eval-ref failed"
fi
echo "# direct computation: $want"

# direct NAME RANKS FLAGS...
direct() {
    name=$1 ranks=$2
    shift 2
    if [ "$ranks" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "$name" "$ranks ranks under MPICH"
        return
    fi
    # shellcheck disable=SC2086
    if ! $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$train" $tiny --train-iters 1 \
            --lr-warmup-iters 1 --eval-interval 1 --eval-iters 2 "$@" \
            --log-json "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1; then
        tail -5 "$tmp/$name.log" | sed 's/^/#   /'
        fail "$name: gridlm-train failed"
        return
    fi
    got=$(jval "$tmp/$name.jsonl" valid_loss 1)
    if awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d;
            printf "# %s vs %s: %.2g\n", a, b, d; exit !(a != "" && d < 1e-5) }'; then
        pass "$name: valid loss $got = direct computation"
    else
        fail "$name: valid loss '$got', direct computation $want"
    fi
}

direct one 1
L222="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
# shellcheck disable=SC2086
direct 222-sp-distopt 8 $L222 --sequence-parallel --use-distributed-optimizer
direct pp2-interleaved 2 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1
direct tp2-dp2 4 --tensor-model-parallel-size 2

# --- 2. the log ---
# shellcheck disable=SC2086
if $MPIEXEC $MPIEXEC_FLAGS -n 2 "$train" $tiny --train-iters 7 --eval-interval 3 \
        --eval-iters 1 --pipeline-model-parallel-size 2 --log-json "$tmp/log.jsonl" \
        >"$tmp/log.out" 2>&1; then
    pass "7 iterations with --eval-interval 3"
else
    tail -5 "$tmp/log.out" | sed 's/^/#   /'
    fail "7 iterations with --eval-interval 3 failed"
fi
its=$(grep valid_loss "$tmp/log.jsonl" | sed 's/.*"iteration": \([0-9]*\).*/\1/' | tr '\n' ' ')
if [ "$its" = "3 6 7 " ]; then
    pass "validation records after iterations 3, 6 and at the end (7)"
else
    fail "validation records after iterations '$its', want '3 6 7 '"
fi
if grep -q '^ *validation loss at iteration 3 | lm loss value: [0-9]\.[0-9]\{6\}E[-+][0-9][0-9] | lm loss PPL: [0-9]\.[0-9]\{6\}E[-+][0-9][0-9] |$' "$tmp/log.out" &&
   grep -q 'validation loss at iteration 7 on validation set |' "$tmp/log.out" &&
   [ "$(grep -B1 'validation loss at iteration 3 ' "$tmp/log.out" | head -1 | tr -d ' -')" = "" ]; then
    pass "Megatron's validation line between rules"
else
    grep -A1 -B1 'validation' "$tmp/log.out" | sed 's/^/#   /'
    fail "the validation line is not Megatron's"
fi
l1=$(jval "$tmp/log.jsonl" valid_loss 1)
p1=$(jval "$tmp/log.jsonl" valid_ppl 1)
l2=$(jval "$tmp/log.jsonl" valid_loss 2)
l3=$(jval "$tmp/log.jsonl" valid_loss 3)
if awk -v l="$l1" -v p="$p1" 'BEGIN { d = (exp(l) - p) / p; if (d < 0) d = -d;
        exit !(l != "" && d < 1e-6) }'; then
    pass "valid_ppl $p1 = exp(valid_loss $l1)"
else
    fail "valid_ppl '$p1' is not exp('$l1')"
fi
if [ -n "$l1" ] && [ -n "$l2" ] && [ -n "$l3" ] && [ "$l1" != "$l2" ] && [ "$l2" != "$l3" ]; then
    pass "each evaluation has its own batches and weights: $l1, $l2, $l3"
else
    fail "evaluations: '$l1' '$l2' '$l3'"
fi
# The training records are still one per iteration, in order.
tr=$(grep -v valid_loss "$tmp/log.jsonl" | sed 's/.*"iteration": \([0-9]*\).*/\1/' | tr '\n' ' ')
if [ "$tr" = "1 2 3 4 5 6 7 " ]; then
    pass "training records 1..7 beside the validation ones"
else
    fail "training records '$tr'"
fi
done_testing
