#!/bin/sh
# Call A on 2 linked H200s (issue 19, run 1): DP scaling 1 -> 2 GPUs at the
# 1.5B shape beside the peer, with 1 and 8 micro-batches per step.
set -u
cd "$(dirname "$0")"
out=$1
. .gpukit/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi topo -m | head -4
sh benchmarks/gpu-session.sh . "$out" check perf 2>&1 | tee "$out/session.txt" | grep -v "^gemm" | tail -30
. ./common.sh
run 1 accum1-8 $shape15 $opt --micro-batch-size 2 --global-batch-size 16 --train-iters 6 --log-interval 1
run 2 accum2-8 $shape15 $opt --micro-batch-size 2 --global-batch-size 32 --use-distributed-optimizer \
    --overlap-grad-reduce --overlap-param-gather --train-iters 6 --log-interval 1
