#!/bin/sh
# Device call 1 of session 12 (2026-11-25): the block-piece ops of
# --fp8-param-gather under blockwise scaling (t/ops-cuda.t quick, against
# the CPU), then t/train-cuda.t.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p $out
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 240 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
grep 'block pieces' "$out/ops.txt"
timeout 400 t/train-cuda.t > "$out/train-cuda.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/train-cuda.txt") ok, $(grep -c '^not ok' "$out/train-cuda.txt") not ok $(el)"
grep -A3 '^not ok' "$out/train-cuda.txt" | head -20
cd $out && tar czf "$OUTD/logs.tgz" *
