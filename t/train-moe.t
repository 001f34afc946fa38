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
# global_aux_loss (Megatron's) counts tokens per expert over the
# micro-batches of every DP rank and over the step's micro-batches so
# far, and takes their mean: TP, SP, PP and full recomputation keep the
# single-rank run's numbers; D DP ranks of micro-batch B with coefficient
# X, with or without the distributed optimizer, give one rank's of
# micro-batch D B with coefficient X/D (the same counts; the gradient
# averaged over DP).  With one micro-batch a step it is aux_loss; with
# several its losses differ from aux_loss's.
#
# Context parallelism: the MoE losses are Megatron's over whole sequences
# (counts summed over the CP ranks), their gradient averaged over DP x CP
# as Megatron's: CP 2 trains as one rank with the MoE coefficients halved,
# and logs twice that rank's MoE losses -- for aux_loss, seq_aux_loss
# and global_aux_loss, each with the z-loss.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"
. "$(dirname "$0")/train-moe-lib.sh"

plan 42
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

# global_aux_loss
# both NAME RANKS FLAGS...: check, then the MoE losses against $ref's
both() {
    check "$@"
    if same_moe "$tmp/$ref.jsonl" "$tmp/$1.jsonl"; then
        pass "$1: MoE losses within $tol of $ref"
    else
        fail "$1: MoE losses differ from $ref"
    fi
}
base="$tiny $mixtral --moe-router-load-balancing-type global_aux_loss"
run global-ref 1 || bail_out "the single-rank global_aux_loss run failed"
ref=global-ref
both global-tp2 2 --tensor-model-parallel-size 2
both global-tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
both global-pp2 2 --pipeline-model-parallel-size 2
both global-rc-full 1 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 2
run global-mb4 1 --micro-batch-size 4 --moe-aux-loss-coeff 0.005 ||
    bail_out "the single-rank global_aux_loss run of micro-batch 4 failed"
ref=global-mb4
both global-dp2 2
both global-dp2-distopt 2 --use-distributed-optimizer
run aux-mb8 1 --micro-batch-size 8 --moe-router-load-balancing-type aux_loss ||
    bail_out "the single-rank aux_loss run of micro-batch 8 failed"
ref=aux-mb8
both global-mb8 1 --micro-batch-size 8
if same_moe "$tmp/mixtral-ref.jsonl" "$tmp/global-ref.jsonl"; then
    fail "global_aux_loss over 4 micro-batches gives aux_loss's MoE losses"
else
    pass "global_aux_loss over 4 micro-batches: MoE losses other than aux_loss's"
fi

# context parallelism
# twice REF GOT: GOT's MoE losses are twice REF's, within $tol
twice() {
    awk -v t="$tol" '
    function val(line, key,   s) {
        if (!match(line, "\"" key "\": [^,}]*")) return "none"
        s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    function far(a, b,   d) { if (a == "none" || b == "none" || b + 0 == 0) return 1
                             d = (a / 2 - b) / b; return d < 0 ? -d >= t : d >= t }
    /"valid_loss"/ { next }
    FNR == NR { ra[FNR] = val($0, "moe_aux_loss"); rz[FNR] = val($0, "moe_z_loss"); n = FNR; next }
    { m = FNR; if (far(val($0, "moe_aux_loss"), ra[FNR]) || far(val($0, "moe_z_loss"), rz[FNR])) bad = 1 }
    END { exit bad || m != n || n == 0 }' "$1" "$2"
}
for lb in aux_loss seq_aux_loss global_aux_loss; do
    base="$tiny $mixtral --moe-router-load-balancing-type $lb"
    ref=cp-$lb-ref
    run "$ref" 1 --moe-aux-loss-coeff 0.005 --moe-z-loss-coeff 0.0005 ||
        bail_out "the single-rank $lb run with halved coefficients failed"
    check "cp2-$lb" 2 --context-parallel-size 2 --moe-z-loss-coeff 0.001
    if twice "$tmp/$ref.jsonl" "$tmp/cp2-$lb.jsonl"; then
        pass "cp2-$lb: MoE losses twice $ref's within $tol"
    else
        fail "cp2-$lb: MoE losses not twice $ref's"
    fi
done
}
done_testing
