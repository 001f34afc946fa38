#!/bin/sh
# Issue 19 on two linked H200s, session 16, call F: what holds DP=2 at
# one micro-batch a step to about 90% of one GPU (the 1.5B shape, the
# distributed optimizer with both overlaps): the NCCL kernels' CTA count
# (NCCL_MAX_CTAS, SMs the products lose while a bucket moves) and the
# bucket size (--ddp-bucket-size: the tail after the backward's last
# product), each beside the default in the same call.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=2
bin=src/tools/gridlm-train
dist="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
dp="$s15 --micro-batch-size 2 --global-batch-size 4 $dist"
MRUN_TIMEOUT=40 mrun s15-dp1 1 12 $s15 --micro-batch-size 2 --global-batch-size 2
MRUN_TIMEOUT=40 mrun dp2 2 12 $dp
export NCCL_MAX_CTAS=4; MRUN_TIMEOUT=40 mrun dp2-cta4 2 12 $dp
export NCCL_MAX_CTAS=8; MRUN_TIMEOUT=40 mrun dp2-cta8 2 12 $dp
unset NCCL_MAX_CTAS
MRUN_TIMEOUT=40 mrun dp2-b10m 2 12 $dp --ddp-bucket-size 10000000
MRUN_TIMEOUT=40 mrun dp2-b160m 2 12 $dp --ddp-bucket-size 160000000
MRUN_TIMEOUT=40 mrun dp2-again 2 12 $dp
grep -h "NCCL INFO.*CTA\|buckets" "$out"/dp2.log | head -3
cd "$out" && tar czf "$OUTD/logs.tgz" *
