#!/bin/sh
# Device call 2 of session 12 (2026-11-25): blockwise FP8 experts on
# CUDA.  t/train-cuda.t (its new case: the MoE form in blockwise FP8
# against the CPU's emulation), ops-cuda quick, then issue 13's 8-expert
# shape in bf16, FP8 delayed and FP8 blockwise.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p $out
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 420 t/train-cuda.t > "$out/train-cuda.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/train-cuda.txt") ok, $(grep -c '^not ok' "$out/train-cuda.txt") not ok $(el)"
grep -A3 '^not ok' "$out/train-cuda.txt" | head -20
grep 'MoE (4 experts) FP8' "$out/train-cuda.txt"
GL_OPS_CUDA_QUICK=1 timeout 120 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
new=src/tools/gridlm-train
run $new moeA 16 1 $moeA
run $new moeA-D 16 1 $moeA $D
run $new moeA-B 16 1 $moeA $B
cd $out && tar czf "$OUTD/logs.tgz" *
