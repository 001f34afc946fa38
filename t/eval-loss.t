#!/bin/sh
# eval-loss: gridlm-eval's loss, perplexity, token and document counts.
#
# t/eval-ref writes a dataset of documents with awkward lengths (empty
# and 1-token documents, which are skipped; 2 tokens; around and beyond
# --seq-length 64; documents of several sequences) and computes the
# expected answer directly: t/model-ref.h's double-precision forward, one
# document at a time, each truncated to 65 tokens.  gridlm-eval --json
# must match it (loss within 1e-5, tokens and documents exactly) for the
# freshly initialised model of --seed under several layouts, and for the
# weights of a checkpoint gridlm-train saved under (TP,PP,DP) = (2,2,1)
# read back under others (--load, the model's shape from the
# checkpoint).  Also: perplexity = exp(loss), the text report, and the
# refusals (no --data-path, flags that contradict the checkpoint).
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

: "${top_builddir:=.}"
eval_="$top_builddir/src/tools/gridlm-eval"
train="$top_builddir/src/tools/gridlm-train"
ref="$top_builddir/t/eval-ref"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/eval-loss.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/model-flags.sh"

model="$llama_form --device cpu --seed 4321 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --seq-length 64 --vocab-size 512"

plan 12
if ! "$ref" make "$tmp/docs" 2>"$tmp/make.err"; then
    sed 's/^/#   /' "$tmp/make.err"
    bail_out "eval-ref could not write the dataset"
fi
# shellcheck disable=SC2086
set -- $("$ref" loss $model --data-path "$tmp/docs" --train-iters 1 --lr 1 2>"$tmp/ref.err")
want_loss=$1 want_tokens=$2 want_docs=$3
if [ -z "$want_docs" ]; then
    sed 's/^/#   /' "$tmp/ref.err"
    bail_out "eval-ref could not compute the reference"
fi
echo "# direct computation: loss $want_loss over $want_tokens tokens of $want_docs documents"

# check NAME RANKS WANT FLAGS...: run gridlm-eval --json, compare with WANT
# ("loss tokens documents").
check() {
    name=$1 ranks=$2 want=$3
    shift 3
    if [ "$ranks" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "$name" "$ranks ranks under MPICH"
        return
    fi
    # shellcheck disable=SC2086
    if ! $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$eval_" --data-path "$tmp/docs" --json "$@" \
            >"$tmp/$name.out" 2>"$tmp/$name.err"; then
        tail -5 "$tmp/$name.err" | sed 's/^/#   /'
        fail "$name: gridlm-eval failed"
        return
    fi
    got=$(sed -n 's/^{"loss": \([^,]*\), "perplexity": \([^,]*\), "tokens": \([0-9]*\), "documents": \([0-9]*\)}$/\1 \3 \4 \2/p' "$tmp/$name.out")
    # shellcheck disable=SC2086
    if echo "$got $want" | awk '{ d = ($1 - $5) / $5; if (d < 0) d = -d
            p = (exp($1) - $4) / $4; if (p < 0) p = -p
            printf "# %s: loss %s (rel %.2g), %s tokens, %s documents, ppl %s\n", "'"$name"'", $1, d, $2, $3, $4
            exit !(NF == 7 && d < 1e-5 && $2 == $6 && $3 == $7 && p < 1e-6) }'; then
        pass "$name: loss, perplexity, tokens and documents match"
    else
        sed 's/^/#   /' "$tmp/$name.out"
        fail "$name: got '$got', want '$want'"
    fi
}

want="$want_loss $want_tokens $want_docs"
# shellcheck disable=SC2086
{
check one 1 "$want" $model
check tp2-sp-dp2 4 "$want" $model --tensor-model-parallel-size 2 --sequence-parallel \
    --micro-batch-size 2
check pp2-interleaved 2 "$want" $model --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 4
check 222-sp 8 "$want" $model --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --sequence-parallel --micro-batch-size 3
}
# 8 of the 11 odd lengths, 40 ordinary, 30+50 and 1+1 in two sequences
case $want_docs in
50) pass "50 documents of 2 tokens or more (one of them 1+1 tokens in two sequences)" ;;
*) fail "the reference counts $want_docs documents, want 50" ;;
esac

# Checkpoints: train a little under (2,2,1), evaluate what was saved.
tiny_train="--mock-data --micro-batch-size 2 --global-batch-size 8 --train-iters 3
 --lr 1e-2 --log-interval 1 --eval-iters 0"
# shellcheck disable=SC2086
if $MPIEXEC $MPIEXEC_FLAGS -n 4 "$train" $model $tiny_train --tensor-model-parallel-size 2 \
        --pipeline-model-parallel-size 2 --sequence-parallel --save "$tmp/ck" \
        >"$tmp/train.log" 2>&1; then
    # shellcheck disable=SC2086
    set -- $("$ref" loss $model --data-path "$tmp/docs" --train-iters 1 --lr 1 \
             --load "$tmp/ck/iter_0000003.h5" 2>"$tmp/ref2.err")
    if [ -n "$3" ] && [ "$1" != "$want_loss" ]; then
        pass "the trained weights give another loss: $1 (initial $want_loss)"
    else
        sed 's/^/#   /' "$tmp/ref2.err"
        fail "reference for the checkpoint: '$*'"
    fi
    want2="$1 $2 $3"
    check load-one 1 "$want2" --device cpu --load "$tmp/ck"
    check load-tp2-dp2 4 "$want2" --device cpu --load "$tmp/ck" --tensor-model-parallel-size 2
    check load-pp2 2 "$want2" --device cpu --load "$tmp/ck/iter_0000003.h5" \
        --pipeline-model-parallel-size 2 --seq-length 64
else
    tail -5 "$tmp/train.log" | sed 's/^/#   /'
    fail "gridlm-train --save failed"
    fail "load-one not run"
    fail "load-tp2-dp2 not run"
    fail "load-pp2 not run"
fi

# The text report, and refusals.
# shellcheck disable=SC2086
if $MPIEXEC $MPIEXEC_FLAGS -n 1 "$eval_" $model --data-path "$tmp/docs" >"$tmp/text.out" 2>&1 &&
   grep -q "docs: $want_docs documents (4 shorter than 2 tokens skipped), $want_tokens predicted tokens at most 64 per document: loss [0-9.]*, perplexity [0-9.]*" "$tmp/text.out"; then
    pass "the text report"
else
    sed 's/^/#   /' "$tmp/text.out"
    fail "the text report"
fi
# shellcheck disable=SC2086
$MPIEXEC $MPIEXEC_FLAGS -n 1 "$eval_" $model >"$tmp/nodata.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q -- "--data-path PREFIX is required" "$tmp/nodata.out"; then
    pass "no --data-path: exit 2 and the fix"
else
    sed 's/^/#   /' "$tmp/nodata.out"
    fail "no --data-path: exit $rc"
fi
if [ -f "$tmp/ck/iter_0000003.h5" ]; then
    $MPIEXEC $MPIEXEC_FLAGS -n 1 "$eval_" --device cpu --load "$tmp/ck" --data-path "$tmp/docs" \
        --num-layers 2 >"$tmp/other.out" 2>&1
    rc=$?
    if [ $rc = 2 ] && grep -q -- "--num-layers 4 there, 2 here" "$tmp/other.out"; then
        pass "a flag that contradicts the checkpoint: exit 2, named"
    else
        sed 's/^/#   /' "$tmp/other.out"
        fail "contradicting --num-layers: exit $rc"
    fi
else
    fail "no checkpoint to contradict"
fi
done_testing
