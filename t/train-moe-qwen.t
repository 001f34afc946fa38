#!/bin/sh
# train-moe-qwen: t/train-moe.t's layouts for two more MoE models:
#   qwen:    pre-softmax top 2 of 6 (weights not renormalised, as
#            Qwen3-MoE with norm_topk_prob false), a dense first layer
#            (--moe-layer-freq), a shared expert, seq_aux_loss and z-loss;
#   sigmoid: sigmoid scores with the expert bias (its update after each
#            step) and a top-k scaling factor.
# Each under TP 2, TP 2 + SP, PP 2, DP 2 and DP 2 with the distributed
# optimizer must give the single-rank run's loss, grad norm, validation
# losses and MoE losses within 1e-5 relative; the sigmoid model also
# with the gradients reduced and the weights gathered bucket by bucket.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"
. "$(dirname "$0")/train-moe-lib.sh"

plan 21
# shellcheck disable=SC2086
{
base="$tiny $qwen"
run qwen-ref 1 || bail_out "the single-rank qwen run failed"
layouts qwen

base="$tiny $sigmoid"
run sigmoid-ref 1 || bail_out "the single-rank sigmoid run failed"
layouts sigmoid
# the expert bias's update with the weights gathered bucket by bucket
check sigmoid-dp2-overlap 2 --use-distributed-optimizer --overlap-grad-reduce \
    --ddp-bucket-size 2000 --overlap-param-gather
}
done_testing
