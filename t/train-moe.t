#!/bin/sh
# train-moe: mixture-of-experts training gives the same numbers whatever
# the layout.
#
# Two tiny models for 20 iterations on the CPU device:
#   mixtral: softmax top 2 of 4 experts on every layer, aux_loss;
#   (qwen and sigmoid: t/train-moe-qwen.t; the models are
#   t/train-moe-lib.sh's)
# Each under TP 2, TP 2 + SP, PP 2, DP 2 and DP 2 with the distributed
# optimizer must give the single-rank run's loss, grad norm, validation
# losses and MoE losses (--log-json's moe_aux_loss, moe_z_loss) within
# 1e-5 relative; so must selective and full recomputation.  A checkpoint
# saved by the mixtral model at TP 2 resumes at TP 1 with the
# uninterrupted run's losses.
#
# Dropping (--moe-expert-capacity-factor) is decided per call: per
# micro-batch, on every TP rank over the micro-batch's tokens (each TP
# rank routes them all).  TP, SP and PP do not change a call's tokens,
# nor does DP when every rank's micro-batches are the single-rank run's
# micro-batches (the same --micro-batch-size): those layouts must give the
# same numbers with dropping too, which the capacity runs check.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"
. "$(dirname "$0")/train-moe-lib.sh"

plan 21
# shellcheck disable=SC2086
{
base="$tiny $mixtral"
run mixtral-ref 1 || bail_out "the single-rank mixtral run failed"
if grep -q '"moe_aux_loss"' "$tmp/mixtral-ref.jsonl" &&
   grep -q 'load balancing loss: .* expert load max/mean:' "$tmp/mixtral-ref.log"; then
    pass "mixtral: the load-balancing loss and the expert load are logged"
else
    fail "mixtral: no MoE fields in the log"
fi
layouts mixtral

# recomputation: selective keeps the MoE block's buffers, full re-runs it
# (counting its statistics once)
check mixtral-rc-sel 1 --recompute-granularity selective
check mixtral-rc-full 1 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 2

# a checkpoint saved at TP 2 resumes at TP 1
ref=mixtral-ref
if run ck-save 2 --tensor-model-parallel-size 2 --train-iters 10 --lr-decay-iters 20 \
        --save "$tmp/ck" --save-interval 10 &&
   run ck-load 1 --load "$tmp/ck" --lr-decay-iters 20; then
    if w=$(resumed_within "$tmp/mixtral-ref.jsonl" "$tmp/ck-load.jsonl" 11 10 1e-5 \
               loss moe_aux_loss); then
        pass "saved at TP 2, resumed at TP 1: iterations 11-20 within $w"
    else
        fail "TP 2 -> TP 1 resume: worst $w"
    fi
else
    fail "TP 2 -> TP 1 resume: a run failed"
fi

# dropping: TP, SP, PP and DP with the same micro-batches keep each
# call's tokens
base="$tiny $mixtral $capacity"
run cap-ref 1 || bail_out "the single-rank capacity run failed"
if grep -q '"moe_dropped": [0-9.e-]*[1-9]' "$tmp/cap-ref.jsonl"; then
    pass "capacity factor 0.75: tokens dropped and logged"
else
    fail "capacity factor 0.75: no dropped tokens logged"
fi
ref=cap-ref
for v in tp2-sp pp2 dp2; do
    case $v in
    tp2-sp) f="--tensor-model-parallel-size 2 --sequence-parallel" ;;
    pp2) f="--pipeline-model-parallel-size 2" ;;
    *) f="" ;;
    esac
    check "cap-$v" 2 $f
    if same_moe "$tmp/cap-ref.jsonl" "$tmp/cap-$v.jsonl"; then
        pass "cap-$v: MoE losses and dropped fraction within $tol"
    else
        fail "cap-$v: MoE losses differ"
    fi
done
}
done_testing
