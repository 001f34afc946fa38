#!/bin/sh
# train-moe-fp8: FP8 experts (--fp8-format with --num-experts) on CPU
# ranks, whose back end emulates FP8 exactly (device/fp8.h).
#
# A tiny MoE model whose sizes are multiples of 16, as FP8 products need
# (2 x 32 tokens, h 64, 8 heads of 8 in 4 groups, 4 experts of width 32,
# top 2, aux_loss), trains for 20 iterations under hybrid with each
# recipe (delayed with a history of 4, tensorwise).  The experts' three
# products run in FP8 with scales of their own per expert (model.h:
# gl_model_fp8_moe); their rows are padded to 16 per expert.
#   - FP8 is what runs: the losses differ from the bf16 run's by more
#     than 1e-6 and less than 2%.
#   - TP 2 (each expert's width split: fc1's weight and output gradient,
#     fc2's input and weight are TP slices whose amaxes are reduced with
#     MAX) and DP 2 give the single-rank run's losses, gradient norms and
#     validation losses within 1e-5; under delayed scaling so does EP 2
#     (each rank holds 2 experts, whose rows come from both ranks: the
#     amaxes are the experts' holders', reduced with MAX over DP).
#     Tensorwise EP is not compared: an expert's current scale is taken
#     over the rows of every EP rank's micro-batch, as Megatron's.
#   - A run resumed from the checkpoint at iteration 10 (the experts'
#     amax histories and scales are in it) continues exactly.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"

base="$llama_form --device cpu --bf16 --mock-data --seed 1234 --num-layers 2 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 128
 --seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 8
 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
 --eval-interval 10 --eval-iters 2
 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01"
tol=1e-5

plan 12

if ! run bf16 1; then
    echo "Bail out! the single-rank bf16 MoE run failed"
    exit 1
fi
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4"
T="--fp8-format hybrid --fp8-recipe tensorwise"
for recipe in delayed tensorwise; do
    case $recipe in
    delayed) R=$D ;;
    *) R=$T ;;
    esac
    # shellcheck disable=SC2086
    {
    if ! run $recipe 1 $R --save "$tmp/ck-$recipe" --save-interval 10; then
        echo "Bail out! the single-rank $recipe MoE run failed"
        exit 1
    fi
    w=$(worst "$tmp/bf16.jsonl" "$tmp/$recipe.jsonl")
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w > 1e-6 && w < 2e-2) }'; then
        pass "$recipe: FP8 experts close to bf16 but not the same ($w)"
    else
        fail "$recipe: worst relative difference from bf16 $w, expected in (1e-6, 2e-2)"
    fi
    ref=$recipe
    check $recipe-tp2 2 $R --tensor-model-parallel-size 2
    check $recipe-dp2 2 $R
    if run $recipe-resume 1 $R --load "$tmp/ck-$recipe/iter_0000010.h5" &&
       w=$(resumed_within "$tmp/$recipe.jsonl" "$tmp/$recipe-resume.jsonl" 11 10 1e-7 \
                          loss grad_norm); then
        pass "$recipe: resumed at 10, iterations 11-20 as uninterrupted ($w)"
    else
        fail "$recipe: the resumed run differs from the uninterrupted one (${w:-failed})"
    fi
    }
done

# shellcheck disable=SC2086
{
ref=delayed
check delayed-ep2 2 $D --expert-model-parallel-size 2
# the dense MoE run's numbers are not these: the experts run in FP8
if [ -s "$tmp/delayed-ep2.jsonl" ] && grep -q '"moe_aux_loss"' "$tmp/delayed-ep2.jsonl"; then
    pass "delayed-ep2: the MoE losses are logged"
else
    fail "delayed-ep2: no MoE losses in the log"
fi
# the experts' widths per TP rank must suit FP8 products
"$train" $base $T --moe-ffn-hidden-size 40 >"$tmp/shape.log" 2>&1
if [ $? -eq 2 ] && grep -q "the experts' width 40" "$tmp/shape.log"; then
    pass "refused: an expert width that is not a multiple of 16"
else
    fail "an expert width of 40 was not refused"
    tail -3 "$tmp/shape.log" | sed 's/^/#   /'
fi
# selective recomputation rebuilds the MLP norm's output the experts read
check delayed-rc-sel 1 $D --recompute-granularity selective
}
done_testing
