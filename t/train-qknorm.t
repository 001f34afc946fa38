#!/bin/sh
# train-qknorm: --qk-layernorm (Qwen3's RMSNorm over each head of q and k)
# trains the same model whatever the layout.
#
# A tiny Qwen3-form model (the Llama form with --qk-layernorm) whose head
# size is not hidden / heads (--kv-channels 16, 8 heads, hidden 64)
# trains 20 iterations on one rank, then under TP 2 (the norm weights
# replicated, each rank's heads adding their part of the gradient: summed
# over TP with and without sequence parallelism), TP 2 with sequence
# parallelism, PP 2, DP 2 with the distributed optimizer, (2,2,2) with
# --overlap-grad-reduce and small buckets (the QK-norm bucket deferred
# until its TP sum), and under selective and full recomputation; the loss
# and gradient norm of every iteration and the validation losses must
# agree with the one-rank run within 1e-5 relative.  FP8 (tensorwise)
# trains with it, TP 2 with sequence parallelism within 2e-4 of one rank
# in loss.  The same model
# without --qk-layernorm must differ (the norm is really there), and
# --qk-layernorm with LayerNorm is refused.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

tol=1e-5
. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"

shape="--device cpu --mock-data --seed 1234 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --kv-channels 16 --ffn-hidden-size 176
 --seq-length 64 --vocab-size 512 --micro-batch-size 2 --global-batch-size 16
 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
 --eval-interval 10 --eval-iters 2"
base="$llama_form --qk-layernorm $shape"

plan 12
run ref 1 || bail_out "the single-rank reference run failed"
ref=ref
check tp2 2 --tensor-model-parallel-size 2
check tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
check pp2 2 --pipeline-model-parallel-size 2
check dp2-distopt 2 --use-distributed-optimizer
check recompute-selective 1 --recompute-granularity selective
check recompute-full 1 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 2
check tp2-recompute-full 2 --tensor-model-parallel-size 2 --recompute-granularity full \
    --recompute-method block --recompute-num-layers 1
# shellcheck disable=SC2086
check 222-overlap 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 5000
grep -q "QK RMSNorm" "$tmp/ref.log"
ok $? "the start-up summary names the QK norm"

# FP8 (the norm sits between the products, which quantize as before):
# one rank and TP 2 with sequence parallelism train, their losses within
# FP8's layout tolerance of t/train-fp8.t (2e-4 over the 20 iterations).
# (The QK-norm weights' gradients are summed in another order under TP,
# a rounding that FP8's quantization of the next steps can enlarge in
# the gradient norm: the loss is what is compared.)
base="$llama_form --qk-layernorm $shape --bf16 --ffn-hidden-size 192"
fp8="--fp8-format hybrid --fp8-recipe tensorwise"
# losses FILE: the training losses of a JSON log, one a line
losses() { grep -v valid_loss "$1" | sed 's/.*"loss": \([^,}]*\).*/\1/'; }
# shellcheck disable=SC2086
if run fp8 1 $fp8 && run fp8-tp2-sp 2 $fp8 --tensor-model-parallel-size 2 --sequence-parallel
then
    losses "$tmp/fp8.jsonl" >"$tmp/fp8.loss"
    losses "$tmp/fp8-tp2-sp.jsonl" >"$tmp/fp8-tp2-sp.loss"
    w=$(paste "$tmp/fp8.loss" "$tmp/fp8-tp2-sp.loss" | awk '
        { d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > w) w = d; n++ }
        END { if (n != 20) print "mismatch"; else printf "%.3g", w }')
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w < 2e-4) }'; then
        pass "FP8: TP 2 with sequence parallelism, losses within $w of one rank's"
    else
        fail "FP8: TP 2 with sequence parallelism, losses differ from one rank's by $w"
    fi
else
    fail "FP8 runs with --qk-layernorm failed"
fi

# Without the norm: another model.
base="$llama_form $shape"
differs plain "" "the run without --qk-layernorm"

# LayerNorm's QK norm (Megatron's with --normalization LayerNorm) is not built.
"$train" $shape --qk-layernorm >"$tmp/ln.log" 2>&1
st=$?
if [ $st -eq 2 ] && grep -q "qk-layernorm with --normalization LayerNorm is not built" "$tmp/ln.log"
then
    pass "--qk-layernorm with LayerNorm is refused"
else
    sed 's/^/#   /' "$tmp/ln.log" | tail -5
    fail "--qk-layernorm with LayerNorm is refused (exit $st)"
fi
done_testing
